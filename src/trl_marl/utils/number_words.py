"""Numbers written in English words, read into digits for the number grammar of `trl_marl.utils.numbers`.

[`words_to_digits`] rewrites every cardinal number phrase of a text into digits: `"five"` -> `5`, `"twenty-one"` and
`"twenty one"` -> `21`, `"one hundred and five"` -> `105`, `"two million three hundred thousand"` -> `2300000`,
`"minus five"` / `"negative five"` -> `-5`. A phrase is read by the grammar of English cardinals (tens before
units, at most one `hundred` per group, scales in decreasing order); where the grammar ends, a new number starts
(`"five five"` is two numbers, 5 and 5, and so is `"five twenty"`).

Phrases that are no cardinal are never read as one: a number followed by a fraction or ordinal word (`"two
thirds"`, `"one-half"`, `"five and a half"`, `"twenty-fifth"`), by `"point"` (`"two point five"`), or glued by a
hyphen to another word (`"five-year-old"`) becomes the stray numeral [`STRAY`] glued to its digits (`2` +
`STRAY`), which `trl_marl.utils.numbers.find_numbers` does not read and `has_stray_numerals` reports: the answer is
ambiguous, not 2.
So is a number in digits followed by a fraction word (`"5 and a half"`, `"5 thirds"`). A digit number followed by a
scale word is multiplied out (`"5 million"` -> `5000000`, `"1.5 thousand"` -> `1500`). A lone `"one"` after a
determiner (`"the one"`, `"each one"`, `"no one"`) or before `'s` is a pronoun, not a number.

Only the answer verifier uses this, and only where an answer stands (a box, the span of an answer marker, a text
without any number in digits): reasoning text is full of pronoun `one`s.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["STRAY", "scale_digits", "sign_words", "words_to_digits"]

STRAY = "\u2189"
"""A numeral that is no number (VULGAR FRACTION ZERO THIRDS): glued to the digits of a phrase that is no cardinal."""

_UNITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_TEENS = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = {"hundred": 100, "thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_DOZEN = 12  # "five dozen" is 60, "a dozen" 12, "half a dozen" 6: multiplies the number before it, and ends it
_VALUES: dict[str, int] = {
    **{word: value for value, word in enumerate(_UNITS)},
    "nought": 0,
    "naught": 0,
    "dozen": _DOZEN,
    **{word: 10 + value for value, word in enumerate(_TEENS)},
    **{word: 20 + 10 * value for value, word in enumerate(_TENS)},
    **_SCALES,
}
_ORDINALS = (
    "half halves quarter quarters third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth twentieth thirtieth fortieth fiftieth sixtieth "
    "seventieth eightieth ninetieth hundredth thousandth millionth billionth"
).split()
_WORD = "|".join(sorted(_VALUES, key=len, reverse=True))
_GAP = r"(?:[ \t]+and[ \t]+|-and-|[ \t]+|-)"  # "five hundred and one", "five-hundred-and-one"
_PHRASE = re.compile(
    rf"(?<![\w-])(?P<sign>(?:minus|negative)[ \t]+)?(?P<words>(?:{_WORD})(?:{_GAP}(?:{_WORD}))*)(?![\w])",
    re.IGNORECASE,
)
_TOKEN = re.compile(rf"{_GAP}|(?:{_WORD})", re.IGNORECASE)
# What makes the number before it no cardinal: a fraction or ordinal word ("two thirds", "five and a half",
# "twenty-fifth", "5 halves"), "point" ("two point five"), or a hyphen glued to another word ("five-year-old").
_ORDINAL = "|".join(sorted(_ORDINALS, key=len, reverse=True))
_NO_CARDINAL_AFTER = re.compile(
    rf"(?:[ \t]+|-)(?:and[ \t]+(?:a|an|one)[ \t-]+)?(?:{_ORDINAL})s?\b|[ \t]+point\b|-[^\W\d_]",
    re.IGNORECASE,
)
_DETERMINER = re.compile(
    r"\b(?:the|a|an|this|that|each|every|which|no|any|some|another|only|other|same|last|next|right|wrong|correct"
    r"|such|little|big)[ \t]+$",
    re.IGNORECASE,
)
_MULTIPLIERS = {**_SCALES, "dozen": _DOZEN}
_DIGITS_SCALE = re.compile(
    r"(?<![\w.,/])(?P<number>(?:[0-9]{1,3}(?:[,_][0-9]{3})+|[0-9]+)(?:\.[0-9]+)?)"
    r"(?P<scale>(?:[ \t-]+(?:" + "|".join(_MULTIPLIERS) + r")\b)+)?"
    rf"(?P<stray>(?:[ \t]+|-)(?:and[ \t]+(?:a|an|one)[ \t-]+)?(?:{_ORDINAL})s?\b)?",
    re.IGNORECASE,
)


def _parse(tokens: list[str]) -> list[tuple[int, int, int]]:
    """The numbers of a run of number words (without the gaps and `"and"`s), by the grammar of cardinals, each as
    `(value, index of its first token, index of its last token)`."""
    numbers: list[tuple[int, int, int]] = []
    total = group = 0  # the value of the scales done, and of the group below the last scale (0..999)
    last_scale = 10**15
    previous = ""  # the kind of the previous token: "", "unit", "teen", "tens", "hundred", "scale"
    first = 0
    for index, token in enumerate(tokens):
        value = _VALUES[token]
        if token == "dozen":  # multiplies the number before it and ends it; alone, no number
            if previous:
                numbers.append(((total + group) * _DOZEN, first, index))
            total = group = 0
            last_scale = 10**15
            previous = ""
            continue
        if token in _SCALES:
            kind = "hundred" if token == "hundred" else "scale"
        else:
            kind = "unit" if value < 10 else "teen" if value < 20 else "tens"
        if kind == "unit" and value == 0:
            fits = False  # zero is a number of its own
        elif kind == "unit":
            fits = previous in ("hundred", "scale") or (previous == "tens" and group % 10 == 0)
        elif kind in ("teen", "tens"):
            fits = previous in ("hundred", "scale")
        elif kind == "hundred":
            fits = previous in ("unit", "teen", "tens") and 0 < group < 100
        else:
            fits = previous in ("unit", "teen", "tens", "hundred") and value < last_scale and group > 0
        if previous and not fits:
            numbers.append((total + group, first, index - 1))
            total = group = 0
            last_scale = 10**15
            previous = ""
        if not previous:
            first = index
            if kind in ("hundred", "scale"):  # a scale word alone is no number
                continue
        if kind == "hundred":
            group *= 100
        elif kind == "scale":
            total += group * value
            group = 0
            last_scale = value
        else:
            group += value
        previous = "" if value == 0 and kind == "unit" else kind
        if not previous:
            numbers.append((0, index, index))
    if previous:
        numbers.append((total + group, first, len(tokens) - 1))
    return numbers


def _phrase(match: re.Match[str]) -> str:
    text = match.string
    spans = [
        token.span()
        for token in _TOKEN.finditer(text, match.start("words"), match.end("words"))
        if token.group(0).strip(" \t-").lower() not in ("", "and")
    ]
    words = [text[start:end].lower() for start, end in spans]
    numbers = _parse(words)
    if not numbers:
        return match.group(0)
    if (
        len(words) == 1
        and words[0] == "one"
        and match.group("sign") is None
        and (_DETERMINER.search(text, max(0, match.start() - 12), match.start()) or text.startswith("'", match.end()))
    ):
        return match.group(0)  # "the one", "each one", "one's": a pronoun
    out = ["-" if match.group("sign") else ""]
    position = spans[numbers[0][1]][0]
    out.append(text[match.start("words") : position])  # a scale word alone before the first number stays
    for value, first, last in numbers:
        out.append(text[position : spans[first][0]])  # what stands between two numbers ("five, and six")
        out.append(str(value))
        position = spans[last][1]
    out.append(text[position : match.end()])
    if _NO_CARDINAL_AFTER.match(text, match.end()) or (match.start() and text[match.start() - 1] == "-"):
        out.append(STRAY)
    return "".join(out)


def _scaled(match: re.Match[str]) -> str:
    if match.group("stray"):
        return match.group("number") + STRAY + match.group("stray")
    if not match.group("scale"):
        return match.group(0)
    value = Fraction(re.sub("[,_]", "", match.group("number")))
    for scale in re.findall(r"[a-z]+", match.group("scale").lower()):
        value *= _MULTIPLIERS[scale]
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


# "a hundred", "a dozen", "an eighth"...: the article before a scale word or "dozen" is "one" ("$5 a dozen" is a price:
# no article after a number). "half a dozen", "a half dozen" and "half a million" are halves of their scale.
_SCALE_WORD = "(?:" + "|".join(_MULTIPLIERS) + r")\b"
_ARTICLE = re.compile(rf"(?<![\w-])(?<![0-9%][ \t])(?:a|an)[ \t]+(?={_SCALE_WORD})", re.IGNORECASE)
_HALF = re.compile(
    rf"(?<![\w-])(?<!\band[ \t])(?:(?:a[ \t]+)?half[ \t-]+(?=dozen\b)|half[ \t]+an?[ \t]+(?={_SCALE_WORD}))"
    rf"(?P<scale>{_SCALE_WORD})",
    re.IGNORECASE,
)
# "minus 5" and "negative 5" are -5, unless the word follows an operand ("10 minus 5", "x minus 5" subtract).
_SIGN_WORD = re.compile(
    r"(?P<operand>(?:[0-9)\]}%!]|\b[^\W\d_])[ \t]+)?(?<![\w-])(?:minus|negative)[ \t]+(?=\$?[0-9]|\.[0-9])",
    re.IGNORECASE,
)


def _half(match: re.Match[str]) -> str:
    return str(_MULTIPLIERS[match.group("scale").lower()] // 2)


def sign_words(text: str) -> str:
    """Writes `"minus"` and `"negative"` before a number in digits as its sign (`"negative 5"` -> `"-5"`), unless the
    word follows an operand (a digit, a closing bracket, `%`, `!` or a one-letter variable: `"10 minus 5"` stays).

    Args:
        text: The text.

    Returns:
        The text with those sign words replaced by `-`.
    """
    return _SIGN_WORD.sub(lambda m: m.group(0) if m.group("operand") is not None else "-", text)


def scale_digits(text: str) -> str:
    """Multiplies out a number in digits followed by scale words or `"dozen"` (`"5 dozen"` -> `60`, `"1.5 million"`
    -> `1500000`) and marks a number in digits followed by a fraction word (`"5 and a half"`) as no cardinal, without
    reading number words (see [`words_to_digits`], which does both).

    Args:
        text: The text.

    Returns:
        The text with those numbers rewritten.
    """
    return _DIGITS_SCALE.sub(_scaled, text)


def words_to_digits(text: str) -> str:
    """Rewrites the number words of a text into digits (rules in the module docstring).

    Args:
        text: The text (after `trl_marl.utils.numbers.normalize_text`).

    Returns:
        The text with cardinal phrases in digits, digit numbers with a scale word multiplied out, and phrases that
        are no cardinal marked with [`STRAY`].

    Example:

    ```python
    words_to_digits("The answer is twenty-one.")  # "The answer is 21."
    words_to_digits("It is one hundred and five apples")  # "It is 105 apples"
    ```
    """
    text = _ARTICLE.sub("one ", _HALF.sub(_half, text))
    return scale_digits(_PHRASE.sub(_phrase, text))
