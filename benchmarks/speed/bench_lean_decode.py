"""Generation time of `AgentTeam.generate` with the lean decoding loop and with `model.generate`.

Each case times `team.generate` on one batch, alternating `team.lean_decode` False / True (A B B A ...) so that a
busy neighbour on the machine slows both alike, and reports the median wall time (`time.perf_counter`) and CPU time
of this process (`time.process_time`) per call, in milliseconds. Both settings must draw the same samples from the
same seed (checked before timing). The minimum over the calls is reported too: on a shared machine it is the
figure least disturbed by other processes.

The model is the 2.6M-parameter toy Qwen2 (hidden 256, 4 layers, pretrained 150 steps on the target-sum task; or
`--model-dir`), a 2-agent team in `models` mode (one model per agent: one `generate` call per agent) or `adapters`
mode (LoRA r=8 on q/v, one adapter per agent: one mixed-adapter call), one 6-token `TargetSumEnv` prompt per agent
sampled R times (R = rows per agent), the MAGRPO trainer's own generation config (`magrpo.schedule.generation_config`,
MAGRPOConfig's sampling defaults) with `min_new_tokens = max_new_tokens` so that every call decodes T tokens.
Prompts are shared through one prefill (`share_prompt_prefill`, the team default) in both settings.

Run (1 thread; a few minutes)::

    PYTHONPATH=src python benchmarks/speed/bench_lean_decode.py --model-dir /tmp/model-large --reps 30 --out l.json
"""

from __future__ import annotations

import argparse
from typing import Any

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
    add_generation_arguments(parser, rows="8,32")
    parser.add_argument("--modes", default="models,adapters", help="comma-separated team modes")
    cli, model_dir, results = start(parser)

    for mode in cli.modes.split(","):
        team = lora_team(model_dir, 2, mode)
        for new_tokens in ints(cli.new_tokens):
            config = fixed_length_config(team, new_tokens)
            for rows in ints(cli.rows):
                prompts = target_prompts(2, rows)

                def run(lean: bool, team: Any = team, prompts: Any = prompts, config: Any = config) -> Any:
                    team.lean_decode = lean
                    torch.manual_seed(0)
                    return team.generate(prompts, config)

                report(results, f"{mode}_rows{rows}_new{new_tokens}",
                       time_ab(run, cli.reps, ("generate", "lean"), "the lean loop"))
    write_results(cli.out, results)


if __name__ == "__main__":
    main()
