"""Agents that act, with MAGRPO: one agent calls a calculator, the other answers from what it said (docs/tools.md).

The tool relay (`trl_marl.envs.tool_relay`): "What is a * b?" for two-digit a and b. Agent 0 has the `calculator`
tool (TRL's `tools`, given per agent: `MAGRPOTrainer(tools=[[calculator], None])`); within its turn it may call it,
read the result and answer. Agent 1 has no tools and gives the final answer at turn 2 from agent 0's answer. The team
reward pays the right product at each turn, so the team wins only when the tool is called right and its result is
passed on. Tool results are never trained on (TRL's tool mask).

    accelerate launch examples/magrpo_tools.py --config examples/configs/magrpo_tools.yaml

`--tools calculator python` gives agent 1 the sandboxed Python tool as well (`none` for no tools).

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct` (its chat template cannot write
tool calls: trl-marl gives the agents with tools a ChatML tool template, `trl_marl.tools.CHATML_TOOL_TEMPLATE`):

    python examples/magrpo_tools.py --config examples/configs/magrpo_tools.yaml \\
        --model_name_or_path smollm2-135m-instruct --max_steps 2 --per_device_train_batch_size 4 \\
        --num_generations 2 --gradient_accumulation_steps 1 --output_dir /tmp/magrpo-tools-real

The setup (rows, environment, team reward, tools, trainer) is `trl_marl.scripts.magrpo`, also run by
`trl-marl magrpo --config examples/configs/magrpo_tools.yaml`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.magrpo import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train and save the tool-using team (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("tool_relay", argv, prog="python examples/magrpo_tools.py", description=__doc__)


if __name__ == "__main__":
    main()
