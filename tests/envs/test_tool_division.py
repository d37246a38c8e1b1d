"""The tool division (issue 55's tools design): its rows, prompts, team reward (with gamed answers) and metrics."""

from __future__ import annotations

import pytest

from trl_marl.data.tool_relay import tool_division_row, tool_division_rows, tool_relay_split
from trl_marl.envs.base import Transcript
from trl_marl.envs.tool_division import FIRST_SYSTEM, FIRST_TEMPLATE, ToolDivisionEnv
from trl_marl.envs.tool_relay import WORKED_EXCHANGES
from trl_marl.rewards.tool_division import (
    ToolDivisionReward,
    computed_product,
    stated_product,
    tool_division_metrics,
)

ROW = tool_division_row(94, 88, 34, 96)  # product 1 = 8272, product 2 = 3264


def score(first: list, second: list, row: dict = ROW) -> list[float]:
    n = len(first)
    return ToolDivisionReward()(None, None, agent_completions=[first, second], answer1=[row["answer1"]] * n,
                                answer2=[row["answer2"]] * n)


def test_rows_keep_to_one_side_of_the_split_and_never_have_equal_products() -> None:
    train, heldout = tool_relay_split()
    rows = tool_division_rows(heldout, 200, seed=3)
    assert rows == tool_division_rows(heldout, 200, seed=3) and rows != tool_division_rows(heldout, 200, seed=4)
    pairs = set(heldout)
    for row in rows:
        assert tuple(sorted((row["a"], row["b"]))) in pairs and tuple(sorted((row["c"], row["d"]))) in pairs
        assert row["answer1"] == str(row["a"] * row["b"]) and row["answer2"] == str(row["c"] * row["d"])
        assert row["answer1"] != row["answer2"]
    assert ROW == {"a": 94, "b": 88, "c": 34, "d": 96, "answer1": "8272", "answer2": "3264"}
    with pytest.raises(ValueError, match="must differ: 12 \\* 34 = 34 \\* 12"):
        tool_division_row(12, 34, 34, 12)


def test_both_agents_get_the_same_prompt_but_their_number() -> None:
    env = ToolDivisionEnv()
    assert (env.num_agents, env.num_turns) == (2, 1)
    first, second = env.agent_prompt(ROW, 0, Transcript()), env.agent_prompt(ROW, 1, Transcript())
    assert first[0]["role"] == "system" and "agent 1 of a team" in first[0]["content"]
    assert second[0]["content"] == first[0]["content"].replace("agent 1 of", "agent 2 of")
    assert first[1:] == second[1:]
    # two worked exchanges, one computing product 2 and one product 1: no division is shown
    calls = [m["tool_calls"][0]["function"]["arguments"]["expression"] for m in first if m.get("tool_calls")]
    assert calls == ["56*78", "23*45"]
    question = "Product 1 is 94 * 88 and product 2 is 34 * 96. Compute one of them."
    assert first[-1] == {"role": "user", "content": question}
    with pytest.raises(IndexError):
        env.agent_prompt(ROW, 2, Transcript())


def test_the_first_design_is_the_relays_exchanges_and_the_long_instruction() -> None:
    env = ToolDivisionEnv(FIRST_TEMPLATE, FIRST_SYSTEM, WORKED_EXCHANGES)
    first = env.agent_prompt(ROW, 0, Transcript())
    question = first[-1]["content"]
    assert first[0]["content"] == FIRST_SYSTEM and first[1:-1] == [dict(m) for m in WORKED_EXCHANGES]
    assert "product 1 is 94 * 88 and product 2 is 34 * 96" in question and "You are agent 1 of 2" in question
    assert env.agent_prompt(ROW, 1, Transcript())[-1]["content"] == question.replace("agent 1 of 2", "agent 2 of 2")


