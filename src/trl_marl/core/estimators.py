"""The registry of advantage estimators: every credit assignment of every trainer, one name and one pure function each.

A trainer's config names its estimator in one field, ``advantage_mode``, and the trainer calls it once per batch
with everything it reads. Estimators come in two kinds, by what they read:

- ``"group"`` (MAGRPO and its family; `core.advantages`): ``estimator(returns, context) -> advantages``, the
  ``(K, n, G)`` returns of one turn of a rollout tree (K nodes, n agents, G samples per agent per node) and an
  [`AdvantageContext`] with the rest of the tree (every turn, the batch's team returns, local returns);
- ``"critic"`` (PPO; `core.ppo`): ``estimator(inputs) -> (advantages, returns)``, per-token tensors of one
  whitening group (a policy, or the team sharing one) from its per-token rewards and its critic's values
  ([`CriticInputs`]); ``returns`` are the value targets.

Adding an estimator is one function and :func:`register_advantage_estimator` (docs/extending.md). What a trainer
must know about an estimator is declared here, at its registration, and nowhere else: its kind, whether it reads
per-agent local rewards, and which value of GRPO's ``scale_rewards`` (if any) names the same estimator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from torch import Tensor

__all__ = [
    "ESTIMATOR_KINDS",
    "AdvantageContext",
    "AdvantageEstimator",
    "CriticEstimator",
    "CriticInputs",
    "advantage_estimator",
    "advantage_mode_help",
    "advantage_modes",
    "critic_estimator",
    "estimator_for_scale_rewards",
    "estimator_scale_rewards",
    "estimator_uses_local_returns",
    "register_advantage_estimator",
    "scale_rewards_help",
]

ESTIMATOR_KINDS = {"group": "MAGRPO's: group returns of a rollout tree", "critic": "PPO's: token rewards and a critic"}
"""The kinds of estimator, and what each reads (the trainer that calls it)."""


@dataclass(frozen=True)
class AdvantageContext:
    """What a ``"group"`` estimator may read besides the returns of the turn (every field has a default).

    Args:
        eps: Added to a standard deviation before dividing by it (TRL uses ``1e-4``).
        team_returns: The turn's team returns, one per joint action, of the whole batch (every process's, gathered);
            ``None``: the estimator's ``returns``. ``"batch"`` takes their std.
        rows: ``(K,)`` the episode (dataset row) of each node of the turn; ``None``: every node is an episode of
            its own.
        tree: Every turn's ``(rows, returns)`` of the rollout, this turn's included (shapes ``(K_t,)`` and
            ``(K_t, n, G)``); empty: this turn alone. ``"agent_norm"`` pools an agent's samples over the turns.
        local_returns: ``(K, n, G)`` each sample's *local* return: its agent's own local reward backed up through
            the tree like the team reward (MAGRPO's `local_reward_funcs`, docs/extending.md); ``None``: no local
            reward. Only estimators registered with ``uses_local_returns=True`` read it (``"agent_turn"``).
        team_weight: The weight ``alpha`` of the team return against the local one, ``alpha * R + R^loc``
            (AT-GRPO's mixed reward; MAGRPO's `team_reward_weight`).
    """

    eps: float = 1e-4
    team_returns: Tensor | None = None
    rows: Tensor | None = None
    tree: tuple[tuple[Tensor, Tensor], ...] = ()
    local_returns: Tensor | None = None
    team_weight: float = 1.0


@dataclass(frozen=True)
class CriticInputs:
    """What a ``"critic"`` estimator reads: one whitening group's per-token tensors, one `(N, L)` tensor per slot.

    Args:
        rewards: Per-token rewards (the KL penalty at every step plus the score at the score step).
        values: The critic's value predictions (0 past the value mask).
        policy_masks: Bool, the steps the policy loss counts.
        value_masks: Bool, the steps the value loss counts.
        gamma: The discount between steps.
        lam: GAE's lambda.
        whiten_rewards: Whiten the rewards over the group's value steps first (TRL's `whiten_rewards`).
    """

    rewards: list[Tensor]
    values: list[Tensor]
    policy_masks: list[Tensor]
    value_masks: list[Tensor]
    gamma: float = 1.0
    lam: float = 0.95
    whiten_rewards: bool = False


AdvantageEstimator = Callable[[Tensor, AdvantageContext], Tensor]
"""A ``"group"`` estimator: ``estimator(returns (K, n, G), context) -> advantages (K, n, G)``, NaN returns giving 0."""

CriticEstimator = Callable[[CriticInputs], tuple[list[Tensor], list[Tensor]]]
"""A ``"critic"`` estimator: ``estimator(inputs) -> (advantages, returns)``, one `(N, L)` tensor of each per slot."""


@dataclass(frozen=True)
class _Registered:
    func: Callable[..., Any]
    kind: str
    uses_local_returns: bool
    scale_rewards: str | None


_Func = TypeVar("_Func", bound=Callable[..., Any])
_REGISTRY: dict[str, _Registered] = {}


def register_advantage_estimator(name: str, *, kind: str = "group", replace: bool = False,
                                 uses_local_returns: bool = False,
                                 scale_rewards: str | None = None) -> Callable[[_Func], _Func]:
    """Register an advantage estimator under ``name`` (a decorator; the function is returned unchanged).

    The name becomes a valid ``advantage_mode`` of the trainers of its kind (``"group"``: `MAGRPOConfig`;
    ``"critic"``: `MultiAgentPPOConfig`); the first line of the function's docstring is its summary in
    :func:`advantage_mode_help` (a config's help text lists the estimators registered when ``trl_marl.trainers`` was
    imported: the built-in ones). Register before building the config.

    Args:
        name: The ``advantage_mode`` value that selects the estimator (one namespace for both kinds).
        kind: ``"group"`` (``estimator(returns, context) -> advantages``) or ``"critic"``
            (``estimator(inputs) -> (advantages, returns)``); see the module docstring.
        replace: Replace an estimator already registered under ``name`` (otherwise that is an error).
        uses_local_returns: A ``"group"`` estimator that reads ``context.local_returns`` and ``context.team_weight``
            (per-agent local rewards, e.g. ``"agent_turn"``). A trainer refuses local rewards for an estimator that
            does not (:func:`estimator_uses_local_returns`), since it would drop them without a word.
        scale_rewards: The value of GRPO's ``scale_rewards`` that means this ``"group"`` estimator (``"none"``,
            ``"group"`` or ``"batch"``), so a GRPO user's setting selects it (:func:`estimator_for_scale_rewards`).
            At most one estimator per value.

    Returns:
        The decorator.

    Raises:
        ValueError: ``name`` is empty or not a string, or already registered and ``replace`` is False; an unknown
            ``kind``; ``uses_local_returns`` or ``scale_rewards`` on a ``"critic"`` estimator; a ``scale_rewards``
            value another estimator has.

    Example:

    ```python
    >>> import torch
    >>> @register_advantage_estimator("doc_centered_sign")
    ... def centered_sign(returns, context):
    ...     "sign of R - mean R over the group."
    ...     return torch.sign(returns - returns.mean(dim=-1, keepdim=True))
    >>> advantage_estimator("doc_centered_sign")(torch.tensor([[[1.0, 0.0, 5.0]]]), AdvantageContext())
    tensor([[[-1., -1.,  1.]]])

    ```
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"An advantage estimator's name must be a non-empty string, got {name!r}.")
    if kind not in ESTIMATOR_KINDS:
        raise ValueError(f"`kind` must be one of {tuple(ESTIMATOR_KINDS)}, got {kind!r}.")
    if kind == "critic" and (uses_local_returns or scale_rewards is not None):
        raise ValueError(f"A critic estimator ({name!r}) reads token rewards and values: it takes neither "
                         "`uses_local_returns` nor `scale_rewards`.")
    if scale_rewards is not None:
        taken = [other for other, spec in _REGISTRY.items() if spec.scale_rewards == scale_rewards and other != name]
        if taken and not replace:
            raise ValueError(f"`scale_rewards={scale_rewards!r}` names the estimator {taken[0]!r} already; register "
                             f"{name!r} without it, or pass `replace=True`.")

    def decorate(func: _Func) -> _Func:
        if name in _REGISTRY and not replace and _REGISTRY[name].func is not func:
            raise ValueError(
                f"An advantage estimator named {name!r} is registered already ({_REGISTRY[name].func.__name__}): "
                "choose another name, or pass `replace=True` to replace it."
            )
        if scale_rewards is not None:  # `replace=True` moves the value to this estimator
            for other, spec in list(_REGISTRY.items()):
                if spec.scale_rewards == scale_rewards:
                    _REGISTRY[other] = _Registered(spec.func, spec.kind, spec.uses_local_returns, None)
        _REGISTRY[name] = _Registered(func, kind, uses_local_returns, scale_rewards)
        return func

    return decorate


