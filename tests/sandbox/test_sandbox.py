"""Tests of the code-execution sandbox and the unit-test reward (`trl_marl.sandbox`, `trl_marl.rewards.execution`).

Hostile programs run only through the sandbox, with small limits, and every check of "nothing happened outside"
looks at paths inside pytest's `tmp_path` (or a uniquely named path that is removed if the sandbox failed).
Tests with `python_guards=False` check that the OS layer alone holds; they need root (namespaces and a sandbox
user id) and are skipped elsewhere, since a non-root sandbox cannot protect files of its own user.
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from trl_marl.rewards.execution import UnitTestReward
from trl_marl.sandbox import ExecutionResult, SandboxLimits, TestSpec, format_feedback, run_program, run_programs
from trl_marl.utils.code import build_humaneval_program, extract_code

FAST = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=512)
HOSTILE = SandboxLimits(wall_time=1.5, cpu_time=1, memory_mb=256, max_output_bytes=16 * 1024)

PROMPT = 'from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    """Add two numbers."""\n'
TEST = """

METADATA = {}


def check(candidate):
    assert candidate(1, 2) == 3
    assert candidate(2, 3) == 5
    assert candidate(5, 5) == 10
"""
ROW = {"test": [TEST], "entry_point": ["add"]}


def _probe() -> ExecutionResult:
    return run_program("x = 1\n", ["assert x == 1"], FAST)


_PROBE = _probe()
OS_LAYER = os.geteuid() == 0 and {"uid", "pidns", "mountns", "netns"} <= set(_PROBE.isolation)
needs_os_layer = pytest.mark.skipif(
    not OS_LAYER, reason=f"OS-layer isolation needs root and Linux namespaces (active: {_PROBE.isolation})"
)
GUARDS = [True, pytest.param(False, marks=needs_os_layer, id="os-layer-only")]


def _sandbox_processes() -> list[int]:
    """Processes running as one of this test process's sandbox user ids."""
    limits = SandboxLimits()
    low = limits.uid_base + (os.getpid() % (1 << 22)) * 256
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if low <= os.stat(f"/proc/{name}").st_uid < low + 256:
                    found.append(int(name))
            except OSError:
                pass
    return found


def _process_count() -> int:
    return sum(name.isdigit() for name in os.listdir("/proc"))


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------------------------------------------- scoring
def test_sandbox_probe_runs():
    assert _PROBE.reason == "ok" and _PROBE.passed == 1, _PROBE
    assert "rlimits" in _PROBE.isolation and "guards" in _PROBE.isolation


def test_humaneval_correct_wrong_partial():
    reward = UnitTestReward(limits=FAST)
    completions = ["    return a + b\n", "    return a - b\n", "    return a + b if a < 5 else 0\n"]
    scores = reward(prompts=[PROMPT] * 3, completions=completions, test=[TEST] * 3, entry_point=["add"] * 3)
    assert scores == pytest.approx([1.0, 0.0, 2 / 3])
    good, wrong, partial = reward.last_results
    assert good.reason == "ok" and (good.passed, good.total) == (3, 3)
    assert wrong.passed == 0 and wrong.reason.startswith("failed: assert candidate(1, 2) == 3")
    assert "got -1, expected 3" in wrong.reason
    assert partial.per_test == [True, True, False]
    assert "candidate(5, 5) == 10" in format_feedback(partial) and "2/3" in format_feedback(partial)

    strict = UnitTestReward(limits=FAST, partial_credit=False)
    assert strict(prompts=[PROMPT] * 2, completions=completions[::2], test=[TEST] * 2,
                  entry_point=["add"] * 2) == [1.0, 0.0]


