"""What a reward function declares (`trl_marl.reward_contract`): the keyword arguments it must accept and its kind.

- [`check_reward_signature`]: a function that cannot take a reward call's keyword arguments (it lacks `**kwargs`) is
  refused when the trainer is built, not at the first reward call ("unexpected keyword argument").
- [`team_reward`], [`agent_reward`], [`reward_kind`]: a function's kind ([`REWARD_KINDS`]), declared by its
  `reward_kind` attribute, else its trainer's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

REWARD_KEYWORDS = ("prompts", "completions", "agent_prompts", "agent_completions", "agent_index", "turn",
                   "transcript", "trainer_state")
"""The keyword arguments every reward call gets (besides the dataset's columns)."""

TOOL_REWARD_KEYWORDS = ("agent_tool_messages",)
"""The keyword arguments a reward call also gets in a trainer with tools (each agent's calls and their results)."""

REWARD_KINDS = ("team", "agent")
"""The kinds of reward function (see `trl_marl.reward_contract`)."""

RewardFunc = Callable[..., Sequence[Any]]


def team_reward(func: RewardFunc) -> RewardFunc:
    """Declare `func` a team reward: one score per joint action, in every trainer (returns `func`)."""
    func.reward_kind = "team"  # type: ignore[attr-defined]
    return func


def agent_reward(func: RewardFunc) -> RewardFunc:
    """Declare `func` an agent reward: one score per (turn, agent) response, in every trainer (returns `func`)."""
    func.reward_kind = "agent"  # type: ignore[attr-defined]
    return func


def reward_kind(func: Any, default: str) -> str:
    """The kind of `func`: its `reward_kind` attribute, else `default` (the trainer's kind)."""
    kind = getattr(func, "reward_kind", None) or default
    if kind not in REWARD_KINDS:
        raise ValueError(f"`reward_kind` of {func!r} must be one of {REWARD_KINDS}, got {kind!r}.")
    return kind


def check_reward_signature(func: Callable[..., Any], name: str, keywords: Sequence[str] = REWARD_KEYWORDS) -> None:
    """Refuse a reward function that cannot take the keyword arguments of a reward call (it lacks `**kwargs`):
    `keywords`, [`REWARD_KEYWORDS`] by default, and with [`TOOL_REWARD_KEYWORDS`] in a trainer with tools."""
    missing = missing_keywords(func, keywords)
    if missing:
        tools = " (`agent_tool_messages`: this trainer has tools)" if set(missing) & set(TOOL_REWARD_KEYWORDS) else ""
        raise TypeError(
            f"Reward function `{name}` does not take `**kwargs`: every reward call passes keyword arguments "
            f"({', '.join(keywords)}, and every dataset column, e.g. `target`), and it does not accept "
            f"{', '.join(f'`{k}`' for k in missing)}{tools}. Add `**kwargs` to its signature, e.g. "
            f"`def {getattr(func, '__name__', 'reward')}(prompts, completions, **kwargs)`."
        )


def missing_keywords(func: Callable[..., Any], keywords: Sequence[str]) -> list[str]:
    """The `keywords` that `func` cannot take by name (none when it takes `**kwargs`, or has no readable signature)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return []
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return []
    accepted = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [k for k in keywords if k not in accepted]
