"""Toy rows: the synthetic datasets of the toy world (every toy row of the package lives here).

- [`toy_debate_dataset`]: two-number additions for the offline toy debate ([`~trl_marl.envs.debate.ToyDebateEnv`]).
- [`toy_facts_dataset`]: key -> value questions of the heterogeneous fact team ([`SpecialistFactsTask`]).
- [`toy_writing_rows`], [`toy_coding_rows`]: rows with the schema of the writing and coding loaders, for offline
  smoke runs of `trl-marl magrpo` on the toy model, with [`TOY_WRITING_PROMPTS`] and [`TOY_CODING_PROMPTS`]: the
  tasks' prompt templates cut to fit the toy's 128 positions.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, TypedDict

from .tasks import FACT_KEYS, fact_table

if TYPE_CHECKING:
    import datasets

__all__ = ["TOY_CODING_PROMPTS", "TOY_HALVES_PROMPTS", "TOY_WRITING_PROMPTS", "toy_coding_rows",
           "toy_debate_dataset", "toy_facts_dataset", "toy_writing_rows"]


def toy_debate_dataset(n: int, seed: int = 0, max_operand: int = 99) -> datasets.Dataset:
    """Synthetic additions for the offline toy debate ([`~trl_marl.envs.debate.ToyDebateEnv`]).

    Args:
        n (`int`): Number of rows.
        seed (`int`): Seed of the operands.
        max_operand (`int`): Both operands are drawn uniformly from `[0, max_operand]`.

    Returns:
        `datasets.Dataset`: `question` (`"12+34"`) and `answer` (`"46"`).
    """
    import datasets

    if n < 0:
        raise ValueError(f"`n` must be >= 0, got {n}.")
    if max_operand < 0:
        raise ValueError(f"`max_operand` must be >= 0, got {max_operand}.")
    rng = random.Random(seed)
    pairs = [(rng.randint(0, max_operand), rng.randint(0, max_operand)) for _ in range(n)]
    return datasets.Dataset.from_dict(
        {"question": [f"{a}+{b}" for a, b in pairs], "answer": [str(a + b) for a, b in pairs]},
        features=datasets.Features({"question": datasets.Value("string"), "answer": datasets.Value("string")}),
    )


def toy_facts_dataset(n: int, seed: int = 0) -> datasets.Dataset:
    """Questions of the offline toy fact debate (the heterogeneous team of `trl_marl.toy.SpecialistFactsTask`).

    Args:
        n (`int`): Number of rows.
        seed (`int`): Seed of the keys drawn (uniformly from `trl_marl.toy.FACT_KEYS`).

    Returns:
        `datasets.Dataset`: `question` (a key, `"37"`) and `answer` (its true value, `"52"`), for
        [`~trl_marl.envs.debate.ToyDebateEnv`].
    """
    import datasets

    if n < 0:
        raise ValueError(f"`n` must be >= 0, got {n}.")
    rng = random.Random(seed)
    table = fact_table()
    keys = [rng.choice(FACT_KEYS) for _ in range(n)]
    return datasets.Dataset.from_dict(
        {"question": [str(k) for k in keys], "answer": [str(table[k]) for k in keys]},
        features=datasets.Features({"question": datasets.Value("string"), "answer": datasets.Value("string")}),
    )


def toy_writing_rows(n: int) -> datasets.Dataset:
    """Synthetic rows with the schema of the writing loader (`text`, `reference`)."""
    import datasets

    texts = [f"Q{i}: {i} + {i + 1} = {2 * i + 1}. A: {2 * i + 1}" for i in range(n)]
    return datasets.Dataset.from_dict({"text": texts, "reference": [f"A: {2 * i + 1}" for i in range(n)]})


class _WritingPrompts(TypedDict, total=False):
    """Keyword arguments of `CooperativeWritingEnv`: its prompt templates."""

    first_turn_template: str
    revision_template: str


class _HalvesPrompts(TypedDict, total=False):
    """Keyword arguments of `HalvesWritingEnv`: its prompt."""

    instruction: str
    template: str
    prefill: str


class _CodingPrompts(TypedDict, total=False):
    """Keyword arguments of `CooperativeCodingEnv`: its prompt templates."""

    helper_template: str
    main_template: str
    revision_template: str


TOY_WRITING_PROMPTS: _WritingPrompts = {
    "first_turn_template": "{text}\n{cue}:",
    "revision_template": "{text}\n{own}|{partner}\n{cue}:",
}
"""Prompt templates of `CooperativeWritingEnv` sized for the toy models' 128 positions (the task's own instructions
alone are longer): `CooperativeWritingEnv(**TOY_WRITING_PROMPTS)` on [`toy_writing_rows`] leaves room for 16 new tokens
per agent at every turn."""

TOY_HALVES_PROMPTS: _HalvesPrompts = {"instruction": "Writer {writer}, first or second half?",
                                      "template": "{instruction}\n{first}|{second}", "prefill": "I summarize the"}
"""`HalvesWritingEnv`'s prompt sized for the toy models' 128 positions, as [`TOY_WRITING_PROMPTS`] is for the
writing task."""

TOY_CODING_PROMPTS: _CodingPrompts = {
    "helper_template": "{prompt}# {helper_name}:\n",
    "main_template": "{prompt}# {entry_point}:\n",
    "revision_template": "{own_code}|{partner_code}\n",
}
"""Prompt templates of `CooperativeCodingEnv` sized for the toy models' 128 positions: with
`CooperativeCodingEnv(**TOY_CODING_PROMPTS)` on [`toy_coding_rows`] a turn-1 prompt is under 70 tokens, and a turn-2
prompt (turn 1's plus both agents' code) under 110 with 16 new tokens per agent."""


def toy_coding_rows(n: int) -> datasets.Dataset:
    """Synthetic HumanEval-format rows (`prompt`, `test`, `entry_point`, `canonical_solution`)."""
    import datasets

    rows: dict[str, list[Any]] = {"task_id": [], "prompt": [], "test": [], "entry_point": [], "canonical_solution": []}
    for i in range(n):
        k = i % 7 + 1
        rows["task_id"].append(f"toy/{i}")
        rows["prompt"].append(f"def add_{k}(x):\n    \"\"\"Return x + {k}.\"\"\"\n")
        rows["entry_point"].append(f"add_{k}")
        rows["canonical_solution"].append(f"    return x + {k}\n")
        rows["test"].append(
            f"def check(candidate):\n    assert candidate(1) == {1 + k}\n    assert candidate(-{k}) == 0\n"
        )
    return datasets.Dataset.from_dict(rows)
