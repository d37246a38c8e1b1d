"""Checks of what a user passes that would otherwise fail later, inside torch, the Hub client, TRL or PEFT.

Each check raises before the first training step with a message naming the field and the fix:

- [`check_model_path`]: a name that looks like a local folder but does not exist (the Hub client: "Repo id must be
  in the form 'repo_name'").
- [`check_lora_targets`]: LoRA `target_modules` that match no module of the model.

The checks of a config's fields are in `trl_marl.validation.config`, the reward function's signature check in
`trl_marl.reward_contract` (the reward contract).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .model_names import check_model_name

if TYPE_CHECKING:
    from torch import nn


def looks_like_path(name: str) -> bool:
    """Whether a model name is meant as a local folder: it starts with `.`, `~` or a separator, or has more
    separators than a Hub id (`org/name`), or a Windows separator."""
    if name.startswith((".", "~", os.sep, "/")):
        return True
    if os.altsep and os.altsep in name or "\\" in name:
        return True
    return name.count("/") > 1


def check_model_path(name: str | None, field: str = "`model` (`model_name_or_path`)") -> None:
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


def linear_module_names(model: nn.Module) -> list[str]:
    """The short names (last part of the module path) of the model's Linear layers, e.g. `q_proj`, `lm_head`."""
    import torch

    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and name})


def check_lora_targets(model: nn.Module, peft_config: Any) -> None:
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