def advantage_modes(kind: str = "group") -> tuple[str, ...]:
    """The names of the estimators of ``kind``, in registration order (the built-in ones first)."""
    return tuple(name for name, spec in _REGISTRY.items() if spec.kind == kind)


def _lookup(name: str, kind: str) -> _Registered:
    spec = _REGISTRY.get(name) if isinstance(name, str) else None
    if spec is not None and spec.kind == kind:
        return spec
    other = (f" ({name!r} is a {spec.kind} estimator, {ESTIMATOR_KINDS[spec.kind].split(':')[0]}, which this trainer "
             "does not call)") if spec is not None else ""
    raise ValueError(
        f"`advantage_mode` must be one of {advantage_modes(kind)}, got {name!r}{other}. A new estimator is one "
        f"function registered with `trl_marl.core.register_advantage_estimator(name, kind={kind!r})` "
        "(docs/extending.md)."
    )


def advantage_estimator(name: str) -> AdvantageEstimator:
    """The ``"group"`` estimator registered under ``name``.

    Raises:
        ValueError: No group estimator has that name; the message names `advantage_mode` and the registered names.
    """
    return _lookup(name, "group").func


def critic_estimator(name: str) -> CriticEstimator:
    """The ``"critic"`` estimator registered under ``name``.

    Raises:
        ValueError: No critic estimator has that name; the message names `advantage_mode` and the registered names.
    """
    return _lookup(name, "critic").func


