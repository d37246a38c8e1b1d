"""Cooperative coding with MAGRPO (arXiv 2508.04652): a helper-function agent and a main-function agent.

Agent 0 writes an auxiliary function, agent 1 the entry point, which may call it. The joint program runs against
the task's unit tests in a sandbox; between turns both agents see the test feedback and revise.

Needs the `rewards` extra for the CodeBLEU term (`codebleu`): `pip install "trl-marl[rewards]"` (from a clone:
`pip install -e ".[rewards]"`).

    accelerate launch examples/magrpo_coding.py --config examples/configs/magrpo_coding.yaml

The data: HumanEval by default (`--dataset_name openai/openai_humaneval`; `google-research-datasets/mbpp` for MBPP),
`--dataset_name trl-marl/team_coding` for the problems written for small models that ship with trl-marl (no Hub;
`--dataset_split train|heldout|all`, `--dataset_config 1` for the level-1 problems only), or a local
.jsonl/.json/.csv/.parquet file in HumanEval's schema (`--data_files problems.jsonl`).

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct --dataset_name trl-marl/team_coding`:

    python examples/magrpo_coding.py --config examples/configs/magrpo_coding.yaml \\
        --model_name_or_path smollm2-135m-instruct --dataset_name trl-marl/team_coding --dataset_config 1 \\
        --max_steps 2 --per_device_train_batch_size 2 --num_generations 2 --gradient_accumulation_steps 1 \\
        --max_completion_length 64 --output_dir /tmp/magrpo-coding-real

Offline smoke run (tiny toy model, synthetic HumanEval-format rows, no network):

    python examples/magrpo_coding.py --config examples/configs/magrpo_coding.yaml \\
        --model_name_or_path toy --max_steps 2 --per_device_train_batch_size 4 --num_generations 2 \\
        --max_completion_length 8 --use_peft false --output_dir /tmp/magrpo-coding

Add `--centralized true` to train the baseline instead: one model writes every agent's part in tagged sections,
on the same team reward (does the task need a team at all?). The setup (data, environment, team reward, trainer)
is `trl_marl.scripts.magrpo`, also run by `trl-marl magrpo --config examples/configs/magrpo_coding.yaml`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.magrpo import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train and save the coding team (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("coding", argv, prog="python examples/magrpo_coding.py", description=__doc__)


if __name__ == "__main__":
    main()
