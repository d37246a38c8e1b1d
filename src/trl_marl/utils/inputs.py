"""Checks of what a user passes that would otherwise fail later, inside torch, the Hub client, TRL or PEFT.

Each check raises before the first training step with a message naming the field and the fix:

- [`check_learning_rate`]: a negative or non-finite `learning_rate` (torch: "Invalid learning rate" at `train()`).
- [`check_model_path`]: a name that looks like a local folder but does not exist (the Hub client: "Repo id must be
  in the form 'repo_name'").
- [`generation_batch_error`]: a batch that does not hold whole groups of `num_generations` (TRL names
  `generation_batch_size`, a field the user may never have set, and gives no fix).
- [`check_reward_signature`]: a reward function without `**kwargs` ("unexpected keyword argument" at the first
  reward call).
- [`check_lora_targets`]: LoRA `target_modules` that match no module of the model.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .model_names import check_model_name

REWARD_KEYWORDS = ("prompts", "completions", "agent_prompts", "agent_completions", "agent_index", "turn",
                   "transcript", "trainer_state")
"""The keyword arguments every reward call gets (besides the dataset's columns)."""


def check_learning_rate(config: Any) -> None:
    """Refuse a negative, NaN or infinite `learning_rate` when the config is made."""
    value = config.learning_rate
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise ValueError(
            f"`{type(config).__name__}.learning_rate` must be a finite number >= 0 (the optimizer's step size), got "
            f"{value!r}. Use a small positive value, e.g. `learning_rate=1e-5` for LoRA adapters or 1e-6 for full "
            "fine-tuning."
        )


def looks_like_path(name: str) -> bool:
    """Whether a model name is meant as a local folder: it starts with `.`, `~` or a separator, or has more
    separators than a Hub id (`org/name`), or a Windows separator."""
    if name.startswith((".", "~", os.sep, "/")):
        return True
    if os.altsep and os.altsep in name or "\\" in name:
        return True
    return name.count("/") > 1


def check_model_path(name: str, field: str = "`model` (`model_name_or_path`)") -> None:
    """Refuse a model name that looks like a local folder (see [`looks_like_path`]) but does not exist, and a name that
    cannot load while the Hub is offline or unreachable ([`check_model_name`], which lists the offline names)."""
    if not isinstance(name, str):
        return
    if not looks_like_path(name):
        check_model_name(name, field)
        return
    path = os.path.expanduser(name)
    if os.path.exists(path):
        return
    raise FileNotFoundError(
        f"{field} {name!r} looks like a local folder, but {os.path.abspath(path)} does not exist. Pass an existing "
        "folder (one holding config.json, e.g. a saved agent_0/), a Hub id such as 'Qwen/Qwen2.5-0.5B-Instruct', or "
        "an offline name such as 'toy'."
    )


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


def check_reward_signature(func: Callable[..., Any], name: str) -> None:
    """Refuse a reward function that cannot take the keyword arguments of a reward call (it lacks `**kwargs`)."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read
        return
    parameters = signature.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return
    accepted = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [k for k in REWARD_KEYWORDS if k not in accepted]
    if missing:
        raise TypeError(
            f"Reward function `{name}` does not take `**kwargs`: every reward call passes keyword arguments "
            f"({', '.join(REWARD_KEYWORDS)}, and every dataset column, e.g. `target`), and it does not accept "
            f"{', '.join(f'`{k}`' for k in missing)}. Add `**kwargs` to its signature, e.g. "
            f"`def {getattr(func, '__name__', 'reward')}(prompts, completions, **kwargs)`."
        )


def linear_module_names(model: Any) -> list[str]:
    """The short names (last part of the module path) of the model's Linear layers, e.g. `q_proj`, `lm_head`."""
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and name})


def check_lora_targets(model: Any, peft_config: Any) -> None:
    """Refuse LoRA `target_modules` (a list of names) that match no module of `model`, listing the valid ones."""
    targets = getattr(peft_config, "target_modules", None)
    if targets is None or isinstance(targets, str):  # None: PEFT's defaults; a string: "all-linear" or a regex
        return
    names = [name for name, _ in model.named_modules() if name]
    unknown = [t for t in _as_list(targets) if not any(n == t or n.endswith("." + t) for n in names)]
    if unknown:
        raise ValueError(
            f"LoRA `target_modules` {unknown} match no module of the model ({type(model).__name__}). Its Linear "
            f"layers are: {', '.join(linear_module_names(model))}; or pass `target_modules='all-linear'` "
            "(`--lora_target_modules all-linear`)."
        )


def _as_list(targets: Iterable[str] | Sequence[str]) -> list[str]:
    return sorted(targets) if isinstance(targets, (set, frozenset)) else list(targets)


def use_activation_checkpointing_name(config: Any) -> None:
    """Carry TRL's `gradient_checkpointing` (its configs' default, True) over to transformers' current name.

    transformers renamed `gradient_checkpointing` to `activation_checkpointing` and warns whenever only the old name
    is set, which TRL's configs always do: setting the new name first keeps every run free of that warning, with the
    same value (the old name keeps mirroring it). A transformers without the new field is left alone.
    """
    if (hasattr(config, "activation_checkpointing") and config.activation_checkpointing is None
            and config.gradient_checkpointing is not None):
        config.activation_checkpointing = config.gradient_checkpointing
