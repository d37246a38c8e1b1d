"""Tests of the cooperative writing task: `CooperativeWritingEnv`, its reward terms and the TL;DR loader.

Prompts are checked against exact snapshots; every reward term against values computed by hand in the comments.
"""

from __future__ import annotations

from typing import Any

import datasets
import pytest

from trl_marl.data import load_tldr, parse_tldr_prompt
from trl_marl.envs.base import Transcript
from trl_marl.envs.writing import CooperativeWritingEnv
from trl_marl.reward_contract import TeamReward
from trl_marl.rewards.writing import (
    DEFAULT_WRITING_WEIGHTS,
    TRANSITION_PHRASES,
    LengthRangeReward,
    LengthRatioReward,
    LexicalDiversityReward,
    StyleConsistencyReward,
    TransitionWordsReward,
    WritingTeamReward,
    type_token_ratio,
)
from trl_marl.utils.text import words

ROW = {"text": "  My cat ate my homework. The teacher did not believe me.  ", "reference": "cat ate homework"}
SHORT = "Cat ate homework."
DETAILED = "My cat ate my homework, and my teacher did not believe me at all."

SUMMARY_TURN_1 = (
    "Summarize the text below in one or two sentences. Keep only the main point. "
    "A partner writes a longer, detailed summary of the same text.\n"
    "\n"
    "Text:\n"
    "My cat ate my homework. The teacher did not believe me.\n"
    "\n"
    "Short summary:"
)
SUMMARY_INSTRUCTION_PREFIX = "Summarize the text below in one or two sentences."
DETAILED_TURN_1 = (
    "Write a detailed summary of the text below in one paragraph, two to three times as long as a short summary. "
    "Explain the main point and the important details, and connect your sentences with transition words. "
    "A partner writes a short summary of the same text.\n"
    "\n"
    "Text:\n"
    "My cat ate my homework. The teacher did not believe me.\n"
    "\n"
    "Detailed summary:"
)
FEEDBACK = (
    "The short summary has 3 words and the detailed summary has 14 words: 4.67 times as long "
    "(target: 2 to 3 times). Make the detailed summary shorter or the short summary longer."
)
SUMMARY_TURN_2 = (
    "Summarize the text below in one or two sentences. Keep only the main point. "
    "A partner writes a longer, detailed summary of the same text.\n"
    "\n"
    "Text:\n"
    "My cat ate my homework. The teacher did not believe me.\n"
    "\n"
    "Your previous short summary:\n"
    "Cat ate homework.\n"
    "\n"
    "Your partner's detailed summary:\n"
    "My cat ate my homework, and my teacher did not believe me at all.\n"
    "\n"
    f"Feedback: {FEEDBACK}\n"
    "\n"
    "Revise your short summary so that the two fit together. Write only the revised short summary.\n"
    "\n"
    "Short summary:"
)
DETAILED_TURN_2 = (
    "Write a detailed summary of the text below in one paragraph, two to three times as long as a short summary. "
    "Explain the main point and the important details, and connect your sentences with transition words. "
    "A partner writes a short summary of the same text.\n"
    "\n"
    "Text:\n"
    "My cat ate my homework. The teacher did not believe me.\n"
    "\n"
    "Your previous detailed summary:\n"
    "My cat ate my homework, and my teacher did not believe me at all.\n"
    "\n"
    "Your partner's short summary:\n"
    "Cat ate homework.\n"
    "\n"
    f"Feedback: {FEEDBACK}\n"
    "\n"
    "Revise your detailed summary so that the two fit together. Write only the revised detailed summary.\n"
    "\n"
    "Detailed summary:"
)


def after_turn_1(env: CooperativeWritingEnv, responses: tuple[str, str] = (SHORT, DETAILED)) -> Transcript:
    """The transcript after turn 1, built the way `JointRollout` builds it (feedback from the extended one)."""
    transcript = Transcript().extend(responses)
    return Transcript().extend(responses, env.feedback(ROW, transcript))