def test_whole_function_completion_fences_and_chat_messages():
    whole = "def add(a: int, b: int) -> int:\n    xs: List[int] = [a, b]\n    return sum(xs)\n"
    fenced = f"Sure! Here it is:\n```python\n{whole}```\nIt sums the list."
    chat = [{"role": "assistant", "content": fenced}]
    truncated = "```python\n" + whole  # cut off before the closing fence
    reward = UnitTestReward(limits=FAST)
    scores = reward(prompts=[PROMPT] * 4, completions=[whole, fenced, chat, truncated], test=[TEST] * 4,
                    entry_point=["add"] * 4)
    assert scores == [1.0] * 4, [r.reason for r in reward.last_results]
    # The prompt's imports are kept for a whole-function completion (List comes from the prompt).
    program = build_humaneval_program(PROMPT, fenced, "add")
    assert program.startswith("from typing import List") and program.count("def add") == 1
    assert build_humaneval_program(PROMPT, "    return a + b\n", "add") == PROMPT + "    return a + b\n"
    # A prompt with an instruction before the signature: only its imports are kept.
    program = build_humaneval_program("Complete the function.\n\n" + PROMPT, whole, "add")
    assert program == "from typing import List\n\n\n" + whole


def test_extract_code():
    assert extract_code("x = 1") == "x = 1"
    assert extract_code("text\n```python\nx = 1\n```\nmore\n```\ny = 2\n```") == "x = 1\n\ny = 2"
    two = "```python\ndef helper():\n    pass\n```\n```python\ndef f():\n    return 1\n```"
    assert extract_code(two, "f") == "def f():\n    return 1"
    assert extract_code("```bash\nrm -rf /\n```") == ""


def test_mbpp_format_with_setup_code():
    reward = UnitTestReward(limits=FAST)
    code = "```python\ndef square(x):\n    return x * x if x < 3 else 0\n```"
    scores = reward(prompts=["Write square."], completions=[code],
                    test_list=[["assert square(2) == K", "assert square(1) == 1", "assert square(3) == 9"]],
                    test_setup_code=["K = 4"])
    assert scores == pytest.approx([2 / 3])
    assert reward.last_results[0].failures == ["assert square(3) == 9 -> AssertionError: got 0, expected 9"]


def test_missing_column_is_named():
    reward = UnitTestReward(limits=FAST)
    with pytest.raises(KeyError, match="entry_point"):
        reward(prompts=["p"], completions=["c"], test=[TEST])
    with pytest.raises(KeyError, match="test_list"):
        reward(prompts=["p"], completions=["c"], answer=["4"])


def test_code_column_and_program_builder():
    program = PROMPT + "    return a + b\n"
    by_column = UnitTestReward(limits=FAST, code_column="program")
    assert by_column(prompts=["p"], completions=["ignored"], program=[program], **ROW) == [1.0]
    seen = {}

    def builder(code: str, row: dict) -> str:
        seen.update(row)
        return "def aux(a, b):\n    return a + b\n\n" + code

    by_builder = UnitTestReward(limits=FAST, program_builder=builder)
    completion = "```python\ndef add(a, b):\n    return aux(a, b)\n```"
    assert by_builder(prompts=["p"], completions=[completion], **ROW) == [1.0]
    assert seen["entry_point"] == "add" and seen["prompt"] == "p"


def test_rows_without_tests_score_none_and_formats_mix():
    reward = UnitTestReward(limits=FAST)
    assert reward(prompts=["p", "q"], completions=["x = 1", "x = 2"], test_list=[None, ["assert x == 2"]]) == [
        None, 1.0]
    assert reward.last_results[0] is None
    mixed = reward(prompts=[PROMPT, "q", "r"], completions=["    return a + b\n", "x = 2", "x = 3"],
                   test=[TEST, None, None], entry_point=["add", None, None],
                   test_list=[None, ["assert x == 2"], None])
    assert mixed == [1.0, 1.0, None]


def test_syntax_and_runtime_errors_are_reported():
    syntax = run_program("def f(:\n    pass\n", ["assert f() == 1"], FAST)
    assert syntax.passed == 0 and syntax.reason.startswith("syntax_error: ") and "(line 1)" in syntax.reason
    assert format_feedback(syntax).startswith("SyntaxError")
    crash = run_program("x = 1\ny = undefined_name\n", ["assert x == 1"], FAST)
    assert crash.reason.startswith("error: NameError") and "program line 2" in crash.reason
    in_test = run_program("def f(x):\n    return 1 / x\n", ["assert f(1) == 1", "assert f(0) == 1"], FAST)
    assert in_test.passed == 1 and "ZeroDivisionError" in in_test.reason and "program line 2" in in_test.reason
    bad_test = run_program("def f():\n    return 1\n", TestSpec.humaneval("raise ValueError('bad test')", "f"), FAST)
    assert bad_test.reason.startswith("test_error: ValueError")


