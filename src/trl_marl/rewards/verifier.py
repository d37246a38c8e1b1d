"""Verifiers for MAPoRL (Park et al., arXiv 2502.18439): answer extraction, rule-based and model-based scoring.

In MAPoRL every answer s_{t,a} of every agent at every debate turn is scored by a verifier, Verifier(q, s) in [0, 1],
and the influence-aware reward (Definition 1 of the paper) is built from those scores. This module provides the
verifiers, all with TRL's reward-function signature `f(prompts, completions, **kwargs) -> list[float]`:

- [`AnswerVerifier`]: rule-based. Extracts the final answer of a completion and compares it with the row's gold
  answer: 1.0 when they agree, 0.0 otherwise (an answer that cannot be extracted counts as wrong).
- [`ModelVerifier`]: model-based. An outcome reward model (`AutoModelForSequenceClassification` with
  `num_labels=1`) scores `template.format(question=..., response=...)`; the score is the sigmoid of its logit.
  `examples/train_verifier.py` trains one on a team's own, automatically labelled answers, as the paper does.
- [`VerifierServer`] / [`RemoteVerifier`]: the same scores over HTTP (a verifier on another GPU or machine),
  `POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`. `trl-marl serve-verifier`
  ([`serve_verifier_main`]) serves a saved model.

Answer extraction ([`extract_math_answer`], [`extract_label`], [`parse_gold`]) is usable on its own.

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

import argparse
import http.client
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, runtime_checkable

from ..utils.columns import MULTI_AGENT_KWARGS, AgentSelector, is_missing, select_texts
from ..utils.numbers import (
    MAX_DIGITS,
    canonical_number,
    find_numbers,
    normalize_number,
    number_value,
    numbers_match,
)
from ..utils.text import completion_text

__all__ = [
    "ANLI_LABELS",
    "DEFAULT_TEMPLATE",
    "AnswerVerifier",
    "BatchVerifier",
    "ModelVerifier",
    "RemoteVerifier",
    "VerifierError",
    "VerifierServer",
    "VerifierUnavailableError",
    "answers_match",
    "extract_label",
    "extract_math_answer",
    "normalize_answer",
    "parse_gold",
    "serve_verifier_main",
    "to_number",
]

logger = logging.getLogger(__name__)

ANLI_LABELS: tuple[str, str, str] = ("entailment", "neutral", "contradiction")
"""ANLI's labels in the order of the integer labels of the Hugging Face `anli` dataset (0, 1, 2)."""

DEFAULT_TEMPLATE = "{question}\n{response}"
"""How [`ModelVerifier`] joins a question and a response into the text it scores."""

VERIFIER_CONFIG_FILE = "verifier_config.json"
"""A file next to a saved verifier model with the settings it was trained with (its `template`)."""

TASKS = ("math", "label")

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


def _label_index_map(labels: Sequence[str], label_map: Mapping[int, str] | Sequence[str] | None) -> dict[int, str]:
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
        mapping = _label_index_map(labels, label_map)
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


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers of the reward-function API
# ---------------------------------------------------------------------------------------------------------------


@runtime_checkable
class BatchVerifier(Protocol):
    """What [`VerifierServer`] serves: anything with `score_batch(questions, responses, golds=None)`."""

    name: str

    def score_batch(
        self, questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None = None
    ) -> list[float]:
        """Scores responses to questions (golds: for rule-based verifiers)."""
        ...


