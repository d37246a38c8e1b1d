"""Tests of MAGRPO's cooperative coding environment (`trl_marl.envs.coding`): prompts, feedback, rewards, loaders."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trl_marl.data import load_humaneval, load_mbpp, mbpp_to_humaneval
from trl_marl.envs.base import Transcript
from trl_marl.envs.coding import CooperativeCodingEnv
from trl_marl.envs.coding_analysis import analyze_solution
from trl_marl.reward_contract import RewardFunctionError, TeamReward
from trl_marl.rewards.coding import (
    DEFAULT_CODING_WEIGHTS,
    CodeBLEUTermReward,
    CodingTeamReward,
    CombinedSyntaxReward,
    HelperDefinedReward,
    HelperUsedReward,
    IgnoredCallReward,
    MainDefinedReward,
    NonTrivialMainReward,
    PassRateReward,
)
from trl_marl.sandbox import ProgramExecutor
from trl_marl.utils.code import extract_code, prompt_preamble

PROMPT = '''from typing import List


def sum_of_squares(numbers: List[int]) -> int:
    """Return the sum of the squares of `numbers`.
    >>> sum_of_squares([1, 2])
    5
    """
'''

ROW = {
    "task_id": "Toy/0",
    "prompt": PROMPT,
    "entry_point": "sum_of_squares",
    "canonical_solution": "    return sum(x * x for x in numbers)\n",
    "test": (
        "def check(candidate):\n"
        "    assert candidate([]) == 0\n"
        "    assert candidate([1, 2]) == 5\n"
        "    assert candidate([3]) == 9\n"
    ),
}

HELPER = "Here is the helper.\n```python\ndef aux(x):\n    return x * x\n```\nIt squares a number."
MAIN = (
    "```python\n"
    "def sum_of_squares(numbers):\n"
    "    total = 0\n"
    "    for x in numbers:\n"
    "        total += aux(x)\n"
    "    return total\n"
    "```"
)
MAIN_SKIPS_FIRST = "```python\ndef sum_of_squares(numbers):\n    return sum(aux(x) for x in numbers[1:])\n```"
MAIN_ALONE = "```python\ndef sum_of_squares(numbers):\n    return sum(x ** 2 for x in numbers)\n```"
MAIN_BROKEN = "```python\ndef sum_of_squares(numbers)\n    return 0\n```"
HELPER_ALL = "```python\ndef aux(numbers):\n    return sum(x * x for x in numbers)\n```"
MAIN_WRAPPER = '```python\ndef sum_of_squares(numbers):\n    """Delegate."""\n    return aux(numbers)\n```'


FAILURE = "First failure: assert candidate([1, 2]) == 5 -> AssertionError: got 4, expected 5"


@dataclass
class FakeResult:
    """Stands in for `ExecutionResult` in tests that must not depend on the sandbox's wording."""

    passed: int
    total: int
    reason: str
    stdout: str = ""
    duration: float = 0.0

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


