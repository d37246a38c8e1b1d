"""MAGRPO under mixed precision: the old-policy and reference log-probs come from the same autocast computation as
the training forward's (as in TRL's `GRPOTrainer`).

With `bf16=True` (CPU autocast) and float32 weights, the training forward runs under the accelerator's autocast. The
no-grad forwards that score the old policy (`num_iterations > 1`) and the reference (`beta > 0`) must too: before any
update the importance ratio is then exactly 1 and the KL exactly 0. Outside autocast they were the float32 log-probs,
0.01-0.04 nats per token away from the training forward's.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from helpers import spread_reward
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv

warnings.filterwarnings("ignore")


class Recording(MAGRPOTrainer):
    """Records, at every agent loss, the training log-probs and the old-policy and reference log-probs."""

    def compute_agent_loss(self, agent_index: int, logps: torch.Tensor, inputs: dict[str, Any]) -> Any:
        mask = inputs["batches"][agent_index].completion_mask.bool()
        old, ref = inputs["old_logps"], inputs["ref_logps"]
        with torch.autocast("cpu", enabled=False):  # the float32 log-probs of the same samples, for comparison
            fp32 = self.team.policy_logps(agent_index, inputs["batches"][agent_index])
        self.recorded.append((logps.detach()[mask], old[agent_index][mask], ref[agent_index][mask], fp32[mask]))
        return super().compute_agent_loss(agent_index, logps, inputs)


@pytest.mark.parametrize(("mode", "backward_per_agent"), [("models", True), ("adapters", False)])
def test_old_and_reference_log_probs_under_the_training_autocast(target_model_dir, tmp_path, mode, backward_per_agent):
    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"),
        num_agents=2,
        num_generations=4,
        per_device_train_batch_size=8,
        max_completion_length=4,
        learning_rate=1e-2,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        bf16=True,
        use_cpu=True,
        num_iterations=2,
        beta=0.04,
        backward_per_agent=backward_per_agent,
        team_mode=mode,
    )
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"]) if mode == "adapters" else None
    trainer = Recording(
        model=target_model_dir,
        reward_funcs=spread_reward,
        env=TargetSumEnv(2),
        args=args,
        train_dataset=Dataset.from_dict({"target": [10] * 16}),
        peft_config=peft_config,
    )
    trainer.recorded = []
    assert trainer.accelerator.mixed_precision == "bf16"
    assert all(p.dtype == torch.float32 for p in trainer.team.parameters())  # float32 weights
    trainer.train()
    # the first optimizer step: both agents' losses before any update
    first = trainer.recorded[:2]
    assert len(first) == 2
    for logps, old, ref, fp32 in first:
        assert logps.numel() > 0
        assert (fp32 - logps).abs().max() > 1e-3  # the training forward runs in bf16: autocast is on
        torch.testing.assert_close(old, logps, rtol=0, atol=1e-6)  # the ratio is 1
        torch.testing.assert_close(ref, logps, rtol=0, atol=1e-6)  # the KL is 0
    kl = [h[f"agent_{a}/kl"] for h in trainer.state.log_history for a in range(2) if f"agent_{a}/kl" in h]
    assert kl == pytest.approx([0.0, 0.0], abs=1e-9)