def estimator_uses_local_returns(name: str) -> bool:
    """Whether the ``"group"`` estimator ``name`` reads per-agent local returns (``uses_local_returns=True``).

    Raises:
        ValueError: No group estimator has that name (as :func:`advantage_estimator`).
    """
    return _lookup(name, "group").uses_local_returns


def estimator_scale_rewards(name: str) -> str | None:
    """The value of GRPO's ``scale_rewards`` that means the ``"group"`` estimator ``name`` (None: no value does).

    Raises:
        ValueError: No group estimator has that name (as :func:`advantage_estimator`).
    """
    return _lookup(name, "group").scale_rewards


def estimator_for_scale_rewards(value: str) -> str:
    """The ``"group"`` estimator that GRPO's ``scale_rewards=value`` means (``"none"`` -> ``"mean"``, ...).

    Raises:
        ValueError: No estimator is registered for ``value``; the message names `scale_rewards` and the values.
    """
    for name, spec in _REGISTRY.items():
        if spec.scale_rewards == value and spec.kind == "group":
            return name
    values = tuple(spec.scale_rewards for spec in _REGISTRY.values() if spec.scale_rewards is not None)
    raise ValueError(f"`scale_rewards` must be one of {values}, got {value!r}.")


def scale_rewards_help() -> str:
    """``'value': 'estimator'`` for each value of GRPO's ``scale_rewards`` an estimator is registered for."""
    return ", ".join(f"'{spec.scale_rewards}': '{name}'" for name, spec in _REGISTRY.items()
                     if spec.scale_rewards is not None)


def advantage_mode_help(kind: str = "group") -> str:
    """One line per estimator of ``kind``, ``'name': summary`` (the first line of its docstring), for a help text."""
    lines = []
    for name, spec in _REGISTRY.items():
        if spec.kind != kind:
            continue
        summary = (spec.func.__doc__ or "").strip().splitlines()
        lines.append(f"'{name}': {summary[0].rstrip('.') if summary else spec.func.__name__}")
    return "; ".join(lines)