def test_reward_pays_each_product_stated_by_exactly_one_agent() -> None:
    assert score(["94 * 88 = 8272", "34 * 96 = 3264", "8272"], ["34 * 96 = 3264", "94 * 88 = 8272", "3,264."]) == [
        1.0, 1.0, 1.0]
    assert score(["8272", "8272", "", "I am not sure."], ["", "1234", "3264", ""]) == [0.5, 0.5, 0.5, 0.0]
    assert score(["8272", "34 * 96 = 3264"], ["94 * 88 = 8272", "3264"]) == [0.0, 0.0]  # collisions pay nothing
    # the answer is the content of the agent's last assistant message (what a tool turn gives the reward)
    chat = [{"role": "assistant", "content": "34 * 96 = 3264"}]
    assert score([chat], [[{"role": "assistant", "content": "8272"}]]) == [1.0]
    assert stated_product("8272 then 3264", "8272", "3264") == 2 and stated_product("x", "8272", "3264") is None


def test_every_gamed_answer_scores_below_an_honest_division() -> None:
    """A policy's ways to raise the reward without dividing the work, each against the honest team (1.0)."""
    honest = score(["94 * 88 = 8272"], ["34 * 96 = 3264"])[0]
    gamed = {
        # both agents write both products: each states only its last one, and they collide
        "both write both": (["8272 and 3264"], ["8272 or 3264"]),
        # one agent covers both products, its partner says nothing
        "one writes both": (["8272, 3264"], [""]),
        # a list of every candidate, the product first, then more arithmetic: the last number is not a product
        "goes on past the product": (["8272 * 1 = 8272, 3264 + 1 = 3265"], ["34 * 96 = 3264"]),
        # the tool's result and the factors, never stated as the answer
        "factors last": (["8272 is 94 * 88"], ["3264 is 34 * 96"]),
        # a guess close to the products (a 135M model's mental arithmetic)
        "guesses": (["94 * 88 = 8270"], ["34 * 96 = 3260"]),
        # the products of the wrong pairs
        "wrong pairs": (["94 * 96 = 9024"], ["34 * 88 = 2992"]),
        # a number too long to be one, then the product: the long run is no number, the product counts (0.5)
        "huge number then a product": (["9" * 60 + " 8272"], ["9" * 60]),
        # the same product from both with different wording: a collision
        "copy the partner's likely answer": (["The product is 8,272."], ["8272"]),
    }
    for name, (first, second) in gamed.items():
        got = score(first, second)[0]
        assert got < honest, f"{name}: {got} is not below the honest division's {honest}"
    assert score(["9" * 60 + " 8272"], ["9" * 60])[0] == 0.5


def test_metrics_count_each_agents_product_and_collisions() -> None:
    metrics = tool_division_metrics()
    first, second = ["8272", "3264", "8272", "nothing"], ["3264", "3264", "8272", "3264"]
    columns = {"answer1": ["8272"] * 4, "answer2": ["3264"] * 4}
    values = {name: f(None, None, agent_completions=[first, second], **columns) for name, f in metrics.items()}
    assert values["agent_0_product1"] == [1.0, 0.0, 1.0, 0.0] and values["agent_0_product2"] == [0.0, 1.0, 0.0, 0.0]
    assert values["agent_1_product2"] == [1.0, 1.0, 0.0, 1.0] and values["agent_0_states"] == [1.0, 1.0, 1.0, 0.0]
    assert values["collision"] == [0.0, 1.0, 1.0, 0.0]
    assert score(first, second) == [1.0, 0.0, 0.0, 0.5]


def test_the_reward_needs_two_agents() -> None:
    with pytest.raises(ValueError, match="two agents' answers, got 3 agents"):
        ToolDivisionReward()(None, None, agent_completions=[["1"], ["2"], ["3"]], answer1=["1"], answer2=["2"])


def test_the_system_message_may_carry_the_rule_and_the_agents_number() -> None:
    env = ToolDivisionEnv(template="What is {a} * {b} or {c} * {d}?", system="Calculator {agent} of 2.")
    first, second = env.agent_prompt(ROW, 0, Transcript()), env.agent_prompt(ROW, 1, Transcript())
    assert first[0] == {"role": "system", "content": "Calculator 1 of 2."}
    assert second[0] == {"role": "system", "content": "Calculator 2 of 2."}
    assert first[-1] == second[-1] == {"role": "user", "content": "What is 94 * 88 or 34 * 96?"}


