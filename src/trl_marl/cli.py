"""The `trl-marl` command.

- `trl-marl demo [--quick|--full] [--seed N] [--output-dir DIR]`: the offline toy world (see `trl_marl.scripts.demo`).
- `trl-marl magrpo --config FILE [overrides]`: MAGRPO on a built-in task (see `trl_marl.scripts.magrpo`).
- `trl-marl maporl {gsm8k,anli} --config FILE [overrides]`: MAPoRL's debate (see `trl_marl.scripts.maporl`).
- `trl-marl serve-verifier --model PATH [--port N]`: an HTTP verifier server (see `trl_marl.scripts.serve_verifier`).
- `trl-marl vllm-serve --model PATH [--max-loras N] [--max-lora-rank R] [--host H] [--port N] [vLLM options]`: a vLLM
  server for `generation_backend="vllm", vllm_mode="server"` (see `trl_marl.team.generation.vllm_server`).

The command line is parsed before anything heavy is imported: `--help` of the command and of every subcommand
answers without loading torch, transformers or TRL. `magrpo` and `maporl` take every field of their configs
(hundreds, through TRL's `TrlParser`); their `--help` lists the options a user sets first, `--help-all` all of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

MODEL_HELP = ("Hub id or local folder of the model. Offline names (nothing downloaded): `toy`, a tiny model from "
              "trl_marl.toy for smoke runs (`toy:debate` for maporl, its default), and `smollm2-135m-instruct`, the "
              "real 135M-parameter SmolLM2 chat model.")
"""Help of `--model_name_or_path` in every subcommand (the short lists below and the full `--help-all`)."""

_COMMON_FIRST = [
    ("Model", [
        ("--model_name_or_path NAME", MODEL_HELP),
        ("--use_peft BOOL", "Train one LoRA adapter per agent on one base model (with --lora_r, --lora_alpha, "
                            "--lora_target_modules)."),
        ("--load_in_4bit BOOL", "QLoRA: a 4-bit base model (needs the `qlora` extra: "
                                'pip install "trl-marl[qlora]").'),
        ("--dtype DTYPE", "Weights' dtype: auto, bfloat16, float16 or float32."),
    ]),
]
_COMMON_LAST = [
    ("Saving and logging", [
        ("--output_dir DIR", "Where the team (agent_*/ folders, team_config.json, README.md) is saved."),
        ("--logging_steps N", "Log every N steps."),
        ("--report_to LIST", "Where metrics go: none, tensorboard, wandb, ..."),
        ("--save_strategy S", "Checkpoints: no, steps or epoch (with --save_steps)."),
        ("--seed N", "Random seed."),
        ("--cpu_threads N", "Torch threads on CPU (default: chosen for the model's size; OMP_NUM_THREADS wins)."),
    ]),
]
SHORT_OPTIONS: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {
    "magrpo": [
        ("Task", [
            ("--task NAME", "writing, coding or target_sum."),
            ("--centralized BOOL", "Train one policy that writes every agent's part (the baseline of a team)."),
            ("--max_train_samples N", "Keep at most N training rows."),
        ]),
        *_COMMON_FIRST,
        ("Training", [
            ("--num_agents N", "Agents in the team."),
            ("--num_turns N", "Turns of the episode (each agent answers once per turn)."),
            ("--num_generations G", "Joint actions sampled per prompt (the group of the advantage)."),
            ("--per_device_train_batch_size B", "Completions per device and step; B x gradient_accumulation_steps "
                                                "must be a multiple of G."),
            ("--gradient_accumulation_steps N", "Steps whose gradients add up before each optimizer step."),
            ("--learning_rate LR", "The optimizer's learning rate (> 0)."),
            ("--max_completion_length N", "Tokens per agent's answer."),
            ("--max_steps N", "Stop after N steps (default: --num_train_epochs)."),
        ]),
        *_COMMON_LAST,
    ],
    "maporl": [
        ("Debate and reward", [
            ("--reward_mode MODE", "influence (MAPoRL), verifier (own score) or final (last turn)."),
            ("--alpha0 A, --alpha1 A, --beta0 B, --beta1 B", "MAPoRL's collaboration incentives."),
            ("--max_train_samples N", "Keep at most N training rows."),
            ("--eval_split SPLIT", "Evaluate the debate on this split after training (none: skip)."),
            ("--max_eval_samples N", "Keep at most N evaluation rows."),
        ]),
        *_COMMON_FIRST,
        ("Training", [
            ("--num_agents N", "Agents in the debate."),
            ("--num_turns N", "Debate turns."),
            ("--total_episodes N", "Training rows to see in all."),
            ("--per_device_train_batch_size B", "Rows per device and step."),
            ("--gradient_accumulation_steps N", "Steps whose gradients add up before each optimizer step."),
            ("--learning_rate LR", "The optimizer's learning rate (> 0)."),
            ("--response_length N", "Tokens per answer."),
            ("--num_ppo_epochs N", "PPO epochs over each batch."),
        ]),
        *_COMMON_LAST,
    ],
}
"""The options a user sets first, per subcommand and group: `(usage, help)` pairs printed by `--help`."""

FULL_HELP = {"magrpo": "trl-marl magrpo --help-all", "maporl": "trl-marl maporl gsm8k --help-all (or anli)"}
USAGE = {
    "magrpo": "trl-marl magrpo --config FILE [--option VALUE ...]",
    "maporl": "trl-marl maporl {gsm8k,anli} --config FILE [--option VALUE ...]",
}
DESCRIPTION = {
    "magrpo": "Train a team with MAGRPO on a built-in task (cooperative writing, cooperative coding, target sum).",
    "maporl": "Train a debate with MAPoRL (multi-agent PPO, influence-aware verification reward) on GSM8K or ANLI.",
}
EXAMPLES = {
    "magrpo": ["trl-marl magrpo --config examples/configs/magrpo_writing.yaml",
               "trl-marl magrpo --config examples/configs/magrpo_writing.yaml --model_name_or_path toy --max_steps 2"],
    "maporl": ["trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml",
               "trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml --model_name_or_path toy:debate "
               "--use_peft false --load_in_4bit false --total_episodes 8"],
}


def short_help(command: str) -> str:
    """The `--help` of `magrpo` or `maporl`: usage, the options a user sets first, and where the rest are."""
    lines = [f"usage: {USAGE[command]}", "", DESCRIPTION[command], "",
             "--config FILE is a YAML file of options (see examples/configs/); options on the command line override "
             "it.", ""]
    for group, options in SHORT_OPTIONS[command]:
        lines.append(f"{group}:")
        for usage, text in options:
            lines.append(f"  {usage}")
            lines.append(f"      {text}")
        lines.append("")
    lines += ["Examples:", *[f"  {example}" for example in EXAMPLES[command]], "",
              "Every option (hundreds: the trainer config's, TrainingArguments' and ModelConfig's fields): "
              f"{FULL_HELP[command]}"]
    return "\n".join(lines)


def _demo(args: argparse.Namespace) -> int:
    from .scripts.demo import DemoConfig, run_demo

    run_demo(DemoConfig(preset=args.preset, seed=args.seed, output_dir=args.output_dir))
    return 0


def _vllm_serve(argv: list[str]) -> int:
    """Replace this process with vLLM's OpenAI server, LoRA enabled with runtime loading, on 127.0.0.1 by default."""
    parser = argparse.ArgumentParser(prog="trl-marl vllm-serve", description="A vLLM server for a team's adapters; "
                                     "options not listed here go to vLLM's server unchanged.")
    parser.add_argument("--model", required=True, help="The team's base model (name or path).")
    parser.add_argument("--max-loras", type=int, default=4, help="Adapters served at once: at least the agents.")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="The largest LoRA rank (1, 8, 16, 32, ...).")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to bind (127.0.0.1: this machine only).")
    parser.add_argument("--port", type=int, default=8000)
    args, extra = parser.parse_known_args(argv)
    from .team.generation.vllm_server import serve_command  # after parsing: `--help` does not load torch

    command, env = serve_command(args.model, args.max_loras, args.max_lora_rank, args.host, args.port, extra)
    os.execve(command[0], command, env)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-marl", description="Multi-agent RL for LLM teams, built on TRL.",
        epilog="Run `trl-marl COMMAND --help` for a command's options. Start with `trl-marl demo --quick` "
               "(offline, about a minute on a laptop).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("magrpo", help="Train with MAGRPO on a built-in task: `trl-marl magrpo --config FILE`.")
    sub.add_parser("maporl", help="Train a debate with MAPoRL: `trl-marl maporl {gsm8k,anli} --config FILE`.")
    sub.add_parser("serve-verifier", help="Serve a verifier model over HTTP: `trl-marl serve-verifier --model PATH`.")
    sub.add_parser("vllm-serve", help="Serve a team's base model with vLLM for `vllm_mode='server'`: "
                   "`trl-marl vllm-serve --model PATH --max-loras N`.")
    demo = sub.add_parser("demo", help="Offline toy world: MAGRPO vs agents trained alone, and a MAPoRL debate.",
                          description="Offline toy world: MAGRPO vs agents trained alone, and a MAPoRL debate.")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="A ~30 s run.")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="A longer run.")
    demo.set_defaults(preset="default")
    demo.add_argument("--seed", type=int, default=0, help="Random seed.")
    demo.add_argument("--output-dir", default="trl-marl-demo", help="Where plots and metrics are written.")
    demo.set_defaults(func=_demo)
    return parser