def test_check_splitting():
    loop_test = (
        "def check(candidate):\n"
        "    import math\n"
        "    xs = [1, 2, 3]\n"
        "    assert True, 'this prints if this assert fails'\n"
        "    for x in xs:\n"
        "        assert candidate(x) == x * 2\n"
        "    assert math.isclose(candidate(0.5), 1.0)\n"
    )
    result = run_program("def double(x):\n    return x * 2\n", TestSpec.humaneval(loop_test, "double"), FAST)
    assert (result.passed, result.total, result.reason) == (2, 2, "ok")  # `assert True` is not a test
    # A check function without asserts at top level is one test.
    helper_test = "def _helper(c):\n    assert c(1) == 2\n\n\ndef check(candidate):\n    _helper(candidate)\n"
    result = run_program("def double(x):\n    return x * 2\n", TestSpec.humaneval(helper_test, "double"), FAST)
    assert (result.passed, result.total) == (1, 1)
    unsplit = run_program("def add(a, b):\n    return a + b if a < 5 else 0\n", TestSpec.humaneval(TEST, "add",
                                                                                            split=False), FAST)
    assert (unsplit.passed, unsplit.total) == (0, 1)
    missing = run_program("def other():\n    pass\n", TestSpec.humaneval(TEST, "add"), FAST)
    assert missing.passed == 0 and "NameError" in missing.reason


def test_test_spec_from_rows():
    assert TestSpec.from_row({"test": TEST, "entry_point": "add"}).check_code == TEST
    assert TestSpec.from_row({"test_list": ["assert 1"], "test_setup_code": "x = 1"}).setup_code == "x = 1"
    assert TestSpec.from_row(["assert 1"]).asserts == ["assert 1"]
    with pytest.raises(KeyError, match="test_list"):
        TestSpec.from_row({"question": "?"})
    with pytest.raises(ValueError, match="2 programs but 1"):
        run_programs(["a", "b"], [None], FAST)


def test_working_directory_is_private_and_fresh():
    program = (
        "import os, tempfile\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        "open('scratch.txt', 'w').write('data')\n"
        "open(os.path.join(tempfile.gettempdir(), 'other.txt'), 'w').write('x')\n"
        "print(open('scratch.txt').read(), os.environ.get('HOME') == os.getcwd())\n"
    )
    first, second = run_program(program, None, FAST), run_program(program, None, FAST)
    assert first.reason == "ok" and second.reason == "ok", (first, second)
    assert first.stdout == "data True\n"


def test_parallel_results_equal_sequential():
    programs = [
        "def f(x):\n    return x + 1\n",
        "def f(x):\n    return x\n",
        "def f(x):\n    return x + 1 if x < 2 else 0\n",
        "def f(x:\n",
        "import sys\nsys.exit(1)\n",
        "def f(x):\n    raise RuntimeError('no')\n",
    ] * 2
    tests = [["assert f(0) == 1", "assert f(1) == 2", "assert f(2) == 3"]] * len(programs)
    sequential = run_programs(programs, tests, FAST, max_workers=1)
    parallel = run_programs(programs, tests, FAST, max_workers=4)
    key = [(r.passed, r.total, r.reason, r.per_test) for r in sequential]
    assert key == [(r.passed, r.total, r.reason, r.per_test) for r in parallel]
    assert [r.passed for r in sequential[:6]] == [3, 0, 2, 0, 0, 0]


# ---------------------------------------------------------------------------------------------------- hostile
def _check_hostile(result: ExecutionResult, started: float, limits: SandboxLimits, reason_prefix: str) -> None:
    assert result.passed == 0 and result.fraction == 0.0, result
    assert result.reason.startswith(reason_prefix), result.reason
    assert time.monotonic() - started < limits.wall_time + 5  # ended within the limits (plus start/teardown)
    assert _sandbox_processes() == []


