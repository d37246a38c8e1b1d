"""The arguments of a reward call: which agent's texts a reward scores, and the dataset columns it reads.

Every text reward of trl-marl (ROUGE-L, CodeBLEU, unit tests, verifiers, the writing and coding task rewards) reads
its inputs through these helpers, so that they agree on the meaning of `agent_index` (see [`AgentSelector`]), on
missing cells and on the error a missing column raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .text import completion_text

__all__ = ["MULTI_AGENT_KWARGS", "AgentSelector", "column", "is_missing", "select_texts"]

AgentSelector = int | Literal["concat"] | None
"""Which agent's text a reward scores: `None` (the `completions` argument, i.e. agent 0 in a team reward, or the
single agent of a plain TRL trainer), an agent index (`agent_completions[index]`), or `"concat"` (every agent's
text of the joint action, joined)."""

# Keyword arguments that trl-marl passes to reward functions besides the dataset columns (see `TeamReward`).
MULTI_AGENT_KWARGS = frozenset(
    {"agent_prompts", "agent_completions", "agent_index", "turn", "transcript", "trainer_state", "completion_ids"}
)


def select_texts(
    completions: Sequence[Any],
    agent_completions: Sequence[Sequence[Any]] | None,
    agent: AgentSelector,
    separator: str,
    owner: str,
    transform: Callable[[str], str] | None = None,
) -> list[str]:
    """The texts a reward scores, one per joint action.

    Args:
        completions (`Sequence`): The `completions` argument of the reward call.
        agent_completions (`Sequence[Sequence]` or `None`): One list of completions per agent (trl-marl passes it;
            a plain TRL trainer does not).
        agent (`int`, `"concat"` or `None`): `None`: `completions`; an index `i`: `agent_completions[i]`;
            `"concat"`: every agent's text of each joint action joined with `separator`.
        separator (`str`): The separator of `"concat"`.
        owner (`str`): The reward's name, used in error messages.
        transform (`Callable[[str], str]`, *optional*): Applied to each agent's text before joining (e.g. stripping
            code fences), so that `"concat"` transforms every agent's part separately.

    Returns:
        `list[str]`: One text per joint action.
    """

    def text(completion: Any) -> str:
        value = completion_text(completion)
        return transform(value) if transform is not None else value

    if agent is None:
        return [text(c) for c in completions]
    if agent_completions is None:
        if agent == 0 or agent == "concat":  # a single-agent trainer: agent 0 is the only agent
            return [text(c) for c in completions]
        raise ValueError(
            f"{owner} scores agent {agent!r} but the reward call has no `agent_completions` (one list of completions "
            "per agent, passed by trl-marl's trainers). Use agent_index=None to score `completions`."
        )
    if agent == "concat":
        return [separator.join(text(agent_list[j]) for agent_list in agent_completions)
                for j in range(len(completions))]
    if not isinstance(agent, int) or isinstance(agent, bool):
        raise ValueError(f"{owner}: `agent_index` must be None, an int or 'concat', got {agent!r}.")
    if not 0 <= agent < len(agent_completions):
        raise ValueError(
            f"{owner} scores agent {agent} but the team has {len(agent_completions)} agent(s) "
            f"(agent indices 0..{len(agent_completions) - 1})."
        )
    return [text(c) for c in agent_completions[agent]]


def is_missing(value: Any) -> bool:
    """Whether a dataset cell holds no value: `None` or a float NaN (pandas' missing value)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def column(kwargs: dict[str, Any], name: str, owner: str, size: int) -> list[Any]:
    """The dataset column `name` from a reward call's keyword arguments, checked.

    Raises:
        KeyError: The column is absent (the message names it and lists the columns the call received).
        ValueError: The column does not hold one value per completion.
    """
    if name not in kwargs:
        available = sorted(k for k in kwargs if k not in MULTI_AGENT_KWARGS)
        raise KeyError(
            f"{owner} needs the dataset column {name!r} but the reward function received only the columns "
            f"{available}. Add the column to the dataset, or tell the reward which column to read (its `*_column` "
            "argument, e.g. `reference_column=...`)."
        )
    values = list(kwargs[name])
    if len(values) != size:
        raise ValueError(f"{owner}: column {name!r} has {len(values)} values for {size} completions.")
    return values
