"""Tests of the division-of-labour coding task (`trl_marl.envs.coding_division`): the same prompt for both agents
but the programmer number, the first of the two functions kept, collisions, the choice metrics, real sandbox runs."""

from __future__ import annotations

import pytest

from trl_marl.data.team_coding import HELPER_TESTS, division_coding_rows, team_coding_rows
from trl_marl.envs.base import Transcript
from trl_marl.envs.coding_division import STUBS_DIVISION_TEMPLATE, DivisionCodingEnv
from trl_marl.rewards.coding import CodingTeamReward, DivisionChoiceRate, PassRateReward
from trl_marl.sandbox import ProgramExecutor, SandboxLimits
from trl_marl.utils.code import first_definition_of

ROW = next(r for r in division_coding_rows("train") if r["entry_point"] == "squares")
AUX = "```python\ndef aux(x: int) -> int:\n    return x * x\n```"
MAIN = "```python\ndef squares(numbers):\n    return [aux(x) for x in numbers]\n```"
SQUARE = "def aux(x):\n    return x * x"
SQUARES = "def squares(numbers):\n    return [aux(x) for x in numbers]"
BOTH_AUX_FIRST = f"```python\n{SQUARE}\n\n{SQUARES}\n```"
BOTH_MAIN_FIRST = f"```python\n{SQUARES}\n\n{SQUARE}\n```"
INLINE_MAIN = "```python\ndef squares(numbers):\n    return [x * x for x in numbers]\n```"


@pytest.fixture(scope="module")
def env() -> DivisionCodingEnv:
    return DivisionCodingEnv(executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def call(func, pairs: list[tuple[str, str]]) -> list[float]:
    n = len(pairs)
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    kwargs = {key: [value] * n for key, value in ROW.items()}
    return func(prompts=["p"] * n, completions=first, agent_completions=[first, second], **kwargs)


def test_rows_test_both_functions_and_keep_the_family_split():
    train, held = division_coding_rows("train"), division_coding_rows("heldout")
    assert {r["family"] for r in train}.isdisjoint({r["family"] for r in held})
    assert [r["task_id"] for r in train] == [r["task_id"] for r in team_coding_rows("train", (1,))]
    for row in train + held:
        assert all(f"assert {t}\n" in row["test"] for t in HELPER_TESTS[row["family"]])
        assert "candidate(" in row["test"]


def test_both_agents_get_the_same_prompt_but_their_number(env):
    first, second = env.prompts(ROW, Transcript())
    assert "You are programmer 1." in first and "You are programmer 2." in second
    assert first.replace("programmer 1", "programmer 2") == second
    assert "aux(x: int) -> int" in first and "squares(numbers: list) -> list" in first
    chat = DivisionCodingEnv(chat=True, code_prefill="```python\n").agent_prompt(ROW, 1, Transcript())
    assert chat[-1] == {"role": "assistant", "content": "```python\n"} and "programmer 2" in chat[0]["content"]


def test_stubs_template_shows_both_functions_and_the_prefilled_def_is_the_choice():
    stubs = DivisionCodingEnv(chat=True, code_prefill="```python\ndef", division_template=STUBS_DIVISION_TEMPLATE,
                              executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))
    first, second = (stubs.agent_prompt(ROW, a, Transcript()) for a in (0, 1))
    text = first[0]["content"]
    assert text.replace("programmer 1", "programmer 2") == second[0]["content"]
    helper_stub = 'def aux(x: int) -> int:\n    """Return `x` squared."""'
    assert helper_stub in text and "def squares(numbers: list) -> list:" in text
    assert text.index(helper_stub) < text.index("def squares(")  # the helper first
    assert first[-1] == {"role": "assistant", "content": "```python\ndef"}
    aux, main = " aux(x):\n    return x * x\n```", " squares(numbers):\n    return [aux(x) for x in numbers]\n```"
    assert stubs.choice(ROW, aux) == "helper" and stubs.choice(ROW, main) == "main"
    assert stubs.choice(ROW, " square_all(numbers):\n    return numbers\n```") is None
    assert call(PassRateReward(stubs), [(aux, main), (main, aux), (aux, aux)])[:2] == [1.0, 1.0]
    assert call(PassRateReward(stubs), [(aux, aux)])[0] < 1.0
    # gamed: each programmer writes both functions after the prefilled `def` (only the first counts), or names its
    # one function `aux` but writes the main function's work in it; both score below the honest division
    both = aux.replace("```", "") + "\ndef squares(numbers):\n    return [x * x for x in numbers]\n```"
    disguised = " aux(numbers):\n    return [x * x for x in numbers]\n```"
    honest, *gamed = call(CodingTeamReward(stubs), [(aux, main), (both, both), (disguised, main), (both, disguised)])
    assert max(gamed) < honest


