"""Other shapes of the writing reward of [`~trl_marl.rewards.writing.WritingTeamReward`]'s terms.

- [`TldrCombinedReward`]: the structure of the MAGRPO authors' released TL;DR reward, four gated levels.
- [`SymmetricWritingTeamReward`]: the team reward of [`~trl_marl.envs.writing.SymmetricWritingEnv`] (unassigned
  roles): the shorter text scored as the summary, nothing on the structure terms when both writers chose the same
  length class; with its cooperation metrics [`WroteShortText`] and [`SameLengthClass`].
"""


from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..envs.writing import PARAGRAPH_WORDS, SUMMARY_MAX_WORDS
from ..utils.text import words
from .writing import (
    DEFAULT_GATE,
    TRANSITION_CATEGORIES,
    LengthRangeReward,
    LengthRatioReward,
    LexicalDiversityReward,
    StyleConsistencyReward,
    TransitionWordsReward,
    VocabularyRatioReward,
    WritingTeamReward,
    contains_phrase,
)
from .writing_source import STOPWORDS, SourceRelevanceReward, team_texts


class _Named(Protocol):
    """A reward term or a metric: a TRL reward function known by its `name`."""

    name: str


# ----------------------------------------------------------------------------------------------------------------
# The authors' TL;DR reward, as gated levels
# ----------------------------------------------------------------------------------------------------------------

_AUTHORS_WORD = re.compile(r"\w+")


class TldrCombinedReward:
    """The structure of the MAGRPO authors' TL;DR reward (`tldr_combined_reward` in `rewards/tldr_rewards.py` of
    OpenMLRL/LLM_Collab_Writing): four gated levels, maximum 3.0; agent 0's text is s, agent 1's d.

    1. Both texts have `token_range` (8-256) whitespace-separated tokens: +0.5; otherwise the reward is 0 and stops.
    2. rho = (characters of d) / (characters of s): +1 in [1.6, 3.2]; +(rho - 1.1) / 0.5 in [1.1, 1.6);
       +1 - (rho - 3.2) / 1.8 in (3.2, 5.0]; outside [1.1, 5.0] nothing, and it stops.
    3. v = (distinct words of d) / (distinct words of s), counting every `\\w+` run, stopwords included: +0.5 from
       2.0; +0.5 (v - 1.3) / 0.7 in [1.3, 2.0); below 1.3 (or no word in s) nothing, and it stops.
    4. Style: +0.4 t + 0.6 min(J, 0.03) / 0.03, where t = 0 without a transition, else min(1, 0.4 + min(0.05 (k - 1),
       0.6)) for k distinct transition categories found in d (substring matches on the lower-cased text, so "so"
       matches inside "also"), and J is the Jaccard overlap of the two texts' distinct non-stopwords (1.0 when both
       are empty).

    Every constant and gate above is the authors'. Their transition lists (12 categories) and stopword list are
    data of their repository that trl-marl does not ship: by default this reward counts our [`TRANSITION_CATEGORIES`]
    (6) and uses our [`STOPWORDS`]; pass their lists as `transition_categories` and `stopwords` for their exact
    numbers. Like theirs, this reward does not read the source: gate it with
    `WritingTeamReward(terms=[TldrCombinedReward()], gate=SourceRelevanceReward())`.

    Args:
        transition_categories (`Mapping[str, Sequence[str]]`): Transition phrases by category.
        stopwords (`Iterable[str]`): Words left out of the Jaccard vocabularies.
        substring (`bool`): Match transitions as substrings (the authors') instead of whole words.
        token_range (`tuple[int, int]`): Level 1's token range of both texts.
        jaccard_saturation (`float`): The Jaccard overlap that earns level 4's full 0.6.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self,
        transition_categories: Mapping[str, Sequence[str]] = TRANSITION_CATEGORIES,
        stopwords: Sequence[str] | frozenset[str] = STOPWORDS,
        substring: bool = True,
        token_range: tuple[int, int] = (8, 256),
        jaccard_saturation: float = 0.03,
    ) -> None:
        if not transition_categories:
            raise ValueError("TldrCombinedReward needs at least one transition category.")
        if not 0 < jaccard_saturation <= 1:
            raise ValueError(f"TldrCombinedReward: `jaccard_saturation` must be in (0, 1], got {jaccard_saturation}.")
        self.name = "tldr_combined"
        self.categories = {name: tuple(p.lower() for p in phrases) for name, phrases in transition_categories.items()}
        self.stopwords = frozenset(stopwords)
        self.substring = substring
        self.token_range = (int(token_range[0]), int(token_range[1]))
        self.jaccard_saturation = float(jaccard_saturation)

    def categories_found(self, text: str) -> list[str]:
        """The transition categories with at least one phrase in `text`."""
        lowered = text.lower()
        padded = f" {' '.join(words(text))} "
        return [name for name, phrases in self.categories.items()
                if any((p in lowered) if self.substring else contains_phrase(padded, p) for p in phrases)]

    def levels(self, short: str, detailed: str) -> list[float]:
        """The reward earned at each level reached (its sum is the reward; fewer than 4 entries when a gate
        stopped it)."""
        lo, hi = self.token_range
        if not (lo <= len(short.split()) <= hi and lo <= len(detailed.split()) <= hi):
            return [0.0]
        earned = [0.5]
        rho = len(detailed) / len(short)
        if 1.6 <= rho <= 3.2:
            earned.append(1.0)
        elif 1.1 <= rho < 1.6:
            earned.append((rho - 1.1) / 0.5)
        elif 3.2 < rho <= 5.0:
            earned.append(1.0 - (rho - 3.2) / 1.8)
        else:
            return earned
        short_words, detailed_words = _AUTHORS_WORD.findall(short.lower()), _AUTHORS_WORD.findall(detailed.lower())
        distinct_short = len(set(short_words))
        v = len(set(detailed_words)) / distinct_short if distinct_short else 0.0
        if v >= 2.0:
            earned.append(0.5)
        elif 1.3 <= v:
            earned.append(0.5 * (v - 1.3) / 0.7)
        else:
            return earned
        k = len(self.categories_found(detailed))
        t = 0.0 if k == 0 else min(1.0, 0.4 + min(0.05 * (k - 1), 0.6))
        v_s, v_d = set(short_words) - self.stopwords, set(detailed_words) - self.stopwords
        jaccard = len(v_s & v_d) / len(v_s | v_d) if v_s | v_d else 1.0
        earned.append(0.4 * t + 0.6 * min(jaccard, self.jaccard_saturation) / self.jaccard_saturation)
        return earned

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The reward of each joint action, at most 3.0 (see the class docstring)."""
        team = team_texts(type(self).__name__, completions, kwargs, 2)
        return [sum(self.levels(short, detailed)) for short, detailed in zip(team[0], team[1])]


