"""Config checks shared by every trl-marl trainer: a setting that would fail later, or be silently ignored, is refused
when the config is made, naming the field and the fix.

- [`check_mixed_precision`]: `fp16`/`bf16` are only set where they take effect ([`has_accelerator`]).
- [`check_choice`], [`check_timeout`], [`check_positive`]: a field's value is one of its choices, a number of
  seconds (or `None`), an integer >= 1.
- [`check_learning_rate`]: a negative or non-finite `learning_rate` (torch: "Invalid learning rate" at `train()`).
- [`generation_batch_error`]: a batch that does not hold whole groups of `num_generations` (TRL names
  `generation_batch_size`, a field the user may never have set, and gives no fix).
- [`check_importance_sampling`]: TRL's `vllm_importance_sampling_*` fields (mode, bounds, the deprecated `_cap`).
- [`use_cpu_for_cpu_processes`], [`use_activation_checkpointing_name`]: settings carried over so that a run does
  what the config says (CPU processes under a launcher; transformers' current name of `gradient_checkpointing`).

The data checks (environment, prompts, prompt lengths) are in [`~trl_marl.validation.data`].
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch

from ..core.losses import VLLM_IMPORTANCE_SAMPLING_MODES
from ..utils.values import learning_rate_problem, positive_int_problem

if TYPE_CHECKING:
    from transformers import TrainingArguments


def has_accelerator() -> bool:
    """Whether a CUDA (or XPU) device is available."""
    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def use_cpu_for_cpu_processes(config: Any) -> None:
    """Set `use_cpu=True` when the config is built in one of several processes (`WORLD_SIZE` > 1: `accelerate
    launch --multi_gpu`, `torchrun`) on a machine without GPU: accelerate then runs them as CPU processes over gloo
    (DDP, or FSDP2). Without it, accelerate runs each process alone, each training a copy on all the data."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and not has_accelerator():
        config.use_cpu = True


def check_mixed_precision(config: TrainingArguments) -> None:
    """Refuse `fp16=True` (and `bf16=True` without `use_cpu`) where no GPU runs them.

    transformers accepts `fp16=True` on a CPU-only machine and then trains in float32 without a word; `bf16=True`
    fails there with a message that does not name the config class. Both are refused here with the fix.
    """
    cls = type(config).__name__
    on_cpu = bool(config.use_cpu) or not has_accelerator()
    if config.fp16 and on_cpu:
        raise ValueError(
            f"`{cls}.fp16=True` needs a CUDA GPU, but training runs on the CPU here (no GPU, or `use_cpu=True`), "
            "where fp16 mixed precision would be silently ignored. Set `fp16=False` (CPU training runs in float32)."
        )
    if config.bf16 and not has_accelerator() and not config.use_cpu:
        raise ValueError(
            f"`{cls}.bf16=True` needs a GPU with bfloat16 support, and none is available. Set `bf16=False` (CPU "
            "training runs in float32), or also set `use_cpu=True` for bfloat16 autocast on the CPU."
        )


def check_choice(config: Any, field: str, choices: Sequence[str]) -> None:
    """Refuse a config field whose value is not one of `choices`."""
    value = getattr(config, field)
    if value not in choices:
        raise ValueError(f"`{type(config).__name__}.{field}` must be one of {tuple(choices)}, got {value!r}.")


def check_timeout(config: Any, field: str) -> None:
    """Refuse a timeout field that is neither `None` (no limit) nor a number of seconds > 0."""
    value = getattr(config, field)
    if value is None:
        return
    # (typeshed's `numbers.Real` declares no `__gt__`: compared as the float it stands for)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < cast(float, value) < float("inf"):
        raise ValueError(
            f"`{type(config).__name__}.{field}` must be a number of seconds > 0, or None for no limit, got {value!r}."
        )


def check_positive(config: Any, field: str, meaning: str) -> None:
    """Refuse a config field that must be an integer >= 1 (e.g. a completion length)."""
    problem = positive_int_problem(getattr(config, field), f"{type(config).__name__}.{field}", meaning)
    if problem is not None:
        raise ValueError(problem)


def check_learning_rate(config: Any) -> None:
    """Refuse a negative, NaN or infinite `learning_rate` when the config is made."""
    problem = learning_rate_problem(config.learning_rate, f"{type(config).__name__}.learning_rate")
    if problem is not None:
        raise ValueError(problem)


