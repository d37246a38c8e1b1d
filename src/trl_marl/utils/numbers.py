"""Numeric answers: one grammar, one canonical form and one comparison rule for the whole package.

The data loaders (`trl_marl.data`) normalise gold answers with [`normalize_number`], and the answer verifier
(`trl_marl.rewards.answers`) reads numbers out of responses with [`NUMBER_PATTERN`] and [`canonical_number`] and
compares them with [`numbers_match`]. A reward is something a policy optimises against, so the rules are strict and
written down here.

**What is a number in text** ([`NUMBER_PATTERN`]):

- ASCII digits only (`0-9`). Other scripts' digits (Arabic-Indic, fullwidth) are not digits, and a number glued to
  one is not a number; nor is a number glued to a power (`10^2`, `10²`: neither 10 nor 2 is a number there).
- An optional sign (`-3`, `+3`), an optional currency sign (`$12`, `-$12`), an optional percent sign (`50%` is 50).
- An integer (`1450000`), optionally with digit groups of exactly three separated by `,` or `_` (`1,450,000`,
  `1_450_000`; not mixed, and `1,2` is a list: no number), a decimal (`2.50`, `.5`), a fraction of two integers
  (`3/4`), or a mixed number: an integer, one space and a proper fraction (`1 1/2` is 3/2; `1 3/2` is no number).
- Not glued to a word, another number, `.`, `,`, `/` or a closing bracket before it (the `3` of `x3` or `v2.3` is not
  a number), and not followed by a digit of any script or by `.`, `,` or `/` and a digit (`2.5.3`, `1,450,0001` and
  `1/2/3` hold no number). A `-` glued to a preceding digit or letter is a minus operator (`5-3`: the number `3`).
- No scientific notation: `1e6`, `1.45E+6` and `1450000e0` are not numbers (and hold none).
- At most [`MAX_DIGITS`] digits; a longer digit string matches the pattern but [`canonical_number`] rejects it, so a
  response cannot make the verifier build huge integers.
- Where it stands, a match must mean its number ([`find_numbers`]): not glued to a factorial, per-mille sign,
  combining mark or another numeral after it (`5!`, `5‰`, `5̸`, `5½` are not 5), and not after a relation, an
  approximation, a root, `±`, a second sign or an absolute-value bar (`≠5`, `≈5`, `~5`, `√25`, `±5`, `--5`, `|-5|`,
  `\\neq 5`, `\\sqrt{25}`), nor followed by a sign that has no operand (`5+` is "5 or more"). Before it (spaces
  between allowed), only what [`neutral_before`] allows may stand (default deny): letters, digits, brackets, quotes,
  currency signs, sentence punctuation, Markdown, binary operators and rightwards arrows; any other symbol (`<5`,
  `> 5`, `§5`, `¬5`, a look-alike nobody listed) makes it no number. Such a numeral is *stray*
  ([`has_stray_numerals`]): a text that holds one is not one plain number, and the answer verifier reads it as
  ambiguous rather than as a text without numbers.
- Text is read as a person sees it ([`normalize_text`], applied by the answer verifier before reading numbers):
  every Unicode space (category Zs) is a space, invisible characters (categories Cf, Cc) are removed, and every
  dash-like character ([`dash_like`], decided from the Unicode database: category Pd and the symbols whose names
  describe one horizontal stroke, such as U+2212, U+2043, U+23AF, U+2500, U+00AF; examples in [`MINUS_SIGNS`]) is a
  `-`, plus signs a `+`; a sign separated from its number by spaces belongs to it (`- 5` and `\u2212\u00a05` are
  -5) unless it follows an operand (`10 - 5`, `x - 5`) or is an ASCII list item (`- 5` starting a line).

**Canonical form** ([`canonical_number`], [`normalize_number`]): no sign for zero or positive values, no separators,
currency or percent signs; integers as digits (`1450000`); decimals without trailing zeros and with a leading zero
(`72.00` -> `72`, `.5` -> `0.5`, `2.50` -> `2.5`); fractions reduced, with the sign in front (`6/8` -> `3/4`,
`-1/-2` cannot occur, `4/2` -> `2`; a zero denominator is no number). Python values: `int` as is; `float` rounded to
`decimals` places (6 by default: a binary float such as `0.1 + 0.2` is `0.3`), NaN and infinities are no number;
`bool` is no number; `Fraction` and `Decimal` exactly.

**Comparison** ([`numbers_match`]): exact values, no tolerance. Texts are read into exact rationals (`Fraction`),
never into binary floats, so nothing in the reading introduces an error that a tolerance would have to absorb:
`1450001` is not `1450000`, `2.46` and `2.549` are not `2.5` (rounding at the gold's places accepted them), `0.333`
is not `1/3` nor `0.33`, while `3/4`, `0.75`, `6/8` and `1450000.0`, `2900000/2` are equal. The one rounding is of
gold answers given as Python floats (6 decimal places, above), which removes their binary noise; a prediction must
equal that decimal.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_DIGITS",
    "MINUS_SIGNS",
    "NUMBER_PATTERN",
    "bounded_int",
    "canonical_number",
    "decimal_places",
    "find_numbers",
    "has_stray_numerals",
    "is_canonical_number",
    "normalize_number",
    "normalize_signs",
    "normalize_text",
    "dash_like",
    "neutral_before",
    "number_value",
    "numbers_match",
]

MAX_DIGITS = 50
"""The most digits a number may have (all of them, numerator and denominator together for a fraction)."""

NUMBER_PATTERN = (
    r"(?<![\w./,)\]}^\u00b2\u00b3\u00b9\u2070-\u209f])"  # not after a word, ".", "/", ",", ")", "^", sup/subscripts
    r"[-+]?(?:\$[ \t]?)?"
    r"(?:[0-9]+[ \t][0-9]+/[0-9]+"  # a mixed number, 1 1/2
    r"|[0-9]+/[0-9]+"
    r"|(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,3}(?:_[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
    r"|\.[0-9]+)"
    r"(?!\d|[.,/_][0-9]|[eE][-+]?[0-9]|[\^\u00b2\u00b3\u00b9\u2070-\u209f])"  # no digit, 2.5.3, exponent, power
    r"(?:[ \t]?%)?"
)
"""A regular expression (a string) for one number in text; the rules are in the module docstring."""

MINUS_SIGNS = (
    "\u2212\u2796\u02d7\u2052"  # minus sign; heavy, modifier letter and commercial minus signs
    "\u2010\u2011\u2012\u2013\u2014\u2015"  # hyphen, non-breaking hyphen, figure dash, en dash, em dash, bar
    "\u2e3a\u2e3b\u2e5d\ufe31\ufe32\ufe58\ufe63\uff0d"  # two- and three-em, oblique, vertical, small, fullwidth
    "\u058a\u05be\u1806\U00010ead"  # Armenian hyphen, Hebrew maqaf, Mongolian todo hyphen, Yezidi hyphenation mark
    "\u2043\u23af\u2500\u2501\u00af\u02c9\u203e\uffe3\u30fc"  # hyphen bullet, line extension, box lines, macrons, ...
)
"""Examples of the characters [`normalize_text`] reads as `-`. The rule itself is categorical (see
[`dash_like`]): every dash of Unicode (category Pd) drawn as one stroke, and every symbol, punctuation mark or modifier
whose Unicode name says it is drawn as one horizontal stroke (minus signs, macrons, overlines, horizontal box-drawing
lines and line extensions, the hyphen bullet, ...)."""

# Symbols, punctuation and modifiers whose names describe one horizontal stroke: read as a minus sign.
_STROKE_NAME = re.compile(
    r"(?:(?:HEAVY|MODIFIER LETTER|COMMERCIAL|FULLWIDTH|SMALL) )?MINUS SIGN"
    r"|(?:(?:MODIFIER LETTER (?:LOW )?|FULLWIDTH )?MACRON)"
    r"|(?:(?:CENTRELINE|DASHED) )?OVERLINE|HYPHEN BULLET|OCR DASH"
    r"|(?:HALFWIDTH )?KATAKANA-HIRAGANA PROLONGED SOUND MARK"
    r"|HORIZONTAL LINE EXTENSION|HORIZONTAL SCAN LINE-\d|HORIZONTAL ONE EIGHTH BLOCK-\d+"
    r"|(?:UPPER|LOWER) ONE EIGHTH BLOCK"
    r"|BOX DRAWINGS (?:LIGHT|HEAVY)(?: (?:DOUBLE|TRIPLE|QUADRUPLE) DASH)? (?:HORIZONTAL|LEFT|RIGHT)"
    r"|BOX DRAWINGS (?:LIGHT LEFT AND HEAVY RIGHT|HEAVY LEFT AND LIGHT RIGHT)"
)
_PLUS_NAME = re.compile(r"(?:(?:HEAVY|MODIFIER LETTER|FULLWIDTH|SMALL) )?PLUS SIGN")
_TILDE_NAME = re.compile(r".*(?:TILDE|WAVE DASH|WAVY DASH|SWUNG DASH).*")
# Letters and symbols that are drawn blank (Hangul fillers, the blank Braille pattern): spaces.
_BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Spaces drawn as a horizontal stroke (OGHAM SPACE MARK, the one space character of Unicode with a visible glyph: the
# stem line of Ogham script): a space and a minus sign, so "\u16805" is -5, never 5.
_STROKE_SPACES = frozenset("\u1680")
# Dashes drawn with two strokes: two signs, so the number after them is no number.
_DOUBLE_DASHES = frozenset("\u1400\u2e17\u2e1a\u2e40\u30a0")


def dash_like(char: str) -> str | None:
    """What a sign-like character reads as: `"-"`, `"+"`, `"--"` (two strokes), `"~"` (a wave: "approximately"), or
    `None` for any other character.

    Decided from the Unicode database, not from a list of code points: category Pd (dash punctuation) is a minus sign
    (or `--`/`~` when its name says double or wave), and so is a symbol, punctuation mark or modifier (categories S*,
    P*, Lm) whose name describes one horizontal stroke (`MINUS SIGN`, `MACRON`, `OVERLINE`, `HYPHEN BULLET`,
    `BOX DRAWINGS LIGHT HORIZONTAL`, `HORIZONTAL LINE EXTENSION`, ...). Plus signs and tildes by name likewise.

    Args:
        char: One character.

    Returns:
        Its ASCII reading, or `None`.
    """
    category = unicodedata.category(char)
    if category not in ("Pd", "Lm") and category[0] not in "SP":
        return None
    name = unicodedata.name(char, "")
    if _TILDE_NAME.fullmatch(name) and "COMBINING" not in name:
        return "~"
    if char in _DOUBLE_DASHES or (category == "Pd" and ("DOUBLE" in name or "DIAERESIS" in name)):
        return "--"
    if category == "Pd" or _STROKE_NAME.fullmatch(name):
        return "-"
    if _PLUS_NAME.fullmatch(name):
        return "+"
    return None


def _fold(char: str) -> str | None:
    """The replacement of one character in [`normalize_text`] (`None`: removed)."""
    if char == "\t" or char in _BLANK_LOOKING:
        return " "
    if char in _STROKE_SPACES:
        return " -"  # a space drawn as a stroke: a person sees a dash (after a space)
    category = unicodedata.category(char)
    if category == "Zs":
        return " "  # every space: no-break, thin, narrow no-break, ideographic, ...
    if category in ("Zl", "Zp") or (category == "Cc" and char.isspace()):
        return "\n"  # line and paragraph separators, vertical tab, form feed, NEL, ...
    if category in ("Cf", "Cc"):
        return None  # invisible: zero-width spaces and joiners, direction marks, soft hyphen, controls, BOM, ...
    sign = dash_like(char)
    return char if sign is None or char in "-+~" else sign


class _FoldTable(dict):
    """A `str.translate` table that decides each character on first sight (by [`_fold`]) and remembers at most
    65,536 of them, so its size stays bounded whatever the texts hold."""

    def __missing__(self, code: int) -> str | None:
        result = _fold(chr(code))
        if len(self) < 65536:
            self[code] = result
        return result


_FOLD = _FoldTable({ord("\n"): "\n", ord(" "): " "})
# A Markdown list item: an ASCII "-", "+" or "*" and a space or tab that start a line. Found before any other sign is
# made ASCII, so that "\u2212\u00a05" (a minus and a no-break space) is -5, not a list item.
_BULLET = re.compile(r"^([ \t]*)[-+*][ \t]+", re.MULTILINE)
# A sign, spaces and a number: the sign belongs to the number ("- 5" is -5) unless it follows an operand (a digit, a
# closing bracket, "%", "!" or a one-letter variable: "10 - 5" and "x - 5" subtract).
_SPACED_SIGN = re.compile(r"(?P<operand>(?:[0-9)\]}%!]|\b[^\W\d_])[ \t]*)?(?P<sign>[-+])[ \t]+(?=\$?[0-9]|\.[0-9])")


def normalize_text(text: str) -> str:
    """What a person sees, in the characters the number grammar reads: the one normalisation of answer texts.

    - Unicode NFC; `\\r\\n` and `\\r` become `\\n`; every space character (category Zs: no-break, thin, narrow
      no-break, ideographic, ...) and the tab become a space; line and paragraph separators become `\\n`; invisible
      characters (categories Cf and Cc: zero-width spaces and joiners, direction marks, soft hyphens, controls) are
      removed.
    - A Markdown list item (an ASCII `-`, `+` or `*` and a space at the start of a line) gets the bullet `\u2022`,
      which is no sign.
    - Every dash-like character becomes `-`, plus-like `+`, double dashes `--`, waves and tildes `~` ([`dash_like`]).
    - A sign followed by spaces and a number is glued to it (`"The answer is - 5"` -> `"The answer is -5"`), unless
      it follows an operand (a digit, a closing bracket, `%`, `!` or a one-letter variable: `"10 - 5"` and `"x - 5"`
      stay subtractions, whose last number is 5).

    Args:
        text: The text.

    Returns:
        The normalised text.
    """
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = _BULLET.sub("\\1\u2022 ", text).translate(_FOLD)
    return _SPACED_SIGN.sub(lambda m: m.group(0) if m.group("operand") is not None else m.group("sign"), text)


def normalize_signs(text: str) -> str:
    """[`normalize_text`] (kept under its former name: it reads every sign as ASCII `-` or `+`).

    Args:
        text: The text.

    Returns:
        The normalised text.
    """
    return normalize_text(text)


# What makes the number after it something else: a relation or an approximation, a root, a "±", a power ("2^{60}"),
# two signs in a row
# ("--5"), their LaTeX commands, and an absolute-value bar glued to it. Checked on the few characters before a number
# (see `find_numbers`).
_LOOKBACK = 24
_OPERATOR_BEFORE = re.compile(
    r"(?:(?:[\u00b1\u2213\u2260\u2248\u2249~\u223c\u2243\u2245\u221a\u221b\u221c\u2264\u2265\u2266\u2267\u2272\u2273"
    r"\u226a\u226b^]"
    r"|[-+][ \t]*[-+]"
    r"|\\(?:pm|mp|neq?|approx|sim(?:eq)?|cong|sqrt(?:\[[^\]]*\])?|leq?|geq?|leqslant|geqslant|ll|gg|not)(?![a-zA-Z]))"
    r"[ \t{]*|\|[-+]?)$"
)
# Glued after a number, these make it something else: a factorial ("5!"), per mille and per ten thousand.
_AFTER_NUMBER = frozenset("!\u2030\u2031")
# Runs of word characters (with LaTeX exponents, "m^2", "m^{2}"): a run that starts with a letter is a word or a
# unit ("x3", "m²", "kg"); one that starts otherwise and holds a numeral is a numeral that is no number.
_WORD_RUN = re.compile(r"\w+(?:\^\{?\w+\}?)*")

_NUMBER = re.compile(NUMBER_PATTERN)
_FULL_NUMBER = re.compile(r"\s*(?:" + NUMBER_PATTERN + r")\s*")
_CANONICAL = re.compile(r"-?(?:[1-9][0-9]*/[1-9][0-9]*|(?:0|[1-9][0-9]*)(?:\.[0-9]*[1-9])?)")


# ASCII punctuation that may stand before a number (spaces between allowed): brackets, quotes, Markdown, sentence
# punctuation, binary operators ("3 + 4 = 7"), a spaced bar (a table cell; a bar glued to a number is an absolute
# value, see `_OPERATOR_BEFORE`) and "->"/"=>" arrows (see `neutral_before`). Not "<", ">", "^", "~": relations,
# powers and approximations.
_NEUTRAL_ASCII = frozenset("!\"#$%&'()*+,-./:;=?@[\\]_`{|}")
# A sign glued after a number and followed by no operand: "5+" is "5 or more".
_OPEN_SIGN_AFTER = re.compile(r"[-+](?![ \t]*(?:[0-9($\\a-zA-Z]|\.[0-9]))")


def neutral_before(char: str, previous: str) -> bool:
    """Whether a character that stands before a number (with at most spaces between) leaves it its value.

    Default deny: letters (but not modifier letters), digits, line breaks, the ASCII punctuation of
    `_NEUTRAL_ASCII`, currency signs, opening and closing brackets and quotes (categories Ps, Pe, Pi, Pf), punctuation
    whose compatibility form is such ASCII (fullwidth colon, ellipsis), CJK commas and full stops, bullets and
    rightwards arrows (`->`, `=>`, `→`) are neutral. Every other symbol, punctuation mark, modifier, combining mark or
    unassigned character (`<`, `>`, `≥`, `¬`, `§`, `№`, a dash look-alike [`dash_like`] does not know, ...) means
    something the number does not, so it is no number.

    Args:
        char: The character before the number (spaces skipped).
        previous: The character before it (`""` at the start of the text).

    Returns:
        Whether the number keeps its value.
    """
    if char in _NEUTRAL_ASCII or char == "\n" or (char.isalnum() and unicodedata.category(char) != "Lm"):
        return True  # letters and digits, but not modifier letters (a macron, a bar, a prime)
    if char == ">":
        return previous != "" and previous in "-="
    category = unicodedata.category(char)
    if category in ("Sc", "Ps", "Pe", "Pi", "Pf") or char in "\u3001\u3002":
        return True
    if category[0] not in "SP":
        return False
    name = unicodedata.name(char, "")
    if (category == "Po" and "BULLET" in name) or ("RIGHTWARDS" in name and "ARROW" in name):
        return True
    folded = unicodedata.normalize("NFKC", char)
    return folded != char and all(c in _NEUTRAL_ASCII or c == " " for c in folded)


def _is_number_here(text: str, match: re.Match[str]) -> bool:
    """Whether a match of [`NUMBER_PATTERN`] means its number where it stands (see [`find_numbers`])."""
    end = match.end()
    if end < len(text):
        after = text[end]
        if after in _AFTER_NUMBER or unicodedata.category(after)[0] in "MN":  # "5!", "5̸", "5½"
            return False
        if _OPEN_SIGN_AFTER.match(text, end):  # "5+", "5-"
            return False
    token = match.group(0)
    head = text[max(0, match.start() - _LOOKBACK) : match.start()] + token[: len(token) - len(token.lstrip("+-"))]
    if _OPERATOR_BEFORE.search(head) is not None:
        return False
    before = head[: len(head) - len(token) + len(token.lstrip("+-"))] if token[:1] in "+-" else head
    stripped = before.rstrip(" \t")
    return not stripped or neutral_before(stripped[-1], stripped[-2:-1])


def find_numbers(text: str) -> list[re.Match[str]]:
    """The numbers of a text, in order (see [`NUMBER_PATTERN`]), without those that mean something else there.

    A match of the pattern is dropped when it is glued to a factorial or per-mille sign, a combining mark or another
    numeral (`5!`, `5‰`, `5̸`, `5½` are not 5), or follows a relation, an approximation, a root, a `±` or a second
    sign (`≠5`, `≈ 5`, `~5`, `√25`, `±5`, `--5`, `\\pm 5`, `\\sqrt{25}`, `\\neq 5`). Use [`has_stray_numerals`] to
    tell such a text from one without numbers. Signs are read as they are: apply [`normalize_signs`] first to read
    Unicode dashes and spaced signs.

    Args:
        text: The text.

    Returns:
        The regular-expression matches; `canonical_number(match.group(0))` is each one's canonical form (or `None`
        for a number that is too long or has a zero denominator).
    """
    return [match for match in _NUMBER.finditer(text) if _is_number_here(text, match)]


def has_stray_numerals(text: str, numbers: list[re.Match[str]] | None = None) -> bool:
    """Whether a text holds a numeral that is not part of one of its numbers.

    A numeral is any character Unicode calls numeric: ASCII digits, other scripts' and fullwidth digits,
    superscripts, vulgar fractions, Roman numerals. Numerals inside a word that starts with a letter (`x3`, `m²`,
    `cm^2`, `mp3`) are part of that word. All others outside `numbers` are stray: `5e0`, `5½`, `５`, `٥`, `≠5`,
    `5!` and `10^2` hold stray numerals, `5 kg` and `x = 5` do not. An answer with a stray numeral is not one plain
    number, and the answer verifier reads it as ambiguous (no answer) rather than looking elsewhere for one.

    Args:
        text: The text.
        numbers: Its numbers (default: `find_numbers(text)`).

    Returns:
        `True` when some numeral of the text lies outside `numbers` and outside words.
    """
    if numbers is None:
        numbers = find_numbers(text)
    start = 0
    for end, next_start in [*((m.start(), m.end()) for m in numbers), (len(text), len(text))]:
        for run in _WORD_RUN.finditer(text, start, end):
            word = run.group(0)
            if not word[0].isalpha() and any(char.isnumeric() for char in word):
                return True
        start = next_start
    return False


def _format_fraction(value: Fraction) -> str:
    """`Fraction(-3, 4)` -> `"-3/4"`, `Fraction(2, 1)` -> `"2"`."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{value.numerator}/{value.denominator}"


