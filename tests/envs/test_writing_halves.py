"""Writing with halves (issue 55): `HalvesWritingEnv`'s split, prompts and choice reading, `half_summary_score` on
hand-computed cases, and `HalvesTeamReward` against a corpus of gamed answers that must score below an honest pair."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.envs.writing_halves import (
    HALVES_CENTRAL_INSTRUCTION,
    HALVES_CENTRAL_PREFILL,
    HALVES_DECIDE_INSTRUCTION,
    HALVES_INSTRUCTION,
    HALVES_NUMBERED_PREFILL,
    HALVES_NUMBERED_TEMPLATE,
    HALVES_PREFILL,
    CentralizedHalvesEnv,
    HalvesWritingEnv,
    halves_choice,
    split_halves,
)
from trl_marl.rewards.centralized import CentralizedReward
from trl_marl.rewards.writing_halves import (
    ChoseHalf,
    HalfScore,
    HalvesTeamReward,
    SameHalf,
    half_summary_score,
    halves_metrics,
)

FIRST = ("Read the configuration file from disk and parse each section into a dictionary of options. Missing "
         "sections are created with default values.")
SECOND = ("When a value cannot be converted to an integer, the parser raises ValueError and reports the line number. "
          "Comments starting with a hash are ignored.")
SOURCE = f"{FIRST} {SECOND}"
HONEST = (" first half: Reads the configuration file and parses its sections into options, creating missing sections "
          "with defaults.",
          " second half: Values that are not integers raise ValueError with the line number, and hash comments are "
          "ignored.")


def team_reward(first: str, second: str) -> float:
    return HalvesTeamReward()(None, None, agent_completions=[[first], [second]], text=[SOURCE])[0]


def test_split_halves_cuts_at_the_sentence_end_nearest_the_middle() -> None:
    # sentences of 16, 7, 17 and 7 words: the cut after the second (23 of 47 words) is nearest the middle
    assert split_halves(SOURCE) == (FIRST, SECOND)
    assert split_halves("  Alpha beta.\n\n Gamma   delta epsilon. ") == ("Alpha beta.", "Gamma delta epsilon.")
    assert split_halves("one two three four five") == ("one two", "three four five")  # one sentence: by words
    assert split_halves("One. Two.") == ("One.", "Two.")  # a tie goes to the earlier end
    assert split_halves("word") == ("", "word")


@pytest.mark.parametrize(("answer", "expected"), [
    (" first half: Opens a file.", ("first", "Opens a file.")),
    (" first half:\n\nOpens a file. Then reads it.\nI summarize the second half: ...", ("first", "Opens a file.")),
    (" second half: no stop at the end", ("second", "no stop at the end")),
    (" Second half of the text: Errors.", ("second", "Errors.")),
    (" first: Opens.", ("first", "Opens.")),
    (' "first half" - Opens.', ("first", '" - Opens.')),
    (" first and second half: both.", ("first", "and second half: both.")),  # only the first word chooses
    (" whole text: everything.", (None, "whole text: everything.")),
    (" firstly, opens.", (None, "firstly, opens.")),
    ("", (None, "")),
    ([{"role": "assistant", "content": " second half: Raises."}], ("second", "Raises.")),
    (" 1: Opens a file.", ("first", "Opens a file.")),  # the numbered design: "I summarize part" + the number
    (" 2 - Raises.", ("second", "Raises.")),
    ("2: Raises.", ("second", "Raises.")),
    (" 12 words: about both.", (None, "12 words: about both.")),  # a number that is no part's
    (" 3: Raises.", (None, "3: Raises.")),
])
def test_halves_choice_reads_the_first_word_only(answer: Any, expected: tuple[Any, str]) -> None:
    assert halves_choice(answer) == expected


def test_both_writers_get_the_same_prompt_but_their_number_and_a_prefill() -> None:
    env = HalvesWritingEnv()
    row = {"text": SOURCE}
    prompts = [env.agent_prompt(row, i, Transcript()) for i in (0, 1)]
    assert prompts[0][-1] == {"role": "assistant", "content": HALVES_PREFILL} == prompts[1][-1]
    user = prompts[0][0]["content"]
    assert user.endswith(f"First half:\n{FIRST}\n\nSecond half:\n{SECOND}")
    assert "You are writer 1." in user and 'Start with "I summarize the first half:"' in user
    assert prompts[1][0]["content"] == user.replace("You are writer 1.", "You are writer 2.")
    plain = HalvesWritingEnv(chat=False).agent_prompt(row, 0, Transcript())
    assert plain == f"{user}\n\n{HALVES_PREFILL}"
    assert (env.num_agents, env.num_turns, env.required_columns) == (2, 1, ("text",))
    instruction = HALVES_INSTRUCTION.replace("You are writer {writer}.", "Your name is {writer}.")
    named = HalvesWritingEnv(instruction=instruction, writers=("Robin", "Sam"))
    texts = [named.agent_prompt(row, i, Transcript())[0]["content"] for i in (0, 1)]
    assert texts[0] == user.replace("You are writer 1.", "Your name is Robin.")
    assert texts[1] == user.replace("You are writer 1.", "Your name is Sam.")


def test_bad_rows_agents_and_templates_are_refused() -> None:
    env = HalvesWritingEnv()
    with pytest.raises(ValueError, match="at least two words"):
        env.check_row_values({"text": "word"}, "data", 3)
    with pytest.raises(ValueError, match="at least two words"):
        env.check_row_values({"text": 7}, "data", 0)
    with pytest.raises(IndexError, match="writers 0 and 1"):
        env.agent_prompt({"text": SOURCE}, 2, Transcript())
    with pytest.raises(ValueError, match="one turn"):
        env.agent_prompt({"text": SOURCE}, 0, Transcript().extend(["a", "b"]))
    with pytest.raises(ValueError, match="may only use"):
        HalvesWritingEnv(template="{instruction} {text}")
    with pytest.raises(ValueError, match="two different labels"):
        HalvesWritingEnv(writers=("A", "A"))


HALF, OTHER = "Open the file and return a stream.", "Raise OSError when the path is missing."


@pytest.mark.parametrize(("summary", "expected"), [
    ("Opens a file as a stream.", 1.0),  # C = {open, file, stream}: on_half 1, cover 3/4, varied 1
    ("Opens a stream quickly now.", 5 / 6),  # on_half 2/4 -> 0.5 / 0.6
    ("Opens file stream, path", 0.5),  # wrong 1/4 -> focus 1 - 0.5
    ("Opens a path.", 0.0),  # wrong 1/2 -> focus 0
    ("file file file file file stream", 5 / 9),  # varied (2/6) / 0.6
    ("Raises OSError for a missing path.", 0.0),  # the other half
    ("Opens.", 0.0),  # one word: below the length
    ("Opens the file " + "and then the stream " * 7, 0.0),  # 31 words: above the length
    ("The and of a.", 0.0),  # no content words
])
def test_half_summary_score_by_hand(summary: str, expected: float) -> None:
    assert half_summary_score(summary, HALF, OTHER) == pytest.approx(expected)


GAMED = {
    "unrelated text": " second half: The weather today is sunny with a light breeze over the green hills.",
    "one word repeated": " second half:" + " ValueError" * 20,
    "the other half's summary": " second half: Reads the configuration file and parses sections into a dictionary.",
    "the whole text copied": " second half: " + SOURCE,
    "keywords of both halves": " second half: configuration file section dictionary default ValueError integer line "
                               "comment hash",
    "both halves claimed": " first and second half: Reads sections, raises ValueError on bad integers.",
    "the same half as the partner": HONEST[0],
    "no choice": " whole text: Values that are not integers raise ValueError with the line number.",
    "nothing": "",
}


@pytest.mark.parametrize("name", sorted(GAMED))
def test_gamed_answers_score_below_an_honest_pair(name: str) -> None:
    """Beside an honest partner, a gamed answer adds at most 0.025 (a half scored 0.05) to the partner's 0.5: far
    below the honest pair's 1.0 and below the success threshold of the benchmark (0.55)."""
    assert team_reward(*HONEST) == 1.0
    assert team_reward(HONEST[0], GAMED[name]) <= 0.525
    partner = HONEST[0] if name == "the same half as the partner" else HONEST[1]
    assert team_reward(GAMED[name], partner) <= 0.525


