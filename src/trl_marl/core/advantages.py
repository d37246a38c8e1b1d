"""Returns, baselines and advantages for MAGRPO and multi-agent PPO.

Pure tensor math, one small function per equation, no trainer state. Notation follows the papers:

- MAGRPO: Liu, Chen, Liang, Lyu, Amato, "LLM Collaboration With Multi-Agent Reinforcement Learning",
  arXiv 2508.04652. ``n`` agents, ``G`` samples (``num_generations``) per agent per node, a centralized
  reward ``r`` per *joint* action, returns ``R_t = r_t + gamma * mean(R_{t+1} of the children)``, and the
  group-relative advantage ``A = R - mean(R)`` among the siblings of one node.
- GRPO: Shao et al., "DeepSeekMath", arXiv 2402.03300, Sec. 4.1.2 (outcome supervision):
  ``A_i = (r_i - mean(r)) / std(r)``.
- RLOO: Ahmadian et al., "Back to Basics", arXiv 2402.14740, Eq. 5 (leave-one-out baseline):
  ``A_i = r_i - 1/(G-1) * sum_{j != i} r_j``.
- REINFORCE (Williams 1992, no baseline): ``A_i = r_i`` (comlrl's MAREINFORCE); comlrl's MAReMax group-max
  baseline: ``A_i = r_i - max_j r_j``, the best *sampled* return of the group. Despite comlrl's name this is not
  ReMax's baseline (Li et al., arXiv 2310.10505: the reward of a greedy, argmax-decoded response), which
  would need an extra greedy rollout per prompt.

NaN marks an unscorable sample (every reward function declined to score it). As in TRL 1.16's
``GRPOTrainer``, NaNs are left out of every mean and standard deviation and their advantage is 0.
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

__all__ = [
    "ADVANTAGE_MODES",
    "JOINT_MODES",
    "agent_returns_from_joint",
    "batch_scaled_advantages",
    "early_stop_returns",
    "group_relative_advantages",
    "joint_action_indices",
    "masked_mean",
    "masked_var",
    "nan_std",
    "tree_returns",
    "whiten",
    "whiten_jointly",
]

ADVANTAGE_MODES: tuple[str, ...] = ("mean", "std", "loo", "raw", "max")
"""Valid ``mode`` values of :func:`group_relative_advantages`."""

JOINT_MODES: tuple[str, ...] = ("aligned", "cross")
"""Valid ``mode`` values of :func:`joint_action_indices`."""


# ----------------------------------------------------------------------------------------------------------------
# NaN-aware statistics
# ----------------------------------------------------------------------------------------------------------------
def _valid_count(values: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    """Number of non-NaN entries of ``values`` along ``dim`` (all entries when ``dim`` is None)."""
    valid = (~torch.isnan(values)).to(values.dtype)
    if dim is None:
        return valid.sum()
    return valid.sum(dim=dim, keepdim=keepdim)


def nan_std(values: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Unbiased (Bessel-corrected) standard deviation that ignores NaN entries.

    ``std = sqrt( sum_valid (x - mean_valid)^2 / (k - 1) )`` with ``k`` the number of non-NaN entries;
    NaN where ``k < 2``. Numerically the same as ``trl.trainer.utils.nanstd``.

    Args:
        values: Input tensor.
        dim: Dimension to reduce; ``None`` reduces over every entry.
        keepdim: Keep the reduced dimension (ignored when ``dim`` is None).

    Returns:
        The standard deviation, NaN where fewer than two entries are valid.
    """
    if dim is None:
        mean = torch.nanmean(values)
        sq_dev = torch.nansum((values - mean) ** 2)
    else:
        mean = torch.nanmean(values, dim=dim, keepdim=True)
        sq_dev = torch.nansum((values - mean) ** 2, dim=dim, keepdim=keepdim)
    count = _valid_count(values, dim, keepdim)
    var = torch.where(count > 1, sq_dev / (count - 1).clamp(min=1), torch.full_like(sq_dev, float("nan")))
    return var.sqrt()


