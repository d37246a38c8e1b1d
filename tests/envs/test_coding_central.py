"""The coding task written by one policy (`CentralizedCodingEnv`): one code block split into the helper's part and
the main part, scored by the team's own coding rewards."""

from __future__ import annotations

import pytest

from trl_marl.data.team_coding import team_coding_rows
from trl_marl.envs import CentralizedCodingEnv, CooperativeCodingEnv, TargetSumEnv, Transcript
from trl_marl.envs.coding_central import split_helper
from trl_marl.rewards import CentralizedReward
from trl_marl.rewards.coding import CodingTeamReward, HelperUsedReward, PassRateReward

FENCE = "```python\n"


def test_split_helper_gives_aux_and_the_imports_before_it_to_the_helper():
    code = ("import math\n\n\ndef main(xs):\n    return [aux(x) for x in xs]\n\n\n@cache\ndef aux(x):\n"
            "    return math.sqrt(x)\n\n\nprint(main([4]))\nimport re")
    helper, rest = split_helper(code, "aux")
    assert helper == "import math\n\n@cache\ndef aux(x):\n    return math.sqrt(x)"
    # the main function, the example call and an import after a function stay in the main part, in order
    assert rest == "def main(xs):\n    return [aux(x) for x in xs]\n\nprint(main([4]))\n\nimport re"
    assert split_helper("def main(x):\n    return x", "aux") == ("", "def main(x):\n    return x")
    assert split_helper("", "aux") == ("", "")


def test_split_helper_splits_code_that_does_not_parse_by_lines():
    code = "def main(x):\n    return aux(x\n\ndef aux(x):\n    return x\n# end\nprint(1)"
    helper, rest = split_helper(code, "aux")
    assert helper == "def aux(x):\n    return x"
    assert rest == "def main(x):\n    return aux(x\n\n# end\nprint(1)"


def test_the_prompt_states_the_main_function_and_the_helper_contract():
    row = team_coding_rows("train", (1,))[0]
    env = CentralizedCodingEnv(CooperativeCodingEnv(chat=True, code_prefill=FENCE))
    assert env.num_agents == 1 and env.tags == ("helper", "main")
    user, prefill = env.agent_prompt(row, 0, Transcript())
    assert prefill == {"role": "assistant", "content": FENCE}
    assert user["content"].startswith(f"Write a Python function `{row['entry_point']}(")
    assert f"First write a helper function `aux{row['helper_signature']}`: {row['helper_doc']}" in user["content"]
    plain = CentralizedCodingEnv(CooperativeCodingEnv())
    assert isinstance(plain.agent_prompt(row, 0, Transcript()), str)


def test_a_row_without_the_helper_contract_lets_the_policy_choose_the_helper():
    row = dict(team_coding_rows("train", (1,))[0], helper_signature="")
    text = CentralizedCodingEnv(CooperativeCodingEnv()).agent_prompt(row, 0, Transcript())
    assert f"First write a helper function `aux` that does one step of the work, then write `{row['entry_point']}`" \
        in text


def test_bad_input_is_refused_by_name():
    with pytest.raises(KeyError, match="entry_point"):
        CentralizedCodingEnv(CooperativeCodingEnv()).agent_prompt({"prompt": "def f(x):\n    pass\n"}, 0,
                                                                   Transcript())
    with pytest.raises(ValueError, match="num_turns=2"):
        CentralizedCodingEnv(CooperativeCodingEnv(num_turns=2))
    with pytest.raises(TypeError, match="CooperativeCodingEnv"):
        CentralizedCodingEnv(TargetSumEnv(2))


def test_the_team_rewards_score_the_split_program_as_a_team_program():
    row = next(r for r in team_coding_rows("train", (1,)) if r["entry_point"] == "squares")
    env = CentralizedCodingEnv(CooperativeCodingEnv(chat=True, code_prefill=FENCE))
    right = "def aux(x):\n    return x * x\n\ndef squares(numbers):\n    return [aux(n) for n in numbers]\n```\nDone."
    inline = "def squares(numbers):\n    return [n * n for n in numbers]\n```"  # right, but no helper
    wrong = "def aux(x):\n    return x + x\n\ndef squares(numbers):\n    return [aux(n) for n in numbers]\n```"
    completions = [[{"role": "assistant", "content": c}] for c in (right, inline, wrong)]
    columns = {k: [row[k]] * 3 for k in row}
    passed = CentralizedReward(env, PassRateReward(env.env))(["p"] * 3, completions, **columns)
    assert passed[0] == 1.0 and passed[1] == 1.0 and passed[2] < 1.0
    used = CentralizedReward(env, HelperUsedReward(env.env))(["p"] * 3, completions, **columns)
    assert used[:2] == [1.0, 0.0]
    team = CentralizedReward(env, CodingTeamReward(env.env))(["p"] * 3, completions, **columns)
    assert team[0] > team[1] > team[2]
