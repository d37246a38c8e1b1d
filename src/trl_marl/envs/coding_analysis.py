"""Static analysis of the coding team's joint action (MAGRPO's cooperative coding): a helper + main pair assembled
into one program and checked without running it (definitions, syntax, whether the main function uses the helper)."""


from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ..utils.code import parse_or_none, syntax_error, top_level_function

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------------------------------------------- code analysis
def _binds(tree: ast.AST, name: str) -> bool:
    """Whether `tree` binds `name` (a def, class, assignment, import, parameter or loop variable of that name)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name:
            return True
        if isinstance(node, ast.arg) and node.arg == name:
            return True
    return False


def _refers_to(func: ast.AST, name: str) -> bool:
    """Whether the body of `func` reads the name `name` (a call `name(...)`, or passing `name` as a value)."""
    return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
               for node in ast.walk(func))


def _calls(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def is_trivial_body(func: ast.FunctionDef | ast.AsyncFunctionDef, helper_name: str) -> bool:
    """Whether a function does no work of its own: after its docstring and `pass`/`...` statements, its body is

    - empty, or a single `raise`;
    - a single `return helper(...)` or `helper(...)` (a wrapper that only forwards to the helper);
    - `x = helper(...)` followed by `return x`.

    Args:
        func (`ast.FunctionDef`): The function.
        helper_name (`str`): The helper's name.
    """
    body = [
        stmt for stmt in func.body
        if not (isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)))
    ]
    if not body:
        return True
    if len(body) == 1:
        stmt = body[0]
        if isinstance(stmt, ast.Raise):
            return True
        return isinstance(stmt, (ast.Return, ast.Expr)) and _calls(stmt.value, helper_name)
    if len(body) == 2:
        first, second = body
        return (
            isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)
            and _calls(first.value, helper_name) and isinstance(second, ast.Return)
            and isinstance(second.value, ast.Name) and second.value.id == first.targets[0].id
        )
    return False


# ---------------------------------------------------------------------------------------------------- solutions
@dataclass(frozen=True)
class CodingSolution:
    """A joint action of the coding team, assembled and statically analysed (nothing is executed).

    Args:
        helper_code (`str`): The helper agent's code (fences stripped).
        main_code (`str`): The main agent's code (fences stripped).
        program (`str`): The combined program: prompt preamble, helper code, main code.
        helper_name (`str`): The name the helper function must have.
        entry_point (`str`): The name of the function the main agent writes.
        helper_error (`str` or `None`): The helper code's syntax error, if any.
        main_error (`str` or `None`): The main code's syntax error, if any.
        program_error (`str` or `None`): The combined program's syntax error, if any.
        helper_defined (`bool`): The helper code defines `helper_name` at top level.
        main_defined (`bool`): The main code defines `entry_point` at top level.
        helper_used (`bool`): `entry_point` refers to `helper_name`, and the main code does not rebind that name.
        main_trivial (`bool`): `entry_point` is missing or is a trivial wrapper (see [`is_trivial_body`]).
    """

    helper_code: str
    main_code: str
    program: str
    helper_name: str
    entry_point: str
    helper_error: str | None
    main_error: str | None
    program_error: str | None
    helper_defined: bool
    main_defined: bool
    helper_used: bool
    main_trivial: bool

    @property
    def parses(self) -> bool:
        """Whether the combined program parses."""
        return self.program_error is None


@lru_cache(maxsize=16384)
def analyze_solution(helper_code: str, main_code: str, entry_point: str, helper_name: str = "aux",
                     preamble: str = "") -> CodingSolution:
    """Assemble and statically analyse a helper + main pair (cached; nothing is executed).

    Args:
        helper_code (`str`): The helper agent's code (fences already stripped).
        main_code (`str`): The main agent's code (fences already stripped).
        entry_point (`str`): The name of the function the main agent must define.
        helper_name (`str`): The name of the helper function.
        preamble (`str`): Code put before both (see [`~trl_marl.utils.code.prompt_preamble`]).

    Returns:
        [`CodingSolution`]
    """
    parts = [part for part in (preamble.strip("\n"), helper_code, main_code) if part.strip()]
    program = "\n\n\n".join(parts) + "\n"
    helper_tree, main_tree = parse_or_none(helper_code), parse_or_none(main_code)
    main_func = top_level_function(main_tree, entry_point)
    helper_used = False
    if main_func is not None and main_tree is not None:
        # a main that (re)defines the helper's name shadows the partner's helper: that is not cooperation
        rebinds = _binds(main_tree, helper_name)
        helper_used = _refers_to(main_func, helper_name) and not rebinds
    return CodingSolution(
        helper_code=helper_code,
        main_code=main_code,
        program=program,
        helper_name=helper_name,
        entry_point=entry_point,
        helper_error=syntax_error(helper_code),
        main_error=syntax_error(main_code),
        program_error=syntax_error(program),
        helper_defined=top_level_function(helper_tree, helper_name) is not None,
        main_defined=main_func is not None,
        helper_used=helper_used,
        main_trivial=main_func is None or is_trivial_body(main_func, helper_name),
    )
