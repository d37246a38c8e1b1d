"""Cooperative writing with MAGRPO (arXiv 2508.04652): two agents summarize and expand the same text together.

Agent 0 writes a concise summary, agent 1 a more detailed expansion; the team is rewarded for the structure of
the *pair* (lengths, their ratio, lexical diversity, transitions, style consistency, ROUGE-L to the reference).

Needs the `rewards` extra for the ROUGE-L term (`rouge-score`): `pip install "trl-marl[rewards]"` (from a clone:
`pip install -e ".[rewards]"`).

    accelerate launch examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct --data_files posts.jsonl`, a local
.jsonl/.json/.csv/.parquet file with the columns `text` and `reference` (or TL;DR's `prompt` and `completion`), or
`--dataset_name trl-marl/team_writing`, the texts that ship with trl-marl (standard-library docstrings; splits
train and heldout):

    python examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml \\
        --model_name_or_path smollm2-135m-instruct --data_files posts.jsonl --max_steps 2 \\
        --per_device_train_batch_size 2 --num_generations 2 --gradient_accumulation_steps 1 \\
        --max_completion_length 32 --output_dir /tmp/magrpo-writing-real

Offline smoke run (tiny toy model, synthetic rows, no network):

    python examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml \\
        --model_name_or_path toy --max_steps 2 --per_device_train_batch_size 4 --num_generations 2 \\
        --max_completion_length 8 --use_peft false --output_dir /tmp/magrpo-writing

Add `--centralized true` to train the baseline instead: one model writes every agent's part in tagged sections,
on the same team reward (does the task need a team at all?). The setup (data, environment, team reward, trainer)
is `trl_marl.scripts.magrpo`, also run by `trl-marl magrpo --config examples/configs/magrpo_writing.yaml`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.magrpo import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train and save the writing team (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("writing", argv, prog="python examples/magrpo_writing.py", description=__doc__)


if __name__ == "__main__":
    main()
