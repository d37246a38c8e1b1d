"""The Python tool: the model's code runs in the project's sandbox, and the tool returns what it printed.

[`python`] (the tool the model sees as `python`) and [`make_python_tool`] (the same tool with other limits) hand the
code to [`trl_marl.sandbox.run_program`] with no tests: a fresh interpreter with the sandbox's isolation and limits
(its threat model and what each isolation level guarantees: `docs/sandbox.md`). The code never runs in the trainer's
process; the trainer only parses it (`ast.parse`, which executes nothing) to find its last line.

What the model reads back:

- what the code printed (stdout and stderr together, as the sandbox keeps them), and, as in an interactive session,
  the `repr` of the last line's value when the last statement is an expression whose value is not `None` (`x + 1`
  shows `2`; `print(2)` shows `2` once). The last expression is wrapped in place, on its own lines, so the line
  numbers of errors are the code's own;
- after it, when the code did not end normally, one line saying why: the exception and its line (`ZeroDivisionError:
  division by zero (line 1)`), a syntax error, the time, CPU or memory limit, too much output, or `sys.exit`;
- `(no output)` and a hint when the code printed nothing;
- at most `max_output_chars` characters: a longer output keeps its head and says how much was cut
  ([`~trl_marl.tools.calling.cut_text`]), the line of the error always shown whole.

A program that raises, loops or runs out of memory is a call that worked (the model reads what went wrong, as a
Python shell would show it). The tool raises only when the sandbox itself cannot run the code
([`~trl_marl.sandbox.SandboxUnavailableError`] where the isolation level cannot be had, or a `RuntimeError` for the
sandbox's own errors), which [`~trl_marl.tools.calling.call_tool`] reports as a failed call.

Time limits: the sandbox's own limits stop the program (`SandboxLimits.wall_time` and `cpu_time`; its plain
wall-clock backstop kills the whole run). The `timeout` of `call_tool` is the second line of defence: set it above the
sandbox's backstop (by default `wall_time + 2 * cpu_time + 5` seconds) so that the sandbox's own message reaches the
model; a lower one gives up waiting first, while the sandbox still ends the run on its own.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable

from ..sandbox import ExecutionResult, SandboxLimits, run_program
from .calling import MIN_MAX_CHARS, cut_text

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "default_python_limits", "make_python_tool", "python"]

DEFAULT_MAX_OUTPUT_CHARS = 2000
"""The most characters the Python tool returns by default."""

_MAX_PARSED_CHARS = 20_000  # longer code is run as it is, without showing its last value
_NEWLINE = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")  # after each line ending, as Python's tokenizer counts lines
_SHOW_OPEN = "(lambda __value: None if __value is None else print(repr(__value)))(("
_SHOW_CLOSE = "))"
_NO_OUTPUT = "(no output: the code printed nothing; print() what you want to see)"


def default_python_limits() -> SandboxLimits:
    """The Python tool's default sandbox limits: 5 s of charged wall-clock time and 5 CPU seconds, 512 MiB, 16 KiB
    of output; the isolation level from `TRL_MARL_SANDBOX_ISOLATION`, else `"namespaces"` (see `docs/sandbox.md`)."""
    return SandboxLimits(wall_time=5.0, cpu_time=5.0, memory_mb=512, max_output_bytes=16 * 1024)


def make_python_tool(limits: SandboxLimits | None = None,
                     max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> Callable[[str], str]:
    """A Python tool with these limits: a function named `python`, with [`python`]'s docstring and signature.

    Args:
        limits (`SandboxLimits`, *optional*): The sandbox's limits for each run (a copy is kept); default
            [`default_python_limits`].
        max_output_chars (`int`): The most characters the tool returns (at least
            [`~trl_marl.tools.calling.MIN_MAX_CHARS`]).

    Returns:
        `Callable[[str], str]`: The tool, to pass in a trainer's `tools`.

    Raises:
        ValueError: `max_output_chars` is not an int of at least `MIN_MAX_CHARS`.
        TypeError: `limits` is not a `SandboxLimits`.
    """
    if isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int) or (
            max_output_chars < MIN_MAX_CHARS):
        raise ValueError(f"max_output_chars must be an int of at least {MIN_MAX_CHARS}, got {max_output_chars!r}.")
    if limits is not None and not isinstance(limits, SandboxLimits):
        raise TypeError(f"limits must be a SandboxLimits, got {type(limits).__name__}.")
    kept = dataclasses.replace(limits) if limits is not None else default_python_limits()

    def python(code: str) -> str:
        if not isinstance(code, str):
            raise TypeError(f"The code must be a string, got {type(code).__name__}.")
        result = run_program(show_last_value(code), None, kept)
        return _report(result, kept, max_output_chars)

    python.__doc__ = _DOC
    python.__module__ = __name__
    python.__qualname__ = "python"
    return python


_DOC = """Run Python code in a sandbox and return what it prints.

    The code runs in a fresh Python interpreter, isolated and limited in time and memory. As in an interactive
    session, the value of the last line is shown when it is an expression.

    Args:
        code (`str`): The Python code to run, e.g. "print(sum(range(10)))".

    Returns:
        What the code printed, then the error if it raised one or was stopped.
    """


def show_last_value(code: str) -> str:
    """`code` with its last statement, when it is an expression, made to print the value's `repr` unless it is None.

    The expression is wrapped where it stands, so every line keeps its number. Code that does not parse, or longer
    than 20,000 characters, is returned as it is (the sandbox reports a syntax error itself). Only parsed here, never
    run.
    """
    if len(code) > _MAX_PARSED_CHARS:
        return code
    try:
        tree = ast.parse(code)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (null bytes), RecursionError, MemoryError
        return code
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return code
    node = tree.body[-1].value
    if node.end_lineno is None or node.end_col_offset is None:
        return code
    lines = _NEWLINE.split(code)
    first, last = node.lineno - 1, node.end_lineno - 1
    head = lines[first].encode("utf-8")[:node.col_offset].decode("utf-8", "replace")
    tail = lines[last].encode("utf-8")[node.end_col_offset:].decode("utf-8", "replace")
    if first == last:
        middle = lines[first].encode("utf-8")[node.col_offset:node.end_col_offset].decode("utf-8", "replace")
    else:
        middle = (lines[first].encode("utf-8")[node.col_offset:].decode("utf-8", "replace")
                  + "".join(lines[first + 1:last])
                  + lines[last].encode("utf-8")[:node.end_col_offset].decode("utf-8", "replace"))
    shown = "".join(lines[:first]) + head + _SHOW_OPEN + middle + _SHOW_CLOSE + tail + "".join(lines[last + 1:])
    try:  # the same statements, the last one wrapped: else run the code as it is
        again = ast.parse(shown)
    except Exception:  # noqa: BLE001
        return code
    if len(again.body) != len(tree.body) or not isinstance(again.body[-1], ast.Expr):
        return code
    return shown


def _report(result: ExecutionResult, limits: SandboxLimits, max_chars: int) -> str:
    """The text the model reads for one sandbox run (see the module's docstring)."""
    reason = result.reason
    if reason.startswith("sandbox_error"):
        raise RuntimeError(f"The sandbox could not run the code ({reason}).")
    output = result.stdout
    if reason == "ok":
        ending = ""
    elif reason.startswith("syntax_error: "):
        ending = "SyntaxError: " + reason[len("syntax_error: "):]
    elif reason.startswith("error: "):
        ending = reason[len("error: "):].replace("(program line ", "(line ")
    elif reason == "timeout":
        ending = f"Timeout: the code ran longer than {_seconds(limits.wall_time)} and was stopped."
    elif reason.startswith("timeout"):
        ending = f"Timeout: the code used more than {_seconds(limits.cpu_time, 'CPU ')} and was stopped."
    elif reason.startswith("memory"):
        ending = f"MemoryError: the code used more than {limits.memory_mb} MiB and was stopped."
    elif reason == "output_limit":
        ending = f"The code printed more than {limits.max_output_bytes} bytes and was stopped."
    elif reason.startswith("exit: "):
        ending = "The code exited: " + reason[len("exit: "):] + "."
    else:
        ending = f"The code was stopped: {reason}."
    if not output and not ending:
        return _NO_OUTPUT
    joint = "\n" if output and ending and not output.endswith("\n") else ""
    text = output + joint + ending
    if len(text) <= max_chars:
        return text
    room = max_chars - 1 - len(ending)
    if ending and room >= MIN_MAX_CHARS:  # cut the output, keep the ending whole, on a line of its own
        return cut_text(output, room)[0] + "\n" + ending
    return cut_text(text, max_chars)[0]


def _seconds(value: float, kind: str = "") -> str:
    return f"{value:g} {kind}second" + ("" if value == 1 else "s")


python = make_python_tool()
"""The Python tool with [`default_python_limits`] and at most [`DEFAULT_MAX_OUTPUT_CHARS`] characters of output."""
