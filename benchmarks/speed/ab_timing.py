"""Paired A/B timing of two settings of one call, and the setup shared by the generation benchmarks that use it.

`bench_lean_decode.py` and `bench_mixed_adapters.py` compare a fast path of `AgentTeam.generate` with its fallback on
the same toy model, prompts and fixed-length generation config; what they share lives here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def time_ab(run: Callable[[bool], Any], reps: int, labels: tuple[str, str], changed: str) -> dict[str, float]:
    """Median wall and CPU milliseconds of `run(False)` and `run(True)`, alternated A B B A ...

    Alternating makes a busy neighbour on the machine slow both settings alike. Both settings must return the same
    output on their first (warm-up) call, else `AssertionError("<changed> changed the samples")`. The minimum wall
    time is reported too: on a shared machine it is the figure least disturbed by other processes.

    Returns:
        `<label>_wall_ms`, `<label>_cpu_ms`, `<label>_min_wall_ms` for `labels = (label of False, label of True)`,
        and `saved_wall_ms`, `saved_min_wall_ms`, `speedup_wall`, `speedup_cpu` (False's time over True's).
    """
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    outputs = {flag: run(flag) for flag in (False, True)}
    if outputs[False] != outputs[True]:
        raise AssertionError(f"{changed} changed the samples")
    for rep in range(reps):
        for flag in ((False, True) if rep % 2 == 0 else (True, False)):
            wall, cpu = time.perf_counter(), time.process_time()
            run(flag)
            samples[flag].append((time.perf_counter() - wall, time.process_time() - cpu))
    result = {}
    for flag, name in zip((False, True), labels):
        result[f"{name}_wall_ms"] = 1e3 * statistics.median(s[0] for s in samples[flag])
        result[f"{name}_cpu_ms"] = 1e3 * statistics.median(s[1] for s in samples[flag])
        result[f"{name}_min_wall_ms"] = 1e3 * min(s[0] for s in samples[flag])
    a, b = labels
    result["saved_wall_ms"] = result[f"{a}_wall_ms"] - result[f"{b}_wall_ms"]
    result["saved_min_wall_ms"] = result[f"{a}_min_wall_ms"] - result[f"{b}_min_wall_ms"]
    result["speedup_wall"] = result[f"{a}_wall_ms"] / result[f"{b}_wall_ms"]
    result["speedup_cpu"] = result[f"{a}_cpu_ms"] / result[f"{b}_cpu_ms"]
    return result


def add_generation_arguments(parser: argparse.ArgumentParser, rows: str) -> None:
    """`--model-dir`, `--reps`, `--rows` (default `rows`), `--new-tokens` and `--out`."""
    parser.add_argument("--model-dir", default=None, help="a toy model directory (default: build the 2.6M one)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per setting and case")
    parser.add_argument("--rows", default=rows, help="comma-separated rows per agent")
    parser.add_argument("--new-tokens", default="4,16", help="comma-separated max_new_tokens")
    parser.add_argument("--out", default=None, help="write the results as JSON here")


def ints(text: str) -> list[int]:
    """`"4,16"` -> `[4, 16]`."""
    return [int(t) for t in text.split(",")]


def start(parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, str, dict[str, Any]]:
    """Parse the arguments, silence warnings, use one torch thread, and find the model: `(arguments, model folder,
    the results dict with the run's settings)`."""
    import warnings

    cli = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    model_dir = toy_model_dir(cli.model_dir)
    return cli, model_dir, {"threads": torch.get_num_threads(), "reps": cli.reps, "model_dir": model_dir}


def toy_model_dir(model_dir: str | None) -> str:
    """`model_dir`, or the 2.6M-parameter toy Qwen2 (hidden 256, 4 layers, pretrained 150 steps on T=10) built once."""
    from trl_marl.toy import make_toy_model

    return str(model_dir or make_toy_model(task="target", hidden_size=256, num_layers=4, pretrain_steps=150, seed=0,
                                           targets=(10,)))


def lora_team(model_dir: str, num_agents: int, mode: str = "adapters") -> Any:
    """A team of `num_agents`; in `adapters` mode one LoRA adapter (r=8 on q/v, non-zero init) per agent."""
    from peft import LoraConfig

    from trl_marl import AgentTeam

    torch.manual_seed(0)
    peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                             init_lora_weights=False) if mode == "adapters" else None
    return AgentTeam.build(model_dir, num_agents, mode=mode, peft_config=peft_config)


def fixed_length_config(team: Any, new_tokens: int) -> Any:
    """The MAGRPO trainer's generation config for `team`, with `min_new_tokens = max_new_tokens = new_tokens` so that
    every call decodes the same number of tokens."""
    from trl_marl import MAGRPOConfig
    from trl_marl.trainers.magrpo.schedule import generation_config

    args = MAGRPOConfig(output_dir="/tmp/bench_generation", num_agents=team.num_agents,
                        max_completion_length=new_tokens, report_to="none", save_strategy="no")
    config = generation_config(args, team)
    config.min_new_tokens = new_tokens
    return config


def target_prompts(num_agents: int, rows: int) -> list[list[Any]]:
    """Each agent's first-turn `TargetSumEnv` prompt (T=10), `rows` times."""
    from trl_marl.envs import TargetSumEnv, Transcript

    env = TargetSumEnv(num_agents=num_agents)
    return [[env.agent_prompt({"target": 10}, a, Transcript())] * rows for a in range(num_agents)]


def report(results: dict[str, Any], name: str, result: dict[str, float]) -> None:
    """Store `result` under `name` and print it (rounded)."""
    results[name] = result
    print(name, json.dumps({k: round(v, 3) for k, v in result.items()}), flush=True)


def write_results(path: str | None, results: dict[str, Any]) -> None:
    if path:
        Path(path).write_text(json.dumps(results, indent=2))
