"""Tests of the calculator tool (`trl_marl.tools.calculator`): arithmetic only, bounded, never code."""

from __future__ import annotations

import time

import pytest
from transformers.utils import get_json_schema

from trl_marl.tools import ToolOutcome, calculator, call_tool

ALLOWED = "use numbers, + - * / // % ** and parentheses."


@pytest.mark.parametrize("expression, value", [
    ("2+3*4", "14"),
    ("(1+2)**3", "27"),
    ("7/2", "3.5"),
    ("6/2", "3"),  # a whole float shows no .0
    ("10//3", "3"),
    ("-10//3", "-4"),
    ("10 % 3", "1"),
    ("-3**2", "-9"),  # Python's precedence: -(3**2)
    ("2**3**2", "512"),  # right-associative
    ("2**-3", "0.125"),
    ("1/3", "0.3333333333"),  # 10 significant digits
    ("2**0.5", "1.414213562"),
    ("0.1 + 0.2", "0.3"),
    ("1e20/1", "1e+20"),
    ("-0.0", "0"),
    ("  ((4)) - +2 ", "2"),
    ("1_000 * 3", "3000"),
    ("2**100", "1267650600228229401496703205376"),  # ints in full
    ("10**100", "1" + "0" * 100),  # the largest magnitude allowed
])
def test_arithmetic(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("__import__('os').system('x')", "A function call (for a square root write x ** 0.5) is not allowed; " + ALLOWED),
    ("open('f')", "A function call (for a square root write x ** 0.5) is not allowed; " + ALLOWED),
    ("[1]*10", "A list is not allowed; " + ALLOWED),
    ("'a'*3", "A string is not allowed; " + ALLOWED),
    ("True+1", "True/False is not allowed; " + ALLOWED),
    ("1j * 2", "A complex number is not allowed; " + ALLOWED),
    ("x + 1", "A name (x) is not allowed; " + ALLOWED),
    ("(1).real", "An attribute is not allowed; " + ALLOWED),
    ("(1, 2)[0]", "Indexing is not allowed; " + ALLOWED),
    ("1,000", "A comma (write 1000, not 1,000) is not allowed; " + ALLOWED),
    ("lambda: 1", "A lambda is not allowed; " + ALLOWED),
    ("[i for i in (1,)]", "A comprehension is not allowed; " + ALLOWED),
    ("1 < 2", "A comparison is not allowed; " + ALLOWED),
    ("2 ^ 3", "The operator '^' (for a power write **, e.g. 2 ** 3) is not allowed; " + ALLOWED),
    ("~1", "The operator '~' is not allowed; " + ALLOWED),
    ("1 +", "This is not an arithmetic expression (invalid syntax); use numbers, + - * / // % ** and parentheses."),
    ("x = 1", "This is not an arithmetic expression (invalid syntax); use numbers, + - * / // % ** and parentheses."),
    ("   ", "The expression is empty; write numbers, + - * / // % ** and parentheses, e.g. (2 + 3) * 4."),
    ("1/0", "Division by zero."),
    ("5 % 0", "Division by zero."),
    ("1 // 0.0", "Division by zero."),
    ("0**-1", "Division by zero (0 raised to a negative power)."),
    ("(-8)**(1/3)", "A negative number raised to a fractional power has no real value."),
    ("2**10**10", "The exponent 10000000000 is too large (at most 100 in absolute value)."),
    ("9**9**9", "The exponent 387420489 is too large (at most 100 in absolute value)."),
    ("11**99", "The result would be over 10**100 in absolute value."),  # 99 * log10(11) = 103.1
    ("0.01**-60", "The result would be over 10**100 in absolute value."),  # 10**120
    ("10**100 * 10", "A value is too large (over 10**100 in absolute value)."),
    ("1e999", "A value is too large (over 10**100 in absolute value)."),  # a literal that is inf
    ("9" * 101, "A value is too large (over 10**100 in absolute value)."),
    ("-" * 150 + "1", "The expression is nested more than 100 operators deep."),
])
def test_everything_else_is_refused_with_a_clear_message(expression, message):
    with pytest.raises(ValueError) as info:
        calculator(expression)
    assert str(info.value) == message


def test_deep_nesting_and_long_input_are_refused_before_parsing():
    with pytest.raises(ValueError, match=r"^The expression has 1001 characters; at most 200 are allowed\.$"):
        calculator("(" * 500 + "1" + ")" * 500)
    with pytest.raises(ValueError, match=r"^The expression has 201 characters"):
        calculator("1+" * 100 + "1")
    assert calculator("(" * 99 + "7" + ")" * 99) == "7"  # parentheses alone nest nothing
    assert calculator("1+" * 99 + "1") == "100"  # 99 operators deep, 199 characters


def test_huge_powers_are_refused_without_being_computed():
    start = time.monotonic()
    for expression in ("2**10**10", "9**9**9", "(10**50)**(10**50)", "2**(2**(2**(2**(2**2))))"):
        with pytest.raises(ValueError, match="too large|over 10\\*\\*100"):
            calculator(expression)
    assert time.monotonic() - start < 1.0  # computing any of them would take minutes and gigabytes


def test_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="The expression must be a string, got int."):
        calculator(5)


def test_through_call_tool_errors_reach_the_model_as_error_messages():
    assert call_tool(calculator, {"expression": "2+3*4"}, 1.0, 500) == ToolOutcome(content="14", failed=False)
    assert call_tool(calculator, {"expression": "1/0"}, 1.0, 500) == ToolOutcome(
        content="{'error': 'ValueError: Division by zero.'}", failed=True)
    assert call_tool(calculator, {"expression": 12}, 1.0, 500).content == (
        "{'error': \"tool 'calculator': argument 'expression' must be a string, got int 12\"}")
    assert call_tool(calculator, {"expr": "1"}, 1.0, 500).content == (
        "{'error': \"tool 'calculator' has no argument 'expr' (its arguments: expression)\"}")


def test_the_chat_template_can_describe_it():
    schema = get_json_schema(calculator)
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["description"] == "Evaluate an arithmetic expression and return its value."
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"expression": {
            "type": "string",
            "description": 'The expression, written with numbers, + - * / // % ** and parentheses, e.g. "(2 + 3) * 4 '
                           '/ 7". No names, functions or other code.'}},
        "required": ["expression"],
    }
    assert schema["function"]["return"] == {
        "type": "string",
        "description": "The value: an integer in full, or a decimal number with 10 significant digits."}
