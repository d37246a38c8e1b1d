"""Rows of the tool relay (issue 38): "What is a * b?" for two-digit a and b, split once by unordered pair.

A 135M-parameter model cannot multiply two two-digit numbers in its head; with a calculator it can, if it learns to
call the calculator and to pass the result on. [`~trl_marl.envs.tool_relay.ToolRelayEnv`] gives the calculator to
one agent and the question's final answer to the other.

Rows: `a`, `b` (12..99), `question` (`"What is a * b?"`), `answer` (the product as a string).

The tool division ([`~trl_marl.envs.tool_division.ToolDivisionEnv`]) asks for two products at once: its rows
([`tool_division_rows`]) hold two pairs of the same side of the split, `a * b` and `c * d`, with different products.

**Split.** [`tool_relay_split`] splits the unordered pairs {a, b} once, with a fixed seed ([`TOOL_RELAY_SPLIT_SEED`]),
into training and held-out pairs: a held-out pair never occurs in training, in either order.

Example:

```python
>>> from trl_marl.data.tool_relay import tool_relay_rows, tool_relay_split
>>> train, heldout = tool_relay_split()
>>> len(heldout), sorted(tool_relay_rows(heldout, 1, seed=0)[0])
(400, ['a', 'answer', 'b', 'question'])
```
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

__all__ = ["TOOL_RELAY_HELDOUT_PAIRS", "TOOL_RELAY_NUMBERS", "TOOL_RELAY_SPLIT_SEED", "tool_division_row",
           "tool_division_rows", "tool_relay_row", "tool_relay_rows", "tool_relay_split"]

TOOL_RELAY_NUMBERS: tuple[int, ...] = tuple(range(12, 100))
"""The factors (12..99: products of three or four digits, beyond a small model's mental arithmetic)."""

TOOL_RELAY_SPLIT_SEED = 38
"""The seed of the one split of the pairs into training and held-out pairs (never tuned)."""

TOOL_RELAY_HELDOUT_PAIRS = 400
"""How many unordered pairs are held out (of 3916)."""


def tool_relay_split() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The unordered pairs (a <= b) split into (training, held-out), the same on every call."""
    pairs = [(a, b) for a in TOOL_RELAY_NUMBERS for b in TOOL_RELAY_NUMBERS if a <= b]
    random.Random(TOOL_RELAY_SPLIT_SEED).shuffle(pairs)
    heldout = sorted(pairs[:TOOL_RELAY_HELDOUT_PAIRS])
    return sorted(pairs[TOOL_RELAY_HELDOUT_PAIRS:]), heldout


def tool_relay_row(a: int, b: int) -> dict[str, Any]:
    """The row of the question "What is a * b?"."""
    return {"a": a, "b": b, "question": f"What is {a} * {b}?", "answer": str(a * b)}


def tool_relay_rows(pairs: Sequence[tuple[int, int]], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` rows drawn from `pairs` (without repetition while there are enough; each pair in a random order)."""
    rng = random.Random(seed)
    chosen = rng.sample(list(pairs), count) if count <= len(pairs) else [rng.choice(pairs) for _ in range(count)]
    rows = []
    for a, b in chosen:
        rows.append(tool_relay_row(*((b, a) if rng.random() < 0.5 else (a, b))))
    return rows


def tool_division_row(a: int, b: int, c: int, d: int) -> dict[str, Any]:
    """The row of the two products `a * b` (product 1) and `c * d` (product 2).

    Raises:
        ValueError: The two products are equal (the team could not say which one each agent stated).
    """
    if a * b == c * d:
        raise ValueError(f"The two products of a tool-division row must differ: {a} * {b} = {c} * {d}.")
    return {"a": a, "b": b, "c": c, "d": d, "answer1": str(a * b), "answer2": str(c * d)}


def tool_division_rows(pairs: Sequence[tuple[int, int]], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` rows of two different pairs from `pairs` (one side of [`tool_relay_split`]), each pair in a random
    order; two pairs with the same product are drawn again."""
    rng = random.Random(seed)
    pool = list(pairs)
    rows: list[dict[str, Any]] = []
    while len(rows) < count:
        first, second = rng.sample(pool, 2)
        if first[0] * first[1] == second[0] * second[1]:
            continue
        a, b = first if rng.random() < 0.5 else first[::-1]
        c, d = second if rng.random() < 0.5 else second[::-1]
        rows.append(tool_division_row(a, b, c, d))
    return rows
