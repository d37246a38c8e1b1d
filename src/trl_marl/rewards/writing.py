"""The team reward of the cooperative writing task of MAGRPO (Liu et al., arXiv 2508.04652).

Each term is a TRL reward function of the joint action (agent 0's text `s`, agent 1's text `d`) of
[`~trl_marl.envs.writing.CooperativeWritingEnv`]: [`LengthRangeReward`], [`LengthRatioReward`],
[`VocabularyRatioReward`], [`LexicalDiversityReward`], [`TransitionWordsReward`], [`StyleConsistencyReward`], and
ROUGE-L against a reference ([`~trl_marl.rewards.RougeLReward`]); [`WritingTeamReward`] is their weighted sum. Every
term reads an agent's answer through [`~trl_marl.envs.writing.writing_text`], so a chat model's label ("Short
summary:"), markdown and surrounding quotes are not counted as its text.

**MAGRPO's terms.** The paper asks for a concise and a detailed text whose lengths, vocabulary and style fit
together; the authors' released TL;DR reward (`rewards/tldr_rewards.py` of OpenMLRL/LLM_Collab_Writing) scores, in
gated levels: both texts 8-256 tokens (0.5), the length ratio |d|/|s| (1.0; full in [1.6, 3.2] on characters), the
ratio of distinct words of d over s (0.5; full from 2.0, ramp from 1.3), and style (1.0): transition words in d
(0.4) and the Jaccard overlap of the two texts' content words (0.6, full from 0.03). Here: [`LengthRangeReward`],
[`LengthRatioReward`], [`VocabularyRatioReward`], [`TransitionWordsReward`] and [`StyleConsistencyReward`] are
those terms, summed with weights instead of gated (a gate gives a weak model no signal past its first failure),
on words rather than tokens and characters; [`LexicalDiversityReward`] (type-token ratio) is ours, added because a
repetition loop ("The output is defined as a function. The output is ...") passes the distinct-word ratio.

Words, everywhere in this module, are the lower-cased runs of letters, digits and underscores, apostrophes inside
a word kept ([`words`]): `words("Don't stop, it's FINE.") == ["don't", "stop", "it's", "fine"]`. |x| below is the
number of words of x.
"""


from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..envs.writing import PARAGRAPH_WORDS, SUMMARY_MAX_WORDS, writing_text
from ..utils.columns import column, is_missing
from ..utils.text import words

if TYPE_CHECKING:
    pass


# ----------------------------------------------------------------------------------------------------------------
# Text statistics
# ----------------------------------------------------------------------------------------------------------------

def type_token_ratio(text: str) -> float:
    """Type-token ratio: the number of distinct words over the number of words (0.0 for a text without words)."""
    tokens = words(text)
    return len(set(tokens)) / len(tokens) if tokens else 0.0


