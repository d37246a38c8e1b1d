"""Gamed answers to the writing task score below honest ones (issue 55, item 2).

Honest pairs are written by hand for four training rows of `trl_marl.data.team_writing`: a one-sentence summary
and a paragraph two to three times as long that paraphrases the source. Each gamed answer is built from the same
row: fluent texts about something else, a pair about another docstring, one repeated word, the source copied,
empty texts, the partner's text duplicated, a huge text, a keyword salad, bare transitions. Every gamed answer must
score below the honest pair of its row under `WritingTeamReward` (the training reward of the writing benchmark,
`reference_column=None`), and none may reach the benchmark's success threshold of 3.0 of 4.0. The same corpus run
through `WritingTeamReward.legacy()` shows the hacks the gate closes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trl_marl.data.team_writing import team_writing_rows
from trl_marl.rewards.writing import WritingTeamReward
from trl_marl.rewards.writing_source import STOPWORDS, SourceRelevanceReward
from trl_marl.rewards.writing_variants import SymmetricWritingTeamReward, TldrCombinedReward
from trl_marl.utils.text import words

SUCCESS = 3.0  # `WRITING_SUCCESS` of benchmarks/learning/learning_real.py

HONEST: dict[str, tuple[str, str]] = {
    "base64.b64decode": (
        "Decodes Base64 bytes or an ASCII string, with optional alternative alphabet characters.",
        "The function decodes Base64 data given as a bytes-like object or an ASCII string. First, altchars may "
        "replace '+' and '/' in the alphabet. However, incorrectly padded input raises binascii.Error.",
    ),
    "code.InteractiveConsole.interact": (
        "Emulates the interactive Python console, printing a banner first and an exit message last.",
        "This method closely emulates the real Python console. First, it prints an optional banner naming the "
        "current class. Finally, it prints an exit message when exiting; however, an empty exitmsg suppresses it.",
    ),
    "sysconfig.get_platform": (
        "Returns a string that identifies the current platform, such as its OS and architecture.",
        "The function returns a string identifying the current platform. It is mainly used to distinguish "
        "platform-specific build directories. Typically, the string includes the OS name, its version and the "
        "architecture; however, the exact information depends on the OS.",
    ),
    "asyncio.events.AbstractEventLoopPolicy.get_event_loop": (
        "Gets the event loop of the current context, or raises an exception.",
        "This policy method returns the event loop object of the current context. However, when no event loop "
        "has been set and the policy does not create one, it raises an exception instead. Therefore, it never "
        "returns None.",
    ),
}

OFF_TOPIC = (
    "My grandmother bakes bread every Sunday morning for the whole family.",
    "Every Sunday, my grandmother bakes fresh bread for the family. First, she kneads the dough by hand. "
    "However, the oven is old, so she watches it closely. Finally, we eat warm slices together at lunch.",
)
"""A fluent pair about something else, with the right lengths, ratio, vocabulary and transitions."""

TRANSITIONS_ONLY = ("However, therefore, first, finally, moreover, also.",
                    "However, therefore, first, finally, moreover, also, furthermore, consequently, meanwhile, next, "
                    "overall, in short, in summary, for example, for instance, in addition, instead, thus, because.")


def rows() -> dict[str, dict[str, str]]:
    return {r["source"]: r for r in team_writing_rows("train")}


def score(reward: Callable, short: str, detailed: str, source: str) -> float:
    """The team reward of one joint action, called as trl-marl's `TeamReward` calls it."""
    value = reward(prompts=[""], completions=[short], agent_completions=[[short], [detailed]], text=[source])[0]
    return 0.0 if value is None else float(value)


def gamed_answers(source_name: str) -> dict[str, tuple[str, str]]:
    """The gamed joint actions of one row, by name."""
    table = rows()
    source = table[source_name]["text"]
    short, detailed = HONEST[source_name]
    other = next(name for name in HONEST if name != source_name)
    first_sentence = source.split(". ")[0] + "."
    content = [w for w in words(source) if w not in STOPWORDS and len(w) > 3]  # the source's keywords, in order
    return {
        "off_topic": OFF_TOPIC,
        "another_docstring": HONEST[other],
        "one_repeated_word_summary": (" ".join([content[0]] * 10), detailed),
        "one_repeated_word_both": (" ".join([content[0]] * 10), " ".join([content[0]] * 30)),
        "source_copied_twice": (source, source),
        "source_copied_as_paragraph": (short, source),
        "first_sentence_and_source": (first_sentence, source),
        "empty_both": ("", ""),
        "empty_paragraph": (short, ""),
        "empty_summary": ("", detailed),
        "partner_text_duplicated": (short, short),
        "summary_repeated_as_paragraph": (short, " ".join([short] * 3)),
        "paragraph_twice": (detailed, detailed),
        "huge_paragraph": (short, " ".join([detailed] * 25)),
        "keyword_salad": (" ".join(content[:8]), " ".join(content[:30]) + " however therefore finally"),
        "transitions_only": TRANSITIONS_ONLY,
    }


