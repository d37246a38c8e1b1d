"""Two-agent cooperative writing, the writing task of MAGRPO (Liu et al., arXiv 2508.04652).

Two agents read the same source text (a Reddit post of TL;DR, an abstract, ...). Agent 0 writes a *short summary*
(one or two sentences), agent 1 a *detailed summary* that expands on it. Neither sees the other's text at turn 1
(decentralized execution); the team is paid one centralized reward for the pair, so the agents must agree on who
writes what: different lengths (a length ratio), the same facts and vocabulary, and a readable expansion.

- [`CooperativeWritingEnv`]: the prompts (fixed templates, below), the length feedback between turns.
- Team reward terms, each a TRL reward function of the joint action (agent 0's text `s`, agent 1's text `d`):
  [`LengthRangeReward`], [`LengthRatioReward`], [`LexicalDiversityReward`], [`TransitionWordsReward`],
  [`StyleConsistencyReward`], and ROUGE-L against a reference ([`~trl_marl.rewards.RougeLReward`]);
  [`WritingTeamReward`] is their weighted sum.
- [`load_tldr`]: `trl-lib/tldr` as `text` (the post) and `reference` (the author's TL;DR).

Words, everywhere in this module, are the lower-cased runs of letters, digits and underscores, apostrophes inside
a word kept ([`words`]): `words("Don't stop, it's FINE.") == ["don't", "stop", "it's", "fine"]`. |x| below is the
number of words of x.

Prompt templates (turn 1; `{text}` is the row's text with surrounding whitespace removed):

```text
<SUMMARY_INSTRUCTION or DETAILED_INSTRUCTION>

Text:
{text}

<"Short summary:" or "Detailed summary:">
```

Later turns add the agent's own previous text, its partner's, and the environment's feedback
([`REVISION_TEMPLATE`]).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..utils.columns import column, is_missing
from ..utils.text import completion_text
from .base import MultiAgentEnv, Prompt, Transcript

if TYPE_CHECKING:
    import datasets

# ----------------------------------------------------------------------------------------------------------------
# Text statistics
# ----------------------------------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+(?:'\w+)*")


def words(text: str) -> list[str]:
    """The lower-cased words of `text`: runs of letters, digits and `_`, with apostrophes inside a word kept."""
    return _WORD.findall(text.lower())


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

TRANSITION_PHRASES: tuple[str, ...] = (
    # addition
    "additionally", "also", "furthermore", "in addition", "moreover",
    # example
    "for example", "for instance", "in particular", "specifically",
    # cause and effect
    "as a result", "because", "consequently", "therefore", "thus",
    # contrast and concession
    "although", "however", "in contrast", "instead", "nevertheless", "on the other hand",
    # sequence and time
    "afterwards", "eventually", "finally", "first", "meanwhile", "next",
    # summary
    "in short", "in summary", "overall",
)  # fmt: skip
"""The transition words and phrases [`TransitionWordsReward`] looks for (29; whole-word matches)."""


def _contains_phrase(padded_words: str, phrase: str) -> bool:
    """Whether `phrase` occurs as whole words in `padded_words` (`" " + " ".join(words) + " "`)."""
    return f" {' '.join(words(phrase))} " in padded_words


# ----------------------------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------------------------

SUMMARY_INSTRUCTION = (
    "Summarize the text below in one or two sentences. Keep only the main point. "
    "A partner writes a longer, detailed summary of the same text."
)
"""Agent 0's task: the short summary."""

DETAILED_INSTRUCTION = (
    "Write a detailed summary of the text below in one paragraph, two to three times as long as a short summary. "
    "Explain the main point and the important details, and connect your sentences with transition words. "
    "A partner writes a short summary of the same text."
)
"""Agent 1's task: the detailed summary (the expansion)."""

FIRST_TURN_TEMPLATE = "{instruction}\n\nText:\n{text}\n\n{cue}:"
"""Turn 1: `instruction` is [`SUMMARY_INSTRUCTION`] or [`DETAILED_INSTRUCTION`], `cue` "Short summary" or
"Detailed summary"."""

REVISION_TEMPLATE = (
    "{instruction}\n\nText:\n{text}\n\nYour previous {role}:\n{own}\n\nYour partner's {partner_role}:\n{partner}"
    "\n\n{feedback}Revise your {role} so that the two fit together. Write only the revised {role}.\n\n{cue}:"
)
"""Turns 2+: `role`/`partner_role` are "short summary"/"detailed summary", `own`/`partner` the two agents' texts of
the previous turn (stripped), `feedback` `"Feedback: <the environment's feedback>\\n\\n"` or empty."""