def team_call(func: Any, short: list[str], detailed: list[str], **columns: Any) -> list[float | None]:
    """Call a team reward the way trl-marl's `TeamReward` does (agent 0's view + every agent's completions)."""
    return func(prompts=[""] * len(short), completions=short, agent_completions=[short, detailed], agent_index=None,
                turn=1, **columns)


# ----------------------------------------------------------------------------------------------------------------
# Environment: prompts, feedback, validation
# ----------------------------------------------------------------------------------------------------------------


def test_turn_1_prompts_snapshot() -> None:
    env = CooperativeWritingEnv()
    assert env.num_agents == 2 and env.num_turns == 1 and env.required_columns == ("text",)
    assert env.prompts(ROW, Transcript()) == [SUMMARY_TURN_1, DETAILED_TURN_1]


def test_turn_2_prompts_snapshot() -> None:
    env = CooperativeWritingEnv(num_turns=2)
    transcript = after_turn_1(env)
    assert transcript[0].feedback == FEEDBACK
    assert env.agent_prompt(ROW, 0, transcript) == SUMMARY_TURN_2
    assert env.agent_prompt(ROW, 1, transcript) == DETAILED_TURN_2
    assert not env.is_done(ROW, transcript)
    assert env.is_done(ROW, transcript.extend(["a", "b"]))


def test_turn_2_without_feedback() -> None:
    env = CooperativeWritingEnv(num_turns=2, length_feedback=False)
    transcript = after_turn_1(env)
    assert transcript[0].feedback is None
    assert env.agent_prompt(ROW, 0, transcript) == SUMMARY_TURN_2.replace(f"Feedback: {FEEDBACK}\n\n", "")


def test_chat_prompts() -> None:
    env = CooperativeWritingEnv(num_turns=2, chat=True)
    assert env.agent_prompt(ROW, 1, Transcript()) == [{"role": "user", "content": DETAILED_TURN_1}]
    with_system = CooperativeWritingEnv(num_turns=2, chat=True, system_prompt="You are a careful writer.")
    assert with_system.agent_prompt(ROW, 0, after_turn_1(with_system)) == [
        {"role": "system", "content": "You are a careful writer."},
        {"role": "user", "content": SUMMARY_TURN_2},
    ]


@pytest.mark.parametrize(
    ("responses", "expected"),
    [
        (("a b", "a b c d e"), "The short summary has 2 words and the detailed summary has 5 words: 2.50 times "
                               "as long (target: 2 to 3 times). Keep these lengths."),
        (("a b c d", "a b c d e f"), "The short summary has 4 words and the detailed summary has 6 words: 1.50 times "
                                     "as long (target: 2 to 3 times). Make the detailed summary longer or the short "
                                     "summary shorter."),
        (("", "a b c"), "The short summary is empty and the detailed summary has 3 words (target: 2 to 3 times as "
                        "long as the short summary). Write a short summary."),
    ],
)
def test_length_feedback(responses: tuple[str, str], expected: str) -> None:
    env = CooperativeWritingEnv(num_turns=2)
    assert env.feedback(ROW, Transcript().extend(responses)) == expected


def test_custom_text_column_and_ratio_range() -> None:
    env = CooperativeWritingEnv(text_column="post", ratio_range=(1.5, 2.5))
    assert env.required_columns == ("post",)
    prompt = env.agent_prompt({"post": "Hello world."}, 0, Transcript())
    assert prompt.endswith("Text:\nHello world.\n\nShort summary:")
    assert "(target: 1.5 to 2.5 times)" in env.feedback({"post": "x"}, Transcript().extend(["a b", "a b c d"]))