class FakeRunner:
    """Decides a program's result from its text (never executes it) and records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, programs: list[str], tests: list[dict]) -> list[FakeResult]:
        self.calls.append(list(programs))
        out = []
        for program, spec in zip(programs, tests):
            assert spec == {"test": ROW["test"], "entry_point": ROW["entry_point"], "prompt": PROMPT}
            if "[1:]" in program:  # passes `candidate([]) == 0` only, with or without a helper (it calls none)
                out.append(FakeResult(1, 3, FAILURE))
            elif "_trl_marl_wrong" in program:  # the helper's results corrupted: only `candidate([]) == 0` passes
                out.append(FakeResult(1, 3, FAILURE))
            elif "return aux(*args, **kwargs)" in program:  # the main replaced by a wrapper of the helper
                out.append(FakeResult(3, 3, "passed") if "def aux(numbers)" in program
                           else FakeResult(0, 3, "failed: TypeError"))
            elif "aux(" in program and "def aux" not in program:  # a main without its helper (see helper_credit)
                out.append(FakeResult(0, 3, "failed: NameError: name 'aux' is not defined"))
            else:
                out.append(FakeResult(3, 3, "passed"))
        return out


def team_kwargs(helpers: list, mains: list, row: dict = ROW) -> dict:
    """The keyword arguments trl-marl passes to a reward function for these joint actions."""
    n = len(helpers)
    kwargs = {key: [value] * n for key, value in row.items()}
    kwargs.update(agent_completions=[helpers, mains], agent_index=None, turn=1, transcript=[Transcript()] * n)
    return kwargs


def call(reward, helpers: list, mains: list, row: dict = ROW) -> list[float]:
    return reward(prompts=["p"] * len(helpers), completions=helpers, **team_kwargs(helpers, mains, row))


# ------------------------------------------------------------------------------------------------ code analysis
def test_extract_code_strips_fences_and_reads_chat_completions():
    assert extract_code(HELPER) == "def aux(x):\n    return x * x"
    assert extract_code([{"role": "assistant", "content": HELPER}]) == "def aux(x):\n    return x * x"
    assert extract_code("def f():\n    return 1\n\n") == "def f():\n    return 1"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off by the length
    assert extract_code("```text\nusage\n```\n```py\nx = 1\n```") == "x = 1"
    assert extract_code([]) == ""


def test_prompt_preamble_keeps_imports_and_other_definitions():
    assert prompt_preamble(PROMPT, "sum_of_squares") == "from typing import List"
    prompt = 'import math\n\ndef is_even(n):\n    return n % 2 == 0\n\n\ndef f(n):\n    """Doc."""\n'
    assert prompt_preamble(prompt, "f") == "import math\n\ndef is_even(n):\n    return n % 2 == 0"
    assert prompt_preamble("import os\ndef f(:\n", "f") == "import os"  # an unparseable prompt keeps its imports


def test_combined_program():
    solution = analyze_solution(extract_code(HELPER), extract_code(MAIN), "sum_of_squares", "aux",
                                "from typing import List")
    assert solution.program == (
        "from typing import List\n\n\n"
        "def aux(x):\n    return x * x\n\n\n"
        "def sum_of_squares(numbers):\n    total = 0\n    for x in numbers:\n        total += aux(x)\n"
        "    return total\n"
    )
    assert solution.parses and solution.helper_defined and solution.main_defined
    assert solution.helper_used and not solution.main_trivial


@pytest.mark.parametrize(
    "main, used, trivial",
    [
        ("def f(x):\n    return aux(x)", True, True),
        ("def f(x):\n    '''Doc.'''\n    aux(x)", True, True),
        ("def f(x):\n    y = aux(x)\n    return y", True, True),
        ("def f(x):\n    pass", False, True),
        ("def f(x):\n    raise NotImplementedError", False, True),
        ("def f(x):\n    return aux(x) + 1", True, False),
        ("def f(xs):\n    return list(map(aux, xs))", True, False),
        ("def f(x):\n    def aux(y):\n        return y\n    return aux(x) * 2", False, False),  # shadows the helper
        ("def aux(y):\n    return y\n\n\ndef f(x):\n    return aux(x) * 2", False, False),  # redefines it
        ("def g(x):\n    return aux(x) * 2", False, True),  # the wrong function
    ],
)
def test_helper_use_and_trivial_wrappers(main, used, trivial):
    solution = analyze_solution("def aux(x):\n    return x", main, "f")
    assert solution.helper_used is used
    assert solution.main_trivial is trivial


# ------------------------------------------------------------------------------------------------ prompts
HELPER_TURN1 = """\
You are the helper agent in a team of two Python programmers. Your partner will implement the function \
`sum_of_squares` below, and it can call one helper function that you write.

Problem:
```python
from typing import List


def sum_of_squares(numbers: List[int]) -> int:
    \"\"\"Return the sum of the squares of `numbers`.
    >>> sum_of_squares([1, 2])
    5
    \"\"\"
```

Write a helper function named `aux` that does a useful part of the work. Write only `def aux(...)` and the \
imports it needs, in one ```python code block. Do not write `sum_of_squares`."""

MAIN_TURN1 = """\
You are the main agent in a team of two Python programmers. Implement the function `sum_of_squares` below. Your \
partner writes a helper function `aux(...)` that is defined before your code.

Problem:
```python
from typing import List


def sum_of_squares(numbers: List[int]) -> int:
    \"\"\"Return the sum of the squares of `numbers`.
    >>> sum_of_squares([1, 2])
    5
    \"\"\"
```

Call `aux(...)` where it helps, and do not define `aux` yourself. Write the complete function \
`def sum_of_squares(...)` and the imports it needs, in one ```python code block."""

FEEDBACK = "Tests passed: 1/3. " + FAILURE

HELPER_TURN2_REVISION = """\
Turn 2. Your previous helper function `aux`:
```python
def aux(x):
    return x * x
```

Your partner's previous main function `sum_of_squares`:
```python
def sum_of_squares(numbers):
    return sum(aux(x) for x in numbers[1:])
```

Feedback on the combined program:
Tests passed: 1/3. First failure: assert candidate([1, 2]) == 5 -> AssertionError: got 4, expected 5

Revise your helper function `aux` and write it again in one ```python code block."""

MAIN_TURN2_CHAT_REVISION = """\
Turn 2. Your partner's previous helper function `aux`:
```python
def aux(x):
    return x * x
