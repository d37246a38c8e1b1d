"""Synthetic arithmetic tasks for the offline demo and the tests.

`TargetSumEnv` is the smallest task where a team must *coordinate*: each agent sees only the target `T` (never
its partners' answers at turn 1) and writes a number; the team is rewarded when the numbers add up to `T`.
Untrained agents that answer a random valid number rarely succeed; a team trained with a centralized reward
learns a convention ("I say 3, you say T-3") that no single agent can find alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript

_INT = re.compile(r"^\s*(-?\d+)\s*$")


def parse_int(text: Any) -> int | None:
    """The integer a completion states, or `None` if it is not exactly one integer (surrounding spaces allowed)."""
    if isinstance(text, list):  # conversational completion
        text = text[-1]["content"] if text else ""
    match = _INT.match(str(text))
    return int(match.group(1)) if match else None


class TargetSumEnv(MultiAgentEnv):
    """Agents must write numbers that add up to the row's `target`.

    Turn 1: every agent sees `T=<target as two digits>:` (the format `trl_marl.toy`'s `TargetNumberTask` is
    pretrained on). Later turns: agent i sees `T=<target>:<its own last answer>+<the others' last answers>:`,
    so a multi-turn team can repair a failed attempt.

    Args:
        num_agents (`int`): Number of agents.
        num_turns (`int`): Number of turns.
        target_column (`str`): The dataset column holding the target.
    """

    def __init__(self, num_agents: int = 2, num_turns: int = 1, target_column: str = "target") -> None:
        super().__init__(num_agents, num_turns)
        self.target_column = target_column
        self.required_columns = (target_column,)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        head = f"T={int(row[self.target_column]):02d}:"
        if len(transcript) == 0:
            return head
        last = transcript[-1].responses
        order = [agent_index] + [a for a in range(self.num_agents) if a != agent_index]
        return head + "+".join(last[a].strip() for a in order) + ":"


class TargetSumReward:
    """Team reward of [`TargetSumEnv`]: 1 when the agents' integers add up to the target, else 0.

    A joint action in which some agent did not write a single integer gets `-invalid_penalty`: without it a team
    that collapses to invalid output gets identical rewards everywhere, hence zero advantages forever.

    Args:
        invalid_penalty (`float`): Penalty for a joint action with an unparseable answer.
        target_column (`str`): The dataset column holding the target.
    """

    name = "target_sum"

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
