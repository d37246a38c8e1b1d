"""Division of labour: the agents must split a list of items between them without communicating.

[`ChatSplitItemsEnv`] shows every agent the same list (two numbers by default) and asks each to say *one* item;
the team wins when together the agents name every item, each a different one
([`~trl_marl.rewards.coordination.SplitItemsReward`]). Saying an item is easy (a copy from the prompt); choosing
*which* one is a coordination problem: an agent cannot see its partner's choice, so it must rely on a convention
("player 1 takes the first item, player 2 the second"). A convention over *positions* works on any list, so it
transfers to items never seen in training, and agents trained separately against a fixed partner tend to pick the
same item (each best-responds to the partner's bias), which a jointly trained team avoids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript

SPLIT_ITEMS_SYSTEM_PROMPT = "Answer with one number."
"""The default system message of [`ChatSplitItemsEnv`] (items are numbers by default)."""

SPLIT_ITEMS_TEMPLATE = (
    "The numbers are {items}. You and a partner each say one of these numbers, without seeing each other's answer. "
    "The team wins if you say different numbers. You are player {player}."
)
"""The default user message of [`ChatSplitItemsEnv`]: fields `items` (joined with ", " and a final " and ") and
`player` (the 1-based agent number)."""


def join_items(items: Sequence[Any]) -> str:
    """`"a"`, `"a and b"`, `"a, b and c"`."""
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


class ChatSplitItemsEnv(MultiAgentEnv):
    """Every agent sees the row's list of items and names one; the team wins when they name them all.

    One turn. Agent i's prompt is `[system, user (the list and "You are player i+1."), assistant prefill]`; the
    completion continues the prefill (`" 37."`). Score it with
    [`~trl_marl.rewards.coordination.SplitItemsReward`], which reads the first word of each completion.

    Args:
        num_agents (`int`): Number of agents (and, usually, of items per row).
        items_column (`str`): The dataset column holding each row's list of items.
        system_prompt (`str`, *optional*): The system message; `None` leaves it out.
        template (`str`): The user message, a format string over `items` and `player`.
        prefill (`str`): The start of the assistant's answer that the model continues; `""` gives no prefill.

    Example:

    ```python
    >>> env = ChatSplitItemsEnv(2)
    >>> env.agent_prompt({"items": [37, 52]}, 1, Transcript())[1]["content"].split(".")[0]
    'The numbers are 37 and 52'
    ```
    """

    def __init__(self, num_agents: int = 2, items_column: str = "items",
                 system_prompt: str | None = SPLIT_ITEMS_SYSTEM_PROMPT, template: str = SPLIT_ITEMS_TEMPLATE,
                 prefill: str = "My number is") -> None:
        super().__init__(num_agents, 1)
        try:
            template.format(items="1 and 2", player=1)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"ChatSplitItemsEnv: `template` may only use the fields {{items}} and {{player}}, got "
                             f"{template!r} ({error!r}).") from error
        self.items_column = items_column
        self.system_prompt = system_prompt
        self.template = template
        self.prefill = prefill
        self.required_columns = (items_column,)

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        items = row[self.items_column]
        if isinstance(items, str) or not isinstance(items, Sequence) or len(items) == 0:
            raise ValueError(f"{dataset_name} row {index}: column {self.items_column!r} must be a non-empty list of "
                             f"items, got {items!r}.")
        keys = [str(item).strip().casefold() for item in items]
        if len(set(keys)) != len(keys) or any(not key or len(key.split()) != 1 for key in keys):
            raise ValueError(f"{dataset_name} row {index}: column {self.items_column!r} must hold distinct one-word "
                             f"items, got {items!r}.")

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        user = self.template.format(items=join_items(row[self.items_column]), player=agent_index + 1)
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        messages.append({"role": "user", "content": user})
        if self.prefill:
            messages.append({"role": "assistant", "content": self.prefill})
        return messages
