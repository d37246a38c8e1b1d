"""A PPO training script written for TRL 1.12's `trl.experimental.ppo` (the PPO example of TRL's docs, shrunk).

It does not know about trl-marl: `tests/trainers/ppo/test_ppo_trainer.py` runs it after replacing only the import
line of `PPOConfig, PPOTrainer` with `from trl_marl import PPOConfig, PPOTrainer`, which is the whole migration a
TRL 1.12 user has to do. Unchanged, it runs with TRL 1.12 itself.

Usage: python trl112_ppo_script.py MODEL_DIR OUTPUT_DIR LOG_JSON

MODEL_DIR holds a causal LM and its tokenizer (the policy, and the backbone of the reward and value models);
the trained policy is saved to OUTPUT_DIR and the trainer's `log_history` is written to LOG_JSON.
"""

from __future__ import annotations

import json
import sys

import torch
from datasets import Dataset
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    PreTrainedTokenizerFast,
)
from trl.experimental.ppo import PPOConfig, PPOTrainer


def main(model_dir: str, output_dir: str, log_json: str) -> None:
    torch.set_num_threads(1)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.add_special_tokens({"pad_token": "[PAD]"})

    policy = AutoModelForCausalLM.from_pretrained(model_dir)
    ref_policy = AutoModelForCausalLM.from_pretrained(model_dir)
    reward_model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    value_model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)

    raw = Dataset.from_dict({"prompt": [f"Q:{a}+{(7 * a) % 50}=A:" for a in range(48)]})

    def tokenize(element: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        outputs = tokenizer(element["prompt"], padding=False)
        return {"input_ids": outputs["input_ids"]}

    dataset = raw.map(tokenize, batched=True, remove_columns=raw.column_names)
    train_dataset = dataset.select(range(40))
    eval_dataset = dataset.select(range(40, 48))

    training_args = PPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        gradient_accumulation_steps=2,
        num_ppo_epochs=2,
        num_mini_batches=2,
        total_episodes=32,
        response_length=5,
        stop_token="eos",
        missing_eos_penalty=1.0,
        kl_coef=0.05,
        learning_rate=3e-4,
        num_sample_generations=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        seed=0,
    )
    trainer = PPOTrainer(
        args=training_args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        value_model=value_model,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )
    trainer.train()
    trainer.save_model(training_args.output_dir)
    trainer.generate_completions()

    with open(log_json, "w") as f:
        json.dump(trainer.state.log_history, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
