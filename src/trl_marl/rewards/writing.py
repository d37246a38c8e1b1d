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

**The source gate** (issue 55). None of these terms reads the source, so text unrelated to it scored like a good
pair; [`WritingTeamReward`] multiplies every default term by
[`~trl_marl.rewards.writing_source.SourceRelevanceReward`] (both texts about the row's source, the pair covering it,
the longer text written rather than copied), and [`VocabularyRatioReward`] counts distinct content words with a
minimum, so a one-word summary no longer games it. `trl_marl.rewards.writing_source` holds the gate and the word
helpers, `trl_marl.rewards.writing_variants` the authors' gated TL;DR reward ([`TldrCombinedReward`]) and the reward
of the symmetric-roles task ([`SymmetricWritingTeamReward`]).

Words, everywhere in this module, are the lower-cased runs of letters, digits and underscores, apostrophes inside
a word kept ([`words`]): `words("Don't stop, it's FINE.") == ["don't", "stop", "it's", "fine"]`. |x| below is the
number of words of x.
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..envs.writing import writing_text
from ..utils.columns import column, is_missing
from ..utils.text import words
from .writing_source import STOPWORDS, GatedTerm, SourceRelevanceReward, content_words, team_texts

# ----------------------------------------------------------------------------------------------------------------
# Text statistics
# ----------------------------------------------------------------------------------------------------------------

def type_token_ratio(text: str) -> float:
    """Type-token ratio: the number of distinct words over the number of words (0.0 for a text without words)."""
    tokens = words(text)
    return len(set(tokens)) / len(tokens) if tokens else 0.0


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


def contains_phrase(padded_words: str, phrase: str) -> bool:
    """Whether `phrase` occurs as whole words in `padded_words` (`" " + " ".join(words) + " "`)."""
    return f" {' '.join(words(phrase))} " in padded_words


# ----------------------------------------------------------------------------------------------------------------
# Team reward terms
# ----------------------------------------------------------------------------------------------------------------


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
        team = team_texts(type(self).__name__, completions, kwargs, len(self.ranges))
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
        team = team_texts(type(self).__name__, completions, kwargs, 2)
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
        team = team_texts(type(self).__name__, completions, kwargs, 2)
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
        team = team_texts(type(self).__name__, completions, kwargs, needed)
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
        return [p for p in self.phrases if contains_phrase(padded, p)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """The transition score of each joint action (see the class docstring)."""
        team = team_texts(type(self).__name__, completions, kwargs, self.agent + 1)
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
        team = team_texts(type(self).__name__, completions, kwargs, 2)
        scores = []
        for short, detailed in zip(team[0], team[1]):
            v_s, v_d = self.vocabulary(short), self.vocabulary(detailed)
            denominator = len(v_s | v_d) if self.mode == "jaccard" else len(v_s)
            overlap = len(v_s & v_d) / denominator if denominator else 0.0
            scores.append(overlap if self.saturation is None else min(1.0, overlap / self.saturation))
        return scores


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


DEFAULT_GATE: Any = object()
"""The `gate` of [`WritingTeamReward`] when none is given: a `SourceRelevanceReward` with the default terms, none with
terms of your own."""


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
        gate: Any = DEFAULT_GATE,
    ) -> None:
        # the column the default ROUGE-L term reads, checked up front for a clearer error
        self.reference_column = reference_column if terms is None else None
        if gate is DEFAULT_GATE:
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


