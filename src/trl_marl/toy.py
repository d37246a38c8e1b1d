"""An offline toy world: a character-level tokenizer, tiny Qwen2 models and synthetic tasks.

Everything in this module is built from configuration, so it works without network or Hub access. It exists
for tests, examples and CPU demos of the multi-agent trainers:

* :func:`build_toy_tokenizer` makes a character-level :class:`~transformers.PreTrainedTokenizerFast`.
* :func:`build_toy_model` makes a randomly initialised, deterministic :class:`~transformers.Qwen2ForCausalLM`.
* :class:`AdditionTask` and :class:`TargetNumberTask` are synthetic prompt/answer tasks;
  :func:`pretrain_toy_model` teaches them to a toy model with supervised learning and
  :func:`toy_accuracy` measures how well a model solves them.
* :func:`make_toy_model` does all of the above, saves the result to a (cached) directory and returns its path,
  so that any code taking a ``model_name_or_path`` can load the toy model with ``from_pretrained``.
  :func:`is_toy_name` and :func:`resolve_toy_name` map names such as ``"toy"`` or ``"toy:addition"`` to it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

__all__ = [
    "TOY_CHARS",
    "TOY_SPECIAL_TOKENS",
    "TOY_CHAT_TEMPLATE",
    "ToyTask",
    "AdditionTask",
    "TargetNumberTask",
    "DebateAdditionTask",
    "build_toy_tokenizer",
    "build_toy_model",
    "pretrain_toy_model",
    "generate_toy_answers",
    "toy_accuracy",
    "make_toy_model",
    "toy_cache_dir",
    "is_toy_name",
    "resolve_toy_name",
]

TOY_CHARS: str = "0123456789+-=?:TQA "
"""The character vocabulary of the toy tokenizer (every character is one token)."""

TOY_SPECIAL_TOKENS: dict[str, str] = {
    "pad_token": "<pad>",
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
}
"""The special tokens of the toy tokenizer; they take the ids 0-3 in this order."""

TOY_CHAT_TEMPLATE: str = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
)
"""A minimal chat template: the bos token followed by the concatenated message contents (no role markers)."""

_MARKER_FILE = "trl_marl_toy.json"
_FORMAT_VERSION = 3  # 3: pretraining runs on one torch thread whatever the caller set
_TASK_NAMES = ("target", "addition", "debate", "facts_specialist")
_TOY_PRESETS: dict[str, dict[str, Any]] = {
    "target": {},
    "addition": {"hidden_size": 128, "num_layers": 2, "pretrain_steps": 600, "lr": 1e-3, "noise_prob": 0.5},
    "debate": {"hidden_size": 64, "num_layers": 2, "pretrain_steps": 300, "lr": 3e-3, "noise_prob": 0.2},
}
_MAKE_KWARGS_DEFAULTS: dict[str, Any] = {
    "num_heads": 4,
    "max_position_embeddings": 128,
    "batch_size": 128,
    "lr": 3e-3,
    "max_operand": 99,
    "noise_prob": 0.0,
    "specialty": 0,
    "copy_prob": 0.5,
    "novice_known_prob": 0.4,
    "knowledge_seed": 0,
}
_DIGITS = re.compile(r"[0-9]+")


# ---------------------------------------------------------------------------------------------------------------
# Tokenizer and model
# ---------------------------------------------------------------------------------------------------------------


def _byte_level_chars() -> dict[str, str]:
    """Maps each character of :data:`TOY_CHARS` to its byte-level (GPT-2 style) token string.

    Returns:
        A dict from character to token string, e.g. ``" "`` to ``"Ġ"`` and ``"7"`` to ``"7"``.
    """
    mapping = {}
    for char in TOY_CHARS:
        pieces = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False).pre_tokenize_str(char)
        (token, _span), *rest = pieces
        if rest or len(token) != 1:
            raise ValueError(f"toy characters must be single bytes: {char!r}")
        mapping[char] = token
    return mapping


def build_toy_tokenizer() -> PreTrainedTokenizerFast:
    """Builds the character-level toy tokenizer.

    The vocabulary is the four special tokens (``<pad>``, ``<s>``, ``</s>``, ``<unk>``, ids 0-3) followed by
    the characters of :data:`TOY_CHARS`. Every character, spaces included, is its own token, so encoding and
    decoding round-trip exactly. With ``add_special_tokens=True`` the bos token is prepended; padding is on the
    left. A minimal chat template concatenates message contents after the bos token.

    The vocabulary stores characters in their byte-level form (the space is ``"Ġ"``) and the text goes through a
    byte-level pre-tokenizer and decoder. This matters once the tokenizer is saved next to a Qwen2 ``config.json``:
    transformers 5 then loads it with ``AutoTokenizer`` as a ``Qwen2Tokenizer``, which rebuilds a byte-level BPE
    pipeline from the saved vocabulary (and has no merges here). With byte-level tokens that pipeline tokenizes
    exactly like this tokenizer; with a literal ``" "`` token it would drop every space.

    Returns:
        The tokenizer. It can be saved with ``save_pretrained`` and reloaded with
        ``AutoTokenizer.from_pretrained``, alone or next to a toy model.
    """
    specials = list(TOY_SPECIAL_TOKENS.values())
    byte_level = _byte_level_chars()
    vocab = {token: index for index, token in enumerate([*specials, *(byte_level[c] for c in TOY_CHARS)])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=TOY_SPECIAL_TOKENS["unk_token"]))
    # Split every character into its own piece (spaces included), then map it to its byte-level form.
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    # Map the byte-level tokens back to text and join them without inserting spaces.
    backend.decoder = decoders.ByteLevel()
    bos = TOY_SPECIAL_TOKENS["bos_token"]
    backend.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A",
        pair=f"{bos} $A {bos} $B",
        special_tokens=[(bos, vocab[bos])],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        clean_up_tokenization_spaces=False,
        padding_side="left",
        model_max_length=1024,
        **TOY_SPECIAL_TOKENS,
    )
    tokenizer.padding_side = "left"
    tokenizer.chat_template = TOY_CHAT_TEMPLATE
    return tokenizer


def build_toy_model(
    tokenizer: PreTrainedTokenizerBase,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    seed: int = 0,
    max_position_embeddings: int = 128,
) -> Qwen2ForCausalLM:
    """Builds a small, randomly initialised Qwen2 causal language model for the toy tokenizer.

    Args:
        tokenizer: The tokenizer (usually from :func:`build_toy_tokenizer`); its length sets the vocabulary size
            and its pad/bos/eos ids are copied into the model and generation configs.
        hidden_size: Width of the model; must be divisible by ``num_heads``.
        num_layers: Number of decoder layers.
        num_heads: Number of attention heads (and key/value heads).
        seed: Seed of the weight initialisation. The global torch RNG state is left untouched.
        max_position_embeddings: Longest sequence the model is configured for.

    Returns:
        The model (in eval mode, float32, on CPU) with tied input/output embeddings.

    Raises:
        ValueError: If ``hidden_size`` is not divisible by ``num_heads``.
    """
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by num_heads ({num_heads})")
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        use_sliding_window=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    config._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    generation_config = model.generation_config
    generation_config.pad_token_id = tokenizer.pad_token_id
    generation_config.bos_token_id = tokenizer.bos_token_id
    generation_config.eos_token_id = tokenizer.eos_token_id
    model.eval()
    return model


# ---------------------------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------------------------


def _parse_int(text: str) -> int | None:
    """Parses a plain non-negative decimal integer.

    Args:
        text: The text, surrounding whitespace allowed.

    Returns:
        The integer, or ``None`` if ``text`` is anything else.
    """
    text = text.strip()
    return int(text) if _DIGITS.fullmatch(text) else None


def _shift_away(rng: random.Random, value: int, largest: int) -> int:
    """``value`` moved by a non-zero amount of at most ``largest``, never below zero (a noisy label)."""
    shift = rng.randint(1, largest) * rng.choice((-1, 1))
    return value - shift if value + shift < 0 else value + shift


@dataclass
class ToyTask:
    """Base class of the synthetic toy tasks: a source of (prompt, answer) pairs and a checker of answers."""

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one example.

        Args:
            rng: The random number generator to draw from.

        Returns:
            A ``(prompt, answer)`` pair of strings; the training target is ``answer``.
        """
        raise NotImplementedError

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether a completion correctly answers a prompt of this task.

        Args:
            prompt: A prompt produced by :meth:`sample`.
            completion: The generated answer (the text before the eos token).

        Returns:
            Whether the completion is a correct answer.
        """
        raise NotImplementedError

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        """Samples ``n`` prompts.

        Args:
            n: Number of prompts.
            rng: The random number generator to draw from.

        Returns:
            The prompts.
        """
        return [self.sample(rng)[0] for _ in range(n)]


@dataclass
class AdditionTask(ToyTask):
    """Addition of two non-negative integers: prompt ``"Q:{a}+{b}=A:"``, answer ``str(a + b)``.

    Attributes:
        max_operand: Both operands are drawn uniformly from ``[0, max_operand]``.
        noise_prob: Probability that a sampled training answer is wrong: shifted by a non-zero amount of at most
            ``noise_max`` (never below zero). Noisy labels leave a pretrained model room to improve with RL.
        noise_max: Largest absolute shift of a noisy answer.
    """

    max_operand: int = 99
    noise_prob: float = 0.0
    noise_max: int = 2

    _PATTERN = re.compile(r"Q:(\d+)\+(\d+)=A:")

    def __post_init__(self) -> None:
        """Validates the fields.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.max_operand < 0:
            raise ValueError("max_operand must be >= 0")
        if not 0.0 <= self.noise_prob <= 1.0:
            raise ValueError("noise_prob must be in [0, 1]")
        if self.noise_max < 1:
            raise ValueError("noise_max must be >= 1")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one addition problem (with a noisy answer with probability ``noise_prob``).

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        a = rng.randint(0, self.max_operand)
        b = rng.randint(0, self.max_operand)
        total = a + b
        if self.noise_prob > 0 and rng.random() < self.noise_prob:
            total = _shift_away(rng, total, self.noise_max)
        return f"Q:{a}+{b}=A:", str(total)

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is the exact sum of the prompt's operands.

        Args:
            prompt: A prompt of the form ``"Q:{a}+{b}=A:"``.
            completion: The generated answer.

        Returns:
            Whether the completion is ``a + b`` written in decimal.
        """
        a, b = self.operands(prompt)
        return _parse_int(completion) == a + b

    def operands(self, prompt: str) -> tuple[int, int]:
        """Extracts the two operands of a prompt.

        Args:
            prompt: A prompt of the form ``"Q:{a}+{b}=A:"`` (possibly with surrounding text).

        Returns:
            The pair ``(a, b)``.

        Raises:
            ValueError: If the prompt does not contain an addition problem.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not an addition prompt: {prompt!r}")
        return int(match.group(1)), int(match.group(2))


