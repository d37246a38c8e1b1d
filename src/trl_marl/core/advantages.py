"""How returns become advantages in MAGRPO and its family: the ``"group"`` estimators, one pure function each.

An *advantage estimator* turns the returns of one turn's samples into their advantages. It is a function
``estimator(returns, context) -> advantages`` registered under a name with :func:`register_advantage_estimator`
(the registry of every trainer's estimators, `core.estimators`, where PPO's ``"critic"`` estimators live beside these);
that name is what ``MAGRPOConfig.advantage_mode`` takes, and adding an estimator is one function and its decorator
(docs/extending.md). ``returns`` has shape ``(K, n, G)``: K nodes of the rollout tree at this turn, n agents, G
samples per agent per node; the last dimension is one *group* (an agent's G siblings at a node). ``context``
([`AdvantageContext`]) carries what some estimators need besides: ``eps``, the batch's team returns, each node's
episode (dataset row) and every turn of the rollout. Estimators leave NaN returns (unscorable samples) out of every
statistic and give them advantage 0, as TRL 1.16's ``GRPOTrainer`` does. Three of them are also GRPO's
``scale_rewards`` values (``"mean"``: ``"none"``, ``"std"``: ``"group"``, ``"batch"``: ``"batch"``), declared where
they are registered.

Notation follows the papers:

- MAGRPO: Liu, Chen, Liang, Lyu, Amato, "LLM Collaboration With Multi-Agent Reinforcement Learning",
  arXiv 2508.04652. ``n`` agents, ``G`` samples (``num_generations``) per agent per node, a centralized
  reward ``r`` per *joint* action, returns ``R_t = r_t + gamma * mean(R_{t+1} of the children)``
  (`core.returns`), and the group-relative advantage ``A = R - mean(R)`` among the siblings of one node.
- GRPO: Shao et al., "DeepSeekMath", arXiv 2402.03300, Sec. 4.1.2 (outcome supervision):
  ``A_i = (r_i - mean(r)) / std(r)``.
- RLOO: Ahmadian et al., "Back to Basics", arXiv 2402.14740, Eq. 5 (leave-one-out baseline):
  ``A_i = r_i - 1/(G-1) * sum_{j != i} r_j``.
- REINFORCE (Williams 1992, no baseline): ``A_i = r_i`` (comlrl's MAREINFORCE); comlrl's MAReMax group-max
  baseline: ``A_i = r_i - max_j r_j``, the best *sampled* return of the group. Despite comlrl's name this is not
  ReMax's baseline (Li et al., arXiv 2310.10505: the reward of a greedy, argmax-decoded response), which
  would need an extra greedy rollout per prompt.
- AT-GRPO: Zhao et al., "Stronger Together: On-Policy Reinforcement Learning for Collaborative LLMs",
  arXiv 2510.11062 (agent- and turn-wise groups, a team reward plus a per-agent local reward).
- Dr. MAS: Feng et al., "Dr. MAS: Stable Reinforcement Learning for Multi-Agent LLM Systems", arXiv 2602.08847
  (each agent normalised with its own reward statistics).

The joint-action and return math lives in `core.returns`, the NaN-aware and masked statistics in `core.statistics`;
this module re-exports both, so ``from trl_marl.core.advantages import tree_returns`` keeps working.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from .estimators import (
    AdvantageContext,
    AdvantageEstimator,
    advantage_estimator,
    advantage_mode_help,
    advantage_modes,
    estimator_uses_local_returns,
    register_advantage_estimator,
)
from .returns import (
    JOINT_MODES,
    agent_local_returns_from_joint,
    agent_returns_from_joint,
    early_stop_returns,
    joint_action_indices,
    tree_returns,
)
from .statistics import masked_mean, masked_var, nan_std, valid_count, whiten, whiten_jointly

__all__ = [
    "ADVANTAGE_MODES",
    "JOINT_MODES",
    "AdvantageContext",
    "AdvantageEstimator",
    "advantage_estimator",
    "advantage_mode_help",
    "advantage_modes",
    "agent_local_returns_from_joint",
    "agent_norm_advantages",
    "agent_returns_from_joint",
    "agent_turn_advantages",
    "batch_advantages",
    "batch_scaled_advantages",
    "early_stop_returns",
    "estimator_uses_local_returns",
    "group_relative_advantages",
    "joint_action_indices",
    "loo_advantages",
    "masked_mean",
    "masked_var",
    "max_advantages",
    "mean_advantages",
    "nan_std",
    "no_signal_nodes",
    "raw_advantages",
    "register_advantage_estimator",
    "std_advantages",
    "tree_returns",
    "whiten",
    "whiten_jointly",
]


def _check_group_size(returns: Tensor, mode: str) -> None:
    group_size = returns.shape[-1]
    if group_size < 2:
        raise ValueError(f"Advantage mode {mode!r} needs at least 2 samples per group, got G={group_size}.")


def _normalised(values: Tensor, mean: Tensor, std: Tensor, eps: float) -> Tensor:
    return torch.nan_to_num((values - mean) / (std + eps), nan=0.0)


def _group_standardised(returns: Tensor, eps: float, name: str) -> Tensor:
    """(R - mean R) / (std R + eps) within each group (the last dimension); `name` is the mode a too-small G names."""
    _check_group_size(returns, name)
    mean = torch.nanmean(returns, dim=-1, keepdim=True)
    return _normalised(returns, mean, nan_std(returns, dim=-1, keepdim=True), eps)


# ----------------------------------------------------------------------------------------------------------------
# Group-relative estimators: the group is an agent's G samples at one node (the last dimension)
# ----------------------------------------------------------------------------------------------------------------
@register_advantage_estimator("mean", scale_rewards="none")
def mean_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = R - mean R over the group (the MAGRPO paper; Dr. GRPO; GRPO's scale_rewards='none').

    ``A_i = R_i - mean_j R_j`` among the G samples of one agent at one node (MAGRPO, arXiv 2508.04652).

    ```python
    >>> mean_advantages(torch.tensor([[[1.0, 0.0, 5.0]]]), AdvantageContext())
    tensor([[[-1., -2.,  3.]]])

    ```
    """
    return torch.nan_to_num(returns - torch.nanmean(returns, dim=-1, keepdim=True), nan=0.0)