```

Feedback on the combined program:
Tests passed: 1/3. First failure: assert candidate([1, 2]) == 5 -> AssertionError: got 4, expected 5

Revise your main function `sum_of_squares` and write it again in one ```python code block."""


def test_turn1_prompt_snapshots():
    env = CooperativeCodingEnv(num_turns=2, runner=FakeRunner())
    assert env.agent_prompt(ROW, 0, Transcript()) == HELPER_TURN1
    assert env.agent_prompt(ROW, 1, Transcript()) == MAIN_TURN1
    chat = CooperativeCodingEnv(num_turns=2, chat=True, runner=FakeRunner())
    assert chat.prompts(ROW, Transcript()) == [[{"role": "user", "content": HELPER_TURN1}],
                                               [{"role": "user", "content": MAIN_TURN1}]]


def test_turn2_prompt_snapshots():
    transcript = Transcript().extend([HELPER, MAIN_SKIPS_FIRST], FEEDBACK)
    env = CooperativeCodingEnv(num_turns=2, runner=FakeRunner())
    assert env.agent_prompt(ROW, 0, transcript) == HELPER_TURN1 + "\n\n" + HELPER_TURN2_REVISION
    main = env.agent_prompt(ROW, 1, transcript)
    assert main.startswith(MAIN_TURN1 + "\n\nTurn 2. Your previous main function `sum_of_squares`:\n```python\n"
                           "def sum_of_squares(numbers):\n    return sum(aux(x) for x in numbers[1:])\n```")
    assert main.endswith("Your partner's previous helper function `aux`:\n```python\ndef aux(x):\n    return x * x\n"
                         "```\n\nFeedback on the combined program:\n" + FEEDBACK + "\n\nRevise your main function "
                         "`sum_of_squares` and write it again in one ```python code block.")
    chat = CooperativeCodingEnv(num_turns=2, chat=True, runner=FakeRunner())
    assert chat.agent_prompt(ROW, 1, transcript) == [
        {"role": "user", "content": MAIN_TURN1},
        {"role": "assistant", "content": MAIN_SKIPS_FIRST},
        {"role": "user", "content": MAIN_TURN2_CHAT_REVISION},
    ]


def test_empty_code_is_shown_as_a_placeholder():
    transcript = Transcript().extend(["", MAIN], "All 3 tests passed.")
    prompt = CooperativeCodingEnv(num_turns=2, runner=FakeRunner()).agent_prompt(ROW, 1, transcript)
    assert "Your partner's previous helper function `aux`:\n```python\n# (no code)\n```" in prompt


def test_multi_turn_episode_with_fake_runner_shows_the_failing_assert():
    runner = FakeRunner()
    env = CooperativeCodingEnv(num_turns=3, runner=runner)
    reward = CodingTeamReward(env)
    # turn 1: the reward runs the program, then the rollout asks for feedback on the same joint action
    assert call(reward, [HELPER], [MAIN_SKIPS_FIRST]) == [0.25 + 0.25 + 0.5 + 2.0 / 3]  # aux adds no pass
    transcript = Transcript().extend([HELPER, MAIN_SKIPS_FIRST])
    feedback = env.feedback(ROW, transcript)
    assert len(runner.calls) == 3  # the program and its two corrupted helpers; the feedback hits the cache
    assert feedback == FEEDBACK
    transcript = Transcript().extend([HELPER, MAIN_SKIPS_FIRST], feedback)
    assert not env.is_done(ROW, transcript)
    for prompt in env.prompts(ROW, transcript):
        assert prompt.count(feedback) == 1 and "Turn 2." in prompt
    # turn 2: the main agent fixes its code
    transcript = transcript.extend([HELPER, MAIN], env.feedback(ROW, transcript.extend([HELPER, MAIN])))
    assert transcript[-1].feedback == "All 3 tests passed."
    assert "All 3 tests passed." in env.agent_prompt(ROW, 0, transcript) and "Turn 3." in env.agent_prompt(ROW, 0,
                                                                                                        transcript)
    assert env.is_done(ROW, transcript.extend([HELPER, MAIN])) and len(runner.calls) == 4


def test_feedback_reports_syntax_errors_and_missing_functions_without_running():
    runner = FakeRunner()
    env = CooperativeCodingEnv(runner=runner)
    main_error, tests = env.feedback(ROW, Transcript().extend([HELPER, MAIN_BROKEN])).splitlines()
    assert main_error.startswith("Main code: SyntaxError at line 1: ")  # the message depends on the Python version
    assert tests == "Tests: not run (the combined program does not parse)."
    helper_error, no_call, tests = env.feedback(ROW, Transcript().extend(["I do not know.", MAIN_ALONE])).splitlines()
    assert helper_error.startswith("Helper code: SyntaxError at line 1: ")
    assert no_call == "Main code: `sum_of_squares` does not call `aux`."
    assert tests == "Tests: not run (the combined program does not parse)."
    feedback = env.feedback(ROW, Transcript().extend(["x = 1", MAIN_ALONE]))
    assert feedback.splitlines() == [
        "Helper code: no function `aux` is defined.",
        "Main code: `sum_of_squares` does not call `aux`.",
        "All 3 tests passed.",
    ]
    assert len(runner.calls) == 1


# ------------------------------------------------------------------------------------------------ rewards
PAIRS = {
    "correct": (HELPER, MAIN),
    "broken": (HELPER, MAIN_BROKEN),
    "alone": (HELPER, MAIN_ALONE),
    "wrapper": (HELPER_ALL, MAIN_WRAPPER),
    "failing": (HELPER, MAIN_SKIPS_FIRST),
}
EXPECTED = {  # term -> scores of the pairs above, in order
    "helper_defined": [1, 1, 1, 1, 1],
    "main_defined": [1, 0, 1, 1, 1],
    "syntax": [1, 0, 1, 1, 1],
    "tests": [1, 0, 1, 1, 1 / 3],
    "helper_used": [1, 0, 0, 1, 0],  # "failing" passes only the test that never calls `aux`
    "nontrivial": [1, 0, 0, 0, 0],  # nested under helper use; "wrapper" only forwards to the helper
    "ignored_call": [0, 0, 0, 0, 1],  # "failing" calls `aux`, but corrupting its results changes nothing
}
TERMS = {
    "helper_defined": HelperDefinedReward,
    "main_defined": MainDefinedReward,
    "syntax": CombinedSyntaxReward,
    "tests": PassRateReward,
    "helper_used": HelperUsedReward,
    "nontrivial": NonTrivialMainReward,
    "ignored_call": IgnoredCallReward,
}


@pytest.mark.parametrize("name", list(TERMS))
def test_each_reward_term_with_fake_runner(name):
    env = CooperativeCodingEnv(runner=FakeRunner())
    helpers, mains = zip(*PAIRS.values())
    term = TERMS[name](env)
    assert term.__name__ == name
    assert call(term, list(helpers), list(mains)) == pytest.approx(EXPECTED[name])


def test_team_reward_weights_and_terms():
    runner = FakeRunner()
    env = CooperativeCodingEnv(runner=runner)
    reward = CodingTeamReward(env)
    helpers, mains = zip(*PAIRS.values())
    chat_helpers = [[{"role": "assistant", "content": h}] for h in helpers]  # conversational completions
    values = call(reward, chat_helpers, list(mains))
    for j, value in enumerate(values):
        assert value == pytest.approx(sum(DEFAULT_CODING_WEIGHTS[k] * EXPECTED[k][j] for k in EXPECTED))
    assert values[0] == pytest.approx(4.0)  # the maximum
    assert reward.last_terms["tests"] == pytest.approx(EXPECTED["tests"])
    assert "codebleu" not in reward.last_terms  # weight 0: not computed
    assert len(runner.calls[0]) == 4  # one batch; the broken program never runs
    # then the teams that pass a test and refer to `aux` with the helper's results corrupted ("correct", "wrapper",
    # "failing"), the undecided one ("failing") corrupted on every other call, and the credited ones' mains replaced
    # by a wrapper of the helper ("correct", "wrapper")
    assert [len(c) for c in runner.calls] == [4, 3, 1, 2]
    assert all("_trl_marl_wrong" in p for c in runner.calls[1:3] for p in c)
    assert all("return aux(*args, **kwargs)" in p for p in runner.calls[3])
    custom = CodingTeamReward(env, weights={"tests": 1.0, "helper_used": 0.0, "nontrivial": 0.0})
    assert [f.name for f in custom.reward_funcs()] == ["helper_defined", "main_defined", "syntax", "tests"]
    assert custom.reward_weights() == [0.25, 0.25, 0.5, 1.0]
    with pytest.raises(ValueError, match="Unknown reward term"):
        CodingTeamReward(env, weights={"style": 1.0})


def test_team_reward_through_trl_marl_reward_call():
    """Called the way the rollout calls reward functions (`TeamReward`), with per-term logging."""
    env = CooperativeCodingEnv(runner=FakeRunner())
    reward = CodingTeamReward(env)
    team = TeamReward(reward.reward_funcs(), reward.reward_weights())
    helpers, mains = zip(*PAIRS.values())
    per_func, bad = team([["p"] * 5, ["q"] * 5], [list(helpers), list(mains)], [ROW] * 5, [Transcript()] * 5, 1)
    assert per_func[:, 3].tolist() == pytest.approx(EXPECTED["tests"]) and not bad.any()
    assert team.combine(per_func, bad).tolist() == pytest.approx(call(reward, list(helpers), list(mains)))


def test_codebleu_term_with_injected_scorer():
    seen = {}

    def scorer(prompts, completions, **kwargs):
        seen.update(completions=completions, references=kwargs["canonical_solution"])
        return [0.5 for _ in completions]

    env = CooperativeCodingEnv(runner=FakeRunner())
    term = CodeBLEUTermReward(env, scorer=scorer)
    assert call(term, [HELPER], [MAIN]) == [0.5]
    assert seen["completions"] == [extract_code(HELPER) + "\n\n\n" + extract_code(MAIN)]
    assert seen["references"] == [PROMPT + ROW["canonical_solution"]]  # HumanEval: the body after the prompt
    reward = CodingTeamReward(env, weights={"codebleu": 2.0}, codebleu=term)
    assert call(reward, [HELPER], [MAIN]) == [pytest.approx(5.0)]


def test_codebleu_term_with_the_codebleu_package():
    pytest.importorskip("codebleu")
    env = CooperativeCodingEnv(runner=FakeRunner())
    term = CodeBLEUTermReward(env)
    reference_like = "def sum_of_squares(numbers: List[int]) -> int:\n    return sum(x * x for x in numbers)"
    good, bad = call(term, ["", "x = 1"], [reference_like, "```python\nprint('hello')\n```"])
    assert 0.0 <= bad < good <= 1.0


# ------------------------------------------------------------------------------------------------ real sandbox
@pytest.fixture(scope="module")
def sandbox_env():
    """An environment on the real sandbox (`trl_marl.sandbox`), with its own cache."""
    from trl_marl.sandbox import SandboxLimits

    return CooperativeCodingEnv(num_turns=2, executor=ProgramExecutor(limits=SandboxLimits(wall_time=3, cpu_time=2)))


def test_reward_terms_with_the_sandbox(sandbox_env):
    reward = CodingTeamReward(sandbox_env)
    helpers, mains = zip(*PAIRS.values())
    misses = sandbox_env.executor.misses
    values = call(reward, list(helpers), list(mains))
    for name, expected in EXPECTED.items():
        if DEFAULT_CODING_WEIGHTS[name]:  # terms of weight 0 are not computed
            assert reward.last_terms[name] == pytest.approx(expected), name
        assert call(TERMS[name](sandbox_env), list(helpers), list(mains)) == pytest.approx(expected), name
    assert values[0] == pytest.approx(4.0)
    # 4 programs (the broken one never runs), 3 with the helper's results corrupted on every call and 1 on every
    # other call, 2 with a wrapper main; repeated calls hit the cache
    assert sandbox_env.executor.misses - misses == 10


DEAD_CALL_WRONG = "```python\ndef sum_of_squares(numbers):\n    if False:\n        aux(0)\n    return -1\n```"
DEAD_CALL_ALONE = ("```python\ndef sum_of_squares(numbers):\n    if False:\n        return aux(0)\n"
                   "    return sum(x * x for x in numbers)\n```")
UNREACHED_CALL = ("```python\ndef sum_of_squares(numbers):\n    if len(numbers) < 0:\n        return aux(0)\n"
                  "    return sum(x * x for x in numbers)\n```")
IGNORED_CALL = ("```python\ndef sum_of_squares(numbers):\n    try:\n        aux(numbers)\n    except Exception:\n"
                "        pass\n    return sum(x * x for x in numbers)\n```")


def test_cooperation_terms_cannot_be_had_without_a_call_that_matters(sandbox_env):
    """Issue 26: a main calling `aux` under `if False:` and passing no test scored 2.0 of 4.0; calls that never run
    or do not matter scored the full cooperation bonus. Only a helper that adds passing tests earns it."""
    reward = CodingTeamReward(sandbox_env)
    mains = [DEAD_CALL_WRONG, DEAD_CALL_ALONE, UNREACHED_CALL, IGNORED_CALL, MAIN]
    values = call(reward, [HELPER] * len(mains), mains)
    assert reward.last_terms["tests"] == [0.0, 1.0, 1.0, 1.0, 1.0]
    assert reward.last_terms["helper_used"] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert reward.last_terms["nontrivial"] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert values == pytest.approx([1.0, 3.0, 3.0, 3.0, 4.0])


def test_multi_turn_episode_with_the_sandbox(sandbox_env):
    """Turn-1 feedback from a real run (the first failing assert) is in both turn-2 prompts."""
    turn1 = Transcript().extend([HELPER, MAIN_SKIPS_FIRST])
    feedback = sandbox_env.feedback(ROW, turn1)
    assert feedback.startswith("Tests passed: 1/3.")
    assert "assert candidate([1, 2]) == 5" in feedback and "AssertionError" in feedback and "got 4" in feedback
    turn1 = Transcript().extend([HELPER, MAIN_SKIPS_FIRST], feedback)
    helper_prompt, main_prompt = sandbox_env.prompts(ROW, turn1)
    assert helper_prompt == HELPER_TURN1 + "\n\n" + HELPER_TURN2_REVISION.replace(FEEDBACK, feedback)
    assert feedback in main_prompt and "numbers[1:]" in main_prompt
    turn2 = turn1.extend([HELPER, MAIN])
    assert sandbox_env.feedback(ROW, turn2) == "All 3 tests passed."
    assert sandbox_env.is_done(ROW, turn2)


def test_sandbox_feedback_on_runtime_errors_and_timeouts(sandbox_env):
    feedback = sandbox_env.feedback(ROW, Transcript().extend(["x = 1", MAIN]))
    assert feedback.startswith("Helper code: no function `aux` is defined.\nTests passed: 1/3.")
    assert "NameError" in feedback and "aux" in feedback
    from trl_marl.sandbox import SandboxLimits

    quick = CooperativeCodingEnv(limits=SandboxLimits(wall_time=1, cpu_time=1))
    loop = "```python\ndef sum_of_squares(numbers):\n    while True:\n        aux(1)\n```"
    feedback = quick.feedback(ROW, Transcript().extend([HELPER, loop]))
    assert feedback.startswith("Tests passed: 0/3.") and "time" in feedback


def test_prompt_preamble_and_mbpp_rows_run_in_the_sandbox(sandbox_env):
    row = {
        "prompt": 'def is_even(n):\n    return n % 2 == 0\n\n\ndef count_even(xs):\n    """Count evens."""\n',
        "entry_point": "count_even",
        "test": "def check(candidate):\n    assert candidate([1, 2, 4]) == 2\n",
    }
    main = "def count_even(xs):\n    return sum(1 for x in xs if is_even(x) and aux(x))"  # is_even: from the prompt
    assert sandbox_env.feedback(row, Transcript().extend(["def aux(x):\n    return True", main])) == (
        "All 1 tests passed."
    )
    mbpp = mbpp_to_humaneval(MBPP_FULL)
    feedback = sandbox_env.feedback(mbpp, Transcript().extend(["", mbpp["canonical_solution"]]))
    assert feedback.splitlines()[-1] == "All 3 tests passed."
    sanitized = mbpp_to_humaneval(MBPP_SANITIZED)
    feedback = sandbox_env.feedback(sanitized, Transcript().extend(["", sanitized["canonical_solution"]]))
    assert feedback.splitlines()[-1] == "All 2 tests passed."


def test_trains_with_magrpo_for_two_turns(tmp_path):
    """The env and the reward terms plug into `MAGRPOTrainer` (column check, prompts, feedback, per-term logs)."""
    import torch
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    torch.manual_seed(0)
    tokenizer = build_toy_tokenizer()
    build_toy_model(tokenizer, hidden_size=32, num_layers=1, max_position_embeddings=2048).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    runner = FakeRunner()
    env = CooperativeCodingEnv(num_turns=2, runner=runner)
    reward = CodingTeamReward(env)
    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=2, per_device_train_batch_size=2,
        max_completion_length=4, max_steps=1, logging_steps=1, report_to="none", save_strategy="no",
        gradient_checkpointing=False, disable_tqdm=True, num_turns=2, reward_weights=reward.reward_weights(),
    )
    trainer = MAGRPOTrainer(model=str(tmp_path), reward_funcs=reward.reward_funcs(), env=env, args=args,
                            train_dataset=Dataset.from_list([ROW] * 2))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: avoid oversubscribing the cores
    try:
        trainer.train()
    finally:
        torch.set_num_threads(threads)
    logs = trainer.state.log_history[0]
    assert "rewards/tests/mean" in logs and "turn_2/rewards/helper_used/mean" in logs


# ------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("column", ["test", "entry_point"])
def test_missing_column_is_named(column):
    env = CooperativeCodingEnv(runner=FakeRunner())
    row = {k: v for k, v in ROW.items() if k != column}
    with pytest.raises(KeyError, match=f"'{column}'"):
        env.agent_prompt(row, 0, Transcript())
    with pytest.raises(KeyError, match=f"'{column}'"):
        env.feedback(row, Transcript().extend([HELPER, MAIN]))
    with pytest.raises(KeyError, match=f"'{column}'"):
        call(CodingTeamReward(env), [HELPER], [MAIN], row)
    with pytest.raises(RewardFunctionError, match=f"'{column}'"):
        TeamReward([CodingTeamReward(env)])([["p"], ["q"]], [[HELPER], [MAIN]], [row], [Transcript()], 1)
    with pytest.raises(ValueError, match=f"'{column}'"):
        env.agent_prompt({**ROW, column: ""}, 0, Transcript())
    with pytest.raises(KeyError, match=f"'{column}'"):  # what trainers check before training: the column names
        env.validate_row(dict.fromkeys(row))
    env.validate_row(dict.fromkeys(ROW))


def test_reward_without_agent_completions_is_a_clear_error():
    kwargs = team_kwargs([HELPER], [MAIN])
    del kwargs["agent_completions"]
    with pytest.raises(ValueError, match="agent_completions"):
        CodingTeamReward(CooperativeCodingEnv(runner=FakeRunner()))(["p"], [HELPER], **kwargs)


def test_bad_configuration():
    with pytest.raises(ValueError, match="identifier"):
        CooperativeCodingEnv(helper_name="not a name")
    with pytest.raises(ValueError, match="either"):
        CooperativeCodingEnv(executor=ProgramExecutor(FakeRunner()), runner=FakeRunner())
    with pytest.raises(IndexError):
        CooperativeCodingEnv(runner=FakeRunner()).agent_prompt(ROW, 2, Transcript())


def test_executor_cache_is_bounded():
    runner = FakeRunner()
    executor = ProgramExecutor(runner, cache_size=2)
    spec = {"test": ROW["test"], "entry_point": ROW["entry_point"], "prompt": PROMPT}
    executor.run(["a", "b", "a"], [spec] * 3)
    assert runner.calls == [["a", "b"]] and (executor.hits, executor.misses) == (1, 2)
    executor.run(["c"], [spec])
    executor.run(["a"], [spec])  # evicted by "c"
    assert runner.calls[-1] == ["a"]

    def flaky(programs, tests):
        return [FakeResult(0, 1, "sandbox_error: no slot")]

    executor = ProgramExecutor(flaky)
    executor.run(["a"], [spec])
    executor.run(["a"], [spec])
    assert executor.misses == 2  # a sandbox failure is not cached


# ------------------------------------------------------------------------------------------------ loaders
def fake_load_dataset(rows: list[dict], calls: list):
    from datasets import Dataset

    def load(*args, **kwargs):
        calls.append((args, kwargs))
        return Dataset.from_list(rows)

    return load


def test_load_humaneval(monkeypatch, tmp_path):
    import datasets

    calls: list = []
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset([ROW], calls))
    dataset = load_humaneval()
    assert calls == [(("openai/openai_humaneval",), {"split": "test"})]
    assert dataset[0] == ROW
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset([{"prompt": "p"}], calls))
    with pytest.raises(KeyError, match="entry_point"):
        load_humaneval()


def test_load_humaneval_from_a_local_file(tmp_path):
    import json

    path = tmp_path / "humaneval.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    dataset = load_humaneval(data_files=str(path))
    assert dataset.num_rows == 1 and dataset[0]["entry_point"] == "sum_of_squares"


MBPP_FULL = {
    "task_id": 11,
    "text": "Write a python function to remove first and last occurrence of a given character from the string.",
    "code": (
        "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n"
        "            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n"
        "        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s "
    ),
    "test_list": [
        'assert remove_Occ("hello","l") == "heo"',
        'assert remove_Occ("abcda","a") == "bcd"',
        'assert remove_Occ("PHP","P") == "H"',
    ],
    "test_setup_code": "",
    "challenge_test_list": [],
}

MBPP_SANITIZED = {
    "source_file": "Benchmark Questions Verification V2.ipynb",
    "task_id": 2,
    "prompt": "Write a function to find the shared elements from the given two lists.",
    "code": "def helper(x):\n    return set(x)\n\ndef similar_elements(test_tup1, test_tup2):\n"
            "  res = tuple(helper(test_tup1) & helper(test_tup2))\n  return (res) ",
    "test_imports": ["import math"],
    "test_list": [
        "assert set(similar_elements((3, 4, 5, 6),(5, 7, 4, 10))) == set((4, 5))",
        "assert set(similar_elements((1, 2, 3, 4),(5, 4, 3, 7))) == set((3, 4))",
    ],
}


def test_mbpp_row_mapping():
    row = mbpp_to_humaneval(MBPP_FULL)
    assert row["entry_point"] == "remove_Occ" and row["task_id"] == "MBPP/11"
    assert row["prompt"] == (
        'def remove_Occ(s, ch):\n    """\n    Write a python function to remove first and last occurrence of a given '
        'character from the\n    string.\n\n    Examples:\n    assert remove_Occ("hello","l") == "heo"\n    """\n'
    )
    assert row["test"] == "def check(candidate):\n" + "".join(f"    {t}\n" for t in MBPP_FULL["test_list"])
    assert row["canonical_solution"] == MBPP_FULL["code"].replace("\r\n", "\n")
    sanitized = mbpp_to_humaneval(MBPP_SANITIZED, num_examples=0)
    assert sanitized["entry_point"] == "similar_elements"  # the function the tests call, not the first one
    assert sanitized["test"].startswith("import math\n\n\ndef check(candidate):\n    assert set(similar_elements(")
    assert "Examples" not in sanitized["prompt"]


