"""The words of the writing rewards and the source gate of [`~trl_marl.rewards.writing.WritingTeamReward`].

- [`team_texts`]: every agent's texts of a reward call, as the writing terms read them ([`writing_text`]).
- [`STOPWORDS`], [`stem`], [`content_words`]: the content vocabulary the terms compare.
- [`SourceRelevanceReward`]: is each text about the row's source, and written rather than copied? The gate that
  multiplies every default writing term (issue 55: before it, no term read the source).
- [`GatedTerm`]: a term times a gate, so that a team reward's separate terms still sum to its gated total.
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..envs.writing import writing_text
from ..utils.columns import column, is_missing
from ..utils.text import words

STOPWORDS: frozenset[str] = frozenset(
    """a an and are as at be been but by can could did do does for from had has have he her his i if in into is it
    its me my no not of on or our she so than that the their them then there these they this those to too us was we
    were what when where which who will with would you your""".split()
)
"""Function words left out of the content vocabularies ([`content_words`], `StyleConsistencyReward`)."""


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


def team_texts(owner: str, completions: Sequence[Any], kwargs: Mapping[str, Any], needed: int) -> list[list[str]]:
    """Every agent's texts of the joint actions (`[agent][joint action]`, read by `writing_text`), at least `needed`
    agents: what every writing term reads.

    Raises:
        ValueError: The call has no `agent_completions` and `needed > 1`, or fewer agents than `needed`.
    """
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
        varied_a   = min(1, (distinct words of y_a / |y_a|) / varied_full)   (1 below 5 words)
        s_a        = on_topic_a * varied_a                       if |y_a| < paragraph_words
        s_a        = on_topic_a * varied_a * copy_a * prose_a    otherwise
        c          = |(union over agents of C(y_a)) & X| / min(|X|, coverage_cap)   (the team's coverage, <= 1)
        coverage   = clip((c - coverage_floor) / (coverage_full - coverage_floor), 0, 1)
        reward     = min(coverage, min over the agents of s_a)   (None where the source cell is missing)

    So a pair that is not about this source fails: its words are not the source's (on-topic) or it covers few of
    them (coverage; a fluent pair about another docstring shares generic words such as "returns" and "string" but
    covers at most ~12% of this one, an honest pair 40-70%; a long source counts as `coverage_cap` words, so that a
    paragraph of 30-60 words can cover it). A paragraph that copies the source (more than half its 6-grams, by
    default; a verbatim copy scores 0) or one of bare keywords (no function words: not prose) fails too, as does
    any text that repeats itself (fewer than 40% of its words distinct: one word ten times, a loop such as "a scope
    that contains a scope that contains ..."); the team fails with its weakest text. A short summary is not checked
    for copying or prose: an extractive or telegraphic one ("Decode Base64 bytes.") is a fair summary. These are
    word statistics: they do not judge grammar or truth, and a keyword salad with function words sprinkled in passes
    `prose_a`.

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
        varied_full (`float`): The share of distinct words that earns the full variety score.
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
        varied_full: float = 0.4,
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
        if not 0 < varied_full <= 1:
            raise ValueError(f"SourceRelevanceReward: `varied_full` must be in (0, 1], got {varied_full}.")
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
        self.varied_full = float(varied_full)
        self.agents = None if agents is None else list(agents)
        if self.agents is not None and not self.agents:
            raise ValueError("SourceRelevanceReward: `agents` must name at least one agent.")

    def parts(self, text: str, source: str) -> dict[str, float]:
        """The statistics of one text against one source: `on_topic`, `copied`, `copy`, `prose`, `varied` and the
        agent's score `score` (see the class docstring)."""
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
        varied = min(1.0, len(set(tokens)) / len(tokens) / self.varied_full) if len(tokens) >= 5 else 1.0
        paragraph = len(tokens) >= self.paragraph_words
        score = on_topic * varied * (copy * prose if paragraph else 1.0)
        return {"on_topic": on_topic, "copied": copied, "copy": copy, "prose": prose, "varied": varied,
                "score": score}

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
        team = team_texts(owner, completions, kwargs, needed)
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
