"""Tests of the collaborative-debate environments (`trl_marl.envs.debate`): exact prompts, feedback, validation."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.envs.debate import (
    ANLI_ANSWER_FORMAT,
    GSM8K_ANSWER_FORMAT,
    TEMPLATE_FIELDS,
    DebateEnv,
    ToyDebateEnv,
    toy_candidate,
)
from trl_marl.toy import TOY_CHARS

ROW = {"question": "  What is 3 + 4?\n", "answer": "7"}
FMT = "Answer in \\boxed{}."
TURNS = (("7", "I think 8.", "12"), ("7", "7", "8"))

# ----- the pieces of the default templates, spelled out (the snapshot) -----
FIRST = "Question: What is 3 + 4?\n\nAnswer in \\boxed{}."
REVISE = (
    "Using the answers from the other agents as additional information, give an updated answer. "
    "The original question is: What is 3 + 4?\n\nAnswer in \\boxed{}."
)
SELF_STRING = (
    "Review your previous answers, find any mistakes in them, and give an improved answer. "
    "The original question is: What is 3 + 4?\n\nAnswer in \\boxed{}."
)
SELF_CHAT = (
    "Review your previous answer, find any mistakes in it, and give an improved answer. "
    "The original question is: What is 3 + 4?\n\nAnswer in \\boxed{}."
)
HEAD = "Question: What is 3 + 4?\n\nYour previous answers:\n\n"

# agent 0 when A = 1, else agent 1 ("Agent 2"), whose partners are Agent 1 (and Agent 3)
STRING_PROMPTS: dict[tuple[int, int], str] = {
    (1, 1): FIRST,
    (1, 2): HEAD + "Turn 1: 7\n\n" + SELF_STRING,
    (1, 3): HEAD + "Turn 1: 7\n\nTurn 2: 7\n\n" + SELF_STRING,
    (2, 1): FIRST,
    (2, 2): HEAD + "Turn 1: I think 8.\n\nAnswers from the other agents:\n\nAgent 1 (turn 1): 7\n\n" + REVISE,
    (2, 3): HEAD + "Turn 1: I think 8.\n\nTurn 2: 7\n\nAnswers from the other agents:\n\n"
    "Agent 1 (turn 1): 7\n\nAgent 1 (turn 2): 7\n\n" + REVISE,
    (3, 1): FIRST,
    (3, 2): HEAD + "Turn 1: I think 8.\n\nAnswers from the other agents:\n\n"
    "Agent 1 (turn 1): 7\n\nAgent 3 (turn 1): 12\n\n" + REVISE,
    (3, 3): HEAD + "Turn 1: I think 8.\n\nTurn 2: 7\n\nAnswers from the other agents:\n\n"
    "Agent 1 (turn 1): 7\n\nAgent 3 (turn 1): 12\n\nAgent 1 (turn 2): 7\n\nAgent 3 (turn 2): 8\n\n" + REVISE,
}


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


CHAT_PROMPTS: dict[tuple[int, int], list[dict[str, str]]] = {
    (1, 1): [user(FIRST)],
    (1, 2): [user(FIRST), assistant("7"), user(SELF_CHAT)],
    (1, 3): [user(FIRST), assistant("7"), user(SELF_CHAT), assistant("7"), user(SELF_CHAT)],
    (2, 1): [user(FIRST)],
    (2, 2): [user(FIRST), assistant("I think 8."), user("Answers from the other agents:\n\nAgent 1: 7\n\n" + REVISE)],
    (2, 3): [
        user(FIRST),
        assistant("I think 8."),
        user("Answers from the other agents:\n\nAgent 1: 7\n\n" + REVISE),
        assistant("7"),
        user("Answers from the other agents:\n\nAgent 1: 7\n\n" + REVISE),
    ],
    (3, 1): [user(FIRST)],
    (3, 2): [
        user(FIRST),
        assistant("I think 8."),
        user("Answers from the other agents:\n\nAgent 1: 7\n\nAgent 3: 12\n\n" + REVISE),
    ],
    (3, 3): [
        user(FIRST),
        assistant("I think 8."),
        user("Answers from the other agents:\n\nAgent 1: 7\n\nAgent 3: 12\n\n" + REVISE),
        assistant("7"),
        user("Answers from the other agents:\n\nAgent 1: 7\n\nAgent 3: 8\n\n" + REVISE),
    ],
}


def transcript_before(turn: int, num_agents: int) -> Transcript:
    transcript = Transcript()
    for responses in TURNS[: turn - 1]:
        transcript = transcript.extend(responses[:num_agents])
    return transcript


class ExactVerifier:
    """A verifier stub: 1.0 when the response (stripped) is the gold answer."""

    def score(self, response: str, gold: Any) -> float:
        return 1.0 if response.strip() == str(gold) else 0.0


# ----------------------------------------------------------------------------------------------------------------
# Snapshots
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_agents", [1, 2, 3])
@pytest.mark.parametrize("turn", [1, 2, 3])
def test_string_prompts_snapshot(num_agents, turn):
    env = DebateEnv(num_agents=num_agents, num_turns=3, answer_format=FMT)
    agent = min(1, num_agents - 1)
    assert env.agent_prompt(ROW, agent, transcript_before(turn, num_agents)) == STRING_PROMPTS[num_agents, turn]


@pytest.mark.parametrize("num_agents", [1, 2, 3])
@pytest.mark.parametrize("turn", [1, 2, 3])
def test_chat_prompts_snapshot(num_agents, turn):
    env = DebateEnv(num_agents=num_agents, num_turns=3, answer_format=FMT, chat=True)
    agent = min(1, num_agents - 1)
    assert env.agent_prompt(ROW, agent, transcript_before(turn, num_agents)) == CHAT_PROMPTS[num_agents, turn]


def test_first_agent_sees_others_in_order_and_not_itself():
    env = DebateEnv(num_agents=3, num_turns=2, answer_format=FMT)
    prompt = env.agent_prompt(ROW, 0, transcript_before(2, 3))
    assert prompt == (HEAD + "Turn 1: 7\n\nAnswers from the other agents:\n\n"
                      "Agent 2 (turn 1): I think 8.\n\nAgent 3 (turn 1): 12\n\n" + REVISE)
    assert env.prompts(ROW, Transcript()) == [FIRST] * 3


def test_default_answer_format_and_task_formats():
    env = DebateEnv()
    assert (env.num_agents, env.num_turns) == (3, 3)
    assert env.agent_prompt(ROW, 0, Transcript()) == "Question: What is 3 + 4?\n\n" + GSM8K_ANSWER_FORMAT
    assert "\\boxed{answer}" in GSM8K_ANSWER_FORMAT
    assert all(label in ANLI_ANSWER_FORMAT for label in ("entailment", "neutral", "contradiction"))


def test_history_last_keeps_only_the_previous_turn():
    env = DebateEnv(num_agents=3, num_turns=3, answer_format=FMT, history="last")
    prompt = env.agent_prompt(ROW, 1, transcript_before(3, 3))
    assert prompt == (HEAD + "Turn 2: 7\n\nAnswers from the other agents:\n\n"
                      "Agent 1 (turn 2): 7\n\nAgent 3 (turn 2): 8\n\n" + REVISE)
    chat = DebateEnv(num_agents=3, num_turns=3, answer_format=FMT, history="last", chat=True)
    assert chat.agent_prompt(ROW, 1, transcript_before(3, 3)) == [
        user(FIRST), assistant("7"), user("Answers from the other agents:\n\nAgent 1: 7\n\nAgent 3: 8\n\n" + REVISE)
    ]
    # the first turn shows no previous turn (it used to index the empty transcript's "last" turn and raise)
    assert chat.agent_prompt(ROW, 1, Transcript()) == [user(FIRST)]
    assert env.agent_prompt(ROW, 1, Transcript()) == FIRST


def test_system_prompt_string_and_chat():
    env = DebateEnv(num_agents=2, answer_format=FMT, system_prompt="You are agent {agent}.")
    # the system prompt is plain text, not a template
    assert env.agent_prompt(ROW, 0, Transcript()) == "You are agent {agent}.\n\n" + FIRST
    chat = DebateEnv(num_agents=2, answer_format=FMT, system_prompt="Be careful.", chat=True)
    assert chat.agent_prompt(ROW, 0, Transcript()) == [{"role": "system", "content": "Be careful."}, user(FIRST)]


def test_custom_templates_with_every_field():
    env = DebateEnv(
        num_agents=2,
        num_turns=2,
        first_turn_template="[{agent}/{turn}] {question} ({answer_format})",
        revision_template="[{agent}/{turn}] {question} mine={own_answers} theirs={other_answers} {feedback}!",
        answer_format="num",
    )
    assert env.agent_prompt(ROW, 1, Transcript()) == "[2/1] What is 3 + 4? (num)"
    assert env.agent_prompt(ROW, 1, transcript_before(2, 2)) == (
        "[2/2] What is 3 + 4? mine=Turn 1: I think 8. theirs=Agent 1 (turn 1): 7 !"
    )
    assert set(TEMPLATE_FIELDS) == {"question", "answer_format", "own_answers", "other_answers", "feedback",
                                    "agent", "turn", "private"}


@pytest.mark.parametrize("template", ["{question} {unknown}", "{question} {}", "{0}", "{question"])
def test_bad_templates_are_rejected(template):
    with pytest.raises(ValueError, match="first_turn_template"):
        DebateEnv(first_turn_template=template)
    with pytest.raises(ValueError, match="revision_template"):
        DebateEnv(revision_template=template)


# ----------------------------------------------------------------------------------------------------------------
# Verifier scores as feedback
# ----------------------------------------------------------------------------------------------------------------


def play(env: DebateEnv, row: dict[str, Any], turns: tuple[tuple[str, ...], ...]) -> Transcript:
    """Extends a transcript as the trainers do: feedback is computed on the extended transcript and attached."""
    transcript = Transcript()
    for responses in turns:
        extended = transcript.extend(responses)
        feedback = env.feedback(row, extended)
        transcript = transcript.extend(responses, feedback) if feedback is not None else extended
    return transcript


def test_verifier_scores_off_by_default():
    env = DebateEnv(num_agents=3, answer_format=FMT)
    assert env.feedback(ROW, transcript_before(2, 3)) is None
    assert env.required_columns == ("question",)


def test_verifier_scores_shown_per_agent():
    env = DebateEnv(num_agents=3, num_turns=3, answer_format=FMT, show_verifier_scores=True, verifier=ExactVerifier())
    assert env.required_columns == ("question", "answer")
    assert env.feedback(ROW, Transcript()) is None
    transcript = play(env, ROW, TURNS)
    assert transcript[0].feedback == (
        "Verifier scores after turn 1: your answer 1.00, Agent 2 0.00, Agent 3 0.00.",
        "Verifier scores after turn 1: your answer 0.00, Agent 1 1.00, Agent 3 0.00.",
        "Verifier scores after turn 1: your answer 0.00, Agent 1 1.00, Agent 2 0.00.",
    )
    prompt = env.agent_prompt(ROW, 1, transcript)
    assert prompt == (
        HEAD + "Turn 1: I think 8.\n\nTurn 2: 7\n\nAnswers from the other agents:\n\n"
        "Agent 1 (turn 1): 7\n\nAgent 3 (turn 1): 12\n\nAgent 1 (turn 2): 7\n\nAgent 3 (turn 2): 8\n\n"
        "Verifier scores after turn 1: your answer 0.00, Agent 1 1.00, Agent 3 0.00.\n"
        "Verifier scores after turn 2: your answer 1.00, Agent 1 1.00, Agent 3 0.00.\n\n" + REVISE
    )
    chat = DebateEnv(num_agents=3, answer_format=FMT, show_verifier_scores=True, verifier=ExactVerifier(), chat=True)
    messages = chat.agent_prompt(ROW, 1, play(chat, ROW, TURNS[:1]))
    assert messages[-1] == user(
        "Answers from the other agents:\n\nAgent 1: 7\n\nAgent 3: 12\n\n"
        "Verifier scores after turn 1: your answer 0.00, Agent 1 1.00, Agent 3 0.00.\n\n" + REVISE
    )


def test_verifier_scores_self_correction():
    env = DebateEnv(num_agents=1, num_turns=2, answer_format=FMT, show_verifier_scores=True, verifier=ExactVerifier())
    transcript = play(env, ROW, (("8",),))
    assert transcript[0].feedback == ("Verifier score after turn 1: your answer 0.00.",)
    assert env.agent_prompt(ROW, 0, transcript) == (
        HEAD + "Turn 1: 8\n\nVerifier score after turn 1: your answer 0.00.\n\n" + SELF_STRING
    )


def test_verifier_scores_with_the_answer_verifier():
    from trl_marl.rewards.verifier import AnswerVerifier

    env = DebateEnv(num_agents=2, num_turns=2, show_verifier_scores=True, verifier=AnswerVerifier(task="math"))
    transcript = play(env, ROW, (("3 + 4 = \\boxed{7}", "It is 8."),))
    assert transcript[0].feedback == (
        "Verifier scores after turn 1: your answer 1.00, Agent 2 0.00.",
        "Verifier scores after turn 1: your answer 0.00, Agent 1 1.00.",
    )


def test_verifier_scores_need_a_verifier():
    with pytest.raises(ValueError, match="verifier"):
        DebateEnv(show_verifier_scores=True)
    with pytest.raises(TypeError, match="score"):
        DebateEnv(show_verifier_scores=True, verifier=object())  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------------------------------


def test_validate_row_checks_column_presence_only():
    env = DebateEnv(question_column="problem")
    env.validate_row(dict.fromkeys(["problem", "answer"]))  # what the trainers call: values are None
    with pytest.raises(KeyError, match="problem"):
        env.validate_row(dict.fromkeys(["question"]))
    scored = DebateEnv(show_verifier_scores=True, verifier=ExactVerifier(), answer_column="gold")
    scored.validate_row(dict.fromkeys(["question", "gold"]))
    with pytest.raises(KeyError, match="gold"):
        scored.validate_row(dict.fromkeys(["question", "answer"]))


def test_bad_arguments_and_transcripts():
    with pytest.raises(ValueError, match="history"):
        DebateEnv(history="some")  # type: ignore[arg-type]
    env = DebateEnv(num_agents=2, num_turns=2)
    with pytest.raises(ValueError, match="agent_index"):
        env.agent_prompt(ROW, 2, Transcript())
    with pytest.raises(ValueError, match="3 responses for 2 agents"):
        env.agent_prompt(ROW, 0, Transcript().extend(["1", "2", "3"]))
    with pytest.raises(ValueError):
        DebateEnv(num_agents=0)


# ----------------------------------------------------------------------------------------------------------------
# Private context and prefilled answers (agents that hold different information)
# ----------------------------------------------------------------------------------------------------------------

HIDDEN = {
    "question": "What is a + b?", "answer": "12",
    "context_0": " You know that a = 7. ", "context_1": "You know that b = 5.",
    "prefill_0": "I know that a = 7. So a + b =", "prefill_1": "I know that b = 5. So a + b =",
}
PRIVATE = ["context_0", "context_1"]
PREFILL = ["prefill_0", "prefill_1"]
REVISE_HIDDEN = (
    "Using the answers from the other agents as additional information, give an updated answer. "
    "The original question is: What is a + b?\n\nAnswer in \\boxed{}."
)


def test_private_context_string_prompts_show_each_agent_its_own_fact_only():
    env = DebateEnv(num_agents=2, num_turns=2, answer_format=FMT, private_columns=PRIVATE)
    assert env.agent_prompt(HIDDEN, 0, Transcript()) == (
        "Question: What is a + b?\n\nYou know that a = 7.\n\nAnswer in \\boxed{}."
    )
    assert env.agent_prompt(HIDDEN, 1, Transcript()) == (
        "Question: What is a + b?\n\nYou know that b = 5.\n\nAnswer in \\boxed{}."
    )
    turn_1 = Transcript().extend(["9", " 11 "])
    assert env.agent_prompt(HIDDEN, 0, turn_1) == (
        "Question: What is a + b?\n\nYou know that a = 7.\n\nYour previous answers:\n\nTurn 1: 9\n\n"
        "Answers from the other agents:\n\nAgent 2 (turn 1): 11\n\n" + REVISE_HIDDEN
    )
    assert env.agent_prompt(HIDDEN, 1, turn_1) == (
        "Question: What is a + b?\n\nYou know that b = 5.\n\nYour previous answers:\n\nTurn 1: 11\n\n"
        "Answers from the other agents:\n\nAgent 1 (turn 1): 9\n\n" + REVISE_HIDDEN
    )
    assert env.required_columns == ("question", "context_0", "context_1")


def test_private_context_with_one_agent_and_a_custom_template():
    env = DebateEnv(num_agents=1, num_turns=2, private_columns=["hint"], answer_format="num",
                    first_turn_template="[{agent}] {private}{question}",
                    revision_template="{private}again: {own_answers}")
    row = {"question": "Q?", "hint": "The answer is odd."}
    assert env.agent_prompt(row, 0, Transcript()) == "[1] The answer is odd.\n\nQ?"
    assert env.agent_prompt(row, 0, Transcript().extend(["3"])) == "The answer is odd.\n\nagain: Turn 1: 3"


def test_prefilled_answers_in_string_prompts_and_in_every_shown_answer():
    env = DebateEnv(num_agents=2, num_turns=2, answer_format=FMT, private_columns=PRIVATE, prefill_columns=PREFILL)
    assert env.agent_prompt(HIDDEN, 1, Transcript()) == (
        "Question: What is a + b?\n\nYou know that b = 5.\n\nAnswer in \\boxed{}.\n\nI know that b = 5. So a + b ="
    )
    turn_1 = Transcript().extend([" 9.", " 11."])
    assert env.agent_prompt(HIDDEN, 0, turn_1) == (
        "Question: What is a + b?\n\nYou know that a = 7.\n\nYour previous answers:\n\n"
        "Turn 1: I know that a = 7. So a + b = 9.\n\nAnswers from the other agents:\n\n"
        "Agent 2 (turn 1): I know that b = 5. So a + b = 11.\n\n" + REVISE_HIDDEN + "\n\nI know that a = 7. So a + b ="
    )


def test_private_context_and_prefills_in_chat_prompts():
    env = DebateEnv(num_agents=2, num_turns=3, answer_format=FMT, chat=True, system_prompt="Be brief.",
                    private_columns=PRIVATE, prefill_columns=PREFILL)
    first = user("Question: What is a + b?\n\nYou know that a = 7.\n\nAnswer in \\boxed{}.")
    assert env.agent_prompt(HIDDEN, 0, Transcript()) == [
        {"role": "system", "content": "Be brief."}, first, assistant("I know that a = 7. So a + b =")]
    turns = Transcript().extend([" 9.", " 11."]).extend([" 12.", " 12."])
    assert env.agent_prompt(HIDDEN, 0, turns) == [
        {"role": "system", "content": "Be brief."}, first,
        assistant("I know that a = 7. So a + b = 9."),
        user("Answers from the other agents:\n\nAgent 2: I know that b = 5. So a + b = 11.\n\n" + REVISE_HIDDEN),
        assistant("I know that a = 7. So a + b = 12."),
        user("Answers from the other agents:\n\nAgent 2: I know that b = 5. So a + b = 12.\n\n" + REVISE_HIDDEN),
        assistant("I know that a = 7. So a + b ="),
    ]
    # a prefill without private context: the same column may start every agent's answer
    shared = DebateEnv(num_agents=2, num_turns=2, answer_format=FMT, chat=True, prefill_columns=["start", "start"])
    assert shared.agent_prompt({"question": "Q?", "start": "The answer is"}, 1, Transcript()) == [
        user("Question: Q?\n\nAnswer in \\boxed{}."), assistant("The answer is")]
    assert shared.required_columns == ("question", "start")


def test_a_row_without_a_private_column_is_refused_naming_it():
    env = DebateEnv(num_agents=2, num_turns=2, private_columns=PRIVATE, prefill_columns=PREFILL)
    row = {k: v for k, v in HIDDEN.items() if k != "context_1"}
    with pytest.raises(KeyError, match=r"DebateEnv needs the column\(s\) \['context_1'\]"):
        env.agent_prompt(row, 1, Transcript())
    with pytest.raises(KeyError, match=r"\['context_1'\]"):
        env.validate_row(row)


@pytest.mark.parametrize(
    ("column", "value", "error", "message"),
    [
        ("context_0", 7, TypeError, r"'context_0' \(agent 0's private context\) must hold a string, got int"),
        ("context_1", "  \n", ValueError, r"'context_1' \(agent 1's private context\) is empty"),
        ("prefill_0", ["I know"], TypeError, r"'prefill_0' \(agent 0's answer prefill\) must hold a string, got list"),
        ("prefill_1", "", ValueError, r"'prefill_1' \(agent 1's answer prefill\) is empty"),
    ],
)
def test_bad_private_or_prefill_values_name_the_column(column, value, error, message):
    env = DebateEnv(num_agents=2, num_turns=2, private_columns=PRIVATE, prefill_columns=PREFILL)
    row = {**HIDDEN, column: value}
    with pytest.raises(error, match=message):
        env.agent_prompt(row, int(column[-1]), Transcript())
    with pytest.raises(error, match=rf"^train_dataset, row 3: DebateEnv: the column {message}"):
        env.check_row_values(row, "train_dataset", 3)
    env.check_row_values(HIDDEN, "train_dataset", 0)  # a good row passes


def test_the_trainers_dataset_check_refuses_a_bad_private_value_before_training():
    from trl_marl.validation import check_dataset_prompts

    env = DebateEnv(num_agents=2, num_turns=2, private_columns=PRIVATE, prefill_columns=PREFILL)
    indices, prompts = check_dataset_prompts(env, [HIDDEN, HIDDEN], "train_dataset")
    assert indices == [0, 1] and prompts[1][0].endswith("You know that b = 5.\n\n" + GSM8K_ANSWER_FORMAT
                                                        + "\n\nI know that b = 5. So a + b =")
    with pytest.raises(TypeError, match=r"^train_dataset, row 1: DebateEnv: the column 'context_1'"):
        check_dataset_prompts(env, [HIDDEN, {**HIDDEN, "context_1": 5}], "train_dataset")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"private_columns": "context_0"}, TypeError, r"`private_columns` must be a list of column names"),
        ({"private_columns": ["context_0"]}, ValueError, r"`private_columns` needs one column per agent \(2\), got 1"),
        ({"private_columns": ["c", "c"]}, ValueError, r"`private_columns` names a column twice"),
        ({"prefill_columns": ["p", ""]}, ValueError, r"`prefill_columns` must hold non-empty column names"),
        ({"private_columns": PRIVATE, "first_turn_template": "{question}"}, ValueError,
         r"`first_turn_template` does not use the field \{private\}"),
        ({"private_columns": PRIVATE, "revision_template": "{question} {other_answers}"}, ValueError,
         r"`revision_template` does not use the field \{private\}"),
    ],
)
def test_bad_private_or_prefill_settings_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        DebateEnv(num_agents=2, num_turns=2, **kwargs)


def test_chat_revision_template_need_not_repeat_the_private_context():
    """A conversation keeps its first user message, which shows the private context: the chat revision message may
    leave it out."""
    env = DebateEnv(num_agents=2, num_turns=2, chat=True, private_columns=PRIVATE, answer_format=FMT,
                    revision_template="Others: {other_answers}")
    assert env.agent_prompt(HIDDEN, 1, Transcript().extend(["9", "11"]))[-1] == user("Others: Agent 1: 9")


# ----------------------------------------------------------------------------------------------------------------
# Toy debate
# ----------------------------------------------------------------------------------------------------------------


def test_toy_debate_prompts():
    env = ToyDebateEnv(num_agents=3, num_turns=3)
    row = {"question": "12+34", "answer": "46"}
    assert env.agent_prompt(row, 0, Transcript()) == "Q:12+34=A:"
    transcript = Transcript().extend(["46", "45", "47"])
    assert env.agent_prompt(row, 0, transcript) == "Q:12+34=46 45 47?A:"
    assert env.agent_prompt(row, 1, transcript) == "Q:12+34=45 46 47?A:"
    assert env.agent_prompt(row, 2, transcript) == "Q:12+34=47 46 45?A:"
    # only the previous turn is shown; answers are cut to their first number
    transcript = transcript.extend([" 46 ", "4 6", "?"])
    assert env.prompts(row, transcript) == ["Q:12+34=46 4 -?A:", "Q:12+34=4 46 -?A:", "Q:12+34=- 46 4?A:"]
    assert (toy_candidate("A:46"), toy_candidate(""), toy_candidate("-3")) == ("46", "-", "3")


def test_toy_debate_prompts_use_only_toy_characters():
    env = ToyDebateEnv(num_agents=2, num_turns=2)
    row = {"question": "7 + 99", "answer": "106"}
    prompts = env.prompts(row, Transcript()) + env.prompts(row, Transcript().extend(["106 ok", "x"]))
    assert prompts == ["Q:7+99=A:", "Q:7+99=A:", "Q:7+99=106 -?A:", "Q:7+99=- 106?A:"]
    assert all(set(p) <= set(TOY_CHARS) for p in prompts)
    env.validate_row(dict.fromkeys(["question", "answer"]))
    with pytest.raises(KeyError, match="question"):
        env.validate_row(dict.fromkeys(["answer"]))