def _format_decimal(value: Decimal) -> str:
    """A finite `Decimal` in canonical form (`Decimal("-0.50")` -> `"-0.5"`, `Decimal("0")` -> `"0"`)."""
    if value == 0:
        return "0"
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def canonical_number(token: str) -> str | None:
    """The canonical form of one number written in text.

    Args:
        token: Text that [`NUMBER_PATTERN`] matched in full (a sign, `$`, separators, `%` and surrounding spaces
            allowed), e.g. `"-$1,234.50"`, `"3/4"`, `"50%"`.

    Returns:
        The canonical string (`"-1234.5"`, `"3/4"`, `"50"`), or `None` if `token` is not one number of the grammar,
        has more than [`MAX_DIGITS`] digits, or is a fraction with a zero denominator.
    """
    if not isinstance(token, str) or _FULL_NUMBER.fullmatch(token) is None:
        return None
    text = token.strip()
    if sum(char.isdigit() for char in text) > MAX_DIGITS:
        return None
    text = re.sub(r"[$%,_]|[ \t]+(?=%)", "", text)
    negative = text.startswith("-")
    text = " ".join(text.lstrip("+-").split())  # what space is left separates a mixed number's parts
    if "/" in text:
        whole, _, fraction = text.rpartition(" ")
        numerator, denominator = (int(part) for part in fraction.split("/"))
        if denominator == 0 or (whole and numerator >= denominator):
            return None  # a zero denominator; a mixed number must have a proper fraction (1 1/2, not 1 3/2)
        value = Fraction(numerator, denominator) + int(whole.strip() or 0)
        return _format_fraction(-value if negative else value)
    try:
        number = Decimal(text)
    except InvalidOperation:  # pragma: no cover - the pattern only lets digits and one point through
        return None
    return _format_decimal(-number if negative else number)


