"""Tests of the Python tool (`trl_marl.tools.python`): the model's code runs in the sandbox, its output comes back.

How the text is built (`show_last_value`, `_report`) is tested on its own without running anything; the few tests
that run code in the sandbox use small limits. What the sandbox promises at each isolation level is in
`docs/sandbox.md`: reading the host's files is stopped only at the `"namespaces"` level, the guards everywhere.
"""

from __future__ import annotations

import time
import uuid

import pytest
from transformers.utils import get_json_schema

from trl_marl.sandbox import ExecutionResult, SandboxLimits
from trl_marl.tools import ToolOutcome, call_tool, make_python_tool, python
from trl_marl.tools.python import _report, default_python_limits, show_last_value

QUICK = SandboxLimits(wall_time=5, cpu_time=5, memory_mb=256, max_output_bytes=16 * 1024)
SHOW = "(lambda __value: None if __value is None else print(repr(__value)))(("


# ---------------------------------------------------------------------------------------------------- no sandbox run
def test_the_tool_is_named_python_and_described_by_its_docstring():
    tool = make_python_tool(QUICK, max_output_chars=500)
    assert tool.__name__ == python.__name__ == "python"
    assert tool.__doc__ == python.__doc__
    schema = get_json_schema(tool)["function"]
    assert schema["name"] == "python"
    assert schema["description"].startswith("Run Python code in a sandbox and return what it prints.")
    assert schema["parameters"] == {
        "type": "object",
        "properties": {"code": {"type": "string",
                                "description": 'The Python code to run, e.g. "print(sum(range(10)))".'}},
        "required": ["code"],
    }


@pytest.mark.parametrize("code, shown", [
    ("2+3", SHOW + "2+3))"),
    ("x = 1; x + 1", "x = 1; " + SHOW + "x + 1))"),
    ("x = 1\nx  # the value\n", "x = 1\n" + SHOW + "x))  # the value\n"),
    ("(1 +\n 2)", "(" + SHOW + "1 +\n 2)))"),  # lines keep their numbers
    ('s = "é"; s + "ü"', 's = "é"; ' + SHOW + 's + "ü"))'),  # offsets are UTF-8 bytes
    ("a = 1\r\nb = 2\ra + b", "a = 1\r\nb = 2\r" + SHOW + "a + b))"),
    ("x = 1", "x = 1"),  # the last statement is no expression
    ("if True:\n    1", "if True:\n    1"),
    ("x = (", "x = ("),  # does not parse: the sandbox reports it
    ("1\0", "1\0"),
])
def test_the_last_expression_is_shown_in_place(code, shown):
    assert show_last_value(code) == shown


def _result(reason: str, stdout: str = "") -> ExecutionResult:
    return ExecutionResult(passed=0, total=1, reason=reason, stdout=stdout)


@pytest.mark.parametrize("reason, stdout, text", [
    ("ok", "5\n", "5\n"),
    ("ok", "", "(no output: the code printed nothing; print() what you want to see)"),
    ("error: ZeroDivisionError: division by zero (program line 2)", "hi\n",
     "hi\nZeroDivisionError: division by zero (line 2)"),
    ("error: ValueError: no (program line 1)", "partial", "partial\nValueError: no (line 1)"),
    ("syntax_error: '(' was never closed (line 1)", "", "SyntaxError: '(' was never closed (line 1)"),
    ("timeout", "", "Timeout: the code ran longer than 5 seconds and was stopped."),
    ("timeout: cpu time", "", "Timeout: the code used more than 5 CPU seconds and was stopped."),
    ("memory", "", "MemoryError: the code used more than 256 MiB and was stopped."),
    ("output_limit", "ab", "ab\nThe code printed more than 16384 bytes and was stopped."),
    ("exit: the program called sys.exit(3)", "", "The code exited: the program called sys.exit(3)."),
    ("killed by signal 11 (SIGSEGV)", "", "The code was stopped: killed by signal 11 (SIGSEGV)."),
])
def test_the_report_reads_like_a_python_session(reason, stdout, text):
    assert _report(_result(reason, stdout), QUICK, 2000) == text