@pytest.mark.parametrize("config, row", [("full", MBPP_FULL), ("sanitized", MBPP_SANITIZED)])
def test_load_mbpp(monkeypatch, config, row):
    import datasets

    calls: list = []
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset([row], calls))
    dataset = load_mbpp(config=config)
    assert calls == [(("google-research-datasets/mbpp", config), {"split": "test"})]
    assert set(dataset.column_names) == {"task_id", "prompt", "canonical_solution", "test", "entry_point",
                                         "test_list", "text"}
    assert dataset[0]["text"] == row.get("text", row.get("prompt"))
    env = CooperativeCodingEnv(runner=FakeRunner())
    env.validate_row(dataset[0])
    assert "```python\ndef " in env.agent_prompt(dataset[0], 1, Transcript())


# ------------------------------------------------------------------------------------------------ helper contracts
SPEC_ROW = {**ROW, "helper_signature": "(x: int) -> int", "helper_doc": "Return the square of `x`."}


def test_a_stated_helper_contract_is_shown_to_both_agents():
    env = CooperativeCodingEnv(chat=True)
    helper_prompt, main_prompt = (env.agent_prompt(SPEC_ROW, i, Transcript())[0]["content"] for i in (0, 1))
    assert helper_prompt == ("Write a Python function `aux(x: int) -> int`. Return the square of `x`. Your partner "
                             "will call it to write `sum_of_squares`. Reply with only the code.")
    assert main_prompt == (
        "Write a Python function `sum_of_squares(numbers: List[int]) -> int`. Return the sum of the squares of "
        "`numbers`.\n>>> sum_of_squares([1, 2])\n5\n\nYou can call `aux(x: int) -> int`, which your partner writes "
        "(do not write it yourself): Return the square of `x`.\n\nReply with only the code."
    )
    # the helper's name follows the env, and a row without a contract (or with an empty one) keeps the open prompts
    renamed = CooperativeCodingEnv(helper_name="square").agent_prompt(SPEC_ROW, 1, Transcript())
    assert "You can call `square(x: int) -> int`" in renamed
    for row in (ROW, {**SPEC_ROW, "helper_doc": " "}):
        assert "does a useful part of the work" in env.agent_prompt(row, 0, Transcript())[0]["content"]


