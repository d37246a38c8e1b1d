"""Answer extraction for MAPoRL's verifiers (Park et al., arXiv 2502.18439): the final answer of a response, the
gold answer of a row, and whether they agree. Used by `trl_marl.rewards.verifier.AnswerVerifier`; usable on its own.

Math answers are read like security-sensitive input: a policy will find any way to get a wrong answer accepted. First
invisible format characters (zero-width spaces and joiners, direction marks, soft hyphens) are removed and the Unicode
minus (U+2212) is read as `-`. Then the first rule that applies wins:

1. the last complete `\\boxed{...}` (nested braces allowed; `\\fbox{...}` too): its content with LaTeX markup removed
   (`\\frac{a}{b}` -> `a/b`, `\\text{...}` -> its text); the number when it holds exactly one and otherwise only words
   (units), else the text (`\\boxed{1450000 \\text{ or } 1450001}` is the text "1450000 or 1450001", which matches
   no number);
2. the last `#### ` (GSM8K's marker), then
3. the last "answer is X", "answer: X" or "answer = X" (any case, "final answer", Markdown bold allowed): the
   numbers of the rest of the marker's sentence (up to `.`, `!`, `?` or `;` before a space or the line end, or the
   next non-blank line when the marker ends its line). One value (repeated or not) is the answer; **several
   different values ("1450000 or 1450001", "18 (9 * 2)") are an ambiguous answer: no answer**, and no later rule
   applies; no number at all lets the next rule apply;
4. the last number of the text;
5. otherwise no answer (`None`).

What a number is, its canonical form and how two numbers compare are the rules of `trl_marl.utils.numbers`, the one
normaliser of the package (the data loaders use it too). In short: ASCII digits only (no other scripts' digits, no
superscripts); an optional sign, `$`, `%` (`50%` is 50), thousands separators in groups of three, decimals,
fractions `3/4`; no scientific notation (`1e6` holds no number); at most 50 digits (a longer number is no answer);
a `-` glued to a preceding digit or letter is a minus operator (the last number of "5-3" is 3). **An integer gold
answer matches only the exact value** (`1450001` is wrong for `1450000`, `1450000.0` is right), a fraction gold
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

import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import Any

from ..utils.columns import is_missing
from ..utils.numbers import (
    MAX_DIGITS,
    canonical_number,
    find_numbers,
    normalize_number,
    number_value,
    numbers_match,
)

__all__ = [
    "ANLI_LABELS",
    "TASKS",
    "answers_match",
    "extract_label",
    "extract_math_answer",
    "label_index_map",
    "normalize_answer",
    "parse_gold",
    "to_number",
]

ANLI_LABELS: tuple[str, str, str] = ("entailment", "neutral", "contradiction")
"""ANLI's labels in the order of the integer labels of the Hugging Face `anli` dataset (0, 1, 2)."""

TASKS = ("math", "label")
"""What a verifier checks: a numeric answer (`"math"`) or a label (`"label"`)."""

# ---------------------------------------------------------------------------------------------------------------
# Answer extraction and normalisation
# ---------------------------------------------------------------------------------------------------------------

_UNIT_WORDS = re.compile(r"(?:[^\W\d_]|[\s=:.])*")  # letters, spaces, "=", ":" and "."
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_HASHES = re.compile(r"####")
_ANSWER_MARKER = re.compile(r"\banswer\b\**[ \t]*(?:is\b[ \t]*:?|:|=)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?;](?=\s|$)")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_LATEX_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mathbf|textit|mbox|operatorname)\s*\{([^{}]*)\}")
_LATEX_DROP = re.compile(r"\\(?:left|right|displaystyle|!|,|;|:| )|\^\s*\{?\\circ\}?|\^\\circ")
# Invisible format characters (soft hyphen, zero-width spaces and joiners, direction marks and isolates, word
# joiner, invisible operators, byte order mark): removed, so the verifier reads what a person sees.
_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _clean(text: str) -> str:
    """Removes invisible format characters and writes the Unicode minus sign (U+2212) as `-`."""
    return _INVISIBLE.sub("", text).replace("\u2212", "-")


def _last_boxed(text: str) -> str | None:
    """The content of the last complete `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) of a text.

    Braces are matched in one pass over the text, so the time is linear in its length whatever it holds.

    Args:
        text: The text.

    Returns:
        The raw content, or `None` when there is no complete boxed expression.
    """
    markers = list(_BOXED.finditer(text))
    if not markers:
        return None
    closing: dict[int, int] = {}
    stack: list[int] = []
    for index, char in enumerate(text):
        if char == "{":
            stack.append(index)
        elif char == "}" and stack:
            closing[stack.pop()] = index
    for match in reversed(markers):
        end = match.end()
        if end < len(text) and text[end] == "{":
            if end in closing:
                return text[end + 1 : closing[end]]
        else:  # `\boxed 5`: the next whitespace-free token
            token = re.match(r"[^\s$]+", text[end:])
            if token:
                return token.group(0)
    return None


