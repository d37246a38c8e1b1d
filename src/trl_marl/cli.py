"""The `trl-marl` command.

- `trl-marl demo [--quick|--full] [--seed N] [--output-dir DIR]`: the offline toy world (see `trl_marl.scripts.demo`).
- `trl-marl magrpo --config FILE [overrides]`: MAGRPO on a built-in task (see `trl_marl.scripts.magrpo`).
- `trl-marl maporl {gsm8k,anli} --config FILE [overrides]`: MAPoRL's debate (see `trl_marl.scripts.maporl`).
- `trl-marl serve-verifier --model PATH [--port N]`: an HTTP verifier server (see `trl_marl.scripts.serve_verifier`).
- `trl-marl vllm-serve --model PATH [--max-loras N] [--max-lora-rank R] [--host H] [--port N] [vLLM options]`: a vLLM
  server for `generation_backend="vllm", vllm_mode="server"` (see `trl_marl.generation.vllm_server`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any


def _demo(args: argparse.Namespace) -> int:
    from .scripts.demo import DemoConfig, run_demo

    run_demo(DemoConfig(preset=args.preset, seed=args.seed, output_dir=args.output_dir))
    return 0


def _vllm_serve(argv: list[str]) -> int:
    """Replace this process with vLLM's OpenAI server, LoRA enabled with runtime loading, on 127.0.0.1 by default."""
    from .generation.vllm_server import serve_command

    parser = argparse.ArgumentParser(prog="trl-marl vllm-serve", description="A vLLM server for a team's adapters; "
                                     "options not listed here go to vLLM's server unchanged.")
    parser.add_argument("--model", required=True, help="The team's base model (name or path).")
    parser.add_argument("--max-loras", type=int, default=4, help="Adapters served at once: at least the agents.")
    parser.add_argument("--max-lora-rank", type=int, default=16, help="The largest LoRA rank (1, 8, 16, 32, ...).")
    parser.add_argument("--host", default="127.0.0.1", help="Interface to bind (127.0.0.1: this machine only).")
    parser.add_argument("--port", type=int, default=8000)
    args, extra = parser.parse_known_args(argv)
    command, env = serve_command(args.model, args.max_loras, args.max_lora_rank, args.host, args.port, extra)
    os.execve(command[0], command, env)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trl-marl", description="Multi-agent RL for LLM teams, built on TRL.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("magrpo", help="Train with MAGRPO on a built-in task: `trl-marl magrpo --config FILE`.")
    sub.add_parser("maporl", help="Train a debate with MAPoRL: `trl-marl maporl {gsm8k,anli} --config FILE`.")
    sub.add_parser("serve-verifier", help="Serve a verifier model over HTTP: `trl-marl serve-verifier --model PATH`.")
    sub.add_parser("vllm-serve", help="Serve a team's base model with vLLM for `vllm_mode='server'`: "
                   "`trl-marl vllm-serve --model PATH --max-loras N`.")
    demo = sub.add_parser("demo", help="Offline toy world: MAGRPO vs agents trained alone, and a MAPoRL debate.")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="A ~30 s run.")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="A longer run.")
    demo.set_defaults(preset="default")
    demo.add_argument("--seed", type=int, default=0, help="Random seed.")
    demo.add_argument("--output-dir", default="trl-marl-demo", help="Where plots and metrics are written.")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trl-marl` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "serve-verifier":  # the verifier server has its own argument parser
        from .scripts.serve_verifier import serve_verifier_main

        return serve_verifier_main(argv[1:])
    if argv and argv[0] == "vllm-serve":
        return _vllm_serve(argv[1:])
    if argv and argv[0] == "magrpo":  # TrlParser owns the rest of the command line (YAML config + overrides)
        from .scripts.magrpo import main as magrpo_main
        from .scripts.magrpo import parse

        magrpo_main(*parse(argv[1:]))
        return 0
    if argv and argv[0] == "maporl":  # `maporl <task>`, then TrlParser owns the rest
        from .scripts.maporl import main as maporl_main

        maporl_main(argv[1:])
        return 0
    parser = build_parser()
    args: Any = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
