"""Pure tensor math for MAGRPO and multi-agent PPO: returns, advantages, token losses and MAPoRL's rewards.

Every function is one equation of a paper (named in its docstring) and holds no trainer state. The advantage
estimators are a registry (`core.advantages.register_advantage_estimator`): the name of each row's mode is what
`MAGRPOConfig.advantage_mode` takes. The equations of the
two papers this package implements, and of the works they build on:

| paper | equation | function |
|---|---|---|
| MAGRPO (arXiv 2508.04652) | joint actions, aligned or cross (G or G^n per node) | `joint_action_indices` |
| MAGRPO | a completion's return: mean over the joint actions containing it | `agent_returns_from_joint` |
| MAGRPO | multi-turn return R_t = r_t + gamma * mean(children's R_{t+1}) | `tree_returns` |
| MAGRPO | early stop: the remaining turns' discounted reward of a finished node | `early_stop_returns` |
| MAGRPO (`advantage_mode="mean"`); Dr. GRPO | group-relative advantage A = R - mean(R) | `mean_advantages` |
| GRPO (2402.03300) Sec. 4.1.2 (`"std"`) | A = (R - mean R) / (std R + eps) | `std_advantages` |
| MARLOO (CoMLRL); RLOO (2402.14740) Eq. 5 (`"loo"`) | A = R - mean of the others' R | `loo_advantages` |
| MAREINFORCE (CoMLRL); REINFORCE (`"raw"`) | no baseline: A = R | `raw_advantages` |
| MAReMax (CoMLRL's group-max, not ReMax's greedy baseline; `"max"`) | A = R - max(R) | `max_advantages` |
| GRPO (`scale_rewards="batch"`; `"batch"`) | A = (R - mean R) / std of all team returns | `batch_advantages` |
| AT-GRPO (2510.11062) (`"agent_turn"`) | (R~ - mean R~) / std R~, R~ = alpha R + R^loc | `agent_turn_advantages` |
| AT-GRPO | an agent's local return: its own local reward credited to its samples | `agent_local_returns_from_joint` |
| Dr. MAS (2602.08847) (`"agent_norm"`) | (R - mean_a) / std_a, agent a's episode | `agent_norm_advantages` |
| PPO (arXiv 1707.06347, Eq. 7), GRPO Eq. 3, GSPO Eq. 7 | clipped surrogate per token | `clipped_surrogate` |
| GRPO Eq. 3, Dr. GRPO Eq. 3, DAPO Eq. 8 | token aggregation of the loss (`loss_type`) | `aggregate_token_loss` |
| GRPO Eq. 3, GSPO Eq. 7 | importance ratio pi / pi_old per token or sequence (log) | `log_importance_weights` |
| Beyond the 80/20 rule (arXiv 2506.01939) | gradient on the highest-entropy tokens only | `high_entropy_mask` |
| DeepSeek-V3.2 (arXiv 2512.02556) Eq. 9 | off-policy sequence mask | `off_policy_sequence_mask` |
| Skywork-OR1 (arXiv 2505.22312) | entropy bonus, adaptive coefficient | `entropy_bonus`, `adaptive_entropy_coef` |
| GRPO Eq. 4 (Schulman 2020) | k3 KL estimator | `k3_kl` |
| Schulman 2020 | k1 KL estimator | `k1_kl` |
| MAPoRL (arXiv 2502.18439), Definition 1 | influence-aware verification reward | `influence_aware_reward` |
| MAPoRL, Tables 1, 2 | majority correctness (of all, of the others) | `(others_)majority_correctness` |
| MAPoRL, Table 1 | own-revision incentive (alpha0, alpha1) | `revision_incentives` |
| MAPoRL, Table 2 | influence incentive (beta0, beta1) | `influence_incentives` |
| MAPoRL, Tables 1 + 2 | all collaboration incentives | `collaboration_incentives` |
| MAPoRL, Section 3.3 | Definition 1 plus the incentives | `shaped_debate_rewards` |
| MAPoRL's PPO objective; `core.ppo` eq. 1 | per-token KL penalty (k1 or k3) | `kl_penalty` |
| `core.ppo` eq. 2 (Ziegler et al. 2019) | per-token reward: -beta * KL plus the score | `shaped_token_rewards` |
| `core.ppo` eq. 3, GAE (Schulman et al. 2016) | advantages and returns | `generalized_advantage_estimation` |
| `core.ppo` eq. 6 (multi-turn actor-critic, IAC/MAAC) | bootstrap from the next turn's value | `bootstrap_next_turn` |
| `core.ppo` eq. 7 (CoMLRL's actor-critic) | one advantage per response, R - V(s) (any lam) | `turn_level_advantages` |
| `core.ppo` eq. 4 | clipped policy loss | `ppo_policy_loss` |
| `core.ppo` eq. 5 | clipped value loss | `clipped_value_loss` |
| Ziegler et al. 2019, Eq. 2 | the classic loop's KL penalty and variants | `classic_kl_penalty` |
| Ziegler et al. 2019 | adaptive KL coefficient | `adaptive_kl_coef` |

Helpers without an equation of their own: `masked_mean`, `masked_var`, `nan_std`, `whiten`, `whiten_jointly`,
`selective_log_softmax`, `entropy_from_logits`, `head_logprobs` (log-probabilities and entropies through the LM
head, a chunk of positions at a time: `core.lm_head`), `completion_mask_from_eos`, `response_masks`,
`score_positions`, `running_moments_update`. `docs/architecture.md` has the same table with the modules.
"""

