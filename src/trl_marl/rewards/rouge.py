"""ROUGE-L F-measure against a reference column, as a TRL reward function.

MAGRPO (arXiv 2508.04652) reports its writing results in ROUGE-L. The score is computed by Google's `rouge-score`
package (the reference implementation; `evaluate.load("rouge")` wraps the same package but needs the Hugging Face
Hub), one completion against one row's reference at a time.

This module also holds the helpers every text reward of trl-marl shares: [`completion_text`] (the text of a plain
or conversational completion) and [`select_texts`] (which agent's completions a reward scores).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

AgentSelector = int | Literal["concat"] | None
"""Which agent's text a reward scores: `None` (the `completions` argument, i.e. agent 0 in a team reward, or the
single agent of a plain TRL trainer), an agent index (`agent_completions[index]`), or `"concat"` (every agent's
text of the joint action, joined)."""

# Keyword arguments that trl-marl passes to reward functions besides the dataset columns (see `TeamReward`).
MULTI_AGENT_KWARGS = frozenset(
    {"agent_prompts", "agent_completions", "agent_index", "turn", "transcript", "trainer_state", "completion_ids"}
)


def completion_text(completion: Any) -> str:
    """The text of one completion.

    Args:
        completion (`str` or `list[dict]`): A plain completion, or a conversational one (chat messages such as
            `[{"role": "assistant", "content": "..."}]`; the content of the last message is used).

    Returns:
        `str`: The text (`""` for an empty message list or a `None` content).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        if not completion:
            return ""
        return completion_text(completion[-1])
    if completion is None:
        return ""
    return str(completion)


def select_texts(
    completions: Sequence[Any],
    agent_completions: Sequence[Sequence[Any]] | None,
    agent: AgentSelector,
    separator: str,
    owner: str,
    transform: Callable[[str], str] | None = None,
) -> list[str]:
    """The texts a reward scores, one per joint action.

    Args:
        completions (`Sequence`): The `completions` argument of the reward call.
        agent_completions (`Sequence[Sequence]` or `None`): One list of completions per agent (trl-marl passes it;
            a plain TRL trainer does not).
        agent (`int`, `"concat"` or `None`): `None`: `completions`; an index `i`: `agent_completions[i]`;
            `"concat"`: every agent's text of each joint action joined with `separator`.
        separator (`str`): The separator of `"concat"`.
        owner (`str`): The reward's name, used in error messages.
        transform (`Callable[[str], str]`, *optional*): Applied to each agent's text before joining (e.g. stripping
            code fences), so that `"concat"` transforms every agent's part separately.

    Returns:
        `list[str]`: One text per joint action.
    """

    def text(completion: Any) -> str:
        value = completion_text(completion)
        return transform(value) if transform is not None else value

    if agent is None:
        return [text(c) for c in completions]
    if agent_completions is None:
        if agent == 0 or agent == "concat":  # a single-agent trainer: agent 0 is the only agent
            return [text(c) for c in completions]
        raise ValueError(
            f"{owner} scores agent {agent!r} but the reward call has no `agent_completions` (one list of completions "
            "per agent, passed by trl-marl's trainers). Use agent_index=None to score `completions`."
        )
    if agent == "concat":
        return [separator.join(text(agent_list[j]) for agent_list in agent_completions)
                for j in range(len(completions))]
    if not isinstance(agent, int) or isinstance(agent, bool):
        raise ValueError(f"{owner}: `agent_index` must be None, an int or 'concat', got {agent!r}.")
    if not 0 <= agent < len(agent_completions):
        raise ValueError(
            f"{owner} scores agent {agent} but the team has {len(agent_completions)} agent(s) "
            f"(agent indices 0..{len(agent_completions) - 1})."
        )
    return [text(c) for c in agent_completions[agent]]


