"""CodeBLEU on code a policy writes to be slow or unparsable (issue 54, item 5).

Before the fix, `codebleu`'s syntax match took time growing with length x syntax depth: `"x = a+a+..."` took 2.4 s at
2 KB and 235 s at 20 KB and crashed the interpreter at 50 KB; a lone surrogate raised `UnicodeEncodeError`.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("codebleu")

from tree_sitter import Parser  # noqa: E402

from trl_marl.rewards.codebleu import (  # noqa: E402
    DEFAULT_MAX_CODE_CHARS,
    DEFAULT_MAX_SYNTAX_DEPTH,
    CodeBLEUReward,
    syntax_depth,
)

REFERENCE = "def add(a, b):\n    return a + b\n"
DEEP = {  # under the default length cap; each operator or call is one more level of the syntax tree
    "sum": "x = " + "+".join(["a"] * 3_900),
    "minus": "x = " + "-" * 7_900 + "a",
    "calls": "x = " + "f(" * 2_600 + ")" * 2_600,
}
HUGE = {  # past the cap: cut, then scored or refused as too deep
    "sum": "x = " + "+".join(["a"] * 25_000),
    "minus": "x = " + "-" * 50_000 + "a",
    "calls": "x = " + "f(" * 20_000 + ")" * 20_000,
}


def parser() -> Parser:
    from codebleu.utils import get_tree_sitter_language

    return Parser(get_tree_sitter_language("python"))


@pytest.mark.parametrize("name", sorted(DEEP))
def test_deep_code_scores_zero_quickly(name: str) -> None:
    reward = CodeBLEUReward()
    start = time.perf_counter()
    assert reward([""], [DEEP[name]], reference=[REFERENCE]) == [0.0]
    assert time.perf_counter() - start < 5.0  # 8 KB of "x = a+a+..." took about 10 s before the fix


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_code_is_scored_quickly(name: str) -> None:
    start = time.perf_counter()
    [score] = CodeBLEUReward()([""], [HUGE[name]], reference=[REFERENCE])
    assert 0.0 <= score <= 1.0
    assert time.perf_counter() - start < 5.0  # minutes, or a crash of the interpreter, before the fix


def test_long_code_is_cut_to_max_chars() -> None:
    reward = CodeBLEUReward(max_chars=40)
    head = "def add(a, b):\n    return a + b\n"
    long = head + "\n".join(f"y{i} = {i}" for i in range(5000))
    assert reward.score(long, REFERENCE) == pytest.approx(reward.score(long[:40], REFERENCE))
    assert reward.score(long, REFERENCE) > CodeBLEUReward().score(long, REFERENCE)


def test_long_flat_code_is_scored_within_a_few_seconds() -> None:
    code = "a = b\n" * 20_000  # 120 KB, shallow: cut to the default cap, then scored
    start = time.perf_counter()
    score = CodeBLEUReward().score(code, REFERENCE)
    assert 0.0 <= score <= 1.0 and time.perf_counter() - start < 5.0


def test_a_candidate_just_within_the_depth_is_scored() -> None:
    reward = CodeBLEUReward(max_syntax_depth=30)
    shallow = "x = " + "+".join(["a"] * 5)
    deep = "x = " + "+".join(["a"] * 40)
    assert syntax_depth(parser(), shallow) <= 30 < syntax_depth(parser(), deep)
    assert reward.score(shallow, "x = a + a") > 0.0
    assert reward.score(deep, "x = a + a") == 0.0
    assert CodeBLEUReward(max_syntax_depth=None).score(deep, "x = a + a") > 0.0


def test_real_code_is_far_below_the_default_depth() -> None:
    nested = ("def f(x):\n" + "".join("    " * (i + 1) + f"for a{i} in range(x):\n" for i in range(6))
              + "    " * 7 + "y = [g(h(a0 + a1 * (a2 - a3)), {'k': (a4, a5)}) for z in x if z]\n")
    assert syntax_depth(parser(), nested) < DEFAULT_MAX_SYNTAX_DEPTH // 2
    assert len(nested) < DEFAULT_MAX_CODE_CHARS


def test_syntax_depth_stops_early_and_has_no_recursion_limit() -> None:
    code = "x = " + "-" * 50_000 + "a"
    assert syntax_depth(parser(), code) > 50_000  # walked without recursion
    assert syntax_depth(parser(), code, stop_after=10) == 11


@pytest.mark.parametrize("code", ["x = 'caf\udce9'\n", "x = '\ud800'", "x = 1\x00\ny = 2\n", "\x1b[2J\x07x = 1"])
def test_unencodable_and_control_characters_score_without_raising(code: str) -> None:
    [score] = CodeBLEUReward()([""], [code], reference=["x = 'caf\udce9'\n"])
    assert 0.0 <= score <= 1.0


@pytest.mark.parametrize(("field", "value"), [("max_chars", 0), ("max_syntax_depth", -1), ("max_chars", True),
                                               ("max_chars", 2.5)])
def test_limits_must_be_positive_ints(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        CodeBLEUReward(**{field: value})