def test_code_prefill_is_continued_and_read_back_with_the_completion():
    """The model continues the assistant prefill "```python\\n": its completion is the code and the closing fence
    only, and the program is read from prefill + completion (without the prefill it has no fence and is prose)."""
    env = CooperativeCodingEnv(chat=True, code_prefill="```python\n", runner=FakeRunner())
    prompt = env.agent_prompt(SPEC_ROW, 0, Transcript())
    assert prompt[-1] == {"role": "assistant", "content": "```python\n"}
    helper = "def aux(x):\n    return x * x\n```\nThis squares x."
    main = "def sum_of_squares(numbers):\n    return sum(aux(x) for x in numbers)\n```"
    solution = env.assemble(SPEC_ROW, [{"role": "assistant", "content": helper}], main)
    assert solution.helper_code == "def aux(x):\n    return x * x" and solution.parses and solution.helper_used
    values = PassRateReward(env)(prompts=["p"], completions=[helper], **team_kwargs([helper], [main], SPEC_ROW))
    assert values == [1.0]
    # turn 2 in chat mode: the agent's own last answer is shown whole (prefill included), then the prefill again
    env2 = CooperativeCodingEnv(num_turns=2, chat=True, code_prefill="```python\n", runner=FakeRunner())
    transcript = Transcript().extend([helper, main], "All 3 tests passed.")
    messages = env2.agent_prompt(SPEC_ROW, 0, transcript)
    assert messages[1] == {"role": "assistant", "content": "```python\n" + helper}
    assert messages[-1] == {"role": "assistant", "content": "```python\n"}
    assert "def sum_of_squares(numbers):" in messages[2]["content"]  # the partner's code, read with the prefill
    with pytest.raises(ValueError, match="`code_prefill` needs chat prompts"):
        CooperativeCodingEnv(code_prefill="```python\n")