@pytest.mark.parametrize("source_name", sorted(HONEST))
def test_honest_pairs_succeed(source_name: str) -> None:
    """Each hand-written pair is a success of the training reward, and passes the source gate in full."""
    source = rows()[source_name]["text"]
    short, detailed = HONEST[source_name]
    assert score(WritingTeamReward(reference_column=None), short, detailed, source) >= SUCCESS
    assert score(SourceRelevanceReward(), short, detailed, source) == pytest.approx(1.0)


@pytest.mark.parametrize("source_name", sorted(HONEST))
def test_every_gamed_answer_scores_below_the_honest_pair(source_name: str) -> None:
    reward = WritingTeamReward(reference_column=None)
    source = rows()[source_name]["text"]
    honest = score(reward, *HONEST[source_name], source)
    scores = {name: score(reward, short, detailed, source)
              for name, (short, detailed) in gamed_answers(source_name).items()}
    assert all(value < honest for value in scores.values()), (honest, scores)
    assert all(value < SUCCESS for value in scores.values()), scores
    # text that is not about this source, or not written, earns nothing at all
    for name in ("off_topic", "empty_both", "transitions_only", "source_copied_twice", "keyword_salad"):
        assert scores[name] == pytest.approx(0.0, abs=0.05), (name, scores[name])
    # a fluent pair about another docstring shares its generic words ("returns", "string") but covers little
    assert scores["another_docstring"] <= 1.0


@pytest.mark.parametrize("source_name", sorted(HONEST))
def test_the_legacy_reward_was_gamed(source_name: str) -> None:
    """Before issue 55 the off-topic pair was a success and a one-word summary earned the full vocabulary term."""
    legacy = WritingTeamReward.legacy(reference_column=None)
    source = rows()[source_name]["text"]
    assert score(legacy, *OFF_TOPIC, source) >= SUCCESS
    assert score(legacy, *HONEST[next(n for n in HONEST if n != source_name)], source) >= SUCCESS
    vocabulary = legacy.terms[legacy.names.index("vocabulary_ratio")]
    one_word = " ".join(["cat"] * 10)
    assert score(vocabulary, one_word, HONEST[source_name][1], source) == 1.0
    current = WritingTeamReward(reference_column=None)
    assert score(current.terms[current.names.index("vocabulary_ratio")], one_word, HONEST[source_name][1],
                 source) == 0.0


@pytest.mark.parametrize("source_name", sorted(HONEST))
def test_symmetric_reward_gamed_answers_in_either_order(source_name: str) -> None:
    """Under unassigned roles the honest pair scores the same in either order; every gamed pair scores below it in
    both orders (which writer wrote which text does not matter, only that they differ)."""
    reward = SymmetricWritingTeamReward()
    source = rows()[source_name]["text"]
    short, detailed = HONEST[source_name]
    honest = score(reward, short, detailed, source)
    assert score(reward, detailed, short, source) == pytest.approx(honest)
    assert honest >= SUCCESS
    for name, (a, b) in gamed_answers(source_name).items():
        for first, second in ((a, b), (b, a)):
            assert score(reward, first, second, source) < min(honest, SUCCESS), name


@pytest.mark.parametrize("source_name", sorted(HONEST))
def test_authors_tldr_reward_is_gamed_without_a_gate_and_not_with_one(source_name: str) -> None:
    """The authors' reward (maximum 3.0) pays the off-topic pair like an honest one; gated by the source it pays
    nothing for it, and the honest pair keeps its score."""
    source = rows()[source_name]["text"]
    authors = TldrCombinedReward()
    gated = WritingTeamReward(terms=[authors], gate=SourceRelevanceReward())
    honest = score(authors, *HONEST[source_name], source)
    assert score(authors, *OFF_TOPIC, source) >= 2.5
    assert score(gated, *OFF_TOPIC, source) == 0.0
    assert score(gated, *HONEST[source_name], source) == pytest.approx(honest)
