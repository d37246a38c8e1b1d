"""Verifiers for MAPoRL (Park et al., arXiv 2502.18439): rule-based and model-based scoring.

In MAPoRL every answer s_{t,a} of every agent at every debate turn is scored by a verifier, Verifier(q, s) in [0, 1],
and the influence-aware reward (Definition 1 of the paper) is built from those scores. This module provides the
verifiers, all with TRL's reward-function signature `f(prompts, completions, **kwargs) -> list[float]`:

- [`AnswerVerifier`]: rule-based. Extracts the final answer of a completion and compares it with the row's gold
  answer: 1.0 when they agree, 0.0 otherwise (an answer that cannot be extracted counts as wrong).
- [`ModelVerifier`]: model-based. An outcome reward model (`AutoModelForSequenceClassification` with
  `num_labels=1`) scores `template.format(question=..., response=...)`; the score is the sigmoid of its logit.
  `examples/train_verifier.py` trains one on a team's own, automatically labelled answers, as the paper does.

The same scores over HTTP are in `trl_marl.rewards.remote` ([`~trl_marl.rewards.remote.VerifierServer`],
[`~trl_marl.rewards.remote.RemoteVerifier`]; `trl-marl serve-verifier`, `trl_marl.scripts.serve_verifier`, serves a
saved model). Answer extraction and its rules are in `trl_marl.rewards.answers`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from ..utils.columns import MULTI_AGENT_KWARGS, AgentSelector, is_missing, select_texts
from ..utils.text import completion_text
from .answers import (
    ANLI_LABELS,
    MAX_RESPONSE_CHARS,
    TASKS,
    answers_match,
    extract_label,
    extract_math_answer,
    label_index_map,
    parse_gold,
    response_tail,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "AnswerVerifier",
    "BatchVerifier",
    "ModelVerifier",
]

logger = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "{question}\n{response}"
"""How [`ModelVerifier`] joins a question and a response into the text it scores."""

CHARS_PER_TOKEN = 32
"""[`ModelVerifier`] keeps the last `max_length * CHARS_PER_TOKEN` characters of a text before tokenizing it."""

VERIFIER_CONFIG_FILE = "verifier_config.json"
"""A file next to a saved verifier model with the settings it was trained with (its `template`)."""


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


def prompt_text(prompt: Any) -> str:
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


def gold_values(kwargs: Mapping[str, Any], name: str, owner: str, size: int, what: str, parameter: str) -> list[Any]:
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


def question_texts(
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
        return [prompt_text(p) for p in prompts]
    return [str(q) for q in gold_values(kwargs, column, owner, size, "question", "question_column")]


def validate_pairs(questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None) -> None:
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
        max_response_chars: The most characters of a response that are read: its last ones, from the first line
            after the cut (`trl_marl.rewards.answers.response_tail`; default
            `trl_marl.rewards.answers.MAX_RESPONSE_CHARS`, 32,768), so a response of megabytes is scored as fast as
            one of this length.

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
        max_response_chars: int = MAX_RESPONSE_CHARS,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"Unknown task {task!r}; choose one of {TASKS}.")
        response_tail("", max_response_chars)  # checks the value, with a message that names it
        if task == "label" and not labels:
            raise ValueError("A label task needs at least one label.")
        self.name = "answer_verifier"
        self.__name__ = self.name  # TRL names reward functions after `__name__`
        self.task = task
        self.gold_column = gold_column
        self.labels = tuple(labels)
        self.label_map = label_index_map(self.labels, label_map)
        self.agent_index = agent_index
        self.max_response_chars = max_response_chars
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
        """The normalised final answer of a response (`None` when there is none), read from its last
        `max_response_chars` characters."""
        if self.task == "label":
            return extract_label(response_tail(response or "", self.max_response_chars), self.labels)
        return extract_math_answer(response, self.max_response_chars)

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
        validate_pairs(questions, responses, golds)
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
        golds = gold_values(kwargs, self.gold_column, self.name, len(texts), "gold answer", "gold_column")
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

    Long texts cost no more than texts of `max_length` tokens: before anything is tokenized, the question, the
    response and the formatted text are each cut to their last `max_chars` characters (default
    `max_length * CHARS_PER_TOKEN`, 32 characters per token: tokens of prose and code average 3-5 characters), so
    a response of many megabytes is tokenized as a short one. The tokens kept are the same as without the cut
    unless the last `max_length` tokens span more than `max_chars` characters (long runs of long tokens); then the
    text is scored on fewer, still final, tokens.

    Args:
        model_or_path: A sequence-classification model, or a directory / Hub id to load one from.
        tokenizer: Its tokenizer. Default: loaded from `model_or_path` (with `trl_marl.load_tokenizer`, which also
            handles `trl_marl.toy` tokenizers). A tokenizer without a pad token gets its eos token.
        batch_size: Texts per forward pass.
        max_length: Longest text in tokens; longer texts keep their last `max_length` tokens.
        max_chars: Characters of each text kept before tokenizing (its last ones); default
            `max_length * CHARS_PER_TOKEN`.
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
        max_chars: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1, got {batch_size}.")
        if max_length < 1:
            raise ValueError(f"`max_length` must be >= 1, got {max_length}.")
        if max_chars is None:
            max_chars = max_length * CHARS_PER_TOKEN
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < max_length:
            raise ValueError(
                f"`max_chars` must be an integer >= max_length ({max_length}), got {max_chars!r}: every token is at "
                "least one character, so fewer characters could never fill `max_length` tokens."
            )
        saved: dict[str, Any] = {}
        if isinstance(model_or_path, (str, os.PathLike)):
            from transformers import AutoModelForSequenceClassification

            from ..utils.tokens import load_tokenizer

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
                from ..utils.tokens import load_tokenizer

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
        self.max_chars = max_chars
        self.template = template if template is not None else saved.get("template", DEFAULT_TEMPLATE)
        self.question_column = question_column
        self.agent_index = agent_index
        self._lock = threading.Lock()

    @property
    def device(self) -> Any:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    def format(self, question: str, response: str) -> str:
        """The text the model scores for a (question, response) pair, cut to its last `max_chars` characters.

        The question and the response are cut the same way first: the last `max_chars` characters of the text come
        from the last `max_chars` characters of each field, so the cut changes nothing that is kept, and a
        megabyte-long response costs no more than a short one.
        """
        question, response = question[-self.max_chars :], response[-self.max_chars :]
        if callable(self.template):
            text = self.template(question, response)
        else:
            text = self.template.format(question=question, response=response)
        return text[-self.max_chars :]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of texts: each text cut to its last `max_chars` characters, special tokens added, cut to the
        last `max_length` tokens, never empty."""
        texts = [text[-self.max_chars :] for text in texts]
        ids = self.tokenizer(texts, add_special_tokens=True, truncation=False)["input_ids"]
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
        validate_pairs(questions, responses, None)
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
        questions = question_texts(prompts, kwargs, self.question_column, self.name, len(texts))
        return self.score_batch(questions, texts)

    def __repr__(self) -> str:
        return f"ModelVerifier(model={type(self.model).__name__}, batch_size={self.batch_size})"