@register_advantage_estimator("std", scale_rewards="group")
def std_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = (R - mean R) / (std R + eps) over the group (GRPO; scale_rewards='group').

    GRPO (DeepSeekMath, arXiv 2402.03300, Sec. 4.1.2; TRL ``scale_rewards="group"``):
    ``A_i = (R_i - mean_j R_j) / (std_j R_j + eps)`` with the unbiased std. A group with one valid return (std
    undefined) gets 0, as TRL's ``nanstd`` + ``nan_to_num`` gives. Needs ``G >= 2``.

    Group ``[1, 0, 5]``: mean 2, std ``sqrt((1 + 4 + 9) / 2) = 2.6458``:

    ```python
    >>> std_advantages(torch.tensor([[[1.0, 0.0, 5.0]]]), AdvantageContext(eps=0.0))
    tensor([[[-0.3780, -0.7559,  1.1339]]])

    ```
    """
    return _group_standardised(returns, context.eps, "std")


@register_advantage_estimator("loo")
def loo_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = R - mean of the group's other returns (leave-one-out: RLOO, MARLOO).

    RLOO (arXiv 2402.14740, Eq. 5), MARLOO, comlrl 1.4.3's ``advantage_mode="rloo"``:
    ``A_i = R_i - mean_{j != i} R_j = (G * R_i - sum_j R_j) / (G - 1) = G / (G - 1) * (R_i - mean_j R_j)``,
    ``G`` the number of valid returns; a group with one valid return gets 0. Needs ``G >= 2``.

    ```python
    >>> loo_advantages(torch.tensor([[[1.0, 0.0, 5.0]]]), AdvantageContext())
    tensor([[[-1.5000, -3.0000,  4.5000]]])

    ```
    """
    _check_group_size(returns, "loo")
    centered = returns - torch.nanmean(returns, dim=-1, keepdim=True)
    count = valid_count(returns, dim=-1, keepdim=True)
    # k/(k-1) * (R_i - mean) ; undefined (NaN -> 0 below) when only one sample is valid
    scale = torch.where(count > 1, count / (count - 1).clamp(min=1), torch.full_like(count, float("nan")))
    return torch.nan_to_num(centered * scale, nan=0.0)


