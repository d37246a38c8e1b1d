"""The benchmark suite's entry point: ``python -m benchmarks {speed,memory,parity,learning,gpu} [options]``.

Each group runs the scripts that belong to it (``benchmarks/<group>/``), one after the other, from the repository
root, with ``src/`` on ``PYTHONPATH``; each writes its raw results to ``benchmarks/results/<benchmark>.json``.
A benchmark that compares against a peer library first gets that peer's virtualenv (``benchmarks/peers.py``): built
under the cache folder when missing, or the interpreter given with ``--peer-python``.

This module needs the standard library only, so ``--help``, ``--list`` and ``--dry-run`` answer at once.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import peers

BENCH_ROOT = Path(__file__).resolve().parent
REPO_ROOT = BENCH_ROOT.parent
RESULTS_DIR = BENCH_ROOT / "results"


@dataclass(frozen=True)
class Bench:
    """One benchmark of a group: a script and the arguments the suite runs it with.

    Attributes:
        name: Short name (``--only NAME``); the results file is ``results/<name>.json``.
        script: Path of the script under ``benchmarks/``.
        what: One line for ``--help`` and ``--list``.
        args: Arguments of a full run.
        quick: Arguments that replace ``args`` with ``--quick`` (a smoke run), or None to leave the benchmark out of
            ``--quick``.
        output: The script's option that names its JSON output, or None when it writes into its workdir.
        peers: Names of the peer virtualenvs it needs (keys of ``benchmarks.peers.PEERS``).
    """

    name: str
    script: str
    what: str
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] | None = None
    output: str | None = "--json"
    peers: tuple[str, ...] = field(default_factory=tuple)


GROUPS: dict[str, tuple[str, tuple[Bench, ...]]] = {
    "speed": ("time per step or per token against the peers, and the engine's fast paths (CPU, one thread)", (
        Bench("magrpo", "speed/bench_magrpo.py", "MAGRPOTrainer vs TRL GRPOTrainer (1 agent) and vs comlrl 1.4.3",
              ("--only", "grpo", "--only", "comlrl"), ("--quick", "--only", "grpo", "--only", "comlrl"),
              peers=("comlrl",)),
        Bench("ppo", "parity/bench_ppo.py", "drop-in PPOTrainer vs TRL 1.12's PPOTrainer: learning and s/update",
              ("--skip-equivalence",), ("--skip-equivalence", "--rounds", "1", "--updates", "5"), output=None,
              peers=("trl112",)),
        Bench("profile", "speed/bench_profile.py", "where a MAGRPO step's time goes, vs its matmul floor and comlrl",
              (), ("--quick",), peers=("comlrl",)),
        Bench("compile", "speed/bench_compile.py", "torch_compile=True vs eager vs comlrl", (),
              ("--sizes", "small", "--prompts", "1", "--rounds", "1", "--steps", "5", "--warmup", "1"),
              peers=("comlrl",)),
        Bench("engine", "speed/bench_engine.py", "s/update of PPO, the MAPoRL debate and a MAGRPO tree on the engine",
              (), (), output="--out"),
        Bench("lean_decode", "speed/bench_lean_decode.py", "the lean decoding loop vs model.generate", (),
              ("--reps", "3"), output="--out"),
        Bench("mixed_adapters", "speed/bench_mixed_adapters.py", "LoRA row slices vs PEFT's mixed-batch hooks", (),
              ("--reps", "3"), output="--out"),
        Bench("prefill", "speed/bench_prefill.py", "shared prompt prefill on vs off", (),
              ("--reps", "1", "--demo-reps", "3"), output="--out"),
        Bench("shared_prompt", "speed/bench_shared_prompt.py", "the training forward, share_prompt_forward on vs off",
              ("--reps", "3"), ("--cases", "random-tiny", "--reps", "1", "--prompt-tokens", "16",
                                "--completion-tokens", "4"), output="--out"),
        Bench("sandbox", "speed/bench_sandbox.py", "code-execution sandbox overhead and programs/s", (),
              ("--runs", "5")),
        Bench("reward_isolation", "speed/bench_reward_isolation.py",
              "a reward call in its worker process vs forked per call vs a thread: time, and the state kept", (),
              ("--calls", "3")),
        Bench("async_overlap", "speed/bench_async_overlap.py",
              "MAGRPO with asynchronous rollouts (max_staleness 1) vs synchronous: wall time per step, interleaved",
              (), ("--repeats", "1", "--steps", "4")),
        Bench("demo", "speed/bench_demo.py", "`trl-marl demo` over seeds 0-9: claims and wall time per seed", (),
              ("--seeds", "0", "--preset", "quick")),
        Bench("second_hour", "speed/bench_second_hour.py",
              "a new user's documented commands in a fresh venv on an empty cache: times, errors, disk", (), None,
              "--output"),
    )),
    "memory": ("peak memory of a team against one agent (fresh process per measurement)", (
        Bench("magrpo_memory", "speed/bench_magrpo.py", "4-agent vs 1-agent LoRA team, MAGRPO (peak RSS)",
              ("--only", "memory"), ("--quick", "--only", "memory")),
        Bench("ppo_memory", "memory/bench_ppo_memory.py", "4-agent vs 1-agent LoRA team, multi-agent PPO (peak RSS)",
              (), ("--quick",)),
        Bench("critic_memory", "memory/bench_critic_memory.py",
              "adapter critics vs value models: training state counted at 135M-1.5B shapes, peak RSS of one update",
              ("--rss",), ("--shapes", "0.5b"), "--out"),
    )),
    "parity": ("same inputs, same numbers: ours against the peer implementations", (
        Bench("ppo_equivalence", "parity/bench_ppo.py",
              "first PPO update on identical rollouts vs TRL 1.12, every logged metric", ("--skip-training",),
              ("--skip-training",), output=None, peers=("trl112",)),
        Bench("legacy", "parity/bench_legacy_peer.py", "trl_marl.legacy step() vs TRL 0.11.4: stats, cross-loading",
              (), ("--steps", "1"), output=None, peers=("trl011",)),
        Bench("same_samples", "parity/family_same_samples.py",
              "comlrl's REINFORCE-family update vs ours on the same samples (gradient cosines)", (),
              ("--steps", "2"), output=None, peers=("comlrl",)),
        Bench("sampling_check", "parity/family_sampling_check.py",
              "our rollouts vs model.generate called as comlrl calls it (chi-square)", (), ("--steps", "3")),
        Bench("sampler_fit", "parity/family_sampler_fit.py",
              "both sides' samplers vs the policy's exact probabilities at trained weights", (),
              ("--train-steps", "2", "--samples", "200"), output=None, peers=("comlrl",)),
    )),
    "learning": ("final reward over seeds, never the peak", (
        Bench("family", "learning/bench_family.py", "the CoMLRL family here and in comlrl 1.4.3, same task and budget",
              (), ("--algorithms", "magrpo", "--seeds", "0", "--steps", "2"), peers=("comlrl",)),
        Bench("learning_real_magrpo", "learning/learning_real.py",
              "split-items coordination (`--task split`) on smollm2-135m-instruct: team vs alone vs untrained",
              ("magrpo",),
              ("magrpo", "--seeds", "0", "--smoke"), output="--output"),
        Bench("learning_real_maporl", "learning/learning_real.py",
              "MAPoRL debate on smollm2-135m-instruct: majority accuracy per turn", ("maporl",),
              ("maporl", "--seeds", "0", "--smoke"), output="--output"),
        Bench("learning_real_coding", "learning/learning_real.py",
              "MAGRPO cooperative coding on the shipped problems, sandboxed unit tests: team vs untrained",
              ("magrpo", "--task", "coding", "--arms", "team", "--steps", "20"),
              ("magrpo", "--task", "coding", "--arms", "team", "--seeds", "0", "--smoke"), output="--output"),
        Bench("learning_real_writing", "learning/learning_real.py",
              "MAGRPO cooperative writing on the shipped texts: team reward, terms, ROUGE-L",
              ("magrpo", "--task", "writing", "--steps", "20"),
              ("magrpo", "--task", "writing", "--arms", "team", "--seeds", "0", "--smoke"), output="--output"),
        Bench("learning_real_debate_hidden", "learning/learning_real.py",
              "MAPoRL debate where each agent knows one number of the sum: accuracy and flips per turn",
              ("maporl", "--debate-task", "hidden_sum"),
              ("maporl", "--debate-task", "hidden_sum", "--seeds", "0", "--smoke"), output="--output"),
        Bench("learning_async_demo", "learning/learning_async.py",
              "the demo's MAGRPO task at max_staleness 0, 1 and 2 (asynchronous rollouts) over seeds",
              ("--seeds", "0", "1", "2", "3", "4"),
              ("--seeds", "0", "--staleness", "0", "1", "--steps", "4", "--episodes", "16"), output="--output"),
        Bench("learning_async_debate", "learning/learning_async.py",
              "the demo's MAPoRL debate (multi-agent PPO) at max_staleness 0, 1 and 2 over seeds",
              ("--job", "debate", "--seeds", "0", "1", "2", "3", "4"),
              ("--job", "debate", "--seeds", "0", "--staleness", "0", "1", "--steps", "2", "--episodes", "8"),
              output="--output"),
        Bench("learning_tools", "learning/learning_tools.py",
              "tool relay on smollm2-135m-instruct: one agent calls a calculator, the other answers from what it said",
              ("--seeds", "0", "1", "2", "--steps", "20"), ("--seeds", "0", "--smoke"), output="--output"),
    )),
    "gpu": ("MAGRPO teams at real model sizes on a GPU, vs TRL GRPOTrainer (needs CUDA)", (
        Bench("gpu", "gpu/bench_gpu.py", "GRPO vs MAGRPO 1/2/4 agents, QLoRA, summed loss, compile (0.5B, 1.5B)",
              ("--sizes", "0.5b", "1.5b"), ("--sizes", "tiny32", "--steps", "2"), output="--out"),
    )),
}


def _parse_peer_pythons(values: Sequence[str], needed: Sequence[str]) -> dict[str, str]:
    """``--peer-python`` values (``NAME=PATH``, or a bare ``PATH`` when exactly one peer is needed) by peer name."""
    chosen: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if sep and name in peers.PEERS:
            chosen[name] = path
        elif len(needed) == 1:
            chosen[needed[0]] = value
        else:
            raise SystemExit(
                f"--peer-python {value!r}: these benchmarks need {len(needed)} peers ({', '.join(needed) or 'none'}); "
                f"write NAME=PATH with NAME one of {sorted(peers.PEERS)}")
    for name, path in chosen.items():
        if not Path(path).exists():
            raise SystemExit(f"--peer-python {name}={path}: no such interpreter")
    return chosen


def _describe_groups() -> str:
    lines = []
    for group, (what, benches) in GROUPS.items():
        lines.append(f"  {group}: {what}")
        for bench in benches:
            lines.append(f"    {bench.name:22s} {bench.script:32s} {bench.what}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m benchmarks`` parser: one subcommand per group."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run trl-marl's benchmarks by group. Results go to benchmarks/results/<benchmark>.json; "
        "benchmarks/README.md holds the current table.",
        epilog="groups and their benchmarks:\n" + _describe_groups() + "\n\npeer virtualenvs:\n" + peers.describe(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="group", metavar="{" + ",".join(GROUPS) + "}", required=True)
    for group, (what, benches) in GROUPS.items():
        listing = "\n".join(f"  {b.name:22s} {b.script:32s} {b.what}" for b in benches)
        needed = sorted({p for b in benches for p in b.peers})
        sp = sub.add_parser(
            group, help=what, description=f"{group}: {what}",
            epilog=f"benchmarks:\n{listing}\n\npeers needed: {', '.join(needed) or 'none'}"
            + ("\n" + peers.describe(needed) if needed else ""),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sp.add_argument("--only", nargs="+", choices=[b.name for b in benches], metavar="NAME",
                        help="run only these benchmarks of the group")
        sp.add_argument("--quick", action="store_true", help="smoke runs (minutes, numbers not meaningful)")
        sp.add_argument("--list", action="store_true", help="print the benchmarks and exit")
        sp.add_argument("--dry-run", action="store_true",
                        help="print the commands (peer virtualenvs to build, benchmarks to run) without running them")
        sp.add_argument("--peer-python", action="append", default=[], metavar="[NAME=]PATH",
                        help="use this interpreter for a peer instead of the cached virtualenv (repeatable; "
                        "NAME one of " + ", ".join(sorted(peers.PEERS)) + ", optional when one peer is needed)")
        sp.add_argument("--results-dir", type=Path, default=RESULTS_DIR, help="where the JSON results go")
    return parser


def plan(group: str, only: Sequence[str] | None, quick: bool, results_dir: Path) -> list[tuple[Bench, list[str]]]:
    """The benchmarks a group runs and each one's command line (the interpreter first)."""
    commands = []
    for bench in GROUPS[group][1]:
        if only and bench.name not in only:
            continue
        if quick and bench.quick is None:
            continue
        args = list(bench.quick if quick else bench.args)
        if bench.output:
            name = f"{bench.name}_quick" if quick else bench.name
            args += [bench.output, str(results_dir / f"{name}.json")]
        commands.append((bench, [sys.executable, str(BENCH_ROOT / bench.script), *args]))
    return commands


def main(argv: Sequence[str] | None = None, run: Callable[..., object] = subprocess.run) -> int:
    """Runs (or prints, with ``--dry-run``) a group's benchmarks; returns the exit status."""
    args = build_parser().parse_args(argv)
    commands = plan(args.group, args.only, args.quick, args.results_dir)
    if args.list:
        for bench, _ in commands:
            print(f"{bench.name:22s} {bench.script:32s} {bench.what}")
        return 0
    needed = sorted({p for bench, _ in commands for p in bench.peers})
    given = _parse_peer_pythons(args.peer_python, needed)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    for name in needed:
        python = given.get(name) or peers.ensure_peer(name, dry_run=args.dry_run, run=run)
        env[peers.PEERS[name].env_var] = python
        print(f"peer {name}: {python}")
    if not args.dry_run:
        args.results_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for bench, command in commands:
        extra = [f"{peers.PEERS[p].env_var}={env[peers.PEERS[p].env_var]}" for p in bench.peers]
        print(("would run: " if args.dry_run else "+ ") + shlex.join([*extra, *command]), flush=True)
        if args.dry_run:
            continue
        if run(command, cwd=REPO_ROOT, env=env).returncode != 0:  # type: ignore[attr-defined]
            failed.append(bench.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
