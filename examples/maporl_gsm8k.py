"""MAPoRL on GSM8K (Park et al., arXiv 2502.18439): a team of LLMs debates math problems, trained with multi-agent PPO.

Three agents answer each question, then revise their answers for two more turns after reading each other's answers
(collaborative debate, Du et al. 2024; `trl_marl.envs.debate.DebateEnv`). Every answer is scored by a rule-based
verifier (the final `\\boxed{}` number against GSM8K's gold answer), and each agent is rewarded with MAPoRL's
influence-aware verification reward: its own score averaged with the discounted scores of the team's later answers,
plus the alpha/beta collaboration incentives (Definition 1 and Tables 1-2 of the paper). The agents are one
Phi-3-mini base model with one LoRA adapter per agent; `--load_in_4bit true` makes it QLoRA, as in the paper (the
value models are then 4-bit copies of the base with LoRA adapters and a trainable head).

No extra is needed for the rule-based verifier; `--load_in_4bit true` (QLoRA) needs the `qlora` extra:
`pip install "trl-marl[qlora]"` (from a clone: `pip install -e ".[qlora]"`).

    accelerate launch examples/maporl_gsm8k.py --config examples/configs/maporl_gsm8k.yaml

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct --data_files train.jsonl
--eval_data_files test.jsonl` (or `--eval_split none`), local .jsonl/.json/.csv/.parquet files with GSM8K's columns
`question` and `answer` (a solution ending in `#### <number>`); the config's Phi-3 LoRA targets (`qkv_proj`,
`gate_up_proj`) are fitted to the model's separate projections, with a line that says so:

    python examples/maporl_gsm8k.py --config examples/configs/maporl_gsm8k.yaml \\
        --model_name_or_path smollm2-135m-instruct --dtype float32 --data_files train.jsonl --eval_split none \\
        --num_agents 2 --num_turns 2 --per_device_train_batch_size 2 --gradient_accumulation_steps 1 \\
        --total_episodes 4 --num_ppo_epochs 1 --response_length 32 --output_dir /tmp/maporl-gsm8k-real

Offline smoke run (a tiny toy model debating two-number additions, `Q:12+34=46 45 47?A:`; no network):

    python examples/maporl_gsm8k.py --config examples/configs/maporl_gsm8k.yaml --model_name_or_path toy:debate \\
        --use_peft false --load_in_4bit false --per_device_train_batch_size 4 \\
        --gradient_accumulation_steps 1 --total_episodes 8 --num_ppo_epochs 1 --response_length 4 \\
        --max_eval_samples 16 --output_dir /tmp/maporl-toy

The setup (models, verifier, influence-aware reward, trainer) is `trl_marl.scripts.maporl`, also run by
`trl-marl maporl gsm8k --config ...`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trl_marl.scripts.maporl import run_example


def main(argv: Sequence[str] | None = None) -> Any:
    """Train, save and evaluate the GSM8K debate (`argv`: the command line's options; default: `sys.argv[1:]`)."""
    return run_example("gsm8k", argv, prog="python examples/maporl_gsm8k.py", description=__doc__)


if __name__ == "__main__":
    main()