def test_row_without_text_is_rejected_with_the_column_name() -> None:
    env = CooperativeWritingEnv()
    with pytest.raises(KeyError, match=r"CooperativeWritingEnv needs the column\(s\) \['text'\].*\['post'\]"):
        env.validate_row({"post": "hello"})
    with pytest.raises(KeyError, match="'text'"):
        env.agent_prompt({"post": "hello"}, 0, Transcript())
    with pytest.raises(KeyError, match="'body'"):
        CooperativeWritingEnv(text_column="body").validate_row({"text": "hello"})
    env.validate_row({"text": None})  # the trainer checks the column names with `dict.fromkeys(columns)`
    with pytest.raises(ValueError, match="column 'text'.*NoneType"):
        env.agent_prompt({"text": None}, 0, Transcript())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="agents 0"):
        CooperativeWritingEnv().agent_prompt(ROW, 2, Transcript())
    with pytest.raises(ValueError, match="ratio_range"):
        CooperativeWritingEnv(ratio_range=(3.0, 2.0))


# ----------------------------------------------------------------------------------------------------------------
# Text statistics
# ----------------------------------------------------------------------------------------------------------------


def test_words_and_type_token_ratio() -> None:
    assert words("Don't stop, it's FINE.") == ["don't", "stop", "it's", "fine"]
    assert words("") == []
    assert type_token_ratio("the cat the dog") == pytest.approx(3 / 4)
    assert type_token_ratio("...") == 0.0


# ----------------------------------------------------------------------------------------------------------------
# Reward terms (hand-computed values)
# ----------------------------------------------------------------------------------------------------------------


def test_length_range_reward() -> None:
    reward = LengthRangeReward(ranges=((2, 4), (3, 6)))
    assert reward.name == "length_range"
    short = ["one two three", "w w w w w w", "a b c d e f g h i"]
    detailed = ["a b", "", "a b c d e f"]
    # row 0: |s| = 3 in [2, 4] -> 1; |d| = 2 < 3 -> 2/3; mean 5/6
    # row 1: |s| = 6 > 4 -> 1 - 2/4 = 0.5; |d| = 0 -> 0; mean 0.25
    # row 2: |s| = 9 > 4 -> max(0, 1 - 5/4) = 0; |d| = 6 in [3, 6] -> 1; mean 0.5
    assert team_call(reward, short, detailed) == pytest.approx([5 / 6, 0.25, 0.5])
    with pytest.raises(ValueError, match="0 <= min <= max"):
        LengthRangeReward(ranges=((5, 2),))
    # one range: a single-agent reward on `completions`
    assert LengthRangeReward(ranges=((1, 2),))(prompts=[""], completions=["a b c d"]) == [pytest.approx(0.0)]


def test_length_ratio_reward() -> None:
    reward = LengthRatioReward()  # full reward for 2 <= rho <= 3, ramps to 0 at 1 and 5
    assert reward.name == "length_ratio"
    short = ["a b", "a b c d", "a b", "a b", "", "a b"]
    detailed = ["1 2 3 4 5", "1 2 3 4 5 6", "1 2 3 4 5 6 7 8", "1 2 3 4 5 6 7 8 9 10", "1 2", "1 2"]
    # rho = 2.5 -> 1; 1.5 -> (1.5 - 1)/(2 - 1) = 0.5; 4 -> (5 - 4)/(5 - 3) = 0.5; 5 -> 0; |s| = 0 -> 0; 1 -> 0
    assert team_call(reward, short, detailed) == pytest.approx([1.0, 0.5, 0.5, 0.0, 0.0, 0.0])
    loose = LengthRatioReward(low=1.6, high=3.2, floor=1.1, ceiling=5.0)
    assert loose.ratio_score(1.35) == pytest.approx(0.5) and loose.ratio_score(4.1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="floor <= low <= high <= ceiling"):
        LengthRatioReward(low=3.0, high=2.0)


