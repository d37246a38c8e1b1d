"""Joint actions, credit and multi-turn returns of MAGRPO's rollout tree (arXiv 2508.04652).

Pure tensor math, one function per equation; split out of `core.advantages`, which re-exports every name here, so
`from trl_marl.core.advantages import tree_returns` keeps working. How returns become advantages is
`core.advantages` (the estimator registry).
"""

from __future__ import annotations

import itertools

import torch
from torch import Tensor

__all__ = ["JOINT_MODES", "agent_local_returns_from_joint", "agent_returns_from_joint", "early_stop_returns",
           "joint_action_indices", "tree_returns"]

JOINT_MODES: tuple[str, ...] = ("aligned", "cross")
"""Valid ``mode`` values of :func:`joint_action_indices`."""


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


def agent_local_returns_from_joint(local_returns: Tensor, joint_indices: Tensor, num_generations: int) -> Tensor:
    """Local return credited to each agent's sample: the mean of *its own agent's* local return over the joint
    actions that contain it (AT-GRPO's per-agent local reward, arXiv 2510.11062, on MAGRPO's tree).

    ``R^loc_a(g) = mean_{j : joint_indices[j, a] = g} R^loc(j, a)``: as :func:`agent_returns_from_joint`, but each
    agent reads its own row of ``local_returns`` (another agent's local reward never reaches it). In ``aligned``
    mode this is ``R^loc(g, a)``. NaN entries are left out of the mean; a sample with none gets NaN.

    Args:
        local_returns: Each agent's local return in each joint action, shape ``(n, J)`` or ``(B, n, J)``.
        joint_indices: Output of :func:`joint_action_indices`, shape ``(J, n)``.
        num_generations: ``G``.

    Returns:
        Shape ``(n, G)``, or ``(B, n, G)``.

    Example: two agents, G = 2, ``cross`` (joint actions (0,0), (0,1), (1,0), (1,1)); agent 0's local returns
    ``[1, 3, 0, 2]``, agent 1's ``[4, 0, 2, 0]``: agent 0's sample 0 is in joint actions 0 and 1 (mean 2), sample 1
    in 2 and 3 (1); agent 1's sample 0 in 0 and 2 (3), sample 1 in 1 and 3 (0).

    ```python
    >>> local = torch.tensor([[1.0, 3.0, 0.0, 2.0], [4.0, 0.0, 2.0, 0.0]])
    >>> agent_local_returns_from_joint(local, joint_action_indices(2, 2, "cross"), 2)
    tensor([[2., 1.],
            [3., 0.]])

    ```
    """
    n = joint_indices.shape[1]
    if local_returns.shape[-2:] != (n, joint_indices.shape[0]):
        raise ValueError(
            f"local_returns has shape {tuple(local_returns.shape)}; expected (..., {n}, {joint_indices.shape[0]}): "
            "one local return per agent and joint action."
        )
    credited = agent_returns_from_joint(local_returns, joint_indices, num_generations)  # (..., n_rows, n, G)
    return torch.diagonal(credited, dim1=-3, dim2=-2).movedim(-1, -2)  # row a of agent a: (..., n, G)


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
