"""The team reward of the synthetic target-sum task ([`~trl_marl.envs.arithmetic.TargetSumEnv`])."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..utils.numbers import bounded_int

_INT = re.compile(r"^\s*(-?\d+)\s*$")
# a leading integer: digits not continued by more digits or by a decimal/thousands part ("5.5", "5,000" are not 5)
_LEADING_INT = re.compile(r"^\s*(-?\d+)(?![\d])(?![.,]\d)")


def parse_int(text: Any) -> int | None:
    """The integer a completion states, or `None` if it is not exactly one integer (surrounding spaces allowed) or
    has more than `MAX_DIGITS` (50) digits ([`~trl_marl.utils.numbers.bounded_int`])."""
    if isinstance(text, list):  # conversational completion
        text = text[-1]["content"] if text else ""
    match = _INT.match(str(text))
    return bounded_int(match.group(1)) if match else None


def parse_leading_int(text: Any) -> int | None:
    """The integer a completion starts with (leading spaces allowed), or `None`.

    What follows the integer is ignored (`" 7. I pick 7"` is 7, `"7<|im_end|>"` is 7) unless it continues the number:
    `"5.5"` and `"5,000"` are `None`, not 5. Text before the integer is not skipped (`"I pick 7"` is `None`): with an
    assistant prefill such as `"My number is"` the completion must *start* with the number. An integer of more than
    `MAX_DIGITS` (50) digits is `None` too: no answer, rather than an error.

    Example:

    ```python
    >>> parse_leading_int(" 12. Because"), parse_leading_int("seven"), parse_leading_int("3.5")
    (12, None, None)
    ```
    """
    if isinstance(text, list):  # conversational completion
        text = text[-1]["content"] if text else ""
    match = _LEADING_INT.match(str(text))
    return bounded_int(match.group(1)) if match else None


class TargetSumReward:
    """Team reward of [`TargetSumEnv`]: 1 when the agents' integers add up to the target, else 0.

    A joint action in which some agent did not write a single integer gets `-invalid_penalty`: without it a team
    that collapses to invalid output gets identical rewards everywhere, hence zero advantages forever.

    Args:
        invalid_penalty (`float`): Penalty for a joint action with an unparseable answer.
        target_column (`str`): The dataset column holding the target.
        leading (`bool`): Read the *leading* integer of each completion ([`parse_leading_int`]: `" 7. I pick
            7"` is 7) instead of requiring the whole completion to be one integer ([`parse_int`]). Use it with an
            assistant prefill (`ChatTargetSumEnv`), where a real model continues "My number is" with " 7." or
            " 7 because ...".
    """

    name = "target_sum"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, invalid_penalty: float = 0.5, target_column: str = "target", leading: bool = False) -> None:
        self.invalid_penalty = invalid_penalty
        self.target_column = target_column
        self.leading = leading
        self.parse = parse_leading_int if leading else parse_int

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], *,
                 agent_completions: Sequence[Sequence[Any]] | None = None, **kwargs: Any) -> list[float]:
        if self.target_column not in kwargs:
            raise KeyError(f"TargetSumReward needs the dataset column {self.target_column!r}.")
        targets = kwargs[self.target_column]
        team = agent_completions if agent_completions is not None else [completions]
        rewards = []
        for j, target in enumerate(targets):
            numbers = [self.parse(agent[j]) for agent in team]
            parsed = [x for x in numbers if x is not None]
            if len(parsed) < len(numbers):
                rewards.append(-self.invalid_penalty)
            else:
                rewards.append(1.0 if sum(parsed) == int(target) else 0.0)
        return rewards


target_sum_reward = TargetSumReward()
"""The default [`TargetSumReward`] (invalid penalty 0.5)."""
