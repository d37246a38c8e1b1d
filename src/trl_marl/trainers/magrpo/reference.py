"""GRPO's periodic reference sync (`sync_ref_model`, TR-DPO) for a team: the callback that moves each frozen reference
copy toward its policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback

from ..distributed import full_tensor

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from ...team import AgentTeam

__all__ = ["ReferenceSync"]


class ReferenceSync(TrainerCallback):
    """GRPO's `sync_ref_model` (TR-DPO, arXiv 2404.09656) for a team: every `steps` optimizer steps each frozen
    reference copy moves toward its policy, ``theta_ref <- alpha * theta + (1 - alpha) * theta_ref``.

    Args:
        team: The [`AgentTeam`]; its `ref_models[i]` (frozen copies) follow `models[i]`.
        steps: `ref_model_sync_steps`.
        alpha: `ref_model_mixup_alpha`.
    """

    @staticmethod
    def check(team: AgentTeam) -> None:
        """Refuse a team with no reference copy to move (its agents' references are base models under adapters)."""
        if any(adapter is not None for adapter in team.agent_adapter):
            raise ValueError(
                "`sync_ref_model=True` needs a reference copy to move, but agents with a LoRA adapter take the base "
                "model under the disabled adapter as their reference (as GRPOTrainer with PEFT, which refuses it "
                "too). Use `sync_ref_model=False`, or a team without adapters (`team_mode='models'`)."
            )

    def __init__(self, team: AgentTeam, steps: int, alpha: float) -> None:
        self.team = team
        self.steps = steps
        self.alpha = alpha

    @torch.no_grad()
    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        if state.global_step % self.steps != 0:
            return
        for model, ref in zip(self.team.models, self.team.ref_models):
            if ref is None:
                continue
            for ref_param, param in zip(ref.parameters(), model.parameters()):
                policy = full_tensor(param.detach())  # FSDP2: the shards of every process, gathered
                ref_param.mul_(1.0 - self.alpha).add_(policy.to(ref_param.device), alpha=self.alpha)
