"""Evaluation of multi-agent debates as in MAPoRL (Park et al., arXiv 2502.18439, Section 4.1).

- [`majority_vote_score`]: the team's answer is the majority vote over the agents' answers; when several answers
  tie for the most votes, the score is the fraction of the tied answers that are right (the expected accuracy of
  picking one of them at random, the paper's "expectation-based approach").
- [`DebateEvaluation`] / [`evaluate_debates`]: per-turn majority-vote accuracy, mean agent accuracy, and the
  collaboration transitions between consecutive turns (W->R, R->W, persuaded, persuader), as a flat dict of log
  metrics.

Answers are compared as given: pass them already extracted and normalized (e.g. by an answer verifier's `extract`),
with `None` for a response whose answer could not be parsed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DebateEvaluation", "evaluate_debates", "majority_vote_score", "plurality_answer"]

Answer = str | None


def plurality_answer(answers: Sequence[Answer]) -> str | None:
    """The answer with strictly the most votes among `answers`, ignoring `None` (no answer).

    Args:
        answers (`Sequence[str | None]`): The votes.

    Returns:
        `str` or `None`: The unique most frequent answer; `None` when there is no vote or the top is tied.
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    ranked = counts.most_common(2)
    if len(ranked) == 2 and ranked[0][1] == ranked[1][1]:
        return None
    return ranked[0][0]


def majority_vote_score(
    answers: Sequence[Answer], gold_correct: Callable[[str], bool | float] | Sequence[bool | float]
) -> float:
    """Score of the majority vote over the agents' answers, with the expected score on ties (MAPoRL, Section 4.1).

    Identical answers form one candidate; `None` (an unparseable answer) is an abstention: it casts no vote and can
    never be the team's answer. The candidates with the most votes win; the score is the mean correctness of the
    winners (1 or 0 with a single winner; with a tie, the fraction of tied answers that are right, i.e. the expected
    accuracy of picking one of them uniformly at random, which equals picking a random agent among their voters since
    tied candidates have the same number of votes). When every answer is `None` the score is 0.

    Args:
        answers (`Sequence[str | None]`): Each agent's (extracted) final answer.
        gold_correct (`Callable` or `Sequence`): Either a function `answer -> bool` (or a score in `[0, 1]`), or one
            correctness per entry of `answers` (then a candidate's correctness is the mean over its voters, which is
            simply their shared value when correctness depends on the answer only).

    Returns:
        `float`: The score in `[0, 1]`.

    Example:

    ```python
    >>> majority_vote_score(["4", "4", "5"], lambda a: a == "4")
    1.0
    >>> majority_vote_score(["4", "5", "5", "4"], lambda a: a == "4")  # 2-2 tie, one side right
    0.5
    ```
    """
    if callable(gold_correct):
        judge = gold_correct
        per_voter = None
    else:
        if len(gold_correct) != len(answers):
            raise ValueError(f"Got {len(answers)} answers but {len(gold_correct)} correctness values.")
        judge = None
        per_voter = gold_correct
    votes: dict[str, list[int]] = {}
    for index, answer in enumerate(answers):
        if answer is not None:
            votes.setdefault(answer, []).append(index)
    if not votes:
        return 0.0
    top = max(len(voters) for voters in votes.values())
    winners = [(answer, voters) for answer, voters in votes.items() if len(voters) == top]
    total = 0.0
    for answer, voters in winners:
        if judge is not None:
            total += float(judge(answer))
        elif per_voter is not None:  # (one of the two is set)
            total += sum(float(per_voter[i]) for i in voters) / len(voters)
    return total / len(winners)


def _rate(count: int, total: int) -> float:
    return count / total if total else math.nan


