"""Tests of cooperative coding with private information (`trl_marl.envs.coding_private`, issue 55): only the helper
reads the rule, each answer is prefilled to its `return`, the rule split, and the reference-partner metrics."""

from __future__ import annotations

import pytest

from trl_marl.data.team_coding import HELDOUT_MULTIPLIERS, HELDOUT_RULES, private_rule_rows
from trl_marl.envs.base import Transcript
from trl_marl.envs.coding_private import PrivateRuleCodingEnv
from trl_marl.rewards.coding import CodingTeamReward, PassRateReward, ReferencePartnerPass
from trl_marl.sandbox import ProgramExecutor, SandboxLimits

TRAIN = private_rule_rows("train")
HELD = private_rule_rows("heldout")
ROW = next(r for r in TRAIN if r["entry_point"] == "coded_sum" and r["rule"] == "multiply `x` by 3, then add 4")


@pytest.fixture(scope="module")
def env() -> PrivateRuleCodingEnv:
    return PrivateRuleCodingEnv(chat=True, executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def call(func, helpers: list, mains: list, row: dict = ROW) -> list[float]:
    n = len(helpers)
    kwargs = {key: [value] * n for key, value in row.items()}
    return func(prompts=["p"] * n, completions=helpers, agent_completions=[helpers, mains], **kwargs)


def test_rows_tests_are_the_rule_by_hand_and_the_split_holds_rules_out():
    assert len(TRAIN) == 432 and len(HELD) == 16
    # 3x + 4 over [1, 2] is 7 + 10; over [5, -1, 3] it is 19 + 1 + 13
    assert "assert candidate([1, 2]) == 17\n" in ROW["test"] and "assert candidate([5, -1, 3]) == 33\n" in ROW["test"]
    assert "assert candidate([]) == 0\n" in ROW["test"]
    train_rules = {r["rule"] for r in TRAIN}
    assert not train_rules & {r["rule"] for r in HELD}
    assert all("then multiply" not in rule for rule in train_rules)  # the held-out form never trains
    assert all(f"by {k}," not in rule for rule in train_rules for k in HELDOUT_MULTIPLIERS)
    assert len({r["rule"] for r in HELD}) == len(HELDOUT_RULES)


def test_only_the_helper_reads_the_rule_and_each_answer_is_prefilled(env):
    helper, main = env.prompts(ROW, Transcript())
    assert "multiply `x` by 3, then add 4" in helper[0]["content"] and len(helper) == 2
    task = main[-2]["content"]
    assert "coded_sum(numbers: list) -> int" in task and "call it, do not write it" in task
    assert not any(w in m["content"] for m in main for w in ("then add", "by 3", "multiply"))  # nothing of the rule
    assert [m["role"] for m in main] == ["user", "assistant"] * 3  # two worked exchanges, then the task
    assert "aux(numbers[-1])" in main[1]["content"]
    assert helper[-1] == {"role": "assistant", "content": "```python\ndef aux(x):\n    return "}
    assert main[-1] == {"role": "assistant", "content": "```python\n"}
    assert len(PrivateRuleCodingEnv(chat=True, main_examples=()).agent_prompt(ROW, 1, Transcript())) == 2
    text = PrivateRuleCodingEnv().agent_prompt(ROW, 0, Transcript())
    assert text.endswith("```python\ndef aux(x):\n    return ")


def test_the_team_passes_only_with_the_rule_and_the_call(env):
    helpers = ["x * 3 + 4\n```", "x * 3 + 4\n```", "x * 2 + 4\n```", "x * 3 + 4\n```"]
    mains = [f"def coded_sum(numbers):\n    return {body}\n```" for body in (
        "sum(aux(x) for x in numbers)", "sum(x * 3 + 4 for x in numbers)", "sum(aux(x) for x in numbers)",
        "sum(numbers)")]
    # 2x + 4 agrees with 3x + 4 on [] and [0] only; sum(numbers) on [] only
    assert call(PassRateReward(env), helpers, mains) == [1.0, 1.0, 0.5, 0.25]
    team = call(CodingTeamReward(env), helpers, mains)
    assert team[0] == pytest.approx(4.0) and max(team[1:]) < 4.0
    assert call(ReferencePartnerPass(env, 0), helpers, mains) == [1.0, 1.0, 0.0, 1.0]  # the helper's own skill
    assert call(ReferencePartnerPass(env, 1), helpers, mains) == [1.0, 1.0, 1.0, 0.0]  # the main's own skill


def test_bad_configuration(env):
    with pytest.raises(ValueError, match="one turn"):
        PrivateRuleCodingEnv(num_turns=2)
    with pytest.raises(ValueError, match="do not pass `code_prefill`"):
        PrivateRuleCodingEnv(chat=True, code_prefill="```python\n")
    with pytest.raises(ValueError, match="split must be"):
        private_rule_rows("test")
    with pytest.raises(ValueError, match="`agent_index` must be"):
        ReferencePartnerPass(env, 2)


def test_the_mixed_rule_set_by_hand_and_its_split():
    train, held = private_rule_rows("train", "mixed"), private_rule_rows("heldout", "mixed")
    assert len(train) == 396 and len(held) == 16
    counts = {f: sum(r["family"] == f for r in train) for f in ("x * k + c", "x * x + c", "x * k % c")}
    assert counts == {"x * k + c": 216, "x * x + c": 28, "x * k % c": 152}  # 54, 7 and 38 rules x 4 shapes
    assert not {r["rule"] for r in train} & {r["rule"] for r in held}
    assert all("then multiply" not in r["rule"] for r in train)
    assert "square `x`, then add 4" not in {r["rule"] for r in train}
    # 3x mod 6 codes numbers as 0 or 3, a rule; 6x mod 3 would code every number as 0, so it is not one
    assert "multiply `x` by 3, then take the remainder after dividing by 6" in {r["rule"] for r in train}
    assert "multiply `x` by 6, then take the remainder after dividing by 3" not in {r["rule"] for r in train}
    row = next(r for r in train if r["rule"] == "multiply `x` by 3, then take the remainder after dividing by 7"
               and r["entry_point"] == "coded_sum")
    # 3x mod 7 over [1, 2] is 3 + 6; over [5, -1, 3] it is 1 + 4 + 2 (Python's remainder of -3 is 4)
    assert "assert candidate([1, 2]) == 9\n" in row["test"] and "assert candidate([5, -1, 3]) == 7\n" in row["test"]
    square = next(r for r in held if r["rule"] == "square `x`, then add 4" and r["entry_point"] == "coded_list")
    assert "assert candidate([5, -1, 3]) == [29, 5, 13]\n" in square["test"]
    assert square["helper_solution"] == "def aux(x):\n    return x * x + 4"
    with pytest.raises(ValueError, match="rules must be"):
        private_rule_rows("train", "cubic")
