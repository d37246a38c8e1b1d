"""The team reward of [`~trl_marl.envs.writing_halves.HalvesWritingEnv`] and its cooperation metrics.

- [`half_summary_score`]: how well one summary covers the half of the text it chose, in [0, 1].
- [`HalvesTeamReward`]: the share of the text's two halves summarized, each half counted at its best summary.
- [`ChoseHalf`], [`SameHalf`], [`HalfScore`]: which half each writer chose, whether both chose the same one, and
  how well a writer summarizes the half it chose (log them; do not train on them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..envs.writing import writing_text
from ..envs.writing_halves import HALVES, halves_choice, split_halves
from ..utils.text import words
from .writing_source import content_words

SUMMARY_WORDS: tuple[int, int] = (3, 30)
"""The word range of a one-sentence summary in [`half_summary_score`]; a text outside it scores 0."""


def half_summary_score(summary: str, half: str, other: str, *, length: tuple[int, int] = SUMMARY_WORDS,
                       on_half_full: float = 0.6, cover_cap: int = 12, cover_full: float = 0.4,
                       varied_full: float = 0.6) -> float:
    """How well `summary` summarizes `half` of a text whose other half is `other`, in [0, 1].

    With C the distinct [`content_words`] of the summary, H those of `half` and O those of `other`, and n the
    summary's number of [`words`]:

        0                                        if n is outside `length` or C is empty
        on_half = |C & H| / |C|                  (its words are the half's)
        wrong   = |C & (O - H)| / |C|            (its words belong to the other half only)
        cover   = |C & H| / min(|H|, cover_cap)  (it names enough of the half)
        varied  = min(1, (distinct words / n) / varied_full)   (1 below 5 words)
        score   = min(1, on_half / on_half_full) * min(1, cover / cover_full) * clip(1 - 2 * wrong, 0, 1) * varied

    So text unrelated to the source scores 0 (no words of the half), a summary of the other half scores 0 (wrong >=
    0.5), a keyword list of the whole text loses by its words of the other half, a repeated word fails `varied`,
    and a copy of the whole text fails the length. A summary built from the half's own words, extractive or
    telegraphic, is a fair one-sentence summary and scores high: these are word statistics, not a judge of grammar.

    Example:

    ```python
    >>> half, other = "Open the file and return a stream.", "Raise OSError when the path is missing."
    >>> half_summary_score("Opens a file as a stream.", half, other)
    1.0
    >>> half_summary_score("Raises OSError for a missing path.", half, other)
    0.0
    ```
    """
    n = len(words(summary))
    chosen = set(content_words(summary))
    if not length[0] <= n <= length[1] or not chosen:
        return 0.0
    own, rest = set(content_words(half)), set(content_words(other))
    if not own:
        return 0.0
    hits = len(chosen & own)
    on_half = hits / len(chosen)
    wrong = len(chosen & (rest - own)) / len(chosen)
    cover = hits / min(len(own), cover_cap)
    varied = 1.0 if n < 5 else min(1.0, len(set(words(summary))) / n / varied_full)
    focus = min(1.0, max(0.0, 1.0 - 2.0 * wrong))
    return min(1.0, on_half / on_half_full) * min(1.0, cover / cover_full) * focus * varied


def _team(owner: str, completions: Sequence[Any], kwargs: dict[str, Any]) -> list[list[Any]]:
    agent_completions = kwargs.get("agent_completions")
    if agent_completions is None or len(agent_completions) != 2:
        raise ValueError(f"{owner} is a team reward of HalvesWritingEnv: it needs `agent_completions` with the "
                         "answers of its two writers (passed by trl-marl's trainers).")
    return [list(agent) for agent in agent_completions]


class HalvesTeamReward:
    """Team reward of [`~trl_marl.envs.writing_halves.HalvesWritingEnv`]: the share of the text's halves summarized,
    optionally with a bonus for a real division of the halves.

    Each writer's answer gives a choice and a summary ([`halves_choice`]); the summary is scored against the chosen
    half by [`half_summary_score`] (after [`writing_text`] strips markdown and quotes). For each half the best score
    of the writers that chose it counts (0 if none did), and the share is the mean over the two halves:

        share  = (max over writers choosing "first" of s + max over writers choosing "second" of s) / 2
        split  = 1 if the two writers chose different halves and each summary scores >= split_gate, else 0
        reward = (1 - split_bonus) * share + split_bonus * split

    With `require_split=True` a joint action whose writers did not choose different halves earns 0 (a summary of
    half the text is not the team's summary), as a program missing one of its two functions passes no test in the
    coding rule division: the reward of a split is its share, the reward of a collision nothing.

    So two writers that choose the same half earn at most (1 - split_bonus) / 2 (one half summarized, however well),
    and a team earns more only by splitting the halves, as [`~trl_marl.rewards.coordination.SplitItemsReward`] pays in
    the split game. With `split_bonus=0` (the default) the reward is the share alone; a bonus pays the division itself
    while the summaries are still weak (the share moves little with the choice then: a split of two 0.2 summaries earns
    0.2, a collision 0.1), and `split_gate` keeps it from a summary that is not about its half (the gamed answers of
    the tests score at most 0.05). An answer without a choice earns nothing; only its first word chooses, so one
    writer cannot take both halves.

    Args:
        text_column (`str`): The dataset column holding the source text (split as the env splits it).
        split_bonus (`float`): The weight of the division bonus, in [0, 1).
        split_gate (`float`): The score each summary needs for the bonus, in (0, 1].
        require_split (`bool`): Pay nothing unless the two writers chose different halves.
        **score_kwargs: Keyword arguments of [`half_summary_score`].

    Example:

    ```python
    >>> reward = HalvesTeamReward()
    >>> text = "Open the file and return a stream. Raise OSError when the path is missing."
    >>> reward(None, None, agent_completions=[[" first half: Opens a file as a stream."] * 2,
    ...        [" second half: Raises OSError for a missing path.", " first half: Opens a file."]], text=[text] * 2)
    [1.0, 0.5]
    ```
    """

    name = "halves_team"

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, text_column: str = "text", split_bonus: float = 0.0, split_gate: float = 0.25,
                 require_split: bool = False, **score_kwargs: Any) -> None:
        if not 0.0 <= split_bonus < 1.0:
            raise ValueError(f"HalvesTeamReward: `split_bonus` must be in [0, 1), got {split_bonus}.")
        if not 0.0 < split_gate <= 1.0:
            raise ValueError(f"HalvesTeamReward: `split_gate` must be in (0, 1], got {split_gate}.")
        self.text_column = text_column
        self.split_bonus = split_bonus
        self.split_gate = split_gate
        self.require_split = require_split
        self.score_kwargs = score_kwargs

    def scores(self, text: str, answers: Sequence[Any]) -> list[tuple[str | None, float]]:
        """Each answer's choice and the score of its summary against the chosen half of `text`."""
        first, second = split_halves(text)
        halves = {"first": (first, second), "second": (second, first)}
        result = []
        for answer in answers:
            choice, summary = halves_choice(answer)
            score = 0.0 if choice is None else half_summary_score(writing_text(summary), *halves[choice],
                                                                  **self.score_kwargs)
            result.append((choice, score))
        return result

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        team = _team(type(self).__name__, completions, kwargs)
        if self.text_column not in kwargs:
            raise KeyError(f"HalvesTeamReward needs the dataset column {self.text_column!r}.")
        rewards = []
        for j, text in enumerate(kwargs[self.text_column]):
            scored = self.scores(text, [agent[j] for agent in team])
            best = {half: max((s for c, s in scored if c == half), default=0.0) for half in HALVES}
            share = sum(best.values()) / len(HALVES)
            if self.require_split and {c for c, _ in scored} != set(HALVES):
                rewards.append(0.0)
                continue
            if not self.split_bonus:
                rewards.append(share)
                continue
            choices = {c for c, _ in scored}
            split = choices == set(HALVES) and all(s >= self.split_gate for _, s in scored)
            rewards.append((1.0 - self.split_bonus) * share + self.split_bonus * float(split))
        return rewards


class ChoseHalf:
    """Cooperation metric of [`~trl_marl.envs.writing_halves.HalvesWritingEnv`]: 1.0 where writer `agent` chose
    `half` ("first" or "second"), else 0.0.

    Args:
        agent (`int`): The writer (0 or 1).
        half (`str`): "first" or "second".
    """

    reward_kind = "team"

    def __init__(self, agent: int, half: str) -> None:
        if half not in HALVES:
            raise ValueError(f"ChoseHalf: `half` must be one of {HALVES}, got {half!r}.")
        if agent not in (0, 1):
            raise ValueError(f"ChoseHalf: `agent` must be 0 or 1, got {agent}.")
        self.agent, self.half = agent, half
        self.name = f"agent_{agent}_{half}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        team = _team(type(self).__name__, completions, kwargs)
        return [float(halves_choice(answer)[0] == self.half) for answer in team[self.agent]]


class SameHalf:
    """Cooperation metric of [`~trl_marl.envs.writing_halves.HalvesWritingEnv`]: 1.0 where both writers chose the
    same half (a collision), else 0.0 (also where either chose none)."""

    name = "same_half"

    reward_kind = "team"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        team = _team(type(self).__name__, completions, kwargs)
        choices = [[halves_choice(answer)[0] for answer in agent] for agent in team]
        return [float(a is not None and a == b) for a, b in zip(*choices)]


class HalfScore:
    """Cooperation metric of [`~trl_marl.envs.writing_halves.HalvesWritingEnv`]: the score of writer `agent`'s
    summary ([`HalvesTeamReward.scores`]) where it chose `half`, else None (skipped by a mean). Beside [`ChoseHalf`]
    it tells whether one half is easier to summarize: if it is, each writer's own gradient pulls it to that half,
    whatever its partner does.

    Args:
        agent (`int`): The writer (0 or 1).
        half (`str`): "first" or "second".
        text_column (`str`): The dataset column holding the source text.
    """

    reward_kind = "team"

    def __init__(self, agent: int, half: str, text_column: str = "text") -> None:
        ChoseHalf(agent, half)  # the same checks
        self.agent, self.half = agent, half
        self.reward = HalvesTeamReward(text_column)
        self.name = f"agent_{agent}_{half}_score"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        team = _team(type(self).__name__, completions, kwargs)
        if self.reward.text_column not in kwargs:
            raise KeyError(f"HalfScore needs the dataset column {self.reward.text_column!r}.")
        values: list[float | None] = []
        for text, answer in zip(kwargs[self.reward.text_column], team[self.agent]):
            [(choice, score)] = self.reward.scores(text, [answer])
            values.append(score if choice == self.half else None)
        return values


def halves_metrics() -> dict[str, Any]:
    """The cooperation metrics of the halves task by name: `agent_{0,1}_{first,second}`, `same_half` and
    `agent_{0,1}_{first,second}_score`."""
    metrics: list[Any] = [ChoseHalf(agent, half) for agent in (0, 1) for half in HALVES] + [SameHalf()]
    metrics += [HalfScore(agent, half) for agent in (0, 1) for half in HALVES]
    return {m.name: m for m in metrics}
