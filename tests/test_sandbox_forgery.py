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
    assert result.passed == 0 and result.reason == "error: the program broke the harness protocol", result
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
