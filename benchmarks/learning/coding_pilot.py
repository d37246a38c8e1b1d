"""Pilot rates of the cooperative coding designs on TRAINING rows only (issue 55, item 3), measured before any seed:
the untrained SmolLM2-135M team of `learning_real.py`'s task, sampled as its evaluation samples (8 joint actions per
row, T = 0.7, stop at the closing fence). Held-out rows are never sampled here. The gates, fixed before the pilots
(the teamwork analysis notes, section 3):

- `--task coding_division` (roles the agents choose): both agents write the same function with probability
  b >= 0.6;
- `--task coding_private` (a rule only the helper reads): the helper right with a reference main in 0.2 to 0.6 of
  answers, the main right with a reference helper in 0.1 to 0.3;
- both: the untrained success leaves room to learn (< 0.3).

    python benchmarks/learning/coding_pilot.py --task coding_private --rows 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--task", default="coding_division", choices=("coding_division", "coding_private"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=None, help="default benchmarks/results/pilot_<task>.json")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    import learning_real as lr
    from benchmarks.provenance import git_state, machine_info

    task = lr.TASKS[args.task]()
    sizes = {**lr.SIZES["magrpo"], **(task.sizes or {})}
    rows = task.eval_rows("train", args.rows)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        trainer = lr.build_magrpo(task, "team", args.seed, 1, sizes, os.path.join(work, "pilot"), lr.MODEL)
        result = lr.evaluate_task(task, trainer.team, False, rows, 20_000 + args.seed, sizes["completion"])
    seconds = time.perf_counter() - start
    m = result["metrics"]
    same = m.get("collision")
    record = {
        "command": "python " + " ".join(sys.argv), "git": git_state(), "machine": machine_info(),
        "rows": len(rows), "joint_actions": result["joint_actions"], "seconds": round(seconds, 1),
        "success": result["success"], "team_reward": result["reward"], "metrics": m,
        "gates": ({"b_same_function": same, "b_gate": ">= 0.6"} if same is not None else
                  {"helper_right": m.get("helper_with_reference_main"), "helper_gate": "0.2 to 0.6",
                   "main_right": m.get("main_with_reference_helper"), "main_gate": "0.1 to 0.3"})
        | {"untrained_success": result["success"], "success_gate": "< 0.3"},
    }
    Path(args.output or f"benchmarks/results/pilot_{args.task}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("success", "team_reward", "metrics", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
