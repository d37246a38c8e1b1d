"""A MAGRPO step with `torch_compile=True` against the same trainer eager and against comlrl 1.4.3 (issue 14).

`torch_compile=True` makes the team compile its log-probability forwards (`trl_marl.team.compile`; generation stays
eager). This benchmark runs `bench_profile.py`'s task and settings (two agents, target-sum reward, G = 8, 4 new
tokens, P prompts per optimizer step, one torch thread) with three sides per configuration: ours eager, ours
compiled, and comlrl's `MAGRPOTrainer` in its own virtualenv (`bench_comlrl_peer.py`, as `bench_profile.py` runs it).
The sides take turns, `--rounds` rounds of `--steps` steps each, the first `--warmup` steps of every round left out;
each side's step time is the median over its timed steps. The compile time is reported apart: the compiled side's
first round minus that round's steps at the compiled median (the graphs compile during the first steps; inductor
also caches generated code on disk, under `/tmp/torchinductor_<user>`, which a later process reuses).

```
PYTHONPATH=src python benchmarks/speed/bench_compile.py                     # both sizes, P = 1 and 4, both team modes
PYTHONPATH=src python benchmarks/speed/bench_compile.py --sizes large --prompts 1 --modes adapters
PYTHONPATH=src python benchmarks/speed/bench_compile.py --modes adapters --backward both # + one forward of all agents
```

`--backward summed` (or `both`) runs the trainers with `backward_per_agent=False`: the summed loss and one backward,
where an `adapters` team runs every agent's rows as one forward through the base model.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
for _path in (BENCH_DIR, BENCH_DIR.parents[1] / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402
from bench_profile import COMLRL_PYTHON, LORA_R, LORA_TARGETS, SIZES, _trainer_kwargs, run_comlrl  # noqa: E402

DEFAULT_JSON = BENCH_DIR.parent / "results" / "compile.json"
MODES = ("models", "adapters")


def step_clock(rounds: list[list[float]]) -> Any:
    """A `TrainerCallback` appending each `train()` call as a round to `rounds`: its start, then each step's end."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rounds.append([time.perf_counter()])

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rounds[-1].append(time.perf_counter())

    return StepClock()


def build_trainer(model_dir: str, mode: str, P: int, cfg: dict[str, Any], out: Path, compiled: bool,
                  backend: str | None, backward_per_agent: bool = True) -> tuple[Any, list[list[float]]]:
    """A two-agent MAGRPOTrainer with bench_profile's settings; returns it and its clock's rounds."""
    from bench_magrpo import _quiet_trainer
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    lora = LoraConfig(r=LORA_R, lora_alpha=2 * LORA_R, target_modules=list(LORA_TARGETS), lora_dropout=0.0)
    compile_args = dict(torch_compile=True, torch_compile_backend=backend) if compiled else {}
    trainer = MAGRPOTrainer(
        model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
        processing_class=load_tokenizer(model_dir), peft_config=lora if mode == "adapters" else None,
        args=MAGRPOConfig(output_dir=str(out), team_mode=mode, backward_per_agent=backward_per_agent, **compile_args,
                          **_trainer_kwargs(P, cfg)),
        train_dataset=Dataset.from_dict({"target": [10] * (P * cfg["steps"] * 4)}),
    )
    _quiet_trainer(trainer)
    rounds: list[list[float]] = []
    trainer.add_callback(step_clock(rounds))
    return trainer, rounds


def step_times(rounds: list[list[float]], warmup: int) -> list[float]:
    """Seconds of every step after the first `warmup` of each round (a round: its start, then each step's end)."""
    steps: list[float] = []
    for marks in rounds:
        durations = [b - a for a, b in zip(marks, marks[1:])]
        steps += durations[warmup:]
    return steps


