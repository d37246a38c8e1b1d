"""Programs that try to forge the sandbox's verdict instead of solving the task: each must score 0.

Every attack below is a real program that scored 1.0 (all tests passed) with the sandbox before issue 10, when the
tests ran in the program's own process (checked against that version; see the issue's report). None of them solves
the task: `add` must add, and every attack returns something else or nothing. `shadow_builtins` scored 1/3 then
(the one test that uses `abs`). The exit tricks at the end scored 0 before too and are kept so that they stay at 0.
"""

from __future__ import annotations

import logging
import os

import pytest

from trl_marl.rewards.execution import UnitTestReward
from trl_marl.sandbox import SandboxLimits, TestSpec, run_programs

LIMITS = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512)
HUMANEVAL_TEST = (
    "def check(candidate):\n"
    "    assert candidate(1, 2) == 3\n"
    "    assert candidate(20, 22) == 42\n"
    "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
)
HUMANEVAL = TestSpec.humaneval(HUMANEVAL_TEST, "add")
MBPP = TestSpec.mbpp(["assert add(1, 2) == 3", "assert add(20, 22) == 42", "assert add(-1, 1) == 0"])

# Walks the frames above the program's code (through a traceback) to find the harness's reporting function.
_FIND_IN_FRAMES = '''
import sys
def _find(names):
    try:
        raise RuntimeError
    except RuntimeError as exc:
        frame = exc.__traceback__.tb_frame
    while frame is not None:
        for name in names:
            if name in frame.f_locals:
                return frame.f_locals[name], frame
        frame = frame.f_back
    return None, None
'''