@register_advantage_estimator("raw")
def raw_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = R, no baseline (REINFORCE: MAREINFORCE).

    REINFORCE without a baseline (Williams 1992), comlrl's MAREINFORCE: ``A_i = R_i``.

    ```python
    >>> raw_advantages(torch.tensor([[[1.0, float("nan"), 5.0]]]), AdvantageContext())
    tensor([[[1., 0., 5.]]])

    ```
    """
    return torch.where(torch.isnan(returns), torch.zeros_like(returns), returns)


@register_advantage_estimator("max")
def max_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = R - max R over the group (MAReMax: CoMLRL's group-max baseline, not ReMax's greedy-rollout baseline).

    ``A_i = R_i - max_j R_j``: every advantage is <= 0; the best sample of the group gets 0 and the others are pushed
    down by how far they fall short of it. Not ReMax's greedy-rollout baseline (see the module docstring).

    ```python
    >>> max_advantages(torch.tensor([[[1.0, 0.0, 3.0]]]), AdvantageContext())
    tensor([[[-2., -3.,  0.]]])

    ```
    """
    best = torch.where(torch.isnan(returns), torch.full_like(returns, float("-inf")), returns)
    best = best.amax(dim=-1, keepdim=True)
    # a group without a valid return keeps NaN (-> 0); R - max is 0 at the best sample, never positive
    return torch.nan_to_num(returns - best, nan=0.0)


@register_advantage_estimator("batch", scale_rewards="batch")
def batch_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """A = (R - mean R) / std of the turn's team returns over the whole batch, every process's (scale_rewards='batch').

    GRPO with TRL's ``scale_rewards="batch"``: :func:`batch_scaled_advantages` with ``context.team_returns`` (the
    turn's team returns of every process; ``returns`` itself when ``None``). Team returns ``[0, 1, 0, 1]`` (std
    ``0.5774``) for one node of two agents in aligned mode:

    ```python
    >>> team = torch.tensor([0.0, 1.0, 0.0, 1.0])
    >>> batch_advantages(team.repeat(1, 2, 1), AdvantageContext(eps=0.0, team_returns=team))
    tensor([[[-0.8660,  0.8660, -0.8660,  0.8660],
             [-0.8660,  0.8660, -0.8660,  0.8660]]])

    ```
    """
    return batch_scaled_advantages(returns, eps=context.eps, team_returns=context.team_returns)


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
# Multi-agent estimators
# ----------------------------------------------------------------------------------------------------------------
@register_advantage_estimator("agent_turn", uses_local_returns=True)
def agent_turn_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """AT-GRPO: (R~ - mean R~) / (std R~ + eps) within each agent's group at each turn node, R~ = alpha R + R^loc.

    AT-GRPO (Zhao et al., arXiv 2510.11062) groups a sample by its (agent, turn) position in the rollout tree, so
    that every group shares one prompt, and normalises GRPO-style within the group. The reward of agent ``i`` at
    turn ``t`` mixes the team reward with the agent's own local one, ``r_{t,i} = alpha * r^team_t + r^loc_{t,i}``;
    here both are returns backed up through the tree (``returns`` and ``context.local_returns``, ``alpha`` is
    ``context.team_weight``): ``R~_i = alpha * R_i + R^loc_i``, then ``A_i = (R~_i - mean_j R~_j) / (std_j R~_j +
    eps)`` over the G samples of agent ``i`` at one node.

    MAGRPO's tree already puts each agent's G samples of one node in one group, so without a local reward this is
    ``"std"`` (``alpha`` only rescales, which the std removes). With team returns ``[1, 0, 5]`` for both agents of a
    node and local returns ``[0, 2, 0]`` for agent 0 (``alpha = 1``): agent 0's ``R~ = [1, 2, 5]`` (mean 2.667, std
    2.0817), agent 1's ``[1, 0, 5]``:

    ```python
    >>> team = torch.tensor([[[1.0, 0.0, 5.0], [1.0, 0.0, 5.0]]])
    >>> local = torch.tensor([[[0.0, 2.0, 0.0], [0.0, 0.0, 0.0]]])
    >>> agent_turn_advantages(team, AdvantageContext(eps=0.0, local_returns=local))
    tensor([[[-0.8006, -0.3203,  1.1209],
             [-0.3780, -0.7559,  1.1339]]])

    ```
    """
    if context.local_returns is not None:
        if context.local_returns.shape != returns.shape:
            raise ValueError(
                f"`local_returns` has shape {tuple(context.local_returns.shape)}, the returns {tuple(returns.shape)}: "
                "give one local return per sample."
            )
        returns = context.team_weight * returns + context.local_returns.to(returns.dtype)
    return _group_standardised(returns, context.eps, "agent_turn")


