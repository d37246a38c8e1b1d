"""Multi-agent PPO under mixed precision: the rollout's old log-probs, reference log-probs and values come from the
same autocast computation as the update's forward of the prepared policies and value models.

With `bf16=True` (CPU autocast) and float32 weights, the first micro-step of the first PPO epoch has not updated
anything yet: its new log-probs must equal the rollout's (ratio 1, `approxkl` 0) and its value predictions the old
values. Outside autocast the rollout's were the float32 ones.
"""

from __future__ import annotations

import warnings
from copy import copy as shallow_copy
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.trainers.ppo.samples import forward_targets

warnings.filterwarnings("ignore")


def spread_reward(prompts, completions, **kwargs) -> list[float]:
    return [float(sum(map(ord, str(c))) % 7) for c in completions]


class Recording(MultiAgentPPOTrainer):
    """Records, at every slot's loss, its new and old log-probs and values on the response positions."""

    def compute_agent_loss(
        self, slot: int, new_logprobs: torch.Tensor, values: torch.Tensor, rollout: Any, idx: torch.Tensor
    ) -> Any:
        policy, value = rollout.policy_mask[idx], rollout.value_mask[idx]
        self.recorded.append(
            (
                new_logprobs.detach()[policy],
                rollout.logprobs[idx][policy],
                values.detach()[value],
                rollout.values[idx][value],
            )
        )
        return super().compute_agent_loss(slot, new_logprobs, values, rollout, idx)


@pytest.mark.parametrize(("mode", "backward_per_agent"), [("models", True), ("adapters", False)])
def test_rollout_forwards_under_the_update_autocast(target_model_dir, tmp_path, mode, backward_per_agent):
    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / "out"),
        num_agents=2,
        per_device_train_batch_size=4,
        num_mini_batches=1,
        num_ppo_epochs=1,
        total_episodes=4,
        response_length=4,
        stop_token="eos",
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        num_sample_generations=0,
        disable_tqdm=True,
        seed=0,
        temperature=0.7,
        gradient_checkpointing=False,
        kl_coef=0.05,
        bf16=True,
        use_cpu=True,
        team_mode=mode,
        backward_per_agent=backward_per_agent,
    )
    peft = LoraConfig(r=4, target_modules=["q_proj", "v_proj"]) if mode == "adapters" else None
    trainer = Recording(
        args=args,
        model=target_model_dir,
        env=TargetSumEnv(2),
        reward_funcs=spread_reward,
        train_dataset=Dataset.from_dict({"target": [10] * 8}),
        peft_config=peft,
    )
    trainer.recorded = []
    fp32: list[torch.Tensor] = []
    original = trainer._prepare_ppo_targets

    def also_in_float32(rollouts):  # the same rollout's log-probs outside autocast, for comparison
        for s, ro in enumerate(rollouts):
            if ro is not None:
                copy = shallow_copy(ro)
                forward_targets(copy, s, trainer.team, trainer.wrapper.value_model(s), trainer.args)
                fp32.append(copy.logprobs[copy.policy_mask])
        return original(rollouts)

    trainer._prepare_ppo_targets = also_in_float32
    assert trainer.accelerator.mixed_precision == "bf16"
    assert all(p.dtype == torch.float32 for p in trainer.wrapper.parameters())
    trainer.train()
    first = trainer.recorded[:2]  # both slots' first micro-step: before any optimizer step
    assert len(first) == 2 and len(fp32) == 2
    for (new, old, values, old_values), float32 in zip(first, fp32, strict=True):
        assert new.numel() > 0 and values.numel() > 0
        assert (float32 - new).abs().max() > 1e-3  # the update's forward runs in bf16: autocast is on
        torch.testing.assert_close(old, new, rtol=0, atol=1e-6)  # the ratio is 1
        torch.testing.assert_close(old_values, values, rtol=0, atol=1e-6)
