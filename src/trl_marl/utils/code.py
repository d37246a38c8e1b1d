"""Python code in model answers: extracting it, checking it parses, and assembling a HumanEval program.

One rule for the whole package: the coding environment (`trl_marl.envs.coding`), its rewards and the unit-test
reward (`trl_marl.rewards.execution`) all read a completion's code with [`extract_code`] and keep a task prompt's
imports and helper definitions with [`prompt_preamble`].

**What the code of an answer is** ([`extract_code`]):

- A Markdown fence opens with three or more backticks or tildes, optionally followed by a language tag, and closes
  with the same fence on a line of its own. An opening fence without a closing one (a generation cut off by the
  length limit) runs to the end of the text.
- Only Python blocks count: untagged blocks and the tags `python`, `py`, `python3`, `py3`, `ipython`, `pycon`
  (any case). An answer whose fences are all in other languages (`bash`, `text`, ...) has no code: `""`.
- With `entry_point`, the first Python block that defines that function is the code; otherwise (or when no block
  defines it) all Python blocks joined by a blank line.
- An answer without any fence is code as it stands (a HumanEval function body continuing the prompt).
- Line ends become `\\n`, leading blank lines and trailing white space are removed, indentation is kept (a fenced
  function body must still continue its prompt).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Collection, Sequence
from functools import lru_cache
from typing import Any

from .text import completion_text

__all__ = [
    "PYTHON_TAGS",
    "build_humaneval_program",
    "defines_function",
    "definitions_of",
    "definitions_only",
    "first_definition_of",
    "extract_code",
    "function_parts",
    "parse_or_none",
    "prompt_preamble",
    "quiet_parse",
    "syntax_error",
    "top_level_function",
]

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)

PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3", "ipython", "pycon"})
"""Language tags of a fence (lower-cased) whose content counts as Python code."""


def _tidy(code: str) -> str:
    return code.lstrip("\n").rstrip()


def extract_code(text: Any, entry_point: str | None = None) -> str:
    """The Python code of a completion (the rule is in this module's docstring).

    Args:
        text (`str` or `list[dict]`): A completion; a conversational one is read as its last message.
        entry_point (`str`, *optional*): The function the code must define: the first Python block defining it wins.

    Returns:
        `str`: The code, possibly empty.

    Example:

    ```python
    extract_code("Here:\\n```python\\nx = 1\\n```\\nand\\n```\\ny = 2\\n```")  # "x = 1\\n\\ny = 2"
    extract_code("```bash\\nrm -rf /\\n```")  # "" (no Python block)
    ```
    """
    text = completion_text(text).replace("\r\n", "\n")
    fences = list(_FENCE.finditer(text))
    if not fences:
        return _tidy(text)
    blocks = [m.group(3) for m in fences if m.group(2).lower() in PYTHON_TAGS]
    if not blocks:
        return ""
    if entry_point:
        for block in blocks:
            if defines_function(block, entry_point):
                return _tidy(block)
    return _tidy("\n\n".join(block.rstrip("\n") for block in blocks))


def _is_definition(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return all(isinstance(t, ast.Name) for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
    return False


def _kept_statements(code: str, tree: ast.Module, keep: Callable[[ast.stmt], bool]) -> str:
    """The top-level statements of `code` (parsed as `tree`) for which `keep` is true, each with its decorators, in
    order, joined by blank lines."""
    lines = code.splitlines()
    kept = []
    for node in tree.body:
        if keep(node):
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return "\n\n".join(kept)


def _function_or_constant(node: ast.stmt, names: Collection[str]) -> bool:
    """An import, a literal constant, or a function called one of `names` (never a class)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name in names
    return _is_definition(node) and not isinstance(node, ast.ClassDef)


def definitions_only(code: str) -> str:
    """The definitions of `code`: its top-level imports, functions, classes and assignments of literal constants
    (`VOWELS = "aeiou"`), in order, each with its decorators and comments inside it; every other top-level statement
    (an example call, a `print`, an `if __name__ == "__main__":` block, a loop) is left out. Code that does not
    parse is returned as it is, so that its syntax error is still reported.

    Small models follow a function with example usage (`print(aux(num))`) inside the same code block; run at import
    it fails the whole program before any test does, although the function asked for may be right. Top-level
    statements are never what a function-writing task asks for, so they are dropped.

    Example:

    ```python
    definitions_only("def f(x):\n    return x\n\nprint(f(y))")  # "def f(x):\n    return x"
    ```
    """
    tree = parse_or_none(code)
    return code if tree is None else _kept_statements(code, tree, _is_definition)


def definitions_of(code: str, names: Collection[str]) -> str:
    """The parts of `code` that define `names`: its top-level imports, its literal constants and its top-level
    functions called one of `names`; every other function, class and statement is left out. Code that does not parse
    is returned as it is (its syntax error is still reported).

    A partner that was asked for one function keeps only that function in the team's program: a helper agent that
    also writes the main function (or a class standing in for it) cannot pass the tests on its own.

    Example:

    ```python
    definitions_of("import re\n\ndef aux(x):\n    return x\n\ndef main(y):\n    return y", {"aux"})
    # "import re\n\ndef aux(x):\n    return x"
    ```
    """
    tree = parse_or_none(code)
    return code if tree is None else _kept_statements(code, tree, lambda node: _function_or_constant(node, names))


def first_definition_of(code: str, names: Sequence[str]) -> tuple[str | None, str]:
    """The first top-level function of `code` called one of `names`, and `code` reduced to it: its imports, its
    literal constants and that one function (`(None, code)` when `code` does not parse, `(None, "")` when it defines
    none of `names`).

    A programmer asked to write exactly one of two functions is held to the first one it writes: writing both does
    not let one agent do its partner's share.

    Example:

    ```python
    first_definition_of("def main(y):\n    return aux(y)\n\ndef aux(x):\n    return x", ["aux", "main"])
    # ("main", "def main(y):\n    return aux(y)")
    ```
    """
    tree = parse_or_none(code)
    if tree is None:
        return None, code
    first = next((node for node in tree.body
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names), None)
    if first is None:
        return None, ""
    return first.name, _kept_statements(code, tree, lambda node: node is first or _function_or_constant(node, ()))


def function_parts(prompt: str, name: str) -> tuple[str, str] | None:
    """The signature (`"f(x: int) -> int"`) and the docstring (dedented) of the top-level function `name` of
    `prompt`, or `None` when `prompt` does not parse or does not define it."""
    node = top_level_function(parse_or_none(prompt), name)
    if node is None:
        return None
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"{name}({ast.unparse(node.args)}){returns}", (ast.get_docstring(node) or "").strip()


def defines_function(code: str, name: str) -> bool:
    """Whether `code` has a line `def name(` (or `async def name(`), at any indentation; no parsing needed."""
    return re.search(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.M) is not None


def quiet_parse(code: str) -> ast.Module:
    """`ast.parse` without the warnings (invalid escapes, `is` with a literal) that model-written code triggers."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(code)


def parse_or_none(code: str) -> ast.Module | None:
    """The module `code` parses to, or `None` when it does not parse (syntax error, null bytes, absurd nesting)."""
    try:
        return quiet_parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def syntax_error(code: str) -> str | None:
    """`None` if `code` parses as a Python module, else a one-line description such as
    `"SyntaxError at line 2: invalid syntax"`."""
    try:
        quiet_parse(code)
    except SyntaxError as exc:  # IndentationError and TabError are SyntaxErrors
        where = f" at line {exc.lineno}" if exc.lineno else ""
        return f"{type(exc).__name__}{where}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return f"{type(exc).__name__}: {exc}"
    return None


def top_level_function(tree: ast.Module | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last top-level definition of function `name` (the one Python keeps), or `None`."""
    found = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found = node
    return found


def prompt_preamble(prompt: str, entry_point: str) -> str:
    """What a program keeps from the task prompt: everything except the function to implement.

    HumanEval prompts hold imports (`from typing import List`) and sometimes finished functions the solution needs
    (e.g. `is_palindrome` before `make_palindrome`), followed by the signature and docstring of `entry_point`. The
    prompt is parsed and every top-level statement but the definition of `entry_point` is kept, in order. If the
    prompt does not parse (e.g. an instruction in prose before the signature), only its top-level
    `import`/`from ... import` lines are kept.

    Args:
        prompt (`str`): The task prompt.
        entry_point (`str`): The name of the function to write.

    Returns:
        `str`: The preamble (possibly empty), without trailing newline.
    """
    return _prompt_preamble(prompt, entry_point)


@lru_cache(maxsize=4096)
def _prompt_preamble(prompt: str, entry_point: str) -> str:
    tree = parse_or_none(prompt)
    lines = prompt.splitlines()
    if tree is None:
        return "\n".join(line for line in lines if re.match(r"(import|from)\s+\S", line)).strip()
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            continue
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return "\n\n".join(kept).strip()


def build_humaneval_program(prompt: str, completion: str, entry_point: str) -> str:
    """A HumanEval program (without the tests): the prompt completed by `completion`.

    When the code of `completion` ([`extract_code`] with `entry_point`) defines `entry_point`, it is a whole function
    and replaces the prompt's signature: the program is the [`prompt_preamble`] followed by the code. Otherwise the
    code is a function body and the program is `prompt + code`. The program ends with one newline.

    Args:
        prompt (`str`): HumanEval's prompt (imports, helpers, signature and docstring).
        completion (`str`): The model's completion.
        entry_point (`str`): The name of the function.

    Returns:
        `str`: The program.
    """
    code = extract_code(completion, entry_point)
    if defines_function(code, entry_point):
        preamble = prompt_preamble(prompt, entry_point)
        return (preamble + "\n\n\n" + code if preamble else code) + "\n"
    return prompt + code + "\n"
