"""Issue 54, item 7: the math verifier accepted 21 wrong answers and rejected 11 right ones of a red team's round 5.

Every shape the issue names is a row below, with variants of its class: `expected` is what the verifier reads (`None`:
no answer, which scores 0), and each row is scored against its gold. The classes: a hedge or a negation before a
number is no answer; a retraction after an answer withdraws it; every Unicode space is read as a person sees it; every
LaTeX command that draws a box is a final-answer statement of its own; number words include "dozen", "nought" and
hyphenated compounds; simple exact LaTeX values (a fraction with a signed denominator, a repeating decimal, a root of a
perfect power, an integer power) are their values.
"""

from __future__ import annotations

import sys
import unicodedata

import pytest

from trl_marl.rewards.answer_text import BOX_COMMANDS
from trl_marl.rewards.answers import extract_math_answer
from trl_marl.rewards.verifier import AnswerVerifier

# (response, what the verifier reads, gold): accepted though wrong before the fix
WRONG_ACCEPTS = [
    ("The answer is approx. 5.", None, "5"),
    ("It is approx. 5", None, "5"),
    ("The answer is ca. 5.", None, "5"),
    (r"Approx. \boxed{5}", None, "5"),
    ("The answer is hardly 5.", None, "5"),
    ("It is barely 5.", None, "5"),
    ("The answer is anything but 5.", None, "5"),
    ("The answer is upwards of 5.", None, "5"),
    ("It is in excess of 5.", None, "5"),
    ("The answer might be 5.", None, "5"),
    (r"The answer could be \boxed{5}.", None, "5"),
    ("5 is impossible.", None, "5"),
    (r"\boxed{5} is impossible.", None, "5"),
    ("It lies between 4 and 5.", None, "5"),
    (r"It is between four and \boxed{5}.", None, "5"),
    ("The answer is negative 5.", "-5", "5"),
    ("The answer is minus 5.", "-5", "5"),
    ("#### negative 5", "-5", "5"),
    (r"\boxed{minus 5}", "-5", "5"),
    ("so it is negative 5", "-5", "5"),
    ("The answer is 5. Just kidding.", None, "5"),
    ("The answer is 5. Never mind.", None, "5"),
    ("The answer is 5. Whoops.", None, "5"),
    ("\\boxed{5}\n\nBut that's not right.", None, "5"),
    ("\\boxed{5}\n\nBut that\u2019s not right.", None, "5"),  # a typographic apostrophe
    ("\\boxed{5}\n\nHmm, that doesn't look right.", None, "5"),
    ("The answer is 5.\n\nI take that back.", None, "5"),
    ("The answer is 5.\n\nIgnore that.", None, "5"),
    ("The answer is 5.\n\nNever mind, it is 6.", "6", "5"),
    ("The answer is 5 dozen.", "60", "5"),
    ("It is 5 dozen.", "60", "5"),
    (r"\boxed{5 \text{ dozen}}", "60", "5"),
    ("\u16805", "-5", "5"),  # OGHAM SPACE MARK: a space drawn as a stroke
    ("The answer is \u16805", "-5", "5"),
    ("\\boxed{\u16805}", "-5", "5"),
    (r"\framebox{6} \boxed{5}", None, "5"),
    (r"\colorbox{yellow}{6} \boxed{5}", None, "5"),
    (r"\fcolorbox{red}{white}{6} \boxed{5}", None, "5"),
    (r"\framebox[2cm][c]{6} \boxed{5}", None, "5"),
    (r"\bbox[border:1px solid]{6} \boxed{5}", None, "5"),
    (r"\boxed{5} and \ovalbox{6}", None, "5"),
    ("The answer isn\u2019t 5.", None, "5"),
    ("The answer is negative $5.", "-5", "5"),
    ("The answer is ca 5", None, "5"),
    ("It is between four and five.", None, "5"),
    ("\\boxed{5} whoops \\boxed{6}", "6", "5"),
]

# (response, what the verifier reads, gold): rejected though right before the fix
WRONG_REJECTS = [
    ("The answer is a dozen.", "12", "12"),
    (r"\boxed{a dozen}", "12", "12"),
    ("The answer is half a dozen.", "6", "6"),
    ("It is half a dozen.", "6", "6"),
    ("The answer is a half dozen.", "6", "6"),
    ("The answer is five dozen.", "60", "60"),
    ("The answer is nought.", "0", "0"),
    (r"\boxed{naught}", "0", "0"),
    ("The answer is five-hundred-and-one.", "501", "501"),
    ("#### two-thousand-and-twenty", "2020", "2020"),
    ("The answer is a hundred.", "100", "100"),
    (r"\boxed{\frac{3}{-4}}", "-3/4", "-0.75"),
    (r"\boxed{\dfrac{-3}{-4}}", "3/4", "0.75"),
    (r"\boxed{0.\overline{3}}", "1/3", "1/3"),
    (r"\boxed{0.1\overline{6}}", "1/6", "1/6"),
    (r"\boxed{.\overline{142857}}", "1/7", "1/7"),
    (r"\boxed{\sqrt{25}}", "5", "5"),
    (r"\boxed{\sqrt[3]{27}}", "3", "3"),
    (r"\boxed{\sqrt{\frac{1}{4}}}", "1/2", "0.5"),
    (r"\boxed{2^3}", "8", "8"),
    (r"\boxed{2^{10}}", "1024", "1024"),
    (r"The answer is $2^{-1}$.", "1/2", "0.5"),
    ("The answer is two dozen.", "24", "24"),
    (r"\boxed{1.5 dozen}", "18", "18"),
    ("The answer is a thousand.", "1000", "1000"),
    ("The answer is half a million.", "500000", "500000"),
]