def is_canonical_number(text: str) -> bool:
    """Whether a string is a number in canonical form (`"12"`, `"-0.5"`, `"3/4"`; not `"12.0"`, `"1,000"`, nor a
    number of more than [`MAX_DIGITS`] digits)."""
    if not isinstance(text, str) or len(text) > MAX_DIGITS + 2 or sum(char.isdigit() for char in text) > MAX_DIGITS:
        return False
    return _CANONICAL.fullmatch(text) is not None and ("/" not in text or Fraction(text).denominator != 1)


def normalize_number(value: Any, decimals: int | None = 6) -> str | None:
    """The canonical form of a number given as a Python value or as text.

    This is the one normaliser of gold answers: `trl_marl.data`'s loaders and `trl_marl.rewards.answers.parse_gold`
    both use it.

    Args:
        value (`int`, `float`, `Fraction`, `Decimal` or `str`): The number. A string must be exactly one number of
            the grammar (`" $1,234 "`, `"2.50"`, `"3/4"`, `"50%"`); anything else in it (`"5 apples"`, `"1e3"`)
            makes it no number.
        decimals (`int`, *optional*): Decimal places a `float` is rounded to (half to even on its exact binary
            value, as Python's `round`); `None` keeps its shortest representation (`repr`).

    Returns:
        `str` or `None`: The canonical number (`"72"`, `"-3"`, `"2.5"`, `"3/4"`), or `None` if `value` is not a
        finite number within [`MAX_DIGITS`] digits (booleans, `None`, NaN, infinities and other types included).
    """
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return canonical_number(value)
    if isinstance(value, Fraction):
        if value.numerator.bit_length() + value.denominator.bit_length() > 8 * MAX_DIGITS:
            return None  # far too long (checked before `str`, which refuses very long integers)
        text = _format_fraction(value)
        return text if sum(char.isdigit() for char in text) <= MAX_DIGITS else None
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 10.0**MAX_DIGITS:
            return None
        if decimals is None:
            number = Decimal(repr(value))
        else:
            number = Decimal(value).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_EVEN)
        return _format_decimal(number)
    if isinstance(value, Decimal):
        if not value.is_finite() or (value != 0 and value.adjusted() >= MAX_DIGITS):
            return None
        text = _format_decimal(value)
        return text if sum(char.isdigit() for char in text) <= MAX_DIGITS else None
    try:
        integer = operator.index(value)  # int and integer-like types (numpy integers)
    except TypeError:
        return None
    if integer.bit_length() > 4 * MAX_DIGITS:
        return None  # far too long (checked before `str`, which refuses very long integers)
    text = str(integer)
    return text if len(text.lstrip("-")) <= MAX_DIGITS else None


