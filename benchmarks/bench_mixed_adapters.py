"""Mixed-adapter generation time of an `adapters` team: LoRA on row slices vs PEFT's per-layer index lists.

`AgentTeam.generate` gives every agent's rows to one batched call with one adapter name per row. Its LoRA layers
either apply each adapter to its contiguous slice of rows (`trl_marl.utils.mixed_adapters.sliced_adapter_rows`, the
default wherever it applies) or go through PEFT's hooks, whose mixed-batch forward builds index lists and
gathers/scatters rows in every layer at every forward. This script times `team.generate` both ways on one batch,
alternating them (A B B A ...) so that a busy neighbour on the machine slows both alike, and reports the median and
minimum wall time and the median CPU time of this process per call, in milliseconds. PEFT's path is forced by making
the slicing report itself unsupported (`mixed_adapters._plan`), which is exactly the path callers take when slicing
does not apply. Both paths must draw the same samples from the same seed (checked before timing).

The model is the 2.6M-parameter toy Qwen2 (hidden 256, 4 layers, pretrained 150 steps on the target-sum task; or
`--model-dir`), with LoRA r=8 on q/v and one adapter per agent; one 6-token `TargetSumEnv` prompt per agent sampled
R times (R = rows per agent, sharing one prefill: the team default), the MAGRPO trainer's generation config with
`min_new_tokens = max_new_tokens`, so that every call decodes T tokens.

Run (1 thread; a few minutes)::

    PYTHONPATH=src python benchmarks/bench_mixed_adapters.py --model-dir /tmp/prof/model-large --reps 30 --out m.json
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from ab_timing import time_ab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default=None, help="a toy model directory (default: build the 2.6M one)")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per path and case")
    parser.add_argument("--agents", default="2,4", help="comma-separated team sizes")
    parser.add_argument("--rows", default="8", help="comma-separated rows per agent")
    parser.add_argument("--new-tokens", default="4,16", help="comma-separated max_new_tokens")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    cli = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    from peft import LoraConfig

    from trl_marl import AgentTeam, MAGRPOConfig
    from trl_marl.envs import TargetSumEnv, Transcript
    from trl_marl.toy import make_toy_model
    from trl_marl.trainers.magrpo_steps import generation_config
    from trl_marl.utils import mixed_adapters

    model_dir = cli.model_dir or make_toy_model(task="target", hidden_size=256, num_layers=4, pretrain_steps=150,
                                                seed=0, targets=(10,))
    results: dict[str, Any] = {"threads": torch.get_num_threads(), "reps": cli.reps, "model_dir": str(model_dir)}
    for agents in (int(a) for a in cli.agents.split(",")):
        env = TargetSumEnv(num_agents=agents)
        torch.manual_seed(0)
        peft_config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                 init_lora_weights=False)
        team = AgentTeam.build(model_dir, agents, mode="adapters", peft_config=peft_config)
        team.eval()
        names = [team.agent_adapter[a] for a in range(agents) for _ in range(2)]
        reason = mixed_adapters.sliced_adapter_rows_unsupported(team.models[0], names)
        if reason is not None:
            raise AssertionError(f"the team's batches would not be sliced: {reason}")
        for new_tokens in (int(t) for t in cli.new_tokens.split(",")):
            args = MAGRPOConfig(output_dir="/tmp/bench_mixed_adapters", num_agents=agents,
                                max_completion_length=new_tokens, report_to="none", save_strategy="no")
            config = generation_config(args, team)
            config.min_new_tokens = new_tokens  # every call decodes the same number of tokens
            for rows in (int(r) for r in cli.rows.split(",")):
                prompts = [[env.agent_prompt({"target": 10}, a, Transcript())] * rows for a in range(agents)]

                def run(sliced: bool, team: Any = team, prompts: Any = prompts, config: Any = config) -> Any:
                    torch.manual_seed(0)
                    if sliced:
                        return team.generate(prompts, config)
                    with mock.patch.object(mixed_adapters, "_plan", lambda *_: "forced PEFT hooks"):
                        return team.generate(prompts, config)

                name = f"agents{agents}_rows{rows}_new{new_tokens}"
                results[name] = time_ab(run, cli.reps, ("peft", "sliced"), "slicing the adapter rows")
                print(name, json.dumps({k: round(v, 3) for k, v in results[name].items()}), flush=True)
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