# ----------------------------------------------------------------------------------------------------------------
# Symmetric roles: the shorter text is the summary, the longer the paragraph
# ----------------------------------------------------------------------------------------------------------------

SHORT_CLASS_MAX_WORDS = (SUMMARY_MAX_WORDS + PARAGRAPH_WORDS[0]) // 2
"""A text of at most this many words (22) is in the short length class, a longer one in the long class: the middle
of the summary's limit (15) and the paragraph's minimum (30) of [`SymmetricWritingEnv`]."""

STRUCTURE_TERMS: tuple[str, ...] = ("length_range", "length_ratio", "vocabulary_ratio")
"""The terms [`SymmetricWritingTeamReward`] zeroes when both texts fall in the same length class (the authors'
"Structure": their levels 1-3)."""


def length_class(text: str, short_max: int = SHORT_CLASS_MAX_WORDS) -> int:
    """0 (short) if `text` has at most `short_max` [`words`], else 1 (long)."""
    return 0 if len(words(text)) <= short_max else 1


def _by_length(first: str, second: str) -> tuple[str, str]:
    """The two texts, the shorter (in words) first; on a tie, in the order given."""
    return (second, first) if len(words(second)) < len(words(first)) else (first, second)


class ByLengthRoles:
    """A two-agent writing term scored on the texts ordered by length, for unassigned roles.

    For each joint action the shorter text (in [`words`]; agent 0's on a tie) is passed as agent 0's (the summary)
    and the longer as agent 1's (the paragraph). With `zero_when_same_class`, the term is 0 where both texts fall in
    the same [`length_class`]: the writers collided, and no pair of roles was played.

    Args:
        term (`Callable`): A team reward term of [`CooperativeWritingEnv`] (agent 0 short, agent 1 detailed).
        zero_when_same_class (`bool`): Pay nothing on a collision.
        short_max (`int`): The longest text of the short class, in words.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, term: Any, zero_when_same_class: bool, short_max: int = SHORT_CLASS_MAX_WORDS) -> None:
        self.term = term
        self.zero_when_same_class = zero_when_same_class
        self.short_max = int(short_max)
        self.name = getattr(term, "name", None) or getattr(term, "__name__", None) or type(term).__name__

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The term on the length-ordered texts of each joint action (0 on a collision, if asked)."""
        team = team_texts(type(self).__name__, completions, kwargs, 2)
        ordered = [_by_length(first, second) for first, second in zip(team[0], team[1])]
        shorter, longer = [pair[0] for pair in ordered], [pair[1] for pair in ordered]
        values = self.term(prompts=prompts, completions=shorter, **{**kwargs, "agent_completions": [shorter, longer]})
        if not self.zero_when_same_class:
            return list(values)
        return [None if v is None else 0.0 if length_class(s, self.short_max) == length_class(d, self.short_max)
                else v for v, s, d in zip(values, shorter, longer)]


