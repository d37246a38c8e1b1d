"""The writing terms added for issue 55, on hand-computed values: content words, the source gate
(`SourceRelevanceReward`, `GatedTerm`), the distinct-content-word ratio, the legacy reward and the authors' gated
TL;DR reward (`TldrCombinedReward`)."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.rewards.writing import VocabularyRatioReward, WritingTeamReward
from trl_marl.rewards.writing_source import GatedTerm, SourceRelevanceReward, content_words, stem
from trl_marl.rewards.writing_variants import TldrCombinedReward

SOURCE = "The parser reads the config file and returns a dictionary of settings."
# content words of SOURCE: parser, read, config, file, return, dictionary, setting (7)


def call(func: Any, first: list[str], second: list[str], **columns: Any) -> list[Any]:
    columns.setdefault("text", [SOURCE] * len(first))
    return func(prompts=[""] * len(first), completions=first, agent_completions=[first, second], **columns)


def test_stem_and_content_words() -> None:
    assert [stem(w) for w in ("methods", "called", "calling", "classes", "libraries", "status", "used", "uses")] == [
        "method", "call", "call", "class", "library", "status", "used", "use"]
    assert content_words("The methods are called twice.") == ["method", "call", "twice"]
    assert sorted(set(content_words(SOURCE))) == ["config", "dictionary", "file", "parser", "read", "return",
                                                  "setting"]


def test_source_relevance_on_topic_and_coverage() -> None:
    gate = SourceRelevanceReward()
    assert gate.name == "source_relevance"
    on = "Reads the config file into settings."  # read, config, file, setting: 4 of 4 in the source
    off = "Bananas are yellow."  # banana, yellow: 0 of 2
    assert gate.parts(on, SOURCE)["on_topic"] == 1.0 and gate.parts(off, SOURCE)["on_topic"] == 0.0
    # coverage of (on, on): 4 of 7 source words = 0.57 >= 0.3 -> 1; the team fails with its off-topic text
    assert call(gate, [on, on, off], [on, off, off]) == [1.0, 0.0, 0.0]
    # "Reads bananas.": 1 of 2 content words -> 0.5 / 0.35 -> 1 by default, 0.5 with on_topic_full=1
    assert SourceRelevanceReward(on_topic_full=1.0).parts("Reads bananas.", SOURCE)["on_topic"] == 0.5
    # coverage of "Reads the parser.": {read, parser} = 2 of 7 = 0.286 -> (0.286 - 0.1) / (0.3 - 0.1) = 0.929
    assert call(gate, ["Reads the parser."], ["Reads the parser."]) == [pytest.approx((2 / 7 - 0.1) / 0.2)]
    assert gate.coverage(["Reads the parser."], SOURCE) == pytest.approx((2 / 7 - 0.1) / 0.2)
    # a long source counts as coverage_cap words: 2 of min(7, 4) = 0.5 -> 1
    assert SourceRelevanceReward(coverage_cap=4).coverage(["Reads the parser."], SOURCE) == 1.0
    assert call(gate, [""], [""]) == [0.0]


def test_source_relevance_copy_and_prose_checks_apply_to_paragraphs() -> None:
    gate = SourceRelevanceReward(paragraph_words=5, copy_ngram=2)
    # a verbatim copy: every bigram copied -> copy (1 - 1) / (1 - 0.5) = 0
    assert gate.parts(SOURCE, SOURCE)["copied"] == 1.0 and gate.parts(SOURCE, SOURCE)["score"] == 0.0
    # 3 of its 4 bigrams copied: 0.75 -> (1 - 0.75) / 0.5 = 0.5; on topic (3 of 4 content words) and prose (1
    # stopword of 5 = 0.2): score 0.5
    half = gate.parts("parser reads the config quickly", SOURCE)
    assert half["copied"] == 0.75 and half["copy"] == pytest.approx(0.5) and half["score"] == pytest.approx(0.5)
    # the same copy in a text shorter than paragraph_words is not checked for copying
    assert SourceRelevanceReward(paragraph_words=6, copy_ngram=2).parts("parser reads the config quickly",
                                                                        SOURCE)["score"] == 1.0
    # bare keywords are not prose: 0 stopwords of 5 -> 0; 1 of 5 = 0.2 -> full (prose_full 0.2)
    assert gate.parts("parser config file dictionary settings", SOURCE)["score"] == 0.0
    assert gate.parts("settings and config file parser", SOURCE)["prose"] == 1.0
    assert SourceRelevanceReward(prose_full=0.4).parts("settings and config file parser", SOURCE)["prose"] == 0.5
    # repetition: "parser parser parser parser parser" has 1 distinct word of 5 = 0.2 -> 0.2 / 0.4 = 0.5
    assert SourceRelevanceReward().parts("parser parser parser parser parser", SOURCE)["varied"] == 0.5
    assert SourceRelevanceReward().parts("parser parser parser parser", SOURCE)["varied"] == 1.0  # < 5 words
    # a short text is only checked for topic and repetition: an extractive summary keeps its score
    assert SourceRelevanceReward().parts("The parser reads the config file.", SOURCE)["score"] == 1.0


def test_source_relevance_columns_and_errors() -> None:
    gate = SourceRelevanceReward(reference_column="reference")
    # "Bananas" only in the reference: counts as the source's with reference_column
    text = ["Reads the config file, like bananas."]
    assert call(gate, text, text, reference=["bananas"]) == [1.0]
    # without it: read, config, file of read, config, file, like, banana = 3/5
    assert call(SourceRelevanceReward(on_topic_full=1.0), text, text) == [pytest.approx(3 / 5)]
    assert call(SourceRelevanceReward(), ["x"], ["y"], text=[None]) == [None]
    with pytest.raises(KeyError, match="'text'"):
        SourceRelevanceReward()(prompts=[""], completions=["a"], agent_completions=[["a"], ["b"]], post=["x"])
    for bad in ({"on_topic_full": 0.0}, {"copy_free": 1.0}, {"prose_full": 0.0}, {"varied_full": 0.0},
                {"copy_ngram": 0}, {"coverage_floor": 0.5, "coverage_full": 0.3}, {"coverage_cap": 0}, {"agents": []}):
        with pytest.raises(ValueError):
            SourceRelevanceReward(**bad)


def test_gated_term_and_team_reward_gate() -> None:
    def term(prompts: Any, completions: Any, **kwargs: Any) -> list[Any]:
        return [2.0, None, 3.0]

    def gate(prompts: Any, completions: Any, **kwargs: Any) -> list[Any]:
        return [0.5, 0.5, None]

    gated = GatedTerm(term, gate)
    assert gated.name == "term" and gated(prompts=[], completions=[]) == [1.0, None, 3.0]
    default = WritingTeamReward(reference_column=None)
    assert isinstance(default.gate, SourceRelevanceReward)
    assert all(isinstance(f, GatedTerm) for f in default.funcs) and default.names == [
        "length_range", "length_ratio", "vocabulary_ratio", "lexical_diversity", "transition_words",
        "style_consistency"]
    assert WritingTeamReward(terms=[VocabularyRatioReward()]).gate is None  # your own terms: no gate unless given
    legacy = WritingTeamReward.legacy()
    assert legacy.gate is None and legacy.reference_column == "reference" and legacy.names[-1] == "rouge_l"


def test_vocabulary_ratio_counts_distinct_content_words_with_a_minimum() -> None:
    reward = VocabularyRatioReward()
    detailed = "Cats chase mice, birds, squirrels, rabbits, lizards and insects around gardens every single day."
    # U(d) content: cat chase mice bird squirrel rabbit lizard insect around garden every single day = 13
    assert reward.distinct(detailed) == 13
    # one repeated word: 1 distinct < 3 -> 0 (the old term: 14 / 1 distinct words -> 1)
    assert call(reward, ["cat cat cat cat"], [detailed]) == [0.0]
    assert call(VocabularyRatioReward(content_only=False, min_distinct=1), ["cat cat cat cat"], [detailed]) == [1.0]
    # "The cat chased a mouse." -> cat, chas, mouse: 3 -> 13 / 3 >= 2 -> 1; a 6-word d of 4 -> 4/3 -> ramp
    assert call(reward, ["The cat chased a mouse."], [detailed]) == [1.0]
    assert call(reward, ["The cat chased a mouse."], ["the cat chased a big grey mouse"]) == [
        pytest.approx((5 / 3 - 1.3) / 0.7)]
    with pytest.raises(ValueError, match="min_distinct"):
        VocabularyRatioReward(min_distinct=0)


S8 = "alpha beta gamma delta epsilon zeta eta theta"  # 8 tokens, 45 characters, 8 distinct words
D16 = "alpha however one two three four five six seven eight nine ten for example eleven twelve"  # 16, 88 chars


def test_tldr_combined_reward_levels() -> None:
    reward = TldrCombinedReward()
    assert reward.name == "tldr_combined"
    # level 1 fails: 7 tokens
    assert reward.levels("a b c d e f g", D16) == [0.0]
    # level 2 fails: the same text, rho = 1 < 1.1
    assert reward.levels(S8, S8) == [0.5]
    # level 3 fails: d = s twice: rho = 91/45 = 2.02 -> 1; distinct 8/8 = 1 < 1.3
    assert reward.levels(S8, f"{S8} {S8}") == [0.5, 1.0]
    # all levels: rho = 88/45 = 1.96 -> 1; distinct 16/8 = 2 -> 0.5; categories "contrast and concession"
    # (however) and "example" (for example): t = 0.4 + 0.05 = 0.45; Jaccard 1/22 >= 0.03 -> 1
    assert len(D16) / len(S8) == pytest.approx(88 / 45)
    assert reward.levels(S8, D16) == pytest.approx([0.5, 1.0, 0.5, 0.4 * 0.45 + 0.6])
    assert call(reward, [S8], [D16]) == [pytest.approx(2.78)]
    # level 2's ramp: rho 1.35 -> (1.35 - 1.1) / 0.5 = 0.5 (then level 3 stops it)
    short = "aa bb cc dd ee ff gg hh"  # 23 characters
    assert reward.levels("x" * 0 + short, short + " " + "z" * 7)[:2] == pytest.approx([0.5, (31 / 23 - 1.1) / 0.5])
    # the authors match transitions as substrings: "so" inside "also"
    substring = TldrCombinedReward(transition_categories={"cause": ["so"]})
    assert substring.categories_found("It also works.") == ["cause"]
    assert TldrCombinedReward(transition_categories={"cause": ["so"]}, substring=False).categories_found(
        "It also works.") == []
    with pytest.raises(ValueError, match="jaccard_saturation"):
        TldrCombinedReward(jaccard_saturation=0.0)