@register_advantage_estimator("agent_norm")
def agent_norm_advantages(returns: Tensor, context: AdvantageContext) -> Tensor:
    """Dr. MAS: (R - mean_a) / (std_a + eps), mean_a and std_a over every sample of agent a in the episode tree.

    Dr. MAS (Feng et al., arXiv 2602.08847) normalises each agent's advantages with that agent's own reward
    statistics instead of one baseline for every agent: ``A_{i,a} = (R_i - mu_a) / (sigma_a + eps)``, with ``mu_a``
    and ``sigma_a`` (unbiased) the mean and std of the returns of *every* sample agent ``a`` played in the episode
    tree of sample ``i``'s dataset row: all its nodes, all its turns (the paper's group is the rollouts of one
    prompt; its code keys the statistics by prompt and agent and pools the agent's steps). Episodes are
    ``context.rows``, turns ``context.tree``; a (row, agent) with one valid return gets 0. ``context.tree`` must hold
    this turn's own ``(rows, returns)`` (or be empty: this turn alone): statistics of the other turns alone would
    normalise this turn's returns by numbers they never entered, so a tree without it is an error, not a fallback.

    Two turns of one episode, one node each; agent 0 returns ``[2, 0]`` then ``[4, 2]`` (pooled mean 2, std 1.633),
    agent 1 ``[1, 1]`` then ``[1, 5]`` (mean 2, std 2). At turn 1:

    ```python
    >>> turn1 = torch.tensor([[[2.0, 0.0], [1.0, 1.0]]])
    >>> turn2 = torch.tensor([[[4.0, 2.0], [1.0, 5.0]]])
    >>> row = torch.tensor([0])
    >>> agent_norm_advantages(turn1, AdvantageContext(eps=0.0, rows=row, tree=((row, turn1), (row, turn2))))
    tensor([[[ 0.0000, -1.2247],
             [-0.5000, -0.5000]]])

    ```
    """
    K, n = returns.shape[0], returns.shape[-2]
    rows = context.rows if context.rows is not None else torch.arange(K)
    tree = context.tree or ((rows, returns),)
    if not any(_is_this_turn(rows, returns, r, t) for r, t in tree):
        raise ValueError(
            "`agent_norm` pools an agent's returns over the turns of `context.tree`, which must hold this turn's own "
            "`(rows, returns)`: it does not, so the statistics would be the other turns' alone. Pass every turn of "
            "the rollout, this one included (`trl_marl.rollout.advantage_context`), or an empty tree for this turn "
            "alone."
        )
    agents = torch.arange(n)
    # one key per (episode, agent): row * n + agent, for every sample of every turn
    keys = torch.cat([(r.view(-1, 1, 1) * n + agents.view(1, -1, 1)).expand(t.shape).reshape(-1) for r, t in tree])
    values = torch.cat([t.reshape(-1).to(returns.dtype) for _, t in tree])
    unique, group = torch.unique(keys, return_inverse=True)
    valid = ~torch.isnan(values)
    zeros = torch.zeros(unique.numel(), dtype=returns.dtype)
    count = zeros.index_add(0, group, valid.to(returns.dtype))
    mean = zeros.index_add(0, group, torch.where(valid, values, 0.0)) / count.clamp(min=1)
    sq_dev = torch.where(valid, (values - mean[group]) ** 2, 0.0)
    var = zeros.index_add(0, group, sq_dev) / (count - 1).clamp(min=1)
    std = torch.where(count > 1, var.sqrt(), torch.full_like(var, float("nan")))
    wanted = (rows.view(-1, 1, 1) * n + agents.view(1, -1, 1)).expand(returns.shape).contiguous()
    here = torch.searchsorted(unique, wanted).clamp(max=unique.numel() - 1)
    if not torch.equal(unique[here], wanted):
        raise ValueError("`context.tree` must hold this turn's (rows, returns): an episode of the turn is missing.")
    return _normalised(returns, mean[here], std[here], context.eps)


