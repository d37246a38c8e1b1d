"""Pilot rates of the symmetric writing task on TRAINING texts only (issue 55, item 3; design b1 of
notes/teamwork-analysis.md).

`SymmetricWritingEnv` gives both writers the same instruction ("one of you writes a one-sentence summary of at most 15
words, the other a detailed paragraph of 30 to 60 words; you are writer 1/2"), and `SymmetricWritingTeamReward`
scores the shorter text as the summary and the longer as the paragraph, with nothing on the structure terms when both
texts fall in the same length class. The design needs the untrained writers to collide often (both pick the same
class with probability b >= 0.65), so that agents trained alone against the same frozen partner collide too. This
samples the untrained SmolLM2-135M-Instruct team as `learning_real.py magrpo --task writing` does (chat prompts,
T = 0.7, 96 new tokens, 8 joint actions per text, one torch thread) on training texts (`writing_task().eval_rows
("train", rows)`: spread over the training modules, never held-out) and records b, the success rate (team reward >=
3.0 of 4.0, `WRITING_SUCCESS`), the team reward and its terms, the source gate, each writer's class rates and word
counts. Nothing here is chosen on held-out texts.

    nice -n 5 python benchmarks/learning/writing_symmetric_pilot.py --rows 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "pilot_writing_symmetric.json"
B_GATE = 0.65
"""The pilot gate of design b1: both writers in the same length class with probability b >= 0.65."""


def per_joint_action(func: Any, completions: list[list[str]], rows: list[dict[str, Any]]) -> list[float | None]:
    """`func` (reward signature) on every sampled joint action (`completions[agent][row * G + g]`)."""
    per_row = len(completions[0]) // len(rows)
    columns = {key: [rows[i // per_row][key] for i in range(len(completions[0]))] for key in rows[0]}
    return list(func(prompts=[None] * len(completions[0]), completions=list(completions[0]),
                     agent_completions=[list(a) for a in completions], **columns))


def rates(completions: list[list[str]], rows: list[dict[str, Any]], success_at: float) -> dict[str, Any]:
    """Everything the pilot reports about sampled joint actions under the current `SymmetricWritingTeamReward`:
    the gate (b), the untrained success and team reward, each writer's class rates and word counts, the terms."""
    from trl_marl.rewards.writing_variants import SymmetricWritingTeamReward, length_class_metrics
    from trl_marl.utils.text import words

    reward = SymmetricWritingTeamReward()
    named = {"team_reward": reward, **dict(zip(reward.names, reward.funcs)), "source_gate": reward.gate,
             **length_class_metrics()}
    values = {name: per_joint_action(func, completions, rows) for name, func in named.items()}
    means = {name: statistics.mean(v for v in vals if v is not None) for name, vals in values.items()}
    b = means["same_length_class"]
    counts = [[len(words(text)) for text in agent] for agent in completions]
    per_row = len(counts[0]) // len(rows)
    success = [float(v is not None and v >= success_at) for v in values["team_reward"]]
    # the design's own success: the writers split the roles and both lengths and their ratio are right
    split_in_band = [float(same == 0.0 and lr == 1.0 and ratio == 1.0) for same, lr, ratio in
                     zip(values["same_length_class"], values["length_range"], values["length_ratio"])]
    both_long = statistics.mean(float(c0 > reward.short_max and c1 > reward.short_max) for c0, c1 in zip(*counts))
    return {
        "gate": {"b": b, "b_min": B_GATE, "passes": b >= B_GATE},
        "untrained": {"success": statistics.mean(success), "team_reward": means["team_reward"],
                      "success_per_row": [round(statistics.mean(success[i:i + per_row]), 3)
                                          for i in range(0, len(success), per_row)],
                      "split_and_in_band": statistics.mean(split_in_band), "both_long": both_long,
                      "both_short": b - both_long},
        "class_rates": {"agent_0_short": means["agent_0_short"], "agent_1_short": means["agent_1_short"]},
        "metrics": means,
        "words": {f"agent_{a}": {"mean": statistics.mean(c), "median": statistics.median(c), "min": min(c),
                                 "max": max(c)} for a, c in enumerate(counts)},
    }


def rescore(path: str, argv: list[str]) -> dict[str, Any]:
    """Score a pilot record's stored texts again with the current reward, without sampling: the result goes under
    `"rescored"` (with the commit and command), the sampled record stays as it was."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import learning_real as bench
    from benchmarks.provenance import git_state

    from trl_marl.data.team_writing import team_writing_rows

    record = json.loads(Path(path).read_text())
    by_source = {r["source"]: r for r in team_writing_rows("train")}
    rows = [by_source[name] for name in record["sources"]]  # training rows only: a held-out source fails here
    completions = [record["completions"]["agent_0"], record["completions"]["agent_1"]]
    record["rescored"] = {
        "command": "python benchmarks/learning/writing_symmetric_pilot.py " + " ".join(argv), **git_state(),
        "why": "the texts sampled at `commit`, scored with the reward of this commit",
        **rates(completions, rows, bench.WRITING_SUCCESS),
    }
    Path(path).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record["rescored"][k] for k in ("gate", "untrained", "class_rates")}, indent=1))
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="training texts (each sampled 8 times)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--rescore", metavar="PATH", help="score a record's stored texts again; no sampling")
    args = parser.parse_args(argv)
    argv = list(argv if argv is not None else sys.argv[1:])
    if args.rescore:
        return rescore(args.rescore, argv)
    start = time.perf_counter()
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import learning_real as bench
    from benchmarks.provenance import git_state, machine_info

    from trl_marl.envs.writing import SymmetricWritingEnv, writing_text
    from trl_marl.rewards.writing_variants import SymmetricWritingTeamReward
    from trl_marl.scripts.demo_real import sampled_team_success
    from trl_marl.team import AgentTeam

    state = git_state()
    task = bench.writing_task()
    rows = task.eval_rows("train", args.rows)
    sizes = task.sizes or {}
    env = SymmetricWritingEnv(chat=True)
    team = AgentTeam.build(bench.MODEL, 2, mode="shared")
    loaded = time.perf_counter()
    result = sampled_team_success(env, bench.AtLeast(SymmetricWritingTeamReward(), bench.WRITING_SUCCESS), team, rows,
                                  10_000 + args.seed, sizes["completion"], sizes["temperature"])
    sampled = time.perf_counter()
    completions = [[writing_text(c) for c in agent] for agent in result.pop("completions")]
    record = {
        "benchmark": "writing_symmetric_pilot",
        "command": "nice -n 5 python benchmarks/learning/writing_symmetric_pilot.py " + " ".join(argv),
        **state,
        "machine": machine_info(),
        "model": bench.MODEL,
        "settings": {"split": "train", "rows": len(rows), "samples_per_row": 8,
                     "joint_actions": len(completions[0]), "max_new_tokens": sizes["completion"],
                     "temperature": sizes["temperature"], "seed": 10_000 + args.seed, "torch_threads": 1,
                     "success": f"team reward >= {bench.WRITING_SUCCESS} of 4.0"},
        **rates(completions, rows, bench.WRITING_SUCCESS),
        "sources": [r["source"] for r in rows],
        "completions": {"note": "every joint action's texts as the rewards read them (writing_text), "
                                "[agent][row * 8 + g], to rescore with another reward (--rescore)",
                        "agent_0": completions[0], "agent_1": completions[1]},
        "seconds": {"load": loaded - start, "sampling": sampled - loaded, "total": time.perf_counter() - start},
    }
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: record[k] for k in ("gate", "untrained", "class_rates", "words", "seconds")}, indent=1))
    return record


if __name__ == "__main__":
    main()
