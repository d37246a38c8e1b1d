"""`PPOTrainer` and `PPOConfig`: the drop-in replacement for TRL 1.12's `trl.experimental.ppo` PPO.

It is [`MultiAgentPPOTrainer`] with one agent, one turn, a tokenized `input_ids` dataset and a reward model.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel, TrainerCallback

from ...envs.base import TokenizedPromptEnv
from .config import MultiAgentPPOConfig, PPOConfig
from .trainer import MultiAgentPPOTrainer

__all__ = ["PPOConfig", "PPOTrainer"]


class PPOTrainer(MultiAgentPPOTrainer):
    """Drop-in replacement for TRL 1.12's `trl.experimental.ppo.PPOTrainer` (deleted in TRL 1.13).

    Same constructor, config fields and defaults, dataset format (tokenized `input_ids`), model types (a causal-LM
    policy; reward and value models as `AutoModelForSequenceClassification` with `num_labels=1`), loop and logged
    metric names. `ref_model=None` with a `peft_config` uses the adapter-disabled policy as reference.
    `save_model` writes the policy alone (loadable with `AutoModelForCausalLM.from_pretrained`). As in TRL 1.12,
    gradients are not clipped (`max_grad_norm` is unused).

    Two deliberate differences from TRL 1.12 (measured in `benchmarks/README.md`): with `num_mini_batches > 1`,
    TRL 1.12 averages its per-micro-batch statistics over slots it never fills (so `val/ratio` reads about
    1 / num_mini_batches too low); this trainer averages the micro-batches it ran. And TRL 1.12 takes an optimizer
    step at every micro-batch of the update that consumes the dataloader's last batch; this one always steps once
    every `gradient_accumulation_steps` micro-batches.

    Example:

    ```python
    # from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl_marl import PPOConfig, PPOTrainer

    trainer = PPOTrainer(args=PPOConfig(output_dir="ppo"), processing_class=tokenizer, model=policy,
                         ref_model=ref_policy, reward_model=reward_model, value_model=value_model,
                         train_dataset=dataset)
    trainer.train()
    ```
    """

    _tag_names = ["trl", "trl-marl", "ppo"]
    _name = "PPO"
    _paper = {"title": "Fine-Tuning Language Models from Human Preferences", "id": "1909.08593"}

    def __init__(
        self,
        args: PPOConfig,
        processing_class: Any,
        model: PreTrainedModel,
        ref_model: PreTrainedModel | None,
        reward_model: nn.Module,
        train_dataset: Any,
        value_model: nn.Module | None = None,
        data_collator: Any = None,
        eval_dataset: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        callbacks: list[TrainerCallback] | None = None,
        peft_config: Any = None,
    ) -> None:
        if not isinstance(args, MultiAgentPPOConfig):
            raise TypeError(f"`args` must be a PPOConfig, got {type(args).__name__}.")
        if args.num_agents != 1 or args.num_turns != 1:
            raise ValueError("PPOTrainer trains one agent for one turn; use MultiAgentPPOTrainer for teams.")
        columns = getattr(train_dataset, "column_names", None) or list(train_dataset[0])
        if "input_ids" not in columns:
            raise ValueError(
                f"PPOTrainer expects a tokenized dataset with an `input_ids` column, got columns {list(columns)}: "
                "map it first, e.g. `dataset.map(lambda x: tokenizer(x['prompt']), remove_columns=...)`."
            )
        if processing_class is None or getattr(processing_class, "pad_token_id", None) is None:
            raise ValueError(
                "`processing_class` must be a tokenizer with a pad token (e.g. `tokenizer.add_special_tokens("
                "{'pad_token': '[PAD]'})`)."
            )
        super().__init__(
            args=args,
            model=model,
            train_dataset=train_dataset,
            env=TokenizedPromptEnv(1),
            reward_model=reward_model,
            value_model=value_model,
            processing_class=processing_class,
            ref_model=ref_model,
            eval_dataset=eval_dataset,
            data_collator=data_collator,
            optimizers=optimizers,
            callbacks=callbacks,
            peft_config=peft_config,
        )

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        """Save the policy alone at the top of `output_dir` (what TRL's PPOTrainer writes)."""
        output_dir = output_dir if output_dir is not None else self._output_dir()
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        self.team.policy(0).save_pretrained(output_dir)
        self.team.tokenizers[0].save_pretrained(output_dir)
        from transformers.trainer import TRAINING_ARGS_NAME

        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        self.create_model_card(output_dir=output_dir)