_ROLES = ("short summary", "detailed summary")
_CUES = ("Short summary", "Detailed summary")
_INSTRUCTIONS = (SUMMARY_INSTRUCTION, DETAILED_INSTRUCTION)


class CooperativeWritingEnv(MultiAgentEnv):
    """MAGRPO's cooperative writing task: agent 0 summarizes, agent 1 writes the detailed version.

    Turn 1: each agent sees only its own instruction and the source text ([`FIRST_TURN_TEMPLATE`]). With
    `num_turns > 1`, each agent then sees its own previous text, its partner's, and (with `length_feedback`) the
    length check of the previous turn, and revises its text ([`REVISION_TEMPLATE`]). The length check reports the
    word counts and the ratio |d| / |s| against `ratio_range`, e.g. "The short summary has 10 words and the
    detailed summary has 15 words: 1.50 times as long (target: 2 to 3 times). Make the detailed summary longer or the
    short summary shorter."

    Args:
        num_turns (`int`): Number of turns (1: write once; more: write, then revise).
        text_column (`str`): The dataset column holding the source text.
        chat (`bool`): Return chat messages (`[{"role": "user", "content": ...}]`) instead of plain strings.
        system_prompt (`str`, *optional*): With `chat=True`, a system message put before the user message.
        length_feedback (`bool`): Give the length check as feedback between turns.
        ratio_range (`tuple[float, float]`): The target range of |d| / |s| named in the feedback (keep it equal to
            [`LengthRatioReward`]'s `low`/`high`).

    Example:

    ```python
    env = CooperativeWritingEnv(num_turns=2)
    env.agent_prompt({"text": "My cat ate my homework."}, 0, Transcript())
    ```
    """

    def __init__(
        self,
        num_turns: int = 1,
        text_column: str = "text",
        chat: bool = False,
        system_prompt: str | None = None,
        length_feedback: bool = True,
        ratio_range: tuple[float, float] = (2.0, 3.0),
    ) -> None:
        super().__init__(num_agents=2, num_turns=num_turns)
        if not 0 < ratio_range[0] <= ratio_range[1]:
            raise ValueError(f"`ratio_range` must satisfy 0 < low <= high, got {ratio_range}.")
        self.text_column = text_column
        self.chat = chat
        self.system_prompt = system_prompt
        self.length_feedback = length_feedback
        self.ratio_range = (float(ratio_range[0]), float(ratio_range[1]))
        self.required_columns = (text_column,)

    def render(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> str:
        """The prompt text of agent `agent_index` at turn `len(transcript) + 1` (before wrapping it as chat).

        Raises:
            KeyError: `row` lacks the text column (the message names it).
            ValueError: The text column of `row` does not hold a string, or `agent_index` is not 0 or 1.
        """
        self.validate_row(row, where="the row")
        if not isinstance(row[self.text_column], str):
            raise ValueError(
                f"{type(self).__name__} needs text in the column {self.text_column!r}, but the row holds a "
                f"{type(row[self.text_column]).__name__} there."
            )
        if agent_index not in (0, 1):
            raise ValueError(f"{type(self).__name__} has agents 0 (short summary) and 1 (detailed summary), got "
                             f"{agent_index}.")
        fields = {
            "instruction": _INSTRUCTIONS[agent_index],
            "text": row[self.text_column].strip(),
            "cue": _CUES[agent_index],
        }
        if len(transcript) == 0:
            return FIRST_TURN_TEMPLATE.format(**fields)
        last = transcript[-1]
        feedback = last.feedback_for(agent_index)
        return REVISION_TEMPLATE.format(
            **fields,
            role=_ROLES[agent_index],
            partner_role=_ROLES[1 - agent_index],
            own=completion_text(last.responses[agent_index]).strip(),
            partner=completion_text(last.responses[1 - agent_index]).strip(),
            feedback=f"Feedback: {feedback}\n\n" if feedback else "",
        )

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index`: [`render`]'s text, as a string or as chat messages."""
        content = self.render(row, agent_index, transcript)
        if not self.chat:
            return content
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*messages, {"role": "user", "content": content}]

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str | None:
        """The length check of the last turn of `transcript` (the same text for both agents), or `None`."""
        if not self.length_feedback or len(transcript) == 0:
            return None
        short, detailed = (len(words(completion_text(r))) for r in transcript[-1].responses[:2])
        low, high = self.ratio_range
        target = f"target: {low:g} to {high:g} times"
        if short == 0:
            return (f"The short summary is empty and the detailed summary has {detailed} words ({target} as long as "
                    "the short summary). Write a short summary.")
        ratio = detailed / short
        if ratio < low:
            advice = "Make the detailed summary longer or the short summary shorter."
        elif ratio > high:
            advice = "Make the detailed summary shorter or the short summary longer."
        else:
            advice = "Keep these lengths."
        return (f"The short summary has {short} words and the detailed summary has {detailed} words: "
                f"{ratio:.2f} times as long ({target}). {advice}")


# ----------------------------------------------------------------------------------------------------------------
# Team reward terms
# ----------------------------------------------------------------------------------------------------------------


def _team_texts(owner: str, completions: Sequence[Any], kwargs: Mapping[str, Any], needed: int) -> list[list[str]]:
    """Every agent's texts of the joint actions (`[agent][joint action]`), at least `needed` agents."""
    agent_completions = kwargs.get("agent_completions")
    if agent_completions is None:
        if needed <= 1:
            return [[completion_text(c) for c in completions]]
        raise ValueError(
            f"{owner} is a team reward of CooperativeWritingEnv: it needs `agent_completions` (one list of "
            "completions per agent, passed by trl-marl's trainers) with agent 0's short summary and agent 1's "
            "detailed summary."
        )
    if len(agent_completions) < needed:
        raise ValueError(f"{owner} needs the texts of {needed} agents, got {len(agent_completions)}.")
    return [[completion_text(c) for c in agent] for agent in agent_completions]


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

        reward = |V_s & V_d| / |V_s | V_d|      (mode="jaccard", the paper's measure; 0 if both are empty)
        reward = |V_s & V_d| / |V_s|            (mode="coverage": the share of the summary's content words that the
                                                 expansion uses; 0 if V_s is empty)

    Jaccard is at most |V_s| / |V_d|, so with the target length ratio of 2-3 it rarely exceeds ~0.5; coverage is
    not bounded by the length ratio and does not penalize the expansion for adding new words.

    Args:
        mode (`"jaccard"` or `"coverage"`): The overlap measure.
        stopwords (`Iterable[str]`): Words left out of the vocabularies.
    """

    def __init__(self, mode: Literal["jaccard", "coverage"] = "jaccard",
                 stopwords: Sequence[str] | frozenset[str] = STOPWORDS) -> None:
        if mode not in ("jaccard", "coverage"):
            raise ValueError(f"StyleConsistencyReward: `mode` must be 'jaccard' or 'coverage', got {mode!r}.")
        self.name = "style_consistency"
        self.mode = mode
        self.stopwords = frozenset(stopwords)

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
            scores.append(len(v_s & v_d) / denominator if denominator else 0.0)
        return scores


DEFAULT_WRITING_WEIGHTS: dict[str, float] = {
    "length_range": 1.0,
    "length_ratio": 1.0,
    "lexical_diversity": 0.5,
    "transition_words": 0.5,
    "style_consistency": 0.5,
    "rouge_l": 1.0,
}
"""The default weight of each term of [`WritingTeamReward`], by term name (maximum total 4.5)."""


class WritingTeamReward:
    """The team reward of [`CooperativeWritingEnv`]: a weighted sum of the writing terms.

        reward = sum over terms i with a value of w_i * r_i      (None when no term has a value)

    A term returns `None` where it does not apply (ROUGE-L on a row without a reference), and is then left out,
    like trl-marl's `TeamReward` leaves out `None`s. The default terms are [`LengthRangeReward`],
    [`LengthRatioReward`], [`LexicalDiversityReward`], [`TransitionWordsReward`], [`StyleConsistencyReward`] and,
    unless `reference_column=None`, ROUGE-L of agent 0's short summary against the reference
    (`RougeLReward(reference_column, agent_index=0)`), weighted by [`DEFAULT_WRITING_WEIGHTS`].

    To log each term separately, pass the terms themselves to the trainer instead:
    `reward_funcs=team_reward.funcs, reward_weights=team_reward.weights` (same total).

    Args:
        terms (`Sequence[Callable]`, *optional*): The reward functions to combine (default: the terms above).
        weights (`Mapping[str, float]` or `Sequence[float]`, *optional*): One weight per term, or weights by term
            `name` (terms not named get [`DEFAULT_WRITING_WEIGHTS`]' weight, or 1.0).
        reference_column (`str`, *optional*): The reference column of the default ROUGE-L term; `None` for
            datasets without references.
    """

    def __init__(
        self,
        terms: Sequence[Any] | None = None,
        weights: Mapping[str, float] | Sequence[float] | None = None,
        reference_column: str | None = "reference",
    ) -> None:
        # the column the default ROUGE-L term reads, checked up front for a clearer error
        self.reference_column = reference_column if terms is None else None
        if terms is None:
            terms = [LengthRangeReward(), LengthRatioReward(), LexicalDiversityReward(), TransitionWordsReward(),
                     StyleConsistencyReward()]
            if reference_column is not None:
                from ..rewards.rouge import RougeLReward

                terms.append(RougeLReward(reference_column=reference_column, agent_index=0))
        if not terms:
            raise ValueError("WritingTeamReward needs at least one term.")
        self.name = "writing_team"
        self.funcs = list(terms)
        self.names = [getattr(f, "name", None) or getattr(f, "__name__", None) or type(f).__name__
                      for f in self.funcs]
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
        totals: list[float | None] = [None] * len(completions)
        for func, weight in zip(self.funcs, self.weights):
            values = func(prompts=prompts, completions=completions, **kwargs)
            for j, value in enumerate(values):
                if value is not None:
                    totals[j] = (totals[j] or 0.0) + weight * float(value)
        return totals

    def reward_funcs(self) -> list[Any]:
        """The terms as separate reward functions (pass them with `reward_weights()` to a trainer to log each)."""
        return list(self.funcs)

    def reward_weights(self) -> list[float]:
        """The weights matching [`~WritingTeamReward.reward_funcs`]."""
        return list(self.weights)


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------

_TLDR_PROMPT = re.compile(
    r"^\s*SUBREDDIT:\s*(?P<subreddit>[^\n]*?)\s*\n\s*TITLE:\s*(?P<title>[^\n]*?)\s*\n\s*POST:\s*(?P<post>.*?)"
    r"\s*(?:TL;DR:\s*)?$",
    re.DOTALL,
)


def parse_tldr_prompt(prompt: str) -> dict[str, str]:
    """Split a `trl-lib/tldr` prompt into its parts.

    The prompts read `"SUBREDDIT: r/<name>\\n\\nTITLE: <title>\\n\\nPOST: <post>\\n\\nTL;DR:"` (TRL's
    `examples/datasets/tldr.py`). A prompt in another format is returned whole (without a trailing "TL;DR:") as the
    post, with empty subreddit and title.

    Returns:
        `dict[str, str]`: `subreddit`, `title` and `post`.
    """
    match = _TLDR_PROMPT.match(prompt)
    if match:
        return {k: match.group(k).strip() for k in ("subreddit", "title", "post")}
    post = re.sub(r"\s*TL;DR:\s*$", "", prompt).strip()
    return {"subreddit": "", "title": "", "post": post}


def _tldr_row(example: Mapping[str, Any], include_title: bool) -> dict[str, str]:
    parts = parse_tldr_prompt(example["prompt"])
    text = f"{parts['title']}\n\n{parts['post']}" if include_title and parts["title"] else parts["post"]
    return {"text": text, "reference": str(example["completion"]).strip()}


def load_tldr(
    split: str = "train",
    max_rows: int | None = None,
    dataset_name: str = "trl-lib/tldr",
    include_title: bool = False,
) -> datasets.Dataset:
    """Load TL;DR (Reddit posts and their authors' summaries) for [`CooperativeWritingEnv`].

    `trl-lib/tldr` has the columns `prompt` (`"SUBREDDIT: ...\\n\\nTITLE: ...\\n\\nPOST: ...\\n\\nTL;DR:"`) and
    `completion` (the TL;DR, with a leading space), splits `train` (116,722 rows), `validation` and `test`. It is
    downloaded from the Hugging Face Hub (or read from the local `datasets` cache).

    Args:
        split (`str`): The split to load.
        max_rows (`int`, *optional*): Keep only the first `max_rows` rows.
        dataset_name (`str`): The dataset to load (a Hub name or a local path with the same columns).
        include_title (`bool`): Put the post's title (and a blank line) before the post in `text`.

    Returns:
        `datasets.Dataset`: The columns `text` (the post) and `reference` (the TL;DR, stripped).
    """
    import datasets

    if max_rows is not None and max_rows < 0:
        raise ValueError(f"`max_rows` must be >= 0 or None, got {max_rows}.")
    dataset = datasets.load_dataset(dataset_name, split=split)
    missing = [c for c in ("prompt", "completion") if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"load_tldr expects the columns 'prompt' and 'completion' of trl-lib/tldr, but {dataset_name!r} "
            f"({split}) lacks {missing} (it has {dataset.column_names})."
        )
    if max_rows is not None:
        dataset = dataset.select(range(min(max_rows, len(dataset))))
    return dataset.map(_tldr_row, fn_kwargs={"include_title": include_title}, remove_columns=dataset.column_names)
