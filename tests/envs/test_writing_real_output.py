"""The writing task on a real chat model's output (issue 40): labels, markdown and quotes around an answer
(`writing_text`), the authors' distinct-word ratio (`VocabularyRatioReward`) and the single policy that writes both
texts after labels (`CentralizedWritingEnv`). Values are computed by hand in the comments."""

from __future__ import annotations

import pytest

from trl_marl.envs import CentralizedEnv, writing_text
from trl_marl.envs.base import Transcript, Turn
from trl_marl.envs.writing import CentralizedWritingEnv, CooperativeWritingEnv
from trl_marl.rewards import CentralizedReward, VocabularyRatioReward
from trl_marl.rewards.writing import (
    LengthRangeReward,
    LengthRatioReward,
    StyleConsistencyReward,
    WritingTeamReward,
)

SHORT = "Cat ate homework."
DETAILED = "My cat ate my homework, and my teacher did not believe me at all."


def team_call(func, short: list, detailed: list, **columns) -> list:
    return func(prompts=["p"] * len(short), completions=short, agent_completions=[short, detailed], **columns)


# ------------------------------------------------------------------------------------------------ writing_text
@pytest.mark.parametrize(("answer", "text"), [
    # shapes SmolLM2-135M-Instruct wrote for the team's prompts (which end with "Short summary:")
    ("Short summary: The function opens a file.", "The function opens a file."),
    ("**Short summary:** The function opens a file.", "The function opens a file."),
    ("## Detailed Summary:\nThe function opens a file.", "The function opens a file."),
    ("Output: Input:\nThe output is a module.", "Input:\nThe output is a module."),  # one label only
    ('Summary: "Open a file."', "Open a file."),
    ("TL;DR: it opens a file.", "it opens a file."),
    ("Here is a short summary of the text: Open it.", "Open it."),
    ("**Summary**: Open it.", "Open it."),
    ("> The **main** point.", "The main point."),
    # kept: a colon inside the text, a transition before a colon, quotes that are not around the whole text
    ("The module has two parts: a reader and a writer.", "The module has two parts: a reader and a writer."),
    ("Note: the file is closed.", "Note: the file is closed."),
    ("In summary: the file is closed.", "In summary: the file is closed."),
    ('"Open" and "close" files.', '"Open" and "close" files.'),
    ([{"role": "assistant", "content": " Summary:  Open it. "}], "Open it."),
])
def test_writing_text_removes_a_chat_models_frame(answer, text):
    assert writing_text(answer) == text


def test_reward_terms_do_not_count_a_label():
    """|s| = 3 words with or without "Short summary:", so rho = 14/3 = 4.67 -> (5 - 4.67) / 2 = 1/6, not 14/5."""
    ratio = LengthRatioReward()
    labelled = team_call(ratio, [f"**Short summary:** {SHORT}"], [f"Detailed summary: {DETAILED}"])
    assert labelled == [pytest.approx((5 - 14 / 3) / 2)]
    assert labelled == team_call(ratio, [SHORT], [DETAILED])
    # V_s = {cat, ate, homework} and V_d minus stopwords = {cat, ate, homework, teacher, believe, all}: 3/6, the
    # labels' words ("short", "summary", "detailed") in neither
    style = team_call(StyleConsistencyReward(), [f"Short summary: {SHORT}"], [f"Detailed summary: {DETAILED}"])
    assert style == [pytest.approx(3 / 6)]
    # agent 0 with 3 words: 3 / 8 of its range; agent 1 with 14 words: 14 / 16 -> mean 5 / 8
    assert team_call(LengthRangeReward(), [f"Summary: {SHORT}"], [DETAILED]) == [pytest.approx((3 / 8 + 14 / 16) / 2)]


def test_rouge_l_in_the_team_reward_reads_the_text_without_its_label():
    pytest.importorskip("rouge_score")
    from trl_marl.rewards import RougeLReward

    team = WritingTeamReward(terms=[RougeLReward("reference", agent_index=0)])
    # "Short summary: cat ate homework" against "cat ate homework" would be 2 * (3/5 * 1) / (3/5 + 1) = 0.75
    assert team_call(team, ["Short summary: Cat ate homework."], [DETAILED], reference=["cat ate homework"]) == [
        pytest.approx(1.0)]


def test_length_feedback_counts_the_text_not_the_label():
    env = CooperativeWritingEnv(num_turns=2)
    transcript = Transcript((Turn(("Short summary: one two three four", "Detailed summary: " + "w " * 10), None),))
    assert env.feedback({"text": "x"}, transcript).startswith(
        "The short summary has 4 words and the detailed summary has 10 words: 2.50 times as long")
    prompt = env.agent_prompt({"text": "x"}, 0, Transcript((Turn(("**Summary:** one two", "d"), None),)))
    assert "Your previous short summary:\none two\n" in prompt


