"""The writing task with symmetric roles (issue 55, design b1): `SymmetricWritingEnv`'s prompts, and
`SymmetricWritingTeamReward` with its length-class metrics on hand-made texts."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.envs.writing import (
    PARAGRAPH_WORDS,
    SUMMARY_MAX_WORDS,
    CooperativeWritingEnv,
    SymmetricWritingEnv,
)
from trl_marl.rewards.writing import LengthRatioReward
from trl_marl.rewards.writing_variants import (
    SHORT_CLASS_MAX_WORDS,
    STRUCTURE_TERMS,
    ByLengthRoles,
    SameLengthClass,
    SymmetricWritingTeamReward,
    WroteShortText,
    length_class,
    length_class_metrics,
)

SOURCE = ("The cat sat on the warm mat all morning because the sun was shining through the window. Later, a dog "
          "barked in the garden, so the cat woke up, stretched and ran away to hide under the old wooden bed.")
ROW = {"text": f"  {SOURCE}  "}
SUMMARY = "A cat naps on a sunny mat until a barking dog scares it away."  # 14 words
PARAGRAPH = ("The cat spent the whole morning asleep on the warm mat, because the sun was shining through the "
             "window. However, a dog barked in the garden. As a result, the cat woke up and stretched. Finally, it "
             "ran away to hide under the old wooden bed.")  # 46 words
SECOND_SUMMARY = "The cat sleeps on the mat, then a dog barks and it hides."  # 13 words
SECOND_PARAGRAPH = ("All morning the cat slept on the warm mat, because the sun was shining through the window. "
                    "However, the dog in the garden barked loudly. Therefore, the cat woke, stretched and ran away. "
                    "Finally, it hid under the old wooden bed.")  # 41 words


def call(func: Any, first: list[str], second: list[str]) -> list[Any]:
    """A team reward called as trl-marl's `TeamReward` calls it, with the rows' source."""
    return func(prompts=[""] * len(first), completions=first, agent_completions=[first, second],
                text=[SOURCE] * len(first))


def test_both_writers_get_the_same_instruction_but_their_number() -> None:
    env = SymmetricWritingEnv()
    prompts = [env.agent_prompt(ROW, i, Transcript()) for i in (0, 1)]
    assert prompts[0] == (
        "Two writers summarize the text below, and neither can see the other's text. One of you writes a "
        "one-sentence summary of at most 15 words; the other writes a detailed paragraph of 30 to 60 words that "
        "explains the main point and the important details. You are writer 1. Write only your own text.\n\n"
        f"Text:\n{SOURCE}\n\nYour text:"
    )
    assert prompts[1] == prompts[0].replace("You are writer 1.", "You are writer 2.")
    assert (SUMMARY_MAX_WORDS, PARAGRAPH_WORDS) == (15, (30, 60))
    chat = SymmetricWritingEnv(chat=True, system_prompt="Be brief.").agent_prompt(ROW, 1, Transcript())
    assert chat == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompts[1]}]
    custom = SymmetricWritingEnv(summary_max=10, paragraph_words=(20, 40)).render(ROW, 0, Transcript())
    assert "at most 10 words" in custom and "of 20 to 40 words" in custom
    assert isinstance(env, CooperativeWritingEnv) and env.num_turns == 1 and env.feedback(ROW, Transcript()) is None


def test_symmetric_env_rejects_bad_settings_and_rows() -> None:
    with pytest.raises(ValueError, match="one turn"):
        SymmetricWritingEnv(num_turns=2)
    with pytest.raises(ValueError, match="summary_max < paragraph_min"):
        SymmetricWritingEnv(summary_max=40)
    env = SymmetricWritingEnv()
    with pytest.raises(ValueError, match="writers 0 and 1"):
        env.render(ROW, 2, Transcript())
    with pytest.raises(ValueError, match="one turn"):
        env.render(ROW, 0, Transcript().extend((SUMMARY, PARAGRAPH)))
    with pytest.raises(KeyError):
        env.render({"post": SOURCE}, 0, Transcript())


def test_length_classes_and_cooperation_metrics() -> None:
    assert SHORT_CLASS_MAX_WORDS == 22  # between the summary's 15 and the paragraph's 30
    assert length_class(SUMMARY) == 0 and length_class(PARAGRAPH) == 1
    assert length_class(" ".join(["w"] * 22)) == 0 and length_class(" ".join(["w"] * 23)) == 1
    assert length_class("") == 0
    first = [SUMMARY, PARAGRAPH, SUMMARY, PARAGRAPH]
    second = [PARAGRAPH, SUMMARY, SECOND_SUMMARY, SECOND_PARAGRAPH]
    # joint actions: writer 1 short; writer 2 short; both short (collision); both long (collision)
    assert call(WroteShortText(0), first, second) == [1.0, 0.0, 1.0, 0.0]
    assert call(WroteShortText(1), first, second) == [0.0, 1.0, 1.0, 0.0]
    assert call(SameLengthClass(), first, second) == [0.0, 0.0, 1.0, 1.0]
    metrics = length_class_metrics()
    assert list(metrics) == ["agent_0_short", "agent_1_short", "same_length_class"]
    assert call(metrics["same_length_class"], first, second) == [0.0, 0.0, 1.0, 1.0]
    # a custom boundary: the 14-word summary is "long" above 12
    assert call(SameLengthClass(short_max=12), [SUMMARY], [PARAGRAPH]) == [1.0]


def test_the_shorter_text_is_scored_as_the_summary_in_either_order() -> None:
    reward = SymmetricWritingTeamReward()
    forward, backward = call(reward, [SUMMARY], [PARAGRAPH]), call(reward, [PARAGRAPH], [SUMMARY])
    assert forward == pytest.approx(backward)
    assert forward[0] >= 3.0  # a success of the writing benchmark
    # ByLengthRoles orders by words: |s| = 14, |d| = 46 -> ratio 46/14 = 3.29 -> (5 - 3.29)/2 = 0.86 either way
    ratio = ByLengthRoles(LengthRatioReward(), zero_when_same_class=True)
    assert call(ratio, [PARAGRAPH], [SUMMARY]) == pytest.approx([(5 - 46 / 14) / 2])
    assert call(ratio, [SUMMARY], [PARAGRAPH]) == pytest.approx([(5 - 46 / 14) / 2])
    # without reordering, the paragraph as "agent 0" gets ratio 14/46 < 1 -> 0
    assert call(LengthRatioReward(), [PARAGRAPH], [SUMMARY]) == [0.0]


def test_a_collision_pays_nothing_on_the_structure_terms() -> None:
    reward = SymmetricWritingTeamReward()
    assert tuple(STRUCTURE_TERMS) == ("length_range", "length_ratio", "vocabulary_ratio")
    assert reward.names == ["length_range", "length_ratio", "vocabulary_ratio", "lexical_diversity",
                            "transition_words", "style_consistency"]
    both_short = [call(f, [SUMMARY], [SECOND_SUMMARY])[0] for f in reward.funcs]
    both_long = [call(f, [PARAGRAPH], [SECOND_PARAGRAPH])[0] for f in reward.funcs]
    for values in (both_short, both_long):
        assert values[:3] == [0.0, 0.0, 0.0]  # the structure terms
        assert values[3] > 0 and values[5] > 0  # diversity and overlap still pay
    assert both_long[4] == 1.0 and both_short[4] == 0.0  # transitions, in the longer text
    # a collision keeps at most 1.5 of 4.0; the split pair is a success
    assert call(reward, [PARAGRAPH], [SECOND_PARAGRAPH])[0] <= 1.5
    assert call(reward, [SUMMARY], [SECOND_SUMMARY])[0] <= 1.5
    assert call(reward, [SECOND_SUMMARY], [PARAGRAPH])[0] >= 3.0


def test_symmetric_reward_terms_and_settings() -> None:
    reward = SymmetricWritingTeamReward()
    values = {name: call(f, [SUMMARY], [PARAGRAPH])[0] for name, f in zip(reward.names, reward.funcs)}
    # |s| = 14 in [5, 15], |d| = 46 in [30, 60] -> 1; overlap saturates at Jaccard 0.03 -> 1
    assert values["length_range"] == 1.0 and values["style_consistency"] == 1.0
    assert values["transition_words"] == 1.0  # however, as a result, finally
    assert sum(w * v for w, v in zip(reward.weights, values.values())) == pytest.approx(call(reward, [SUMMARY],
                                                                                              [PARAGRAPH])[0])
    # a summary over 15 words is out of range, still in the short class up to 22
    long_summary = "A cat naps all morning on a warm and sunny mat until a dog barks and scares it away."  # 19
    assert length_class(long_summary) == 0
    range_term = reward.funcs[reward.names.index("length_range")]
    assert call(range_term, [long_summary], [PARAGRAPH]) == [pytest.approx((1 + 1 - 4 / 15) / 2)]
    # off-topic writers split the roles but are gated to 0
    off = ("Stock markets fell sharply today.", "Stock markets fell sharply today after the bank raised rates. "
           "However, analysts expect a recovery soon, because earnings remain strong. Finally, investors hope "
           "that the worst has passed for now.")
    assert call(reward, [off[0]], [off[1]]) == [0.0]
    ungated = SymmetricWritingTeamReward(gate=None)
    assert call(ungated, [off[0]], [off[1]])[0] > 2.5
    with pytest.raises(ValueError, match="short_max"):
        SymmetricWritingTeamReward(short_max=35)
