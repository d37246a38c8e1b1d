"""MAPoRL accuracy: majority vote over a team's final answers, with the expected score on ties.

An `evaluate` metric module (Park et al., arXiv 2502.18439, Section 4.1). Load it from its local path (it does not
need the Hugging Face Hub):

```python
import evaluate
from trl_marl.metrics import MAPORL_ACCURACY_PATH

metric = evaluate.load(MAPORL_ACCURACY_PATH)  # or evaluate.load("path/to/maporl_accuracy")
```

This file is self-contained (it does not import trl-marl) and computes exactly what
`trl_marl.evaluation.majority_vote_score` computes for `answer == reference` correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import datasets
import evaluate

_CITATION = """\
@article{park2025maporl,
  title={MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models with Reinforcement Learning},
  author={Park, Chanwoo and others},
  journal={arXiv preprint arXiv:2502.18439},
  year={2025}
}
"""

_DESCRIPTION = """\
Accuracy of a team of agents that answer each question together. The team's answer is the majority vote over the
agents' final answers. When several answers tie for the most votes, the question's score is the fraction of the tied
answers that are right (the expected accuracy of picking one of them at random). A missing answer (`None`) casts no
vote and never wins; a question where every answer is missing scores 0. Answers and references are compared after
stripping surrounding whitespace, so pass already extracted answers (e.g. the number after `####` in GSM8K).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list[list[str | None]]`): For each question, every agent's final answer (`None` if unparseable).
    references (`list[str]`): For each question, the gold answer.

Returns:
    majority_accuracy (`float`): Mean over questions of the majority-vote score (ties scored by expectation).
    agent_accuracy (`float`): Fraction of right answers over all questions and agents.

Examples:
    >>> metric = evaluate.load("path/to/maporl_accuracy")
    >>> metric.compute(predictions=[["4", "4", "5"], ["1", "2"]], references=["4", "2"])
    {'majority_accuracy': 0.75, 'agent_accuracy': 0.6}
"""


@overload
def _normalize(answer: str) -> str: ...


@overload
def _normalize(answer: str | None) -> str | None: ...


def _normalize(answer: str | None) -> str | None:
    return None if answer is None else answer.strip()


def _majority_vote_score(answers: Sequence[str | None], reference: str) -> float:
    """Majority vote score of one question (mirrors `trl_marl.evaluation.majority_vote_score`)."""
    counts: dict[str, int] = {}
    for answer in answers:
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
    if not counts:
        return 0.0
    top = max(counts.values())
    winners = [answer for answer, count in counts.items() if count == top]
    return sum(answer == reference for answer in winners) / len(winners)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class MaporlAccuracy(evaluate.Metric):
    """Majority-vote accuracy with expected tie scores, and mean agent accuracy, of multi-agent teams."""

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Value("string"),
                }
            ),
            reference_urls=["https://arxiv.org/abs/2502.18439"],
        )

    def _compute(self, predictions: list[list[str | None]], references: list[str]) -> dict[str, float]:
        if len(predictions) == 0:
            raise ValueError("`predictions` is empty.")
        majority, right, total = 0.0, 0, 0
        for answers, reference in zip(predictions, references):
            answers = [_normalize(a) for a in answers]
            gold = _normalize(reference)
            majority += _majority_vote_score(answers, gold)
            right += sum(a is not None and a == gold for a in answers)
            total += len(answers)
        return {
            "majority_accuracy": majority / len(predictions),
            "agent_accuracy": right / total if total else 0.0,
        }
