"""ROUGE-L F-measure against a reference column, as a TRL reward function.

MAGRPO (arXiv 2508.04652) reports its writing results in ROUGE-L. The score is computed by Google's `rouge-score`
package (the reference implementation; `evaluate.load("rouge")` wraps the same package but needs the Hugging Face
Hub), one completion against one row's reference at a time.

The helpers every text reward shares (which agent's text is scored, the dataset columns) are in
`trl_marl.utils.columns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..utils.columns import AgentSelector, column, is_missing, select_texts


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
                "RougeLReward needs the `rouge-score` package (the writing task's ROUGE-L term uses it): install "
                'trl-marl\'s `rewards` extra, `pip install "trl-marl[rewards]"` (from a clone: `pip install -e '
                '".[rewards]"`), or just `pip install rouge-score`.'
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
