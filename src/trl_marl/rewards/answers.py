"""Answer extraction for MAPoRL's verifiers (Park et al., arXiv 2502.18439): the final answer of a response, the
gold answer of a row, and whether they agree. Used by `trl_marl.rewards.verifier.AnswerVerifier`; usable on its own.

Math answers are read like security-sensitive input: a policy will find any way to get a wrong answer accepted, or
to hedge. First the text is composed (Unicode NFC), invisible format characters (zero-width spaces and joiners,
direction marks, soft hyphens) are removed, every dash-like minus sign (U+2212, en and em dashes, small and
fullwidth hyphen-minus, ...) is read as `-`, and a sign separated from its number by spaces is glued to it
(`"- 5"` is -5) unless it follows an operand (`"10 - 5"`) or starts a line (a list item); see
`trl_marl.utils.numbers.normalize_signs`. Then:

1. **Final-answer statements.** A response states its final answer once, or repeats the same value. The
   statements are:
   - every complete outermost `\\boxed{...}` (nested braces allowed; `\\fbox{...}` and `\\boxed 5` too): its
     content with LaTeX markup removed (`\\frac{a}{b}` -> `a/b`, `\\text{...}` -> its text); the number when it
     holds exactly one and otherwise only words (units), else the text (`\\boxed{1450000 \\text{ or } 1450001}` is
     the text "1450000 or 1450001", `\\boxed{5½}` the text "5½", `\\boxed{\\text{not } 5}` the text "not 5":
     none matches a number);
   - every `####` (GSM8K's marker) and every "answer is X", "answer: X" or "answer = X" (any case, "final answer",
     Markdown bold allowed): the numbers of the rest of the marker's sentence (up to `.`, `!`, `?` or `;` before a
     space or the line end, or the next non-blank line when the marker ends its line; never past the next marker or
     box).
     No numeral at all: the marker states nothing. One value (repeated or not) is a statement. Anything else is
     *ambiguous*: several different values ("1450000 or 1450001", "18 (9 * 2)", "the answer: 3 + 4 = 7"), a
     numeral that is no plain number (`5e0`, `5½`, `5²`, `5!`, `5̸`, fullwidth or other scripts' digits, `√25`,
     `≠5`, `≈5`, `~5`, `±5`, `--5`; see `trl_marl.utils.numbers.find_numbers` and `has_stray_numerals`), or a
     qualifier before the number ("not 5", "about 5", "at least 5", "more than 5").

   **Several statements with different values are a hedge: no answer** (`\\boxed{5}\\boxed{6}`, "The answer is 5.
   ... The answer is 6.", `\\boxed{5}` with "#### 6"; quoting another agent's boxed answer counts too). Numbers
   agree by value (`0.5` and `\\boxed{1/2}`), texts ignoring case; a number never agrees with a text. So the
   verifier reads one value or none, and stating several candidates can never earn more than stating one. Ambiguous
   markers do not count beside statements ("Let's find the answer: 3 + 4 = 7. \\boxed{7}" is 7), but **only
   ambiguous markers are no answer**, with no fallback to the last number ("I got 5. The answer is 5e0").
2. **Otherwise the last number of the text**, unless a numeral that is no plain number follows it or a negation
   stands right before it ("it isn't 5"): then no answer.
3. Otherwise no answer (`None`).

Every step is linear in the length of the text: boxes are matched in one pass and taken outermost only, and the
spans of markers end at the next marker, so no character is read twice whatever the text repeats
(`"\\boxed$" * k`, `"answer is " * k`).

What a number is, its canonical form and how two numbers compare are the rules of `trl_marl.utils.numbers`, the one
normaliser of the package (the data loaders use it too). In short: ASCII digits only (fullwidth, superscript and
other scripts' digits are numerals but no numbers); an optional sign, `$`, `%` (`50%` is 50), thousands separators
in groups of three (`5,000`; a space or an apostrophe separates two numbers: `5 000` is ambiguous), decimals with a
`.` (`5.000` is 5), fractions `3/4`, leading zeros (`05` is 5), a leading `+`; no scientific notation (`1e6` holds
no number); at most 50 digits (a longer number is no answer); letters glued after a number are a unit (`5kg`, `5i`
are 5); a `-` glued to a preceding digit or letter is a minus operator (the last number of "5-3" is 3). **An integer
gold answer matches only the exact value** (`1450001` is wrong for `1450000`, `1450000.0` is right), a fraction gold
its exact value (`0.75` is right for `3/4`, `0.333333` wrong for `1/3`), and a decimal gold with d decimal places
a prediction that rounds to it at d places (`0.333` is right for `0.33`). Non-numeric answers are compared as texts,
ignoring case.

Labels (ANLI's entailment / neutral / contradiction by default): the last whole-word occurrence of any label in any
case wins ("... so it is not a contradiction; NEUTRAL" -> "neutral"). Beware that a negation after the answer
("Neutral, not contradiction") also counts as the last occurrence.

Gold answers: GSM8K's answer text (reasoning, then `#### 72`) gives what follows the last `####`; plain values
pass through the same normalisation (`72`, `72.0`, `"$1,234"`; a float is rounded to 6 decimal places); for labels
an integer (or a digit string) is an index into `label_map` (default `0: entailment, 1: neutral, 2: contradiction`,
the Hugging Face `anli` dataset), a single letter `e`/`n`/`c` is the label it starts (ANLI's raw files), and text is
matched against the labels.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from array import array
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..utils.columns import is_missing
from ..utils.number_words import words_to_digits
from ..utils.numbers import (
    MAX_DIGITS,
    canonical_number,
    find_numbers,
    has_stray_numerals,
    neutral_before,
    normalize_number,
    normalize_text,
    number_value,
    numbers_match,
)

__all__ = [
    "ANLI_LABELS",
    "MAX_RESPONSE_CHARS",
    "TASKS",
    "answers_match",
    "extract_label",
    "extract_math_answer",
    "label_index_map",
    "normalize_answer",
    "parse_gold",
    "response_tail",
    "to_number",
]

ANLI_LABELS: tuple[str, str, str] = ("entailment", "neutral", "contradiction")
"""ANLI's labels in the order of the integer labels of the Hugging Face `anli` dataset (0, 1, 2)."""

