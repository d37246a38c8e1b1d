"""A short text summary of a sandbox result, for prompts and logs."""

from __future__ import annotations

from typing import Any

from .types import ExecutionResult


# ---------------------------------------------------------------------------------------------------- feedback
def format_feedback(result: ExecutionResult, max_chars: int = 400) -> str:
    """A short summary of a result for a prompt: all passed, the syntax error, or the first failing test.

    Args:
        result (`ExecutionResult`): The result.
        max_chars (`int`): Longest summary returned.

    Returns:
        `str`: One or two lines.
    """
    reason = result.reason
    if result.all_passed:
        text = f"All {result.total} tests passed."
    elif reason.startswith("syntax_error: "):
        text = f"SyntaxError: {reason[len('syntax_error: '):]}. No test ran."
    else:
        head = f"Tests passed: {result.passed}/{result.total}."
        if reason.startswith(("failed: ", "memory: ")):
            detail = "First failure: " + reason.split(": ", 1)[1]
        elif reason == "timeout" or reason.startswith("timeout:"):
            detail = "The program ran out of time (infinite loop or too slow)."
        elif reason == "memory":
            detail = "The program ran out of memory."
        elif reason == "output_limit":
            detail = "The program printed too much output."
        elif reason.startswith("error: "):
            detail = "The program raised " + reason[len("error: "):] + " before the tests ran."
        elif reason.startswith("test_error: "):
            detail = "The tests could not run: " + reason[len("test_error: "):]
        elif reason.startswith("exit: "):
            detail = "The program exited before the tests finished (" + reason[len("exit: "):] + ")."
        else:
            detail = reason
        text = f"{head} {detail}"
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."


def describe_result(result: Any) -> str:
    """The test line of the feedback: `format_feedback` of the sandbox for its own results (e.g. `"All 3 tests
    passed."`, `"Tests passed: 1/3. First failure: assert candidate([1, 2]) == 5 -> AssertionError: got 4, expected
    5"`); for another runner's results `"All <total> tests passed."` or `"Tests passed: <passed>/<total>. <reason>"`.
    """
    if isinstance(result, ExecutionResult):
        return str(format_feedback(result)).strip()
    if result.total > 0 and result.passed >= result.total:
        return f"All {result.total} tests passed."
    reason = str(getattr(result, "reason", "") or "").strip()
    return f"Tests passed: {result.passed}/{result.total}." + (f" {reason}" if reason else "")