class DebateEvaluation:
    """Accumulates debates and computes MAPoRL's evaluation metrics per turn.

    A debate is a list of turns, each a list of the agents' answers (`str`, or `None` for an unparseable answer),
    with a parallel list of booleans saying which answers are right. A debate that stopped early keeps its last
    answers in the later turns (its answers stand), so every turn's metrics are over the same debates.

    Metrics, for every turn `t` (1-based):

    - `turn_{t}/majority_accuracy`: mean [`majority_vote_score`] of the agents' answers at `t` (ties scored by
      expectation, `None` never wins).
    - `turn_{t}/agent_accuracy`: the fraction of right answers at `t` over all debates and agents.

    For every pair of consecutive turns `t -> t+1` (key prefix `turn_{t}_{t+1}/`), counted over (debate, agent):

    - `w_to_r`, `r_to_w`: how many answers went from wrong to right, from right to wrong; `w_to_r_rate` and
      `r_to_w_rate` divide by the number of wrong, resp. right, answers at `t`.
    - `persuaded`: the others' majority answer at `t` (the [`plurality_answer`] of the *other* agents' answers: the
      unique most frequent non-`None` answer) exists, the agent's answer at `t` differs from it, and the agent's
      answer at `t+1` equals it. `persuaded_to_r` / `persuaded_to_w` split it by whether the adopted answer is
      right. `persuaded_rate` divides by the number of answers at `t` that differ from an existing majority of the
      others.
    - `persuader`: the agent's answer `x` at `t` is not `None` and is not the others' majority answer at `t`, and
      the others' majority answer at `t+1` is `x` (the others came round to what the agent said, whatever the agent
      says at `t+1`). `persuader_rate` divides by the number of non-`None` answers at `t` that were not the others'
      majority answer.

    A rate whose denominator is 0 is NaN. With one agent there are no others, so `persuaded` and `persuader` are 0.
    Also `final/majority_accuracy`, `final/agent_accuracy` (the last turn) and `num_debates`.

    Example:

    ```python
    evaluation = DebateEvaluation()
    evaluation.add([["4", "5"], ["4", "4"]], [[True, False], [True, True]])  # 1 debate, 2 turns, 2 agents
    metrics = evaluation.compute()
    metrics["turn_1/majority_accuracy"], metrics["turn_2/majority_accuracy"], metrics["turn_1_2/persuaded"]
    # (0.5, 1.0, 1.0)
    ```
    """

    def __init__(self) -> None:
        self.answers: list[list[list[Answer]]] = []
        self.correct: list[list[list[bool]]] = []

    def __len__(self) -> int:
        return len(self.answers)

    def add(self, answers: Sequence[Sequence[Answer]], correct: Sequence[Sequence[bool]]) -> None:
        """Add one debate: `answers[t][a]` is agent `a`'s answer at turn `t + 1`, `correct[t][a]` its correctness."""
        if len(answers) == 0:
            raise ValueError("A debate needs at least one turn.")
        if len(answers) != len(correct):
            raise ValueError(f"`answers` has {len(answers)} turns but `correct` has {len(correct)}.")
        num_agents = len(answers[0])
        if num_agents == 0:
            raise ValueError("A debate needs at least one agent.")
        for t, (turn_answers, turn_correct) in enumerate(zip(answers, correct)):
            if len(turn_answers) != num_agents or len(turn_correct) != num_agents:
                raise ValueError(
                    f"Turn {t + 1} has {len(turn_answers)} answers and {len(turn_correct)} correctness values; "
                    f"expected {num_agents} (the number of agents at turn 1)."
                )
        if self.answers and len(self.answers[0][0]) != num_agents:
            raise ValueError(f"This debate has {num_agents} agents but earlier ones had {len(self.answers[0][0])}.")
        self.answers.append([list(turn) for turn in answers])
        self.correct.append([[bool(c) for c in turn] for turn in correct])

    def add_batch(
        self, answers: Sequence[Sequence[Sequence[Answer]]], correct: Sequence[Sequence[Sequence[bool]]]
    ) -> None:
        """Add several debates (`debate x turn x agent`)."""
        if len(answers) != len(correct):
            raise ValueError(f"Got {len(answers)} debates of answers but {len(correct)} of correctness values.")
        for debate_answers, debate_correct in zip(answers, correct):
            self.add(debate_answers, debate_correct)

    def add_transcripts(
        self, transcripts: Sequence[Any], golds: Sequence[Any], verifier: Any, correct_threshold: float = 0.5
    ) -> None:
        """Add debates from transcripts, using a verifier to extract and judge every answer.

        Args:
            transcripts (`Sequence[Transcript]`): One transcript per debate (`transcript[t].responses[a]`).
            golds (`Sequence`): One gold answer per debate.
            verifier: An object with `extract(response) -> str | None` and `score(response, gold) -> float`
                (e.g. `trl_marl.rewards.verifier.AnswerVerifier`).
            correct_threshold (`float`): The score from which an answer counts as right.
        """
        from .utils.text import completion_text

        if len(transcripts) != len(golds):
            raise ValueError(f"Got {len(transcripts)} transcripts but {len(golds)} gold answers.")
        for transcript, gold in zip(transcripts, golds):
            texts = [[completion_text(r) for r in turn.responses] for turn in transcript]
            self.add(
                [[verifier.extract(text) for text in turn] for turn in texts],
                [[float(verifier.score(text, gold)) >= correct_threshold for text in turn] for turn in texts],
            )

    def compute(self) -> dict[str, float]:
        """The metrics (see the class docstring) of every debate added so far, as a flat dict."""
        if not self.answers:
            raise ValueError("No debate was added.")
        num_turns = max(len(debate) for debate in self.answers)
        num_agents = len(self.answers[0][0])
        # Pad early-stopped debates with their last turn.
        answers = [debate + [debate[-1]] * (num_turns - len(debate)) for debate in self.answers]
        correct = [debate + [debate[-1]] * (num_turns - len(debate)) for debate in self.correct]
        num_debates = len(answers)
        metrics: dict[str, float] = {"num_debates": float(num_debates)}
        for t in range(num_turns):
            majority = [majority_vote_score(a[t], c[t]) for a, c in zip(answers, correct)]
            metrics[f"turn_{t + 1}/majority_accuracy"] = sum(majority) / num_debates
            metrics[f"turn_{t + 1}/agent_accuracy"] = sum(sum(c[t]) for c in correct) / (num_debates * num_agents)
        for t in range(num_turns - 1):
            metrics.update(self._transitions(answers, correct, t, num_agents))
        metrics["final/majority_accuracy"] = metrics[f"turn_{num_turns}/majority_accuracy"]
        metrics["final/agent_accuracy"] = metrics[f"turn_{num_turns}/agent_accuracy"]
        return metrics

    @staticmethod
    def _transitions(
        answers: list[list[list[Answer]]], correct: list[list[list[bool]]], t: int, num_agents: int
    ) -> dict[str, float]:
        counts: Counter[str] = Counter()
        for debate_answers, debate_correct in zip(answers, correct):
            now, nxt = debate_answers[t], debate_answers[t + 1]
            right_now, right_next = debate_correct[t], debate_correct[t + 1]
            for a in range(num_agents):
                counts["right"] += right_now[a]
                counts["wrong"] += not right_now[a]
                counts["w_to_r"] += (not right_now[a]) and right_next[a]
                counts["r_to_w"] += right_now[a] and not right_next[a]
                others_now = plurality_answer(now[:a] + now[a + 1 :])
                others_next = plurality_answer(nxt[:a] + nxt[a + 1 :])
                if others_now is not None and now[a] != others_now:
                    counts["persuadable"] += 1
                    if nxt[a] == others_now:
                        counts["persuaded"] += 1
                        counts["persuaded_to_r" if right_next[a] else "persuaded_to_w"] += 1
                if now[a] is not None and now[a] != others_now:
                    counts["can_persuade"] += 1
                    if others_next == now[a]:
                        counts["persuader"] += 1
        prefix = f"turn_{t + 1}_{t + 2}/"
        return {
            prefix + "w_to_r": float(counts["w_to_r"]),
            prefix + "r_to_w": float(counts["r_to_w"]),
            prefix + "w_to_r_rate": _rate(counts["w_to_r"], counts["wrong"]),
            prefix + "r_to_w_rate": _rate(counts["r_to_w"], counts["right"]),
            prefix + "persuaded": float(counts["persuaded"]),
            prefix + "persuaded_to_r": float(counts["persuaded_to_r"]),
            prefix + "persuaded_to_w": float(counts["persuaded_to_w"]),
            prefix + "persuaded_rate": _rate(counts["persuaded"], counts["persuadable"]),
            prefix + "persuader": float(counts["persuader"]),
            prefix + "persuader_rate": _rate(counts["persuader"], counts["can_persuade"]),
        }


def evaluate_debates(
    answers: Sequence[Sequence[Sequence[Answer]]], correct: Sequence[Sequence[Sequence[bool]]]
) -> dict[str, float]:
    """MAPoRL's evaluation metrics of a set of debates (see [`DebateEvaluation`] for every key).

    Args:
        answers (`Sequence`): `answers[d][t][a]`: agent `a`'s extracted answer at turn `t + 1` of debate `d`
            (`None` if unparseable).
        correct (`Sequence`): Same shape, booleans: whether each answer is right.

    Returns:
        `dict[str, float]`: Flat log metrics such as `turn_1/majority_accuracy`, `turn_2/agent_accuracy`,
        `turn_1_2/w_to_r`, `turn_1_2/persuaded_rate`.
    """
    evaluation = DebateEvaluation()
    evaluation.add_batch(answers, correct)
    return evaluation.compute()
