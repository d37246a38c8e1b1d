"""The team reward of the division-of-labour task ([`~trl_marl.envs.coordination.ChatSplitItemsEnv`])."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# the first word of a completion, after optional spaces and an opening quote/bracket; a number continued by a
# decimal or thousands part ("37.5", "3,700") is not a word of its own
_FIRST_WORD = re.compile(r"^\s*[\"'(\[]?([^\W_]+)(?![^\W_])(?![.,]\d)")


def first_word(text: Any) -> str | None:
    """The first word of a completion, case-folded (`" 37. Because"` -> `"37"`, `"Apple!"` -> `"apple"`), or `None`.

    Example:

    ```python
    >>> first_word(" 37. I take the first"), first_word(' "Blue"'), first_word("37.5"), first_word(" ...")
    ('37', 'blue', None, None)
    ```
    """
    if isinstance(text, list):  # conversational completion
        text = text[-1]["content"] if text else ""
    match = _FIRST_WORD.match(str(text))
    return match.group(1).casefold() if match else None


class SplitItemsReward:
    """Team reward of [`ChatSplitItemsEnv`]: the fraction of the row's items that the agents named.

    Each agent names one item: the first word of its completion ([`first_word`]), compared case-insensitively with
    the items. The reward is the number of *distinct* items named divided by the number of items, so with as many
    agents as items it is 1 exactly when every agent named a different item, and two agents naming the same item
    count once. A word that is not an item counts nothing; an agent can name at most one item (only its first word
    is read), so listing every item in one answer gains nothing.

    Args:
        items_column (`str`): The dataset column holding each row's list of items.

    Example:

    ```python
    >>> reward = SplitItemsReward()
    >>> reward(None, None, agent_completions=[[" 37.", " 37", " 37"], [" 52", " 37", " nine"]],
    ...        items=[[37, 52]] * 3)
    [1.0, 0.5, 0.5]
    ```
    """

    name = "split_items"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, items_column: str = "items") -> None:
        self.items_column = items_column

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], *,
                 agent_completions: Sequence[Sequence[Any]] | None = None, **kwargs: Any) -> list[float]:
        if self.items_column not in kwargs:
            raise KeyError(f"SplitItemsReward needs the dataset column {self.items_column!r}.")
        team = agent_completions if agent_completions is not None else [completions]
        rewards = []
        for j, items in enumerate(kwargs[self.items_column]):
            keys = {str(item).strip().casefold() for item in items}
            named = {first_word(agent[j]) for agent in team} & keys
            rewards.append(len(named) / len(keys))
        return rewards