def test_only_the_first_of_the_two_functions_counts(env):
    assert env.choice(ROW, BOTH_AUX_FIRST) == "helper" and env.choice(ROW, BOTH_MAIN_FIRST) == "main"
    assert env.choice(ROW, "no code at all") is None
    assert first_definition_of("def aux(x):\n    return x\n\ndef squares(n):\n    return n", ["aux", "squares"]) == (
        "aux", "def aux(x):\n    return x")
    solution = env.assemble(ROW, BOTH_AUX_FIRST, BOTH_AUX_FIRST)  # both wrote aux first: no main function
    assert solution.helper_defined and not solution.main_defined
    solution = env.assemble(ROW, MAIN, AUX)  # roles either way round
    assert solution.helper_defined and solution.main_defined and solution.helper_used


def test_a_team_passes_only_when_it_divides_the_work(env):
    pairs = {"divided": (AUX, MAIN), "divided_swapped": (MAIN, AUX), "both_write_both_aux_first": (
        BOTH_AUX_FIRST, BOTH_AUX_FIRST), "both_main_first": (BOTH_MAIN_FIRST, BOTH_MAIN_FIRST),
        "both_inline_main": (INLINE_MAIN, INLINE_MAIN), "one_blank": (BOTH_AUX_FIRST, "")}
    success = dict(zip(pairs, call(PassRateReward(env), list(pairs.values()))))
    assert success["divided"] == success["divided_swapped"] == 1.0
    for name in ("both_write_both_aux_first", "both_main_first", "both_inline_main", "one_blank"):
        assert success[name] < 1.0, name
    assert success["both_inline_main"] == pytest.approx(4 / 7)  # the main's tests pass, the helper's cannot
    team = dict(zip(pairs, call(CodingTeamReward(env), list(pairs.values()))))
    assert team["divided"] == pytest.approx(4.0)
    assert max(v for k, v in team.items() if not k.startswith("divided")) < 3.0


def test_choice_metrics(env):
    pairs = [(AUX, MAIN), (MAIN, AUX), (BOTH_AUX_FIRST, BOTH_AUX_FIRST), ("", MAIN)]
    assert call(DivisionChoiceRate(env, 0, "helper"), pairs) == [1.0, 0.0, 1.0, 0.0]
    assert call(DivisionChoiceRate(env, 1, "main"), pairs) == [1.0, 0.0, 0.0, 1.0]
    assert call(DivisionChoiceRate(env), pairs) == [0.0, 0.0, 1.0, 0.0]
    assert DivisionChoiceRate(env).__name__ == "collision"
    with pytest.raises(ValueError, match="both `agent_index` and `choice`"):
        DivisionChoiceRate(env, 0)
    with pytest.raises(ValueError, match="'helper' or 'main'"):
        DivisionChoiceRate(env, 0, "aux")


def test_bad_configuration_and_rows():
    with pytest.raises(ValueError, match="one turn"):
        DivisionCodingEnv(num_turns=2)
    row = {k: v for k, v in ROW.items() if k not in ("helper_signature", "helper_doc")}
    with pytest.raises(ValueError, match="helper's contract.*division_coding_rows"):
        DivisionCodingEnv().agent_prompt(row, 0, Transcript())