def _wants_help(argv: Sequence[str]) -> str | None:
    """`"short"` for `-h`/`--help`, `"all"` for `--help-all`, else None."""
    if "--help-all" in argv:
        return "all"
    if "-h" in argv or "--help" in argv:
        return "short"
    return None


def _magrpo(argv: list[str]) -> int:
    help_kind = _wants_help(argv)
    if help_kind == "short":
        print(short_help("magrpo"))
        return 0
    from .scripts.magrpo import build_parser as magrpo_parser

    if help_kind == "all":
        magrpo_parser(prog="trl-marl magrpo").print_help()
        return 0
    from .scripts.magrpo import main as magrpo_main
    from .scripts.magrpo import parse

    magrpo_main(*parse(argv, prog="trl-marl magrpo"))
    return 0


def _maporl(argv: list[str]) -> int:
    help_kind = _wants_help(argv)
    task = argv[0] if argv and not argv[0].startswith("-") else None
    if help_kind == "short" or (help_kind == "all" and task is None):
        print(short_help("maporl"))
        return 0
    if task is None:
        print(f"usage: {USAGE['maporl']}\ntrl-marl maporl: name a task first (gsm8k or anli); "
              "`trl-marl maporl --help` lists the options.", file=sys.stderr)
        return 2
    from .scripts.maporl import TASKS, build_parser as maporl_parser  # noqa: I001

    if task not in TASKS:
        print(f"usage: {USAGE['maporl']}\ntrl-marl maporl: unknown task {task!r}; choose one of {sorted(TASKS)}.",
              file=sys.stderr)
        return 2
    if help_kind == "all":
        maporl_parser(task, prog=f"trl-marl maporl {task}").print_help()
        return 0
    from .scripts.maporl import main as maporl_main

    maporl_main(argv)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trl-marl` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve-verifier":  # the verifier server has its own argument parser
        from .scripts.serve_verifier import serve_verifier_main

        return serve_verifier_main(argv[1:])
    if argv and argv[0] == "vllm-serve":
        return _vllm_serve(argv[1:])
    if argv and argv[0] == "magrpo":  # TrlParser owns the rest of the command line (YAML config + overrides)
        return _magrpo(argv[1:])
    if argv and argv[0] == "maporl":  # `maporl <task>`, then TrlParser owns the rest
        return _maporl(argv[1:])
    parser = build_parser()
    args: Any = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
