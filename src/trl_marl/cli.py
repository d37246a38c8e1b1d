"""The `trl-marl` command.

- `trl-marl demo [--quick|--full] [--real] [--seed N] [--output-dir DIR]`: the offline toy world (see
  `trl_marl.scripts.demo`), or with `--real` the offline real model (see `trl_marl.scripts.demo_real`).
- `trl-marl magrpo --config FILE [overrides]`: MAGRPO on a built-in task (see `trl_marl.scripts.magrpo`).
- `trl-marl maporl {gsm8k,anli,hidden_sum} --config FILE [overrides]`: MAPoRL's debate (see `trl_marl.scripts.maporl`).
- `trl-marl generate --team PATH --prompt TEXT [--agent N] [--max-new-tokens N]`: a saved team's answers (see
  `trl_marl.scripts.generate`).
- `trl-marl teamwork --team PATH --task NAME [--untrained PATH] [--samples-per-row N]`: a saved team and its ablations
  (blank partner, untrained partner, roles swapped) on a task's held-out rows (see `trl_marl.scripts.teamwork`).
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

from .scripts.demo import DESCRIPTION as DEMO_DESCRIPTION
from .scripts.demo import add_demo_arguments, demo_command
from .scripts.generate import DESCRIPTION as GENERATE_DESCRIPTION
from .scripts.generate import add_generate_arguments, generate_command
from .scripts.help import (
    DESCRIPTION,
    EXAMPLES,
    FULL_HELP,
    MAPORL_TASKS,
    MODEL_HELP,
    SHORT_OPTIONS,
    USAGE,
    short_help,
)
from .scripts.teamwork import DESCRIPTION as TEAMWORK_DESCRIPTION
from .scripts.teamwork import add_teamwork_arguments, teamwork_command

__all__ = ["DESCRIPTION", "EXAMPLES", "FULL_HELP", "MODEL_HELP", "SHORT_OPTIONS", "USAGE", "build_parser", "main",
           "short_help"]


def _vllm_serve(argv: list[str]) -> int:
    """Replace this process with vLLM's OpenAI server for a team: LoRA enabled with runtime loading restricted to an
    adapter folder, an API key on every request, docs and metrics closed, 127.0.0.1 by default (see
    `trl_marl.team.generation.serve_guard`)."""
    parser = argparse.ArgumentParser(prog="trl-marl vllm-serve", description="A vLLM server for a team's adapters; "
                                     "options not listed here go to vLLM's server unchanged.")
    parser.add_argument("--model", required=True, help="The team's base model (name or path).")
    parser.add_argument("--max-loras", type=int, default=4, help="Adapters served at once: at least the agents.")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="The largest LoRA rank (1, 8, 16, 32, ...).")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to bind (127.0.0.1: this machine only).")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--adapter-dir", default=None,
                        help="The only folder adapters are loaded from (the trainer writes its adapters there). "
                        "Default: a folder private to you next to the connection file.")
    parser.add_argument("--api-key", default=None,
                        help="The key every request must carry. Default: $VLLM_API_KEY, else a new random key. It "
                        "is written to the connection file, never shown.")
    parser.add_argument("--logprobs-mode", default="processed_logprobs",
                        choices=("processed_logprobs", "raw_logprobs"),
                        help="The log-probabilities returned for the importance-sampling correction (default "
                        "processed_logprobs: after temperature and truncation; raw_logprobs: the model's, at "
                        "temperature 1; the trainer's `vllm_logprobs_mode` must agree).")
    parser.add_argument("--open-docs", action="store_true", help="Serve /docs, /redoc and /openapi.json.")
    parser.add_argument("--open-metrics", action="store_true", help="Serve /metrics (with the API key).")
    args, extra = parser.parse_known_args(argv)
    from .team.generation.serve_guard import new_api_key, state_dir, write_connection
    from .team.generation.vllm_server import serve_command  # after parsing: `--help` does not load torch

    api_key = args.api_key or os.environ.get("VLLM_API_KEY") or new_api_key()
    adapter_dir = args.adapter_dir or str(state_dir() / f"port-{args.port}" / "adapters")
    connection = write_connection(args.port, api_key, adapter_dir)
    adapter_dir = str(os.path.realpath(os.path.expanduser(adapter_dir)))
    print(f"trl-marl vllm-serve: the API key and the adapter folder ({adapter_dir}) are in {connection} (readable "
          f"by you only): a trainer on this machine with `vllm_server_port={args.port}` reads them there; from "
          "another machine set VLLM_API_KEY and TRL_MARL_VLLM_ADAPTER_DIR.", file=sys.stderr, flush=True)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"trl-marl vllm-serve: warning: serving on {args.host}, reachable from other machines: anyone with "
              f"the API key can generate and load adapters from {adapter_dir}; traffic is not encrypted.",
              file=sys.stderr, flush=True)
    command, env = serve_command(args.model, args.max_loras, args.max_lora_rank, args.host, args.port, extra,
                                 api_key=api_key, adapter_dir=adapter_dir, open_docs=args.open_docs,
                                 open_metrics=args.open_metrics, logprobs_mode=args.logprobs_mode)
    os.execve(command[0], command, env)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-marl", description="Multi-agent RL for LLM teams, built on TRL.",
        epilog="Run `trl-marl COMMAND --help` for a command's options. Start with `trl-marl demo --quick` "
               "(offline, about 2 minutes on 2 CPU cores the first time, when it builds its toy models).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("magrpo", help="Train with MAGRPO on a built-in task: `trl-marl magrpo --config FILE`.")
    sub.add_parser("maporl", help="Train a debate with MAPoRL: "
                                  "`trl-marl maporl {gsm8k,anli,hidden_sum} --config FILE`.")
    sub.add_parser("serve-verifier", help="Serve a verifier model over HTTP: `trl-marl serve-verifier --model PATH`.")
    sub.add_parser("vllm-serve", help="Serve a team's base model with vLLM for `vllm_mode='server'`: "
                   "`trl-marl vllm-serve --model PATH --max-loras N`.")
    demo = sub.add_parser("demo", help=DEMO_DESCRIPTION, description=DEMO_DESCRIPTION)
    add_demo_arguments(demo)
    demo.set_defaults(func=demo_command)
    generate = sub.add_parser("generate", help=GENERATE_DESCRIPTION, description=GENERATE_DESCRIPTION)
    add_generate_arguments(generate)
    generate.set_defaults(func=generate_command)
    teamwork = sub.add_parser("teamwork", help=TEAMWORK_DESCRIPTION, description=TEAMWORK_DESCRIPTION)
    add_teamwork_arguments(teamwork)
    teamwork.set_defaults(func=teamwork_command)
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
    if help_kind == "all":
        from .scripts.magrpo import build_parser as magrpo_parser

        magrpo_parser(prog="trl-marl magrpo").print_help()
        return 0
    from .scripts.early import exit_on_early_problem

    exit_on_early_problem(argv, "trl-marl magrpo", "MAGRPOConfig")
    from .scripts.magrpo import cli_main

    cli_main(argv, prog="trl-marl magrpo")
    return 0


def _maporl(argv: list[str]) -> int:
    help_kind = _wants_help(argv)
    task = argv[0] if argv and not argv[0].startswith("-") else None
    if help_kind == "short" or (help_kind == "all" and task is None):
        print(short_help("maporl"))
        return 0
    if task is None:
        print(f"usage: {USAGE['maporl']}\ntrl-marl maporl: name a task first (gsm8k, anli or hidden_sum); "
              "`trl-marl maporl --help` lists the options.", file=sys.stderr)
        return 2
    if task not in MAPORL_TASKS:
        print(f"usage: {USAGE['maporl']}\ntrl-marl maporl: unknown task {task!r}; choose one of "
              f"{sorted(MAPORL_TASKS)}.", file=sys.stderr)
        return 2
    if help_kind == "all":
        from .scripts.maporl import build_parser as maporl_parser

        maporl_parser(task, prog=f"trl-marl maporl {task}").print_help()
        return 0
    from .scripts.early import exit_on_early_problem

    exit_on_early_problem(argv[1:], f"trl-marl maporl {task}", "MultiAgentPPOConfig")
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