@pytest.mark.parametrize("name", sorted(GAMED))
def test_gamed_answers_never_earn_the_split_bonus(name: str) -> None:
    """With the division bonus (design 5), a gamed answer beside an honest partner still earns no bonus: the pair stays
    at (1 - 0.5) * (0.5 + at most 0.025), far below the honest pair's 1.0."""
    bonus = HalvesTeamReward(split_bonus=0.5)

    def pair(a: str, b: str) -> float:
        return bonus(None, None, agent_completions=[[a], [b]], text=[SOURCE])[0]

    assert pair(*HONEST) == 1.0
    partner = HONEST[0] if name == "the same half as the partner" else HONEST[1]
    assert pair(GAMED[name], partner) <= 0.5 * 0.525 and pair(partner, GAMED[name]) <= 0.5 * 0.525


def test_the_split_bonus_by_hand() -> None:
    weak = half_summary_score("Reads the file.", FIRST, SECOND)  # 0.417 >= the gate 0.25
    weak_first = " first half: Reads the file."
    bonus = HalvesTeamReward(split_bonus=0.5)
    values = bonus(None, None, agent_completions=[[weak_first, weak_first, HONEST[0], " first half: Reads."],
                                                  [HONEST[1], weak_first, HONEST[1], HONEST[1]]], text=[SOURCE] * 4)
    assert values == pytest.approx([0.5 * (weak + 1.0) / 2 + 0.5,  # a split of two summaries above the gate
                                    0.5 * weak / 2,  # a collision: no bonus
                                    1.0,
                                    0.5 * 1.0 / 2])  # "Reads." scores 0 (one word): a split without the bonus
    strict = HalvesTeamReward(split_bonus=0.5, split_gate=0.5)
    assert strict(None, None, agent_completions=[[weak_first], [HONEST[1]]], text=[SOURCE]) == pytest.approx(
        [0.5 * (weak + 1.0) / 2])  # 0.417 < 0.5
    assert HalvesTeamReward()(None, None, agent_completions=[[weak_first], [HONEST[1]]], text=[SOURCE]) == \
        pytest.approx([(weak + 1.0) / 2])  # no bonus by default
    for bad in ({"split_bonus": 1.0}, {"split_bonus": -0.1}, {"split_gate": 0.0}, {"split_gate": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            HalvesTeamReward(**bad)


def test_the_team_reward_counts_each_half_at_its_best_summary() -> None:
    reward = HalvesTeamReward()
    weak_first = " first half: Reads the file."  # C = {read, file}: cover 2 / 12 -> 0.417
    weak = half_summary_score("Reads the file.", FIRST, SECOND)
    assert weak == pytest.approx((2 / 12) / 0.4)
    values = reward(None, None, agent_completions=[[HONEST[0], weak_first, weak_first],
                                                   [weak_first, HONEST[1], weak_first]], text=[SOURCE] * 3)
    assert values == pytest.approx([0.5, (weak + 1.0) / 2, weak / 2])  # the best first-half summary counts once
    swapped = reward(None, None, agent_completions=[[HONEST[1]], [HONEST[0]]], text=[SOURCE])
    assert swapped == [1.0]  # either writer may take either half


def test_choice_metrics_and_errors() -> None:
    team = [[HONEST[0], HONEST[0], " nothing"], [HONEST[1], HONEST[0], " nothing"]]
    assert ChoseHalf(0, "first")(None, None, agent_completions=team) == [1.0, 1.0, 0.0]
    assert ChoseHalf(1, "second")(None, None, agent_completions=team) == [1.0, 0.0, 0.0]
    assert SameHalf()(None, None, agent_completions=team) == [0.0, 1.0, 0.0]
    weak_first = " first half: Reads the file."
    scored = [[HONEST[0], weak_first, " nothing"], [HONEST[1], HONEST[1], HONEST[0]]]
    weak = half_summary_score("Reads the file.", FIRST, SECOND)
    assert HalfScore(0, "first")(None, None, agent_completions=scored, text=[SOURCE] * 3) == pytest.approx(
        [1.0, weak, None])  # no choice: skipped, not a zero
    assert HalfScore(1, "second")(None, None, agent_completions=scored, text=[SOURCE] * 3) == [1.0, 1.0, None]
    assert HalfScore(1, "first")(None, None, agent_completions=scored, text=[SOURCE] * 3) == [None, None, 1.0]
    assert sorted(halves_metrics()) == sorted(["agent_0_first", "agent_0_second", "agent_1_first", "agent_1_second",
                                               "same_half"] + [f"agent_{a}_{h}_score" for a in (0, 1)
                                                               for h in ("first", "second")])
    with pytest.raises(ValueError, match="needs `agent_completions`"):
        HalvesTeamReward()(None, [HONEST[0]], text=[SOURCE])
    with pytest.raises(KeyError, match="'text'"):
        HalvesTeamReward()(None, None, agent_completions=[[HONEST[0]], [HONEST[1]]])
    with pytest.raises(ValueError, match="`half` must be one of"):
        ChoseHalf(0, "third")
    with pytest.raises(ValueError, match="`half` must be one of"):
        HalfScore(0, "third")
    with pytest.raises(KeyError, match="'text'"):
        HalfScore(0, "first")(None, None, agent_completions=scored)


NUMBERED = (" 1: Reads the configuration file and parses its sections into options, creating missing sections with "
            "defaults.",
            " 2: Values that are not integers raise ValueError with the line number, and hash comments are ignored.")


def test_the_numbered_design_prompt_and_prefill() -> None:
    env = HalvesWritingEnv(instruction=HALVES_DECIDE_INSTRUCTION, template=HALVES_NUMBERED_TEMPLATE,
                           prefill=HALVES_NUMBERED_PREFILL)
    prompts = [env.agent_prompt({"text": SOURCE}, i, Transcript()) for i in (0, 1)]
    assert prompts[0][-1] == {"role": "assistant", "content": "I summarize part"} == prompts[1][-1]
    user = prompts[0][0]["content"]
    assert user.endswith(f"Part 1:\n{FIRST}\n\nPart 2:\n{SECOND}")
    assert "You are writer 1: decide whether you summarize part 2 or part 1." in user
    assert prompts[1][0]["content"] == user.replace("writer 1:", "writer 2:")


def test_require_split_pays_a_collision_nothing_by_hand() -> None:
    """The numbered design's reward (`require_split=True`): a split earns its share, as without the option; a
    collision, or an answer without a choice, earns 0 instead of at most 0.5."""
    strict, share = HalvesTeamReward(require_split=True), HalvesTeamReward()
    weak_first = " 1: Reads the file."
    weak = half_summary_score("Reads the file.", FIRST, SECOND)
    pairs = [NUMBERED, (weak_first, NUMBERED[1]), (NUMBERED[1], NUMBERED[0]), (NUMBERED[0], weak_first),
             (NUMBERED[0], " whole text: all."), (NUMBERED[0], "")]
    team = [[a for a, _ in pairs], [b for _, b in pairs]]
    assert strict(None, None, agent_completions=team, text=[SOURCE] * len(pairs)) == pytest.approx(
        [1.0, (weak + 1.0) / 2, 1.0, 0.0, 0.0, 0.0])
    assert share(None, None, agent_completions=team, text=[SOURCE] * len(pairs)) == pytest.approx(
        [1.0, (weak + 1.0) / 2, 1.0, 0.5, 0.5, 0.5])


@pytest.mark.parametrize("name", sorted(GAMED))
def test_gamed_answers_earn_nothing_with_require_split(name: str) -> None:
    """Beside an honest partner a gamed answer earns at most 0.025 (a half at 0.05) when it splits, and nothing when
    it collides or chooses nothing: far below the honest pair's 1.0."""
    strict = HalvesTeamReward(require_split=True)

    def pair(a: str, b: str) -> float:
        return strict(None, None, agent_completions=[[a], [b]], text=[SOURCE])[0]

    assert pair(*NUMBERED) == 1.0 and pair(*HONEST) == 1.0
    partner = HONEST[0] if name == "the same half as the partner" else HONEST[1]
    assert pair(GAMED[name], partner) <= 0.525 and pair(partner, GAMED[name]) <= 0.525
    numbered = GAMED[name].replace(" second half:", " 2:").replace(" first half:", " 1:")
    assert pair(numbered, NUMBERED[0]) <= 0.525


# ---------------------------------------------------------------------------------------- the single-policy arm
CENTRAL_HONEST = (" Reads the configuration file and parses its sections into options, creating missing sections with "
                  "defaults.\nSummary of part 2: Values that are not integers raise ValueError with the line number, "
                  "and hash comments are ignored.")


def central_reward(completions: list[Any]) -> list[float | None]:
    env = CentralizedHalvesEnv(HalvesWritingEnv(chat=True))
    return CentralizedReward(env, HalvesTeamReward(require_split=True))(
        [None] * len(completions), completions, text=[SOURCE] * len(completions))


def test_the_single_policy_prompt_shows_both_parts_and_prefills_the_first_heading() -> None:
    env = CentralizedHalvesEnv(HalvesWritingEnv(chat=True))
    assert env.num_agents == 1 and env.num_turns == 1
    prompt = env.agent_prompt({"text": SOURCE}, 0, Transcript())
    assert prompt[-1] == {"role": "assistant", "content": HALVES_CENTRAL_PREFILL}
    assert prompt[0]["content"] == f"{HALVES_CENTRAL_INSTRUCTION}\n\nPart 1:\n{FIRST}\n\nPart 2:\n{SECOND}"
    plain = CentralizedHalvesEnv(HalvesWritingEnv(chat=False)).agent_prompt({"text": SOURCE}, 0, Transcript())
    assert plain.endswith(f"Part 2:\n{SECOND}\n\nSummary of part 1:")


@pytest.mark.parametrize(("completion", "expected"), [
    (" Opens a file.\nSummary of part 2: Raises OSError.", [" 1: Opens a file.", " 2: Raises OSError."]),
    (" Opens a file. **Summary of Part 2**: Raises OSError.", [" 1: Opens a file.", " 2: Raises OSError."]),
    (" Opens a file.\n\n### SUMMARY OF PART 2: Raises OSError.", [" 1: Opens a file.", " 2: Raises OSError."]),
    ([{"role": "assistant", "content": " A.\nSummary of part 2: B."}], [" 1: A.", " 2: B."]),
    (" Opens a file and raises OSError.", [" 1: Opens a file and raises OSError.", ""]),
])
def test_the_single_policy_completion_splits_at_the_second_heading(completion: Any, expected: list[str]) -> None:
    """Each part is what a writer of the numbered design would have answered; without the second heading the second
    writer wrote nothing."""
    assert CentralizedHalvesEnv(HalvesWritingEnv()).split(completion) == expected


def test_the_single_policy_is_scored_as_the_team_is() -> None:
    """The same two sentences earn the same reward written by one policy as by two writers; a completion without the
    second heading earns 0 (the second part chose nothing), as a team whose second writer wrote nothing."""
    team = HalvesTeamReward(require_split=True)(None, None, agent_completions=[[HONEST[0]], [HONEST[1]]],
                                                 text=[SOURCE])[0]
    weak = " Reads the file.\nSummary of part 2: Bad integers raise ValueError."
    weak_team = HalvesTeamReward(require_split=True)(None, None, agent_completions=[[" 1: Reads the file."],
                                                     [" 2: Bad integers raise ValueError."]], text=[SOURCE])[0]
    assert central_reward([CENTRAL_HONEST, weak]) == pytest.approx([team, weak_team])
    assert team == 1.0 and 0.0 < weak_team < 1.0
    assert central_reward([" Reads the configuration file and parses its sections; values that are not integers "
                           "raise ValueError."]) == [0.0]


CENTRAL_GAMED = {
    "part 2 summarized twice": " Values that are not integers raise ValueError.\nSummary of part 2: Values that are "
                               "not integers raise ValueError with the line number.",
    "the whole text in each part": f" {SOURCE}\nSummary of part 2: {SOURCE}",
    "unrelated text": " The weather is sunny.\nSummary of part 2: The hills are green and the breeze is light.",
    "keywords of both halves": " configuration file section dictionary default ValueError integer\nSummary of part 2: "
                               "configuration file section dictionary default ValueError integer",
    "one word repeated": " file" * 12 + "\nSummary of part 2:" + " ValueError" * 12,
    "the second heading only": " Summary of part 2: Values that are not integers raise ValueError.",
    "nothing": "",
}


@pytest.mark.parametrize("name", sorted(CENTRAL_GAMED))
def test_gamed_single_policy_answers_score_below_an_honest_one(name: str) -> None:
    """At most one part well summarized (0.5 of the team's 1.0), never the honest completion's 1.0."""
    honest, gamed = central_reward([CENTRAL_HONEST, CENTRAL_GAMED[name]])
    assert honest == 1.0
    assert gamed is not None and gamed <= 0.525


def test_the_single_policy_env_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError, match="HalvesWritingEnv"):
        CentralizedHalvesEnv(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Summary of part 1:"):
        CentralizedHalvesEnv(HalvesWritingEnv(), prefill="Summary:")
    with pytest.raises(ValueError, match="one turn"):
        CentralizedHalvesEnv(HalvesWritingEnv()).agent_prompt({"text": SOURCE}, 0, Transcript().extend(["a"]))