def test_infinite_loop_times_out():
    started = time.monotonic()
    result = run_program("while True:\n    pass\n", ["assert True"], HOSTILE)
    _check_hostile(result, started, HOSTILE, "timeout")


def test_cpu_limit():
    limits = SandboxLimits(wall_time=20, cpu_time=1, memory_mb=256)
    started = time.monotonic()
    result = run_program("x = 0\nwhile True:\n    x += 1\n", ["assert True"], limits)
    _check_hostile(result, started, limits, "timeout: cpu time")


@pytest.mark.parametrize("guards", GUARDS)
def test_fork_bomb_is_bounded(guards):
    limits = SandboxLimits(wall_time=1.5, cpu_time=1, memory_mb=256, max_processes=8, python_guards=guards)
    program = (
        "import os\n"
        "while True:\n"
        "    try:\n"
        "        os.fork()\n"
        "    except OSError:\n"
        "        pass\n"
    )
    before = _process_count()
    started = time.monotonic()
    result = run_program(program, ["assert True"], limits)
    _check_hostile(result, started, limits, "timeout")
    # Back to normal (other jobs on the machine may start a few processes meanwhile, a fork bomb thousands).
    assert _process_count() < before + 100


@pytest.mark.parametrize("guards", GUARDS)
def test_huge_allocation_hits_memory_limit(guards):
    limits = SandboxLimits(wall_time=5, cpu_time=3, memory_mb=256, python_guards=guards)
    started = time.monotonic()
    result = run_program("x = bytearray(10 * 1024 ** 3)\n", ["assert True"], limits)
    _check_hostile(result, started, limits, "memory")


@pytest.mark.skipif("cgroup" not in _PROBE.isolation, reason="needs root and a writable cgroupfs")
def test_memory_of_all_processes_is_bounded():
    # Six processes of 150 MiB each fit the per-process limit (256 MiB) but not the run's cgroup
    # (256 + 64 MiB of tmpfs + 64 MiB of slack): the kernel kills some of them.
    program = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(6):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        data = b'x' * (150 << 20)\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sum(os.waitpid(k, 0)[1] == 9 for k in kids))\n"
    )
    limits = SandboxLimits(wall_time=10, memory_mb=256, max_disk_mb=64, max_processes=8, python_guards=False)
    result = run_program(program, None, limits)
    assert result.reason == "ok", result
    assert int(result.stdout) >= 3  # at most two 150 MiB processes fit
    assert _sandbox_processes() == []


@pytest.mark.parametrize("guards", GUARDS)
def test_cannot_delete_outside(tmp_path, guards):
    sentinel = tmp_path / "sentinel.txt"
    sentinel.write_text("keep me")
    limits = SandboxLimits(wall_time=5, python_guards=guards)
    attempts = [
        f"import os\nos.remove({str(sentinel)!r})\n",
        f"import posix\nposix.unlink({str(sentinel)!r})\n",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})\n",
        f"import pathlib\npathlib.Path({str(sentinel)!r}).unlink()\n",
        f"import os\nos.rename({str(sentinel)!r}, 'stolen.txt')\n",
    ]
    results = run_programs(attempts, [["assert True"]] * len(attempts), limits)
    for result in results:
        assert result.passed == 0 and result.reason.startswith("error: "), result
    assert sentinel.read_text() == "keep me"


@pytest.mark.parametrize("guards", GUARDS)
def test_cannot_write_outside(tmp_path, guards):
    inside_tmp = tmp_path / "pwned.txt"
    elsewhere = f"/etc/trl_marl_sandbox_test_{uuid.uuid4().hex}"
    limits = SandboxLimits(wall_time=5, python_guards=guards)
    attempts = [
        f"open({str(inside_tmp)!r}, 'w').write('x')\n",
        f"import os\nfd = os.open({elsewhere!r}, os.O_WRONLY | os.O_CREAT)\nos.write(fd, b'x')\n",
        f"import pathlib\npathlib.Path({elsewhere!r}).write_text('x')\n",
    ]
    try:
        results = run_programs(attempts, [["assert True"]] * len(attempts), limits)
        for result in results:
            assert result.passed == 0 and result.reason.startswith("error: "), result
        assert not inside_tmp.exists()
        assert not os.path.exists(elsewhere)
    finally:
        if os.path.exists(elsewhere):
            os.remove(elsewhere)