def no_signal_nodes(mode: str, returns: Tensor, context: AdvantageContext, tol: float = 1e-8) -> Tensor:
    """Ask the estimator registered as ``mode`` which nodes give no learning signal: every advantage there is 0.

    Whether a flat group (every sample the same return) gives advantage 0 is the estimator's business, not the
    returns': ``"mean"``, ``"std"``, ``"loo"`` and ``"max"`` give 0, but ``"raw"`` gives the returns themselves (a
    flat group of 2.0 gets +2.0 each) and ``"agent_norm"`` normalises by an agent's statistics over the whole episode
    (two flat nodes of one episode, ``[1, 1]`` and ``[2, 2]``: one agent's pooled mean 1.5, std 0.5774, advantages
    -0.866 and +0.866). The estimator
    runs on the returns in float64, where a flat group's rounding stays far below ``tol`` (in float32 ``"std"`` turns
    the rounding of a flat group's mean into advantages of up to 1e-2); a node counts as silent when its every
    advantage is within ``tol * max(1, max |R|)`` of 0 (``R`` the node's finite returns).

    Args:
        mode: A registered estimator's name (``MAGRPOConfig.advantage_mode``).
        returns: ``(K, n, G)`` the turn's returns, as the estimator takes them.
        context: The estimator's context for this turn (its tensors are cast to float64 here).
        tol: The tolerance, relative to the returns' size.

    Returns:
        ``(K,)`` booleans, True at the nodes without a learning signal.

    ```python
    >>> flat = torch.tensor([[[1.0, 1.0]], [[2.0, 2.0]]])  # two nodes of one episode, one agent, flat
    >>> context = AdvantageContext(rows=torch.tensor([0, 0]))
    >>> no_signal_nodes("mean", flat, context), no_signal_nodes("agent_norm", flat, context)
    (tensor([True, True]), tensor([False, False]))

    ```
    """
    def wide(x: Tensor | None) -> Tensor | None:
        return None if x is None else x.double()

    context = replace(context, team_returns=wide(context.team_returns), local_returns=wide(context.local_returns),
                      tree=tuple((r, t.double()) for r, t in context.tree))
    wide_returns = returns.double()
    K = len(returns)
    advantages = advantage_estimator(mode)(wide_returns, context).reshape(K, -1)
    if advantages.shape[-1] == 0:
        return torch.ones(K, dtype=torch.bool)
    scale = wide_returns.reshape(K, -1).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs().amax(dim=-1).clamp(min=1.0)
    return advantages.abs().amax(dim=-1) <= tol * scale


def _is_this_turn(rows: Tensor, returns: Tensor, tree_rows: Tensor, tree_returns: Tensor) -> bool:
    """Whether a turn of ``context.tree`` is the turn being estimated: the same rows and the same returns."""
    if tree_returns.shape != returns.shape or not torch.equal(tree_rows.cpu(), rows.cpu()):
        return False
    other = tree_returns.to(returns)
    missing = torch.isnan(returns)  # NaN (unscorable) in both, or equal values
    return torch.equal(missing, torch.isnan(other)) and torch.equal(other[~missing], returns[~missing])


ADVANTAGE_MODES: tuple[str, ...] = advantage_modes()
"""The built-in estimators' names (`advantage_modes()` also lists those registered later)."""


def group_relative_advantages(returns: Tensor, mode: str = "mean", eps: float = 1e-4) -> Tensor:
    """Group-relative advantage among the G siblings of one node, groups along the last dimension of ``returns``.

    The ``"group"`` estimator registered as ``mode`` with ``AdvantageContext(eps=eps)`` (nothing but the group: no
    other turn, no local reward, the batch this group alone); ``returns`` may have any shape ``(..., G)``.

    Raises:
        ValueError: Unknown ``mode`` (naming the registered ones), or ``G < 2`` for ``"std"`` / ``"loo"``.

    Example:

    ```python
    >>> group_relative_advantages(torch.tensor([1.0, 0.0, 3.0]), mode="max")
    tensor([-2., -3.,  0.])

    ```
    """
    return advantage_estimator(mode)(returns, AdvantageContext(eps=eps))