def test_a_long_output_is_cut_and_the_error_line_kept_whole():
    ending = "ValueError: no (line 9)"  # 23 characters
    text = _report(_result("error: ValueError: no (program line 9)", "o" * 1000), QUICK, 100)
    # 100 - 1 - 23 = 76 for the output: 46 kept + "\n[... 954 more characters cut]" (30)
    assert text == "o" * 46 + "\n[... 954 more characters cut]\n" + ending
    assert len(text) == 100
    assert _report(_result("ok", "p" * 150), QUICK, 100) == "p" * 71 + "\n[... 79 more characters cut]"


def test_a_sandbox_failure_is_a_failed_call():
    with pytest.raises(RuntimeError, match="The sandbox could not run the code"):
        _report(_result("sandbox_error: no cgroup"), QUICK, 100)


def test_bad_settings_and_bad_code_are_refused_before_any_run():
    with pytest.raises(ValueError, match="max_output_chars must be an int of at least 64"):
        make_python_tool(QUICK, max_output_chars=10)
    with pytest.raises(TypeError, match="limits must be a SandboxLimits, got dict"):
        make_python_tool({"wall_time": 1})
    assert call_tool(python, {"code": 5}, 30.0, 500) == ToolOutcome(
        content="{'error': \"tool 'python': argument 'code' must be a string, got int 5\"}", failed=True)
    assert default_python_limits() == SandboxLimits(wall_time=5.0, cpu_time=5.0, memory_mb=512,
                                                    max_output_bytes=16 * 1024)


# ---------------------------------------------------------------------------------------------------- sandbox runs
def test_printed_output_and_the_last_value_come_back():
    tool = make_python_tool(QUICK, max_output_chars=500)
    assert call_tool(tool, {"code": "print(2+3)"}, 60.0, 500) == ToolOutcome(content="5\n", failed=False)
    assert tool("print('hi')\nx = 6\nx * 7") == "hi\n42\n"
    assert tool("print('a')\n1 / 0") == "a\nZeroDivisionError: division by zero (line 2)"


def test_an_infinite_loop_is_stopped_by_the_sandbox():
    limits = SandboxLimits(wall_time=1, cpu_time=1, memory_mb=256)
    tool = make_python_tool(limits, max_output_chars=500)
    start = time.monotonic()
    outcome = call_tool(tool, {"code": "while True:\n    pass"}, 60.0, 500)
    assert time.monotonic() - start < 8.0  # the sandbox's backstop: 1 + 2 * 1 + 5 seconds
    assert not outcome.failed
    assert outcome.content in ("Timeout: the code ran longer than 1 second and was stopped.",
                               "Timeout: the code used more than 1 CPU second and was stopped.")


def test_a_huge_output_is_cut():
    tool = make_python_tool(QUICK, max_output_chars=200)
    ending = "The code printed more than 16384 bytes and was stopped."  # 55 characters
    # the sandbox keeps 16384 characters; 200 - 1 - 55 = 144 for them: 112 + "\n[... 16272 more characters cut]"
    assert tool("print('a' * 100000)") == "a" * 112 + "\n[... 16272 more characters cut]\n" + ending


def test_the_code_gets_what_the_sandbox_promises(tmp_path):
    secret = tmp_path / f"answers-{uuid.uuid4().hex}.txt"
    secret.write_text("the hidden answer 7321", encoding="utf-8")
    code = (f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print(type(e).__name__)\n"
            "import subprocess\nsubprocess.run(['true'])\n")
    text = make_python_tool(QUICK, max_output_chars=500)(code)
    first, last = text.split("\n", 1)
    assert last.startswith("PermissionError: ") and last.endswith(" (line 6)")  # the guards, at every level
    if QUICK.level == "namespaces":  # only an allowlisted root: the host's /tmp is not there
        assert first == "FileNotFoundError"
        assert "7321" not in text