def variants(modes: list[str], backward: str) -> list[tuple[str, bool]]:
    """The (team mode, backward_per_agent) pairs to run: `backward` is "per-agent", "summed" or "both" (a summed loss
    and one backward is the joint forward over every agent's rows in `adapters` mode)."""
    flags = {"per-agent": [True], "summed": [False], "both": [True, False]}[backward]
    return [(mode, flag) for mode in modes for flag in flags]


def variant_name(mode: str, backward_per_agent: bool) -> str:
    return mode if backward_per_agent else f"{mode}_summed"


def bench_config(size: str, P: int, modes: list[str], cfg: dict[str, Any], work_dir: Path, backend: str | None,
                 with_comlrl: bool, backward: str = "per-agent") -> list[dict[str, Any]]:
    from trl_marl.toy import make_toy_model

    spec = SIZES[size]
    model_dir = str(work_dir / f"target10-h{spec['hidden']}-l{spec['layers']}")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=spec["hidden"], num_layers=spec["layers"],
                   seed=0, pretrain_steps=spec["pretrain_steps"])
    sides: dict[str, tuple[Any, list[list[float]]]] = {}
    round_wall: dict[str, list[float]] = {}
    for mode, per_agent in variants(modes, backward):
        for compiled in (False, True):
            name = f"{variant_name(mode, per_agent)}_{'compiled' if compiled else 'eager'}"
            sides[name] = build_trainer(model_dir, mode, P, cfg, work_dir / f"out-compile-{name}", compiled, backend,
                                        per_agent)
            round_wall[name] = []
    order = [*sides, *(["comlrl"] if with_comlrl else [])]
    comlrl_runs: list[dict[str, Any]] = []
    for r in range(cfg["rounds"]):
        shift = r % len(order)
        for side in order[shift:] + order[:shift]:  # rotate who goes first
            print(f"  [{size} P={P}] round {r + 1}/{cfg['rounds']}: {side}", flush=True)
            if side == "comlrl":
                comlrl_runs.append(run_comlrl(model_dir, P, cfg, work_dir / f"comlrl-compile-{size}-P{P}-r{r}.json"))
                continue
            start = time.perf_counter()
            sides[side][0].train()
            round_wall[side].append(time.perf_counter() - start)
    comlrl_ms = 1e3 * statistics.median(run["median_step_s"] for run in comlrl_runs) if comlrl_runs else None
    results = []
    for mode, per_agent in variants(modes, backward):
        variant = variant_name(mode, per_agent)
        row: dict[str, Any] = {"size": size, "prompts_per_step": P, "team_mode": mode,
                               "backward_per_agent": per_agent, "comlrl_step_ms": comlrl_ms,
                               "comlrl_step_ms_per_run": [1e3 * run["median_step_s"] for run in comlrl_runs]}
        for kind in ("eager", "compiled"):
            name = f"{variant}_{kind}"
            steps = step_times(sides[name][1], cfg["warmup"])
            row[f"{kind}_step_ms"] = 1e3 * statistics.median(steps)
            row[f"{kind}_steps_timed"] = len(steps)
            if comlrl_ms is not None:
                row[f"{kind}_vs_comlrl"] = comlrl_ms / row[f"{kind}_step_ms"]
        first_round_steps = len(sides[f"{variant}_compiled"][1][0]) - 1
        row["compile_s"] = round_wall[f"{variant}_compiled"][0] - first_round_steps * row["compiled_step_ms"] / 1e3
        row["compiled_speedup"] = row["eager_step_ms"] / row["compiled_step_ms"]
        # a graph that failed to compile makes the compiled side run eager from then on (`CompiledForward.failure`)
        row["compile_failure"] = sides[f"{variant}_compiled"][0].team.forward_call.failure
        results.append(row)
    del sides
    gc.collect()
    return results


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| model | P | team | backward | eager step ms | compiled step ms | compiled speed-up | comlrl step ms | "
             "eager vs comlrl | compiled vs comlrl | compile s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    label = {"small": "84k", "large": "2.6M"}
    for row in rows:
        comlrl = row["comlrl_step_ms"]
        vs = ((f"{row['eager_vs_comlrl']:.2f}x", f"{row['compiled_vs_comlrl']:.2f}x") if comlrl is not None
              else ("-", "-"))
        backward = "per agent" if row.get("backward_per_agent", True) else "summed"
        lines.append(f"| {label.get(row['size'], row['size'])} | {row['prompts_per_step']} | `{row['team_mode']}` | "
                     f"{backward} | "
                     f"{row['eager_step_ms']:.1f} | {row['compiled_step_ms']:.1f} | {row['compiled_speedup']:.2f}x | "
                     f"{'-' if comlrl is None else f'{comlrl:.1f}'} | {vs[0]} | {vs[1]} | {row['compile_s']:.0f}"
                     f"{' (failed: ran eager)' if row.get('compile_failure') else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="MAGRPO step time with torch_compile=True vs eager vs comlrl.")
    parser.add_argument("--sizes", nargs="+", default=["small", "large"], choices=sorted(SIZES))
    parser.add_argument("--prompts", nargs="+", type=int, default=[1, 4], help="prompts per optimizer step")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES, help="team modes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds in which every side takes a turn")
    parser.add_argument("--steps", type=int, default=20, help="steps per side per round, warmup included")
    parser.add_argument("--warmup", type=int, default=3, help="leading steps of every round left out")
    parser.add_argument("--backend", default=None, help="torch_compile_backend (default: inductor)")
    parser.add_argument("--backward", default="per-agent", choices=["per-agent", "summed", "both"],
                        help="backward_per_agent=True (per-agent), False (summed: in `adapters` mode one forward over "
                        "every agent's rows), or both, interleaved")
    parser.add_argument("--no-comlrl", action="store_true", help="leave comlrl out (no peer virtualenv needed)")
    parser.add_argument("--work-dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "trl_marl_bench"))
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = parser.parse_args(argv)
    if args.steps <= args.warmup:
        parser.error(f"--steps ({args.steps}) must be larger than --warmup ({args.warmup})")
    if not args.no_comlrl and not os.path.exists(COMLRL_PYTHON):
        parser.error(f"no comlrl interpreter at {COMLRL_PYTHON}: set COMLRL_PYTHON, run `python -m benchmarks speed "
                     "--only compile` (builds it), or pass --no-comlrl")
    torch.set_num_threads(1)
    from bench_magrpo import _cpu_seconds, _source_state, _versions
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = dict(num_generations=8, max_len=4, lr=3e-4, rounds=args.rounds, steps=args.steps, warmup=args.warmup)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    started, cpu_start = time.perf_counter(), _cpu_seconds()
    results: dict[str, Any] = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/speed/bench_compile.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "versions": _versions(), "source": _source_state(), "config": cfg, "backend": args.backend or "inductor",
        "load_at_start": [round(x, 2) for x in os.getloadavg()], "rows": [],
    }
    for size in args.sizes:
        for P in args.prompts:
            print(f"[bench_compile] {size} P={P} (load {os.getloadavg()[0]:.2f})", flush=True)
            results["rows"] += bench_config(size, P, args.modes, cfg, work_dir, args.backend, not args.no_comlrl,
                                            args.backward)
            results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
            results["total_wall_s"] = time.perf_counter() - started
            results["cpu_over_wall"] = (_cpu_seconds() - cpu_start) / results["total_wall_s"]
            results["table_markdown"] = markdown_table(results["rows"])
            with open(args.json, "w") as f:  # after every configuration: a crash later keeps what was measured
                json.dump(results, f, indent=2)
                f.write("\n")
    print()
    print(results["table_markdown"])
    print(f"\nCPU/wall {results['cpu_over_wall']:.2f}; load {results['load_at_start']} -> {results['load_at_end']}; "
          f"{results['total_wall_s']:.0f} s; results in {args.json}")
    return results


if __name__ == "__main__":
    main()
