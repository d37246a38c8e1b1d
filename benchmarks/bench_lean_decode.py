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
import warnings
from pathlib import Path
from typing import Any

import torch
from ab_timing import time_ab


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
                results[name] = time_ab(run, cli.reps, ("generate", "lean"), "the lean loop")
                print(name, json.dumps({k: round(v, 3) for k, v in results[name].items()}), flush=True)
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
