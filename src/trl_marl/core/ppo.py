"""PPO for language models (Ziegler et al. 2019; Ouyang et al. 2022; MAPoRL, arXiv 2502.18439): the equations.

Notation for one response of T tokens: `logp_t` the policy's log-probability of token t, `ref_t` the reference
policy's, `V_t` the value model's estimate before token t, `s` the scalar score of the whole response.

1. KL penalty per token:  kl_t = logp_t - ref_t (k1)  or  exp(ref_t - logp_t) - (ref_t - logp_t) - 1 (k3).
2. Per-token reward:       r_t = -beta * kl_t, plus s on the *score step* (see `score_positions`).
3. GAE (Schulman et al. 2016):  delta_t = r_t + gamma V_{t+1} - V_t;  A_t = delta_t + gamma lam A_{t+1};
   returns R_t = A_t + V_t.
4. Clipped policy loss:    max(-A_t rho_t, -A_t clip(rho_t, 1-eps, 1+eps)),  rho_t = exp(logp_t - logp_old_t).
5. Clipped value loss:     0.5 max((V'_t - R_t)^2, (clip(V'_t, V_t - eps_v, V_t + eps_v) - R_t)^2).
6. Between turns (multi-turn actor-critic): the score step of the response of turn k also gets
   gamma_turn V(s_{k+1}), the critic's value of the agent's next-turn state (0 after the episode's last turn), so
   that the GAE of eq. 3 bootstraps across turns: delta = r + s + gamma_turn V(s_{k+1}) - V on that step.
7. Turn-level credit (CoMLRL's IAC/MAAC: the response is one action):  A = R - V_0 for every token of the response,
   R = sum_t gamma^t r_t the response's return (eq. 2's rewards, with eq. 6's bootstrap when it applies) and V_0 the
   critic's value before the response's first token, V(s). It does not depend on lam (GAE's A_0 equals it only at
   lam = 1); the value targets stay eq. 3's returns.

Masks follow TRL's PPO (the reference this package's drop-in `PPOTrainer` is tested against): the policy uses
the response tokens up to and including the last real token (`sequence_length`); the value model and the
rewards use one step more (`sequence_length + 1`, the step just after the response, when it exists), and the
score is placed on that step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .estimators import CriticInputs, register_advantage_estimator
from .losses import k1_kl, k3_kl
from .statistics import masked_mean, whiten, whiten_jointly

INVALID_LOGPROB = 1.0
"""Placeholder log-probability written on padding positions (they are masked out of every loss)."""


def response_masks(sequence_lengths: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Boolean masks of the policy steps (t <= len) and of the value/reward steps (t <= len + 1).

    Args:
        sequence_lengths: Index of the last real token of each response, shape `(B,)` (-1 for an empty one).
        width: Number of response positions T.

    Returns:
        `(policy_mask, value_mask)`, both `(B, T)` bool, True where the step counts.
    """
    steps = torch.arange(width, device=sequence_lengths.device).unsqueeze(0)
    return steps <= sequence_lengths.unsqueeze(1), steps <= (sequence_lengths + 1).unsqueeze(1)


def score_positions(sequence_lengths: Tensor, width: int) -> Tensor:
    """The step that receives the score: `len + 1` when it fits in the response window, else `len`."""
    after = sequence_lengths + 1
    return torch.where(after < width, after, sequence_lengths)


def bootstrap_next_turn(
    rewards: Tensor, sequence_lengths: Tensor, next_values: Tensor, turn_gamma: float
) -> Tensor:
    """Equation 6: `rewards` with `turn_gamma * next_values` added on each response's score step.

    Args:
        rewards: `(B, T)` per-token rewards of eq. 2.
        sequence_lengths: `(B,)` index of the last real token of each response.
        next_values: `(B,)` V(s_{k+1}), the value of the next turn's state (0 where the episode ended).
        turn_gamma: The discount between turns.

    Example: rewards 0, lengths `[1, 3]` in a window of 4 (score steps 2 and 3), next values `[0.5, 2.0]`,
    `turn_gamma=0.9`: the rewards become `[[0, 0, 0.45, 0], [0, 0, 0, 1.8]]`.
    """
    out = rewards.clone()
    rows = torch.arange(out.size(0), device=out.device)
    out[rows, score_positions(sequence_lengths, out.size(1))] += turn_gamma * next_values.to(out.dtype)
    return out


