"""Tests of `NamingCodingEnv` (issue 55's eighth design): the helper names its function `aux` or `code`, the main
agent calls one, each prompt lists the names in its own order, and the program works only when the names agree."""

from __future__ import annotations

import pytest

from trl_marl.data.team_coding import private_rule_rows
from trl_marl.envs.base import Transcript
from trl_marl.envs.coding_private import NamingCodingEnv
from trl_marl.rewards.coding import CodingTeamReward, PassRateReward, ReferencePartnerPass
from trl_marl.sandbox import ProgramExecutor, SandboxLimits

ROW = next(r for r in private_rule_rows("train")
           if r["entry_point"] == "coded_sum" and r["rule"] == "multiply `x` by 3, then add 4")


@pytest.fixture(scope="module")
def env() -> NamingCodingEnv:
    return NamingCodingEnv(chat=True, executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def call(func, helpers: list, mains: list) -> list[float]:
    n = len(helpers)
    kwargs = {key: [value] * n for key, value in ROW.items()}
    return func(prompts=["p"] * n, completions=helpers, agent_completions=[helpers, mains], **kwargs)


def main_calling(name: str) -> str:
    return f"def coded_sum(numbers):\n    return sum({name}(x) for x in numbers)\n```"


def test_each_prompt_lists_the_names_in_its_own_order(env):
    helper, main = env.prompts(ROW, Transcript())
    text = helper[0]["content"]
    assert "multiply `x` by 3, then add 4" in text and text.index("`aux`") < text.index("`code`")
    assert helper[-1] == {"role": "assistant", "content": "```python\ndef "}  # the first word is the name
    task = main[-2]["content"]
    assert task.index("`code`") < task.index("`aux`") and "coded_sum(numbers: list) -> int" in task
    assert not any(w in m["content"] for m in main for w in ("then add", "by 3", "multiply"))  # nothing of the rule
    assert "code(numbers[-1])" in main[1]["content"] and "aux(" not in main[1]["content"]  # examples: main's first
    assert main[-1] == {"role": "assistant", "content": "```python\n"}
    flipped = NamingCodingEnv(chat=True, main_order=(0, 1)).agent_prompt(ROW, 1, Transcript())
    assert "aux(numbers[-1])" in flipped[1]["content"]
    assert NamingCodingEnv().agent_prompt(ROW, 0, Transcript()).endswith("```python\ndef ")


def test_the_program_works_only_when_the_names_agree(env):
    helpers = ["aux(x):\n    return x * 3 + 4\n```", "code(x):\n    return x * 3 + 4\n```",
               "code(x):\n    return x * 3 + 4\n```", "aux(x):\n    return x * 3 + 4\n```"]
    mains = [main_calling("aux"), main_calling("code"), main_calling("aux"), main_calling("code")]
    assert [env.assemble(ROW, h, m).helper_name for h, m in zip(helpers, mains)] == ["aux", "code", "code", "aux"]
    # crossed names: the main's call is a NameError on every test but the empty list (sum of nothing is 0)
    assert call(PassRateReward(env), helpers, mains) == [1.0, 1.0, 0.25, 0.25]
    team = call(CodingTeamReward(env), helpers, mains)
    assert team[0] == pytest.approx(4.0) and team[1] == pytest.approx(4.0) and max(team[2:]) < 2.5
    # each agent's own skill, whatever name the partner chose
    assert call(ReferencePartnerPass(env, 0), helpers, mains) == [1.0] * 4
    assert call(ReferencePartnerPass(env, 1), helpers, mains) == [1.0] * 4


def test_a_helper_cannot_answer_to_both_names(env):
    helpers = ["aux(x):\n    return x * 3 + 4\n\n\ncode = aux\n```",  # an alias is not kept
               "aux(x):\n    return x * 3 + 4\n\n\ndef code(x):\n    return x * 3 + 4\n```",  # the first one counts
               "code_of(x):\n    return x * 3 + 4\n```"]  # neither name: no helper
    mains = [main_calling("code")] * 3
    solutions = [env.assemble(ROW, h, m) for h, m in zip(helpers, mains)]
    assert [s.helper_name for s in solutions[:2]] == ["aux", "aux"] and "code" not in solutions[1].helper_code
    assert not solutions[2].helper_defined and solutions[2].helper_code == ""
    assert call(PassRateReward(env), helpers, mains) == [0.25, 0.25, 0.25]
    assert call(ReferencePartnerPass(env, 0), helpers, mains) == [1.0, 1.0, 0.0]


def test_bad_configuration():
    with pytest.raises(ValueError, match="two different Python identifiers"):
        NamingCodingEnv(names=("aux", "aux"))
    with pytest.raises(ValueError, match="`main_order` must be"):
        NamingCodingEnv(main_order=(1, 1))
    with pytest.raises(ValueError, match="do not pass `code_prefill`"):
        NamingCodingEnv(chat=True, code_prefill="```python\n")