def test_only_top_level_definitions_of_an_answer_are_kept():
    """Example usage after the function (a `print` of a name that does not exist) would fail the whole program at
    import; it is dropped, while imports, functions, decorators and literal constants stay."""
    helper = ("```python\nimport math\nSCALE = 1\n\n@staticmethod\ndef unused():\n    pass\n\ndef aux(x):\n"
              "    # square\n    return x * x * SCALE\n\n# Example usage:\nprint(aux(num))\nif True:\n    aux = None\n"
              "table = dict(a=1)\n```")
    env = CooperativeCodingEnv(runner=FakeRunner())
    solution = env.assemble(ROW, helper, MAIN)
    assert solution.helper_code == "import math\n\nSCALE = 1\n\ndef aux(x):\n    # square\n    return x * x * SCALE"
    assert solution.parses and solution.helper_defined
    every = CooperativeCodingEnv(runner=FakeRunner(), keep_helper_only=False).assemble(ROW, helper, MAIN)
    assert every.helper_code == ("import math\n\nSCALE = 1\n\n@staticmethod\ndef unused():\n    pass\n\n"
                                 "def aux(x):\n    # square\n    return x * x * SCALE")
    kept = CooperativeCodingEnv(runner=FakeRunner(), keep_definitions_only=False,
                                keep_helper_only=False).assemble(ROW, helper, MAIN)
    assert "print(aux(num))" in kept.helper_code
    broken = "```python\ndef aux(x)\n    return x\nprint(1)\n```"  # no parse: kept whole, its error reported
    assert env.assemble(ROW, broken, MAIN).helper_error is not None


def test_coding_rewards_run_in_the_trainers_process_under_a_reward_timeout():
    """With a `reward_timeout` a reward is called in a forked worker by default (`reward_isolation="process"`), whose
    memory changes never come back. The coding rewards opt out: their programs run in the sandbox with their own
    limits, and the executor's cache is shared with the environment, so each program runs once for every term and
    for the feedback (a forked worker would run it again for each term, and `last_terms` would stay empty)."""
    from trl_marl.reward_contract import RewardSet

    runner = FakeRunner()
    env = CooperativeCodingEnv(runner=runner)
    team = CodingTeamReward(env)
    rewards = RewardSet([*team.reward_funcs(), team])
    rewards.set_timeout(30.0, "MAGRPOConfig.reward_timeout")
    assert rewards.isolation == "process"
    per_func, bad = rewards.score([["p"], ["q"]], [[HELPER], [MAIN]], [ROW], [Transcript()], 1)
    assert per_func[0].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0]) and not bad.any()
    # the program once, with the helper's results corrupted once, with a wrapper main once: one cache, here
    assert len(runner.calls) == 3
    assert team.last_terms["tests"] == [1.0]
