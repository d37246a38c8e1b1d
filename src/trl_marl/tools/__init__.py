"""Agents that act: TRL's `tools` and `environment_factory` for every agent of a team (docs/tools.md).

- [`toolset`]: which tools each agent has ([`team_tools`]: for the whole team or per agent, checked).
- [`templates`]: how tool calls and results are written and parsed (a ChatML tool template for models whose own
  template cannot express them, e.g. SmolLM2-Instruct: [`use_tool_chat_template`]).
- [`loop`]: [`ToolLoop`], an agent's turn with tools inside the joint rollout (calls, results appended, masks).
- [`calling`]: [`call_tool`], one tool call that cannot hurt training (bad arguments, exceptions, hangs and huge
  results become an error message or a cut result within a time limit), and its [`ToolOutcome`].
- [`calculator`]: the calculator tool, arithmetic that never evaluates code.
- [`python`]: the Python tool, code run in the project's sandbox (`trl_marl.sandbox`); [`make_python_tool`] for
  other limits.
"""

from .calculator import calculator
from .calling import ToolOutcome, call_tool, cut_text, tool_name
from .loop import ToolLoop, ToolTurn, ToolTurnStats
from .python import make_python_tool, python
from .templates import (
    CHATML_RESPONSE_TEMPLATE,
    CHATML_TOOL_TEMPLATE,
    ToolFormat,
    parse_completion,
    resolve_tool_format,
    tool_suffix_ids,
    use_tool_chat_template,
)
from .toolset import AgentTools, environment_methods, team_tools

__all__ = [
    "AgentTools",
    "CHATML_RESPONSE_TEMPLATE",
    "CHATML_TOOL_TEMPLATE",
    "ToolFormat",
    "ToolLoop",
    "ToolOutcome",
    "ToolTurn",
    "ToolTurnStats",
    "calculator",
    "call_tool",
    "cut_text",
    "environment_methods",
    "make_python_tool",
    "parse_completion",
    "python",
    "resolve_tool_format",
    "team_tools",
    "tool_name",
    "tool_suffix_ids",
    "use_tool_chat_template",
]