class SymmetricWritingTeamReward(WritingTeamReward):
    """The team reward of [`SymmetricWritingEnv`]: the writing terms on the length-ordered texts, gated by the
    source, with nothing on the structure terms when the writers chose the same length class.

    Every term is wrapped in [`ByLengthRoles`] (the shorter text is scored as the summary, the longer as the
    paragraph); [`STRUCTURE_TERMS`] pay 0 when both texts are in the same [`length_class`]. The terms (weights of
    [`DEFAULT_WRITING_WEIGHTS`], maximum 4.0): [`LengthRangeReward`] with the summary in `summary_range` and the
    paragraph in `paragraph_range`, [`LengthRatioReward`] (|d| / |s| in [2, 3]), [`VocabularyRatioReward`],
    [`LexicalDiversityReward`], [`TransitionWordsReward`] (in the paragraph) and [`StyleConsistencyReward`] with
    Jaccard saturating at `jaccard_saturation` (0.03, the authors'); the gate is [`SourceRelevanceReward`]. A
    collision keeps at most the 1.5 of diversity, transitions and overlap, below the 3.0 of a successful pair.

    Args:
        weights (`Mapping[str, float]` or `Sequence[float]`, *optional*): As for [`WritingTeamReward`].
        gate (`Callable`, *optional*): The gate (default `SourceRelevanceReward()`); `None` for none.
        short_max (`int`): The longest text of the short class, in words.
        summary_range (`tuple[int, int]`): The summary's word range of the length term.
        paragraph_range (`tuple[int, int]`): The paragraph's word range of the length term.
        jaccard_saturation (`float`, *optional*): The overlap that earns the full style-consistency term.
    """

    def __init__(
        self,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        gate: Any = DEFAULT_GATE,
        short_max: int = SHORT_CLASS_MAX_WORDS,
        summary_range: tuple[int, int] = (5, SUMMARY_MAX_WORDS),
        paragraph_range: tuple[int, int] = PARAGRAPH_WORDS,
        jaccard_saturation: float | None = 0.03,
    ) -> None:
        if not summary_range[1] <= short_max < paragraph_range[0]:
            raise ValueError(f"SymmetricWritingTeamReward needs summary max <= short_max < paragraph min, got "
                             f"summary_range={summary_range}, short_max={short_max}, "
                             f"paragraph_range={paragraph_range}.")
        terms: list[_Named] = [LengthRangeReward(ranges=(summary_range, paragraph_range)), LengthRatioReward(),
                 VocabularyRatioReward(), LexicalDiversityReward(), TransitionWordsReward(),
                 StyleConsistencyReward(saturation=jaccard_saturation)]
        wrapped = [ByLengthRoles(t, zero_when_same_class=t.name in STRUCTURE_TERMS, short_max=short_max)
                   for t in terms]
        super().__init__(terms=wrapped, weights=weights,
                         gate=SourceRelevanceReward() if gate is DEFAULT_GATE else gate)
        self.name = "symmetric_writing_team"
        self.short_max = int(short_max)


class WroteShortText:
    """Cooperation metric of [`SymmetricWritingEnv`]: 1.0 where agent `agent` wrote the text of the short length
    class, else 0.0 (a function of the joint action, with a reward function's signature; log it, do not train on
    it).

    Args:
        agent (`int`): The agent (0 or 1).
        short_max (`int`): The longest text of the short class, in words.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, agent: int, short_max: int = SHORT_CLASS_MAX_WORDS) -> None:
        if agent < 0:
            raise ValueError(f"WroteShortText: `agent` must be >= 0, got {agent}.")
        self.agent, self.short_max = int(agent), int(short_max)
        self.name = f"agent_{agent}_short"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """1.0 where the agent's text is in the short class."""
        team = team_texts(type(self).__name__, completions, kwargs, self.agent + 1)
        return [float(length_class(text, self.short_max) == 0) for text in team[self.agent]]


class SameLengthClass:
    """Cooperation metric of [`SymmetricWritingEnv`]: 1.0 where both writers' texts fall in the same length class
    (they collided: both summaries or both paragraphs), else 0.0. Its mean over joint actions is the collision rate
    b of the pilot gate (docs/magrpo.md, "Symmetric roles").

    Args:
        short_max (`int`): The longest text of the short class, in words.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, short_max: int = SHORT_CLASS_MAX_WORDS) -> None:
        self.short_max = int(short_max)
        self.name = "same_length_class"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """1.0 where the two texts are in the same length class."""
        team = team_texts(type(self).__name__, completions, kwargs, 2)
        return [float(length_class(a, self.short_max) == length_class(b, self.short_max))
                for a, b in zip(team[0], team[1])]


def length_class_metrics(short_max: int = SHORT_CLASS_MAX_WORDS) -> dict[str, Any]:
    """The cooperation metrics of [`SymmetricWritingEnv`] by name: `agent_0_short`, `agent_1_short` (which writer
    took the summary) and `same_length_class` (a collision)."""
    metrics: list[_Named] = [WroteShortText(0, short_max), WroteShortText(1, short_max), SameLengthClass(short_max)]
    return {m.name: m for m in metrics}
