"""Numbers a policy writes that are too long for `int()` (issue 54, item 4): a non-answer, never an exception.

Python's `int()` refuses more than 4,300 digits with a `ValueError`; before the fix a 5,000-digit number in a
completion ended training from `parse_int`, `parse_leading_int` and `tool_relay.integers`.
"""

from __future__ import annotations

import pytest

from trl_marl.rewards.arithmetic import TargetSumReward, parse_int, parse_leading_int
from trl_marl.rewards.tool_relay import ToolRelayReward, integers, last_integer
from trl_marl.utils.numbers import MAX_DIGITS, bounded_int

HUGE = "7" * 5000  # past Python's 4,300-digit limit of int()
LONG = "9" * (MAX_DIGITS + 1)  # under that limit, but no answer either


@pytest.mark.parametrize("digits", [HUGE, "-" + HUGE, LONG, "0" * (MAX_DIGITS + 1)])
def test_bounded_int_refuses_more_than_max_digits(digits: str) -> None:
    assert bounded_int(digits) is None


@pytest.mark.parametrize(("digits", "value"), [("0", 0), ("-42", -42), ("+7", 7), ("\u0663", 3),
                                                ("9" * MAX_DIGITS, 10**MAX_DIGITS - 1)])
def test_bounded_int_reads_what_int_reads_up_to_max_digits(digits: str, value: int) -> None:
    assert bounded_int(digits) == value


@pytest.mark.parametrize("digits", ["", "-", "4x", "1.5", " 4", "\u00b2", "--4"])
def test_bounded_int_refuses_what_is_no_integer(digits: str) -> None:
    assert bounded_int(digits) is None


@pytest.mark.parametrize("parse", [parse_int, parse_leading_int])
@pytest.mark.parametrize("text", [HUGE, f"  -{HUGE} ", LONG, f"{HUGE}. I pick it"])
def test_target_sum_parsers_read_a_huge_number_as_no_answer(parse, text: str) -> None:
    assert parse(text) is None


def test_target_sum_parsers_still_read_ordinary_answers() -> None:
    assert parse_int(" 12 ") == 12
    assert parse_leading_int(" 7. I pick 7") == 7
    assert parse_int("9" * MAX_DIGITS) == 10**MAX_DIGITS - 1


def test_target_sum_reward_gives_a_huge_number_the_invalid_penalty() -> None:
    reward = TargetSumReward(invalid_penalty=0.5)
    assert reward(["p"] * 2, ["x"] * 2, agent_completions=[["3", HUGE], ["7", "7"]], target=[10, 10]) == [1.0, -0.5]
    leading = TargetSumReward(leading=True)
    assert leading(["p"], ["x"], agent_completions=[[f"{HUGE} because"], ["7"]], target=[10]) == [-0.5]


def test_tool_relay_integers_leave_out_a_huge_number() -> None:
    assert integers(f"61 * 65 = 3,965 then {HUGE} and {LONG}") == [61, 65, 3965]


def test_tool_relay_last_integer_does_not_skip_a_huge_number_after_the_answer() -> None:
    # skipping it would pay the product followed by garbage, which the reward's rule refuses
    assert last_integer(f"3965 {HUGE}") is None
    assert last_integer(f"{HUGE} then 3965") == 3965
    reward = ToolRelayReward()
    scores = reward(["p"] * 3, ["x"] * 3, agent_completions=[[f"3965 {HUGE}", f"{HUGE} = 3965", HUGE], ["", "", ""]],
                    answer=["3965"] * 3, turn=1)
    assert scores == [0.0, 1.0, 0.0]
