"""The tool settings that both trainers' configs carry, written once: the fields and their check.

`MAGRPOConfig` inherits `max_tool_calling_iterations` from `trl.GRPOConfig`; `MultiAgentPPOConfig` declares it with
[`max_tool_calling_iterations_field`]. Both declare the other three with the field functions below and call
[`check_tool_settings`] in `__post_init__`.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .calling import MIN_MAX_CHARS


def tool_call_timeout_field() -> Any:
    """`tool_call_timeout`: seconds one tool call may take, and all of one sample's calls in a turn (default 30)."""
    return field(
        default=30.0,
        metadata={
            "help": "Seconds one tool call may take (agents with `tools` or `environment_factory`): a call that "
            "takes longer gives the agent an error message as the tool's result, and training goes on. It is also "
            "what all the tool calls of one sample in one turn may take together: once it is spent, further calls "
            "of that turn are not run and the agent reads an error, so ten hanging calls cost one timeout, not ten. "
            "None: no limit. A Python function cannot be stopped from outside, so a tool that may hang for good "
            "should run its work in a subprocess (as `trl_marl.tools.python` runs code in the sandbox)."
        },
    )


def tool_turn_timeout_field() -> Any:
    """`tool_turn_timeout`: seconds all the tool calls of one turn may take together, over every sample."""
    return field(
        default=None,
        metadata={
            "help": "Seconds all the tool calls of one turn may take together, over every sample and agent of the "
            "step: once spent, the remaining calls of that turn are not run and their agents read an error (a "
            "policy whose every sample calls a hanging tool then costs this, not `tool_call_timeout` times the "
            "samples). None: 4 x `tool_call_timeout` (120 s by default; no limit when that is None). Raise it for "
            "tools that legitimately take seconds on many samples."
        },
    )


def max_tool_result_chars_field() -> Any:
    """`max_tool_result_chars`: the longest tool result, in characters (default 4000)."""
    return field(
        default=4000,
        metadata={
            "help": "Longest tool result, in characters: a longer one is cut, with a note saying how much was "
            "dropped. None: no limit (results are still dropped when they do not fit the completion budget)."
        },
    )


def max_tool_calling_iterations_field() -> Any:
    """`max_tool_calling_iterations`: TRL GRPO's field, for configs that do not inherit it."""
    return field(
        default=None,
        metadata={
            "help": "Rounds of tool calls in one agent's turn (agents with tools), as TRL's GRPO field: after this "
            "many rounds the agent's next message is its answer. None: until it answers without a call or the "
            "completion budget is spent."
        },
    )


def check_tool_settings(config: Any) -> None:
    """Refuse bad values of the three tool fields of `config`, naming the field and what it takes.

    Raises:
        ValueError: `tool_call_timeout` or `tool_turn_timeout` not > 0, `max_tool_result_chars` below
            [`MIN_MAX_CHARS`], or `max_tool_calling_iterations` negative (None is always allowed: no limit).
    """
    if config.tool_call_timeout is not None and not config.tool_call_timeout > 0:
        raise ValueError(f"`tool_call_timeout` must be > 0 seconds or None (no limit), got "
                         f"{config.tool_call_timeout!r}.")
    turn = config.tool_turn_timeout
    if turn is not None and (isinstance(turn, bool) or not isinstance(turn, (int, float)) or not turn > 0):
        raise ValueError(f"`tool_turn_timeout` must be > 0 seconds or None (4 x `tool_call_timeout`), got {turn!r}.")
    if config.max_tool_result_chars is not None and config.max_tool_result_chars < MIN_MAX_CHARS:
        raise ValueError(f"`max_tool_result_chars` must be >= {MIN_MAX_CHARS} (room for the note on what was cut) "
                         f"or None (no limit), got {config.max_tool_result_chars!r}.")
    if config.max_tool_calling_iterations is not None and config.max_tool_calling_iterations < 0:
        raise ValueError(f"`max_tool_calling_iterations` must be >= 0 or None (until the completion budget is "
                         f"spent), got {config.max_tool_calling_iterations!r}.")
