"""Generation time of `AgentTeam.generate` with the lean decoding loop and with `model.generate`.

Each case times `team.generate` on one batch, alternating `team.lean_decode` False / True (A B B A ...) so that a
busy neighbour on the machine slows both alike, and reports the median wall time (`time.perf_counter`) and CPU time
of this process (`time.process_time`) per call, in milliseconds. Both settings must draw the same samples from the
same seed (checked before timing). The minimum over the calls is reported too: on a shared machine it is the
figure least disturbed by other processes.

The model is the 2.6M-parameter toy Qwen2 (hidden 256, 4 layers, pretrained 150 steps on the target-sum task; or
`--model-dir`), a 2-agent team in `models` mode (one model per agent: one `generate` call per agent) or `adapters`
mode (LoRA r=8 on q/v, one adapter per agent: one mixed-adapter call), one 6-token `TargetSumEnv` prompt per agent
sampled R times (R = rows per agent), the MAGRPO trainer's own generation config (`magrpo_steps.generation_config`,
MAGRPOConfig's sampling defaults) with `min_new_tokens = max_new_tokens` so that every call decodes T tokens.
Prompts are shared through one prefill (`share_prompt_prefill`, the team default) in both settings.

Run (1 thread; a few minutes)::

    PYTHONPATH=src python benchmarks/bench_lean_decode.py --model-dir /tmp/prof/model-large --reps 30 --out lean.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _time_ab(run: Callable[[bool], Any], reps: int) -> dict[str, float]:
    """Median wall and CPU milliseconds of `run(lean)` for lean in (False, True), alternated A B B A ..."""
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    outputs = {lean: run(lean) for lean in (False, True)}  # warm-up, and the check that the samples agree
    if outputs[False] != outputs[True]:
        raise AssertionError("the lean loop changed the samples")
    for rep in range(reps):
        for lean in ((False, True) if rep % 2 == 0 else (True, False)):
            wall, cpu = time.perf_counter(), time.process_time()
            run(lean)
            samples[lean].append((time.perf_counter() - wall, time.process_time() - cpu))
    result = {}
    for lean, name in ((False, "generate"), (True, "lean")):
        result[f"{name}_wall_ms"] = 1e3 * statistics.median(s[0] for s in samples[lean])
        result[f"{name}_cpu_ms"] = 1e3 * statistics.median(s[1] for s in samples[lean])
        result[f"{name}_min_wall_ms"] = 1e3 * min(s[0] for s in samples[lean])  # least disturbed by neighbours
    result["saved_wall_ms"] = result["generate_wall_ms"] - result["lean_wall_ms"]
    result["saved_min_wall_ms"] = result["generate_min_wall_ms"] - result["lean_min_wall_ms"]
    result["speedup_wall"] = result["generate_wall_ms"] / result["lean_wall_ms"]
    result["speedup_cpu"] = result["generate_cpu_ms"] / result["lean_cpu_ms"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=None, help="a toy model directory (default: build the 2.6M one)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per setting and case")
    parser.add_argument("--rows", default="8,32", help="comma-separated rows per agent")
    parser.add_argument("--new-tokens", default="4,16", help="comma-separated max_new_tokens")
    parser.add_argument("--modes", default="models,adapters", help="comma-separated team modes")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    cli = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    from peft import LoraConfig

    from trl_marl import AgentTeam, MAGRPOConfig
    from trl_marl.envs import TargetSumEnv, Transcript
    from trl_marl.toy import make_toy_model
    from trl_marl.trainers.magrpo_steps import generation_config

    model_dir = cli.model_dir or make_toy_model(task="target", hidden_size=256, num_layers=4, pretrain_steps=150,
                                                seed=0, targets=(10,))
    env = TargetSumEnv(num_agents=2)
    results: dict[str, Any] = {"threads": torch.get_num_threads(), "reps": cli.reps, "model_dir": str(model_dir)}
    for mode in cli.modes.split(","):
        torch.manual_seed(0)
        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                 init_lora_weights=False) if mode == "adapters" else None
        team = AgentTeam.build(model_dir, 2, mode=mode, peft_config=peft_config)
        for new_tokens in (int(t) for t in cli.new_tokens.split(",")):
            args = MAGRPOConfig(output_dir="/tmp/bench_lean_decode", num_agents=2, max_completion_length=new_tokens,
                                report_to="none", save_strategy="no")
            config = generation_config(args, team)
            config.min_new_tokens = new_tokens  # every call decodes the same number of tokens
            for rows in (int(r) for r in cli.rows.split(",")):
                prompts = [[env.agent_prompt({"target": 10}, a, Transcript())] * rows for a in range(2)]

                def run(lean: bool, team: Any = team, prompts: Any = prompts, config: Any = config) -> Any:
                    team.lean_decode = lean
                    torch.manual_seed(0)
                    return team.generate(prompts, config)

                name = f"{mode}_rows{rows}_new{new_tokens}"
                results[name] = _time_ab(run, cli.reps)
                print(name, json.dumps({k: round(v, 3) for k, v in results[name].items()}), flush=True)
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