def test_lexical_diversity_reward() -> None:
    # TTR("the cat the dog") = 3/4, TTR("a a a a") = 1/4 -> mean 0.5
    reward = LexicalDiversityReward(min_words=1)
    assert reward.name == "lexical_diversity"
    assert team_call(reward, ["the cat the dog"], ["a a a a"]) == [pytest.approx(0.5)]
    # default min_words=5: "x" has 1 word -> 0; "one two three four five" -> 1; mean 0.5
    assert team_call(LexicalDiversityReward(), ["x"], ["one two three four five"]) == [pytest.approx(0.5)]
    # agents=[1]: only the detailed summary counts
    assert team_call(LexicalDiversityReward(min_words=1, agents=[1]), ["the cat the dog"], ["a a a a"]) == [0.25]
    # relative to the source: TTR(x = "a b a b") = 0.5; TTR("a b c d") = 1, TTR("a a b b") = 0.5 -> 0.75 - 0.5
    relative = LexicalDiversityReward(min_words=1, relative_to_source=True)
    values = team_call(relative, ["a b c d", "a b c d"], ["a a b b", "a a b b"], text=["a b a b", None])
    assert values == [pytest.approx(0.25), None]
    with pytest.raises(KeyError, match="'text'"):
        team_call(relative, ["a"], ["b"], post=["a b"])


def test_transition_words_reward() -> None:
    reward = TransitionWordsReward()  # saturation 3, agent 1
    assert reward.name == "transition_words" and len(TRANSITION_PHRASES) == 29
    detailed = [
        "First, we tried. However, it failed; as a result we quit. Also, also.",  # first, however, as a result, also
        "For example it was fine, so we left.",  # for example ("so" is not in the list)
        "Alsothe thing",  # "also" only inside a word: nothing
    ]
    assert reward.found(detailed[0]) == ["also", "as a result", "however", "first"]
    # k = 4 -> min(1, 4/3) = 1; k = 1 -> 1/3; k = 0 -> 0
    assert team_call(reward, ["s"] * 3, detailed) == pytest.approx([1.0, 1 / 3, 0.0])
    # saturation=None: the fraction of the list present, k / 29
    assert team_call(TransitionWordsReward(saturation=None), ["s"], detailed[:1]) == [pytest.approx(4 / 29)]
    custom = TransitionWordsReward(phrases=["in fact", "so"], saturation=None)
    assert team_call(custom, ["s", "s"], ["So, in fact, it is.", "also"]) == pytest.approx([1.0, 0.0])
    # agent=0 checks the short summary
    assert team_call(TransitionWordsReward(agent=0), ["However"], ["none"]) == [pytest.approx(1 / 3)]


def test_style_consistency_reward() -> None:
    # V_s = {cat, sat, mat} ("the", "on" are stopwords), V_d = {cat, dog, sat, together} ("a", "and")
    short, detailed = ["The cat sat on the mat."], ["A cat and a dog sat together."]
    reward = StyleConsistencyReward()
    assert reward.name == "style_consistency"
    assert team_call(reward, short, detailed) == [pytest.approx(2 / 5)]  # |{cat, sat}| / |V_s | V_d|
    assert team_call(StyleConsistencyReward(mode="coverage"), short, detailed) == [pytest.approx(2 / 3)]
    assert team_call(reward, ["the a"], ["..."]) == [0.0]  # both vocabularies empty
    with pytest.raises(ValueError, match="mode"):
        StyleConsistencyReward(mode="cosine")  # type: ignore[arg-type]


def test_team_terms_need_both_agents() -> None:
    for term in (LengthRatioReward(), StyleConsistencyReward(), TransitionWordsReward(), LengthRangeReward()):
        with pytest.raises(ValueError, match="agent_completions"):
            term(prompts=["p"], completions=["only agent 0"])
    with pytest.raises(ValueError, match="needs the texts of 2 agents, got 1"):
        LengthRatioReward()(prompts=["p"], completions=["a"], agent_completions=[["a"]])


