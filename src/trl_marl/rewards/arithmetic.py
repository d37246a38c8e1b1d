"""The team reward of the synthetic target-sum task ([`~trl_marl.envs.arithmetic.TargetSumEnv`])."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_INT = re.compile(r"^\s*(-?\d+)\s*$")


def parse_int(text: Any) -> int | None:
    """The integer a completion states, or `None` if it is not exactly one integer (surrounding spaces allowed)."""
    if isinstance(text, list):  # conversational completion
        text = text[-1]["content"] if text else ""
    match = _INT.match(str(text))
    return int(match.group(1)) if match else None


class TargetSumReward:
    """Team reward of [`TargetSumEnv`]: 1 when the agents' integers add up to the target, else 0.

    A joint action in which some agent did not write a single integer gets `-invalid_penalty`: without it a team
    that collapses to invalid output gets identical rewards everywhere, hence zero advantages forever.

    Args:
        invalid_penalty (`float`): Penalty for a joint action with an unparseable answer.
        target_column (`str`): The dataset column holding the target.
    """

    name = "target_sum"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, invalid_penalty: float = 0.5, target_column: str = "target") -> None:
        self.invalid_penalty = invalid_penalty
        self.target_column = target_column

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], *,
                 agent_completions: Sequence[Sequence[Any]] | None = None, **kwargs: Any) -> list[float]:
        if self.target_column not in kwargs:
            raise KeyError(f"TargetSumReward needs the dataset column {self.target_column!r}.")
        targets = kwargs[self.target_column]
        team = agent_completions if agent_completions is not None else [completions]
        rewards = []
        for j, target in enumerate(targets):
            numbers = [parse_int(agent[j]) for agent in team]
            if any(x is None for x in numbers):
                rewards.append(-self.invalid_penalty)
            else:
                rewards.append(1.0 if sum(numbers) == int(target) else 0.0)
        return rewards


target_sum_reward = TargetSumReward()
"""The default [`TargetSumReward`] (invalid penalty 0.5)."""
