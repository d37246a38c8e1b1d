"""Five seeds of the default `trl-marl demo`: do its two claims hold?

1. MAGRPO's final team success beats the train-alone baseline (target: on at least 4 of 5 seeds).
2. The MAPoRL-trained debate team's majority-vote accuracy rises from turn 1 to turn 3 (target: 4 of 5 seeds).

Run alone on the machine (see DESIGN.md, "CPU timing pitfall"):

    PYTHONPATH=src python benchmarks/bench_demo.py --seeds 0 1 2 3 4 --json /tmp/bench_demo.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from trl_marl.demo import DemoConfig, run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--preset", default="default", choices=["quick", "default", "full"])
    parser.add_argument("--json", default=None, help="Where to write the per-seed results.")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        out = tempfile.mkdtemp(prefix=f"demo-seed{seed}-")
        start = time.perf_counter()
        result = run_demo(DemoConfig(preset=args.preset, seed=seed, output_dir=out, show_progress=False))
        m, d = result["magrpo"], result["maporl"]
        rows.append({
            "seed": seed,
            "seconds": time.perf_counter() - start,
            "magrpo_after": m["magrpo_success_after"],
            "alone_after": m["alone_success_after"],
            "magrpo_beats_alone": m["magrpo_success_after"] > m["alone_success_after"],
            "debate_before": d["before"]["majority_accuracy"],
            "debate_after": d["after"]["majority_accuracy"],
            "after_rises_turn1_to_turn3": d["after"]["majority_accuracy"][-1] > d["after"]["majority_accuracy"][0],
            "after_beats_before_at_turn3": d["after"]["majority_accuracy"][-1] > d["before"]["majority_accuracy"][-1],
        })
    print("| seed | s | MAGRPO | alone | debate before (t1/t2/t3) | debate after (t1/t2/t3) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        before = "/".join(f"{v:.3f}" for v in r["debate_before"])
        after = "/".join(f"{v:.3f}" for v in r["debate_after"])
        print(f"| {r['seed']} | {r['seconds']:.0f} | {r['magrpo_after']:.3f} | {r['alone_after']:.3f} | {before} | "
              f"{after} |")
    summary = {key: sum(r[key] for r in rows) for key in
               ("magrpo_beats_alone", "after_rises_turn1_to_turn3", "after_beats_before_at_turn3")}
    print(f"summary over {len(rows)} seeds: {summary}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": summary, "cpu_count": os.cpu_count()}, f, indent=2)


if __name__ == "__main__":
    main()