@dataclass
class TargetNumberTask(ToyTask):
    """Output a random valid number for a target: prompt ``"T={t:02d}:"``, answer ``str(k)``, ``k ~ U[0, t]``.

    This teaches a model to output uniformly random valid numbers; it is the starting point of the two-agent
    coordination task in which two agents must pick numbers summing to ``t``.

    Attributes:
        targets: The targets ``t`` to draw from (uniformly), each in ``[0, 99]``.
    """

    targets: Sequence[int] = field(default_factory=lambda: (10,))

    _PATTERN = re.compile(r"T=(\d+):")

    def __post_init__(self) -> None:
        """Validates the targets.

        Raises:
            ValueError: If there are no targets or one is out of range.
        """
        self.targets = tuple(int(t) for t in self.targets)
        if not self.targets:
            raise ValueError("targets must not be empty")
        if any(not 0 <= t <= 99 for t in self.targets):
            raise ValueError("targets must be in [0, 99]")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples a target and a uniformly random valid answer for it.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        target = rng.choice(self.targets)
        return f"T={target:02d}:", str(rng.randint(0, target))

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is a valid number for the prompt's target.

        Args:
            prompt: A prompt of the form ``"T={t:02d}:"``.
            completion: The generated answer.

        Returns:
            Whether the completion is an integer in ``[0, t]``.
        """
        value = _parse_int(completion)
        return value is not None and 0 <= value <= self.target(prompt)

    def target(self, prompt: str) -> int:
        """Extracts the target of a prompt.

        Args:
            prompt: A prompt of the form ``"T={t:02d}:"`` (possibly with surrounding text).

        Returns:
            The target ``t``.

        Raises:
            ValueError: If the prompt does not contain a target.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not a target prompt: {prompt!r}")
        return int(match.group(1))


