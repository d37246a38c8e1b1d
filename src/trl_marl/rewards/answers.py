"""Answer extraction for MAPoRL's verifiers (Park et al., arXiv 2502.18439): the final answer of a response, the
gold answer of a row, and whether they agree. Used by `trl_marl.rewards.verifier.AnswerVerifier`; usable on its own.

Math answers are read like security-sensitive input: a policy will find any way to get a wrong answer accepted, or
to hedge. The rules, in the order they apply:

0. **What is read.** At most the last `max_chars` characters ([`MAX_RESPONSE_CHARS`], 32,768 by default), from the
   first line after the cut (`trl_marl.rewards.answer_text.response_tail`): the final answer is at the end, and a
   response of megabytes costs what one of this length does. Then the text is normalised as a person sees it
   (`trl_marl.utils.numbers.normalize_text`): Unicode NFC; every space character (category Zs: no-break, thin,
   narrow no-break, ...) is a space; invisible characters (categories Cf and Cc) are removed; every dash and minus
   look-alike is `-`, decided from the Unicode database (category Pd, and symbols whose names describe one
   horizontal stroke: U+2212, U+2043, U+23AF, U+2500, U+00AF, ...; `trl_marl.utils.numbers.dash_like`), and so is
   the one space drawn as a stroke (U+1680 OGHAM SPACE MARK: `"\u16805"` is -5); "minus" and "negative" before a
   number in digits are its sign (`"negative 5"` is -5; "10 minus 5" subtracts); a sign
   separated from its number by spaces is glued to it (`"\u2212\u00a05"` is -5) unless it follows an operand
   (`"10 - 5"`); an ASCII `- ` starting a line is a list item, not a sign.
1. **Retractions.** Everything before the last retraction is withdrawn: "wait", "actually", "no,", "oops",
   "correction", "on second thought", "I made a mistake", "let me recompute", "that's wrong", "that can't be right",
   "that doesn't look right" starting a clause (after "But", "Oh", "Hmm", ... too), and "just kidding", "never
   mind", "whoops", "uh-oh", "I take that back", "ignore that", "disregard the above", "... is not the answer",
   "... is wrong" anywhere ("The answer is 5.\\n\\nWait, that's wrong: it is 6." is 6; "The answer is 5. Wait." and
   "\\boxed{5} But that's not right." are no answer). Retractions inside boxes do not count.
2. **Final-answer statements.** A response states its final answer once, or repeats the same value. The
   statements are:
   - every complete outermost box: `\\boxed{...}` (nested braces allowed; `\\boxed 5` too) and every other command that
     frames its argument or colours its background (`\\fbox`, `\\framebox[..][..]{..}`, `\\colorbox{c}{..}`,
     `\\fcolorbox{c}{c}{..}`, `\\bbox[..]{..}`, `\\ovalbox`, `\\doublebox`, `\\shadowbox`, `\\tcbox`;
     `trl_marl.rewards.answer_text.BOX_COMMANDS`, so `\\framebox{6}` beside `\\boxed{5}` is a hedge): its content with
     LaTeX markup removed (`\\frac{a}{b}`, `\\frac12`, `\\dfrac`, `\\tfrac`, `\\cfrac[l]{a}{b}` -> `a/b`, the sign in
     front: `\\frac{3}{-4}` is -3/4; `2\\frac{1}{2}` is the mixed number 5/2; `\\text{...}` -> its text; `\\,` -> a
     space), simple exact values evaluated (`0.\\overline{3}` is 1/3, `\\sqrt{25}` 5, `\\sqrt[3]{27}` 3, `2^3` 8,
     `2^{-1}` 1/2; `\\sqrt{2}` and a value of more than 50 digits stay as written;
     `trl_marl.rewards.answer_text.exact_values`) and number words read (`\\boxed{five}` is 5, "a dozen" 12, "half a
     dozen" 6, "5 dozen" 60, "nought" 0, "five-hundred-and-one" 501); the number when it holds exactly one and
     otherwise only words (units), else the text (`\\boxed{1450000 \\text{ or } 1450001}` is the text "1450000 or
     1450001", `\\boxed{\\text{not } 5}` the text "not 5": none matches a number). A box with a sign, an operator, a
     power, a digit or a LaTeX command that does not only format next to it is ambiguous (`-\\boxed{5}`,
     `\\boxed{5}^2`, `2\\boxed{5}`, `\\boxed{5}!`, `\\sqrt{\\boxed{25}}`, `\\boxed{5} \\cdot 2`; `**\\boxed{5}**`, `x =
     \\boxed{5}` and `\\boxed{5}\\%` are 5);
   - every `####` (GSM8K's marker) and every "answer is X", "answer: X" or "answer = X" (any case, "final answer",
     Markdown bold allowed): the numbers of the rest of the marker's sentence (up to `.`, `!`, `?` or `;` before a
     space or the line end, or the next non-blank line when the marker ends its line; never past the next marker or
     box), number words read ("twenty-one", "one hundred and five").
     No numeral at all: the marker states nothing. One value (repeated or not) is a statement. Anything else is
     *ambiguous*: several different values ("1450000 or 1450001", "18 (9 * 2)", "the answer: 3 + 4 = 7"), a
     numeral that is no plain number (`5e0`, `5½`, `5²`, `5!`, `5+`, `5̸`, fullwidth or other scripts' digits,
     `√25`, `≠5`, `≈5`, `~5`, `±5`, `--5`, `<5`, a symbol the rules do not know before it, "two thirds", "five and
     a half"; see `trl_marl.utils.numbers.find_numbers` and `has_stray_numerals`).

   **A qualifier or a negation anywhere in the sentence of a statement makes it ambiguous**: "not", "no", "never",
   "cannot", "n't" (any apostrophe), "at least", "at most", "up to", "more than", "or more", "or less", "or so",
   "about", "roughly", "approximately", "approx.", "ca.", "nearly", "maybe", "probably", "might be", "could be",
   "hardly", "barely", "anything but", "upwards of", "in excess of", "give or take", "impossible", "doubtful",
   "wrong", "over 5", "between 4 and 5", ... ("The answer is 5 or more.", "I'm not sure, but the answer is 5.",
   "\\boxed{5} is not the answer.", "5 is impossible."; `trl_marl.rewards.answer_text.QUALIFIER`). A sentence ends at
   `.` (not the period of "approx.", "ca.", "est."), `!`, `?` or `;` before a space,
   at a blank line or at a line that starts a Markdown block (a heading such as `####`, a list item, a quotation);
   a single line break does not end it ("The answer is not\\n\\boxed{5}" is one sentence).

   **The last statement decides**: when it is ambiguous there is no answer, with no fallback to the last number
   ("I got 5. The answer is 5e0"). Ambiguous statements before it are reasoning ("Let's find the answer: 3 + 4 =
   7. \\boxed{7}" is 7). **Several statements with different values are a hedge: no answer**
   (`\\boxed{5}\\boxed{6}`, "The answer is 5. ... The answer is 6.", `\\boxed{5}` with "#### 6"; quoting another
   agent's boxed answer counts too). Numbers agree by value (`0.5` and `\\boxed{1/2}`), texts ignoring case; a
   number never agrees with a text. So the verifier reads one value or none, and stating several candidates can
   never earn more than stating one.
3. **Otherwise the last number of the text** (in digits; number words when the text has no number in digits:
   "five" is 5), unless a numeral that is no plain number follows it or its sentence holds a qualifier or a negation
   ("It is at least 5.", "5 is not the answer.", "so roughly 5"): then no answer.
4. Otherwise no answer (`None`).

Every step is linear in the length of the text: boxes are matched in one pass and taken outermost only, the spans
of markers end at the next marker, and each sentence is searched for qualifiers once, so no character is read more
than a few times whatever the text repeats (`"\\boxed$" * k`, `"answer is " * k`).

What a number is, its canonical form and how two numbers compare are the rules of `trl_marl.utils.numbers`, the one
normaliser of the package (the data loaders use it too). In short: ASCII digits only (fullwidth, superscript and
other scripts' digits are numerals but no numbers); an optional sign, `$`, `%` (`50%` is 50), digit groups of three
separated by `,` or `_` (`5,000`, `1_000`; `1,2` is a list, no number; a space or an apostrophe separates two
numbers: `5 000` is ambiguous), decimals with a `.` (`5.000` is 5), fractions `3/4`, mixed numbers with a proper
fraction (`1 1/2` is 3/2; `1 3/2` is no number), leading zeros (`05` is 5), a leading `+`; no scientific notation
(`1e6` holds no number); at most 50 digits (a longer number is no answer); letters glued after a number are a unit
(`5kg`, `5i` are 5) and a scale word multiplies (`5 million` is 5000000); a `-` glued to a preceding digit or
letter is a minus operator (the last number of "5-3" is 3). **Numbers match only by exact value** (answers are
exact rationals, never binary floats, so no tolerance is needed): `1450001` is wrong for `1450000`, `2.46` and
`2.549` are wrong for `2.5`, `0.75`, `3/4` and `6/8` are equal. Non-numeric answers are compared as texts,
ignoring case.

Labels (ANLI's entailment / neutral / contradiction by default): the last whole-word occurrence of any label in any
case wins ("... so it is not a contradiction; NEUTRAL" -> "neutral"). Beware that a negation after the answer
("Neutral, not contradiction") also counts as the last occurrence.

Gold answers: GSM8K's answer text (reasoning, then `#### 72`) gives what follows the last `####`; plain values
pass through the same normalisation (`72`, `72.0`, `"$1,234"`; a float is rounded to 6 decimal places, the only
rounding anywhere: a prediction must equal that decimal); for labels an integer (or a digit string) is an index into
`label_map` (default `0: entailment, 1: neutral, 2: contradiction`, the Hugging Face `anli` dataset), a single
letter `e`/`n`/`c` is the label it starts (ANLI's raw files), and text is matched against the labels.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..utils.columns import is_missing
from ..utils.number_words import scale_digits, sign_words, words_to_digits
from ..utils.numbers import (
    MAX_DIGITS,
    canonical_number,
    find_numbers,
    has_stray_numerals,
    normalize_number,
    normalize_text,
    number_value,
    numbers_match,
)
from .answer_text import (
    MAX_RESPONSE_CHARS,
    QUALIFIER,
    RETRACTION,
    SENTENCE_END,
    Sentences,
    box_touches_operator,
    find_boxes,
    mask_boxes,
    response_tail,
    strip_latex,
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

_UNIT_WORDS = re.compile(r"(?:[^\W\d_]|[\s=:.{}])*")  # letters, spaces, "=", ":", "." and braces (not numerals)
_ANSWER_MARKER = re.compile(r"\banswer\b\**[ \t]*(?:is\b[ \t]*:?|:|=)|####", re.IGNORECASE)
_SENTENCE_END = re.compile(SENTENCE_END, re.IGNORECASE)  # "5!" is a factorial, "approx." an abbreviation


def _clean(text: str) -> str:
    """What a person sees, in the characters the grammar reads (`trl_marl.utils.numbers.normalize_text`), with the
    sign words before a number in digits as signs (`"negative 5"` is -5; `trl_marl.utils.number_words.sign_words`)."""
    return sign_words(normalize_text(text))


def _read(text: str) -> str:
    """An answer's text as the grammar reads it: LaTeX removed, number words in digits."""
    return words_to_digits(strip_latex(text))


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
    if QUALIFIER.search(text):
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
    cleaned = strip_latex(_clean(str(text)))
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
            and not QUALIFIER.search(rest)
        ):
            return value
    return re.sub(r"\s+", " ", cleaned).strip().rstrip(".").strip()