def test_writing_team_reward_weighted_sum() -> None:
    reward = WritingTeamReward(terms=[LengthRatioReward(), StyleConsistencyReward()], weights=[2.0, 0.5])
    # rho = 5/2 = 2.5 -> 1; V_s = {cat, sat}, V_d = {cat, sat, dog, ran, away} -> jaccard 2/5
    values = team_call(reward, ["cat sat"], ["cat sat dog ran away"])
    assert values == [pytest.approx(2.0 * 1.0 + 0.5 * 2 / 5)]
    by_name = WritingTeamReward(terms=[LengthRatioReward(), StyleConsistencyReward()], weights={"length_ratio": 3.0})
    assert by_name.weights == [3.0, DEFAULT_WRITING_WEIGHTS["style_consistency"]]
    with pytest.raises(ValueError, match="unknown terms \\['rouge'\\]"):
        WritingTeamReward(weights={"rouge": 1.0})
    with pytest.raises(ValueError, match="1 weights for 2 terms"):
        WritingTeamReward(terms=[LengthRatioReward(), StyleConsistencyReward()], weights=[1.0])


def test_writing_team_reward_defaults_and_rouge_term() -> None:
    pytest.importorskip("rouge_score")
    reward = WritingTeamReward()
    assert reward.names == ["length_range", "length_ratio", "vocabulary_ratio", "lexical_diversity",
                            "transition_words", "style_consistency", "rouge_l"]
    assert reward.weights == [1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 1.0]
    short, detailed = [SHORT, SHORT], [DETAILED, DETAILED]
    source = [ROW["text"]] * 2  # the pair is about its source, so the source gate is 1
    values = team_call(reward, short, detailed, reference=["cat ate homework", None], text=source)
    parts = [team_call(f, short, detailed, reference=["cat ate homework", None], text=source) for f in reward.funcs]
    assert parts[-1] == [pytest.approx(1.0), None]  # ROUGE-L of agent 0 ("Cat ate homework.") vs the reference
    without_rouge = sum(w * p[1] for w, p in zip(reward.weights[:-1], parts[:-1]))
    assert values == [pytest.approx(without_rouge + 1.0), pytest.approx(without_rouge)]  # None left out
    with pytest.raises(KeyError, match="'reference'.*reference_column=None"):
        team_call(reward, short, detailed, text=["x", "x"])
    no_reference = WritingTeamReward(reference_column=None)
    assert "rouge_l" not in no_reference.names
    assert team_call(no_reference, short, detailed, text=source) == [pytest.approx(without_rouge)] * 2
    # the same pair scored against a source it never mentions is gated to 0 (issue 55: before, it kept its score)
    assert team_call(no_reference, short, detailed, text=["x", "x"]) == [0.0, 0.0]


def test_writing_team_reward_through_team_reward() -> None:
    """The terms run inside trl-marl's `TeamReward` with chat completions, as the trainer calls them."""
    pytest.importorskip("rouge_score")
    writing = WritingTeamReward()
    chat = [[[{"role": "assistant", "content": SHORT}]], [[{"role": "assistant", "content": DETAILED}]]]
    prompts = [["p0"], ["p1"]]
    combined, _ = TeamReward([writing])(prompts, chat, [ROW], [Transcript()], turn=1)
    separate, _ = TeamReward(writing.funcs, writing.weights)(prompts, chat, [ROW], [Transcript()], turn=1)
    expected = team_call(writing, [SHORT], [DETAILED], **{k: [v] for k, v in ROW.items()})
    assert combined[0, 0].item() == pytest.approx(expected[0], rel=1e-6)
    assert (separate[0] * TeamReward(writing.funcs, writing.weights).weights).sum().item() == pytest.approx(
        expected[0], rel=1e-6
    )