def bounded_int(digits: str) -> int | None:
    """The integer of a string of decimal digits with an optional sign, or `None` when it has more than
    [`MAX_DIGITS`] digits (or is no such string). Digits are those `int()` and the regular expression `\\d` read
    (Unicode decimal digits, ASCII among them); this helper bounds their number and changes nothing else.

    The one way the rewards turn the digits a model wrote into an `int`: Python's `int()` refuses strings of more
    than 4,300 digits with a `ValueError` (`sys.get_int_max_str_digits`) and takes time quadratic in the length below
    that, so a longer number in a completion must be a non-answer, never an exception out of a reward.

    Example:

    ```python
    >>> bounded_int("-42"), bounded_int("7" * 5000), bounded_int("4x")
    (-42, None, None)
    ```
    """
    if not isinstance(digits, str):
        return None
    body = digits[1:] if digits[:1] in ("-", "+") else digits
    if not body or len(body) > MAX_DIGITS or not body.isdecimal():
        return None
    return int(digits)


def number_value(text: str | None) -> Fraction | None:
    """The exact value of a number written in text (canonical or not).

    Args:
        text: One number of the grammar (`"3/4"`, `"-1,234.5"`), or anything else.

    Returns:
        Its value as a `Fraction` (`"0.75"` -> `Fraction(3, 4)`), or `None` when `text` is not one number.
    """
    if text is None:
        return None
    canonical = text if is_canonical_number(text) else canonical_number(text)
    return None if canonical is None else Fraction(canonical)


