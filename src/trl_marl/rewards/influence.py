"""MAPoRL's influence-aware verification reward with collaboration incentives, as a TRL-style reward function.

[`InfluenceAwareReward`] wraps a verifier and turns the verifier's scores of a whole debate into the reward of each
answer (Park et al., arXiv 2502.18439, Definition 1 and Tables 1-2; the math is in [`trl_marl.core.maporl`]). The
verifier is any of `trl_marl.rewards.verifier`'s (`AnswerVerifier`, `ModelVerifier`, `RemoteVerifier`: they have
`score_batch(questions, responses, golds)`) or any object with `score(response, gold) -> float` in `[0, 1]`.

It is an *agent reward* (`reward_kind = "agent"`, see `trl_marl.reward_contract`): every trainer calls it once per
`(turn, agent)`. The multi-agent PPO trainer scores after the episode, with the *complete* transcripts of the batch's
debates, so the reward of an early answer can look at the answers it influenced later; MAGRPO scores right after
each turn (the transcript ends at the scored turn: the future terms of Definition 1 are absent, and MAGRPO's tree
returns add the future instead) and uses the mean of the agents' rewards as the joint action's team reward.
Every answer of the batch is verified once (in one `score_batch` call when the verifier has it): the first call of a
batch scores the whole transcript table and later calls of the same batch read from a cache.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Literal, Protocol

import torch

from ..core.maporl import shaped_debate_rewards
from ..envs.base import Transcript
from ..utils.text import completion_text

__all__ = ["INFLUENCE_MODES", "InfluenceAwareReward", "Scorer"]

INFLUENCE_MODES: tuple[str, ...] = ("influence", "verifier", "final")
"""Valid `mode` values of [`InfluenceAwareReward`]."""


class Scorer(Protocol):
    """The simplest verifier [`InfluenceAwareReward`] accepts: a score in `[0, 1]` of one response against the gold.

    A verifier with `score_batch(questions, responses, golds) -> list[float]` (every verifier of
    `trl_marl.rewards.verifier`) is used through that method instead, so model-based verifiers get the question and
    score the whole batch at once.
    """

    def score(self, response: str, gold: Any) -> float: ...


def _hashable(value: Any) -> Hashable:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


class InfluenceAwareReward:
    """MAPoRL's reward of one agent's answers at one turn, computed from the whole debate.

    Modes:

    - `"influence"` (default): Definition 1 of the paper plus the incentives of Tables 1 and 2,
      `R[t, a] = (V[t, a] + sum_{t'>t} gamma^(t'-t) mean_j V[t', j]) / sum_{t'>=t} gamma^(t'-t) + incentives`.
    - `"verifier"`: the verifier's score of the answer alone, `V[t, a]` (works in any trainer: without a
      transcript it scores `completions`).
    - `"final"`: whether the agent's answer at the debate's last turn is right (`1.0` or `0.0`), the same for every
      turn of that agent.

    An answer is right when its verifier score is at least `correct_threshold`; this decides the R/W cells of the
    incentives and the `"final"` reward. The alpha/beta incentives only exist in `"influence"` mode.

    Called as `f(prompts=..., completions=..., agent_index=a, turn=t, transcript=[...], answer=[...], ...)`
    (with `agent_index=None` it returns the mean of the agents' rewards at turn `t`, a team reward):
    `completions` are agent `a`'s answers at turn `t` (1-based), one per debate; `transcript[i]` is debate `i`'s
    complete [`~trl_marl.envs.base.Transcript`] (`transcript[i][t - 1].responses[a]` is agent `a`'s answer at turn
    `t`); the gold column (default `answer`) holds one gold per debate. Debates may have different lengths (an early
    stop); each one's reward uses its own last turn. Returns one float per debate.

    Args:
        verifier (`Scorer` or `BatchVerifier`): A verifier of `trl_marl.rewards.verifier`, or any object with a
            method `score_batch(questions, responses, golds) -> list[float]` or `score(response, gold) -> float`
            (scores in `[0, 1]`). `score_batch` is preferred when both exist.
        gamma (`float`): Discount factor of Definition 1, in `[0, 1]`.
        alpha0 (`float`): Table 1 incentive relative to a wrong majority of the other agents.
        alpha1 (`float`): Table 1 incentive relative to a right majority of the other agents.
        beta0 (`float`): Table 2 incentive for the influence of a wrong answer.
        beta1 (`float`): Table 2 incentive for the influence of a right answer.
        mode (`str`): `"influence"`, `"verifier"` or `"final"` (see above).
        gold_column (`str`): The dataset column holding the gold answers.
        correct_threshold (`float`): The verifier score from which an answer counts as right.
        question_column (`str`, *optional*): The dataset column holding the question, passed to `score_batch`
            (model-based verifiers score `(question, response)`). Defaults to the verifier's own `question_column`
            attribute, else `"question"`. When the column is absent from a batch, empty questions are passed to a
            rule-based verifier (which ignores them); a verifier with a `question_column` attribute (model-based)
            raises instead.

    Example:

    ```python
    from trl_marl.rewards.influence import InfluenceAwareReward
    from trl_marl.rewards.verifier import AnswerVerifier

    reward = InfluenceAwareReward(AnswerVerifier(), gamma=1.0, alpha0=0.1, alpha1=0.1, beta0=0.1, beta1=0.1)
    trainer = MultiAgentPPOTrainer(..., reward_funcs=reward)
    ```
    """

    name = "influence_aware"
    reward_kind = "agent"  # one reward per (turn, agent) in every trainer (`trl_marl.reward_contract`)

    def __init__(
        self,
        verifier: Scorer,
        gamma: float = 1.0,
        alpha0: float = 0.0,
        alpha1: float = 0.0,
        beta0: float = 0.0,
        beta1: float = 0.0,
        mode: Literal["influence", "verifier", "final"] = "influence",
        gold_column: str = "answer",
        correct_threshold: float = 0.5,
        question_column: str | None = None,
    ) -> None:
        self._batched = callable(getattr(verifier, "score_batch", None))
        if not self._batched and not callable(getattr(verifier, "score", None)):
            raise TypeError(
                "`verifier` must have a method `score_batch(questions, responses, golds) -> list[float]` or "
                f"`score(response, gold) -> float`, got {type(verifier).__name__}."
            )
        if question_column is None:
            question_column = getattr(verifier, "question_column", None) or "question"
        if mode not in INFLUENCE_MODES:
            raise ValueError(f"`mode` must be one of {INFLUENCE_MODES}, got {mode!r}.")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"`gamma` must be in [0, 1] (Definition 1), got {gamma}.")
        if mode != "influence" and any((alpha0, alpha1, beta0, beta1)):
            raise ValueError(
                f"The alpha/beta incentives (Tables 1 and 2) only apply in mode='influence', got mode={mode!r} with "
                f"alpha0={alpha0}, alpha1={alpha1}, beta0={beta0}, beta1={beta1}."
            )
        self.verifier = verifier
        self.gamma = gamma
        self.alpha0, self.alpha1, self.beta0, self.beta1 = alpha0, alpha1, beta0, beta1
        self.mode = mode
        self.gold_column = gold_column
        self.correct_threshold = correct_threshold
        self.question_column = question_column
        self.num_verifications = 0  # responses scored by the verifier (the cache keeps this at B * T * A a batch)
        self._cache_key: Hashable | None = None
        self._cache_value: list[torch.Tensor] | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(mode={self.mode!r}, gamma={self.gamma}, alpha0={self.alpha0}, "
            f"alpha1={self.alpha1}, beta0={self.beta0}, beta1={self.beta1})"
        )

    # ----- the reward function -----
    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        golds = kwargs.get(self.gold_column)
        if golds is None:
            raise KeyError(
                f"{type(self).__name__} reads the gold answers from the column `{self.gold_column}`, which the "
                f"trainer did not pass (columns passed: {sorted(kwargs)})."
            )
        transcripts = kwargs.get("transcript")
        agent_index = kwargs.get("agent_index")
        turn = kwargs.get("turn")
        if transcripts is None or turn is None:
            if self.mode == "verifier" and completions is not None:
                texts = [completion_text(c) for c in completions]
                return self._verify(self._questions(kwargs, len(texts)), texts, list(golds))
            raise ValueError(
                f"{type(self).__name__}(mode={self.mode!r}) needs `turn` and the `transcript` of every debate "
                "(every trl-marl trainer passes them)."
            )
        if len(transcripts) != len(golds):
            raise ValueError(f"Got {len(transcripts)} transcripts but {len(golds)} gold answers.")
        if completions is not None and len(completions) != len(transcripts):
            raise ValueError(f"Got {len(completions)} completions but {len(transcripts)} transcripts.")
        rewards = self.debate_rewards(transcripts, golds, self._questions(kwargs, len(transcripts)))
        out = []
        for i, table in enumerate(rewards):
            num_turns, num_agents = table.shape
            if not 1 <= turn <= num_turns:
                raise ValueError(
                    f"Debate {i} has {num_turns} turn(s) in its transcript but the reward of turn {turn} was asked: "
                    f"{type(self).__name__} needs the complete transcript (every turn), not the one before `turn`."
                )
            if agent_index is None:  # called as a team reward: the mean of the agents' rewards at `turn`
                out.append(float(table[turn - 1].mean()))
                continue
            if not 0 <= agent_index < num_agents:
                raise IndexError(f"`agent_index` is {agent_index} but debate {i} has {num_agents} agents.")
            out.append(float(table[turn - 1, agent_index]))
        return out

    # ----- the reward of every answer of a batch -----
    def debate_rewards(
        self, transcripts: Sequence[Transcript], golds: Sequence[Any], questions: Sequence[str] | None = None
    ) -> list[torch.Tensor]:
        """The reward of every answer of every debate, as one `(T_i, A)` float64 tensor per debate (cached).

        The last batch's result is kept, keyed by the text of every response, the golds and the questions, so the
        `T * A` calls of one batch verify each answer once.

        Args:
            transcripts (`Sequence[Transcript]`): One complete transcript per debate.
            golds (`Sequence`): One gold answer per debate.
            questions (`Sequence[str]`, *optional*): One question per debate, for `score_batch` (without them a
                rule-based verifier gets empty questions and a model-based one raises).

        Returns:
            `list[torch.Tensor]`: `rewards[i][t, a]` is the reward of agent `a`'s answer at turn `t + 1` of debate `i`.
        """
        if len(transcripts) != len(golds):
            raise ValueError(f"Got {len(transcripts)} transcripts but {len(golds)} gold answers.")
        if questions is not None and len(questions) != len(transcripts):
            raise ValueError(f"Got {len(transcripts)} transcripts but {len(questions)} questions.")
        texts = [self._texts(tr, i) for i, tr in enumerate(transcripts)]
        key = (tuple(texts), tuple(_hashable(g) for g in golds), None if questions is None else tuple(questions))
        if self._cache_value is not None and key == self._cache_key:
            return self._cache_value
        # one verifier call for every answer of the batch, flattened debate by debate, turn by turn, agent by agent
        flat_questions: list[str] = []
        flat_texts: list[str] = []
        flat_golds: list[Any] = []
        for i, (debate, gold) in enumerate(zip(texts, golds)):
            for turn in debate:
                flat_texts.extend(turn)
                flat_golds.extend([gold] * len(turn))
                if questions is not None:
                    flat_questions.extend([str(questions[i])] * len(turn))
        flat = self._verify(None if questions is None else flat_questions, flat_texts, flat_golds)
        scores, start = [], 0
        for debate in texts:
            size = len(debate) * len(debate[0])
            scores.append(torch.tensor(flat[start : start + size], dtype=torch.float64).view(len(debate), -1))
            start += size
        by_debate: dict[int, torch.Tensor] = {}
        by_length: dict[tuple[int, ...], list[int]] = {}
        for i, table in enumerate(scores):
            by_length.setdefault(tuple(table.shape), []).append(i)
        for indices in by_length.values():
            batch = torch.stack([scores[i] for i in indices])  # (B', T, A): debates of the same length
            result = self._rewards_of(batch)
            for row, i in enumerate(indices):
                by_debate[i] = result[row]
        rewards = [by_debate[i] for i in range(len(scores))]
        self._cache_key, self._cache_value = key, rewards
        return rewards

    def _rewards_of(self, scores: torch.Tensor) -> torch.Tensor:
        correct = scores >= self.correct_threshold
        if self.mode == "verifier":
            return scores
        if self.mode == "final":
            return correct[:, -1:, :].to(scores.dtype).expand_as(scores).clone()
        return shaped_debate_rewards(scores, correct, self.gamma, self.alpha0, self.alpha1, self.beta0, self.beta1)

    def _questions(self, kwargs: dict[str, Any], size: int) -> list[str] | None:
        column = kwargs.get(self.question_column)
        if column is None:
            return None
        if len(column) != size:
            raise ValueError(f"The question column `{self.question_column}` has {len(column)} rows, expected {size}.")
        return [str(q) for q in column]

    def _verify(self, questions: list[str] | None, texts: list[str], golds: list[Any]) -> list[float]:
        """Verifier scores of `texts` (one `score_batch` call when the verifier has it)."""
        if questions is None:
            if hasattr(self.verifier, "question_column"):  # a model-based verifier scores (question, response)
                raise KeyError(
                    f"{type(self.verifier).__name__} scores (question, response) pairs but the question column "
                    f"`{self.question_column}` was not passed; add it to the dataset or set `question_column`."
                )
            questions = [""] * len(texts)
        if self._batched and hasattr(self.verifier, "score_batch"):  # (`_batched`: it has one)
            values = [float(v) for v in self.verifier.score_batch(questions, texts, golds)]
            if len(values) != len(texts):
                raise ValueError(f"The verifier returned {len(values)} scores for {len(texts)} responses.")
        else:
            values = [float(self.verifier.score(text, gold)) for text, gold in zip(texts, golds)]
        self.num_verifications += len(texts)
        for text, value in zip(texts, values):
            if value != value:  # NaN
                raise ValueError(f"The verifier returned NaN for the response {text[:80]!r}.")
        return values

    @staticmethod
    def _texts(transcript: Transcript, index: int) -> tuple[tuple[str, ...], ...]:
        if len(transcript) == 0:
            raise ValueError(f"The transcript of debate {index} is empty.")
        texts = tuple(tuple(completion_text(r) for r in turn.responses) for turn in transcript)
        if len({len(turn) for turn in texts}) != 1:
            raise ValueError(f"The turns of debate {index} do not all have the same number of agents.")
        return texts