def _fallback(text: str) -> str | None:
    """The last number of a text without final-answer statements (number words when it has no number in digits),
    unless a numeral that is no plain number follows it or its sentence holds a qualifier."""
    stripped = scale_digits(strip_latex(text))  # "5 dozen" is 60, "5 million" 5000000
    numbers = find_numbers(stripped)
    if not numbers and not has_stray_numerals(stripped, numbers):
        stripped = words_to_digits(stripped)
        numbers = find_numbers(stripped)
    if not numbers:
        return None
    last = numbers[-1]
    if has_stray_numerals(stripped[last.end() :], []):
        return None  # the text ends with a numeral that is no plain number ("... so 5e0", "... 5½")
    if Sentences(stripped).has_qualifier(last.start(), last.end()):
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
    boxes = find_boxes(text)
    masked = mask_boxes(text, boxes) if boxes else text
    cut = 0
    for match in RETRACTION.finditer(masked):  # box contents are blanked: a retraction outside boxes
        cut = match.end()
    if cut:
        text = text[cut:]
        boxes = find_boxes(text)
        masked = mask_boxes(text, boxes) if boxes else text
    sentences = Sentences(masked)
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
        if box_touches_operator(text, start, end) or sentences.has_qualifier(start, end):
            statements.append((start, None))
        else:
            statements.append((start, value))
    # A marker's span ends where the next marker or box starts ("The answer is 5 \\boxed{6}" is 5, then 6).
    markers = list(_ANSWER_MARKER.finditer(masked))
    boundaries = array("q", sorted([m.start() for m in markers] + [start for start, _, _, _ in boxes]))
    boundaries.append(len(text))
    for match in markers:
        limit = boundaries[bisect.bisect_right(boundaries, match.start())]
        found, stated, span_end = _after_marker(text, match.end(), limit, read_span)
        if not found:
            continue
        if stated is not None and sentences.has_qualifier(match.start(), span_end):
            stated = None
        statements.append((match.start(), stated))
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
        by_letter: dict[str, list[str]] = {}
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
