"""MAPoRL on ANLI (Park et al., arXiv 2502.18439): a team of LLMs debates natural language inference.

Three agents read a premise and a hypothesis and answer entailment, neutral or contradiction, then revise for two
more turns after reading each other's answers (collaborative debate, Du et al. 2024). A rule-based verifier checks
the final label of every answer against the gold label, and each agent is trained with multi-agent PPO on MAPoRL's
influence-aware verification reward with the alpha/beta collaboration incentives. The agents are one
Qwen2.5-3B-Instruct base model with one LoRA adapter per agent; `--load_in_4bit true` makes it QLoRA.

The paper trains its verifier on the first 10,000 ANLI training rows and MAPoRL on the next 12,800
(`skip_train_rows: 10000`, `max_train_samples: 12800` in the config, over rounds 1-3 concatenated).

No extra is needed for the rule-based verifier; `--load_in_4bit true` (QLoRA) needs the `qlora` extra:
`pip install "trl-marl[qlora]"` (from a clone: `pip install -e ".[qlora]"`).

    accelerate launch examples/maporl_anli.py --config examples/configs/maporl_anli.yaml

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct --data_files train.jsonl
--eval_data_files test.jsonl` (or `--eval_split none`), local .jsonl/.json/.csv/.parquet files with ANLI's columns
`premise`, `hypothesis` and `label` (0 entailment, 1 neutral, 2 contradiction):

    python examples/maporl_anli.py --config examples/configs/maporl_anli.yaml \\
        --model_name_or_path smollm2-135m-instruct --dtype float32 --data_files train.jsonl --eval_split none \\
        --skip_train_rows 0 --num_agents 2 --num_turns 2 --per_device_train_batch_size 2 \\
        --gradient_accumulation_steps 1 --total_episodes 4 --num_ppo_epochs 1 --response_length 32 \\
        --output_dir /tmp/maporl-anli-real

Offline smoke run (the toy debate model on two-number additions; no network):

    python examples/maporl_anli.py --config examples/configs/maporl_anli.yaml --model_name_or_path toy:debate \\
        --use_peft false --load_in_4bit false --per_device_train_batch_size 4 \\
        --gradient_accumulation_steps 1 --total_episodes 8 --num_ppo_epochs 1 --response_length 4 \\
        --max_eval_samples 16 --output_dir /tmp/maporl-anli-toy

The setup (models, verifier, influence-aware reward, trainer) is `trl_marl.scripts.maporl`, also run by
`trl-marl maporl anli --config ...`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.maporl import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train, save and evaluate the ANLI debate (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("anli", argv, prog="python examples/maporl_anli.py", description=__doc__)


if __name__ == "__main__":
    main()
