"""Mixed-adapter generation time of an `adapters` team: LoRA on row slices vs PEFT's per-layer index lists.

`AgentTeam.generate` gives every agent's rows to one batched call with one adapter name per row. Its LoRA layers
either apply each adapter to its contiguous slice of rows (`trl_marl.team.mixed_adapters.sliced_adapter_rows`, the
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

    PYTHONPATH=src python benchmarks/speed/bench_mixed_adapters.py --model-dir /tmp/model-large --reps 30 --out m.json
"""

from __future__ import annotations

import argparse
from typing import Any
from unittest import mock

import torch
from ab_timing import (
    add_generation_arguments,
    fixed_length_config,
    ints,
    lora_team,
    report,
    start,
    target_prompts,
    time_ab,
    write_results,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_generation_arguments(parser, rows="8")
    parser.add_argument("--agents", default="2,4", help="comma-separated team sizes")
    cli, model_dir, results = start(parser)

    from trl_marl.team import mixed_adapters

    for agents in ints(cli.agents):
        team = lora_team(model_dir, agents)
        team.eval()
        names = [team.agent_adapter[a] for a in range(agents) for _ in range(2)]
        reason = mixed_adapters.sliced_adapter_rows_unsupported(team.models[0], names)
        if reason is not None:
            raise AssertionError(f"the team's batches would not be sliced: {reason}")
        for new_tokens in ints(cli.new_tokens):
            config = fixed_length_config(team, new_tokens)
            for rows in ints(cli.rows):
                prompts = target_prompts(agents, rows)

                def run(sliced: bool, team: Any = team, prompts: Any = prompts, config: Any = config) -> Any:
                    torch.manual_seed(0)
                    if sliced:
                        return team.generate(prompts, config)
                    with mock.patch.object(mixed_adapters, "_plan", lambda *_: "forced PEFT hooks"):
                        return team.generate(prompts, config)

                report(results, f"agents{agents}_rows{rows}_new{new_tokens}",
                       time_ab(run, cli.reps, ("peft", "sliced"), "slicing the adapter rows"))
    write_results(cli.out, results)


if __name__ == "__main__":
    main()