def test_magrpo_trains_on_the_writing_task(tmp_path: Any) -> None:
    """One MAGRPO step over two turns with a toy model: the trainer accepts the env, the terms are logged."""
    pytest.importorskip("rouge_score")
    import torch

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        tokenizer = build_toy_tokenizer()
        team_reward = WritingTeamReward()
        args = MAGRPOConfig(
            output_dir=str(tmp_path / "out"), num_agents=2, num_turns=2, num_generations=2,
            per_device_train_batch_size=4, max_completion_length=4, max_steps=1, logging_steps=1, report_to="none",
            save_strategy="no", disable_tqdm=True, reward_weights=team_reward.weights, seed=0,
        )
        train_dataset = datasets.Dataset.from_dict({"text": ["My cat ate my homework."] * 4,
                                                    "reference": ["cat ate homework", None] * 2})
        trainer = MAGRPOTrainer(
            model=build_toy_model(tokenizer, hidden_size=32, num_layers=1), processing_class=tokenizer,
            reward_funcs=team_reward.funcs, env=CooperativeWritingEnv(num_turns=2), args=args,
            train_dataset=train_dataset,
        )
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    rollout = trainer.last_rollout
    assert [t.turn for t in rollout.turns] == [1, 2]
    assert rollout.turns[1].prompts[0][0].startswith(SUMMARY_INSTRUCTION_PREFIX)
    assert "Your partner's detailed summary:" in rollout.turns[1].prompts[0][0]
    logged = set().union(*(h.keys() for h in trainer.state.log_history))
    for name in team_reward.names:
        assert f"rewards/{name}/mean" in logged and f"turn_2/rewards/{name}/mean" in logged


# ----------------------------------------------------------------------------------------------------------------
# TL;DR loader (datasets.load_dataset monkeypatched: the Hub is not reached in tests)
# ----------------------------------------------------------------------------------------------------------------

TLDR_ROWS = {
    "prompt": [
        "SUBREDDIT: r/relationships\n\nTITLE: My [23F] boyfriend forgot my birthday\n\nPOST: He said he was busy "
        "with work.\n\nWe have been dating for two years.\n\nTL;DR:",
        "SUBREDDIT: r/cats\n\nTITLE: Cat ate my homework\n\nPOST: The teacher did not believe me.\n\nTL;DR:",
        "Just a post without the usual header. TL;DR:",
    ],
    "completion": [" boyfriend forgot my birthday, says work", " cat ate homework, teacher skeptical", " short"],
}


@pytest.fixture
def fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []

    def load_dataset(name: str, *args: Any, split: str | None = None, **kwargs: Any) -> datasets.Dataset:
        calls.append((name, split))
        return datasets.Dataset.from_dict(TLDR_ROWS)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_parse_tldr_prompt() -> None:
    assert parse_tldr_prompt(TLDR_ROWS["prompt"][1]) == {
        "subreddit": "r/cats", "title": "Cat ate my homework", "post": "The teacher did not believe me."
    }
    assert parse_tldr_prompt(TLDR_ROWS["prompt"][2])["post"] == "Just a post without the usual header."


def test_load_tldr(fake_hub: list[tuple[Any, ...]]) -> None:
    dataset = load_tldr(split="validation")
    assert fake_hub == [("trl-lib/tldr", "validation")]
    assert isinstance(dataset, datasets.Dataset) and dataset.column_names == ["text", "reference"]
    assert dataset[0] == {
        "text": "He said he was busy with work.\n\nWe have been dating for two years.",
        "reference": "boyfriend forgot my birthday, says work",
    }
    assert dataset[2]["text"] == "Just a post without the usual header."
    CooperativeWritingEnv().validate_row(dataset[0])
    assert len(load_tldr(max_rows=2)) == 2 and len(load_tldr(max_rows=10)) == 3
    titled = load_tldr(max_rows=1, include_title=True)
    assert titled[0]["text"].startswith("My [23F] boyfriend forgot my birthday\n\nHe said")


def test_load_tldr_rejects_other_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "load_dataset",
                        lambda *a, **k: datasets.Dataset.from_dict({"post": ["x"], "summary": ["y"]}))
    with pytest.raises(ValueError, match="lacks \\['prompt', 'completion'\\]"):
        load_tldr()
    with pytest.raises(ValueError, match="max_rows"):
        load_tldr(max_rows=-1)
