"""The default `trl-marl demo` over seeds 0-9: do its claims hold on every seed, at the end of training?

Per seed it records MAGRPO's team success at the end (the final evaluation and the mean team reward of the last 10
logged steps, never the peak), the train-alone baseline, the debate's majority-vote accuracy per turn before and after
MAPoRL training, and the demo's wall time. Targets (issue 9):

1. MAGRPO final evaluation >= 0.95 and last-10-step mean >= 0.95, on 10 of 10 seeds;
2. after MAPoRL training, last-turn accuracy >= turn-1 accuracy + 0.02 on >= 8 of 10 seeds, while before training the
   last turn is <= turn 1;
3. each run under 180 s on 2 cores with cached toy models.

Run alone on the machine (see DESIGN.md, "CPU timing pitfall"), once with the toy models already cached:

    PYTHONPATH=src python benchmarks/speed/bench_demo.py --json /tmp/bench_demo.json

Like `trl-marl demo`, it restarts itself with the demo's CPU-kernel pins
(`trl_marl.scripts.numerics.NUMERICS_PINS`), so its digits are the ones the demo prints. The JSON names the commit
read at the start (a tree with uncommitted changes is refused unless `--allow-dirty`) and the machine
(`benchmarks/provenance.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.provenance`
from benchmarks.provenance import git_state, machine_info, require_clean  # noqa: E402

from trl_marl.scripts.demo import DemoConfig, run_demo  # noqa: E402
from trl_marl.scripts.numerics import restart_with_pinned_numerics  # noqa: E402


def seed_row(seed: int, preset: str) -> dict[str, Any]:
    """One demo run, reduced to the numbers the targets read."""
    out = tempfile.mkdtemp(prefix=f"demo-seed{seed}-")
    start = time.perf_counter()
    result = run_demo(DemoConfig(preset=preset, seed=seed, output_dir=out, show_progress=False))
    m, d = result["magrpo"], result["maporl"]
    before, after = d["before"]["majority_accuracy"], d["after"]["majority_accuracy"]
    return {
        "seed": seed,
        "seconds": time.perf_counter() - start,
        "magrpo_final_eval": m["magrpo_success_after"],
        "magrpo_last10": m["magrpo_last10_reward"],
        "alone_final_eval": m["alone_success_after"],
        "debate_before": before,
        "debate_after": after,
        "magrpo_ok": m["magrpo_success_after"] >= 0.95 and m["magrpo_last10_reward"] >= 0.95,
        "after_rises": after[-1] >= after[0] + 0.02,
        "before_flat_or_falls": before[-1] <= before[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(10)))
    parser.add_argument("--preset", default="default", choices=["quick", "default", "full"])
    parser.add_argument("--json", default=None, help="Where to write the per-seed results.")
    parser.add_argument("--allow-dirty", action="store_true",
                        help="Run on a tree with uncommitted changes (the record says \"dirty\": true).")
    args = parser.parse_args()
    git = git_state()
    require_clean(git, args.allow_dirty)
    restart_with_pinned_numerics(programs=None)
    rows = []
    for seed in args.seeds:
        rows.append(seed_row(seed, args.preset))
        print(json.dumps(rows[-1]), flush=True)
    print("| seed | s | MAGRPO final eval | MAGRPO last 10 steps | alone | debate before (t1/t2/t3) | "
          "debate after (t1/t2/t3) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        before = "/".join(f"{v:.3f}" for v in r["debate_before"])
        after = "/".join(f"{v:.3f}" for v in r["debate_after"])
        print(f"| {r['seed']} | {r['seconds']:.0f} | {r['magrpo_final_eval']:.3f} | {r['magrpo_last10']:.3f} | "
              f"{r['alone_final_eval']:.3f} | {before} | {after} |")
    summary = {key: sum(bool(r[key]) for r in rows) for key in ("magrpo_ok", "after_rises", "before_flat_or_falls")}
    summary["max_seconds"] = max(r["seconds"] for r in rows)
    print(f"summary over {len(rows)} seeds: {summary}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": "python " + " ".join(sys.argv), "commit": git["commit"], "dirty": git["dirty"],
                       "dirty_paths": git["dirty_paths"], "machine": machine_info(), "rows": rows,
                       "summary": summary}, f, indent=2)


if __name__ == "__main__":
    main()
