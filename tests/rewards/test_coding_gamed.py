"""The coding team reward against gamed answers (issue 55): every way to earn the cooperation terms without
cooperating scores below an honest pair whose main function uses its partner's helper, under both presets, in the
real sandbox."""

from __future__ import annotations

import pytest

from trl_marl.envs.coding import CooperativeCodingEnv
from trl_marl.rewards.coding import CODING_REWARD_PRESETS, CodingTeamReward
from trl_marl.sandbox import ProgramExecutor, SandboxLimits

ROW = {
    "task_id": "Gamed/0",
    "prompt": 'def sum_of_squares(numbers: list) -> int:\n    """Return the sum of the squares of `numbers`."""\n',
    "entry_point": "sum_of_squares",
    "test": ("def check(candidate):\n    assert candidate([]) == 0\n    assert candidate([1, 2]) == 5\n"
             "    assert candidate([3]) == 9\n    assert candidate([-1, 4]) == 17\n"),
}


def code(text: str) -> str:
    return f"```python\n{text}\n```"


SQUARE = code("def aux(x):\n    return x * x")
SQUARES_SUM = code("def aux(numbers):\n    return sum(x * x for x in numbers)")
HONEST = (SQUARE, code("def sum_of_squares(numbers):\n    return sum(aux(x) for x in numbers)"))
HONEST_LOOP = (SQUARE, code("def sum_of_squares(numbers):\n    total = 0\n    for x in numbers:\n"
                            "        total += aux(x)\n    return total"))
INLINE = "def sum_of_squares(numbers):\n    return sum(x * x for x in numbers)"

GAMED = {
    # the main solves the task alone: correct, but no cooperation
    "inline": (SQUARE, code(INLINE)),
    # a call whose result is discarded (deleting the helper made this fail with a NameError: it was credited)
    "discarded_call": (SQUARE, code("def sum_of_squares(numbers):\n    aux(0)\n"
                                    "    return sum(x * x for x in numbers)")),
    # a bare reference to the helper's name
    "bare_name": (SQUARE, code("def sum_of_squares(numbers):\n    aux\n    return sum(x * x for x in numbers)")),
    "name_as_value": (SQUARE, code("def sum_of_squares(numbers):\n    f = aux\n"
                                   "    return sum(x * x for x in numbers)")),
    # a call swallowed by an exception handler
    "swallowed_call": (SQUARE, code("def sum_of_squares(numbers):\n    try:\n        aux(numbers)\n"
                                    "    except Exception:\n        pass\n    return sum(x * x for x in numbers)")),
    # a call that never runs
    "dead_call": (SQUARE, code("def sum_of_squares(numbers):\n    if False:\n        return aux(0)\n"
                               "    return sum(x * x for x in numbers)")),
    "unreached_call": (SQUARE, code("def sum_of_squares(numbers):\n    if len(numbers) > 99:\n"
                                    "        return aux(numbers[0])\n    return sum(x * x for x in numbers)")),
    # a wrapper of a helper that does all the work, plain and rewritten so no static check sees it
    "wrapper": (SQUARES_SUM, code("def sum_of_squares(numbers):\n    return aux(numbers)")),
    "wrapper_plus_zero": (SQUARES_SUM, code("def sum_of_squares(numbers):\n    return aux(numbers) + 0")),
    "wrapper_renamed": (SQUARES_SUM, code("def sum_of_squares(numbers):\n    result = aux(list(numbers))\n"
                                          "    result = int(result)\n    return result")),
    # the helper agent writes the main function too; the main agent writes nothing
    "helper_writes_main": (code("def aux(x):\n    return x * x\n\n\n" + INLINE), code("")),
    "helper_writes_main_main_calls": (code("def aux(x):\n    return x * x\n\n\n" + INLINE),
                                      code("def sum_of_squares(numbers):\n    return sum_of_squares(numbers)")),
    # the main rebinds the helper's name
    "main_rebinds_aux": (SQUARE, code("def aux(x):\n    return x * x\n\n\ndef sum_of_squares(numbers):\n"
                                      "    return sum(aux(x) for x in numbers)")),
    # nothing at all, or prose
    "empty": (code(""), code("")),
    "prose": ("I would square each number.", "The answer is the sum of squares."),
}


