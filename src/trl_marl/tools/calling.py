"""One tool call that cannot hurt training: [`call_tool`] and its [`ToolOutcome`].

A tool is a plain Python callable with type hints and a Google-style docstring, as in TRL's `GRPOTrainer(tools=...)`:
the model writes a call as a name and a JSON object of arguments, and the tool is called as `tool(**arguments)`. The
arguments are the policy's, so they may be anything; a tool may raise, hang, or return something huge. `call_tool`
turns every one of these into the text of the tool message and a flag saying whether the call failed, and nothing a
tool does (short of holding the GIL in C code, below) escapes it or stops the run:

| what happens | `content` (what the model reads) | `failed` | `timed_out` | `truncated` |
|---|---|---|---|---|
| `arguments` is not a dict with string keys | `{'error': "tool 'f' takes ... got list"}` | yes | | |
| an unknown or missing argument, a wrong type | `{'error': "tool 'f' has no argument 'x' ..."}` | yes | | |
| the tool raises (any `BaseException`: `SystemExit` too) | `{'error': 'ValueError: <message>'}` | yes | | |
| no return within `timeout` seconds | `{'error': "tool 'f' did not return within 0.2 seconds"}` | yes | yes | |
| `str(result)` raises | `{'error': 'TypeError: <message> (while ...)'}` | yes | | |
| it returns | `str(result)` | no | | |
| the text is longer than `max_chars` | its head and `[... N more characters cut]` | as above | | yes |
| the text holds lone surrogates (`"caf\\udce9"`) | the text, each replaced by U+FFFD | as above | | |

Every `content` encodes to UTF-8: a tool that echoes an argument the model wrote as `"caf\\udce9"` (a JSON escape
that decodes to a lone surrogate, which no tokenizer encodes) gives back `"caf\ufffd"`. [`encodable_json`] does the
same to the names and arguments of the calls themselves, where [`~trl_marl.tools.templates.parse_completion`] reads
them: together these are the one place where the model's text becomes text every later step can encode.

Errors keep TRL's shape (a dict with the key `"error"`, turned into text with `str()`), with the exception's type
before its message. Every result becomes `str(result)`: TRL passes a list of content blocks (images for VLMs) through
unchanged, which trl-marl does not support; such a list is shown as its text.

Where the call runs: in a daemon worker thread ([`trl_marl.utils.bounded.call_in_thread`]), which also runs an async
tool's coroutine to completion (`asyncio.run`) and turns the result into text, so that a `__str__` that hangs is
bounded by the same `timeout`. A Python thread cannot be killed: a tool that overruns is abandoned and keeps running in
the background until it returns on its own, and a tool stuck in C code that holds the GIL (a huge `str(10**10**7)`, a
backtracking regular expression) delays even the return of `call_tool` until it lets go. A tool that must be
stoppable runs its work in a separate process, as [`trl_marl.tools.python`] does through the sandbox, whose own limits
kill the program; the `timeout` of `call_tool` is then the second line of defence.

Only what the tool raises in the worker is caught: a `KeyboardInterrupt` from the user (Ctrl-C, delivered to the main
thread while it waits) goes through, as it should.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..utils.bounded import Overran, call_in_thread
from ..utils.text import encodable

__all__ = ["MAX_CALL_DEPTH", "MIN_MAX_CHARS", "ToolOutcome", "call_tool", "cut_text", "encodable_json", "tool_name"]

MIN_MAX_CHARS = 64
"""The smallest `max_chars` [`call_tool`] accepts: room for some text and the marker of what was cut."""

MAX_CALL_DEPTH = 64
"""The deepest nesting of lists and objects in a parsed assistant message (the message is level 1, its list of calls
2, a call 3, its function 4, the arguments 5, so arguments may nest 59 levels more); a deeper message holds no tool
call ([`encodable_json`], [`~trl_marl.tools.templates.parse_completion`])."""

_VALUE_PREVIEW = 40  # characters of a wrong argument's value shown in the error


def encodable_json(value: Any, max_depth: int = MAX_CALL_DEPTH) -> Any:
    """A copy of JSON data (a parsed tool call, its arguments) whose every string, keys included, encodes to UTF-8.

    Lone surrogates are replaced by U+FFFD ([`~trl_marl.utils.text.encodable`]); numbers, booleans and `None` are
    kept; other values are kept as they are (they are not the model's text).

    Args:
        value (`Any`): The data: dicts, lists, tuples, strings and scalars.
        max_depth (`int`): The most levels of nested dicts and lists (the outermost one counts).

    Returns:
        `Any`: The copy (dicts and lists are new objects; tuples become lists).

    Raises:
        ValueError: `value` is nested deeper than `max_depth` (found before the walk goes any deeper, so a 1,000-deep
            call never reaches Python's recursion limit here).
    """
    return _encodable(value, max_depth, max_depth)


def _encodable(value: Any, levels_left: int, max_depth: int) -> Any:
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, (dict, list, tuple)):
        if levels_left <= 0:
            raise ValueError(f"JSON data nested deeper than {max_depth} levels")
        if isinstance(value, dict):
            return {(encodable(k) if isinstance(k, str) else k): _encodable(v, levels_left - 1, max_depth)
                    for k, v in value.items()}
        return [_encodable(v, levels_left - 1, max_depth) for v in value]
    return value


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call gave: the tool message's text and how the call went.

    Args:
        content (`str`): The text of the tool message the model reads next: the result as `str(result)`, or an error
            as `str({"error": "<what went wrong>"})`; at most `max_chars` characters.
        failed (`bool`): The call did not return a result (bad arguments, an exception, a timeout, a result that
            cannot be turned into text). TRL counts these as failed tool calls.
        timed_out (`bool`): The call did not return within its time limit (then `failed` is true too).
        truncated (`bool`): The text was longer than `max_chars` and was cut (the content says how much was cut).
    """

    content: str
    failed: bool
    timed_out: bool = False
    truncated: bool = False


def tool_name(tool: Any) -> str:
    """The name a tool is known by: its `__name__` (also through `functools.partial`), else its class's name."""
    while isinstance(tool, functools.partial):
        tool = tool.func
    try:
        name = getattr(tool, "__name__", None)
    except Exception:  # noqa: BLE001 - a property that raises
        name = None
    return name if isinstance(name, str) else type(tool).__name__


def cut_text(text: str, max_chars: int | None) -> tuple[str, bool]:
    """`text` cut to at most `max_chars` characters, its head followed by a marker saying how many were cut.

    Args:
        text (`str`): The text.
        max_chars (`int`, *optional*): The most characters returned, the marker included (at least
            [`MIN_MAX_CHARS`]); `None` for no limit.

    Returns:
        `tuple[str, bool]`: The text (cut or whole) and whether it was cut. A cut text ends with
        `"\\n[... N more characters cut]"`, N being the number of characters of `text` left out.
    """
    if max_chars is None or len(text) <= max_chars:
        return text, False
    keep = max_chars - len(_marker(len(text) - max_chars))
    while keep + len(_marker(len(text) - keep)) > max_chars:  # more cut may need one more digit
        keep -= 1
    return text[:keep] + _marker(len(text) - keep), True


def _marker(cut: int) -> str:
    return f"\n[... {cut} more characters cut]"


def _error(message: str) -> str:
    return str({"error": message})


def call_tool(tool: Callable[..., Any], arguments: Any, timeout: float | None,
              max_chars: int | None) -> ToolOutcome:
    """Call `tool(**arguments)` the way a tool call of the model must be called: whatever happens, an outcome.

    See the module's docstring for every case. The arguments are checked against the tool's signature before the
    call (unknown and missing names; a value of the wrong type for an argument annotated `str`, `int`, `float` or
    `bool`, or an optional or union of these; other annotations are not checked), so that the model reads which
    argument was wrong; TRL calls the tool without this check, and its own `TypeError` (whose text names the
    function) is what the model reads there.

    Args:
        tool (`Callable`): The tool: a function (sync or async) or a callable object.
        arguments (`Any`): The arguments the model wrote, normally a dict parsed from JSON.
        timeout (`float`, *optional*): Seconds the call (the result's `str()` included) may take; `None` for no
            limit. A call that takes longer is abandoned (a thread cannot be killed: see the module's docstring).
        max_chars (`int`, *optional*): The most characters of `content` (at least [`MIN_MAX_CHARS`]); `None` for no
            limit.

    Returns:
        [`ToolOutcome`]: The tool message's text and whether the call failed, timed out or was cut.

    Raises:
        ValueError: `timeout` or `max_chars` is not a valid limit (a mistake of the caller, never of the tool or of
            the model).
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < math.inf):
        raise ValueError(f"call_tool's timeout must be a positive number of seconds or None, got {timeout!r}.")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, int)
                                  or max_chars < MIN_MAX_CHARS):
        raise ValueError(f"call_tool's max_chars must be an int of at least {MIN_MAX_CHARS} or None, got "
                         f"{max_chars!r}.")
    name = tool_name(tool)
    try:
        problem = _argument_problem(tool, name, arguments)
    except Exception:  # noqa: BLE001 - a signature that cannot be read: the call itself will tell
        problem = None
    if problem is not None:
        return _outcome(_error(problem), max_chars, failed=True)

    def work() -> tuple[bool, str]:
        return _call_to_text(tool, arguments)

    work.__name__ = f"tool:{name}"  # the worker thread's name
    wait = threading.TIMEOUT_MAX if timeout is None else min(float(timeout), threading.TIMEOUT_MAX)
    try:
        (ok, text), seconds = call_in_thread(work, {}, wait)
    except Overran:
        if timeout is None:  # no limit: only a wait past `threading.TIMEOUT_MAX` overruns
            raise
        return _outcome(_error(f"tool {name!r} did not return within {_seconds(timeout)}"), max_chars,
                        failed=True, timed_out=True)
    except Exception as exc:  # noqa: BLE001 - the worker itself could not start (e.g. no thread left)
        return _outcome(_error(f"tool {name!r} could not be called: {type(exc).__name__}: {exc}"), max_chars,
                        failed=True)
    if timeout is not None and seconds > timeout:  # it held the GIL past the deadline: late is late
        return _outcome(_error(f"tool {name!r} did not return within {_seconds(timeout)} (it took "
                               f"{seconds:.1f})"), max_chars, failed=True, timed_out=True)
    return _outcome(text if ok else _error(text), max_chars, failed=not ok)


def _seconds(value: float) -> str:
    return f"{value:g} second" + ("" if value == 1 else "s")


def _outcome(text: str, max_chars: int | None, failed: bool, timed_out: bool = False) -> ToolOutcome:
    content, truncated = cut_text(encodable(text), max_chars)
    return ToolOutcome(content=content, failed=failed, timed_out=timed_out, truncated=truncated)


def _call_to_text(tool: Callable[..., Any], arguments: dict[str, Any]) -> tuple[bool, str]:
    """In the worker thread: `(True, str(result))`, or `(False, "<Type>: <message>")` for whatever was raised.

    Never raises: everything the tool does (its coroutine and the result's `__str__` included) happens here.
    """
    stage = ""
    try:
        result = tool(**arguments)
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        stage = " (while turning the result into text)"
        text = str(result)
        if not isinstance(text, str):  # a str subclass is fine; anything else is not text
            raise TypeError(f"str() of the result returned {type(text).__name__}")
        return True, str.__str__(text)
    except BaseException as exc:  # noqa: BLE001 - raised by the tool in this worker: SystemExit included
        return False, _exception_line(exc) + stage


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _exception_line(exc: BaseException) -> str:
    """`"<Type>: <message>"` (just the type when the message is empty); never raises."""
    try:
        kind = type(exc).__name__
        kind = kind if isinstance(kind, str) else "Exception"
    except BaseException:  # noqa: BLE001 - a metaclass with a hostile __name__
        kind = "Exception"
    try:
        message = str(exc)
        message = str.__str__(message) if isinstance(message, str) else ""
    except BaseException:  # noqa: BLE001 - an exception whose __str__ raises
        message = "<its message could not be turned into text>"
    return f"{kind}: {message}" if message else kind


# ---------------------------------------------------------------------------------------------------- arguments
def _argument_problem(tool: Callable[..., Any], name: str, arguments: Any) -> str | None:
    """Why `tool(**arguments)` cannot be a valid call, as a sentence naming the tool and the argument; or None."""
    if not isinstance(arguments, dict):
        return (f"tool {name!r} takes its arguments as a JSON object of named values, got "
                f"{type(arguments).__name__}")
    odd = [key for key in arguments if not isinstance(key, str)]
    if odd:
        return f"tool {name!r} takes arguments named by strings, got the key {_preview(odd[0])}"
    try:
        signature = inspect.signature(tool)
    except (TypeError, ValueError):  # some built-ins and C callables have none: the call itself will tell
        return None
    params = signature.parameters
    named = [p.name for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    listing = ", ".join(named) if named else "none"
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unknown = [key for key in arguments if key not in named]
        if unknown:
            return f"tool {name!r} has no argument {unknown[0]!r} (its arguments: {listing})"
    missing = [p.name for p in params.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
               and p.default is p.empty and p.name not in arguments]
    if missing:
        return f"tool {name!r} needs the argument {missing[0]!r} (its arguments: {listing})"
    try:
        signature.bind(**arguments)
    except TypeError as exc:  # e.g. positional-only parameters
        return f"tool {name!r} cannot take these arguments: {exc}"
    hints = _type_hints(tool)
    for key, value in arguments.items():
        expected = _expected(value, hints.get(key, Any))
        if expected is not None:
            return (f"tool {name!r}: argument {key!r} must be {expected}, got {type(value).__name__} "
                    f"{_preview(value)}")
    return None


def _type_hints(tool: Callable[..., Any]) -> dict[str, Any]:
    """The tool's parameter annotations, resolved; `{}` when they cannot be read."""
    target = tool
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(target).__call__  # a callable object: its class's __call__ (with `self`, ignored here)
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: no check
        return {}


_SIMPLE = {str: "a string", bool: "true or false", int: "an integer", float: "a number", type(None): "null"}


def _matches(value: Any, hint: Any) -> bool | None:
    """Whether `value` fits the simple annotation `hint`; None when `hint` is not one this check reads."""
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is type(None) or hint is None:
        return value is None
    return None


def _expected(value: Any, hint: Any) -> str | None:
    """What `value` should have been for `hint` (e.g. `"a string"`), or None when it fits or `hint` is not checked."""
    members = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    verdicts = [_matches(value, member) for member in members]
    if any(v is None or v for v in verdicts):
        return None
    return " or ".join(_SIMPLE[type(None) if m is None else m] for m in members)


def _preview(value: Any) -> str:
    """A short `repr` of a value the model wrote (JSON data), never long."""
    try:
        text = repr(value) if isinstance(value, (str, int, float, bool, type(None), list, dict)) else ""
    except Exception:  # noqa: BLE001 - e.g. an int too large for repr
        text = ""
    if not text:
        return f"<a {type(value).__name__}>"
    return text if len(text) <= _VALUE_PREVIEW else text[:_VALUE_PREVIEW - 3] + "..."