ATTACKS: dict[str, str] = {
    # Class 1: frame introspection with sys._getframe: the caller of `add` is the tests function, whose first
    # argument reports outcomes. Report every test as passed, then answer anything.
    "getframe_record": (
        "import sys\n"
        "def add(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        for name, value in frame.f_locals.items():\n"
        "            if callable(value) and 'record' in name:\n"
        "                for index in range(64):\n"
        "                    value(index, None)\n"
        "        frame = frame.f_back\n"
        "    return None\n"
    ),
    # Class 2: a traceback's frames, at import time: find the harness's `emit`, report passes and `done`, leave.
    "traceback_emit_done": _FIND_IN_FRAMES + (
        "import os\n"
        "emit, _ = _find(['emit'])\n"
        "if emit is not None:\n"
        "    for index in range(64):\n"
        "        emit('t', index, True, '')\n"
        "    emit('done')\n"
        "os._exit(0)\n"
    ),
    # Class 3: a trace hook that jumps over the tests: in the tests function, jump from the first line to its last
    # line (the report of the last test), so the other tests never report.
    "settrace_jump": (
        "import sys\n"
        "def _local(frame, event, arg):\n"
        "    if event == 'line' and not getattr(_local, 'jumped', False):\n"
        "        _local.jumped = True\n"
        "        last = max(line for _, _, line in frame.f_code.co_lines() if line)\n"
        "        try:\n"
        "            frame.f_lineno = last\n"
        "        except ValueError:\n"
        "            pass\n"
        "    return _local\n"
        "def _global(frame, event, arg):\n"
        "    if frame.f_code.co_filename == '<tests>' and frame.f_code.co_name.startswith('_trl'):\n"
        "        return _local\n"
        "    return None\n"
        "sys.settrace(_global)\n"
        "def add(a, b):\n"
        "    return None\n"
    ),
    # Class 4: an object whose comparison always says True (also a subclass of int, which looks like plain data).
    "eq_always_true": (
        "class Anything:\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "    def __ne__(self, other):\n"
        "        return False\n"
        "    def __sub__(self, other):\n"
        "        return 0\n"
        "    __rsub__ = __sub__\n"
        "def add(a, b):\n"
        "    return Anything()\n"
    ),
    "int_subclass_eq": (
        "class Int(int):\n"
        "    def __eq__(self, other):\n"
        "        return True\n"
        "    def __sub__(self, other):\n"
        "        return Int(0)\n"
        "    __hash__ = int.__hash__\n"
        "def add(a, b):\n"
        "    return Int(7)\n"
    ),
    # The program's names are the tests' names: shadow the built-ins the tests use.
    "shadow_builtins": (
        "def abs(x):\n"
        "    return 0\n"
        "class AssertionError(Exception):\n"
        "    pass\n"
        "def add(a, b):\n"
        "    return 0 if isinstance(a, float) else None\n"
    ),
    # Class 5: printed fake markers and writes to inherited file descriptors: take the nonce from the harness's
    # frames and write well-formed reports to every descriptor that might be the report pipe.
    "nonce_to_inherited_fds": _FIND_IN_FRAMES + (
        "import os\n"
        "nonce, _ = _find(['nonce'])\n"
        "lines = ''.join('%s %r\\n' % (nonce, ('t', i, True, '')) for i in range(64))\n"
        "lines += '%s %r\\n' % (nonce, ('done',))\n"
        "print(lines)\n"
        "for fd in range(1, 256):\n"
        "    try:\n"
        "        os.write(fd, lines.encode())\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    ),
    # Exit tricks combined with a forged report through the frames: report, then leave before any test runs.
    "forge_then_sys_exit": _FIND_IN_FRAMES + (
        "record, _ = _find(['record'])\n"
        "emit, _ = _find(['emit'])\n"
        "if emit is not None:\n"
        "    for index in range(64):\n"
        "        emit('t', index, True, '')\n"
        "    emit('done')\n"
        "sys.exit(0)\n"
    ),
}

# Exit tricks alone (scored 0 before issue 10 as well).
EXIT_TRICKS: dict[str, str] = {
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "atexit": "import atexit, os\natexit.register(lambda: print('ok'))\ndef add(a, b):\n    raise SystemExit(0)\n",
    "print_markers": "print(\"('t', 0, True, '')\")\nprint(\"('done',)\")\ndef add(a, b):\n    return None\n",
}


@pytest.mark.parametrize("spec", [HUMANEVAL, MBPP], ids=["humaneval", "mbpp"])
def test_forgery_corpus_scores_zero(spec):
    names = list(ATTACKS) + list(EXIT_TRICKS)
    programs = [*ATTACKS.values(), *EXIT_TRICKS.values()]
    results = run_programs(programs, [spec] * len(programs), LIMITS)
    scores = {name: result.fraction for name, result in zip(names, results)}
    assert scores == dict.fromkeys(names, 0.0), {n: (r.passed, r.reason) for n, r in zip(names, results)}


def test_honest_program_still_passes_beside_the_corpus():
    programs = ["def add(a, b):\n    return a + b\n", "import math\ndef add(a, b):\n    return math.fsum([a, b])\n"]
    results = run_programs(programs, [HUMANEVAL, MBPP], LIMITS)
    assert [r.reason for r in results] == ["ok", "ok"]


def test_reward_of_forgeries_is_zero():
    reward = UnitTestReward(limits=LIMITS)
    programs = list(ATTACKS.values())
    scores = reward(prompts=[""] * len(programs), completions=programs, test=[HUMANEVAL_TEST] * len(programs),
                    entry_point=["add"] * len(programs))
    assert scores == [0.0] * len(programs)


def test_forged_log_records_are_bounded_and_sanitized(caplog):
    """A program cannot make the trainer log: 1000 forged notes with terminal escapes give no warning."""
    program = _FIND_IN_FRAMES + (
        "import os\n"
        "emit, _ = _find(['emit'])\n"
        "nonce, _ = _find(['nonce'])\n"
        "for i in range(1000):\n"
        "    line = '%s %r\\n' % (nonce, ('note', '\\x1b[31mforged %d' % i + 'x' * 5000))\n"
        "    for fd in range(3, 64):\n"
        "        try:\n"
        "            os.write(fd, line.encode())\n"
        "        except OSError:\n"
        "            pass\n"
        "    if emit is not None:\n"
        "        emit('note', '\\x1b[31mforged %d' % i)\n"
        "def add(a, b):\n"
        "    return a + b\n"
    )
    with caplog.at_level(logging.WARNING, logger="trl_marl.sandbox"):
        [result] = run_programs([program], [HUMANEVAL], SandboxLimits(wall_time=10, cpu_time=5))
    # It scribbled on its pipe to the harness too: that breaks the protocol, which fails the program.
    assert result.passed == 0, result
    assert result.reason == "error: the program broke the harness protocol: malformed message header", result
    forged = [r for r in caplog.records if "forged" in r.getMessage()]
    assert forged == []
    assert all("\x1b" not in r.getMessage() and len(r.getMessage()) <= 300 for r in caplog.records)


def test_sanitized_warning_helper():
    from trl_marl.sandbox.warn import clean_text

    assert clean_text("\x1b[31mred\nline" + "x" * 1000) .startswith("\\x1b[31mred\\nline")
    assert len(clean_text("y" * 5000)) == 300


@pytest.mark.skipif(os.geteuid() != 0, reason="the namespaces level needs root")
def test_results_report_hardening_layers():
    [result] = run_programs(["def add(a, b):\n    return a + b\n"], [HUMANEVAL], LIMITS)
    assert {"no_new_privs", "uid", "pidns", "mountns", "netns", "nosuid"} <= set(result.isolation), result.isolation


# ---------------------------------------------------------------------------------------------------- issue 26
# Names a test uses must mean what the test's author meant: a module the test reads (`math.isclose`, `re.search`)
# is the real module whatever the program binds to that name, the built-ins are the real ones, and only the
# functions under test come from the program. Each program below returns a wrong answer (or raises) and passed
# every test before issue 26 by rebinding a name the test reads, or by raising an exception that the harness
# re-raised as control flow.
SPHERE = TestSpec.mbpp(["assert math.isclose(volume_sphere(10), 4188.79, rel_tol=0.001)",
                        "assert math.isclose(volume_sphere(25), 65449.84, rel_tol=0.001)"])
NAME_ATTACKS: dict[str, tuple[str, TestSpec]] = {
    "math_class": (
        "class math:\n"
        "    @staticmethod\n"
        "    def isclose(*args, **kwargs):\n"
        "        return True\n"
        "def volume_sphere(r):\n"
        "    return 0\n", SPHERE),
    "math_simplenamespace": (
        "import types\n"
        "math = types.SimpleNamespace(isclose=lambda *a, **k: True)\n"
        "def volume_sphere(r):\n"
        "    return 0\n", SPHERE),
    "math_function_with_attribute": (
        "def math():\n"
        "    pass\n"
        "math.isclose = lambda *a, **k: True\n"
        "def volume_sphere(r):\n"
        "    return 0\n", SPHERE),
    "math_forged_module_object": (  # a module object under another name, passed off as `math`
        "import types\n"
        "math = types.ModuleType('mathx')\n"
        "math.isclose = lambda *a, **k: True\n"
        "def volume_sphere(r):\n"
        "    return 0\n", SPHERE),
    "cmath_as_math_patched": (  # a real module that H would import, patched in the program's process
        "import cmath as math\n"
        "math.isclose = lambda *a, **k: True\n"
        "def volume_sphere(r):\n"
        "    return 0\n", SPHERE),
    "re_class": (
        "class re:\n"
        "    @staticmethod\n"
        "    def fullmatch(*args, **kwargs):\n"
        "        return True\n"
        "def digits(text):\n"
        "    return 'no digits here'\n",
        TestSpec.mbpp(["assert re.fullmatch('[0-9]+', digits('a1b22c'))",
                       "assert re.fullmatch('[0-9]+', digits('x7'))"])),
    "statistics_namespace": (
        "import types\n"
        "statistics = types.SimpleNamespace(mean=lambda xs: 0)\n"
        "def average(xs):\n"
        "    return 0\n",
        TestSpec.mbpp(["assert average([1, 2, 3]) == statistics.mean([1, 2, 3])",
                       "assert average([4, 8]) == statistics.mean([4, 8])"])),
    # A program exception is never control flow in the harness: StopIteration ends `map`, `filter` and
    # `iter(callable, sentinel)` early, so `all(...)` sees nothing false and `not any(...)` nothing true.
    "stopiteration_all_map": (
        "def square(x):\n"
        "    raise StopIteration\n",
        TestSpec.mbpp(["assert all(map(lambda x: square(x) == x * x, range(10)))",
                       "assert all(map(lambda x: square(x) >= 0, [-3, 3]))"])),
    "stopiteration_not_any_filter": (
        "def is_odd(x):\n"
        "    raise StopIteration('done')\n",
        TestSpec.mbpp(["assert not any(filter(is_odd, [2, 4, 6]))",
                       "assert not any(map(is_odd, [8, 10]))"])),
    "stopiteration_humaneval": (
        "def add(a, b):\n"
        "    raise StopIteration\n",
        TestSpec.humaneval("def check(candidate):\n"
                           "    assert all(map(lambda p: candidate(*p) == p[0] + p[1], [(1, 2), (3, 4)]))\n"
                           "    assert list(iter(lambda: candidate(1, 1), 2)) == []\n", "add")),
    "stopasynciteration": (
        "def square(x):\n"
        "    raise StopAsyncIteration\n",
        TestSpec.mbpp(["assert all(map(lambda x: square(x) == x * x, range(10)))"])),
    # Built-ins redefined at module level (regression: the program never shadows the tests' built-ins).
    "builtins_redefined": (
        "def all(*a, **k):\n    return True\n"
        "def any(*a, **k):\n    return True\n"
        "def len(x):\n    return 3\n"
        "def abs(x):\n    return 0\n"
        "def isinstance(*a):\n    return True\n"
        "def round(*a, **k):\n    return 0\n"
        "def sorted(*a, **k):\n    return [1, 2, 3]\n"
        "def set(*a):\n    return 0\n"
        "def float(*a):\n    return 0.0\n"
        "def f(x):\n    return None\n",
        TestSpec.mbpp(["assert all(f(x) for x in range(3))", "assert len(f(1)) == 3", "assert abs(f(2)) == 0",
                       "assert isinstance(f(3), list)", "assert round(f(4)) == 0", "assert sorted(f(5)) == [1, 2, 3]",
                       "assert set(f(6)) == 0", "assert float(f(7)) == 0.0", "assert any([f(8)])"])),
}


def test_rebound_names_and_control_flow_exceptions_score_zero():
    names = list(NAME_ATTACKS)
    results = run_programs([p for p, _ in NAME_ATTACKS.values()], [s for _, s in NAME_ATTACKS.values()], LIMITS)
    scores = {name: result.passed for name, result in zip(names, results)}
    assert scores == dict.fromkeys(names, 0), {n: (r.passed, r.reason) for n, r in zip(names, results)}


def test_honest_programs_pass_the_same_tests():
    programs = [
        ("import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3\n", SPHERE),
        ("from math import pi\ndef volume_sphere(r):\n    return 4 / 3 * pi * r ** 3\n", SPHERE),  # no `math`
        ("import re\ndef digits(text):\n    return ''.join(re.findall('[0-9]', text))\n",
         NAME_ATTACKS["re_class"][1]),
        ("def average(xs):\n    return sum(xs) / len(xs)\n", NAME_ATTACKS["statistics_namespace"][1]),
        ("def square(x):\n    return x * x\n", NAME_ATTACKS["stopiteration_all_map"][1]),
        ("def is_odd(x):\n    return x % 2 == 1\n", NAME_ATTACKS["stopiteration_not_any_filter"][1]),
        ("def f(x):\n    return [x, x, x]\n",
         TestSpec.mbpp(["assert len(f(1)) == 3", "assert all(f(x) for x in range(1, 3))"])),
    ]
    results = run_programs([p for p, _ in programs], [s for _, s in programs], LIMITS)
    assert [r.reason for r in results] == ["ok"] * len(programs), results


def test_a_function_under_test_may_carry_a_module_name():
    """A test that calls `copy(...)` itself means the program's function, not the module."""
    [result] = run_programs(["def copy(xs):\n    return list(xs)\n"], [["assert copy((1, 2)) == [1, 2]"]], LIMITS)
    assert result.reason == "ok", result


def test_program_exceptions_reach_the_tests_as_failures_not_control_flow():
    from trl_marl.sandbox import harness

    for name in ("StopIteration", "StopAsyncIteration", "GeneratorExit", "KeyboardInterrupt", "SystemExit"):
        exc = harness._exception(name, "stop")
        assert type(exc) is harness.ProgramError and str(exc) == name + ": stop", (name, exc)
    assert type(harness._exception("ValueError", "bad")) is ValueError  # tests expecting ValueError keep working
    [result] = run_programs(["def f(x):\n    raise StopIteration('stop')\n"], [["assert f(1) == 1"]], LIMITS)
    assert result.passed == 0 and result.reason.endswith("ProgramError: StopIteration: stop (program line 2)"), result


def test_modules_read_are_the_names_used_only_as_modules():
    from trl_marl.sandbox.plans import make_plan, modules_read

    assert modules_read(["assert math.isclose(f(1), 2.0)", "assert re.search('a', g()).group() == 'a'"]) == (
        "math", "re")
    assert modules_read(["assert copy(x) == copy.deepcopy(x)"]) == ()  # also called: a function under test
    assert modules_read(["assert np.isclose(f(), 1)", "assert math.pi == f("]) == ()  # not allowlisted; unparsable
    assert modules_read(["def check(c):\n    assert string.ascii_letters == c()\n"], entry_point="string") == ()
    assert make_plan(SPHERE).modules == ("math",)


# The task's own helpers (HumanEval's prompt defines `poly` for `find_zero`, `encode_cyclic` for `decode_cyclic`):
# the tests call them to check the answer, so a program that redefines them judged itself.
POLY_PROMPT = (
    "import math\n\n\n"
    "def poly(xs: list, x: float):\n"
    "    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])\n\n\n"
    "def find_zero(xs: list):\n"
    '    """A zero of the polynomial with coefficients xs."""\n'
)
POLY_TEST = (
    "def check(candidate):\n"
    "    import math\n"
    "    for coeffs in ([1, 2], [-6, 11, -6, 1], [2, -3]):\n"
    "        solution = candidate(list(coeffs))\n"
    "        assert math.fabs(poly(coeffs, solution)) < 1e-4\n"
)
POLY_FORGED = "def poly(xs, x):\n    return 0\n\n\ndef find_zero(xs):\n    return 123.0\n"
POLY_HONEST = (
    "def find_zero(xs):\n"
    "    lo, hi = -100.0, 100.0\n"
    "    for _ in range(200):\n"
    "        mid = (lo + hi) / 2\n"
    "        if (poly(xs, lo) > 0) == (poly(xs, mid) > 0):\n"
    "            lo = mid\n"
    "        else:\n"
    "            hi = mid\n"
    "    return lo\n"
)


def test_the_tasks_own_helpers_are_not_the_programs():
    from trl_marl.utils.code import build_humaneval_program

    spec = TestSpec.humaneval(POLY_TEST, "find_zero", prompt=POLY_PROMPT)
    programs = [build_humaneval_program(POLY_PROMPT, code, "find_zero") for code in (POLY_FORGED, POLY_HONEST)]
    forged, honest = run_programs(programs, [spec, spec], LIMITS)
    assert forged.passed == 0 and honest.reason == "ok", (forged, honest)
    # the same through the reward, which passes each row's prompt
    reward = UnitTestReward(limits=LIMITS)
    scores = reward(prompts=[POLY_PROMPT] * 2, completions=[POLY_FORGED, POLY_HONEST], test=[POLY_TEST] * 2,
                    entry_point=["find_zero"] * 2)
    assert scores == [0.0, 1.0]
    # a row dict with its prompt does the same; a prompt statement that fails in the harness is skipped
    row = {"test": POLY_TEST, "entry_point": "find_zero", "prompt": "import not_a_module_26\n" + POLY_PROMPT}
    assert "import not_a_module_26" in TestSpec.from_row(row).task_code
    [forged] = run_programs([programs[0]], [row], LIMITS)
    assert forged.passed == 0 and forged.reason.startswith("failed: "), forged