from .advantages import (
    ADVANTAGE_MODES,
    JOINT_MODES,
    AdvantageContext,
    AdvantageEstimator,
    advantage_estimator,
    advantage_mode_help,
    advantage_modes,
    agent_local_returns_from_joint,
    agent_norm_advantages,
    agent_returns_from_joint,
    agent_turn_advantages,
    batch_advantages,
    batch_scaled_advantages,
    early_stop_returns,
    estimator_uses_local_returns,
    group_relative_advantages,
    joint_action_indices,
    loo_advantages,
    masked_mean,
    masked_var,
    max_advantages,
    mean_advantages,
    nan_std,
    raw_advantages,
    register_advantage_estimator,
    std_advantages,
    tree_returns,
    whiten,
    whiten_jointly,
)
from .lm_head import DEFAULT_CHUNK_ELEMENTS, chunk_positions, head_logprobs
from .losses import (
    IMPORTANCE_SAMPLING_LEVELS,
    SUPPORTED_LOSS_TYPES,
    VLLM_IMPORTANCE_SAMPLING_MODES,
    adaptive_entropy_coef,
    aggregate_token_loss,
    clipped_surrogate,
    completion_mask_from_eos,
    engine_importance_sampling_ratio,
    entropy_bonus,
    entropy_from_logits,
    high_entropy_mask,
    k1_kl,
    k3_kl,
    log_importance_weights,
    off_policy_sequence_mask,
    selective_log_softmax,
)
from .maporl import (
    collaboration_incentives,
    influence_aware_reward,
    influence_incentives,
    majority_correctness,
    others_majority_correctness,
    revision_incentives,
    shaped_debate_rewards,
)
from .ppo import (
    CLASSIC_KL_PENALTIES,
    INVALID_LOGPROB,
    adaptive_kl_coef,
    bootstrap_next_turn,
    classic_kl_penalty,
    clipped_value_loss,
    generalized_advantage_estimation,
    kl_penalty,
    ppo_policy_loss,
    response_masks,
    running_moments_update,
    score_positions,
    shaped_token_rewards,
    turn_level_advantages,
)

__all__ = [
    "ADVANTAGE_MODES",
    "AdvantageContext",
    "AdvantageEstimator",
    "advantage_estimator",
    "advantage_mode_help",
    "advantage_modes",
    "agent_local_returns_from_joint",
    "agent_norm_advantages",
    "agent_turn_advantages",
    "batch_advantages",
    "estimator_uses_local_returns",
    "loo_advantages",
    "max_advantages",
    "mean_advantages",
    "raw_advantages",
    "register_advantage_estimator",
    "std_advantages",
    "CLASSIC_KL_PENALTIES",
    "IMPORTANCE_SAMPLING_LEVELS",
    "INVALID_LOGPROB",
    "JOINT_MODES",
    "SUPPORTED_LOSS_TYPES",
    "VLLM_IMPORTANCE_SAMPLING_MODES",
    "adaptive_entropy_coef",
    "adaptive_kl_coef",
    "bootstrap_next_turn",
    "agent_returns_from_joint",
    "aggregate_token_loss",
    "batch_scaled_advantages",
    "classic_kl_penalty",
    "clipped_surrogate",
    "log_importance_weights",
    "clipped_value_loss",
    "collaboration_incentives",
    "completion_mask_from_eos",
    "early_stop_returns",
    "engine_importance_sampling_ratio",
    "entropy_bonus",
    "entropy_from_logits",
    "head_logprobs",
    "chunk_positions",
    "DEFAULT_CHUNK_ELEMENTS",
    "high_entropy_mask",
    "generalized_advantage_estimation",
    "group_relative_advantages",
    "influence_aware_reward",
    "influence_incentives",
    "joint_action_indices",
    "k1_kl",
    "k3_kl",
    "kl_penalty",
    "majority_correctness",
    "masked_mean",
    "masked_var",
    "nan_std",
    "off_policy_sequence_mask",
    "others_majority_correctness",
    "ppo_policy_loss",
    "turn_level_advantages",
    "response_masks",
    "revision_incentives",
    "running_moments_update",
    "score_positions",
    "selective_log_softmax",
    "shaped_debate_rewards",
    "shaped_token_rewards",
    "tree_returns",
    "whiten",
    "whiten_jointly",
]