@pytest.fixture(scope="module")
def env() -> CooperativeCodingEnv:
    return CooperativeCodingEnv(executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def score(reward: CodingTeamReward, pairs: list[tuple[str, str]]) -> list[float]:
    n = len(pairs)
    helpers, mains = [p[0] for p in pairs], [p[1] for p in pairs]
    kwargs = {key: [value] * n for key, value in ROW.items()}
    return reward(prompts=["p"] * n, completions=helpers, agent_completions=[helpers, mains], **kwargs)


@pytest.mark.parametrize("preset", list(CODING_REWARD_PRESETS))
def test_every_gamed_pair_scores_below_an_honest_one(env, preset):
    reward = CodingTeamReward(env, preset=preset)
    honest = score(reward, [HONEST, HONEST_LOOP])
    assert honest == pytest.approx([4.0, 4.0])  # the maximum of both presets
    names = list(GAMED)
    values = dict(zip(names, score(reward, [GAMED[n] for n in names])))
    for name, value in values.items():
        assert value < min(honest), (preset, name, value)
    # none of them earns the non-trivial bonus; only the wrappers, which do use the helper's result, earn helper use
    assert reward.last_terms["nontrivial"] == [0.0] * len(names)
    wrappers = {"wrapper", "wrapper_plus_zero", "wrapper_renamed"}
    assert reward.last_terms["helper_used"] == [float(name in wrappers) for name in names]


def test_the_inlining_main_scores_what_each_preset_documents(env):
    """trl-marl's default: 3.0 (structure, syntax, tests); the MAGRPO authors': 2.5, and 2.0 when the main also
    calls the helper and ignores the result (their -0.5)."""
    pairs = [GAMED["inline"], GAMED["discarded_call"]]
    assert score(CodingTeamReward(env), pairs) == pytest.approx([3.0, 3.0])
    assert score(CodingTeamReward(env, preset="magrpo_authors"), pairs) == pytest.approx([2.5, 2.0])


def test_the_authors_gate_pays_nothing_after_a_missing_main(env):
    """Without the main function the authors' reward stops after "aux defined" (0.4); the default still pays the
    structure and syntax terms of a program that parses (0.25 + 0.5)."""
    pairs = [(SQUARE, code("def other(numbers):\n    return 0"))]
    assert score(CodingTeamReward(env, preset="magrpo_authors"), pairs) == pytest.approx([0.4])
    assert score(CodingTeamReward(env), pairs) == pytest.approx([0.75])
    assert score(CodingTeamReward(env, preset="magrpo_authors", gate_on_main=False), pairs) == pytest.approx([0.9])


def test_a_helper_used_only_for_its_order_is_credited_on_alternate_calls(env):
    """`max(xs, key=aux)`: a helper whose every result is off by one keeps the order, so the first corrupted run
    passes every test; corrupting every other call changes the order and the helper is credited."""
    row = {
        "task_id": "Gamed/1",
        "prompt": 'def largest_square(numbers: list) -> int:\n    """The number with the largest square."""\n',
        "entry_point": "largest_square",
        "test": ("def check(candidate):\n    assert candidate([1, -3, 2]) == -3\n    assert candidate([2, 1]) == 2\n"
                 "    assert candidate([0, 5, -4]) == 5\n"),
    }
    reward = CodingTeamReward(env)
    helpers, mains = [SQUARE], [code("def largest_square(numbers):\n    return max(numbers, key=aux)")]
    kwargs = {key: [value] for key, value in row.items()}
    assert reward(prompts=["p"], completions=helpers, agent_completions=[helpers, mains], **kwargs) == [4.0]


def test_unknown_preset_is_a_clear_error(env):
    with pytest.raises(ValueError, match="Unknown coding reward preset 'authors'.*magrpo_authors"):
        CodingTeamReward(env, preset="authors")