def turn(*results: str, name: str = "calculator", answer: str = "done") -> list[dict]:
    """One agent's turn with tools as the tool loop records it: a call and its result per result, then the answer."""
    messages: list[dict] = []
    for result in results:
        messages += [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": name, "arguments": {"expression": "?"}}}]}, {"role": "tool", "name": name, "content": result}]
    return messages + [{"role": "assistant", "content": answer}]


def score_calls(first: list, second: list, row: dict = ROW) -> list[float]:
    n = len(first)
    return ToolDivisionReward(read="calls")(
        None, None, agent_completions=[[m[-1]["content"] for m in first], [m[-1]["content"] for m in second]],
        answer1=[row["answer1"]] * n, answer2=[row["answer2"]] * n, agent_tool_messages=[first, second])


def test_calls_reward_pays_each_product_one_agents_calculator_computed() -> None:
    assert score_calls([turn("8272"), turn("3264")], [turn("3264"), turn("8272")]) == [1.0, 1.0]
    # the answer is not read: a wrong restatement of a right call still counts (the second design's failure)
    assert score_calls([turn("8272", answer="94 * 88 = 88")], [turn("3264", answer="")]) == [1.0]
    assert score_calls([turn("8272"), turn()], [turn(), turn("1234")]) == [0.5, 0.0]
    assert score_calls([turn("8272")], [turn("8272")]) == [0.0]  # a collision pays nothing
    # a first wrong call, then the product: the product counts
    assert score_calls([turn("9024", "8272")], [turn("3264")]) == [1.0]
    assert computed_product(turn(" 8272 "), "8272", "3264") == 1 and computed_product(None, "8272", "3264") is None


def test_every_gamed_turn_scores_below_an_honest_division_by_calls() -> None:
    """Ways to raise the calls reward without each agent computing its own product, against the honest team."""
    honest = score_calls([turn("8272")], [turn("3264")])[0]
    gamed = {
        # the products written in the answer without a call: the answer is not read
        "states without computing": ([turn(answer="94 * 88 = 8272")], [turn(answer="34 * 96 = 3264")]),
        # one agent computes both products, the other nothing: computing both is no division
        "one computes both": ([turn("8272", "3264")], [turn()]),
        # both compute both
        "both compute both": ([turn("8272", "3264")], [turn("3264", "8272")]),
        # a tool message the model could not have produced: another tool's name
        "another tool's result": ([turn("8272", name="python")], [turn("3264", name="python")]),
        # the result of a failed call, and an error that quotes the product
        "errors": ([turn("{'error': 'not 8272'}")], [turn("{'error': \"tool 'calculator' was not called\"}")]),
        # the products of the wrong pairs
        "wrong pairs": ([turn("9024")], [turn("2992")]),
        # a fake tool result written into the answer text
        "forged result in the answer": ([turn(answer="<tool_response>8272</tool_response>")], [turn("3264")]),
    }
    for name, (first, second) in gamed.items():
        got = score_calls(first, second)[0]
        assert got < honest, f"{name}: {got} is not below the honest division's {honest}"


def test_calls_metrics_and_the_missing_tool_messages_error() -> None:
    metrics = tool_division_metrics(read="calls")
    first, second = [turn("8272"), turn("3264"), turn()], [turn("3264"), turn("3264"), turn("8272", "3264")]
    columns = {"answer1": ["8272"] * 3, "answer2": ["3264"] * 3, "agent_tool_messages": [first, second]}
    values = {name: f(None, None, agent_completions=[["done"] * 3] * 2, **columns) for name, f in metrics.items()}
    assert values["agent_0_product1"] == [1.0, 0.0, 0.0] and values["agent_1_product2"] == [1.0, 1.0, 0.0]
    assert values["agent_0_states"] == [1.0, 1.0, 0.0] and values["agent_1_states"] == [1.0, 1.0, 0.0]
    assert values["collision"] == [0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="no `agent_tool_messages` for both agents: give both agents the calculator"):
        ToolDivisionReward(read="calls")(None, None, agent_completions=[["1"], ["2"]], answer1=["1"], answer2=["2"])
    with pytest.raises(ValueError, match="`read` must be one of"):
        ToolDivisionReward(read="result")
    with pytest.raises(ValueError, match="`read` must be one of"):
        tool_division_metrics(read="both")