def _valid_counts(start: int, step: int) -> list[int]:
    """The multiples of `step` nearest to `start` (below and above), positive."""
    below = (start // step) * step
    return sorted({v for v in (below, below + step) if v > 0})


def generation_batch_error(config: Any) -> ValueError | None:
    """A clear error when a micro-step's batch does not hold whole groups of `num_generations`, else None.

    Every micro-step plays `per_device_train_batch_size // num_generations` prompts with `num_generations` samples
    each, so `per_device_train_batch_size` must be a multiple of `num_generations` (TRL's own check of the generation
    batch, `per_device_train_batch_size x gradient_accumulation_steps x processes`, comes first and names
    `generation_batch_size`). The message names the fields the user sets and the nearest valid values.
    """
    per_device, groups = config.per_device_train_batch_size, config.num_generations
    if not isinstance(groups, int) or groups < 1 or not isinstance(per_device, int) or per_device % groups == 0:
        return None
    batches = _valid_counts(per_device, groups)
    divisors = [g for g in range(2, per_device + 1) if per_device % g == 0]
    nearest = sorted(sorted(divisors, key=lambda g: (abs(g - groups), g))[:2])
    fix = f"set `per_device_train_batch_size` to {' or '.join(map(str, batches))}"
    if nearest:
        fix += f", or `num_generations` to {' or '.join(map(str, nearest))}"
    return ValueError(
        f"`{type(config).__name__}.per_device_train_batch_size` ({per_device}) must be a multiple of "
        f"`num_generations` ({groups}): each micro-step plays whole groups of {groups} samples per prompt "
        f"(`gradient_accumulation_steps` ({config.gradient_accumulation_steps}) adds micro-steps, it does not "
        f"change this). To fix it, {fix}."
    )


def use_activation_checkpointing_name(config: Any) -> None:
    """Carry TRL's `gradient_checkpointing` (its configs' default, True) over to transformers' current name.

    transformers renamed `gradient_checkpointing` to `activation_checkpointing` and warns whenever only the old name
    is set, which TRL's configs always do: setting the new name first keeps every run free of that warning, with the
    same value (the old name keeps mirroring it). A transformers without the new field is left alone.
    """
    if (hasattr(config, "activation_checkpointing") and config.activation_checkpointing is None
            and config.gradient_checkpointing is not None):
        config.activation_checkpointing = config.gradient_checkpointing


def check_importance_sampling(config: Any) -> None:
    """Validate a trainer config's `vllm_importance_sampling_*` fields, as TRL 1.16 does (in its `__post_init__`, after
    `check_generation_backend`)."""
    cap = config.vllm_importance_sampling_cap
    if cap is not None and config.vllm_importance_sampling_clip_max != cap:  # TRL's deprecated name (GRPOConfig
        warnings.warn(  # maps it itself, with this warning)
            "`vllm_importance_sampling_cap` is deprecated (as in TRL): use `vllm_importance_sampling_clip_max`.",
            FutureWarning, stacklevel=3,
        )
        config.vllm_importance_sampling_clip_max = cap
    mode = config.vllm_importance_sampling_mode
    # as TRL: the mode is checked where it is used (vLLM on), the bounds always
    if config.generation_backend == "vllm" and mode not in VLLM_IMPORTANCE_SAMPLING_MODES:
        raise ValueError(
            f"`vllm_importance_sampling_mode` must be one of {VLLM_IMPORTANCE_SAMPLING_MODES}, got {mode!r}."
        )
    low, high = config.vllm_importance_sampling_clip_min, config.vllm_importance_sampling_clip_max
    if low is not None and high is not None and low >= high:
        raise ValueError(
            f"`vllm_importance_sampling_clip_min` ({low}) must be less than `vllm_importance_sampling_clip_max` "
            f"({high})."
        )
    if (config.vllm_importance_sampling_correction and mode.endswith("truncate")
            and low is None and high is None):
        raise ValueError(
            f"`vllm_importance_sampling_mode={mode!r}` needs a bound: set `vllm_importance_sampling_clip_max` (e.g. "
            "3.0) or `vllm_importance_sampling_clip_min`."
        )
