"""Tests of `RuleDivisionCodingEnv` and `rule_pair_rows` (issue 55's ninth design): two programmers, two rules, two
functions `aux1` and `aux2`; each writes the one its first token names, and a collision leaves the program without
the other."""

from __future__ import annotations

import pytest

from trl_marl.data.team_coding import HELDOUT_RULES, rule_pair_rows
from trl_marl.envs.base import Transcript
from trl_marl.envs.coding_rule_division import CentralizedRuleDivisionCodingEnv, RuleDivisionCodingEnv
from trl_marl.rewards import CentralizedReward
from trl_marl.rewards.coding import PassRateReward
from trl_marl.sandbox import ProgramExecutor, SandboxLimits

TRAIN, HELD = rule_pair_rows("train"), rule_pair_rows("heldout")
ROW = {**TRAIN[0], "rule1": "multiply `x` by 3, then add 4", "rule2": "multiply `x` by 2, then subtract 1",
       "test": "def check(candidate):\n" + "".join(f"    assert candidate({x})[0] == {3 * x + 4}\n" for x in (0, 1))
       + "".join(f"    assert candidate({x})[1] == {2 * x - 1}\n" for x in (0, 1))}


@pytest.fixture(scope="module")
def env() -> RuleDivisionCodingEnv:
    return RuleDivisionCodingEnv(chat=True, executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def pass_rate(env, firsts: list, seconds: list) -> list[float]:
    kwargs = {key: [value] * len(firsts) for key, value in ROW.items()}
    return PassRateReward(env)(prompts=["p"] * len(firsts), completions=firsts, agent_completions=[firsts, seconds],
                               **kwargs)


def test_rows_by_hand_and_the_split():
    assert len(TRAIN) == 160 and len(HELD) == 16 and TRAIN == rule_pair_rows("train")  # fixed draw
    row = next(r for r in TRAIN if r["rule1"].startswith("multiply `x` by 3, then add"))
    c = int(row["rule1"].rsplit(" ", 1)[1])
    assert f"    assert candidate(-3)[0] == {-9 + c}\n" in row["test"] and row["test"].count("assert") == 10
    assert all(r["rule1"] != r["rule2"] for r in TRAIN + HELD)
    held_rules = {r["rule1"] for r in HELD} | {r["rule2"] for r in HELD}
    assert len(held_rules) == len(HELDOUT_RULES) and not held_rules & ({r["rule1"] for r in TRAIN}
                                                                        | {r["rule2"] for r in TRAIN})
    with pytest.raises(ValueError, match="split must be"):
        rule_pair_rows("test")


def test_same_prompt_but_the_number_and_the_choice_is_the_first_token(env):
    first, second = (env.agent_prompt(ROW, a, Transcript()) for a in (0, 1))
    assert first[0]["content"].replace("programmer 1", "programmer 2") == second[0]["content"]
    assert "multiply `x` by 3, then add 4" in first[0]["content"] and "`aux2(x: int) -> int`" in first[0]["content"]
    assert first[1] == {"role": "assistant", "content": "```python\ndef aux"}
    assert env.part("1(x):\n    return x * 3 + 4\n```")[0] == "aux1"
    assert env.part("2(x):\n    return 2 * x - 1\n\n\ndef aux1(x):\n    return 0\n```")[0] == "aux2"  # first only


def test_a_division_passes_and_a_collision_fails(env):
    one, two = "1(x):\n    return x * 3 + 4\n```", "2(x):\n    return x * 2 - 1\n```"
    wrong_two = "2(x):\n    return x * 2\n```"
    firsts = [one, two, one, one, two, "abc(x):\n    return 1\n```"]
    seconds = [two, one, one, wrong_two, two, two]
    # divided: all pass (either order); collided: aux2 (or aux1) missing, a NameError on every test; a wrong aux2:
    # the aux1 half passes; agent 0 wrote neither name: agent 1's aux2 alone, aux1 missing
    assert pass_rate(env, firsts, seconds) == [1.0, 1.0, 0.0, 0.5, 0.0, 0.0]
    both = env.assemble(ROW, one + "\n\ndef aux2(x):\n    return x * 2 - 1\n```", one)
    assert "aux2" not in both.helper_code  # the second function of an answer is dropped


def test_bad_configuration():
    with pytest.raises(ValueError, match="one turn"):
        RuleDivisionCodingEnv(num_turns=2)
    with pytest.raises(ValueError, match="do not pass `code_prefill`"):
        RuleDivisionCodingEnv(chat=True, code_prefill="```python\n")
    with pytest.raises(ValueError, match="two different Python identifiers"):
        RuleDivisionCodingEnv(names=("aux1", "aux1"))
    with pytest.raises(IndexError, match="agents 0 and 1"):
        RuleDivisionCodingEnv(chat=True).agent_prompt(ROW, 2, Transcript())


def test_gamed_answers_score_below_a_division(env):
    """What a programmer might write to cover both functions, or the main, alone: the answer keeps its first
    function only, and the given main function is the row's, so every such answer paired with a partner that wrote
    the same function scores as the collision it is."""
    honest = ["1(x):\n    return x * 3 + 4\n```", "2(x):\n    return x * 2 - 1\n```"]
    gamed = [
        "1(x):\n    return x * 3 + 4\n\n\naux2 = lambda x: x * 2 - 1\n```",  # the partner's function as an alias
        "1(x):\n    return x * 3 + 4\n\n\ndef two_codes(x):\n    return [x * 3 + 4, x * 2 - 1]\n```",  # the main
        "1(x):\n    import builtins\n    builtins.aux2 = lambda y: y * 2 - 1\n    return x * 3 + 4\n```",
    ]
    partner = honest[0]  # the partner wrote aux1 too: only a real division passes
    gamed.append("1(x, _=__import__('builtins').__setattr__('aux2', lambda y: y * 2 - 1)):\n    return x * 3 + 4\n```")
    scores = pass_rate(env, [*gamed, honest[0]], [partner] * len(gamed) + [honest[1]])
    assert scores == [0.0] * len(gamed) + [1.0]
    assert [env.part(g)[0] for g in gamed] == ["aux1", "aux1", None, None]  # side effects: not kept


def test_one_policy_writes_both_functions_scored_as_the_team(env):
    """The single-policy arm: the two rules without a programmer number, prefilled as a team answer; each function
    goes to the agent that writes it in a team and the team's pass rate scores the program unchanged."""
    central = CentralizedRuleDivisionCodingEnv(env)
    prompt = central.agent_prompt(ROW, 0, Transcript())
    assert "programmer" not in prompt[0]["content"] and "multiply `x` by 3, then add 4" in prompt[0]["content"]
    assert prompt[1] == {"role": "assistant", "content": "```python\ndef aux"} and central.num_agents == 1
    both = "1(x):\n    return x * 3 + 4\n\n\ndef aux2(x):\n    return x * 2 - 1\n```"
    either_order = "2(x):\n    return x * 2 - 1\n\ndef aux1(x):\n    return x * 3 + 4\n```"
    assert central.split(both) == ["1(x):\n    return x * 3 + 4", "2(x):\n    return x * 2 - 1"]
    assert central.split(either_order) == central.split(both)
    completions = [
        both, either_order,
        "1(x):\n    return x * 3 + 4\n```",  # aux2 missing: a NameError on its half
        "1(x):\n    return x * 3 + 4\n\ndef aux2(x):\n    return x * 2 -\n```",  # does not parse: nothing runs
        "1(x):\n    return x * 3 + 4\n\ndef aux2(x):\n    return aux1(x) - 3 * x + 2 * x - 5\n```",  # a call
        "1(x):\n    return x * 3 + 4\n\ndef aux2(x):\n    return x * 2\n```",  # aux2 wrong: half the tests
    ]
    kwargs = {key: [value] * len(completions) for key, value in ROW.items()}
    scores = CentralizedReward(central, PassRateReward(env))(prompts=["p"] * len(completions), completions=completions,
                                                             **kwargs)
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0, 0.5]
    with pytest.raises(TypeError, match="must be a RuleDivisionCodingEnv"):
        CentralizedRuleDivisionCodingEnv(object())