TASKS = ("math", "label")
"""What a verifier checks: a numeric answer (`"math"`) or a label (`"label"`)."""

# ---------------------------------------------------------------------------------------------------------------
# Answer extraction and normalisation
# ---------------------------------------------------------------------------------------------------------------

MAX_RESPONSE_CHARS = 32_768
"""The most characters of a response the extraction reads: its last ones (see [`response_tail`]). About 8,000 tokens:
more than a completion's usual `max_completion_length`, and the final answer is at the end. The work of every rule is
linear in what is read, so a response of megabytes costs what one of this length does."""

_UNIT_WORDS = re.compile(r"(?:[^\W\d_]|[\s=:.{}])*")  # letters, spaces, "=", ":", "." and braces (not numerals)
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_BRACE = re.compile(r"[{}]")
_BOX_TOKEN = re.compile(r"[^\s$\\{}]+")  # `\boxed 5`: up to a space, `$`, a brace or the next command
_ANSWER_MARKER = re.compile(r"\banswer\b\**[ \t]*(?:is\b[ \t]*:?|:|=)|####", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.?;](?=\s|$)|(?<![0-9])!(?=\s|$)")  # "5!" is a factorial, not a sentence end
# Where a sentence ends: its punctuation, a blank line, or a line that starts a Markdown block (a heading such as
# GSM8K's "####", a list item, a quotation, a table row). A single line break does not end a sentence: Markdown
# joins the lines, and "The answer is not\n\\boxed{5}" is one sentence.
_BOUNDARY = re.compile(r"[.?;](?=\s|$)|(?<![0-9])!(?=\s|$)|\n[ \t]*\n|\n(?=[ \t]*(?:#|\u2022|[0-9]+[.)][ \t]|>|\|))")
_LATEX_FRAC = re.compile(
    r"\\(?:[dtc]?frac|sfrac|nicefrac)\s*(?:\[[a-z]\]\s*)?"
    r"(?P<a>\{[^{}]*\}|[0-9a-zA-Z]|\\[a-zA-Z]+)\s*(?P<b>\{[^{}]*\}|[0-9a-zA-Z]|\\[a-zA-Z]+)"
)
_SIMPLE_ARGUMENT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]+)?|[a-zA-Z])")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mbox|operatorname|boxed|fbox)\s*\{([^{}]*)\}")
_LATEX_SPACE = re.compile(r"\\(?:[,;: ]|quad|qquad|enspace|thinspace)(?![a-zA-Z])")
_LATEX_DROP = re.compile(r"\\(?:left|right|displaystyle|!)|\^\s*\{?\\circ\}?|\^\\circ")
# Words that make the sentence of an answer something other than a plain statement of it: a negation ("not", "no",
# "cannot", "isn't", "5 is not the answer"), a bound ("at least", "or more", "up to", "more than", "over 5"), an
# approximation ("about", "roughly", "nearly"), a hedge ("maybe", "probably", "my guess"), or a judgement ("wrong").
_QUALIFIER = re.compile(
    r"\b(?:not|no|never|neither|nor|none|cannot|without|except|excluding|unless|otherwise|instead|rather"
    r"|about|approx(?:imately)?|roughly|around|nearly|almost|circa|close[ \t]+to|estimated?|estimates?"
    r"|maybe|perhaps|probably|possibly|likely|unlikely|guess|false|wrong|incorrect"
    r"|(?:at|up)[ \t]+(?:least|most|to)|(?:more|less|fewer|greater|smaller|larger|bigger|higher|lower|other)[ \t]+than"
    r"|or[ \t]+(?:more|less|fewer|greater|higher|lower|above|below|so|thereabouts|over|under|earlier|later)"
    r"|and[ \t]+(?:up|above|over|more)|(?:over|under|above|below|beyond|near|exceeding)(?=[ \t]+[-$.]?[0-9])"
    r"|minimum|maximum)\b|n't\b",
    re.IGNORECASE,
)
# A retraction: what came before it is withdrawn ("The answer is 5.\n\nWait, that's wrong: it is 6." is 6). Most cues
# start a clause (at the start of the text or after anything but a word: a sentence mark, a comma, a bracket, a box, a
# line break; not "a wait of 5 minutes"); "... is not the answer" and "... is wrong" retract wherever they stand.
_RETRACTION = re.compile(
    r"(?:^|[^\w \t*])[ \t*_]*"  # no "*" at the start: a run of them is skipped once, in linear time
    r"(?:wait|actually|oops|correction|scratch[ \t]+that|on[ \t]+(?:second|further)[ \t]+thought|on[ \t]+reflection"
    r"|hold[ \t]+on|no(?=[ \t]*[,.!]|[ \t]+wait)|nope|sorry|my[ \t]+(?:mistake|bad|error)"
    r"|I[ \t]+(?:was|am|'m)[ \t]+wrong|I[ \t]+made[ \t]+(?:a|an)[ \t]+(?:mistake|error)"
    r"|let(?:[ \t]+me|'s|[ \t]+us)[ \t]+(?:re-?(?:check|consider|compute|calculate|do|evaluate|think|examine)"
    r"|redo|correct)"
    r"|(?:that|this|it)(?:'s|[ \t]+is|[ \t]+was)[ \t]+(?:wrong|incorrect|not[ \t]+(?:right|correct)|a[ \t]+mistake"
    r"|an[ \t]+error))\b"
    r"|\b(?:is|was|are)(?:[ \t]+not|n't)[ \t]+(?:the|my|our|a)[ \t]+(?:final[ \t]+|correct[ \t]+|right[ \t]+)?answer\b"
    r"|\b(?:is|was|are|'s)[ \t]+(?:wrong|incorrect)\b",
    re.IGNORECASE | re.MULTILINE,
)
# Next to a box, these make its value something else (`-\boxed{5}`, `2\boxed{5}`, `\boxed{5}^2`, `\boxed{5}!`,
# `\boxed{5} \cdot 2`): the box is ambiguous. LaTeX commands beside a box are refused unless they only format.
_FORMATTING_COMMANDS = frozenset(
    "text textrm textbf textit mathrm mathbf mbox quad qquad enspace hfill hspace displaystyle left right big Big "
    "bigl bigr Bigl Bigr end begin label tag newline boxed fbox".split()
)
_BOX_SKIP = frozenset(" \t\n$")
_COMMAND = re.compile(r"\\([a-zA-Z]+|.)", re.DOTALL)
_OPERAND_AFTER_SIGN = re.compile(r"[+-][ \t]*(?:[0-9({\[\\$]|\.[0-9]|[a-zA-Z](?![a-zA-Z]))")
_LOOK = 64  # at most this many characters are skipped beside a box (spaces, `$`, brackets, formatting)