def decimal_places(canonical: str) -> int | None:
    """The precision a canonical number states: 0 for an integer, d for a decimal with d places, `None` for a fraction.

    Args:
        canonical: A number in canonical form.

    Returns:
        The number of decimal places, or `None` for a fraction (whose value is exact).
    """
    if "/" in canonical:
        return None
    return len(canonical.partition(".")[2])


def numbers_match(prediction: str, gold: str) -> bool:
    """Whether a predicted number equals a gold number: their exact values are equal (no tolerance, no rounding).

    Both are read as exact rationals (`Fraction`), never as binary floats, so equality needs no tolerance: `2.5`,
    `2.50`, `5/2` and `2 1/2` are equal, `2.46` and `2.549` are not `2.5`, `0.333333` is not `1/3`. The one rounding
    of the package is of gold answers given as Python floats, to 6 decimal places by [`normalize_number`] (a float's
    binary noise sits near its 16th significant digit); a prediction must equal that decimal.

    Args:
        prediction: The predicted number (canonical form, or any single number of the grammar).
        gold: The gold number (canonical form, or any single number of the grammar).

    Returns:
        `True` when both are numbers with equal values; `False` otherwise.
    """
    gold_value = number_value(gold)
    predicted = number_value(prediction)
    return gold_value is not None and predicted is not None and predicted == gold_value