# ----------------------------------------------------------------------------------------------------------------
# Group-relative advantages
# ----------------------------------------------------------------------------------------------------------------
def group_relative_advantages(returns: Tensor, mode: str = "mean", eps: float = 1e-4) -> Tensor:
    """Group-relative advantage among the G siblings of one node (MAGRPO, GRPO, RLOO, REINFORCE, group-max baselines).

    Groups lie along the last dimension of ``returns`` (shape ``(..., G)``).

    - ``"mean"`` -- MAGRPO (arXiv 2508.04652) default, also GRPO with ``scale_rewards="none"`` (Dr. GRPO):
      ``A_i = R_i - mean_j R_j``.
    - ``"std"`` -- GRPO (DeepSeekMath, arXiv 2402.03300, Sec. 4.1.2; TRL ``scale_rewards="group"``):
      ``A_i = (R_i - mean_j R_j) / (std_j R_j + eps)`` with the unbiased std.
    - ``"loo"`` -- RLOO leave-one-out baseline (arXiv 2402.14740, Eq. 5), MARLOO:
      ``A_i = R_i - mean_{j != i} R_j = (G * R_i - sum_j R_j) / (G - 1) = G / (G - 1) * (R_i - mean_j R_j)``
      (the same definition as comlrl 1.4.3's ``advantage_mode="rloo"``).
    - ``"raw"`` -- REINFORCE without a baseline, MAREINFORCE: ``A_i = R_i``.
    - ``"max"`` -- comlrl's group-max baseline, MAReMax: ``A_i = R_i - max_j R_j`` (every advantage <= 0; the best
      sample of the group gets 0 and the others are pushed down by how far they fall short of it). Not ReMax's
      greedy-rollout baseline (see the module docstring).

    NaN returns are excluded from the baseline and the std (``G`` above is then the number of valid
    returns) and get advantage 0. A group whose std is undefined (one valid return) gets 0 in ``"std"``
    mode, exactly as TRL's ``nanstd`` + ``nan_to_num`` does; so does a group with one valid return in ``"loo"``.

    Args:
        returns: Returns ``R``, shape ``(..., G)``.
        mode: One of ``"mean"``, ``"std"``, ``"loo"``, ``"raw"``, ``"max"``.
        eps: Added to the std in ``"std"`` mode (TRL uses ``1e-4``).

    Returns:
        Advantages, same shape as ``returns``, with no NaN.

    Raises:
        ValueError: Unknown ``mode``, or ``G < 2`` for ``"std"`` / ``"loo"``.

    Example:

    ```python
    >>> group_relative_advantages(torch.tensor([1.0, 0.0, 3.0]), mode="max")
    tensor([-2., -3.,  0.])
    ```
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"Unknown advantage mode {mode!r}; valid modes are {ADVANTAGE_MODES}.")
    group_size = returns.shape[-1]
    if mode in ("std", "loo") and group_size < 2:
        raise ValueError(f"Advantage mode {mode!r} needs at least 2 samples per group, got G={group_size}.")

    if mode == "raw":
        return torch.where(torch.isnan(returns), torch.zeros_like(returns), returns)
    if mode == "max":
        best = torch.where(torch.isnan(returns), torch.full_like(returns, float("-inf")), returns)
        best = best.amax(dim=-1, keepdim=True)
        # a group without a valid return keeps NaN (-> 0); R - max is 0 at the best sample, never positive
        return torch.nan_to_num(returns - best, nan=0.0)
    baseline = torch.nanmean(returns, dim=-1, keepdim=True)
    centered = returns - baseline
    if mode == "std":
        centered = centered / (nan_std(returns, dim=-1, keepdim=True) + eps)
    elif mode == "loo":
        count = _valid_count(returns, dim=-1, keepdim=True)
        # k/(k-1) * (R_i - mean) ; undefined (NaN -> 0 below) when only one sample is valid
        scale = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.full_like(count, float("nan")))
        centered = centered * scale
    return torch.nan_to_num(centered, nan=0.0)


def batch_scaled_advantages(returns: Tensor, eps: float = 1e-4, team_returns: Tensor | None = None) -> Tensor:
    """GRPO advantage with batch-level scaling (TRL ``scale_rewards="batch"``, PPO-Lite arXiv 2508.08221).

    ``A_i = (R_i - mean_{j in group(i)} R_j) / (std_{k in batch} R^team_k + eps)``: the baseline is the group
    mean along the last dimension of ``returns``; the scale is the unbiased std over the batch's *team-level*
    returns ``team_returns``, one per joint action (``returns`` itself when ``None``, as with one agent).
    With several agents each agent's return is a copy (or, in ``cross`` mode, a mean) of the team's, so the
    std must not be taken over every agent's copy: for one node with team returns ``[0, 1, 0, 1]`` and two
    agents the scale is ``std([0, 1, 0, 1]) = 0.577`` (advantages ``+-0.866``), not the std of the eight
    copies (``0.535``, advantages ``+-0.935``).
    The batch is that of *every process*: as TRL 1.16's ``GRPOTrainer`` gathers its rewards before the std, callers
    on several processes pass the gathered team returns (the MAGRPO trainer's rollout pools them,
    ``trl_marl.rollout.pool_turn_returns``). With ``[0, 1, 0, 1]`` here and ``[0, 10, 0, 10]`` on a second process
    the scale is ``std([0, 1, 0, 1, 0, 10, 0, 10]) = 4.496``: advantages ``+-0.111`` here, not this process's
    ``+-0.866``.
    NaN returns are excluded from both statistics and get advantage 0.

    Args:
        returns: Returns credited to each sample, shape ``(..., G)``; groups lie along the last dimension.
        eps: Added to the std (TRL uses ``1e-4``).
        team_returns: The team-level returns of the batch, of every process (any shape; every entry enters the std).

    Returns:
        Advantages, same shape as ``returns``, with no NaN.
    """
    scale_source = returns if team_returns is None else team_returns
    centered = returns - torch.nanmean(returns, dim=-1, keepdim=True)
    return torch.nan_to_num(centered / (nan_std(scale_source) + eps), nan=0.0)


# ----------------------------------------------------------------------------------------------------------------
# Joint actions and credit
# ----------------------------------------------------------------------------------------------------------------
def joint_action_indices(num_agents: int, num_generations: int, mode: str) -> Tensor:
    """Which sample of each agent forms each joint action (MAGRPO joint-action construction).

    - ``"aligned"``: sample ``g`` of every agent forms joint action ``g``; ``J = G`` rows ``(g, ..., g)``.
    - ``"cross"``: every combination, ``J = G ** n`` rows in ``itertools.product`` order
      (the last agent's index varies fastest).

    Args:
        num_agents: Number of agents ``n`` (>= 1).
        num_generations: Samples per agent ``G`` (>= 1).
        mode: ``"aligned"`` or ``"cross"``.

    Returns:
        Long tensor of shape ``(J, n)``; entry ``[j, a]`` is agent ``a``'s sample index in joint action ``j``.

    Raises:
        ValueError: Unknown ``mode`` or non-positive sizes.
    """
    if num_agents < 1 or num_generations < 1:
        raise ValueError(f"num_agents and num_generations must be >= 1, got {num_agents} and {num_generations}.")
    if mode == "aligned":
        return torch.arange(num_generations, dtype=torch.long).unsqueeze(1).repeat(1, num_agents)
    if mode == "cross":
        rows = list(itertools.product(range(num_generations), repeat=num_agents))
        return torch.tensor(rows, dtype=torch.long)
    raise ValueError(f"Unknown joint action mode {mode!r}; valid modes are {JOINT_MODES}.")


def agent_returns_from_joint(joint_returns: Tensor, joint_indices: Tensor, num_generations: int) -> Tensor:
    """Return credited to each agent's sample: the mean joint return over the joint actions that contain it.

    MAGRPO (arXiv 2508.04652) credit assignment with a centralized reward:
    ``R_a(g) = mean_{j : joint_indices[j, a] = g} R(j)``.
    In ``aligned`` mode this is just ``R(g)``; in ``cross`` mode it averages over the other agents'
    ``G ** (n - 1)`` choices (a mean, not a sum, so advantages keep the scale of the rewards).
    NaN joint returns are left out of the mean; an agent sample whose joint returns are all NaN (or that
    appears in no joint action) gets NaN, which the advantage functions turn into advantage 0.

    Args:
        joint_returns: Return of each joint action, shape ``(J,)`` or ``(B, J)``.
        joint_indices: Output of :func:`joint_action_indices`, shape ``(J, n)``.
        num_generations: ``G``.

    Returns:
        Shape ``(n, G)``, or ``(B, n, G)`` when ``joint_returns`` has a batch dimension.

    Raises:
        ValueError: ``joint_returns`` and ``joint_indices`` disagree on the number of joint actions ``J``.
    """
    if joint_returns.shape[-1] != joint_indices.shape[0]:
        raise ValueError(
            f"joint_returns has {joint_returns.shape[-1]} joint actions, joint_indices has {joint_indices.shape[0]}."
        )
    dtype = joint_returns.dtype if joint_returns.is_floating_point() else torch.float32
    returns = joint_returns.to(dtype)
    # membership[j, a, g] = 1 if agent a played sample g in joint action j
    membership = torch.nn.functional.one_hot(joint_indices.to(returns.device), num_generations).to(dtype)
    valid = ~torch.isnan(returns)
    sums = torch.einsum("...j,jag->...ag", torch.where(valid, returns, torch.zeros_like(returns)), membership)
    counts = torch.einsum("...j,jag->...ag", valid.to(dtype), membership)
    return torch.where(counts > 0, sums / counts.clamp(min=1), torch.full_like(sums, float("nan")))


# ----------------------------------------------------------------------------------------------------------------
# Multi-turn returns
# ----------------------------------------------------------------------------------------------------------------
def tree_returns(
    rewards: Tensor,
    children_returns: Tensor | None,
    discount: float,
    children_mask: Tensor | None = None,
) -> Tensor:
    """One backup step of the MAGRPO multi-turn return over the rollout tree.

    ``R_t = r_t + gamma * mean_{c in children} R_{t+1}(c)`` (MAGRPO, arXiv 2508.04652; Bellman backup
    averaged over the sampled children). A node without children has ``R_t = r_t`` here; callers give
    early-stopped nodes :func:`early_stop_returns` and capped joint actions a bootstrapped child value.

    Args:
        rewards: Reward of each joint action (node), shape ``(J,)`` or ``(B, J)``.
        children_returns: Returns of each node's children, shape ``(J, C)`` or ``(B, J, C)``; ``None`` when
            no node has children. Entries masked out by ``children_mask`` are ignored (they may hold NaN).
        discount: ``gamma``.
        children_mask: Bool tensor shaped like ``children_returns``; ``True`` where the child exists.
            ``None`` means every child exists.

    Returns:
        Returns ``R_t``, same shape as ``rewards``.

    Raises:
        ValueError: ``children_returns`` is not shaped ``rewards.shape + (C,)``.
    """
    if children_returns is None:
        return rewards.clone()
    if children_returns.shape[:-1] != rewards.shape:
        raise ValueError(
            f"children_returns shape {tuple(children_returns.shape)} does not match rewards shape "
            f"{tuple(rewards.shape)} + (C,)."
        )
    if children_mask is None:
        children_mask = torch.ones_like(children_returns, dtype=torch.bool)
    children_mask = children_mask.to(torch.bool)
    num_children = children_mask.sum(dim=-1)
    child_sum = torch.where(children_mask, children_returns, torch.zeros_like(children_returns)).sum(dim=-1)
    child_mean = child_sum / num_children.clamp(min=1).to(child_sum.dtype)
    return torch.where(num_children > 0, rewards + discount * child_mean, rewards)


def early_stop_returns(rewards: Tensor, remaining_turns: int, discount: float) -> Tensor:
    """Returns of the joint actions of a node that stopped early: the team's success persists.

    A node stops early (``early_stop_threshold``) because the mean team reward of its joint actions,
    ``rbar_t = mean_j r_t(j)``, reached the threshold. Giving its joint actions ``R_t = r_t`` with no future
    would make the node look *worse* than a sibling node that failed now and succeeded later: with
    ``gamma = 1`` a node stopped at turn 2 with ``rbar = 1`` is worth 1.0, while a sibling that continued with
    0.2 then 1.0 is worth 1.2, so the branch that succeeded early gets the negative advantage (-0.1).

    We treat the early stop as entering an absorbing state that keeps paying the reward the team achieved:
    the stopped node's future is the value of staying at ``rbar_t`` for the ``T - t`` turns it skips,

        ``R_t(j) = r_t(j) + sum_{k=1}^{T-t} gamma^k * rbar_t``

    (the Bellman value of a terminal state with a constant per-turn reward, truncated at the horizon ``T``).
    This choice (i) puts stopped and continued nodes on the same horizon, so the parent's group-relative
    advantage compares like with like (the example above gives 2.0 vs 1.2: the early success is pushed up);
    (ii) adds the same constant to every joint action of the stopped node, so their own advantages among
    each other (``r_t(j) - rbar_t``) are unchanged; (iii) is defined even when every sibling stopped (unlike
    bootstrapping from continued siblings, which the branching cap uses for joint actions that were merely
    not sampled, because there the future is unknown rather than already secured). Stops requested by the
    environment (``is_done``) are true terminal states and keep ``R_t = r_t``.

    Args:
        rewards: Rewards of the stopped node's joint actions, shape ``(..., J)``; NaN entries are left out of
            ``rbar`` and stay NaN.
        remaining_turns: ``T - t``, the number of turns the stop skips (0 at the last turn).
        discount: ``gamma``.

    Returns:
        Returns ``R_t``, same shape as ``rewards``.

    Raises:
        ValueError: ``remaining_turns`` is negative.
    """
    if remaining_turns < 0:
        raise ValueError(f"remaining_turns must be >= 0, got {remaining_turns}.")
    horizon = sum(discount**k for k in range(1, remaining_turns + 1))
    achieved = torch.nanmean(rewards, dim=-1, keepdim=True)
    return rewards + horizon * achieved


# ----------------------------------------------------------------------------------------------------------------
# Masked statistics and whitening (shared with the PPO trainer)
# ----------------------------------------------------------------------------------------------------------------
def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over the entries where ``mask`` is nonzero: ``sum(m * x) / sum(m)``.

    Args:
        values: Input tensor.
        mask: Tensor broadcastable to ``values`` (bool or 0/1).
        dim: Dimension to reduce; ``None`` reduces over everything.

    Returns:
        The masked mean (NaN where the mask is empty, as in the original TRL PPO helper).
    """
    mask = mask.to(values.dtype).expand_as(values)
    masked = torch.where(mask != 0, values * mask, torch.zeros_like(values))
    if dim is None:
        return masked.sum() / mask.sum()
    return masked.sum(dim=dim) / mask.sum(dim=dim)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``values`` over the entries where ``mask`` is nonzero (all entries reduced).

    ``var = sum(m * (x - mu)^2) / sum(m)``, times ``k / (k - 1)`` (Bessel) when ``unbiased``, ``k = sum(m)``.

    Args:
        values: Input tensor.
        mask: Tensor broadcastable to ``values``.
        unbiased: Apply Bessel's correction.

    Returns:
        Scalar variance.

    Raises:
        ValueError: When the mask is empty, or holds a single entry and ``unbiased`` is set.
    """
    count = mask.to(values.dtype).expand_as(values).sum()
    min_count = 2 if unbiased else 1
    if count.item() < min_count:
        raise ValueError(
            f"masked_var needs at least {min_count} unmasked entries (unbiased={unbiased}), got {count.item():g}; "
            "this happens e.g. with a mini-batch of a single token."
        )
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        variance = variance * count / (count - 1)
    return variance


def whiten(values: Tensor, mask: Tensor | None = None, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Whitening used by PPO for advantages (and optionally rewards): ``(x - mu) / sqrt(var + eps)``.

    Statistics are the (masked) mean and unbiased variance over all entries. With ``shift_mean=False`` the
    mean is added back, i.e. only the scale is normalized (as TRL's PPO does for rewards).

    Args:
        values: Input tensor.
        mask: Optional mask; when given only masked-in entries enter the statistics (all entries are
            transformed; callers zero the padding themselves if they need to).
        shift_mean: Subtract the mean (``True``) or keep it.
        eps: Variance floor inside the square root.

    Returns:
        Whitened tensor, same shape as ``values``.
    """
    if mask is None:
        mask = torch.ones_like(values)
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def whiten_jointly(
    values: list[Tensor], masks: list[Tensor], shift_mean: bool = True, eps: float = 1e-8
) -> list[Tensor]:
    """:func:`whiten` of several tensors with one mean and one variance: those of all their masked entries.

    ``mu = sum_i sum(m_i * x_i) / sum_i sum(m_i)``, ``var`` the unbiased variance of the same entries, and
    ``x_i <- (x_i - mu) / sqrt(var + eps)`` (``+ mu`` again when ``shift_mean=False``). It is :func:`whiten` of the
    tensors' masked entries concatenated, for tensors of different widths, e.g. the samples of several agents that
    share one policy and one value model (one whitening group for the team).

    Args:
        values: Tensors to whiten (any shapes).
        masks: One mask per tensor, broadcastable to it; only masked-in entries enter the statistics.
        shift_mean: Subtract the mean (``True``) or keep it.
        eps: Variance floor inside the square root.

    Returns:
        The whitened tensors, in order, shaped like ``values``.

    Raises:
        ValueError: ``values`` and ``masks`` differ in length, or fewer than two entries are masked in.
    """
    if len(values) != len(masks):
        raise ValueError(f"Got {len(values)} tensors and {len(masks)} masks.")
    entries = torch.cat([v[m.to(torch.bool).expand_as(v)].reshape(-1) for v, m in zip(values, masks)])
    if entries.numel() < 2:
        raise ValueError(f"whiten_jointly needs at least 2 unmasked entries, got {entries.numel()}.")
    mean = entries.mean()
    var = entries.var(unbiased=True)
    scale = torch.rsqrt(var + eps)
    return [(v - mean) * scale + (0.0 if shift_mean else mean) for v in values]