def _clean(text: str) -> str:
    """What a person sees, in the characters the grammar reads (`trl_marl.utils.numbers.normalize_text`)."""
    return normalize_text(text)


def response_tail(text: str, max_chars: int = MAX_RESPONSE_CHARS) -> str:
    """The part of a response that the extraction reads: all of it, or its last `max_chars` characters.

    A longer response is cut before its last `max_chars` characters and read from the first line after the cut (or,
    in a tail without a line break, from the first character after a space), so that no number, word or command is
    read in half (`"...12345"` cut inside the number is not `"345"`). A tail without any space holds no answer.

    Args:
        text: The response.
        max_chars: The most characters read.

    Returns:
        The text that is read.

    Raises:
        ValueError: If `max_chars` is not a positive integer.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(
            f"`max_chars` / `max_response_chars` (the most characters of a response that are read) must "
            f"be a positive integer, got {max_chars!r}; the default is MAX_RESPONSE_CHARS = "
            f"{MAX_RESPONSE_CHARS}."
        )
    if len(text) <= max_chars:
        return text
    tail = text[len(text) - max_chars :]
    start = tail.find("\n")
    if start < 0:
        space = re.search(r"\s", tail)
        if space is None:
            return ""
        start = space.start()
    return tail[start + 1 :]


def _boxes(text: str) -> list[tuple[int, int, int, int]]:
    """The complete outermost `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) of a text, in order, as `(start,
    content start, content end, end)`.

    Braces are matched in one pass over the text, a box inside another box is part of the outer one, and `\\boxed 5`
    takes the token up to the next space, `$`, brace or backslash: the boxes are disjoint, so the time is linear in
    the length of the text whatever it holds (`"\\boxed$" * k`, `"\\boxed{" * k`, ...).
    """
    starts, ends = array("q"), array("q")  # the markers, in machine integers: 16 bytes each whatever the text
    for match in _BOXED.finditer(text):
        starts.append(match.start())
        ends.append(match.end())
    if not starts:
        return []
    # One pass over the braces with a depth counter; only the braces that open a box are remembered.
    closing = array("q", [-1]) * len(ends)  # per marker: the index of the brace that closes its box
    open_markers, open_depths = array("q"), array("q")
    depth = marker = 0
    for brace in _BRACE.finditer(text):
        index = brace.start()
        if text[index] == "{":
            depth += 1
            while marker < len(ends) and ends[marker] < index:
                marker += 1
            if marker < len(ends) and ends[marker] == index:
                open_markers.append(marker)
                open_depths.append(depth)
        elif depth:
            if open_depths and open_depths[-1] == depth:
                open_depths.pop()
                closing[open_markers.pop()] = index
            depth -= 1
    boxes: list[tuple[int, int, int, int]] = []
    covered = 0  # the end of the last box taken: a marker before it lies inside that box
    for marker, (start, end) in enumerate(zip(starts, ends)):
        if start < covered:
            continue
        if text.startswith("{", end):
            if closing[marker] >= 0:
                boxes.append((start, end + 1, closing[marker], closing[marker] + 1))
                covered = closing[marker] + 1
        else:  # `\boxed 5`: the next token
            token = _BOX_TOKEN.match(text, end)
            if token:
                boxes.append((start, token.start(), token.end(), token.end()))
                covered = token.end()
    return boxes


def _command_before(text: str, index: int) -> tuple[str | None, int]:
    """The LaTeX command (letters after a backslash) that ends at `index`, and where its backslash stands; `(None,
    index)` when the letters there are a word."""
    start = index
    while start > 0 and index - start < _LOOK and text[start - 1].isascii() and text[start - 1].isalpha():
        start -= 1
    if 0 < start < index and text[start - 1] == "\\":
        return text[start:index], start - 1
    return None, index


def _box_touches_operator(text: str, start: int, end: int) -> bool:
    """Whether a sign, an operator, a power, a digit or a LaTeX command that is no formatting stands next to a box
    (spaces, `$`, brackets and Markdown emphasis between allowed): `-\\boxed{5}`, `2\\boxed{5}`, `\\sqrt{\\boxed{25}}`,
    `\\boxed{5}^2`, `(\\boxed{5})^2`, `\\boxed{5}!`, `\\boxed{5}0`, `\\boxed{5} \\cdot 2`, `\\boxed{5} + 1`."""
    index, limit = start, max(0, start - _LOOK)
    while index > limit:  # before the box
        char = text[index - 1]
        if char in _BOX_SKIP or char in "([{":
            index -= 1
        elif text.startswith(("\\(", "\\["), index - 2):
            index -= 2
        elif char == "*":  # Markdown emphasis, unless it follows an operand (`2*\boxed{5}`)
            while index > limit and text[index - 1] == "*":
                index -= 1
            if index and (text[index - 1].isdigit() or text[index - 1] in ")]}"):
                return True
        elif char.isascii() and char.isalpha():
            command, command_start = _command_before(text, index)
            if command is None:
                break  # a word: "is \boxed{5}"
            if command not in _FORMATTING_COMMANDS:
                return True
            index = command_start
        else:
            previous = text[index - 2] if index >= 2 else ""
            if char.isnumeric() or char in "-+/^_|!~<>" or not neutral_before(char, previous):
                return True
            break
    index, limit = end, min(len(text), end + _LOOK)
    glued = True
    while index < limit:  # after the box
        char = text[index]
        if char in _BOX_SKIP or char in ")]}":
            index += 1
            glued = glued and char not in " \t\n"
        elif text.startswith(("\\)", "\\]"), index):
            index += 2
        elif char == "*":
            while index < limit and text[index] == "*":
                index += 1
            if index < len(text) and (text[index].isdigit() or text[index] in "({\\"):
                return True
        elif char == "\\":
            command = _COMMAND.match(text, index, index + 40)
            name = command.group(1) if command else ""
            if name in _FORMATTING_COMMANDS or name in (",", ";", ":", " ", "!", "%", "\\", "$"):
                return False
            return True
        elif char in "+-":
            return _OPERAND_AFTER_SIGN.match(text, index, index + 8) is not None
        elif char == "!":
            return glued
        elif (
            char.isnumeric()
            or char in "^_'*/"
            or (char in ".," and index + 1 < len(text) and text[index + 1].isdigit())
        ):
            return True
        elif unicodedata.category(char) == "Sm" and char != "=":
            return True
        else:
            return False
    return False


def _render_fraction(match: re.Match[str]) -> str:
    """`\\frac{a}{b}` (and `\\frac12`, `\\dfrac`, `\\tfrac`, `\\cfrac[l]{a}{b}`, `\\sfrac`, `\\nicefrac`) as
    `a/b`, with brackets around arguments that are no plain number or letter, a space after a digit before it
    (`2\\frac{1}{2}` is the mixed number `2 1/2`) and a space before a digit after it (`\\frac{1}{2}3` is two
    numbers, not `1/23`)."""
    parts = [match.group(name).strip() for name in ("a", "b")]
    parts = [part[1:-1].strip() if part.startswith("{") else part for part in parts]
    text = "/".join(part if _SIMPLE_ARGUMENT.fullmatch(part) else f"({part})" for part in parts)
    before = match.string[match.start() - 1 : match.start()]
    after = match.string[match.end() : match.end() + 1]
    return (" " if before.isdigit() else "") + text + (" " if after.isdigit() or after == "." else "")


def _strip_latex(text: str) -> str:
    """Removes common LaTeX markup from an answer (`\\frac`, `\\text`, `\\left`, `\\$`, `{,}`, `^\\circ`, spacing).

    Args:
        text: The text, e.g. the content of a `\\boxed{...}`.

    Returns:
        The text with the markup replaced by plain text (`\\frac{3}{4}` and `\\frac34` -> `3/4`, `\\,` -> a space).
    """
    text = text.replace("{,}", ",").replace("\\$", "$").replace("\\%", "%")
    text = _LATEX_SPACE.sub(" ", text)
    for _ in range(4):  # nested \text{\frac{..}{..}} and the like
        new = _LATEX_TEXT.sub(r"\1", _LATEX_FRAC.sub(_render_fraction, text))
        if new == text:
            break
        text = new
    text = _LATEX_DROP.sub("", text)
    return text.strip()


def _read(text: str) -> str:
    """An answer's text as the grammar reads it: LaTeX removed, number words in digits."""
    return words_to_digits(_strip_latex(text))


def _span_answer(span: str) -> tuple[bool, str | None]:
    """The one number an answer span states.

    Args:
        span: The text after an answer marker, up to the end of its sentence.

    Returns:
        `(False, None)` when the span holds no numeral at all; `(True, value)` when all its numbers have one
        canonical value; `(True, None)` when it is ambiguous: several different values ("1450000 or 1450001"), a
        numeral that is no plain number (`5e0`, `5½`, `５`, `5!`, `≠5`, "two thirds"; see
        `trl_marl.utils.numbers.has_stray_numerals`), a qualifier in it ("not 5", "about 5", "5 or more"), or a
        number that is too long or has a zero denominator.
    """
    text = _read(span)
    matches = find_numbers(text)
    if has_stray_numerals(text, matches):
        return True, None
    if not matches:
        return False, None
    if _QUALIFIER.search(text):
        return True, None
    values = {canonical_number(match.group(0)) for match in matches}
    if len(values) != 1 or None in values:
        return True, None
    return True, values.pop()


def _first_sentence(line: str) -> str:
    """A line up to its first sentence end (`.`, `!`, `?` or `;` before a space or the end; `2.5` is no end, nor is
    the `!` of `5!`)."""
    end = _SENTENCE_END.search(line)
    return line[: end.start()] if end else line


def _after_marker(
    text: str, end: int, limit: int, read: Callable[[str], tuple[bool, str | None]] = _span_answer
) -> tuple[bool, str | None, int]:
    """The answer stated after a marker ending at `end`: in the rest of its sentence, or the next non-blank line's,
    never past `limit` (the next marker or box), so the spans of all markers are disjoint and read in linear time.

    Args:
        text: The text.
        end: Index just after the marker.
        limit: Index of the next marker or box (or the end of the text).
        read: Reads a span ([`_span_answer`], or a memoised version of it).

    Returns:
        As [`_span_answer`], and the index where the span read ends: `(False, None, _)` when the marker is followed
        by no numeral (it states nothing), `(True, value, _)` for an answer, `(True, None, _)` for an ambiguous one.
    """
    line_end = text.find("\n", end, limit)
    line_end = limit if line_end < 0 else line_end
    first = _first_sentence(text[end:line_end])
    found, value = read(first)
    if found or text[end:line_end].strip(" \t*:$"):
        return found, value, end + len(first)
    start = line_end + 1
    while start < limit:
        stop = text.find("\n", start, limit)
        stop = limit if stop < 0 else stop
        line = text[start:stop]
        if line.strip():
            sentence = _first_sentence(line)
            found, value = read(sentence)
            return found, value, start + len(sentence)
        start = stop + 1
    return False, None, end


def _agreed(values: list[str]) -> str | None:
    """The answer that several final-answer statements agree on: numbers by value (`0.5` and `1/2` agree), texts
    ignoring case; `None` when two of them differ (a hedge) or a number meets a text."""
    numbers = [number_value(value) for value in values]
    if all(number is not None for number in numbers):
        return values[-1] if len(set(numbers)) == 1 else None
    if any(number is not None for number in numbers):
        return None
    return values[-1] if len({value.casefold() for value in values}) == 1 else None


def normalize_answer(text: str) -> str:
    """Normalises an answer string: a lone number becomes its canonical form, other text is cleaned of LaTeX.

    Args:
        text: An answer, e.g. `"$1,234.00"`, `"\\frac{3}{4}"`, `"18 dollars"`, `"five"` or `"x+1"`.

    Returns:
        The canonical number (`trl_marl.utils.numbers`) when the (LaTeX-stripped, number words read) text holds
        exactly one number and otherwise only words, spaces, `=`, `:`, `.` or braces, no other numeral and no
        qualifier (`"1234"`, `"3/4"`, `"18"`, `"x = 5"`, `"{5}"`, `"five"` -> `"5"`; `"not 5"`, `"5 or more"`,
        `"5½"` stay texts); otherwise the stripped text without a trailing period (`"x+1"`, `"1450000 or 1450001"`).
    """
    cleaned = _strip_latex(_clean(str(text)))
    read = words_to_digits(cleaned)
    numbers = find_numbers(read)
    if len(numbers) == 1:
        number = numbers[0]
        # Words around the number are units or a variable name ("18 dollars", "x = 5"); an operator makes it an
        # expression ("x+1"), a qualifier something else ("not 5", "about 5", "5 or more"): those are texts.
        rest = read[: number.start()] + " " + read[number.end() :]
        value = canonical_number(number.group(0))
        if (
            value is not None
            and _UNIT_WORDS.fullmatch(rest)
            and not has_stray_numerals(rest, [])
            and not _QUALIFIER.search(rest)
        ):
            return value
    return re.sub(r"\s+", " ", cleaned).strip().rstrip(".").strip()


class _Sentences:
    """The sentences of a text (see `_BOUNDARY`), and whether each holds a qualifier, each read at most once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ends = array("q", (match.end() for match in _BOUNDARY.finditer(text)))
        self.qualified: dict[int, bool] = {}

    def index(self, position: int) -> int:
        return bisect.bisect_right(self.ends, position)

    def has_qualifier(self, start: int, end: int) -> bool:
        """Whether a sentence touched by `[start, end]` holds a qualifier."""
        for sentence in range(self.index(start), self.index(max(start, end - 1)) + 1):
            if sentence not in self.qualified:
                begin = self.ends[sentence - 1] if sentence else 0
                stop = self.ends[sentence] if sentence < len(self.ends) else len(self.text)
                self.qualified[sentence] = _QUALIFIER.search(self.text, begin, stop) is not None
            if self.qualified[sentence]:
                return True
        return False


def _masked(text: str, boxes: list[tuple[int, int, int, int]]) -> str:
    """The text with the contents of its boxes blanked (their own rules read them), the length unchanged."""
    parts, position = [], 0
    for _, content_start, content_end, _ in boxes:
        parts.append(text[position:content_start])
        parts.append(" " * (content_end - content_start))
        position = content_end
    parts.append(text[position:])
    return "".join(parts)


def _fallback(text: str) -> str | None:
    """The last number of a text without final-answer statements (number words when it has no number in digits),
    unless a numeral that is no plain number follows it or its sentence holds a qualifier."""
    stripped = _strip_latex(text)
    numbers = find_numbers(stripped)
    if not numbers and not has_stray_numerals(stripped, numbers):
        stripped = words_to_digits(stripped)
        numbers = find_numbers(stripped)
    if not numbers:
        return None
    last = numbers[-1]
    if has_stray_numerals(stripped[last.end() :], []):
        return None  # the text ends with a numeral that is no plain number ("... so 5e0", "... 5½")
    if _Sentences(stripped).has_qualifier(last.start(), last.end()):
        return None  # "It is at least 5.", "5 is not the answer."
    return canonical_number(last.group(0))


def extract_math_answer(text: str | None, max_chars: int = MAX_RESPONSE_CHARS) -> str | None:
    """Extracts the final answer of a math response (rules in the module docstring).

    Args:
        text: The response.
        max_chars: The most characters read, the last ones ([`response_tail`]).

    Returns:
        The normalised answer (a canonical number such as `"1234"`, `"-3"`, `"0.5"`, `"3/4"`, or the text of a
        boxed non-numeric answer), or `None` when the response has no answer, an ambiguous one, or several
        different ones (a hedge).

    Example:

    ```python
    extract_math_answer("So she makes 9 * 2 = $18.\\n#### 18")  # "18"
    extract_math_answer("The answer is \\\\boxed{\\\\frac{3}{4}}")  # "3/4"
    extract_math_answer("The answer is \u2013 5")  # "-5": an en dash is a minus sign
    extract_math_answer("The answer is 1450000 or 1450001.")  # None: two different numbers
    extract_math_answer("\\\\boxed{5} \\\\boxed{6}")  # None: two final answers
    extract_math_answer("The answer is 5 or more.")  # None: a qualifier
    extract_math_answer("The answer is 5.\\n\\nWait, that's wrong: it is 6.")  # "6": the retraction wins
    extract_math_answer("I don't know.")  # None
    ```
    """
    if not text:
        return None
    text = _clean(response_tail(str(text), max_chars))
    # Everything before the last retraction (outside boxes) is withdrawn.
    boxes = _boxes(text)
    masked = _masked(text, boxes) if boxes else text
    cut = 0
    for match in _RETRACTION.finditer(masked):  # box contents are blanked: a retraction outside boxes
        cut = match.end()
    if cut:
        text = text[cut:]
        boxes = _boxes(text)
        masked = _masked(text, boxes) if boxes else text
    sentences = _Sentences(masked)
    statements: list[tuple[int, str | None]] = []  # (position, value or None when ambiguous), in text order
    # A text that repeats one statement many times reads it once (the contents are disjoint, so this holds at most
    # the text's length).
    values: dict[str, str] = {}
    spans: dict[str, tuple[bool, str | None]] = {}

    def read_span(span: str) -> tuple[bool, str | None]:
        if span not in spans:
            spans[span] = _span_answer(span)
        return spans[span]

    for start, content_start, content_end, end in boxes:
        content = text[content_start:content_end]
        if content not in values:
            values[content] = normalize_answer(content)
        value = values[content]
        if not value:
            continue
        if _box_touches_operator(text, start, end) or sentences.has_qualifier(start, end):
            statements.append((start, None))
        else:
            statements.append((start, value))
    # A marker's span ends where the next marker or box starts ("The answer is 5 \\boxed{6}" is 5, then 6).
    markers = list(_ANSWER_MARKER.finditer(masked))
    boundaries = array("q", sorted([m.start() for m in markers] + [start for start, _, _, _ in boxes]))
    boundaries.append(len(text))
    for match in markers:
        limit = boundaries[bisect.bisect_right(boundaries, match.start())]
        found, value, span_end = _after_marker(text, match.end(), limit, read_span)
        if not found:
            continue
        if value is not None and sentences.has_qualifier(match.start(), span_end):
            value = None
        statements.append((match.start(), value))
    if statements:
        statements.sort(key=lambda statement: statement[0])
        if statements[-1][1] is None:
            return None  # the final statement is ambiguous: no answer, and no fallback to the last number
        # Several different ones: a hedge, no answer. Ambiguous statements before the last one are reasoning.
        return _agreed([value for _, value in statements if value is not None])
    return _fallback(text)


def extract_label(text: str | None, labels: Sequence[str] = ANLI_LABELS) -> str | None:
    """Extracts a label from a classification response: the last whole-word occurrence of a label, any case.

    Args:
        text: The response.
        labels: The label words.

    Returns:
        The label as spelled in `labels`, or `None` when no label occurs.

    Example:

    ```python
    extract_label("It could be a contradiction, but the answer is Neutral.")  # "neutral"
    ```
    """
    if not text or not labels:
        return None
    by_lower = {label.lower(): label for label in labels}
    alternatives = "|".join(re.escape(label) for label in sorted(by_lower, key=len, reverse=True))
    matches = list(re.finditer(rf"(?<![\w-])(?:{alternatives})(?![\w-])", str(text), re.IGNORECASE))
    return by_lower[matches[-1].group(0).lower()] if matches else None


def label_index_map(labels: Sequence[str], label_map: Mapping[int, str] | Sequence[str] | None) -> dict[int, str]:
    """The integer-label mapping of label tasks.

    Args:
        labels: The label words (the default mapping is their order).
        label_map: A mapping from integer label to label word, a sequence (index -> word), or `None`.

    Returns:
        The mapping.
    """
    if label_map is None:
        return dict(enumerate(labels))
    if isinstance(label_map, Mapping):
        return {int(k): str(v) for k, v in label_map.items()}
    return dict(enumerate(str(v) for v in label_map))


def parse_gold(
    gold: Any,
    task: str = "math",
    labels: Sequence[str] = ANLI_LABELS,
    label_map: Mapping[int, str] | Sequence[str] | None = None,
) -> str:
    """Normalises a gold answer (rules in the module docstring).

    Args:
        gold: The gold value of a dataset row: GSM8K answer text (`"... #### 72"`), a plain value (`72`, `"72.0"`,
            `"$1,234"`), or for labels an integer index, a digit string, a letter `e`/`n`/`c` or a label word.
        task: `"math"` or `"label"`.
        labels: The label words of a label task.
        label_map: Integer label -> label word (default: the order of `labels`, i.e. ANLI's
            `0: entailment, 1: neutral, 2: contradiction`).

    Returns:
        The normalised gold answer (`"72"`, `"3/4"`, `"entailment"`).

    Raises:
        ValueError: If `gold` is missing (`None`/NaN), `task` is unknown, or an integer label is not in `label_map`.
    """
    if task not in TASKS:
        raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
    if is_missing(gold):
        raise ValueError("The gold answer is missing (None).")
    if task == "label":
        mapping = label_index_map(labels, label_map)
        if isinstance(gold, bool):
            raise ValueError(f"A label gold must be an integer or a label word, got {gold!r}.")
        index = None
        if isinstance(gold, int) or (hasattr(gold, "__index__") and not isinstance(gold, str)):
            index = int(gold)
        elif isinstance(gold, float) and gold.is_integer():
            index = int(gold)
        elif isinstance(gold, str) and gold.strip().lstrip("-").isdigit():
            index = int(gold.strip())
        if index is not None:
            if index not in mapping:
                raise ValueError(f"Label {index} is not in the label mapping {mapping}.")
            return mapping[index]
        text = str(gold).strip()
        by_letter = {}
        for label in labels:
            by_letter.setdefault(label[:1].lower(), []).append(label)
        if len(text) == 1 and len(by_letter.get(text.lower(), [])) == 1:
            return by_letter[text.lower()][0]
        return extract_label(text, labels) or text.lower()
    if isinstance(gold, str) or not isinstance(gold, (int, float, Fraction, Decimal)):
        text = str(gold)
        if "####" in text:
            text = text.rsplit("####", 1)[1]
        return normalize_number(text) or normalize_answer(text.strip())
    value = normalize_number(int(gold) if isinstance(gold, bool) else gold)
    if value is None:
        raise ValueError(f"The gold answer is not a finite number of at most {MAX_DIGITS} digits: {gold!r}.")
    return value


def to_number(answer: str | None) -> float | None:
    """The value of a normalised answer, as a float (for display; [`answers_match`] compares exact values).

    Args:
        answer: A string from [`extract_math_answer`], [`normalize_answer`] or [`parse_gold`].

    Returns:
        Its value as a float (`"3/4"` -> 0.75), or `None` when it is not one number.
    """
    value = number_value(answer)
    return None if value is None else float(value)


def answers_match(prediction: str | None, gold: str) -> bool:
    """Whether a predicted answer agrees with a gold answer.

    Numbers are compared by `trl_marl.utils.numbers.numbers_match`: an integer or fraction gold exactly, a decimal
    gold with d places against the prediction rounded to d places. There is no relative tolerance: `1450001` is not
    `1450000`.

    Args:
        prediction: The normalised prediction (`None`: no answer, never a match).
        gold: The normalised gold answer.

    Returns:
        `True` when the gold is a number and the prediction matches it as above (`"0.75"` and `"3/4"`), or when
        neither is a number and their texts are equal ignoring case and surrounding whitespace.
    """
    if prediction is None:
        return False
    if number_value(gold) is not None:
        return numbers_match(prediction, gold)
    if number_value(prediction) is not None:
        return False
    return prediction.strip().casefold() == str(gold).strip().casefold()
