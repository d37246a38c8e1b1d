"""Tests of one tool call that cannot hurt training (`trl_marl.tools.calling.call_tool`).

Tools that would hang wait on an event that the test sets at the end, so no worker thread outlives its test for long.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
import time
from typing import Optional

import pytest

from trl_marl.tools import ToolOutcome, call_tool, cut_text, tool_name


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def test_a_result_becomes_its_text():
    assert call_tool(add, {"a": 2, "b": 3}, 1.0, 100) == ToolOutcome(content="5", failed=False)
    assert call_tool(lambda: None, {}, None, None) == ToolOutcome(content="None", failed=False)
    assert call_tool(add, {"a": 1}, 1e12, None).content == "1"  # a timeout beyond what a thread can wait: waits
    assert call_tool(lambda: {"x": [1, 2]}, {}, 1.0, 100).content == "{'x': [1, 2]}"
    assert call_tool(lambda: [{"type": "text", "text": "hi"}], {}, 1.0, 100).content == (
        "[{'type': 'text', 'text': 'hi'}]")  # a list of content blocks is shown as text too


def test_a_tool_that_raises_gives_an_error_with_the_type_and_message():
    def broken(x: str) -> str:
        raise ValueError(f"bad input {x}")

    assert call_tool(broken, {"x": "7"}, 1.0, 200) == ToolOutcome(
        content="{'error': 'ValueError: bad input 7'}", failed=True)
    assert call_tool(lambda: 1 / 0, {}, 1.0, 200).content == "{'error': 'ZeroDivisionError: division by zero'}"
    assert call_tool(lambda: [][0], {}, None, None).content == "{'error': 'IndexError: list index out of range'}"


def test_base_exceptions_raised_by_the_tool_are_failed_calls():
    def quits() -> str:
        raise SystemExit(3)

    def interrupts() -> str:
        raise KeyboardInterrupt

    def exits_quietly() -> str:
        raise SystemExit

    assert call_tool(quits, {}, 1.0, 200) == ToolOutcome(content="{'error': 'SystemExit: 3'}", failed=True)
    assert call_tool(interrupts, {}, 1.0, 200) == ToolOutcome(content="{'error': 'KeyboardInterrupt'}", failed=True)
    assert call_tool(exits_quietly, {}, None, None).content == "{'error': 'SystemExit'}"


def test_an_exception_whose_message_cannot_be_read_still_gives_an_error():
    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def raises_odd() -> str:
        raise Odd

    assert call_tool(raises_odd, {}, 1.0, 200).content == (
        "{'error': 'Odd: <its message could not be turned into text>'}")


def test_a_tool_that_hangs_is_abandoned_at_its_timeout(release):
    def sleepy() -> str:
        release.wait(30)
        return "late"

    start = time.monotonic()
    outcome = call_tool(sleepy, {}, 0.2, 200)
    assert time.monotonic() - start < 1.0
    assert outcome == ToolOutcome(content="{'error': \"tool 'sleepy' did not return within 0.2 seconds\"}",
                                  failed=True, timed_out=True)
    assert call_tool(sleepy, {}, 1, 200).content == (
        "{'error': \"tool 'sleepy' did not return within 1 second\"}")


def test_a_huge_result_is_cut_to_max_chars_with_a_marker():
    digits = "0123456789" * 100_000

    def huge() -> str:
        return digits

    outcome = call_tool(huge, {}, 5.0, 1000)
    # marker "\n[... 999033 more characters cut]" is 33 characters: 967 kept + 33 = 1000
    assert outcome == ToolOutcome(content=digits[:967] + "\n[... 999033 more characters cut]", failed=False,
                                  truncated=True)
    assert len(outcome.content) == 1000
    assert call_tool(huge, {}, 5.0, None).content == digits  # no limit


def test_cut_text_counts_the_marker_and_its_digits():
    text = "x" * 1099
    # 70 kept would cut 1029 (a 4-digit count, 31 characters of marker): 101 > 100, so 69 are kept
    assert cut_text(text, 100) == ("x" * 69 + "\n[... 1030 more characters cut]", True)
    assert cut_text("y" * 100, 100) == ("y" * 100, False)
    assert cut_text("y" * 101, 64) == ("y" * 35 + "\n[... 66 more characters cut]", True)  # 35 + 29


def test_an_error_message_is_cut_too():
    def loud() -> str:
        raise ValueError("e" * 500)

    outcome = call_tool(loud, {}, 1.0, 100)
    assert outcome.failed and outcome.truncated and len(outcome.content) == 100
    assert outcome.content.startswith("{'error': 'ValueError: eee") and outcome.content.endswith("characters cut]")


def test_a_result_whose_str_raises_is_a_failed_call():
    class NoText:
        def __str__(self):
            raise RuntimeError("no text")

    class NotAString:
        def __str__(self):
            return 5

    assert call_tool(lambda: NoText(), {}, 1.0, 200) == ToolOutcome(
        content="{'error': 'RuntimeError: no text (while turning the result into text)'}", failed=True)
    assert call_tool(lambda: NotAString(), {}, 1.0, 200).content == (
        "{'error': 'TypeError: __str__ returned non-string (type int) (while turning the result into text)'}")


def test_a_result_whose_str_hangs_times_out(release):
    class Stuck:
        def __str__(self):
            release.wait(30)
            return "late"

    def stuck() -> Stuck:
        return Stuck()

    start = time.monotonic()
    outcome = call_tool(stuck, {}, 0.2, 200)
    assert time.monotonic() - start < 1.0
    assert outcome == ToolOutcome(content="{'error': \"tool 'stuck' did not return within 0.2 seconds\"}",
                                  failed=True, timed_out=True)


def test_unknown_missing_and_wrongly_typed_arguments_name_the_tool_and_the_argument():
    calls = []

    def scale(value: float, factor: int = 2, label: str | None = None, flag: bool = False) -> str:
        calls.append(value)
        return f"{value * factor}"

    def error(arguments):
        outcome = call_tool(scale, arguments, 1.0, 300)
        assert outcome.failed and not outcome.timed_out
        return outcome.content

    assert error({"valeu": 1.5}) == (
        "{'error': \"tool 'scale' has no argument 'valeu' (its arguments: value, factor, label, flag)\"}")
    assert error({"factor": 3}) == (
        "{'error': \"tool 'scale' needs the argument 'value' (its arguments: value, factor, label, flag)\"}")
    assert error({"value": "1.5"}) == (
        "{'error': \"tool 'scale': argument 'value' must be a number, got str '1.5'\"}")
    assert error({"value": 1, "factor": 2.5}) == (
        "{'error': \"tool 'scale': argument 'factor' must be an integer, got float 2.5\"}")
    assert error({"value": 1, "factor": True}) == (
        "{'error': \"tool 'scale': argument 'factor' must be an integer, got bool True\"}")
    assert error({"value": 1, "label": 7}) == (
        "{'error': \"tool 'scale': argument 'label' must be a string or null, got int 7\"}")
    assert error({"value": 1, "flag": "yes"}) == (
        "{'error': \"tool 'scale': argument 'flag' must be true or false, got str 'yes'\"}")
    preview = "['" + "x" * 35 + "..."  # a repr cut to 40 characters
    assert error({"value": ["x" * 100]}) == (
        "{'error': \"tool 'scale': argument 'value' must be a number, got list " + preview + "\"}")
    assert calls == []  # the tool never ran

    def pick(n: Optional[int] = None) -> str:  # noqa: UP045 - typing's spelling of an optional is read too
        return f"n={n}"

    assert call_tool(pick, {"n": None}, 1.0, 300).content == "n=None"
    assert call_tool(pick, {"n": "1"}, 1.0, 300).content == (
        "{'error': \"tool 'pick': argument 'n' must be an integer or null, got str '1'\"}")
    assert call_tool(scale, {"value": 2, "label": None}, 1.0, 300) == ToolOutcome(content="4", failed=False)
    assert call_tool(scale, {"value": 1.5, "factor": 3}, 1.0, 300).content == "4.5"


def test_arguments_that_are_not_a_dict_of_names_are_refused():
    assert call_tool(add, ["a", 1], 1.0, 300) == ToolOutcome(
        content="{'error': \"tool 'add' takes its arguments as a JSON object of named values, got list\"}",
        failed=True)
    assert call_tool(add, None, 1.0, 300).content == (
        "{'error': \"tool 'add' takes its arguments as a JSON object of named values, got NoneType\"}")
    assert call_tool(add, {1: 2}, 1.0, 300).content == (
        "{'error': \"tool 'add' takes arguments named by strings, got the key 1\"}")


def test_a_tool_with_keyword_arguments_takes_any_name_and_a_tool_without_hints_any_type():
    def anything(**kwargs) -> str:
        return ",".join(sorted(kwargs))

    def untyped(x):
        return x * 2

    assert call_tool(anything, {"b": 1, "a": 2}, 1.0, 100).content == "a,b"
    assert call_tool(untyped, {"x": "ab"}, 1.0, 100).content == "abab"
    assert call_tool(untyped, {"x": [1]}, 1.0, 100).content == "[1, 1]"


def test_async_tools_run_to_completion():
    async def fetch(key: int) -> str:
        await asyncio.sleep(0.01)
        return f"value of {key}"

    async def fails(key: int) -> str:
        await asyncio.sleep(0)
        raise LookupError(f"no {key}")

    assert call_tool(fetch, {"key": 4}, 2.0, 100) == ToolOutcome(content="value of 4", failed=False)
    assert call_tool(fails, {"key": 4}, 2.0, 100) == ToolOutcome(content="{'error': 'LookupError: no 4'}",
                                                                failed=True)
    assert call_tool(fetch, {"key": "4"}, 2.0, 100).content == (
        "{'error': \"tool 'fetch': argument 'key' must be an integer, got str '4'\"}")


def test_callable_objects_and_partials_are_named_and_checked():
    class Counter:
        def __call__(self, step: int) -> str:
            return f"+{step}"

    scaled = functools.partial(add, b=10)
    assert tool_name(Counter()) == "Counter" and tool_name(scaled) == "add"
    assert call_tool(Counter(), {"step": 2}, 1.0, 100).content == "+2"
    assert call_tool(Counter(), {"step": "2"}, 1.0, 100).content == (
        "{'error': \"tool 'Counter': argument 'step' must be an integer, got str '2'\"}")
    assert call_tool(scaled, {"a": 1}, 1.0, 100).content == "11"


def test_a_users_interrupt_is_not_swallowed(release):
    """Ctrl-C reaches the main thread while it waits: call_tool lets it through (only the tool's own are caught)."""
    main = threading.main_thread().ident
    if threading.get_ident() != main:
        pytest.skip("SIGINT is delivered to the main thread only, and a plugin runs this test in another thread")

    def pressed() -> str:
        signal.pthread_kill(main, signal.SIGINT)
        release.wait(5)
        return "late"

    # Python's own Ctrl-C handler for the test: an earlier test or library may have left another one installed
    # (seen in the whole suite), and what is tested is call_tool, not the process's handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            call_tool(pressed, {}, 5.0, 100)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("timeout, max_chars, field", [
    (0, 100, "timeout"), (-1.0, 100, "timeout"), (float("nan"), 100, "timeout"), (float("inf"), 100, "timeout"),
    (True, 100, "timeout"), ("1", 100, "timeout"), (1.0, 63, "max_chars"), (1.0, 100.0, "max_chars"),
])
def test_bad_limits_are_the_callers_mistake(timeout, max_chars, field):
    with pytest.raises(ValueError, match=f"call_tool's {field}"):
        call_tool(add, {"a": 1}, timeout, max_chars)
