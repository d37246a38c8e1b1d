"""Agents that act: TRL's `tools` and `environment_factory` for every agent of a team (docs/tools.md).

- [`toolset`]: which tools each agent has (`team_tools`: for the whole team or per agent, checked).
- [`templates`]: how tool calls and results are written and parsed (a ChatML tool template for models whose own
  template cannot express them, e.g. SmolLM2-Instruct).
- [`loop`]: `ToolLoop`, an agent's turn with tools inside the joint rollout (calls, results, masks).
- [`calling`]: `call_tool`, one tool call that cannot hurt training (errors, timeouts and huge results become the
  tool's message).
- [`calculator`] and [`python`]: two tools to ship: arithmetic that never evaluates code, and Python run in the
  project's sandbox.
"""

from .calling import ToolOutcome, call_tool
from .loop import ToolLoop, ToolTurn, ToolTurnStats
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
    "call_tool",
    "environment_methods",
    "parse_completion",
    "resolve_tool_format",
    "team_tools",
    "tool_suffix_ids",
    "use_tool_chat_template",
]
