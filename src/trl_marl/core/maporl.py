"""MAPoRL's rewards for a collaborative debate (Park et al., arXiv 2502.18439): the equations.

A debate runs for `T` turns between `A` agents. `V[t, a]` is the verifier's score in `[0, 1]` of agent `a`'s answer
at turn `t` and `correct[t, a]` says whether that answer is right (**R**) or wrong (**W**). Every function takes a
`(T, A)` tensor or a batch `(B, T, A)` of debates of the same length (any leading dimensions work), and returns
one value per answer, same shape. Turns are indexed from 0 in tensors and from 1 in the paper.

1. Influence-aware verification reward (Definition 1), [`influence_aware_reward`]::

       R[t, a] = ( V[t, a] + sum_{t'=t+1..T} gamma^(t'-t) * (1/A) sum_j V[t', j] ) / sum_{t'=t..T} gamma^(t'-t)

   The answer itself counts with weight 1, every later turn with the discounted *team mean* of the verifier scores
   (the influence of `s_{t,a}` on everything said after it); the denominator makes `R` a weighted average, so
   `R` stays in `[0, 1]`. At the last turn `R[T, a] = V[T, a]`. The paper's expectation over the other agents'
   answers is estimated by the one sampled debate.

2. Own-revision incentive (Table 1), [`revision_incentives`], added to the answer at turn `t+1`:

       | answer (t) | answer (t+1) | others' majority (t) | incentive |
       |     R      |      W       |          R           |  -alpha1  |
       |     R      |      W       |          W           |  -alpha0  |
       |     W      |      R       |          W           |  +alpha0  |
       |     W      |      R       |          R           |  +alpha1  |

3. Influence incentive (Table 2), [`influence_incentives`], added to the answer at turn `t`:

       | others' majority (t) | others' majority (t+1) | answer (t) | incentive |
       |          R           |           W            |     R      |  -beta1   |
       |          R           |           W            |     W      |  -beta0   |
       |          W           |           R            |     W      |  +beta0   |
       |          W           |           R            |     R      |  +beta1   |

"Majority" is the majority *correctness* of the agents other than `a` at that turn ([`others_majority_correctness`]:
+1 when more of them are right than wrong, -1 when more are wrong, 0 on a tie). With two agents it is the other
agent's correctness; with one agent (self-correction) there are no others, so it is always a tie. **A tie gives no
incentive**: a Table 1 cell needs a strict majority at `t`, a Table 2 cell a strict majority at both `t` and `t+1`
(the paper's tables have no tie row; the authors' code also skips an average of the others' scores of exactly 0.5).
Unchanged answers (R->R, W->W) and unchanged majorities give nothing. An answer collects the Table 1 incentive of
the transition that produced it and the Table 2 incentive of the transition that follows it, so the first turn
never gets an alpha and the last turn never gets a beta.

Paper versus the authors' released code (`bonus_rule` in `trl/trainer/utils_multi_unified.py` of
chanwoo-park-official/MAPoRL, with `alpha = [alpha0, alpha1, beta0, beta1]`): the code matches Table 1 for R->W but
swaps alpha0 and alpha1 for W->R (it gives +alpha1 when the others were W and +alpha0 when they were R), and it
flips the sign of every Table 2 cell and swaps beta0 and beta1 in them (e.g. others W->R while the agent was R gives
-beta1 instead of +beta1). With one agent it applies -/+alpha1 to every R->W / W->R revision. This module follows
the paper's tables (as the paper's text motivates them: alpha0 rewards critical reasoning against a wrong majority,
beta1 rewards persuading others with a correct answer) and gives no incentive without other agents.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "collaboration_incentives",
    "influence_aware_reward",
    "influence_incentives",
    "majority_correctness",
    "others_majority_correctness",
    "revision_incentives",
    "shaped_debate_rewards",
]


def _check_debate_tensor(values: Tensor, name: str) -> None:
    if values.dim() < 2:
        raise ValueError(f"`{name}` must have shape (T, A) or (..., T, A), got shape {tuple(values.shape)}.")
    if values.shape[-2] < 1 or values.shape[-1] < 1:
        raise ValueError(f"`{name}` needs at least one turn and one agent, got shape {tuple(values.shape)}.")


def _float(values: Tensor) -> Tensor:
    return values if values.is_floating_point() else values.to(torch.get_default_dtype())


def influence_aware_reward(verifier_scores: Tensor, gamma: float = 1.0) -> Tensor:
    """Influence-aware verification reward of every answer of a debate (MAPoRL, Definition 1).

    `R[t, a] = (V[t, a] + sum_{t' > t} gamma^(t'-t) mean_j V[t', j]) / sum_{t' >= t} gamma^(t'-t)`, with the sums
    running to the last turn `T` of the debate.

    Args:
        verifier_scores (`Tensor`): `V`, shape `(T, A)` or `(..., T, A)`: `V[..., t, a]` is the verifier's score
            of agent `a`'s answer at turn `t` (0-based).
        gamma (`float`): The discount factor in `[0, 1]`. `gamma = 0` gives the answer's own score; `gamma = 1`
            the average of the own score and the team means of all later turns.

    Returns:
        `Tensor`: `R`, same shape as `verifier_scores` (floating point).

    Example (`T = 2`, `A = 2`, `gamma = 1`): `V = [[1, 0], [1, 1]]` gives `R[0, 0] = (1 + 1) / 2 = 1`,
    `R[0, 1] = (0 + 1) / 2 = 0.5` and `R[1] = V[1]`.
    """
    _check_debate_tensor(verifier_scores, "verifier_scores")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"`gamma` must be in [0, 1] (Definition 1), got {gamma}.")
    scores = _float(verifier_scores)
    num_turns = scores.shape[-2]
    steps = torch.arange(num_turns, device=scores.device)
    offset = steps.unsqueeze(0) - steps.unsqueeze(1)  # offset[t, t'] = t' - t
    powers = torch.tensor(gamma, dtype=scores.dtype, device=scores.device) ** offset.clamp(min=0).to(scores.dtype)
    future_weights = torch.where(offset > 0, powers, torch.zeros_like(powers))  # gamma^(t'-t) for t' > t
    normalizer = torch.where(offset >= 0, powers, torch.zeros_like(powers)).sum(-1)  # sum_{t' >= t} gamma^(t'-t)
    team_mean = scores.mean(dim=-1)  # (..., T): (1/A) sum_j V[t', j]
    future = team_mean @ future_weights.transpose(0, 1)  # (..., T): sum_{t' > t} gamma^(t'-t) team_mean[t']
    return (scores + future.unsqueeze(-1)) / normalizer.unsqueeze(-1)


def majority_correctness(correct: Tensor, exclude_agent: int | None = None) -> Tensor:
    """Majority correctness of a group of agents at every turn (the "majority" of MAPoRL's Tables 1 and 2).

    Args:
        correct (`Tensor`): Booleans of shape `(T, A)` or `(..., T, A)`: whether agent `a`'s answer at turn `t` is
            right.
        exclude_agent (`int`, *optional*): Leave this agent out (the tables use the majority of the *other*
            agents). `None` counts every agent.

    Returns:
        `Tensor`: int64 of shape `(..., T)`: `+1` when more of the counted agents are right than wrong, `-1` when
        more are wrong, `0` on a tie (including when no agent is counted).
    """
    _check_debate_tensor(correct, "correct")
    votes = correct.to(torch.bool)
    num_agents = votes.shape[-1]
    if exclude_agent is not None:
        if not -num_agents <= exclude_agent < num_agents:
            raise IndexError(f"`exclude_agent` is {exclude_agent} but there are {num_agents} agents.")
        keep = [j for j in range(num_agents) if j != exclude_agent % num_agents]
        votes = votes[..., keep]
    right = votes.sum(dim=-1)
    return torch.sign(2 * right - votes.shape[-1]).to(torch.int64)


def others_majority_correctness(correct: Tensor) -> Tensor:
    """[`majority_correctness`] of the agents other than `a`, for every agent `a` at once.

    Args:
        correct (`Tensor`): Booleans of shape `(T, A)` or `(..., T, A)`.

    Returns:
        `Tensor`: int64, same shape: `M[..., t, a]` is `+1` (the others' majority is right), `-1` (wrong) or `0`
        (tie; always with one agent). With two agents it is the other agent's correctness as `+1`/`-1`.
    """
    _check_debate_tensor(correct, "correct")
    votes = correct.to(torch.bool).to(torch.int64)
    others_right = votes.sum(dim=-1, keepdim=True) - votes  # right answers among the A - 1 others
    return torch.sign(2 * others_right - (votes.shape[-1] - 1))


def revision_incentives(correct: Tensor, alpha0: float, alpha1: float, dtype: torch.dtype | None = None) -> Tensor:
    """Own-revision incentive of MAPoRL (Table 1), placed on the revised answer at turn `t + 1`.

    For each agent and each pair of consecutive turns `(t, t+1)`, with `M` the others' majority correctness at
    turn `t` (the answers the agent saw when revising): R->W with `M = R`: `-alpha1`; R->W with `M = W`: `-alpha0`;
    W->R with `M = W`: `+alpha0` (critical reasoning); W->R with `M = R`: `+alpha1` (persuaded by correct
    information). No change of correctness, or a tie in `M`, gives 0. The first turn always gets 0.

    Args:
        correct (`Tensor`): Booleans of shape `(T, A)` or `(..., T, A)`.
        alpha0 (`float`): Incentive for revising against (W->R) or along with (R->W) a wrong majority.
        alpha1 (`float`): Incentive for revising along with (W->R) or against (R->W) a right majority.
        dtype (`torch.dtype`, *optional*): Floating dtype of the result (default: torch's default dtype).

    Returns:
        `Tensor`: Float incentives, same shape as `correct`.
    """
    _check_debate_tensor(correct, "correct")
    right = correct.to(torch.bool)
    dtype = dtype or torch.get_default_dtype()
    out = torch.zeros(right.shape, dtype=dtype, device=right.device)
    if right.shape[-2] < 2:
        return out
    majority = others_majority_correctness(right)[..., :-1, :]  # Majority (t)
    before, after = right[..., :-1, :], right[..., 1:, :]
    r_to_w = (before & ~after).to(dtype)
    w_to_r = (~before & after).to(dtype)
    maj_right = (majority > 0).to(dtype)
    maj_wrong = (majority < 0).to(dtype)
    out[..., 1:, :] = (
        -alpha1 * r_to_w * maj_right
        - alpha0 * r_to_w * maj_wrong
        + alpha0 * w_to_r * maj_wrong
        + alpha1 * w_to_r * maj_right
    )
    return out


def influence_incentives(correct: Tensor, beta0: float, beta1: float, dtype: torch.dtype | None = None) -> Tensor:
    """Influence incentive of MAPoRL (Table 2), placed on the agent's answer at turn `t`.

    For each agent and each pair of consecutive turns `(t, t+1)`, with `M_t`, `M_{t+1}` the others' majority
    correctness at turns `t` and `t + 1`: `M` R->W with the agent's answer at `t` R: `-beta1`; with it W: `-beta0`;
    `M` W->R with the agent's answer at `t` W: `+beta0` (a wrong answer that still helped); with it R: `+beta1`
    (persuading others with a correct answer). A tie in `M_t` or `M_{t+1}`, or no change, gives 0. The last turn
    always gets 0.

    Args:
        correct (`Tensor`): Booleans of shape `(T, A)` or `(..., T, A)`.
        beta0 (`float`): Incentive for the influence of a wrong answer.
        beta1 (`float`): Incentive for the influence of a right answer.
        dtype (`torch.dtype`, *optional*): Floating dtype of the result (default: torch's default dtype).

    Returns:
        `Tensor`: Float incentives, same shape as `correct`.
    """
    _check_debate_tensor(correct, "correct")
    right = correct.to(torch.bool)
    dtype = dtype or torch.get_default_dtype()
    out = torch.zeros(right.shape, dtype=dtype, device=right.device)
    if right.shape[-2] < 2:
        return out
    majority = others_majority_correctness(right)
    maj_now, maj_next = majority[..., :-1, :], majority[..., 1:, :]
    own_right = right[..., :-1, :].to(dtype)  # Answer (t)
    own_wrong = 1.0 - own_right
    maj_r_to_w = ((maj_now > 0) & (maj_next < 0)).to(dtype)
    maj_w_to_r = ((maj_now < 0) & (maj_next > 0)).to(dtype)
    out[..., :-1, :] = (
        -beta1 * maj_r_to_w * own_right
        - beta0 * maj_r_to_w * own_wrong
        + beta0 * maj_w_to_r * own_wrong
        + beta1 * maj_w_to_r * own_right
    )
    return out


def collaboration_incentives(
    correct: Tensor,
    alpha0: float = 0.0,
    alpha1: float = 0.0,
    beta0: float = 0.0,
    beta1: float = 0.0,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """All of MAPoRL's collaboration incentives (Tables 1 and 2) of every answer of a debate.

    The sum of [`revision_incentives`] (Table 1, on the answer at `t + 1`) and [`influence_incentives`]
    (Table 2, on the answer at `t`). See the module docstring for both tables and the tie rule.

    Args:
        correct (`Tensor`): Booleans of shape `(T, A)` or `(..., T, A)`.
        alpha0 (`float`): Table 1 incentive relative to a wrong majority of the others.
        alpha1 (`float`): Table 1 incentive relative to a right majority of the others.
        beta0 (`float`): Table 2 incentive for a wrong answer at `t`.
        beta1 (`float`): Table 2 incentive for a right answer at `t`.
        dtype (`torch.dtype`, *optional*): Floating dtype of the result (default: torch's default dtype).

    Returns:
        `Tensor`: Float incentives, same shape as `correct`.
    """
    return revision_incentives(correct, alpha0, alpha1, dtype) + influence_incentives(correct, beta0, beta1, dtype)


def shaped_debate_rewards(
    scores: Tensor,
    correct: Tensor | None = None,
    gamma: float = 1.0,
    alpha0: float = 0.0,
    alpha1: float = 0.0,
    beta0: float = 0.0,
    beta1: float = 0.0,
    correct_threshold: float = 0.5,
) -> Tensor:
    """MAPoRL's reward of every answer: Definition 1 plus the incentives of Tables 1 and 2 (Section 3.3).

    Args:
        scores (`Tensor`): Verifier scores `V`, shape `(T, A)` or `(..., T, A)`.
        correct (`Tensor`, *optional*): Booleans, same shape. Defaults to `scores >= correct_threshold`.
        gamma (`float`): Discount factor of Definition 1.
        alpha0, alpha1, beta0, beta1 (`float`): The incentives of Tables 1 and 2.
        correct_threshold (`float`): The score from which an answer counts as right when `correct` is not given.

    Returns:
        `Tensor`: `influence_aware_reward(scores, gamma) + collaboration_incentives(correct, ...)`, same shape.
    """
    if correct is None:
        correct = scores >= correct_threshold
    if correct.shape != scores.shape:
        raise ValueError(f"`correct` has shape {tuple(correct.shape)} but `scores` has {tuple(scores.shape)}.")
    reward = influence_aware_reward(scores, gamma)
    incentives = collaboration_incentives(correct, alpha0, alpha1, beta0, beta1, dtype=reward.dtype)
    return reward + incentives.to(reward.device)