def _strip_latex(text: str) -> str:
    """Removes common LaTeX markup from an answer (`\\frac`, `\\text`, `\\left`, `\\$`, `{,}`, `^\\circ`, ...).

    Args:
        text: The text, e.g. the content of a `\\boxed{...}`.

    Returns:
        The text with the markup replaced by plain text (`\\frac{3}{4}` -> `3/4`).
    """
    text = text.replace("{,}", ",").replace("\\$", "$").replace("\\%", "%")
    for _ in range(4):  # nested \text{\frac{..}{..}} and the like
        new = _LATEX_TEXT.sub(r"\1", _LATEX_FRAC.sub(r"\1/\2", text))
        if new == text:
            break
        text = new
    text = _LATEX_DROP.sub("", text)
    return text.strip()


def _span_answer(span: str) -> tuple[bool, str | None]:
    """The one number an answer span states.

    Args:
        span: The text after an answer marker, up to the end of its sentence.

    Returns:
        `(False, None)` when the span holds no number; `(True, value)` when all its numbers have one canonical value;
        `(True, None)` when it holds several different values ("1450000 or 1450001": ambiguous, no answer) or a
        number that is too long or has a zero denominator.
    """
    matches = find_numbers(_strip_latex(span))
    if not matches:
        return False, None
    values = {canonical_number(match.group(0)) for match in matches}
    if len(values) != 1 or None in values:
        return True, None
    return True, values.pop()


def _first_sentence(line: str) -> str:
    """A line up to its first sentence end (`.`, `!`, `?` or `;` before a space or the end; `2.5` is no end)."""
    end = _SENTENCE_END.search(line)
    return line[: end.start()] if end else line


def _after_marker(text: str, end: int) -> tuple[bool, str | None]:
    """The answer stated after a marker ending at `end`: in the rest of its sentence, or the next non-blank line's.

    Args:
        text: The text.
        end: Index just after the marker.

    Returns:
        As [`_span_answer`]: `(False, None)` when the marker is followed by no number (the next rule applies),
        `(True, value)` for an answer, `(True, None)` for an ambiguous one (no answer, and no other rule applies).
    """
    lines = text[end:].split("\n")
    found, value = _span_answer(_first_sentence(lines[0]))
    if found or lines[0].strip(" \t*:$"):
        return found, value
    for line in lines[1:]:
        if line.strip():
            return _span_answer(_first_sentence(line))
    return False, None


def normalize_answer(text: str) -> str:
    """Normalises an answer string: a lone number becomes its canonical form, other text is cleaned of LaTeX.

    Args:
        text: An answer, e.g. `"$1,234.00"`, `"\\frac{3}{4}"`, `"18 dollars"` or `"x+1"`.

    Returns:
        The canonical number (`trl_marl.utils.numbers`) when the (LaTeX-stripped) text holds exactly one number and
        otherwise only words, spaces, `=`, `:` or `.` (`"1234"`, `"3/4"`, `"18"`, `"x = 5"` -> `"5"`); otherwise
        the stripped text without a trailing period (`"x+1"`, `"1450000 or 1450001"`).
    """
    cleaned = _strip_latex(_clean(str(text)))
    numbers = find_numbers(cleaned)
    if len(numbers) == 1:
        number = numbers[0]
        # Words around the number are units or a variable name ("18 dollars", "x = 5"); an operator makes it an
        # expression ("x+1"), which is compared as text.
        rest = cleaned[: number.start()] + " " + cleaned[number.end() :]
        value = canonical_number(number.group(0))
        if value is not None and _UNIT_WORDS.fullmatch(rest):
            return value
    return re.sub(r"\s+", " ", cleaned).strip().rstrip(".").strip()


def extract_math_answer(text: str | None) -> str | None:
    """Extracts the final answer of a math response (rules in the module docstring).

    Args:
        text: The response.

    Returns:
        The normalised answer (a canonical number such as `"1234"`, `"-3"`, `"0.5"`, `"3/4"`, or the text of a
        boxed non-numeric answer), or `None` when the response has no answer or an ambiguous one.

    Example:

    ```python
    extract_math_answer("So she makes 9 * 2 = $18.\\n#### 18")  # "18"
    extract_math_answer("The answer is \\\\boxed{\\\\frac{3}{4}}")  # "3/4"
    extract_math_answer("The answer is 1450000 or 1450001.")  # None: two different numbers
    extract_math_answer("I don't know.")  # None
    ```
    """
    if not text:
        return None
    text = _clean(str(text))
    boxed = _last_boxed(text)
    if boxed is not None:
        value = normalize_answer(boxed)
        if value:
            return value
    for marker in (_HASHES, _ANSWER_MARKER):
        last = None
        for last in marker.finditer(text):  # noqa: B007 - only the last marker counts
            pass
        if last is not None:
            found, value = _after_marker(text, last.end())
            if found:
                return value
    numbers = find_numbers(_strip_latex(text))
    return canonical_number(numbers[-1].group(0)) if numbers else None


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