def is_missing(value: Any) -> bool:
    """Whether a dataset cell holds no value: `None` or a float NaN (pandas' missing value)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def column(kwargs: dict[str, Any], name: str, owner: str, size: int) -> list[Any]:
    """The dataset column `name` from a reward call's keyword arguments, checked.

    Raises:
        KeyError: The column is absent (the message names it and lists the columns the call received).
        ValueError: The column does not hold one value per completion.
    """
    if name not in kwargs:
        available = sorted(k for k in kwargs if k not in MULTI_AGENT_KWARGS)
        raise KeyError(
            f"{owner} needs the dataset column {name!r} but the reward function received only the columns "
            f"{available}. Add the column to the dataset, or tell the reward which column to read (its `*_column` "
            "argument, e.g. `reference_column=...`)."
        )
    values = list(kwargs[name])
    if len(values) != size:
        raise ValueError(f"{owner}: column {name!r} has {len(values)} values for {size} completions.")
    return values


class RougeLReward:
    """ROUGE-L F-measure of a completion against the row's reference text.

    For a candidate `c` and a reference `r` tokenized by `rouge-score` (lower-cased alphanumeric tokens, optionally
    Porter-stemmed), with `LCS` the length of their longest common subsequence:

        P = LCS / |c|,   R = LCS / |r|,   ROUGE-L = F = 2 P R / (P + R)   (0 when LCS = 0)

    computed by `rouge_score.rouge_scorer.RougeScorer(["rougeL"]).score(r, c)["rougeL"].fmeasure`. When the cell
    holds a list of references, the best one counts (`RougeScorer.score_multi`). Rows whose reference is `None`
    (or NaN) get `None`, which trl-marl leaves out of the weighted sum of rewards.

    Args:
        reference_column (`str`): The dataset column holding the reference text (or a list of references).
        agent_index (`int`, `"concat"` or `None`): Which text is scored: `None` the `completions` argument (agent 0
            in a team reward; the only agent in a plain TRL trainer), an int `i` agent `i`'s completion
            (`agent_completions[i]`), `"concat"` all agents' texts of the joint action joined with `separator`.
        use_stemmer (`bool`): Porter-stem tokens before matching (`rouge-score`'s option; its default `False`).
        separator (`str`): Separator between the agents' texts with `agent_index="concat"`.
        tokenizer (`Any`, *optional*): A `rouge-score` tokenizer object (with a `tokenize(text)` method) replacing
            the default one, which keeps only `[a-z0-9]` tokens, so non-Latin text needs one.

    Example:

    ```python
    reward = RougeLReward()
    reward(prompts=["p"], completions=["the cat sat"], reference=["the cat sat on the mat"])  # [0.666...]
    ```
    """

    def __init__(
        self,
        reference_column: str = "reference",
        agent_index: AgentSelector = None,
        use_stemmer: bool = False,
        separator: str = "\n\n",
        tokenizer: Any | None = None,
    ) -> None:
        try:
            from rouge_score import rouge_scorer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "RougeLReward needs the `rouge-score` package: install trl-marl's `rewards` extra "
                '(`pip install "trl-marl[rewards]"`) or `pip install rouge-score`.'
            ) from exc
        if agent_index is not None and agent_index != "concat" and not isinstance(agent_index, int):
            raise ValueError(f"`agent_index` must be None, an int or 'concat', got {agent_index!r}.")
        self.name = "rouge_l"
        self.reference_column = reference_column
        self.agent_index = agent_index
        self.use_stemmer = use_stemmer
        self.separator = separator
        self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer, tokenizer=tokenizer)

    def score(self, prediction: str, reference: str | Sequence[str]) -> float:
        """ROUGE-L F-measure of `prediction` against `reference` (the best of several references for a list)."""
        if isinstance(reference, str):
            return float(self._scorer.score(reference, prediction)["rougeL"].fmeasure)
        references = [str(r) for r in reference if not is_missing(r)]
        if not references:
            return 0.0
        return float(self._scorer.score_multi(references, prediction)["rougeL"].fmeasure)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion against its row's reference.

        Args:
            prompts (`Sequence`): The prompts (unused).
            completions (`Sequence`): The completions (strings or chat messages).
            **kwargs: The dataset columns (`reference_column` among them) and trl-marl's multi-agent arguments
                (`agent_completions`, ...).

        Returns:
            `list[float | None]`: ROUGE-L F-measure per completion, `None` where the reference is missing.
        """
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, self.separator,
                             type(self).__name__)
        references = column(kwargs, self.reference_column, type(self).__name__, len(texts))
        return [None if is_missing(ref) else self.score(text, ref if isinstance(ref, (list, tuple)) else str(ref))
                for text, ref in zip(texts, references)]
