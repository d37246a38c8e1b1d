"""The untrained real model on the cooperative writing task, on TRAINING texts only (issue 40, the writing task).

One sampled evaluation, as `learning_real.py magrpo --task writing` measures its arms (T = 0.7, 8 joint actions per
text), of SmolLM2-135M-Instruct without training: the team (agent 0 the short summary, agent 1 the detailed one)
and, with `--central`, the single policy that writes both in tags. Prints the team reward, each term, ROUGE-L and
the success rate, and a few answers. It reads training texts only: nothing of the task (prompts, sizes, the success
threshold) is chosen on held-out texts.

    OMP_NUM_THREADS=1 python benchmarks/learning/writing_untrained.py --rows 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4, help="training texts (each sampled 8 times)")
    parser.add_argument("--central", action="store_true", help="the single policy instead of the team")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import learning_real as bench

    from trl_marl.scripts.demo_real import sampled_team_success
    from trl_marl.team import AgentTeam

    task = bench.writing_task()
    rows = task.eval_rows("train", args.rows)
    team = AgentTeam.build(bench.MODEL, 1 if args.central else 2, mode="shared")
    env = task.env(args.central)
    sizes = task.sizes or {}
    length = sizes["central_completion"] if args.central else sizes["completion"]
    result = sampled_team_success(env, task.success(env), team, rows, 10_000 + args.seed, length,
                                  sizes["temperature"])
    completions = result.pop("completions")
    result["metrics"] = bench.joint_action_means(task.metrics(env), completions, rows)
    result["sources"] = [r["source"] for r in rows]
    print(json.dumps(result, indent=1))
    for i in range(0, len(completions[0]), 1 if args.central else 8):
        print("---", rows[i // 8]["source"], i)
        for agent in completions:
            print(repr(agent[i][:400]))
    return result


if __name__ == "__main__":
    main()
