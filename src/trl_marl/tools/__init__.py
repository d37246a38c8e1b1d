"""Tools that agents call during their turns (TRL's `tools`: plain Python callables described by their docstrings).

- [`calling`]: [`call_tool`], one tool call that cannot hurt training (bad arguments, exceptions, hangs and huge
  results become an error message or a cut result within a time limit), and its [`ToolOutcome`].
- [`calculator`]: the calculator tool, arithmetic that never evaluates code.
- [`python`]: the Python tool, code run in the project's sandbox (`trl_marl.sandbox`); [`make_python_tool`] for
  other limits.
"""

from .calculator import calculator
from .calling import ToolOutcome, call_tool, cut_text, tool_name
from .python import make_python_tool, python

__all__ = ["ToolOutcome", "calculator", "call_tool", "cut_text", "make_python_tool", "python", "tool_name"]
