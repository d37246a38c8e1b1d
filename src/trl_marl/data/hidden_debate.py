"""A debate where discussion matters: each agent holds one of the two numbers of a sum (MAPoRL, arXiv 2502.18439).

MAPoRL trains agents to *discuss*: the last turn of a debate should beat the first because the agents correct and
inform each other. On a question that every agent can answer alone (a 1-digit addition), a second turn has nothing to
add. Here it does: the question is always "What is a + b?", agent 1 is told only a ("You know that a = 7.") and
agent 2 only b, so at turn 1 neither can be right except by a lucky guess (about 1 in 9: the other number), and at
turn 2 each can read the number the other stated and add.

Rows, in the schema of [`~trl_marl.envs.debate.DebateEnv`] with `private_columns=PRIVATE_COLUMNS` and
`prefill_columns=PREFILL_COLUMNS`:

- `question`: `"What is a + b?"` (the same for every row: what differs is private);
- `context_0`, `context_1`: what agent 1, resp. agent 2, knows, e.g. `"You know that a = 7. Only the other agent
  knows b."`;
- `prefill_0`, `prefill_1`: the start of each agent's every answer, which states its number and starts the sum
  with it, e.g. `"I know that a = 7. So a + b = 7 +"` (so each agent's turn-1 answer tells the other agent its
  number, and the model continues with the other number and the result: `" 5 = 12."`);
- `answer`: the gold sum as a string (`"12"`); `a`, `b`: the two numbers.

**Split.** [`hidden_sum_split`] splits the unordered pairs {a, b} of the numbers 1..9 once, with a fixed seed
([`HIDDEN_SUM_SPLIT_SEED`]), into training and held-out pairs: a held-out pair never occurs in training, in either
order (who holds which number), so a team that is right on it has learned to combine what it hears, not recalled a
sum it was rewarded for.

Example:

```python
>>> from trl_marl.data.hidden_debate import hidden_sum_env, hidden_sum_rows, hidden_sum_split
>>> train, heldout = hidden_sum_split()
>>> row = hidden_sum_rows(heldout, 1, seed=0)[0]
>>> sorted(row)
['a', 'answer', 'b', 'context_0', 'context_1', 'prefill_0', 'prefill_1', 'question']
>>> env = hidden_sum_env()  # the DebateEnv that reads these columns, with the prompts of docs/real_model.md
```

`trl-marl maporl hidden_sum --config examples/configs/maporl_hidden_sum.yaml` trains a team on it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets

    from ..envs.debate import DebateEnv

__all__ = [
    "HIDDEN_SUM_HELDOUT_PAIRS",
    "HIDDEN_SUM_NUMBERS",
    "HIDDEN_SUM_SPLITS",
    "HIDDEN_SUM_SPLIT_SEED",
    "PREFILL_COLUMNS",
    "HIDDEN_SUM_FORMAT",
    "HIDDEN_SUM_REVISION",
    "HIDDEN_SUM_SYSTEM",
    "PRIVATE_COLUMNS",
    "hidden_sum_env",
    "hidden_sum_row",
    "hidden_sum_rows",
    "hidden_sum_split",
    "load_hidden_sum",
]

HIDDEN_SUM_NUMBERS: tuple[int, ...] = tuple(range(1, 10))
"""The numbers a and b are drawn from (1..9: sums 2..18, so a guess at turn 1 is right about once in 17)."""

HIDDEN_SUM_SPLITS: tuple[str, str] = ("train", "heldout")
"""The names of the two splits of [`hidden_sum_split`], in its order (`load_hidden_sum(split=...)`)."""

HIDDEN_SUM_SPLIT_SEED = 40
"""The seed of the one split of the unordered pairs into training and held-out pairs."""

HIDDEN_SUM_HELDOUT_PAIRS = 12
"""How many of the 45 unordered pairs {a, b} are held out: with the default seed, 23 held-out ordered questions
(who holds which number) and 58 training ones."""

PRIVATE_COLUMNS: tuple[str, str] = ("context_0", "context_1")
"""The columns of what agent 1, resp. agent 2, knows (`DebateEnv(private_columns=...)`)."""

PREFILL_COLUMNS: tuple[str, str] = ("prefill_0", "prefill_1")
"""The columns of the start of agent 1's, resp. agent 2's, answers (`DebateEnv(prefill_columns=...)`)."""

HIDDEN_SUM_SYSTEM = "You are one of two agents who answer a question together. Answer with a number."
"""The system message of every agent of the hidden-sum debate."""

HIDDEN_SUM_FORMAT = "Answer with the number only."
"""The answer format appended to the question at every turn."""

HIDDEN_SUM_REVISION = "{private}The other agent said:\n\n{other_answers}\n\n{question} {answer_format}"
"""The user message of turns 2+: the agent's own fact again, the other agent's answers, the question again."""

_NAMES = ("a", "b")


Pairs = list[tuple[int, int]]


def hidden_sum_split(num_heldout: int = HIDDEN_SUM_HELDOUT_PAIRS, seed: int = HIDDEN_SUM_SPLIT_SEED,
                     numbers: Sequence[int] = HIDDEN_SUM_NUMBERS) -> tuple[Pairs, Pairs]:
    """The ordered pairs (a, b) split by unordered pair {a, b} into (train, held-out) lists.

    `num_heldout` of the unordered pairs (a == b included) are drawn with `seed`; every ordering of a held-out pair is
    held out, every ordering of the others is for training, so the two lists share no pair in either order.

    Args:
        num_heldout (`int`): How many unordered pairs to hold out (at least 1, and at least 1 left for training).
        seed (`int`): The seed of the draw (the default is the package's one split).
        numbers (`Sequence[int]`): The numbers a and b are drawn from (distinct).

    Returns:
        `tuple[list[tuple[int, int]], list[tuple[int, int]]]`: The training and held-out ordered pairs, sorted.
    """
    values = sorted(set(numbers))
    if len(values) != len(numbers) or not values:
        raise ValueError(f"`numbers` must be distinct and non-empty, got {list(numbers)}.")
    unordered = [(a, b) for i, a in enumerate(values) for b in values[i:]]
    if not 0 < num_heldout < len(unordered):
        raise ValueError(f"`num_heldout` must be in 1..{len(unordered) - 1} (the unordered pairs of {values} are "
                         f"{len(unordered)}), got {num_heldout}.")
    held = set(random.Random(seed).sample(unordered, num_heldout))
    ordered = [(a, b) for a in values for b in values]
    train = [p for p in ordered if (min(p), max(p)) not in held]
    heldout = [p for p in ordered if (min(p), max(p)) in held]
    return train, heldout


def hidden_sum_row(a: int, b: int) -> dict[str, Any]:
    """The debate row of agent 1 holding `a` and agent 2 holding `b` (see the module docstring for the columns)."""
    row: dict[str, Any] = {"question": "What is a + b?", "answer": str(a + b), "a": a, "b": b}
    for agent, (name, value) in enumerate(zip(_NAMES, (a, b))):
        other = _NAMES[1 - agent]
        row[PRIVATE_COLUMNS[agent]] = f"You know that {name} = {value}. Only the other agent knows {other}."
        row[PREFILL_COLUMNS[agent]] = f"I know that {name} = {value}. So a + b = {value} +"
    return row


def hidden_sum_rows(pairs: Sequence[tuple[int, int]], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` rows drawn from `pairs` with `seed`, cycling through a shuffled copy (every pair once before any
    pair twice)."""
    if not pairs:
        raise ValueError("`pairs` is empty: give at least one (a, b) pair.")
    if count < 0:
        raise ValueError(f"`count` must be >= 0, got {count}.")
    order = list(pairs)
    random.Random(seed).shuffle(order)
    return [hidden_sum_row(*order[i % len(order)]) for i in range(count)]


def load_hidden_sum(split: str = "train", repeats: int = 1, seed: int = 0) -> datasets.Dataset:
    """Every question of `split` (`"train"` or `"heldout"`, [`hidden_sum_split`]'s one split) `repeats` times, in an
    order shuffled with `seed`, as a `datasets.Dataset` for `DebateEnv(private_columns=PRIVATE_COLUMNS,
    prefill_columns=PREFILL_COLUMNS)`."""
    import datasets

    train, heldout = hidden_sum_split()
    pairs = dict(zip(HIDDEN_SUM_SPLITS, (train, heldout)))
    if split not in pairs:
        raise ValueError(f"split must be {' or '.join(map(repr, HIDDEN_SUM_SPLITS))}, got {split!r}.")
    if repeats < 1:
        raise ValueError(f"`repeats` must be >= 1, got {repeats}.")
    return datasets.Dataset.from_list(hidden_sum_rows(pairs[split], repeats * len(pairs[split]), seed))


def hidden_sum_env(num_turns: int = 2, chat: bool = True, **kwargs: Any) -> DebateEnv:
    """The 2-agent [`~trl_marl.envs.debate.DebateEnv`] of the hidden-sum debate: it shows each agent its own fact
    (`PRIVATE_COLUMNS`), starts each answer with it (`PREFILL_COLUMNS`), and from turn 2 on shows the other agent's
    answers with [`HIDDEN_SUM_REVISION`]. These are the prompts the real-model study trained on
    (docs/real_model.md, "MAPoRL: a debate where discussion matters").

    Args:
        num_turns (`int`): Turns of the debate (at least 2 for the agents to hear each other).
        chat (`bool`): Chat messages (an instruct model's chat template), or plain-string prompts.
        **kwargs: Other `DebateEnv` arguments (`history`, `show_verifier_scores`, `verifier`, ...).
    """
    from ..envs.debate import DebateEnv

    return DebateEnv(num_agents=2, num_turns=num_turns, chat=chat, system_prompt=HIDDEN_SUM_SYSTEM,
                     answer_format=HIDDEN_SUM_FORMAT, revision_template=HIDDEN_SUM_REVISION,
                     private_columns=PRIVATE_COLUMNS, prefill_columns=PREFILL_COLUMNS, **kwargs)
