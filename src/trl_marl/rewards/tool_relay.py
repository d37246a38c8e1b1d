"""The team reward of the tool relay ([`~trl_marl.envs.tool_relay.ToolRelayEnv`], issue 38)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..utils.numbers import bounded_int

_NUMBER = re.compile(r"-?\d[\d,]*")


def integers(text: str) -> list[int]:
    """The integers written in `text`, in order (thousands commas allowed: "3,965"); a run of more than `MAX_DIGITS`
    (50) digits is no integer ([`~trl_marl.utils.numbers.bounded_int`]) and is left out."""
    return [number for number in _written_numbers(text) if number is not None]


def last_integer(text: str) -> int | None:
    """The last integer written in `text`, or None (also when the last number written has more than `MAX_DIGITS`
    digits: a number written after the answer is never skipped)."""
    found = _written_numbers(text)
    return found[-1] if found else None


def _written_numbers(text: str) -> list[int | None]:
    """Every number written in `text`, in order: its value, or None for one of more than `MAX_DIGITS` digits."""
    return [bounded_int(m.group(0).rstrip(",").replace(",", "")) for m in _NUMBER.finditer(text)]


class ToolRelayReward:
    """1 when the turn's answer gives the product, else 0, judged on the LAST number of the answer at both turns.
    Turn 1: the calculator agent's answer ends with the product (it may restate the question first: "61 * 65 = 3965");
    turn 2: the reporter's final answer ends with it. An answer that goes on after the product ("3965 * 65 = 257725")
    is what the reporter reads and may copy, so it earns nothing; writing several candidates does not pay either. The
    calculator agent cannot name the product without computing it: a guess hits it about once in a thousand.

    Called as a MAGRPO team reward (`agent_completions[a][i]`: agent `a`'s answer in joint action `i`).
    """

    __name__ = "tool_relay"

    def __call__(self, prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                 answer: Sequence[str], turn: int = 1, **kwargs: Any) -> list[float]:
        judged = agent_completions[0] if turn == 1 else agent_completions[1]
        return [1.0 if last_integer(_text(text)) == int(gold) else 0.0 for text, gold in zip(judged, answer)]


def _text(completion: Any) -> str:
    """A completion's text: a string, or the content of TRL's conversational `[{"role": "assistant", ...}]`."""
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    return str(completion)