# ---------------------------------------------------------------------------------------------------------------
# Pretraining and evaluation
# ---------------------------------------------------------------------------------------------------------------


def _sample_examples(tasks: Sequence[ToyTask], n: int, rng: random.Random) -> list[tuple[ToyTask, str, str]]:
    """Samples ``n`` examples, choosing the task of each uniformly.

    Args:
        tasks: The tasks.
        n: Number of examples.
        rng: The random number generator to draw from.

    Returns:
        A list of ``(task, prompt, answer)`` triples.
    """
    examples = []
    for _ in range(n):
        task = tasks[0] if len(tasks) == 1 else rng.choice(tasks)
        examples.append((task, *task.sample(rng)))
    return examples


def _as_task_list(task: ToyTask | Sequence[ToyTask]) -> list[ToyTask]:
    """Normalises a task or a sequence of tasks into a non-empty list.

    Args:
        task: One task or several.

    Returns:
        The list of tasks.

    Raises:
        ValueError: If no task is given.
    """
    tasks = [task] if isinstance(task, ToyTask) else list(task)
    if not tasks:
        raise ValueError("at least one task is required")
    return tasks


def _model_device(model: torch.nn.Module) -> torch.device:
    """Returns the device of a model's first parameter.

    Args:
        model: The model.

    Returns:
        The device of its first parameter, or the CPU for a model without parameters.
    """
    parameter = next(model.parameters(), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def pretrain_toy_model(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: ToyTask | list[ToyTask],
    steps: int = 300,
    batch_size: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
    max_grad_norm: float | None = None,
) -> list[float]:
    """Teaches toy tasks to a model with supervised learning (in place).

    Each training sequence is ``bos + prompt + answer + eos``, right-padded within its batch. The loss is the
    cross entropy on the answer tokens and the eos token only. The optimiser is AdamW. The global torch RNG state
    is left untouched; the result is deterministic given ``seed`` (it runs on one torch thread, so the weights do
    not depend on the caller's thread count).

    Args:
        model: A causal language model, e.g. from :func:`build_toy_model`.
        tokenizer: The model's tokenizer; it needs bos, eos and pad tokens.
        task: A task or a list of tasks (each example picks one uniformly).
        steps: Number of optimiser steps.
        batch_size: Number of sequences per step.
        lr: Learning rate of AdamW.
        seed: Seed of the example sampling.
        progress: Whether to show a progress bar.
        max_grad_norm: Gradients are clipped to this total norm before each step (``None``: no clipping).

    Returns:
        The training loss of every step.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # float summation order (hence the weights) must not depend on the caller's threads
    try:
        return _pretrain(model, tokenizer, task, steps, batch_size, lr, seed, progress, max_grad_norm)
    finally:
        torch.set_num_threads(threads)


def _pretrain(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: ToyTask | list[ToyTask],
              steps: int, batch_size: int, lr: float, seed: int, progress: bool,
              max_grad_norm: float | None) -> list[float]:
    """The body of [`pretrain_toy_model`], run on one thread."""
    tasks = _as_task_list(task)
    rng = random.Random(seed)
    device = _model_device(model)
    bos_id, eos_id, pad_id = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    if pad_id is None:
        pad_id = eos_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    was_training = model.training
    model.train()
    iterator: Any = range(steps)
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(iterator, desc="pretraining toy model")
    losses: list[float] = []
    cache: dict[str, list[int]] = {}  # token ids of the distinct prompts and answers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in iterator:
            examples = _sample_examples(tasks, batch_size, rng)
            missing = list({text for _, prompt, answer in examples for text in (prompt, answer)} - cache.keys())
            if missing:
                cache.update(zip(missing, tokenizer(missing, add_special_tokens=False)["input_ids"]))
            rows = []
            for _, prompt, answer in examples:
                prompt_ids, answer_ids = cache[prompt], cache[answer]
                rows.append(([bos_id, *prompt_ids, *answer_ids, eos_id], 1 + len(prompt_ids)))
            length = max(len(sequence) for sequence, _ in rows)
            input_ids = torch.tensor([sequence + [pad_id] * (length - len(sequence)) for sequence, _ in rows])
            attention_mask = torch.tensor(
                [[1] * len(sequence) + [0] * (length - len(sequence)) for sequence, _ in rows]
            )
            label_tensor = torch.tensor(
                [[-100] * start + sequence[start:] + [-100] * (length - len(sequence)) for sequence, start in rows]
            )
            output = model(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                labels=label_tensor.to(device),
                use_cache=False,
            )
            optimizer.zero_grad(set_to_none=True)
            output.loss.backward()
            if max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
            optimizer.step()
            losses.append(float(output.loss.detach()))
            if progress:
                iterator.set_postfix(loss=f"{losses[-1]:.3f}")
    model.train(was_training)
    return losses


def generate_toy_answers(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    greedy: bool = True,
    seed: int = 0,
    max_new_tokens: int = 4,
    batch_size: int = 256,
) -> list[str]:
    """Generates answers to toy prompts with batched, left-padded ``model.generate``.

    Args:
        model: A causal language model.
        tokenizer: Its tokenizer (bos is added to every prompt).
        prompts: The prompts.
        greedy: Whether to decode greedily; otherwise sample at temperature 1.
        seed: Seed of the sampling (the global torch RNG state is left untouched).
        max_new_tokens: Longest answer, eos included.
        batch_size: Number of prompts per ``generate`` call.

    Returns:
        For every prompt, the generated text before the first eos token (special tokens removed).
    """
    device = _model_device(model)
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    padding_side = tokenizer.padding_side
    was_training = model.training
    model.eval()
    answers: list[str] = []
    try:
        tokenizer.padding_side = "left"
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                batch = tokenizer(list(prompts[start : start + batch_size]), padding=True, return_tensors="pt")
                sampling: dict[str, Any] = (
                    {"do_sample": False}
                    if greedy
                    else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
                )
                output = model.generate(
                    input_ids=batch["input_ids"].to(device),
                    attention_mask=batch["attention_mask"].to(device),
                    max_new_tokens=max_new_tokens,
                    pad_token_id=pad_id,
                    eos_token_id=eos_id,
                    **sampling,
                )
                for row in output[:, batch["input_ids"].shape[1] :].tolist():
                    if eos_id in row:
                        row = row[: row.index(eos_id)]
                    answers.append(tokenizer.decode(row, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return answers


def toy_accuracy(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: ToyTask | list[ToyTask],
    n: int = 200,
    greedy: bool = True,
    seed: int = 0,
    max_new_tokens: int = 4,
) -> float:
    """Measures how often a model answers sampled toy prompts correctly.

    Args:
        model: A causal language model.
        tokenizer: Its tokenizer.
        task: A task or a list of tasks (each prompt picks one uniformly); correctness is judged by
            :meth:`ToyTask.is_correct` (exact sum for :class:`AdditionTask`, a valid number for
            :class:`TargetNumberTask`).
        n: Number of prompts.
        greedy: Whether to decode greedily; otherwise sample at temperature 1.
        seed: Seed of the prompt sampling and of the decoding.
        max_new_tokens: Longest answer, eos included.

    Returns:
        The fraction of correct answers.

    Raises:
        ValueError: If ``n`` is not positive.
    """
    if n <= 0:
        raise ValueError("n must be positive")
    examples = _sample_examples(_as_task_list(task), n, random.Random(seed))
    prompts = [prompt for _, prompt, _ in examples]
    answers = generate_toy_answers(model, tokenizer, prompts, greedy=greedy, seed=seed, max_new_tokens=max_new_tokens)
    correct = sum(t.is_correct(prompt, answer) for (t, prompt, _), answer in zip(examples, answers))
    return correct / n


# ---------------------------------------------------------------------------------------------------------------
# Cached, ready-to-load toy models
# ---------------------------------------------------------------------------------------------------------------


def toy_cache_dir() -> Path:
    """Returns the directory that holds cached toy models.

    It is ``$TRL_MARL_CACHE/toy`` if the ``TRL_MARL_CACHE`` environment variable is set, else
    ``$XDG_CACHE_HOME/trl_marl/toy`` (``~/.cache/trl_marl/toy`` by default).

    Returns:
        The directory (not necessarily existing yet).
    """
    root = os.environ.get("TRL_MARL_CACHE")
    if root:
        return Path(root).expanduser() / "toy"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trl_marl" / "toy"


def _read_marker(directory: Path) -> dict[str, Any] | None:
    """Reads the completion marker of a toy model directory.

    Args:
        directory: The directory.

    Returns:
        The stored arguments, or ``None`` if there is no readable marker.
    """
    try:
        return json.loads((directory / _MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


def make_toy_model(
    path: str | os.PathLike | None = None,
    *,
    task: str = "target",
    hidden_size: int = 64,
    num_layers: int = 2,
    pretrain_steps: int = 300,
    seed: int = 0,
    targets: Sequence[int] = (10,),
    **kw: Any,
) -> str:
    """Builds, pretrains and saves a toy model and its tokenizer; returns the directory (cached).

    The directory can be passed to ``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained``.
    A marker file with the arguments is written last; if ``path`` already holds a finished model built with the
    same arguments, nothing is rebuilt. The result is deterministic given the arguments.

    Args:
        path: Target directory. By default a directory named after a hash of the arguments under
            :func:`toy_cache_dir`.
        task: ``"target"`` (:class:`TargetNumberTask` over ``targets``), ``"addition"`` (:class:`AdditionTask`) or
            ``"debate"`` (:class:`DebateAdditionTask`, the toy debate format) or ``"facts_specialist"``
            (:class:`SpecialistFactsTask`, one member of a heterogeneous debate team; option ``specialty``).
        hidden_size: Model width.
        num_layers: Number of decoder layers.
        pretrain_steps: Number of supervised pretraining steps (0 leaves the model untrained).
        seed: Seed of the initialisation and of the pretraining.
        targets: Targets of the ``"target"`` task.
        **kw: Further options: ``num_heads`` (4), ``max_position_embeddings`` (128), ``batch_size`` (128),
            ``lr`` (3e-3), for the ``"addition"`` and ``"debate"`` tasks ``max_operand`` (99) and ``noise_prob``
            (0.0), and for ``"facts_specialist"`` ``specialty`` (0).

    Returns:
        The directory holding the saved model and tokenizer.

    Raises:
        ValueError: If ``task`` is unknown.
        TypeError: If an unknown keyword argument is given.
    """
    if task not in _TASK_NAMES:
        raise ValueError(f"unknown toy task {task!r}; expected one of {_TASK_NAMES}")
    unknown = sorted(set(kw) - set(_MAKE_KWARGS_DEFAULTS))
    if unknown:
        raise TypeError(f"make_toy_model() got unexpected keyword arguments: {unknown}")
    options = {**_MAKE_KWARGS_DEFAULTS, **kw}
    args: dict[str, Any] = {
        "format_version": _FORMAT_VERSION,
        "task": task,
        "hidden_size": int(hidden_size),
        "num_layers": int(num_layers),
        "pretrain_steps": int(pretrain_steps),
        "seed": int(seed),
        "num_heads": int(options["num_heads"]),
        "max_position_embeddings": int(options["max_position_embeddings"]),
        "batch_size": int(options["batch_size"]),
        "lr": float(options["lr"]),
    }
    if task == "target":
        args["targets"] = [int(t) for t in targets]
    else:
        args["max_operand"] = int(options["max_operand"])
        args["noise_prob"] = float(options["noise_prob"])
    if task == "facts_specialist":
        args["specialty"] = None if options["specialty"] is None else int(options["specialty"])
        args["copy_prob"] = float(options["copy_prob"])
        args["novice_known_prob"] = float(options["novice_known_prob"])
        args["knowledge_seed"] = int(options["knowledge_seed"])
        args["novice_knowledge"] = "fixed-subset"  # what a novice knows (part of the cache key)
    args = json.loads(json.dumps(args))  # normalise exactly as it will be read back

    if path is None:
        digest = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
        directory = toy_cache_dir() / f"{task}-h{hidden_size}-l{num_layers}-{digest}"
    else:
        directory = Path(path)
    if _read_marker(directory) == args:
        return str(directory)

    toy_task: ToyTask
    if task == "target":
        toy_task = TargetNumberTask(targets=args["targets"])
    elif task == "debate":
        toy_task = DebateAdditionTask(max_operand=args["max_operand"], noise_prob=args["noise_prob"])
    elif task == "facts_specialist":
        toy_task = SpecialistFactsTask(specialty=args["specialty"], copy_prob=args["copy_prob"],
                                       novice_known_prob=args["novice_known_prob"],
                                       knowledge_seed=args["knowledge_seed"])
    else:
        toy_task = AdditionTask(max_operand=args["max_operand"], noise_prob=args["noise_prob"])
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(
        tokenizer,
        hidden_size=args["hidden_size"],
        num_layers=args["num_layers"],
        num_heads=args["num_heads"],
        seed=args["seed"],
        max_position_embeddings=args["max_position_embeddings"],
    )
    if args["pretrain_steps"] > 0:
        pretrain_toy_model(
            model,
            tokenizer,
            toy_task,
            steps=args["pretrain_steps"],
            batch_size=args["batch_size"],
            lr=args["lr"],
            seed=args["seed"],
        )
    model.eval()

    directory.mkdir(parents=True, exist_ok=True)
    (directory / _MARKER_FILE).unlink(missing_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    temporary = directory / f".{_MARKER_FILE}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(args, indent=2, sort_keys=True))
    os.replace(temporary, directory / _MARKER_FILE)
    return str(directory)


def is_toy_name(name: str | os.PathLike) -> bool:
    """Tells whether a model name refers to the offline toy model.

    Args:
        name: A model name or path.

    Returns:
        True for ``"toy"`` and names starting with ``"toy:"`` or ``"trl-marl/toy"``.
    """
    if not isinstance(name, str):
        return False
    return name == "toy" or name.startswith("toy:") or name.startswith("trl-marl/toy")


def resolve_toy_name(name: str) -> str:
    """Resolves a toy model name to the directory of a (cached) toy model.

    ``"toy"`` and ``"trl-marl/toy"`` give the default :func:`make_toy_model` (the ``"target"`` task).
    A task may be named after the prefix: ``"toy:target"``, ``"toy:addition"``, ``"trl-marl/toy-addition"``.
    The ``"addition"`` task uses a larger preset (hidden 128, 2 layers, 600 steps at lr 1e-3, half the labels
    noisy): measured greedy accuracy ~.65 and sampled ~.2, so the model solves it partly and has room to improve.
    Building it takes about a minute on a CPU the first time; later calls hit the cache.
    The ``"debate"`` task (``"toy:debate"``, :class:`DebateAdditionTask`) uses hidden 64, 2 layers, 300 steps at lr
    3e-3, a fifth of the labels noisy: measured greedy accuracy ~.5 on first-turn prompts and ~.8 on revision prompts
    whose candidates are mostly right, so a debate can correct first answers (about 10-20 s to build).

    Args:
        name: A name for which :func:`is_toy_name` is true.

    Returns:
        The directory holding the toy model and tokenizer.

    Raises:
        ValueError: If the name is not a toy name or names an unknown task.
    """
    if not is_toy_name(name):
        raise ValueError(f"not a toy model name: {name!r}")
    if name.startswith("toy:"):
        spec = name[len("toy:") :]
    elif name.startswith("trl-marl/toy"):
        spec = name[len("trl-marl/toy") :].lstrip("-_:")
    else:
        spec = ""
    task = spec.strip() or "target"
    if task not in _TOY_PRESETS:
        raise ValueError(f"unknown toy task {task!r} in {name!r}; expected one of {tuple(_TOY_PRESETS)}")
    return make_toy_model(task=task, **_TOY_PRESETS[task])


# ---------------------------------------------------------------------------------------------------------------
# Debate
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DebateAdditionTask(ToyTask):
    """Addition in the toy debate format of :class:`trl_marl.envs.debate.ToyDebateEnv`.

    With probability ``first_turn_prob`` the prompt is a first-turn prompt ``"Q:{a}+{b}=A:"``; otherwise it is a
    revision prompt ``"Q:{a}+{b}={x} {y} {z}?A:"`` that lists 1 to ``max_candidates`` candidate answers (the
    previous answers of a debate). Each candidate is correct with probability ``candidate_correct_prob``, else off
    by a non-zero amount of at most ``candidate_noise_max`` (never below zero). The answer is ``a + b`` whatever
    the candidates say, with label noise: with probability ``noise_prob`` it is shifted by a non-zero amount of at
    most ``noise_max``.

    A model pretrained on it answers first-turn prompts imperfectly (addition is hard for a tiny model, the labels
    are noisy) and learns that the candidates are evidence: copying a candidate is easy, so it answers revision
    prompts with a correct majority better than first-turn prompts, and a debate has something to correct.

    Attributes:
        max_operand: Both operands are drawn uniformly from ``[0, max_operand]``.
        noise_prob: Probability that a sampled training answer is wrong.
        noise_max: Largest absolute shift of a noisy answer.
        first_turn_prob: Probability of a first-turn prompt (no candidates).
        max_candidates: Largest number of candidates in a revision prompt (drawn uniformly from 1 to it).
        candidate_correct_prob: Probability that each candidate is the correct sum.
        candidate_noise_max: Largest absolute error of a wrong candidate.
    """

    max_operand: int = 99
    noise_prob: float = 0.0
    noise_max: int = 2
    first_turn_prob: float = 0.5
    max_candidates: int = 3
    candidate_correct_prob: float = 0.5
    candidate_noise_max: int = 2

    _PATTERN = re.compile(r"Q:(\d+)\+(\d+)=((?:[0-9-]+ ?)*)(?:\?)?A:")

    def __post_init__(self) -> None:
        """Validates the fields.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.max_operand < 0:
            raise ValueError("max_operand must be >= 0")
        for name in ("noise_prob", "first_turn_prob", "candidate_correct_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.noise_max < 1 or self.candidate_noise_max < 1:
            raise ValueError("noise_max and candidate_noise_max must be >= 1")
        if self.max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one first-turn or revision prompt and its (possibly noisy) answer.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        a = rng.randint(0, self.max_operand)
        b = rng.randint(0, self.max_operand)
        total = a + b
        if rng.random() < self.first_turn_prob:
            prompt = f"Q:{a}+{b}=A:"
        else:
            candidates = []
            for _ in range(rng.randint(1, self.max_candidates)):
                correct = rng.random() < self.candidate_correct_prob
                candidates.append(total if correct else _shift_away(rng, total, self.candidate_noise_max))
            prompt = f"Q:{a}+{b}=" + " ".join(str(c) for c in candidates) + "?A:"
        answer = total
        if self.noise_prob > 0 and rng.random() < self.noise_prob:
            answer = _shift_away(rng, total, self.noise_max)
        return prompt, str(answer)

    def parse(self, prompt: str) -> tuple[int, int, list[str]]:
        """Extracts the operands and the candidates of a prompt.

        Args:
            prompt: A first-turn or revision prompt (possibly with surrounding text).

        Returns:
            ``(a, b, candidates)``; ``candidates`` is empty for a first-turn prompt.

        Raises:
            ValueError: If the prompt is not a toy debate prompt.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not a toy debate prompt: {prompt!r}")
        return int(match.group(1)), int(match.group(2)), match.group(3).split()

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is the exact sum of the prompt's operands (the candidates do not count).

        Args:
            prompt: A first-turn or revision prompt.
            completion: The generated answer.

        Returns:
            Whether the completion is ``a + b`` written in decimal.
        """
        a, b, _ = self.parse(prompt)
        return _parse_int(completion) == a + b


FACT_KEYS: tuple[int, ...] = tuple(range(10, 70))
"""The questions of the toy fact debate: two-digit keys whose tens digit (1-6) tells the specialty class."""


def fact_table(seed: int = 1234) -> dict[int, int]:
    """The toy world's facts: each key of [`FACT_KEYS`] has one true two-digit value (fixed by ``seed``)."""
    rng = random.Random(seed)
    return {key: rng.randint(10, 99) for key in FACT_KEYS}


def specialty_of(question: str | int, num_specialties: int = 3) -> int:
    """The specialty class of a toy fact question: ``(key // 10) % num_specialties``.

    It depends on the first digit of the key alone, so a tiny model can read it off one position of the prompt.

    Args:
        question: The key (``"37"``, ``37`` or a prompt ``"Q:37=..."``).
        num_specialties: Number of classes.

    Returns:
        The class index in ``[0, num_specialties)``.
    """
    match = re.search(r"(\d+)", str(question))
    if match is None:
        raise ValueError(f"not a toy fact question: {question!r}")
    return (int(match.group(1)) // 10) % num_specialties


@dataclass
class SpecialistFactsTask(ToyTask):
    """The toy debate format for one member of a *heterogeneous* team: an expert on some questions, a novice on others.

    A question is a key of [`FACT_KEYS`] and its answer the key's value in [`fact_table`] (``"Q:37=A:"`` ->
    ``"52"``). Keys fall into ``num_specialties`` classes by their first digit ([`specialty_of`]). The member knows
    every key of class ``specialty`` and a fixed random fraction ``novice_known_prob`` of the other keys (drawn once
    from ``table_seed`` and ``specialty``); for a key it does not know, its training answer is a fresh random two-digit
    number, so there is no hidden preference for the truth that reinforcement learning could merely sharpen. A team
    built with specialties ``0, 1, 2`` has one expert per question and two members who know it only sometimes: no
    single member is good at everything.

    Revision prompts ``"Q:37=52 18 52?A:"`` list ``num_candidates`` answers (a debate's previous turn: the member's own
    answer first, then the others'), each true with probability ``candidate_correct_prob``. Their training answer is
    one of the candidates, chosen uniformly, with probability ``copy_prob``, otherwise a fresh answer of the member's
    own knowledge. A pretrained member can therefore copy what it reads but does not know *whose* answer to
    trust; copying at random conserves the expected number of correct answers while it makes them correlated, so an
    untrained team's majority vote loses the benefit of independent voters turn after turn. What MAPoRL can teach it
    is to keep its own answer on its specialty and to adopt the expert's answer on the others.

    Attributes:
        specialty: The class this member is an expert on (`None`: none).
        num_specialties: Number of classes.
        novice_known_prob: Fraction of the keys outside its specialty that the member knows (1.0: every key).
        knowledge_seed: Seeds which of those keys it knows (give members without a specialty different seeds).
        first_turn_prob: Probability of a first-turn prompt (no candidates).
        num_candidates: Number of candidates in a revision prompt (the team size).
        candidate_correct_prob: Probability that each candidate is the true value.
        copy_prob: Probability that a revision prompt's answer copies a candidate.
        table_seed: Seed of [`fact_table`].
    """

    specialty: int | None = 0
    num_specialties: int = 3
    novice_known_prob: float = 0.4
    knowledge_seed: int = 0
    first_turn_prob: float = 0.5
    num_candidates: int = 3
    candidate_correct_prob: float = 0.5
    copy_prob: float = 0.5
    table_seed: int = 1234

    def __post_init__(self) -> None:
        """Validates the fields and builds the fact table.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.specialty is not None and not 0 <= self.specialty < self.num_specialties:
            raise ValueError(f"specialty must be None or in [0, {self.num_specialties}), got {self.specialty}")
        for name in ("novice_known_prob", "first_turn_prob", "candidate_correct_prob", "copy_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.num_candidates < 2:
            raise ValueError("num_candidates must be >= 2 (the member's own answer and at least one other)")
        self.table = fact_table(self.table_seed)
        chooser = random.Random(f"{self.table_seed}-{self.specialty}-{self.knowledge_seed}")
        self.known = {key for key in FACT_KEYS if chooser.random() < self.novice_known_prob
                      or specialty_of(key, self.num_specialties) == self.specialty}

    def _own_answer(self, rng: random.Random, key: int) -> int:
        return self.table[key] if key in self.known else rng.randint(10, 99)

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one first-turn or revision prompt and its training answer.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        key = rng.choice(FACT_KEYS)
        if rng.random() < self.first_turn_prob:
            return f"Q:{key}=A:", str(self._own_answer(rng, key))
        truth = self.table[key]
        candidates = [truth if rng.random() < self.candidate_correct_prob else rng.randint(10, 99)
                      for _ in range(self.num_candidates)]
        prompt = f"Q:{key}=" + " ".join(str(c) for c in candidates) + "?A:"
        if rng.random() < self.copy_prob:
            return prompt, str(rng.choice(candidates))
        return prompt, str(self._own_answer(rng, key))

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion states the key's true value.

        Args:
            prompt: A first-turn or revision prompt.
            completion: The generated answer.

        Returns:
            Whether the completion is the true value written in decimal.
        """
        match = re.match(r"Q:(\d+)=", prompt)
        if match is None:
            raise ValueError(f"not a toy fact prompt: {prompt!r}")
        return _parse_int(completion) == self.table[int(match.group(1))]
