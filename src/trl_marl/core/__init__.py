"""Pure tensor math for MAGRPO and multi-agent PPO: returns, advantages and token losses.

Every function is one equation of a paper (named in its docstring) and holds no trainer state.
"""

from .advantages import (
    ADVANTAGE_MODES,
    JOINT_MODES,
    agent_returns_from_joint,
    batch_scaled_advantages,
    early_stop_returns,
    group_relative_advantages,
    joint_action_indices,
    masked_mean,
    masked_var,
    nan_std,
    tree_returns,
    whiten,
    whiten_jointly,
)
from .losses import (
    IMPORTANCE_SAMPLING_LEVELS,
    SUPPORTED_LOSS_TYPES,
    aggregate_token_loss,
    clipped_surrogate,
    completion_mask_from_eos,
    entropy_from_logits,
    k1_kl,
    k3_kl,
    selective_log_softmax,
)

__all__ = [
    "ADVANTAGE_MODES",
    "IMPORTANCE_SAMPLING_LEVELS",
    "JOINT_MODES",
    "SUPPORTED_LOSS_TYPES",
    "agent_returns_from_joint",
    "aggregate_token_loss",
    "batch_scaled_advantages",
    "clipped_surrogate",
    "completion_mask_from_eos",
    "early_stop_returns",
    "entropy_from_logits",
    "group_relative_advantages",
    "joint_action_indices",
    "k1_kl",
    "k3_kl",
    "masked_mean",
    "masked_var",
    "nan_std",
    "selective_log_softmax",
    "tree_returns",
    "whiten",
    "whiten_jointly",
]
