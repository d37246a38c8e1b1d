"""Synthetic arithmetic tasks for the offline demo and the tests.

`TargetSumEnv` is the smallest task where a team must *coordinate*: each agent sees only the target `T` (never
its partners' answers at turn 1) and writes a number; the team is rewarded when the numbers add up to `T`.
Untrained agents that answer a random valid number rarely succeed; a team trained with a centralized reward
learns a convention ("I say 3, you say T-3") that no single agent can find alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript


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