# Readings that the fix must not change: plain statements beside the new words, and values that are not exact.
KEPT = [
    ("The answer is $5 a dozen.", "5"),  # a price per dozen
    ("so 10 minus 5", "5"),  # "minus" after an operand subtracts
    (r"The smallest possible value is \boxed{5}.", "5"),
    (r"So she could buy \boxed{5} apples.", "5"),
    (r"The answer should be \boxed{5}.", "5"),
    (r"The difference between the two is \boxed{5}.", "5"),
    (r"The value between a and b is \boxed{5}.", "5"),  # "between" before no number
    ("Wait, let me check. The answer is 5.", "5"),
    (r"\boxed{\sqrt{2}}", r"\sqrt{2}"),  # no rational value: a text, which matches no number
    (r"\boxed{2^{200}}", "2^{200}"),  # more than MAX_DIGITS digits: a text, which matches no number
    ("The answer is 2^31", None),  # LaTeX's 2³1
    (r"\colorbox{yellow}{5}", "5"),  # a box of its own
    ("\\boxed{5}\n\n\\colorbox{yellow}{6}", None),  # a second box (refused before as an unknown command)
]


@pytest.mark.parametrize(("response", "expected", "gold"), WRONG_ACCEPTS)
def test_round5_wrong_accepts_score_zero(response, expected, gold):
    assert extract_math_answer(response) == expected
    assert AnswerVerifier().score(response, gold) == 0.0


@pytest.mark.parametrize(("response", "expected", "gold"), WRONG_REJECTS)
def test_round5_wrong_rejects_score_one(response, expected, gold):
    assert extract_math_answer(response) == expected
    assert AnswerVerifier().score(response, gold) == 1.0


@pytest.mark.parametrize(("response", "expected"), KEPT)
def test_readings_the_fix_keeps(response, expected):
    assert extract_math_answer(response) == expected


HEDGES = [
    "approx.",
    "approximately",
    "ca.",
    "est.",
    "hardly",
    "barely",
    "scarcely",
    "anything but",
    "all but",
    "far from",
    "upwards of",
    "upward of",
    "in excess of",
    "north of",
    "shy of",
    "give or take",
    "might be",
    "may be",
    "could be",
    "presumably",
    "supposedly",
    "between 4 and",
]


@pytest.mark.parametrize("hedge", HEDGES)
def test_a_hedge_before_a_number_is_no_answer(hedge):
    for response in (f"The answer is {hedge} 5.", f"It is {hedge} 5", f"The answer is {hedge} \\boxed{{5}}."):
        assert extract_math_answer(response) is None, response
    assert extract_math_answer(f"5 is {'impossible' if hedge == 'hardly' else 'doubtful'}.") is None


RETRACTIONS = [
    "Just kidding.",
    "Just joking.",
    "Kidding.",
    "Never mind.",
    "Nevermind.",
    "Whoops.",
    "Uh-oh.",
    "But that's not right.",
    "But that\u2019s not right.",
    "That isn't right.",
    "That can't be right.",
    "Hmm, that doesn't seem right.",
    "I take that back.",
    "Strike that.",
    "Ignore that.",
    "Disregard the above.",
    "Forget what I said.",
    "Oh, never mind.",
]


@pytest.mark.parametrize("retraction", RETRACTIONS)
def test_a_retraction_after_an_answer_withdraws_it(retraction):
    for answer in ("The answer is 5.", r"\boxed{5}", "#### 5", "So it is 5."):
        assert extract_math_answer(f"{answer} {retraction}") is None, answer
        assert extract_math_answer(f"{answer}\n\n{retraction}") is None, answer
    assert extract_math_answer(f"The answer is 5.\n\n{retraction} The answer is 6.") == "6"


def test_every_unicode_space_reads_as_a_person_sees_it():
    spaces = [
        chr(code)
        for code in range(sys.maxunicode + 1)
        if chr(code).isspace() or unicodedata.category(chr(code)) in ("Zs", "Zl", "Zp")
    ]
    assert "\u1680" in spaces and len(spaces) > 25
    for space in spaces:
        stroke = space == "\u1680"  # OGHAM SPACE MARK, the one space drawn as a horizontal stroke
        assert extract_math_answer(f"The answer is{space}5.") == ("-5" if stroke else "5"), hex(ord(space))
        assert extract_math_answer(f"{space}5") == ("-5" if stroke else "5"), hex(ord(space))
        assert extract_math_answer(f"\\boxed{{{space}5}}") == ("-5" if stroke else "5"), hex(ord(space))


@pytest.mark.parametrize("command", sorted(BOX_COMMANDS))
def test_every_box_command_is_a_competing_statement(command):
    arguments = {"colorbox": "{yellow}", "fcolorbox": "{red}{white}"}.get(command, "")
    box = f"\\{command}{arguments}"
    assert extract_math_answer(f"{box}{{5}}") == "5"
    assert extract_math_answer(f"{box}{{6}} \\boxed{{5}}") is None
    assert extract_math_answer(f"\\boxed{{5}}\n\n{box}{{6}}") is None
    assert extract_math_answer(f"{box}{{5}} \\boxed{{5}}") == "5"  # the same value twice is one answer


def test_extraction_stays_linear_on_the_new_shapes():
    import time

    for unit in ("\\framebox[" * 3, "\\colorbox{" * 3, "approx. ", "0.\\overline{", "2^{", "\\sqrt[", "half a "):
        start = time.perf_counter()
        extract_math_answer(unit * 5000 + " 5")
        assert time.perf_counter() - start < 5, unit
