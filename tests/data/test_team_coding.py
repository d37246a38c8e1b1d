"""The cooperative coding problem set (`trl_marl.data.team_coding`): references pass their hidden tests in the
sandbox, the hidden tests are more than the visible example, the split is by family and fixed."""

from __future__ import annotations

import ast

import pytest

from trl_marl.data import load_team_coding
from trl_marl.data.team_coding import (
    FAMILIES,
    HELDOUT_FAMILIES,
    TEAM_CODING_PROBLEMS,
    team_coding_rows,
    team_coding_split,
)
from trl_marl.envs import CooperativeCodingEnv
from trl_marl.rewards.coding import CodingTeamReward
from trl_marl.sandbox import run_programs

ROWS = team_coding_rows("all")


def test_every_reference_passes_every_hidden_test_in_the_sandbox():
    results = run_programs([r["canonical_solution"] for r in ROWS], ROWS)
    failed = [(r["task_id"], res.reason, res.passed, res.total) for r, res in zip(ROWS, results)
              if res.total < 4 or res.passed != res.total]
    assert not failed


def test_the_visible_example_holds_for_the_reference_and_is_not_enough_to_pass():
    """A main that hard-codes the docstring's example (returns its result for every input) fails the hidden tests."""
    cheats = []
    for problem, row in zip(TEAM_CODING_PROBLEMS, ROWS):
        scope: dict = {}
        exec(row["canonical_solution"], scope)  # our own reference code, not model output
        call, result = problem.example
        assert eval(call, scope) == ast.literal_eval(result), row["task_id"]
        cheats.append(f"def {problem.entry_point}(*args, **kwargs):\n    return {result}\n")
    results = run_programs(cheats, ROWS)
    assert [r["task_id"] for r, res in zip(ROWS, results) if res.passed == res.total] == []


def test_main_without_the_helper_fails():
    """The reference main alone (no `aux`) fails a hidden test of every problem (it may pass an empty-input case
    that never calls the helper): the helper is part of the solution."""
    mains = [p.main for p in TEAM_CODING_PROBLEMS]
    results = run_programs(mains, ROWS)
    assert [r["task_id"] for r, res in zip(ROWS, results) if res.passed == res.total] == []


def test_split_is_by_family_fixed_and_disjoint():
    train, held = team_coding_split()
    assert sorted(train + held) == list(range(len(TEAM_CODING_PROBLEMS))) and not set(train) & set(held)
    assert HELDOUT_FAMILIES == ("palindromes", "words", "counting", "squares", "distance", "pairs", "collatz",
                                "passwords", "even", "reverse", "double", "cube")  # changing it voids the records
    assert HELDOUT_FAMILIES == FAMILIES[2::3]
    train_families = {TEAM_CODING_PROBLEMS[i].family for i in train}
    held_families = {TEAM_CODING_PROBLEMS[i].family for i in held}
    assert not train_families & held_families
    assert (len(train), len(held)) == (59, 27)
    assert [len(team_coding_rows(split, (level,))) for split in ("train", "heldout") for level in (1, 2)] == [
        16, 43, 8, 19]
    with pytest.raises(ValueError, match="levels must be"):
        team_coding_rows("train", (3,))
    held_rows = load_team_coding("heldout")
    assert held_rows["task_id"] == [f"TeamCoding/{i}" for i in held]
    assert len({r["entry_point"] for r in ROWS}) == len(ROWS)  # no problem twice
    with pytest.raises(ValueError, match="split must be"):
        team_coding_rows("test")


def test_the_team_reward_gives_the_maximum_to_the_reference_pair():
    """Reference helper (agent 0) and main (agent 1), in fences as a model writes them, through the env's sandbox:
    every term, the cooperation terms included (the main calls `aux`, and without it fewer tests pass)."""
    env = CooperativeCodingEnv()
    reward = CodingTeamReward(env)
    rows = ROWS[:3]
    helpers = [f"Here is the helper:\n```python\n{TEAM_CODING_PROBLEMS[i].helper}\n```\nIt counts." for i in range(3)]
    mains = [f"```python\n{TEAM_CODING_PROBLEMS[i].main}\n```" for i in range(3)]
    columns = {c: [r[c] for r in rows] for c in ("prompt", "entry_point", "test")}
    values = reward(prompts=["p"] * 3, completions=helpers, agent_completions=[helpers, mains], **columns)
    assert values == pytest.approx([4.0, 4.0, 4.0])


def test_every_problem_states_a_helper_contract_that_its_reference_helper_keeps():
    """The contract both agents see names the reference helper's parameters, in order."""
    env = CooperativeCodingEnv()
    for row in ROWS:
        contract = env.helper_prompt(row)
        assert contract is not None and contract.startswith("def aux("), row["task_id"]
        stated = ast.parse(contract + "\n    pass").body[0]
        reference = next(n for n in ast.parse(row["helper_solution"]).body if isinstance(n, ast.FunctionDef))
        assert [a.arg for a in stated.args.args] == [a.arg for a in reference.args.args], row["task_id"]
