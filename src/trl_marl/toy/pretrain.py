"""Supervised pretraining of a toy model on toy tasks, greedy generation, and task accuracy; [`isolated_rng`], under
which every cached model is built."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import Any, cast

import torch
from transformers import GenerationMixin, PreTrainedTokenizerBase

from .tasks import ToyTask


@contextlib.contextmanager
def isolated_rng() -> Iterator[None]:
    """Run a block without touching the caller's random generators: the global states of torch (CPU, and every CUDA
    device once CUDA is initialised), Python's `random` and NumPy's legacy `numpy.random` are saved on entry and put
    back on exit, whatever the block drew from them.

    Building a cached model (a toy model, the real model) runs under it, so that a run seeded before its model cache
    was built draws the same numbers (LoRA initialisation, sampling) as a run whose cache already existed.
    """
    python_state = random.getstate()
    torch_state = torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    numpy = _numpy_random()
    numpy_state = numpy.get_state() if numpy is not None else None
    try:
        yield
    finally:
        random.setstate(python_state)
        torch.random.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
        if numpy is not None:
            numpy.set_state(numpy_state)


def _numpy_random() -> Any:
    """`numpy.random`, or None without NumPy."""
    try:
        import numpy.random
    except ImportError:  # pragma: no cover - NumPy comes with torch's and transformers' dependencies
        return None
    return numpy.random


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
    progress: bool | str = False,
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
        progress: Whether to show a progress bar (a string: its label).
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


def _pretrain(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    task: ToyTask | list[ToyTask],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    progress: bool | str,
    max_grad_norm: float | None,
) -> list[float]:
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

        iterator = tqdm(iterator, desc=progress if isinstance(progress, str) else "pretraining toy model")
    losses: list[float] = []
    cache: dict[str, list[int]] = {}  # token ids of the distinct prompts and answers
    with isolated_rng():
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
                iterator.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)  # shown at the bar's own pace
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
        with isolated_rng(), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(prompts), batch_size):
                batch = tokenizer(list(prompts[start : start + batch_size]), padding=True, return_tensors="pt")
                sampling: dict[str, Any] = (
                    {"do_sample": False}
                    if greedy
                    else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
                )
                # (a causal LM: `nn.Module` has no `generate`)
                output = cast(GenerationMixin, model).generate(
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
                    # (one row of ids decodes to one string; transformers types `decode` for batches too)
                    answers.append(cast(str, tokenizer.decode(row, skip_special_tokens=True)))
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