@pytest.mark.parametrize("guards", GUARDS)
def test_no_network(guards):
    limits = SandboxLimits(wall_time=5, python_guards=guards)
    attempts = [
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
        "import _socket\ns = _socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', 9))\n",
    ]
    for result in run_programs(attempts, [["assert True"]] * 2, limits):
        assert result.passed == 0 and result.reason.startswith("error: "), result
        if not guards:  # no interface is up in the network namespace, not even the loopback
            assert "Network is unreachable" in result.reason


def test_early_exits_do_not_pass():
    passing_tests = ["assert True", "assert 1 == 1"]
    programs = [
        "import sys\nsys.exit(0)\n",
        "import os\nos._exit(0)\n",
        "exit()\n",
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    ]
    results = run_programs(programs, [passing_tests] * len(programs), HOSTILE)
    assert all(r.passed == 0 and r.fraction == 0.0 for r in results), results
    assert results[0].reason == "exit: the program called sys.exit(0)"
    assert results[1].reason.startswith("exit: the process exited with code 0")
    assert results[2].reason.startswith("exit: ")
    # Exiting in the middle of the tests keeps only the tests that passed before.
    midway = run_program("import sys\ndef f(x):\n    if x == 2:\n        sys.exit(0)\n    return x\n",
                         ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"], HOSTILE)
    assert (midway.passed, midway.total) == (1, 3) and midway.reason.startswith("exit")


def test_forged_reports_do_not_count():
    program = (
        "import builtins, os, sys\n"
        "print(\"('done',)\")\n"
        "print(\"('t', 0, True, '')\")\n"
        "builtins.repr = lambda value: \"('t', 0, True, '')\"\n"
        "os.write = lambda fd, data: len(data)\n"
        "def f():\n"
        "    return 0\n"
    )
    result = run_program(program, ["assert f() == 1"], FAST)
    assert result.passed == 0 and result.reason.startswith("failed: assert f() == 1"), result


def test_output_flood_is_cut_and_caller_memory_bounded():
    program = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(400):\n    sys.stdout.write(chunk)\n"
    before = _rss_mb()
    started = time.monotonic()
    result = run_program(program, ["assert True"], HOSTILE)
    _check_hostile(result, started, HOSTILE, "output_limit")
    assert len(result.stdout) <= HOSTILE.max_output_bytes
    assert _rss_mb() - before < 50


@needs_os_layer
def test_os_layer_isolation():
    sentinel = Path(tempfile.gettempdir()) / f"trl_marl_host_only_{os.getpid()}"
    sentinel.write_text("host")
    program = (
        "import os\n"
        "print(os.getuid() != 0, os.getpid(), sorted(os.listdir('/tmp')), os.path.exists('/root/.bashrc'))\n"
    )
    try:
        result = run_program(program, None, SandboxLimits(python_guards=False))
    finally:
        sentinel.unlink()
    assert result.reason == "ok", result
    # A user id of its own, pid 2 in a fresh PID namespace, a private /tmp, /root hidden.
    assert result.stdout.startswith("True 2 [") and result.stdout.endswith("] False\n"), result.stdout
    # The private /tmp holds the fresh working directory and, when the interpreter itself lives under /tmp
    # (a CI virtualenv), read-only mounts of its directories; never the host's other files.
    interpreter_dirs = {os.path.realpath(p).split("/")[2] for p in [sys.prefix, *sys.path]
                        if p and os.path.realpath(p).startswith("/tmp/")}
    shown = set(ast.literal_eval(result.stdout[result.stdout.index("[") : result.stdout.rindex("]") + 1]))
    assert sentinel.name not in shown
    assert shown <= {"work"} | interpreter_dirs, shown
