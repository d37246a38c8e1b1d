"""The calculator tool: arithmetic on numbers, and nothing else ever runs.

[`calculator`] reads the expression with `ast.parse(mode="eval")` and evaluates the tree itself, accepting only int
and float literals (not `True`, complex numbers or strings), unary `+` and `-`, the binary operators `+ - * / // %
**`, and parentheses. Everything else (names, calls, attributes, subscripts, lists, strings, comparisons, lambdas,
comprehensions, `^`, ...) is refused with a `ValueError` that says what is allowed; no code of the expression is ever
executed, and no call of it can take long or much memory:

- at most [`MAX_EXPRESSION_CHARS`] characters, operators nested at most [`MAX_DEPTH`] deep;
- every number, literal or intermediate, stays within [`MAX_MAGNITUDE`] in absolute value: a power is checked
  *before* it is computed (its exponent at most [`MAX_EXPONENT`] in absolute value, and `|base| ** exponent` within
  the bound), every other operation after (on operands within the bound, each is cheap);
- division, floor division and modulo by zero, and a negative base raised to a fractional power (a complex result)
  are errors.

The value is shown as Python would show an int (exact digits) or, for a float, with 10 significant digits (`%.10g`):
`7/2` -> `3.5`, `1/3` -> `0.3333333333`, `6/2` -> `3` (a whole float shows no `.0`), `2**0.5` -> `1.414213562`,
`1e20/1` -> `1e+20`. Operator precedence is Python's: `-3**2` is `-9`, `2**3**2` is `512`.
"""

from __future__ import annotations

import ast
import math

__all__ = ["MAX_DEPTH", "MAX_EXPONENT", "MAX_EXPRESSION_CHARS", "MAX_MAGNITUDE", "calculator"]

MAX_EXPRESSION_CHARS = 200
"""The longest expression [`calculator`] reads."""

MAX_DEPTH = 100
"""How deep operators may nest (`1+2+...` with 100 terms is 99 deep; parentheses alone add nothing)."""

MAX_EXPONENT = 100
"""The largest exponent of a power, in absolute value."""

MAX_MAGNITUDE = 10**100
"""The largest absolute value of any number of a calculation (a literal, an intermediate value, the result)."""

_LOG_MAX = 100.0  # log10(MAX_MAGNITUDE)

_ALLOWED = "numbers, + - * / // % ** and parentheses"

_REFUSED = {
    ast.Name: "a name", ast.Call: "a function call (for a square root write x ** 0.5)",
    ast.Attribute: "an attribute", ast.Subscript: "indexing",
    ast.List: "a list", ast.Tuple: "a comma (write 1000, not 1,000)", ast.Set: "a set", ast.Dict: "a dict",
    ast.Compare: "a comparison", ast.BoolOp: "and/or", ast.Lambda: "a lambda", ast.IfExp: "if/else",
    ast.ListComp: "a comprehension", ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
    ast.GeneratorExp: "a generator", ast.JoinedStr: "an f-string", ast.NamedExpr: "an assignment (:=)",
    ast.Starred: "a starred value", ast.Slice: "a slice", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield",
}

_OPERATOR_NAMES = {
    ast.BitXor: "'^' (for a power write **, e.g. 2 ** 3)", ast.BitAnd: "'&'", ast.BitOr: "'|'", ast.LShift: "'<<'",
    ast.RShift: "'>>'", ast.MatMult: "'@'", ast.Invert: "'~'", ast.Not: "'not'",
}


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Args:
        expression (`str`): The expression, written with numbers, + - * / // % ** and parentheses, e.g.
            "(2 + 3) * 4 / 7". No names, functions or other code.

    Returns:
        The value: an integer in full, or a decimal number with 10 significant digits.
    """
    if not isinstance(expression, str):
        raise TypeError(f"The expression must be a string, got {type(expression).__name__}.")
    text = expression.strip()
    if not text:
        raise ValueError(f"The expression is empty; write {_ALLOWED}, e.g. (2 + 3) * 4.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"The expression has {len(text)} characters; at most {MAX_EXPRESSION_CHARS} are allowed.")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"This is not an arithmetic expression ({exc.msg}); use {_ALLOWED}.") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; a parser that gives up
        raise ValueError(f"This is not an arithmetic expression ({type(exc).__name__}); use {_ALLOWED}.") from None
    return _show(_evaluate(tree.body, 0))


def _evaluate(node: ast.AST, depth: int) -> int | float:
    if depth > MAX_DEPTH:
        raise ValueError(f"The expression is nested more than {MAX_DEPTH} operators deep.")
    if isinstance(node, ast.Constant):
        value = node.value
        if type(value) is int or type(value) is float:  # not bool, complex, str, bytes, None, Ellipsis
            return _bounded(value)
        kind = {bool: "True/False", complex: "a complex number", str: "a string", bytes: "bytes"}.get(
            type(value), repr(value))
        raise ValueError(f"{_capital(kind)} is not allowed; use {_ALLOWED}.")
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise ValueError(f"The operator {_OPERATOR_NAMES.get(type(node.op), '?')} is not allowed; use {_ALLOWED}.")
        operand = _evaluate(node.operand, depth + 1)
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        left = _evaluate(node.left, depth + 1)
        right = _evaluate(node.right, depth + 1)
        return _bounded(_apply(node.op, left, right))
    kind = _REFUSED.get(type(node), type(node).__name__)
    if isinstance(node, ast.Name):
        kind = f"a name ({node.id})"
    raise ValueError(f"{_capital(kind)} is not allowed; use {_ALLOWED}.")


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _apply(op: ast.operator, left: int | float, right: int | float) -> int | float:
    """One binary operation on numbers within the bound; a power is checked before it is computed."""
    try:
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise ValueError("Division by zero.")
            if isinstance(op, ast.Div):
                return left / right
            return left // right if isinstance(op, ast.FloorDiv) else left % right
        if isinstance(op, ast.Pow):
            _check_power(left, right)
            return left**right
    except OverflowError:
        raise ValueError(f"A value is too large (over 10**{int(_LOG_MAX)} in absolute value).") from None
    raise ValueError(f"The operator {_OPERATOR_NAMES.get(type(op), '?')} is not allowed; use {_ALLOWED}.")


def _check_power(base: int | float, exponent: int | float) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"The exponent {_show(exponent)} is too large (at most {MAX_EXPONENT} in absolute value).")
    if base == 0:
        if exponent < 0:
            raise ValueError("Division by zero (0 raised to a negative power).")
        return
    if base < 0 and exponent != int(exponent):
        raise ValueError("A negative number raised to a fractional power has no real value.")
    if exponent * math.log10(abs(base)) > _LOG_MAX:
        raise ValueError(f"The result would be over 10**{int(_LOG_MAX)} in absolute value.")


def _bounded(value: int | float) -> int | float:
    """`value` when it is finite and within [`MAX_MAGNITUDE`]; else a `ValueError`."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"A value is too large (over 10**{int(_LOG_MAX)} in absolute value).")
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"A value is too large (over 10**{int(_LOG_MAX)} in absolute value).")
    return value


def _show(value: int | float) -> str:
    """An int in full; a float with 10 significant digits, a whole one without `.0`, and never `-0`."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.10g}"
    return "0" if text == "-0" else text