def kl_penalty(logps: Tensor, ref_logps: Tensor, estimator: str = "k1") -> Tensor:
    """Equation 1: per-token KL(policy || ref), `k1 = logp - ref` or `k3 = (e^r - 1) - r` with `r = ref - logp`."""
    if estimator == "k1":
        return k1_kl(logps, ref_logps)
    if estimator == "k3":
        return k3_kl(logps, ref_logps)
    raise ValueError(f"Unknown KL estimator {estimator!r}; use 'k1' or 'k3'.")


def shaped_token_rewards(
    scores: Tensor, kl: Tensor, kl_coef: float, sequence_lengths: Tensor
) -> tuple[Tensor, Tensor]:
    """Equation 2: r_t = -kl_coef * kl_t everywhere, plus the score on the score step.

    Returns:
        `(rewards, non_score_rewards)`, both `(B, T)`.
    """
    non_score = -kl_coef * kl
    rewards = non_score.clone()
    rows = torch.arange(rewards.size(0), device=rewards.device)
    rewards[rows, score_positions(sequence_lengths, rewards.size(1))] += scores.to(rewards.dtype)
    return rewards, non_score


def generalized_advantage_estimation(
    rewards: Tensor, values: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Equation 3 (GAE): advantages A_t and returns R_t = A_t + V_t, computed backwards over the T steps.

    `values` must already be zero on the steps past the value mask (so V_{T} of a finished response is 0).

    Returns:
        `(advantages, returns)`, both `(B, T)`.
    """
    width = rewards.size(1)
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(width)):
        next_value = values[:, t + 1] if t + 1 < width else torch.zeros_like(values[:, t])
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        advantages[:, t] = running
    return advantages, advantages + values


def turn_level_advantages(rewards: Tensor, values: Tensor, gamma: float) -> Tensor:
    """Equation 7 (turn-level credit, CoMLRL's IAC/MAAC): one advantage per response, A = R - V(s).

    The action is the whole response and the state the history before it, so the advantage is the response's return
    minus the critic's value of that state: `R = sum_t gamma^t r_t` over the response's steps (eq. 2's rewards: the
    score minus the KL penalty of its tokens, plus `gamma_turn V(s_{k+1})` on the score step with eq. 6; with
    `gamma = 1` their plain sum) and `V(s) = V_0`, the critic's value before the response's first token (of the
    history; with MAAC's `critic_type="Q"`, of the history and the other agents' responses: Q(s, a_-i)). This is
    GAE's first-step advantage at `lam = 1` whatever the trainer's `lam`: at `lam = 0.95` GAE's A_0 of a 53-token
    response scored 1 with V = 0 would be 0.95^53 = 0.066 instead of R - V(s) = 1.

    Args:
        rewards: `(B, T)` per-token rewards (eq. 2, 0 past each response's value mask), step 0 the response's first
            token.
        values: `(B, T)` the critic's values; only step 0, V(s), is read.
        gamma: The discount between the response's steps.

    Returns:
        `(B,)`: each response's advantage (the trainer gives it to every token of the response).

    Example:
        >>> turn_level_advantages(torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.2, 0.5, 0.9]]), 1.0)
        tensor([0.8000])
    """
    discounts = gamma ** torch.arange(rewards.size(1), device=rewards.device, dtype=rewards.dtype)
    return (rewards * discounts).sum(dim=1) - values[:, 0].to(rewards.dtype)


def whiten_group(values: list[Tensor], masks: list[Tensor], shift_mean: bool) -> list[Tensor]:
    """PPO whitening of one group: `whiten` for one slot (TRL's numerics), `whiten_jointly` for several.

    A group with fewer than two counted entries (e.g. every response unscorable) has no spread: zeros.
    """
    if sum(int(m.sum()) for m in masks) < 2:
        return [torch.zeros_like(v) for v in values]
    if len(values) == 1:
        return [whiten(values[0], masks[0], shift_mean=shift_mean)]
    return whiten_jointly(values, masks, shift_mean=shift_mean)


def turn_level_group_advantages(rewards: list[Tensor], values: list[Tensor],
                                policy_masks: list[Tensor], gamma: float) -> list[Tensor]:
    """Turn-level credit (`advantage_mode="turn"`) of one whitening group: one advantage per response.

    Each response's `A = R - V(s)` ([`turn_level_advantages`], eq. 7) is whitened over the group's responses,
    one entry per response that has policy tokens (as CoMLRL normalizes its actor-critic advantages over samples;
    with the numerics of TRL's whitening used at the token level, the unbiased variance, where CoMLRL divides by the
    population std), and only then given to every token of the response (0 on padding). Whitening the broadcast
    tokens instead would weigh each response by its length: a long failing response would drag the mean down until a
    short failing one sits above it and gets a positive advantage.

    Args:
        rewards: Per slot, `(N, L)` per-token rewards.
        values: Per slot, `(N, L)` values (step 0: V(s)).
        policy_masks: Per slot, `(N, L)` bool, the steps the policy loss counts (none for an unscorable response).
        gamma: The discount between steps.

    Returns:
        Per slot, `(N, L)` advantages: each response's whitened advantage on its policy steps.
    """
    per_response = [turn_level_advantages(r, v, gamma) for r, v in zip(rewards, values)]
    counted = [m.any(dim=1) for m in policy_masks]
    whitened = whiten_group(per_response, counted, True)
    return [torch.masked_fill(w.unsqueeze(1).expand(m.shape), ~m, 0) for w, m in zip(whitened, policy_masks)]


def _group_rewards(inputs: CriticInputs) -> list[Tensor]:
    """The group's per-token rewards, whitened over its value steps first with `whiten_rewards` (pads 0)."""
    if not inputs.whiten_rewards:
        return inputs.rewards
    whitened = whiten_group(inputs.rewards, inputs.value_masks, False)
    return [torch.masked_fill(r, ~m, 0) for r, m in zip(whitened, inputs.value_masks)]


@register_advantage_estimator("gae", kind="critic")
def gae_group_advantages(inputs: CriticInputs) -> tuple[list[Tensor], list[Tensor]]:
    """Per-token GAE(gamma, lam), whitened over the group's policy tokens (TRL's PPO and MAPoRL: eq. 3).

    TRL's PPO credit: optionally whitened rewards, [`generalized_advantage_estimation`] per slot (eq. 3; with
    ``gamma = lam = 1``, A_t = R - V(s_t)), then the advantages whitened over every policy token of the group, 0 on
    the other steps. The returns (value targets) are eq. 3's.
    """
    advantages, returns = [], []
    for r, v in zip(_group_rewards(inputs), inputs.values):
        adv, ret = generalized_advantage_estimation(r, v, inputs.gamma, inputs.lam)
        advantages.append(adv)
        returns.append(ret)
    whitened = whiten_group(advantages, inputs.policy_masks, True)
    return [torch.masked_fill(a, ~m, 0) for a, m in zip(whitened, inputs.policy_masks)], returns


@register_advantage_estimator("turn", kind="critic")
def turn_group_advantages(inputs: CriticInputs) -> tuple[list[Tensor], list[Tensor]]:
    """One advantage per response, A = R - V(s), whitened over the responses (CoMLRL's IAC/MAAC: eq. 7).

    The response is one action: [`turn_level_group_advantages`] of the (optionally whitened) rewards, whatever
    ``lam`` is; the returns (value targets) are still eq. 3's GAE returns.
    """
    rewards = _group_rewards(inputs)
    returns = [generalized_advantage_estimation(r, v, inputs.gamma, inputs.lam)[1]
               for r, v in zip(rewards, inputs.values)]
    return turn_level_group_advantages(rewards, inputs.values, inputs.policy_masks, inputs.gamma), returns


def ppo_policy_loss(
    logps: Tensor, old_logps: Tensor, advantages: Tensor, cliprange: float, mask: Tensor,
    weight: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Equation 4, averaged over the masked tokens of the batch.

    ``weight`` (``(B, T)`` or ``(B, 1)``, no gradient) multiplies each token's clipped loss before the average: the
    truncated importance weight of a generation engine's mismatch with the training model
    (:func:`trl_marl.core.engine_importance_sampling_ratio`); None weighs every token 1.

    Returns:
        `(loss, clip_fraction, ratio)`: the scalar loss, the fraction of tokens where clipping is active, and
        the per-token importance ratio.
    """
    ratio = torch.exp(logps - old_logps)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    per_token = torch.max(unclipped, clipped)
    loss = masked_mean(per_token if weight is None else per_token * weight, mask)
    clip_fraction = masked_mean((clipped > unclipped).float(), mask)
    return loss, clip_fraction, ratio


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, cliprange_value: float, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """Equation 5, averaged over the masked steps of the batch.

    Returns:
        `(loss, clip_fraction)`.
    """
    clipped_values = torch.clamp(values, old_values - cliprange_value, old_values + cliprange_value)
    loss_unclipped = (values - returns) ** 2
    loss_clipped = (clipped_values - returns) ** 2
    loss = 0.5 * masked_mean(torch.max(loss_unclipped, loss_clipped), mask)
    clip_fraction = masked_mean((loss_clipped > loss_unclipped).float(), mask)
    return loss, clip_fraction


# ----------------------------------------------------------------------------------------------------------------
# The classic (TRL <= 0.11) PPO loop: per-token KL variants, the adaptive KL coefficient, running score moments
# ----------------------------------------------------------------------------------------------------------------
CLASSIC_KL_PENALTIES: tuple[str, ...] = ("kl", "abs", "mse", "full")
"""Valid `kind` values of :func:`classic_kl_penalty` (`"full"` needs the whole distributions)."""


def classic_kl_penalty(logps: Tensor, ref_logps: Tensor, kind: str = "kl") -> Tensor:
    """Per-token KL penalty of the classic PPO loop (Ziegler et al. 2019, Eq. 2's `log pi / rho` term and variants).

    With `d = logp - ref`: `"kl"` gives `d`, `"abs"` gives `|d|`, `"mse"` gives `d^2 / 2`. For `"full"` the inputs are
    log-distributions over the vocabulary, shape `(..., V)`, and the result is the exact
    `KL(pi || ref) = sum_v pi_v (log pi_v - log ref_v)` per position.

    Args:
        logps: Policy log-probabilities of the sampled tokens `(..., T)` (or log-distributions `(..., T, V)`).
        ref_logps: Reference log-probabilities, same shape.
        kind: One of :data:`CLASSIC_KL_PENALTIES`.

    Returns:
        Per-token penalty, shape `(..., T)`.

    Example:
        >>> classic_kl_penalty(torch.tensor([-1.0]), torch.tensor([-3.0]), "mse")
        tensor([2.])
    """
    if kind == "full":
        return (logps.exp() * (logps - ref_logps)).sum(dim=-1)
    diff = logps - ref_logps
    if kind == "kl":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "mse":
        return 0.5 * diff.square()
    raise ValueError(f"Unknown KL penalty {kind!r}; use one of {CLASSIC_KL_PENALTIES}.")


def adaptive_kl_coef(kl_coef: float, current_kl: float, target: float, horizon: float, n_steps: int) -> float:
    """Adaptive KL coefficient (Ziegler et al. 2019, Sec. 2.2): `beta <- beta * (1 + e * n / H)`.

    `e = clip(KL / KL_target - 1, -0.2, 0.2)` is the clipped proportional error, `n` the number of samples seen since
    the last update and `H` the horizon.

    Args:
        kl_coef: Current coefficient beta.
        current_kl: Measured KL (mean over the batch of the summed per-token KL).
        target: KL_target.
        horizon: H.
        n_steps: n, usually the batch size.

    Returns:
        The new coefficient.

    Example:
        >>> round(adaptive_kl_coef(0.2, current_kl=12.0, target=6.0, horizon=10000, n_steps=256), 6)
        0.201024
    """
    error = min(max(current_kl / target - 1.0, -0.2), 0.2)
    return kl_coef * (1.0 + error * n_steps / horizon)


def running_moments_update(
    mean: float, var: float, count: float, xs: Tensor
) -> tuple[float, float, float]:
    """Merge a batch into running mean/variance (Chan et al. 1979's parallel update; population variance).

    With the batch's mean `m_b`, population variance `v_b` and size `n_b`, `delta = m_b - mean`, `N = count + n_b`:
    `mean' = mean + delta * n_b / N`, `var' = (var * count + v_b * n_b + delta^2 * count * n_b / N) / N`.

    Args:
        mean: Running mean.
        var: Running population variance.
        count: Number of values merged so far (a tiny positive number before the first batch).
        xs: New values (any shape).

    Returns:
        `(mean, var, count)` after the merge.

    Example:
        >>> running_moments_update(0.0, 1.0, 1e-24, torch.tensor([1.0, 3.0]))
        (2.0, 1.0, 2.0)
    """
    xs = xs.double().reshape(-1)
    n_b = xs.numel()
    m_b = xs.mean().item()
    v_b = xs.var(unbiased=False).item()
    total = count + n_b
    delta = m_b - mean
    new_var = (var * count + v_b * n_b + delta * delta * count * n_b / total) / total
    return mean + delta * n_b / total, new_var, total
