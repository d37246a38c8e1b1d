"""`trl-marl teamwork --team PATH --task NAME`: a saved team and its ablations on a task's held-out rows.

The team is loaded with `AgentTeam.from_pretrained`; the task's environment, team reward and rows are those of
`trl-marl magrpo --task NAME` (the toy prompts for a toy team, told by its character vocabulary), the rows from the
held-out split of the task's shipped data. [`trl_marl.teamwork.evaluate_teamwork`] plays every condition (the team,
each agent with a blank partner, each agent with an untrained partner, roles swapped) and the command prints the
table, then writes `teamwork.json` and `teamwork.png` into `--output-dir`:

```
trl-marl teamwork --team out/final --task coding --samples-per-row 8 --output-dir out/teamwork
condition             score  team - this  main_calls_helper  ...
-------------------  ------  -----------  -----------------
team                  2.310                           0.125
blank_partner_0       1.020       +1.290              0.000
...
```

Tasks and their rows: `target_sum` (targets `--targets`, default 10), `coding` (`trl-marl/team_coding`'s held-out
problems, or `--data-files` in HumanEval's schema), `writing` (`trl-marl/team_writing`'s held-out texts, or
`--data-files` in TL;DR's schema). Their metrics: the terms of the task's team reward (coding, writing), and for
coding whether the main function calls the helper; for target_sum whether every agent wrote one integer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

DESCRIPTION = ("Score a saved team and its ablations (blank partner, untrained partner, roles swapped) on a task's "
               "held-out rows: a table, JSON and a plot.")
"""What `trl-marl teamwork` does, in one line (its help)."""

TEAMWORK_TASKS = ("target_sum", "coding", "writing")
"""The tasks `trl-marl teamwork --task` knows (the environments and rewards of `trl-marl magrpo`)."""

TOY_VOCABULARY = 1000
"""A team whose tokenizer has fewer tokens is a toy team (`trl_marl.toy`'s characters): it gets the toy prompts."""


def add_teamwork_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `trl-marl teamwork`."""
    parser.add_argument("--team", required=True, metavar="PATH",
                        help="A folder saved by a trainer or `AgentTeam.save_pretrained` (it holds team_config.json).")
    parser.add_argument("--task", required=True, choices=TEAMWORK_TASKS, help="The task the team was trained on.")
    parser.add_argument("--untrained", default=None, metavar="PATH",
                        help="The team before training (a saved folder), for the untrained-partner conditions. "
                             "Default: for a LoRA team, the same base with the adapters off.")
    parser.add_argument("--split", default="heldout", choices=("heldout", "train"),
                        help="Which rows of the task's shipped data (default heldout).")
    parser.add_argument("--data-files", default=None, metavar="FILE",
                        help="Evaluate on a local .jsonl/.json/.csv/.parquet file instead (coding: HumanEval's "
                             "columns; writing: text and reference).")
    parser.add_argument("--targets", default="10", metavar="LIST",
                        help="target_sum: the targets, comma-separated (default 10).")
    parser.add_argument("--rows", type=int, default=16, metavar="N", help="At most N rows (default 16).")
    parser.add_argument("--samples-per-row", type=int, default=8, metavar="N", help="Episodes per row (default 8).")
    parser.add_argument("--num-turns", type=int, default=1, metavar="N", help="Turns of the episode (default 1).")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help="Tokens per answer (default: 16 for a toy team, else 128).")
    parser.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (0: greedy).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sampling (the same for every condition).")
    parser.add_argument("--conditions", default=None, metavar="LIST",
                        help="Only these conditions, comma-separated (default: every one that applies).")
    parser.add_argument("--output-dir", default="teamwork", metavar="DIR",
                        help="Where teamwork.json and teamwork.png go (default ./teamwork).")
    parser.add_argument("--no-plot", action="store_true", help="Write no plot.")


def _fail(message: str) -> int:
    print(f"trl-marl teamwork: {message}", file=sys.stderr)
    return 2


def teamwork_command(args: argparse.Namespace) -> int:
    """Run `trl-marl teamwork` (parsed `args`): print the table, write the JSON and the plot; 2 on a usage error."""
    for option, path in (("--team", args.team), ("--untrained", args.untrained)):
        if path is not None and not os.path.isfile(os.path.join(path, "team_config.json")):
            return _fail(f"{option} {path!r} holds no team_config.json: pass a folder saved by a trainer "
                         "(OUTPUT_DIR/final, OUTPUT_DIR/checkpoint-N) or by `AgentTeam.save_pretrained`.")
    if args.rows < 1 or args.samples_per_row < 1 or args.num_turns < 1:
        return _fail("--rows, --samples-per-row and --num-turns must be at least 1.")
    if args.data_files is not None and args.task == "target_sum":
        return _fail("--data-files: target_sum makes its own rows from --targets; leave --data-files out.")
    from .progress import quiet_logs

    quiet_logs()
    from ..team import AgentTeam
    from ..teamwork import evaluate_teamwork

    team = AgentTeam.from_pretrained(args.team, is_trainable=False)
    untrained = None if args.untrained is None else AgentTeam.from_pretrained(args.untrained, is_trainable=False)
    toy = len(team.tokenizers[0]) < TOY_VOCABULARY
    try:
        env, reward, rows, metrics = build_teamwork_task(args, toy)
        report = evaluate_teamwork(
            team, env, rows, reward, untrained=untrained, metrics=metrics,
            conditions=args.conditions.split(",") if args.conditions else None,
            samples_per_row=args.samples_per_row, seed=args.seed, temperature=args.temperature,
            max_new_tokens=args.max_new_tokens or (16 if toy else 128))
    except ValueError as error:
        return _fail(str(error))
    print(report.table())
    for note in report.notes:
        print(f"note: {note}")
    os.makedirs(args.output_dir, exist_ok=True)
    written = [report.save_json(os.path.join(args.output_dir, "teamwork.json"), completions=True)]
    if not args.no_plot:
        written.append(report.plot(os.path.join(args.output_dir, "teamwork.png"),
                                   title=f"{args.task}: {os.path.basename(os.path.normpath(args.team))}"))
    print("wrote " + ", ".join(written))
    return 0


def build_teamwork_task(args: argparse.Namespace, toy: bool) -> tuple[Any, Any, list[dict[str, Any]],
                                                                       dict[str, Callable[..., Any]]]:
    """The environment, team reward, rows and metrics of `args.task` (`toy`: the toy prompts and rows)."""
    if args.task == "target_sum":
        from ..envs import TargetSumEnv
        from ..rewards.arithmetic import TargetSumReward

        try:
            targets = [int(t) for t in args.targets.split(",")]
        except ValueError:
            raise ValueError(f"--targets {args.targets!r}: give whole numbers, comma-separated (e.g. 10,7).") from None
        rows = [{"target": t} for t in targets][: args.rows]
        return TargetSumEnv(2, args.num_turns), TargetSumReward(), rows, {"valid": every_answer_an_integer}
    if args.task == "coding":
        from ..envs.coding import CooperativeCodingEnv
        from ..rewards.coding import CodingTeamReward
        from ..toy.rows import TOY_CODING_PROMPTS

        env = CooperativeCodingEnv(num_turns=args.num_turns, **(TOY_CODING_PROMPTS if toy else {}))
        reward = CodingTeamReward(env=env)
        metrics: dict[str, Callable[..., Any]] = {"main_calls_helper": MainCallsHelper(env), **_terms(reward)}
        return env, reward, _rows(args, toy), metrics
    from ..envs.writing import CooperativeWritingEnv
    from ..rewards.writing import WritingTeamReward
    from ..toy.rows import TOY_WRITING_PROMPTS

    rows = _rows(args, toy)
    writing_env = CooperativeWritingEnv(num_turns=args.num_turns, **(TOY_WRITING_PROMPTS if toy else {}))
    writing_reward = WritingTeamReward(reference_column="reference" if "reference" in rows[0] else None)
    return writing_env, writing_reward, rows, _terms(writing_reward)


def _rows(args: argparse.Namespace, toy: bool) -> list[dict[str, Any]]:
    """The coding or writing rows: a local file, the toy rows for a toy team, else the shipped split."""
    coding = args.task == "coding"
    if args.data_files is not None:
        from ..data import load_humaneval, load_tldr

        dataset = load_humaneval(data_files=args.data_files) if coding else load_tldr(data_files=args.data_files)
        rows = list(dataset)
    elif toy:
        from ..toy.rows import toy_coding_rows, toy_writing_rows

        rows = list((toy_coding_rows if coding else toy_writing_rows)(args.rows))
    elif coding:
        from ..data.team_coding import team_coding_rows

        rows = team_coding_rows(args.split)
    else:
        from ..data.team_writing import team_writing_rows

        rows = team_writing_rows(args.split)
    return rows[: args.rows]


def _terms(reward: Any) -> dict[str, Callable[..., Any]]:
    """Each term of a composite team reward (`reward.reward_funcs()`) by its name."""
    funcs = reward.reward_funcs() if hasattr(reward, "reward_funcs") else []
    return {getattr(f, "name", "") or getattr(f, "__name__", type(f).__name__): f for f in funcs}


def every_answer_an_integer(prompts: list[Any], completions: list[Any], agent_completions: list[list[Any]],
                            **kwargs: Any) -> list[float]:
    """1 when every agent wrote exactly one integer (target_sum's valid answer), else 0."""
    from ..rewards.arithmetic import parse_int

    return [float(all(parse_int(answer) is not None for answer in joint)) for joint in zip(*agent_completions)]


class MainCallsHelper:
    """1 when the main function refers to the helper (and does not rebind its name), else 0: how often the main agent
    uses its partner's function, whatever the tests say (`CodingSolution.helper_used`).

    Args:
        env: The coding environment (`CooperativeCodingEnv`) whose answers are read.
    """

    reward_kind = "team"
    name = "main_calls_helper"

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        from ..rewards.coding import coding_batch

        batch = coding_batch(self.env, completions, kwargs, self.name)
        return [float(solution.helper_used) for solution in batch.solutions]
