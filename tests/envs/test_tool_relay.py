"""The tool relay task (issue 38): its split, prompts and team reward."""

from __future__ import annotations

from trl_marl.data.tool_relay import tool_relay_row, tool_relay_rows, tool_relay_split
from trl_marl.envs.base import Transcript
from trl_marl.envs.tool_relay import ToolRelayEnv
from trl_marl.rewards.tool_relay import ToolRelayReward, integers, last_integer


def test_split_is_fixed_and_disjoint_by_unordered_pair():
    train, heldout = tool_relay_split()
    assert (train, heldout) == tool_relay_split()
    assert len(train) + len(heldout) == 88 * 89 // 2 and len(heldout) == 400
    assert not set(train) & set(heldout)
    rows = tool_relay_rows(heldout, 50, seed=1)
    assert all(tuple(sorted((r["a"], r["b"]))) in set(heldout) for r in rows)
    assert tool_relay_row(61, 65) == {"a": 61, "b": 65, "question": "What is 61 * 65?", "answer": "3965"}


def test_prompts_give_the_reporter_only_what_the_calculator_agent_said():
    env = ToolRelayEnv()
    row = tool_relay_row(61, 65)
    calc = env.agent_prompt(row, 0, Transcript())
    assert calc[0]["role"] == "system" and calc[-1] == {"role": "user", "content": "What is 61 * 65?"}
    assert sum(1 for m in calc if m.get("tool_calls")) == 2  # the two worked exchanges
    assert "computing 61 * 65" in env.agent_prompt(row, 1, Transcript())[0]["content"]
    transcript = Transcript().extend(["61 * 65 = 3965", "Answer: 4000"])
    reporter = env.agent_prompt(row, 1, transcript)[0]["content"]
    assert 'said: "61 * 65 = 3965"' in reporter and "4000" not in reporter
    again = env.agent_prompt(row, 0, transcript)
    assert again[-2] == {"role": "assistant", "content": "61 * 65 = 3965"}


def test_reward_reads_the_last_number_of_the_calculator_at_turn_1_and_of_the_reporter_at_turn_2():
    reward = ToolRelayReward()
    gold = ["3965"] * 4
    turn1 = [["61 * 65 = 3965", "It is 3,965.", "3966", ""], ["x"] * 4]
    assert reward(None, None, agent_completions=turn1, answer=gold, turn=1) == [1.0, 1.0, 0.0, 0.0]
    # the product followed by more arithmetic is what the reporter reads and copies: it earns nothing at turn 1
    going_on = [["3965 * 69 = 273585", "61 * 65 = 3965, or 4000", "3965, no: 3966", "3965 is it"], ["x"] * 4]
    assert reward(None, None, agent_completions=going_on, answer=gold, turn=1) == [0.0, 0.0, 0.0, 1.0]
    turn2 = [["3965"] * 4, ["Answer: 3965", "3965 or 4000", "Answer: 3965.", [{"role": "assistant",
                                                                                "content": "Answer: 3965"}]]]
    assert reward(None, None, agent_completions=turn2, answer=gold, turn=2) == [1.0, 0.0, 1.0, 1.0]
    assert integers("a -3 and 1,234, then 7") == [-3, 1234, 7] and last_integer("none") is None
