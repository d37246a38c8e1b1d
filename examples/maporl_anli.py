"""MAPoRL on ANLI (Park et al., arXiv 2502.18439): a team of LLMs debates natural language inference.

Three agents read a premise and a hypothesis and answer entailment, neutral or contradiction, then revise for two
more turns after reading each other's answers (collaborative debate, Du et al. 2024). A rule-based verifier checks
the final label of every answer against the gold label, and each agent is trained with multi-agent PPO on MAPoRL's
influence-aware verification reward with the alpha/beta collaboration incentives. The agents are one
Qwen2.5-3B-Instruct base model with one LoRA adapter per agent; `--load_in_4bit true` makes it QLoRA.

The paper trains its verifier on the first 10,000 ANLI training rows and MAPoRL on the next 12,800
(`skip_train_rows: 10000`, `max_train_samples: 12800` in the config, over rounds 1-3 concatenated).

    accelerate launch examples/maporl_anli.py --config examples/configs/maporl_anli.yaml

Offline smoke run (the toy debate model on two-number additions; no network):

    python examples/maporl_anli.py --config examples/configs/maporl_anli.yaml --model_name_or_path toy \\
        --use_peft false --load_in_4bit false --per_device_train_batch_size 4 \\
        --gradient_accumulation_steps 1 --total_episodes 8 --num_ppo_epochs 1 --response_length 4 \\
        --max_eval_samples 16 --output_dir /tmp/maporl-anli-toy

The model loading, reward and training code is shared with `maporl_gsm8k.py` (in this folder).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from maporl_gsm8k import DebateScriptArguments, train, wants_eval
from trl import ModelConfig, TrlParser

from trl_marl import MultiAgentPPOConfig
from trl_marl.data import load_anli
from trl_marl.envs.debate import ANLI_ANSWER_FORMAT, DebateEnv
from trl_marl.rewards.verifier import AnswerVerifier
from trl_marl.toy import is_toy_name


@dataclass
class ANLIScriptArguments(DebateScriptArguments):
    """Data settings of the ANLI example."""

    dataset_name: str = field(default="facebook/anli", metadata={"help": "The ANLI dataset (Hub name or path)."})
    anli_rounds: list[int] = field(default_factory=lambda: [1], metadata={"help": "ANLI rounds to use (1, 2, 3)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to train on: train, dev or test."})
    skip_train_rows: int = field(
        default=0, metadata={"help": "Skip the first rows of the training split (MAPoRL: 10,000, the verifier's)."}
    )


def main(script_args: ANLIScriptArguments, training_args: MultiAgentPPOConfig, model_args: ModelConfig) -> Any:
    verifier = AnswerVerifier(task="label")  # the last entailment/neutral/contradiction of an answer vs. the gold
    env = DebateEnv(num_agents=training_args.num_agents, num_turns=training_args.num_turns,
                    chat=script_args.chat_prompts, answer_format=ANLI_ANSWER_FORMAT, history=script_args.history,
                    show_verifier_scores=script_args.show_verifier_scores, verifier=verifier)
    train_dataset = eval_dataset = None
    if not is_toy_name(model_args.model_name_or_path):
        # question (premise + hypothesis + the three labels), answer ("entailment", ...), premise, hypothesis, label
        train_dataset = load_anli(round=script_args.anli_rounds, split=script_args.dataset_split,
                                  dataset_name=script_args.dataset_name)
        start = min(script_args.skip_train_rows, len(train_dataset))
        stop = len(train_dataset) if script_args.max_train_samples is None else start + script_args.max_train_samples
        train_dataset = train_dataset.select(range(start, min(stop, len(train_dataset))))
        if wants_eval(script_args):
            eval_dataset = load_anli(round=script_args.anli_rounds, split=script_args.eval_split,
                                     max_rows=script_args.max_eval_samples, dataset_name=script_args.dataset_name)
    return train(script_args, training_args, model_args, env, verifier, train_dataset, eval_dataset)


if __name__ == "__main__":
    parser = TrlParser((ANLIScriptArguments, MultiAgentPPOConfig, ModelConfig))
    main(*parser.parse_args_and_config())