# ----------------------------------------------------------------------------------------- VocabularyRatioReward
def test_vocabulary_ratio_reward():
    # the term before issue 55 (every word, no minimum): its ramp, on hand-computed values
    reward = VocabularyRatioReward(content_only=False, min_distinct=1)
    short = ["the cat sat"] * 5 + ["", "a a a"]
    detailed = [
        "the cat sat on a mat",  # 6 / 3 = 2.0 -> 1
        "the cat sat on mats",  # 5 / 3 -> (5/3 - 1.3) / 0.7 = 0.5238
        "the the cat cat sat sat on",  # distinct {the, cat, sat, on}: 4 / 3 = 1.333 -> 0.0476
        "cat sat the cat sat the",  # 3 / 3 = 1 -> 0, however long
        "the cat sat on a mat while the dog ran",  # 9 / 3 = 3 -> 1
        "anything at all",  # no words in s -> 0
        "a b",  # {a} vs {a, b}: 2 / 1 = 2 -> 1
    ]
    assert team_call(reward, short, detailed) == pytest.approx(
        [1.0, (5 / 3 - 1.3) / 0.7, (4 / 3 - 1.3) / 0.7, 0.0, 1.0, 0.0, 1.0])
    # the default counts distinct content words and needs 3 in the summary: "a a a" (the old hack: 1) and "the cat
    # sat" ({cat, sat}) score 0; "the cat sat still" ({cat, sat, still}) vs 6 content words -> 2 -> 1
    default = VocabularyRatioReward()
    assert team_call(default, ["a a a", "the cat sat", "the cat sat still"],
                     ["a b", detailed[4], "the cat sat still on a mat while the dog ran"]) == [0.0, 0.0, 1.0]
    assert VocabularyRatioReward(floor=1.0, full=3.0).ratio_score(2.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="0 <= floor < full"):
        VocabularyRatioReward(floor=2.0, full=2.0)
    with pytest.raises(ValueError, match="agent_completions"):
        reward(prompts=["p"], completions=["x"])


def test_vocabulary_ratio_is_a_default_term_with_weight_one_half():
    team = WritingTeamReward(reference_column=None)
    assert team.weights[team.names.index("vocabulary_ratio")] == 0.5
    only = WritingTeamReward(terms=[VocabularyRatioReward()], weights={"vocabulary_ratio": 0.5})
    assert team_call(only, ["the cat sat still"], ["the cat sat still on a mat and the dog ran"]) == [
        pytest.approx(0.5)]


# ------------------------------------------------------------------------------------------ CentralizedWritingEnv
def test_centralized_writing_prompt_and_prefill():
    env = CentralizedWritingEnv(CooperativeWritingEnv(chat=True))
    assert env.num_agents == 1 and isinstance(env, CentralizedEnv)
    messages = env.agent_prompt({"text": "  Open a file and read it.  "}, 0, Transcript())
    assert messages[0]["role"] == "user" and messages[0]["content"].endswith("\n\nText:\nOpen a file and read it.")
    assert '"Short summary:"' in messages[0]["content"] and '"Detailed summary:"' in messages[0]["content"]
    assert messages[1] == {"role": "assistant", "content": "Short summary:"}
    plain = CentralizedWritingEnv(CooperativeWritingEnv()).agent_prompt({"text": "x"}, 0, Transcript())
    assert plain.endswith("Text:\nx\n\nShort summary:")
    with pytest.raises(KeyError, match="text"):
        env.agent_prompt({"body": "x"}, 0, Transcript())


@pytest.mark.parametrize(("completion", "parts"), [
    (" Open a file.\n\nDetailed summary: It opens the file.", ["Open a file.", "It opens the file."]),
    (" Open a file.\n\n**Detailed Summary:**\nIt opens the file.", ["Open a file.", "It opens the file."]),
    (" Open a file. ### detailed summary: It opens it.", ["Open a file.", "It opens it."]),
    # no "Detailed summary:" label: the detailed part is empty, whatever follows
    (" Open a file.\n\nIt opens the file and reads it.", ["Open a file.\n\nIt opens the file and reads it.", ""]),
    ([{"role": "assistant", "content": "\nOpen.\nDetailed summary: More."}], ["Open.", "More."]),
])
def test_centralized_writing_split(completion, parts):
    assert CentralizedWritingEnv(CooperativeWritingEnv(chat=True)).split(completion) == parts


def test_centralized_writing_is_scored_like_the_team():
    env = CentralizedWritingEnv(CooperativeWritingEnv(chat=True))
    team = WritingTeamReward(reference_column=None)
    wrapped = CentralizedReward(env, team)(["p"], [f" {SHORT}\n\nDetailed summary: {DETAILED}"], text=["x"])
    assert wrapped == pytest.approx(team_call(team, [SHORT], [DETAILED], text=["x"]))


def test_centralized_writing_rejects_other_envs_and_turns():
    with pytest.raises(TypeError, match="CooperativeWritingEnv"):
        CentralizedWritingEnv(CentralizedEnv(CooperativeWritingEnv()))
    with pytest.raises(ValueError, match="one turn"):
        CentralizedWritingEnv(CooperativeWritingEnv(num_turns=2))