STOPWORDS: frozenset[str] = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her his i if in into is it
    its me my no not of on or our she so than that the their them then there these they this those to too us was we
    were what when where which who will with would you your""".split()
)
"""Function words left out of the content vocabulary of [`StyleConsistencyReward`]."""

TRANSITION_CATEGORIES: dict[str, tuple[str, ...]] = {
    "addition": ("additionally", "also", "furthermore", "in addition", "moreover"),
    "example": ("for example", "for instance", "in particular", "specifically"),
    "cause and effect": ("as a result", "because", "consequently", "therefore", "thus"),
    "contrast and concession": ("although", "however", "in contrast", "instead", "nevertheless", "on the other hand"),
    "sequence and time": ("afterwards", "eventually", "finally", "first", "meanwhile", "next"),
    "summary": ("in short", "in summary", "overall"),
}
"""Our transition words and phrases by kind (6 kinds, 29 entries): [`TRANSITION_PHRASES`] in order, and the
categories that [`TldrCombinedReward`] counts."""

TRANSITION_PHRASES: tuple[str, ...] = tuple(p for phrases in TRANSITION_CATEGORIES.values() for p in phrases)
"""The transition words and phrases [`TransitionWordsReward`] looks for (29; whole-word matches)."""


def _contains_phrase(padded_words: str, phrase: str) -> bool:
    """Whether `phrase` occurs as whole words in `padded_words` (`" " + " ".join(words) + " "`)."""
    return f" {' '.join(words(phrase))} " in padded_words


def stem(word: str) -> str:
    """A light stem of a lower-cased word, so that "methods", "called" and "calling" match "method" and "call".

    Strips one ending, checked in this order: "ies" -> "y", "sses" -> "ss", "s" (not after "s", "u" or "i"), "ing",
    "ed", each only where at least three letters stay. This is a word matcher for the source checks, not a
    linguistic stemmer: "used" becomes "us" only if it had three letters left, so it stays "used".
    """
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and word[-2] not in "sui":
        return word[:-1]
    for ending in ("ing", "ed"):
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def content_words(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """The stemmed content words of `text`: its [`words`] that are not `stopwords`, each [`stem`]med, in order.

    `content_words("The methods are called twice.") == ["method", "call", "twice"]`.
    """
    return [stem(w) for w in words(text) if w not in stopwords]


def _ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]


# ----------------------------------------------------------------------------------------------------------------
# Team reward terms
# ----------------------------------------------------------------------------------------------------------------


def _team_texts(owner: str, completions: Sequence[Any], kwargs: Mapping[str, Any], needed: int) -> list[list[str]]:
    """Every agent's texts of the joint actions (`[agent][joint action]`, read by `writing_text`), at least `needed`
    agents."""
    agent_completions = kwargs.get("agent_completions")
    if agent_completions is None:
        if needed <= 1:
            return [[writing_text(c) for c in completions]]
        raise ValueError(
            f"{owner} is a team reward of CooperativeWritingEnv: it needs `agent_completions` (one list of "
            "completions per agent, passed by trl-marl's trainers) with agent 0's short summary and agent 1's "
            "detailed summary."
        )
    if len(agent_completions) < needed:
        raise ValueError(f"{owner} needs the texts of {needed} agents, got {len(agent_completions)}.")
    return [[writing_text(c) for c in agent] for agent in agent_completions]


class LengthRangeReward:
    """Each agent's text within its word-length range, with a linear penalty outside.

    For agent a with |y_a| words and range [lo_a, hi_a]:

        s_a = 1                               if lo_a <= |y_a| <= hi_a
        s_a = |y_a| / lo_a                    if |y_a| < lo_a      (0 for an empty text)
        s_a = max(0, 1 - (|y_a| - hi_a) / hi_a)  if |y_a| > hi_a   (0 from twice the maximum on)

        reward = mean over agents of s_a

    Args:
        ranges (`Sequence[tuple[int, int]]`): `(lo_a, hi_a)` per agent, in words. The default, `((8, 64), (16, 256))`,
            keeps the short summary to one or two sentences and the detailed summary to one paragraph (the
            authors' released TL;DR reward uses 8-256 tokens for both).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, ranges: Sequence[tuple[int, int]] = ((8, 64), (16, 256))) -> None:
        ranges = [(int(lo), int(hi)) for lo, hi in ranges]
        if not ranges:
            raise ValueError("LengthRangeReward needs one (min, max) range per agent.")
        for lo, hi in ranges:
            if not 0 <= lo <= hi or hi < 1:
                raise ValueError(f"LengthRangeReward: each range must satisfy 0 <= min <= max, max >= 1; got "
                                 f"{(lo, hi)}.")
        self.name = "length_range"
        self.ranges = ranges

    @staticmethod
    def agent_score(num_words: int, lo: int, hi: int) -> float:
        """`s_a` above for one text of `num_words` words and the range `[lo, hi]`."""
        if num_words < lo:
            return num_words / lo
        if num_words > hi:
            return max(0.0, 1.0 - (num_words - hi) / hi)
        return 1.0

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Mean over agents of the range score of each joint action (see the class docstring)."""
        team = _team_texts(type(self).__name__, completions, kwargs, len(self.ranges))
        return [
            sum(self.agent_score(len(words(team[a][j])), lo, hi) for a, (lo, hi) in enumerate(self.ranges))
            / len(self.ranges)
            for j in range(len(completions))
        ]


class LengthRatioReward:
    """The detailed summary two to three times as long as the short one (in words), with linear ramps outside.

    With rho = |d| / |s| (d: agent 1's text, s: agent 0's):

        reward = 1                                   if low <= rho <= high
        reward = (rho - floor) / (low - floor)        if floor < rho < low
        reward = (ceiling - rho) / (ceiling - high)   if high < rho < ceiling
        reward = 0                                   otherwise, and when |s| = 0

    The defaults (`low=2`, `high=3`, `floor=1`, `ceiling=5`) target an expansion two to three times as long as the
    summary (the ~2-3x of MAGRPO's TL;DR task) and give nothing when the expansion is no longer than the summary.
    The authors' released TL;DR reward uses a looser band on character counts: full reward in [1.6, 3.2], ramps to
    0 at 1.1 and 5.0 (`LengthRatioReward(1.6, 3.2, 1.1, 5.0)` on words is the closest match).

    Args:
        low (`float`): The lower end of the target range of rho.
        high (`float`): The upper end of the target range of rho.
        floor (`float`): Where the lower ramp reaches 0 (`floor <= low`).
        ceiling (`float`): Where the upper ramp reaches 0 (`high <= ceiling`).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, low: float = 2.0, high: float = 3.0, floor: float = 1.0, ceiling: float = 5.0) -> None:
        if not 0 <= floor <= low <= high <= ceiling:
            raise ValueError(f"LengthRatioReward needs 0 <= floor <= low <= high <= ceiling, got "
                             f"{(floor, low, high, ceiling)}.")
        self.name = "length_ratio"
        self.low, self.high, self.floor, self.ceiling = float(low), float(high), float(floor), float(ceiling)

    def ratio_score(self, ratio: float) -> float:
        """The reward of one length ratio rho (see the class docstring)."""
        if self.low <= ratio <= self.high:
            return 1.0
        if self.floor < ratio < self.low:
            return (ratio - self.floor) / (self.low - self.floor)
        if self.high < ratio < self.ceiling:
            return (self.ceiling - ratio) / (self.ceiling - self.high)
        return 0.0

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The ratio score of each joint action (see the class docstring)."""
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
        scores = []
        for short, detailed in zip(team[0], team[1]):
            n_short = len(words(short))
            scores.append(self.ratio_score(len(words(detailed)) / n_short) if n_short else 0.0)
        return scores


class VocabularyRatioReward:
    """The detailed summary's vocabulary richer than the short one's: the ratio of their distinct content words.

    With U(y) the set of distinct [`content_words`] of y (`content_only=True`, the default; all [`words`] with
    `content_only=False`) and v = |U(d)| / |U(s)|:

        reward = 1                             if v >= full
        reward = (v - floor) / (full - floor)  if floor < v < full
        reward = 0                             otherwise, and when |U(s)| < min_distinct

    The defaults (`floor=1.3`, `full=2.0`) are the authors' released TL;DR reward's (its level 3). An expansion that
    repeats the summary's words scores 0 however long it is; one that explains with new words scores 1. A summary
    with fewer than `min_distinct` distinct content words scores 0 whatever its partner writes: before issue 55 the
    ratio counted every word and had no minimum, so a "summary" of one repeated word ("cat cat cat cat") made any
    partner's ratio large and earned the full term (`content_only=False, min_distinct=1` is that old term).

    Args:
        floor (`float`): Where the ramp starts (reward 0 at or below it).
        full (`float`): The ratio from which the reward is 1 (`floor < full`).
        content_only (`bool`): Count only content words (stemmed, stopwords left out).
        min_distinct (`int`): The fewest distinct words the summary needs for the ratio to count.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self, floor: float = 1.3, full: float = 2.0, content_only: bool = True, min_distinct: int = 3
    ) -> None:
        if not 0 <= floor < full:
            raise ValueError(f"VocabularyRatioReward needs 0 <= floor < full, got floor={floor}, full={full}.")
        if min_distinct < 1:
            raise ValueError(f"VocabularyRatioReward: `min_distinct` must be >= 1, got {min_distinct}.")
        self.name = "vocabulary_ratio"
        self.floor, self.full = float(floor), float(full)
        self.content_only = content_only
        self.min_distinct = int(min_distinct)

    def ratio_score(self, ratio: float) -> float:
        """The reward of one distinct-word ratio v (see the class docstring)."""
        if ratio >= self.full:
            return 1.0
        if ratio > self.floor:
            return (ratio - self.floor) / (self.full - self.floor)
        return 0.0

    def distinct(self, text: str) -> int:
        """|U(text)|: the number of distinct (content) words of `text`."""
        return len(set(content_words(text) if self.content_only else words(text)))

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The vocabulary score of each joint action (see the class docstring)."""
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
        scores = []
        for short, detailed in zip(team[0], team[1]):
            n_short = self.distinct(short)
            scores.append(self.ratio_score(self.distinct(detailed) / n_short) if n_short >= self.min_distinct
                          else 0.0)
        return scores


class LexicalDiversityReward:
    """Type-token ratio of the agents' texts: rewards varied wording, punishes repetition loops.

    With TTR(y) = (number of distinct words of y) / |y|, set to 0 when |y| < `min_words` (a one-word answer would
    otherwise score 1):

        reward = mean over agents a of TTR(y_a)                       (relative_to_source=False)
        reward = mean over agents a of TTR(y_a) - TTR(x)              (relative_to_source=True; x the source text)

    TTR falls as a text grows (words repeat), so this term alone favours short texts; [`LengthRangeReward`] and
    [`LengthRatioReward`] hold the lengths. Comparing with the source removes the writer's baseline vocabulary.

    Args:
        min_words (`int`): Texts with fewer words get a TTR of 0.
        relative_to_source (`bool`): Subtract the source text's TTR (from `text_column`).
        text_column (`str`): The dataset column holding the source text (with `relative_to_source`).
        agents (`Sequence[int]`, *optional*): Which agents' texts count (default: all).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self,
        min_words: int = 5,
        relative_to_source: bool = False,
        text_column: str = "text",
        agents: Sequence[int] | None = None,
    ) -> None:
        self.name = "lexical_diversity"
        self.min_words = min_words
        self.relative_to_source = relative_to_source
        self.text_column = text_column
        self.agents = None if agents is None else list(agents)
        if self.agents is not None and not self.agents:
            raise ValueError("LexicalDiversityReward: `agents` must name at least one agent.")

    def ttr(self, text: str) -> float:
        """TTR of an agent's text, 0 below `min_words` words."""
        tokens = words(text)
        if not tokens or len(tokens) < self.min_words:
            return 0.0
        return len(set(tokens)) / len(tokens)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The diversity score of each joint action (see the class docstring)."""
        needed = 1 if self.agents is None else max(self.agents) + 1
        team = _team_texts(type(self).__name__, completions, kwargs, needed)
        agents = self.agents if self.agents is not None else list(range(len(team)))
        sources = (column(kwargs, self.text_column, type(self).__name__, len(completions))
                   if self.relative_to_source else [None] * len(completions))
        scores: list[float | None] = []
        for j, source in enumerate(sources):
            mean_ttr = sum(self.ttr(team[a][j]) for a in agents) / len(agents)
            if not self.relative_to_source:
                scores.append(mean_ttr)
            elif is_missing(source):
                scores.append(None)
            else:
                scores.append(mean_ttr - type_token_ratio(str(source)))
        return scores


class TransitionWordsReward:
    """Transition words and phrases in the detailed summary: does it read as connected prose?

    With k the number of distinct entries of `phrases` that occur, as whole words, in agent `agent`'s text:

        reward = min(1, k / saturation)        (saturation given; default 3)
        reward = k / len(phrases)              (saturation=None: the fraction of the list present)

    Matching is on [`words`], so "so" does not match inside "also" and "for example," matches "for example".

    Args:
        phrases (`Sequence[str]`): The transition words and phrases (default [`TRANSITION_PHRASES`], 29 entries).
        saturation (`int`, *optional*): How many distinct transitions earn the full reward.
        agent (`int`): Whose text is checked (1: the detailed summary).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self, phrases: Sequence[str] = TRANSITION_PHRASES, saturation: int | None = 3, agent: int = 1
    ) -> None:
        phrases = list(dict.fromkeys(" ".join(words(p)) for p in phrases))
        if not phrases or any(not p for p in phrases):
            raise ValueError("TransitionWordsReward needs a non-empty list of phrases made of words.")
        if saturation is not None and saturation < 1:
            raise ValueError(f"TransitionWordsReward: `saturation` must be >= 1 or None, got {saturation}.")
        self.name = "transition_words"
        self.phrases = phrases
        self.saturation = saturation
        self.agent = agent

    def found(self, text: str) -> list[str]:
        """The entries of `phrases` that occur in `text`, as whole words."""
        padded = f" {' '.join(words(text))} "
        return [p for p in self.phrases if _contains_phrase(padded, p)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The transition score of each joint action (see the class docstring)."""
        team = _team_texts(type(self).__name__, completions, kwargs, self.agent + 1)
        scores = []
        for text in team[self.agent]:
            k = len(self.found(text))
            scores.append(k / len(self.phrases) if self.saturation is None else min(1.0, k / self.saturation))
        return scores


class StyleConsistencyReward:
    """Vocabulary overlap of the two texts: do the summary and its expansion talk about the same things?

    With V_a the set of content words of agent a's text (its [`words`] minus [`STOPWORDS`]), s = agent 0, d = 1:

        o = |V_s & V_d| / |V_s | V_d|      (mode="jaccard", the paper's measure; 0 if both are empty)
        o = |V_s & V_d| / |V_s|            (mode="coverage": the share of the summary's content words that the
                                            expansion uses; 0 if V_s is empty)
        reward = o                        (saturation=None, the default)
        reward = min(1, o / saturation)   (saturation given; the authors' TL;DR reward saturates Jaccard at 0.03)

    Jaccard is at most |V_s| / |V_d|, so with the target length ratio of 2-3 it rarely exceeds ~0.5; coverage is
    not bounded by the length ratio and does not penalize the expansion for adding new words.

    Args:
        mode (`"jaccard"` or `"coverage"`): The overlap measure.
        stopwords (`Iterable[str]`): Words left out of the vocabularies.
        saturation (`float`, *optional*): The overlap that earns the full reward.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, mode: Literal["jaccard", "coverage"] = "jaccard",
                 stopwords: Sequence[str] | frozenset[str] = STOPWORDS, saturation: float | None = None) -> None:
        if mode not in ("jaccard", "coverage"):
            raise ValueError(f"StyleConsistencyReward: `mode` must be 'jaccard' or 'coverage', got {mode!r}.")
        if saturation is not None and not 0 < saturation <= 1:
            raise ValueError(f"StyleConsistencyReward: `saturation` must be in (0, 1] or None, got {saturation}.")
        self.name = "style_consistency"
        self.mode = mode
        self.stopwords = frozenset(stopwords)
        self.saturation = saturation

    def vocabulary(self, text: str) -> set[str]:
        """The content words of `text`."""
        return set(words(text)) - self.stopwords

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The overlap score of each joint action (see the class docstring)."""
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
        scores = []
        for short, detailed in zip(team[0], team[1]):
            v_s, v_d = self.vocabulary(short), self.vocabulary(detailed)
            denominator = len(v_s | v_d) if self.mode == "jaccard" else len(v_s)
            overlap = len(v_s & v_d) / denominator if denominator else 0.0
            scores.append(overlap if self.saturation is None else min(1.0, overlap / self.saturation))
        return scores


class SourceRelevanceReward:
    """Is each text about the source, and written rather than copied? The gate of [`WritingTeamReward`].

    No other writing term reads the source, so before this gate a pair of fluent texts about anything scored
    3.1-3.5 of 4.0. With X the set of [`content_words`] of the source (the `source_column`, plus the
    `reference_column` when given) and, for agent a's text y_a (|y_a| its number of [`words`]; C(y) the distinct
    content words of y):

        on_topic_a = min(1, |C(y_a) & X| / |C(y_a)| / on_topic_full)     (0 if C(y_a) is empty)
        copied_a   = the share of y_a's word `copy_ngram`-grams that occur in the source, 0 if |y_a| < n
        copy_a     = 1 if copied_a <= copy_free, else (1 - copied_a) / (1 - copy_free)
        prose_a    = min(1, (share of y_a's words that are stopwords) / prose_full)
        s_a        = on_topic_a                                  if |y_a| < paragraph_words
        s_a        = on_topic_a * copy_a * prose_a               otherwise
        c          = |(union over agents of C(y_a)) & X| / min(|X|, coverage_cap)   (the team's coverage, <= 1)
        coverage   = clip((c - coverage_floor) / (coverage_full - coverage_floor), 0, 1)
        reward     = min(coverage, min over the agents of s_a)   (None where the source cell is missing)

    So a pair that is not about this source fails: its words are not the source's (on-topic) or it covers few of
    them (coverage; a fluent pair about another docstring shares generic words such as "returns" and "string" but
    covers at most ~12% of this one, an honest pair 40-70%; a long source counts as `coverage_cap` words, so that a
    paragraph of 30-60 words can cover it). A paragraph that copies the source (more than half its
    6-grams, by default; a verbatim copy scores 0) or one of bare keywords (no function words: not prose) fails too,
    and the team fails with its weakest text. A short summary is only checked for topic: an extractive or
    telegraphic one ("Decode Base64 bytes.") is a fair summary. These are word statistics: they do not judge grammar
    or truth, and a keyword salad with function words sprinkled in passes `prose_a`.

    Args:
        source_column (`str`): The dataset column holding the source text.
        reference_column (`str`, *optional*): A column whose words count as the source's too (e.g. a reference
            summary).
        on_topic_full (`float`): The share of a text's content words found in the source that earns the full
            on-topic score.
        coverage_floor (`float`): The team's coverage of the source's content words at or below which it fails.
        coverage_full (`float`): The coverage from which the gate is not reduced by coverage.
        coverage_cap (`int`): The most content words of the source that the coverage counts as its whole.
        paragraph_words (`int`): Texts with at least this many words are also checked for copying and prose.
        copy_ngram (`int`): The n of the copied n-grams.
        copy_free (`float`): The copied share up to which copying costs nothing.
        prose_full (`float`): The share of stopwords that earns the full prose score.
        agents (`Sequence[int]`, *optional*): Whose texts are checked (default: every agent's).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self,
        source_column: str = "text",
        reference_column: str | None = None,
        on_topic_full: float = 0.35,
        coverage_floor: float = 0.1,
        coverage_full: float = 0.3,
        coverage_cap: int = 30,
        paragraph_words: int = 20,
        copy_ngram: int = 6,
        copy_free: float = 0.5,
        prose_full: float = 0.2,
        agents: Sequence[int] | None = None,
    ) -> None:
        if not 0 < on_topic_full <= 1:
            raise ValueError(f"SourceRelevanceReward: `on_topic_full` must be in (0, 1], got {on_topic_full}.")
        if not 0 <= coverage_floor < coverage_full <= 1:
            raise ValueError(f"SourceRelevanceReward needs 0 <= coverage_floor < coverage_full <= 1, got "
                             f"{(coverage_floor, coverage_full)}.")
        if not 0 <= copy_free < 1:
            raise ValueError(f"SourceRelevanceReward: `copy_free` must be in [0, 1), got {copy_free}.")
        if not 0 < prose_full <= 1:
            raise ValueError(f"SourceRelevanceReward: `prose_full` must be in (0, 1], got {prose_full}.")
        if copy_ngram < 1:
            raise ValueError(f"SourceRelevanceReward: `copy_ngram` must be >= 1, got {copy_ngram}.")
        self.name = "source_relevance"
        self.source_column = source_column
        self.reference_column = reference_column
        self.on_topic_full = float(on_topic_full)
        if coverage_cap < 1:
            raise ValueError(f"SourceRelevanceReward: `coverage_cap` must be >= 1, got {coverage_cap}.")
        self.coverage_floor, self.coverage_full = float(coverage_floor), float(coverage_full)
        self.coverage_cap = int(coverage_cap)
        self.paragraph_words = int(paragraph_words)
        self.copy_ngram = int(copy_ngram)
        self.copy_free = float(copy_free)
        self.prose_full = float(prose_full)
        self.agents = None if agents is None else list(agents)
        if self.agents is not None and not self.agents:
            raise ValueError("SourceRelevanceReward: `agents` must name at least one agent.")

    def parts(self, text: str, source: str) -> dict[str, float]:
        """The statistics of one text against one source: `on_topic`, `copied`, `copy`, `prose` and the agent's
        score `score` (see the class docstring)."""
        tokens = words(text)
        vocabulary = set(content_words(text))
        source_vocabulary = set(content_words(source))
        on_topic = (min(1.0, len(vocabulary & source_vocabulary) / len(vocabulary) / self.on_topic_full)
                    if vocabulary else 0.0)
        grams = _ngrams(tokens, self.copy_ngram)
        source_grams = set(_ngrams(words(source), self.copy_ngram))
        copied = sum(g in source_grams for g in grams) / len(grams) if grams else 0.0
        copy = 1.0 if copied <= self.copy_free else (1.0 - copied) / (1.0 - self.copy_free)
        function_share = sum(w in STOPWORDS for w in tokens) / len(tokens) if tokens else 0.0
        prose = min(1.0, function_share / self.prose_full)
        paragraph = len(tokens) >= self.paragraph_words
        score = on_topic * copy * prose if paragraph else on_topic
        return {"on_topic": on_topic, "copied": copied, "copy": copy, "prose": prose, "score": score}

    def coverage(self, texts: Sequence[str], source: str) -> float:
        """The team's coverage factor: `clip((c - coverage_floor) / (coverage_full - coverage_floor), 0, 1)`, with c
        the number of the source's distinct content words that occur in any of `texts` over that number of the
        source's, at most `coverage_cap`, and 1 at most."""
        source_vocabulary = set(content_words(source))
        if not source_vocabulary:
            return 1.0  # a source without content words cannot be covered or missed
        used = set().union(*(content_words(t) for t in texts)) if texts else set()
        share = min(1.0, len(used & source_vocabulary) / min(len(source_vocabulary), self.coverage_cap))
        return min(1.0, max(0.0, (share - self.coverage_floor) / (self.coverage_full - self.coverage_floor)))

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The gate value of each joint action, in [0, 1] (see the class docstring)."""
        owner = type(self).__name__
        needed = 1 if self.agents is None else max(self.agents) + 1
        team = _team_texts(owner, completions, kwargs, needed)
        agents = self.agents if self.agents is not None else list(range(len(team)))
        sources = column(kwargs, self.source_column, owner, len(completions))
        references = (column(kwargs, self.reference_column, owner, len(completions))
                      if self.reference_column is not None else [None] * len(completions))
        scores: list[float | None] = []
        for j, (source, reference) in enumerate(zip(sources, references)):
            if is_missing(source):
                scores.append(None)
                continue
            full_source = str(source) if is_missing(reference) else f"{source}\n{reference}"
            texts = [team[a][j] for a in agents]
            agent_scores = [self.parts(t, full_source)["score"] for t in texts]
            scores.append(min(self.coverage(texts, full_source), *agent_scores))
        return scores


class GatedTerm:
    """A team reward term multiplied by a gate in [0, 1]: `gate(x) * term(x)`; where the term gives None the result
    is None, where the gate gives None the term is left as it is.

    [`WritingTeamReward`] wraps each of its terms in one, so that passing `team_reward.funcs` and
    `team_reward.weights` to a trainer (to log every term) still sums to the gated team reward.

    Args:
        term (`Callable`): The team reward function to gate.
        gate (`Callable`): A team reward function with values in [0, 1] (e.g. [`SourceRelevanceReward`]).
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(self, term: Any, gate: Any) -> None:
        self.term, self.gate = term, gate
        self.name = getattr(term, "name", None) or getattr(term, "__name__", None) or type(term).__name__

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """`gate * term` for each joint action."""
        values = self.term(prompts=prompts, completions=completions, **kwargs)
        gates = self.gate(prompts=prompts, completions=completions, **kwargs)
        return [None if v is None else float(v) if g is None else float(g) * float(v) for v, g in zip(values, gates)]


DEFAULT_WRITING_WEIGHTS: dict[str, float] = {
    "length_range": 1.0,
    "length_ratio": 1.0,
    "vocabulary_ratio": 0.5,
    "lexical_diversity": 0.5,
    "transition_words": 0.5,
    "style_consistency": 0.5,
    "rouge_l": 1.0,
}
"""The default weight of each term of [`WritingTeamReward`], by term name (maximum total 5.0; 4.0 without ROUGE-L)."""


_DEFAULT_GATE: Any = object()  # `gate` not given: a SourceRelevanceReward with the default terms, none with others


class WritingTeamReward:
    """The team reward of [`CooperativeWritingEnv`]: a weighted sum of the writing terms, gated by the source.

        reward = g * sum over terms i with a value of w_i * r_i      (None when no term has a value)

    where g in [0, 1] is the `gate` ([`SourceRelevanceReward`] by default: both texts about the row's source, the
    longer one written rather than copied; g = 1 without a gate). A term returns `None` where it does not apply
    (ROUGE-L on a row without a reference), and is then left out, like trl-marl's `TeamReward` leaves out `None`s.
    The default terms are [`LengthRangeReward`], [`LengthRatioReward`], [`VocabularyRatioReward`] (distinct content
    words, at least 3 in the summary), [`LexicalDiversityReward`], [`TransitionWordsReward`],
    [`StyleConsistencyReward`] and, unless `reference_column=None`, ROUGE-L of agent 0's short summary against the
    reference (`RougeLReward(reference_column, agent_index=0)`), weighted by [`DEFAULT_WRITING_WEIGHTS`].

    Before issue 55 (Dec 2026) no term read the source: two fluent texts about anything scored up to 3.5 of 4.0,
    above the trained team's 2.55. [`WritingTeamReward.legacy`] rebuilds that reward, to reproduce the records
    made with it.

    To log each term separately, pass the terms themselves to the trainer instead:
    `reward_funcs=team_reward.funcs, reward_weights=team_reward.weights` (same total: each of `funcs` is its term
    times the gate, a [`GatedTerm`]; the ungated terms are `terms`, the gate `gate`).

    Args:
        terms (`Sequence[Callable]`, *optional*): The reward functions to combine (default: the terms above).
        weights (`Mapping[str, float]` or `Sequence[float]`, *optional*): One weight per term, or weights by term
            `name` (terms not named get [`DEFAULT_WRITING_WEIGHTS`]' weight, or 1.0).
        reference_column (`str`, *optional*): The reference column of the default ROUGE-L term; `None` for
            datasets without references.
        gate (`Callable`, *optional*): A team reward function in [0, 1] that multiplies every term; `None` for
            none. Not given: `SourceRelevanceReward()` (the source in the column `"text"`) with the default terms,
            none with terms of your own.
    """

    reward_kind = "team"  # a function of the joint action: one call per joint action in every trainer

    def __init__(
        self,
        terms: Sequence[Any] | None = None,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        reference_column: str | None = "reference",
        gate: Any = _DEFAULT_GATE,
    ) -> None:
        # the column the default ROUGE-L term reads, checked up front for a clearer error
        self.reference_column = reference_column if terms is None else None
        if gate is _DEFAULT_GATE:
            gate = SourceRelevanceReward() if terms is None else None
        if terms is None:
            terms = [LengthRangeReward(), LengthRatioReward(), VocabularyRatioReward(), LexicalDiversityReward(),
                     TransitionWordsReward(), StyleConsistencyReward()]
            if reference_column is not None:
                from ..rewards.rouge import RougeLReward

                terms.append(RougeLReward(reference_column=reference_column, agent_index=0))
        if not terms:
            raise ValueError("WritingTeamReward needs at least one term.")
        self.name = "writing_team"
        self.gate = gate
        self.terms = list(terms)
        self.funcs = [GatedTerm(t, gate) for t in self.terms] if gate is not None else list(self.terms)
        self.names = [getattr(f, "name", None) or getattr(f, "__name__", None) or type(f).__name__
                      for f in self.terms]
        if weights is None or isinstance(weights, Mapping):
            given = dict(weights or {})
            unknown = sorted(set(given) - set(self.names))
            if unknown:
                raise ValueError(
                    f"WritingTeamReward: weights for unknown terms {unknown}; the terms are {self.names}."
                )
            self.weights = [float(given.get(n, DEFAULT_WRITING_WEIGHTS.get(n, 1.0))) for n in self.names]
        else:
            if len(weights) != len(self.funcs):
                raise ValueError(f"WritingTeamReward: {len(weights)} weights for {len(self.funcs)} terms.")
            self.weights = [float(w) for w in weights]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """The weighted sum of the terms for each joint action (see the class docstring)."""
        if self.reference_column is not None and self.reference_column not in kwargs:
            raise KeyError(
                f"WritingTeamReward scores ROUGE-L against the dataset column {self.reference_column!r}, which the "
                "reward function did not receive. Add it, or build WritingTeamReward(reference_column=None) for a "
                "dataset without references."
            )
        # every term, ROUGE-L included, reads the answers without a chat model's label, markdown and quotes
        completions = [writing_text(c) for c in completions]
        if kwargs.get("agent_completions") is not None:
            kwargs = {**kwargs, "agent_completions": [[writing_text(c) for c in agent]
                                                      for agent in kwargs["agent_completions"]]}
        totals: list[float | None] = [None] * len(completions)
        for func, weight in zip(self.funcs, self.weights):
            values = func(prompts=prompts, completions=completions, **kwargs)
            for j, value in enumerate(values):
                if value is not None:
                    totals[j] = (totals[j] or 0.0) + weight * float(value)
        return totals

    @classmethod
    def legacy(cls, reference_column: str | None = "reference") -> WritingTeamReward:
        """The writing reward as it was before issue 55 (Dec 2026): no source gate, and the distinct-word ratio on
        every word with no minimum. Reproduces the records made with it (docs/real_model.md); do not train on it:
        off-topic pairs and a one-word summary game it."""
        terms: list[Any] = [LengthRangeReward(), LengthRatioReward(),
                            VocabularyRatioReward(content_only=False, min_distinct=1), LexicalDiversityReward(),
                            TransitionWordsReward(), StyleConsistencyReward()]
        if reference_column is not None:
            from ..rewards.rouge import RougeLReward

            terms.append(RougeLReward(reference_column=reference_column, agent_index=0))
        reward = cls(terms=terms, gate=None)
        reward.reference_column = reference_column
        return reward

    def reward_funcs(self) -> list[Any]:
        """The terms as separate reward functions (pass them with `reward_weights()` to a trainer to log each)."""
        return list(self.funcs)

    def reward_weights(self) -> list[float]:
        """The weights matching [`~WritingTeamReward.reward_funcs`]."""
        return list(self.weights)


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
                if any((p in lowered) if self.substring else _contains_phrase(padded, p) for p in phrases)]

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
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
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
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
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
        gate: Any = _DEFAULT_GATE,
        short_max: int = SHORT_CLASS_MAX_WORDS,
        summary_range: tuple[int, int] = (5, SUMMARY_MAX_WORDS),
        paragraph_range: tuple[int, int] = PARAGRAPH_WORDS,
        jaccard_saturation: float | None = 0.03,
    ) -> None:
        if not summary_range[1] <= short_max < paragraph_range[0]:
            raise ValueError(f"SymmetricWritingTeamReward needs summary max <= short_max < paragraph min, got "
                             f"summary_range={summary_range}, short_max={short_max}, "
                             f"paragraph_range={paragraph_range}.")
        terms = [LengthRangeReward(ranges=(summary_range, paragraph_range)), LengthRatioReward(),
                 VocabularyRatioReward(), LexicalDiversityReward(), TransitionWordsReward(),
                 StyleConsistencyReward(saturation=jaccard_saturation)]
        wrapped = [ByLengthRoles(t, zero_when_same_class=t.name in STRUCTURE_TERMS, short_max=short_max)
                   for t in terms]
        super().__init__(terms=wrapped, weights=weights,
                         gate=SourceRelevanceReward() if gate is _DEFAULT_GATE else gate)
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
        team = _team_texts(type(self).__name__, completions, kwargs, self.agent + 1)
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
        team = _team_texts(type(self).__name__, completions, kwargs, 2)
        return [float(length_class(a, self.short_max) == length_class(b, self.short_max))
                for a, b in zip(team[0], team[1])]


def length_class_metrics(short_max: int = SHORT_CLASS_MAX_WORDS) -> dict[str, Any]:
    """The cooperation metrics of [`SymmetricWritingEnv`] by name: `agent_0_short`, `agent_1_short` (which writer
    took the summary) and `same_length_class` (a collision)."""
    metrics = [WroteShortText(0, short_max), WroteShortText(1, short_max), SameLengthClass(short_max)]
    return {m.name: m for m in metrics}