def _prompt_text(prompt: Any) -> str:
    """The text of a prompt: a string, or the content of the last user message of a conversation.

    Args:
        prompt: A string or a list of chat messages.

    Returns:
        The text.
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, dict) for m in prompt):
        users = [m for m in prompt if m.get("role") == "user"]
        return completion_text(users[-1] if users else prompt[-1])
    return completion_text(prompt)


def _column(kwargs: Mapping[str, Any], name: str, owner: str, size: int, what: str, parameter: str) -> list[Any]:
    """A dataset column from a reward call's keyword arguments, with one value per completion.

    Args:
        kwargs: The keyword arguments of the reward call.
        name: The column.
        owner: The verifier's name, for error messages.
        size: Number of completions.
        what: What the column holds, for error messages (`"gold answer"`, `"question"`).
        parameter: The verifier's argument that names the column (`"gold_column"`), for error messages.

    Returns:
        The values.

    Raises:
        KeyError: The column is absent, or a row has no value in it (`None`/NaN); the message names the column.
        ValueError: The column does not hold one value per completion.
    """
    if name not in kwargs:
        available = sorted(k for k in kwargs if k not in MULTI_AGENT_KWARGS)
        raise KeyError(
            f"{owner} needs the {what} of every row in the dataset column {name!r}, but the reward function received "
            f"only the columns {available}. Add the column, or name the right one with `{parameter}=...`."
        )
    values = list(kwargs[name])
    if len(values) != size:
        raise ValueError(f"{owner}: column {name!r} has {len(values)} values for {size} completions.")
    for row, value in enumerate(values):
        if is_missing(value):
            raise KeyError(f"{owner}: row {row} has no {what} (column {name!r} is {value!r}).")
    return values


def _questions(
    prompts: Sequence[Any], kwargs: Mapping[str, Any], column: str | None, owner: str, size: int
) -> list[str]:
    """The question of every row: a dataset column, or the prompt text when `column` is `None`.

    Args:
        prompts: The prompts of the reward call.
        kwargs: Its keyword arguments.
        column: The question column, or `None` for the prompts.
        owner: The verifier's name, for error messages.
        size: Number of completions.

    Returns:
        The questions.
    """
    if column is None:
        if len(prompts) != size:
            raise ValueError(f"{owner}: {len(prompts)} prompts for {size} completions.")
        return [_prompt_text(p) for p in prompts]
    return [str(q) for q in _column(kwargs, column, owner, size, "question", "question_column")]


def _validate_pairs(questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None) -> None:
    """Checks that questions, responses (and golds) have one entry per item.

    Raises:
        ValueError: On a length mismatch.
    """
    if len(questions) != len(responses):
        raise ValueError(f"Got {len(questions)} questions for {len(responses)} responses.")
    if golds is not None and len(golds) != len(responses):
        raise ValueError(f"Got {len(golds)} gold answers for {len(responses)} responses.")


# ---------------------------------------------------------------------------------------------------------------
# Rule-based verifier
# ---------------------------------------------------------------------------------------------------------------


class _PicklableLock:
    """Verifiers hold a `threading.Lock` (the server calls them from several threads); pickle them without it."""

    _lock: threading.Lock

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


class AnswerVerifier(_PicklableLock):
    """Rule-based verifier: 1.0 when a completion's final answer equals the row's gold answer, else 0.0.

    The answer is extracted with [`extract_math_answer`] (`task="math"`, e.g. GSM8K) or [`extract_label`]
    (`task="label"`, e.g. ANLI), the gold answer with [`parse_gold`]; they are compared with [`answers_match`]. A
    completion without an extractable answer scores 0.0 and is counted in `num_unparseable` (out of `num_scored`),
    so a trainer can log how often the agents fail to state an answer.

    Args:
        task: `"math"` or `"label"`.
        gold_column: The dataset column holding the gold answer (GSM8K: `"answer"`; Hugging Face ANLI: `"label"`).
        labels: The label words of a label task.
        label_map: Integer gold label -> label word (default: ANLI's `0: entailment, 1: neutral, 2: contradiction`).
        agent_index: Which completions are scored: `None` the `completions` argument, an int `i` agent `i`'s
            (`agent_completions[i]`, passed by trl-marl's trainers).

    Example:

    ```python
    verifier = AnswerVerifier()
    verifier(prompts=["q"], completions=["9 * 2 = 18. The answer is 18."], answer=["9 * 2 = 18\\n#### 18"])  # [1.0]
    ```
    """

    def __init__(
        self,
        task: str = "math",
        gold_column: str = "answer",
        labels: Sequence[str] = ANLI_LABELS,
        label_map: Mapping[int, str] | Sequence[str] | None = None,
        agent_index: AgentSelector = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
        if task == "label" and not labels:
            raise ValueError("A label task needs at least one label.")
        self.name = "answer_verifier"
        self.__name__ = self.name  # TRL names reward functions after `__name__`
        self.task = task
        self.gold_column = gold_column
        self.labels = tuple(labels)
        self.label_map = _label_index_map(self.labels, label_map)
        self.agent_index = agent_index
        self.num_scored = 0
        self.num_unparseable = 0
        self._lock = threading.Lock()

    @property
    def unparseable_fraction(self) -> float:
        """Fraction of the responses scored so far that had no extractable answer (0.0 before any)."""
        return self.num_unparseable / self.num_scored if self.num_scored else 0.0

    def reset_counters(self) -> None:
        """Sets `num_scored` and `num_unparseable` back to zero."""
        with self._lock:
            self.num_scored = 0
            self.num_unparseable = 0

    def extract(self, response: str) -> str | None:
        """The normalised final answer of a response (`None` when there is none)."""
        if self.task == "label":
            return extract_label(response, self.labels)
        return extract_math_answer(response)

    def parse_gold(self, gold: Any) -> str:
        """The normalised gold answer (see [`parse_gold`])."""
        return parse_gold(gold, self.task, self.labels, self.label_map)

    def score(self, response: str, gold: Any) -> float:
        """Scores one response against a gold answer.

        Args:
            response: The response text.
            gold: The row's gold value (GSM8K answer text, a number, a label index or word).

        Returns:
            1.0 when the extracted answer matches the gold answer, 0.0 otherwise (no answer included).

        Raises:
            ValueError: If the gold answer is missing.
        """
        expected = self.parse_gold(gold)
        predicted = self.extract(completion_text(response))
        with self._lock:
            self.num_scored += 1
            if predicted is None:
                self.num_unparseable += 1
        if predicted is None:
            return 0.0
        if self.task == "label":
            return 1.0 if predicted.casefold() == expected.casefold() else 0.0
        return 1.0 if answers_match(predicted, expected) else 0.0

    def score_batch(
        self, questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None = None
    ) -> list[float]:
        """Scores responses against gold answers (the questions are not needed; the server API passes them).

        Raises:
            ValueError: If `golds` is missing or lengths differ.
        """
        if golds is None:
            raise ValueError("AnswerVerifier needs the gold answers: send `golds` with the responses.")
        _validate_pairs(questions, responses, golds)
        return [self.score(response, gold) for response, gold in zip(responses, golds)]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Scores completions against the gold column (TRL reward-function signature).

        Args:
            prompts: The prompts (unused).
            completions: The completions (strings or chat messages).
            **kwargs: Dataset columns, among them `gold_column`, and trl-marl's multi-agent arguments.

        Returns:
            1.0 or 0.0 per completion.

        Raises:
            KeyError: If the gold column is missing, or a row has no gold value.
        """
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", self.name)
        golds = _column(kwargs, self.gold_column, self.name, len(texts), "gold answer", "gold_column")
        return [self.score(text, gold) for text, gold in zip(texts, golds)]

    def __repr__(self) -> str:
        return f"AnswerVerifier(task={self.task!r}, gold_column={self.gold_column!r})"


# ---------------------------------------------------------------------------------------------------------------
# Model-based verifier
# ---------------------------------------------------------------------------------------------------------------


def _sigmoid(x: float) -> float:
    """The logistic function, without overflow for large |x|."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


def _read_verifier_config(path: str) -> dict[str, Any]:
    """The `verifier_config.json` saved next to a verifier model (empty when there is none)."""
    file = os.path.join(path, VERIFIER_CONFIG_FILE)
    if not os.path.isfile(file):
        return {}
    with open(file) as f:
        return json.load(f)


class ModelVerifier(_PicklableLock):
    """Model-based verifier: an outcome reward model scores each (question, response) pair in [0, 1].

    The model is an `AutoModelForSequenceClassification` with `num_labels=1` (a scalar head over a causal LM, as TRL's
    reward models). The text `template.format(question=q, response=s)` is tokenized with the tokenizer's special
    tokens, cut to its *last* `max_length` tokens (the final answer sits at the end), right-padded with the model's
    `config.pad_token_id`, and the score is `sigmoid(logit)` of the logit the model itself pools: transformers'
    sequence-classification head takes the rightmost token that is not the pad token, i.e. the last token of the
    text. A text that ends with the pad token (pad = eos and a trailing eos) is therefore pooled one token
    earlier: use a distinct pad token, or a template that does not end with it.

    Args:
        model_or_path: A sequence-classification model, or a directory / Hub id to load one from.
        tokenizer: Its tokenizer. Default: loaded from `model_or_path` (with `trl_marl.load_tokenizer`, which also
            handles `trl_marl.toy` tokenizers). A tokenizer without a pad token gets its eos token.
        batch_size: Texts per forward pass.
        max_length: Longest text in tokens; longer texts keep their last `max_length` tokens.
        template: Format string with `{question}` and `{response}` fields, or a callable `(question, response) ->
            text`. Default: the `template` saved in `verifier_config.json` next to a loaded model (written by
            `examples/train_verifier.py`), else [`DEFAULT_TEMPLATE`] (`"{question}\\n{response}"`).
        question_column: The dataset column holding the question; `None` uses the prompt text (the last user
            message of a conversation).
        agent_index: Which completions are scored (see [`AnswerVerifier`]).
        device: Moves the model there (default: leave it where it is).
        model_init_kwargs: Keyword arguments of `from_pretrained` when a path is given (e.g. `torch_dtype`).

    Raises:
        ValueError: If the model does not have exactly one label.
    """

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any = None,
        batch_size: int = 16,
        max_length: int = 1024,
        template: str | Callable[[str, str], str] | None = None,
        question_column: str | None = "question",
        agent_index: AgentSelector = None,
        device: Any = None,
        model_init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        if max_length < 1:
            raise ValueError(f"`max_length` must be >= 1, got {max_length}.")
        saved: dict[str, Any] = {}
        if isinstance(model_or_path, (str, os.PathLike)):
            from transformers import AutoModelForSequenceClassification

            from ..team import load_tokenizer

            path = os.fspath(model_or_path)
            saved = _read_verifier_config(path) if os.path.isdir(path) else {}
            model = AutoModelForSequenceClassification.from_pretrained(path, **(model_init_kwargs or {}))
            if tokenizer is None:
                tokenizer = load_tokenizer(path)
        else:
            model = model_or_path
            if tokenizer is None:
                name = getattr(getattr(model, "config", None), "_name_or_path", None)
                if not name:
                    raise ValueError("Pass `tokenizer`: the model has no name or path to load one from.")
                from ..team import load_tokenizer

                tokenizer = load_tokenizer(name)
        num_labels = getattr(model.config, "num_labels", None)
        if num_labels != 1:
            raise ValueError(
                f"A verifier model must output one score per text (num_labels=1), but {type(model).__name__} has "
                f"num_labels={num_labels}. Load it with `AutoModelForSequenceClassification.from_pretrained(path, "
                "num_labels=1)` and train the head (see examples/train_verifier.py)."
            )
        if tokenizer.pad_token_id is None:
            if tokenizer.eos_token is None:
                raise ValueError("The tokenizer has neither a pad nor an eos token: set `tokenizer.pad_token`.")
            tokenizer.pad_token = tokenizer.eos_token
        if model.config.pad_token_id is None:
            # The sequence-classification head finds the last token through the pad id: it must be set.
            model.config.pad_token_id = tokenizer.pad_token_id
        if device is not None:
            model.to(device)
        model.eval()
        self.name = "model_verifier"
        self.__name__ = self.name
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.template = template if template is not None else saved.get("template", DEFAULT_TEMPLATE)
        self.question_column = question_column
        self.agent_index = agent_index
        self._lock = threading.Lock()

    @property
    def device(self) -> Any:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    def format(self, question: str, response: str) -> str:
        """The text the model scores for a (question, response) pair."""
        if callable(self.template):
            return self.template(question, response)
        return self.template.format(question=question, response=response)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of texts: special tokens added, cut to the last `max_length` tokens, never empty."""
        ids = self.tokenizer(list(texts), add_special_tokens=True, truncation=False)["input_ids"]
        fallback = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.pad_id
        return [list(row[-self.max_length :]) if row else [fallback] for row in ids]

    @property
    def pad_id(self) -> int:
        """The pad id the model's head pools with (`model.config.pad_token_id`)."""
        return int(self.model.config.pad_token_id)

    def logits(self, texts: Sequence[str]) -> list[float]:
        """The model's pooled logit for each text (before the sigmoid).

        Texts are batched by length (at most `batch_size` per forward pass) and right-padded; results keep the
        input order.
        """
        import torch

        if not texts:
            return []
        ids = self.encode(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[float] = [0.0] * len(ids)
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                width = max(len(ids[i]) for i in chunk)
                input_ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    input_ids[row, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                    attention_mask[row, : len(ids[i])] = 1
                device = self.device
                logits = self.model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
                for row, i in enumerate(chunk):
                    out[i] = float(logits[row, 0].float())
        return out

    def score_batch(
        self, questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None = None
    ) -> list[float]:
        """Scores (question, response) pairs: sigmoid of the model's logit, in [0, 1] (`golds` is ignored)."""
        _validate_pairs(questions, responses, None)
        texts = [self.format(str(q), completion_text(r)) for q, r in zip(questions, responses)]
        return [_sigmoid(x) for x in self.logits(texts)]

    def score(self, question: str, response: str) -> float:
        """Scores one (question, response) pair in [0, 1]."""
        return self.score_batch([question], [response])[0]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Scores completions (TRL reward-function signature); the question comes from `question_column`.

        Raises:
            KeyError: If the question column is missing.
        """
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", self.name)
        questions = _questions(prompts, kwargs, self.question_column, self.name, len(texts))
        return self.score_batch(questions, texts)

    def __repr__(self) -> str:
        return f"ModelVerifier(model={type(self.model).__name__}, batch_size={self.batch_size})"


# ---------------------------------------------------------------------------------------------------------------
# HTTP: server and client
# ---------------------------------------------------------------------------------------------------------------


class VerifierError(RuntimeError):
    """A remote verifier rejected a request or answered something that is not a list of scores."""


class VerifierUnavailableError(VerifierError):
    """A remote verifier could not be reached (refused, timed out, or server errors) after every retry."""


class _BadRequest(ValueError):
    """A request the server refuses with HTTP 400."""


class _VerifierHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that holds the verifier its handlers call."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], verifier: Any, max_body_bytes: int) -> None:
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.num_requests = 0
        self.counter_lock = threading.Lock()
        super().__init__(address, _VerifierHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logs a failed connection (a client that timed out and left is routine) instead of printing it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("verifier server: connection from %s failed: %s", client_address, error)
        else:
            logger.exception("verifier server: error while handling a request from %s", client_address)


class _VerifierHandler(BaseHTTPRequestHandler):
    """`GET /health` and `POST /score` (JSON in, JSON out; one request per connection)."""

    server: _VerifierHTTPServer
    server_version = "trl-marl-verifier"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's signature)
        logger.debug("verifier server: " + format, *args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            verifier = self.server.verifier
            name = getattr(verifier, "name", type(verifier).__name__)
            self._send(200, {"status": "ok", "verifier": name, "requests": self.server.num_requests})
        else:
            self._send(404, {"error": f"unknown path {self.path!r}; use GET /health or POST /score"})

    def _payload(self) -> tuple[list[str], list[str], list[Any] | None]:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise _BadRequest("missing Content-Length")
        try:
            length = int(length_header)
        except ValueError as exc:
            raise _BadRequest(f"bad Content-Length {length_header!r}") from exc
        if length < 0 or length > self.server.max_body_bytes:
            raise _BadRequest(f"body of {length} bytes exceeds the limit of {self.server.max_body_bytes}")
        try:
            data = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _BadRequest('expected a JSON object {"questions": [...], "responses": [...]}')
        questions, responses, golds = data.get("questions"), data.get("responses"), data.get("golds")
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise _BadRequest('"responses" must be a list of strings')
        if questions is None:
            questions = [""] * len(responses)
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise _BadRequest('"questions" must be a list of strings')
        if golds is not None and not isinstance(golds, list):
            raise _BadRequest('"golds" must be a list')
        try:
            _validate_pairs(questions, responses, golds)
        except ValueError as exc:
            raise _BadRequest(str(exc)) from exc
        return questions, responses, golds

    def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
        if self.path.split("?", 1)[0].rstrip("/") != "/score":
            self._send(404, {"error": f"unknown path {self.path!r}; use POST /score"})
            return
        with self.server.counter_lock:
            self.server.num_requests += 1
        try:
            questions, responses, golds = self._payload()
            verifier = self.server.verifier
            if golds is None:
                scores = verifier.score_batch(questions, responses)
            else:
                scores = verifier.score_batch(questions, responses, golds)
            scores = [float(s) for s in scores]
            if len(scores) != len(responses) or not all(math.isfinite(s) for s in scores):
                raise RuntimeError(f"the verifier returned {len(scores)} scores (finite: "
                                   f"{all(math.isfinite(s) for s in scores)}) for {len(responses)} responses")
        except (_BadRequest, ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": f"{type(exc).__name__}: {exc}"})
            return
        except Exception as exc:  # a verifier failure: report it, keep serving
            logger.exception("verifier server: scoring failed")
            self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._send(200, {"scores": scores})


class VerifierServer:
    """Serves a verifier over HTTP (a `ThreadingHTTPServer` in a background thread).

    Endpoints (JSON):

    - `POST /score` with `{"questions": [...], "responses": [...]}` (and `"golds": [...]` for a rule-based verifier)
      returns `{"scores": [...]}`, one float per response. A malformed request gets 400 with `{"error": ...}`, a
      verifier failure 500 (the server keeps running).
    - `GET /health` returns `{"status": "ok", "verifier": name, "requests": n}`.

    There is no authentication: keep the default loopback `host` unless the network is trusted.

    Args:
        verifier: Anything with `score_batch(questions, responses, golds=None) -> list[float]`: a
            [`ModelVerifier`], an [`AnswerVerifier`], ...
        host: Address to bind.
        port: Port to bind (0: a free port, see `port` after `start()`).
        max_body_bytes: Largest accepted request body.

    Example:

    ```python
    with VerifierServer(ModelVerifier("my-verifier")) as server:
        remote = RemoteVerifier(server.url)
        remote(prompts, completions, question=questions)
    ```
    """

    def __init__(
        self, verifier: BatchVerifier, host: str = "127.0.0.1", port: int = 0, max_body_bytes: int = 64 << 20
    ) -> None:
        if not callable(getattr(verifier, "score_batch", None)):
            raise TypeError(
                f"{type(verifier).__name__} has no `score_batch(questions, responses, golds=None)` method."
            )
        self.verifier = verifier
        self.host = host
        self.max_body_bytes = max_body_bytes
        self._requested_port = port
        self._httpd: _VerifierHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> _VerifierHTTPServer:
        if self._httpd is not None:
            raise RuntimeError("The verifier server is already running.")
        self._httpd = _VerifierHTTPServer((self.host, self._requested_port), self.verifier, self.max_body_bytes)
        return self._httpd

    @property
    def port(self) -> int:
        """The bound port (the requested one before `start()`)."""
        return self._httpd.server_address[1] if self._httpd is not None else self._requested_port

    @property
    def url(self) -> str:
        """`http://host:port` of the running server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server is bound and serving."""
        return self._httpd is not None

    def start(self) -> VerifierServer:
        """Binds and serves in a daemon thread; returns `self` (`url` is valid from now on)."""
        httpd = self._bind()
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="verifier-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self, ready: Callable[[str], None] | None = None) -> None:
        """Binds and serves in the calling thread until `stop()` is called from another thread or an exception
        (such as `KeyboardInterrupt`) stops it; the socket is closed either way.

        Args:
            ready: Called with `url` once the socket is bound, before serving.

        Raises:
            OSError: If the address cannot be bound.
        """
        httpd = self._bind()
        try:
            if ready is not None:
                ready(self.url)
            httpd.serve_forever(poll_interval=0.2)
        finally:
            httpd.server_close()
            self._httpd = None

    def stop(self) -> None:
        """Stops serving and closes the socket (requests still being handled finish in their daemon threads)."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5.0)
        self._httpd, self._thread = None, None

    def __enter__(self) -> VerifierServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class RemoteVerifier:
    """Client of a [`VerifierServer`] with the reward-function API of the in-process verifiers.

    Each request has a per-request `timeout`. Connection errors, timeouts and HTTP 5xx answers are retried `retries`
    times, waiting `backoff * 2**k` seconds before retry k + 1; after the last retry a [`VerifierUnavailableError`]
    naming the URL is raised. So a call never takes longer than about
    `(retries + 1) * timeout + backoff * (2**retries - 1)` seconds (`max_wait_s`). HTTP 4xx answers (a malformed
    request) and answers that are not a list of scores raise [`VerifierError`] at once. (The bound does not cover
    resolving a host name, which the operating system does; an IP address or `localhost` avoids it.)

    Args:
        url: The server, `http://host:port` (a trailing `/score` is accepted).
        timeout: Seconds per request (connecting, and each wait for data).
        retries: Retries after the first attempt.
        backoff: Base of the exponential wait between attempts, in seconds.
        question_column: The dataset column holding the question; `None` uses the prompt text.
        gold_column: A dataset column sent as `golds` (for a served [`AnswerVerifier`]); `None` sends none.
        agent_index: Which completions are scored (see [`AnswerVerifier`]).
        batch_size: Responses per request (`None`: all of a call in one request).
        proxies: Proxies for `urllib` (default none: environment proxy settings are ignored, so a loopback verifier
            is never sent through a proxy).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        question_column: str | None = "question",
        gold_column: str | None = None,
        agent_index: AgentSelector = None,
        batch_size: int | None = None,
        proxies: dict[str, str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"`timeout` must be > 0, got {timeout}.")
        if retries < 0 or backoff < 0:
            raise ValueError("`retries` and `backoff` must be >= 0.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1 or None, got {batch_size}.")
        base = url.strip().rstrip("/")
        if base.endswith("/score"):
            base = base[: -len("/score")]
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"The verifier URL must start with http:// or https://, got {url!r}.")
        self.name = "remote_verifier"
        self.__name__ = self.name
        self.url = base
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.question_column = question_column
        self.gold_column = gold_column
        self.agent_index = agent_index
        self.batch_size = batch_size
        self.proxies = dict(proxies or {})

    @property
    def max_wait_s(self) -> float:
        """An upper bound (up to network jitter) of how long one request may take with all its retries."""
        return (self.retries + 1) * self.timeout + self.backoff * (2**self.retries - 1)

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """Sends one request with retries and returns the decoded JSON answer.

        Raises:
            VerifierUnavailableError: Every attempt failed with a connection error, a timeout or HTTP 5xx.
            VerifierError: HTTP 4xx, or an answer that is not JSON.
        """
        url = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(self.proxies))
        attempts = self.retries + 1
        last = "no attempt"
        for attempt in range(attempts):
            request = urllib.request.Request(
                url, data=data, method=method, headers={"Content-Type": "application/json"}
            )
            try:
                with opener.open(request, timeout=self.timeout) as response:
                    body = response.read()
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if 500 <= exc.code < 600:
                    last = f"HTTP {exc.code}: {detail}"
                else:
                    raise VerifierError(
                        f"The verifier at {url} rejected the request: HTTP {exc.code}: {detail}"
                    ) from exc
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    last = f"timed out after {self.timeout:g} s"
                else:
                    last = f"{type(reason).__name__}: {reason}"
            else:
                try:
                    return json.loads(body)
                except ValueError as exc:
                    raise VerifierError(
                        f"The verifier at {url} answered something that is not JSON: {body[:200]!r}"
                    ) from exc
            logger.warning("verifier at %s: attempt %d/%d failed (%s)", url, attempt + 1, attempts, last)
            if attempt + 1 < attempts:
                time.sleep(self.backoff * 2**attempt)
        raise VerifierUnavailableError(
            f"The verifier at {url} is unavailable: {attempts} attempt(s) failed (timeout {self.timeout:g} s per "
            f"request); last error: {last}. Is `trl-marl serve-verifier` running there?"
        )

    def health(self) -> dict[str, Any]:
        """`GET /health` of the server (with retries)."""
        return self._request("GET", "/health")

    def score_batch(
        self, questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None = None
    ) -> list[float]:
        """Scores (question, response) pairs on the server (one request per `batch_size` pairs).

        Raises:
            VerifierUnavailableError: The server could not be reached after every retry.
            VerifierError: The server rejected the request or answered no list of scores.
        """
        _validate_pairs(questions, responses, golds)
        size = self.batch_size or max(len(responses), 1)
        scores: list[float] = []
        for start in range(0, len(responses), size):
            payload: dict[str, Any] = {
                "questions": [str(q) for q in questions[start : start + size]],
                "responses": [completion_text(r) for r in responses[start : start + size]],
            }
            if golds is not None:
                payload["golds"] = [_jsonable(g) for g in golds[start : start + size]]
            answer = self._request("POST", "/score", payload)
            chunk = answer.get("scores") if isinstance(answer, dict) else None
            if not isinstance(chunk, list) or len(chunk) != len(payload["responses"]) or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) for s in chunk
            ):
                raise VerifierError(
                    f"The verifier at {self.url} answered {str(answer)[:200]!r}, not one score per response."
                )
            scores.extend(float(s) for s in chunk)
        return scores

    def score(self, question: str, response: str) -> float:
        """Scores one (question, response) pair on the server."""
        return self.score_batch([question], [response])[0]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Scores completions on the server (TRL reward-function signature).

        Raises:
            KeyError: If the question (or gold) column is missing.
            VerifierUnavailableError: The server could not be reached after every retry.
        """
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", self.name)
        questions = _questions(prompts, kwargs, self.question_column, self.name, len(texts))
        golds = None
        if self.gold_column is not None:
            golds = _column(kwargs, self.gold_column, self.name, len(texts), "gold answer", "gold_column")
        return self.score_batch(questions, texts, golds)

    def __repr__(self) -> str:
        return f"RemoteVerifier(url={self.url!r}, timeout={self.timeout:g}, retries={self.retries})"


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The `error` message of a JSON error answer, else the start of its body."""
    try:
        body = exc.read()
    except Exception:  # the body may be gone with the connection
        return str(exc.reason)
    try:
        data = json.loads(body)
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])
    except ValueError:
        pass
    return body[:200].decode(errors="replace") or str(exc.reason)


def _jsonable(value: Any) -> Any:
    """A gold value as JSON accepts it (numpy scalars and the like become Python numbers or strings)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# ---------------------------------------------------------------------------------------------------------------
# `trl-marl serve-verifier`
# ---------------------------------------------------------------------------------------------------------------


def _serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trl-marl serve-verifier",
        description="Serve a verifier model (AutoModelForSequenceClassification, num_labels=1) over HTTP: "
        'POST /score {"questions": [...], "responses": [...]} -> {"scores": [...]}, GET /health.',
    )
    parser.add_argument("--model", required=True, help="Directory or Hub id of the verifier model.")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default: loopback only).")
    parser.add_argument("--port", type=int, default=8000, help="Port to bind (0: a free port). Default: 8000.")
    parser.add_argument("--batch-size", type=int, default=16, help="Texts per forward pass. Default: 16.")
    parser.add_argument("--max-length", type=int, default=1024, help="Longest text in tokens. Default: 1024.")
    parser.add_argument("--template", default=None,
                        help="Format string with {question} and {response} (default: the model's saved template, "
                        "else '{question}\\n{response}').")
    parser.add_argument("--device", default=None, help="Device for the model, e.g. cuda:0 (default: cpu).")
    return parser


def serve_verifier_main(argv: list[str]) -> int:
    """`trl-marl serve-verifier`: loads a [`ModelVerifier`] and serves it until interrupted (blocking).

    Args:
        argv: Command-line arguments (without the program and subcommand names): `--model PATH` and optionally
            `--host`, `--port`, `--batch-size`, `--max-length`, `--template`, `--device`.

    Returns:
        The exit status: 0 after an interrupt (Ctrl-C or SIGTERM), 1 when the model cannot be loaded or the port
        cannot be bound.
    """
    args = _serve_parser().parse_args(argv)
    try:
        verifier = ModelVerifier(args.model, batch_size=args.batch_size, max_length=args.max_length,
                                 template=args.template, device=args.device)
    except (OSError, ValueError) as exc:
        print(f"trl-marl serve-verifier: cannot load {args.model!r}: {exc}", file=sys.stderr)
        return 1
    server = VerifierServer(verifier, host=args.host, port=args.port)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"trl-marl serve-verifier: warning: serving on {args.host} without authentication.", file=sys.stderr)

    previous = None
    if threading.current_thread() is threading.main_thread():

        def _interrupt(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops the server as Ctrl-C does
    try:
        server.serve_forever(
            ready=lambda url: print(f"Serving {args.model} on {url} (POST /score, GET /health); Ctrl-C to stop.",
                                    flush=True)
        )
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"trl-marl serve-verifier: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    print("Verifier server stopped.", flush=True)
    return 0
