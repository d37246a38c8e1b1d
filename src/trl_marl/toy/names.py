"""The toy models' names (``"toy"``, ``"toy:<task>"``, ``"trl-marl/toy-<task>"``) and each task's preset, without
torch: the offline model names and the command line's early checks read them before anything heavy loads;
[`~trl_marl.toy.cache.resolve_toy_name`] builds the model a name stands for."""

from __future__ import annotations

import os
from typing import Any

TOY_TASK_NAMES = ("target", "addition", "debate", "facts_specialist")
TOY_PRESETS: dict[str, dict[str, Any]] = {
    "target": {},
    "addition": {"hidden_size": 128, "num_layers": 2, "pretrain_steps": 600, "lr": 1e-3, "noise_prob": 0.5},
    "debate": {"hidden_size": 64, "num_layers": 2, "pretrain_steps": 300, "lr": 3e-3, "noise_prob": 0.2},
}
"""The toy tasks a name may give after ``toy:``, with the arguments of `make_toy_model` each is built with."""


def is_toy_name(name: str | os.PathLike | None) -> bool:
    """Tells whether a model name refers to the offline toy model.

    Args:
        name: A model name or path.

    Returns:
        True for ``"toy"`` and names starting with ``"toy:"`` or ``"trl-marl/toy"``.
    """
    if not isinstance(name, str):
        return False
    return name == "toy" or name.startswith("toy:") or name.startswith("trl-marl/toy")


def toy_task_of(name: str) -> str:
    """The toy task a toy model name stands for (``"target"`` for ``"toy"`` and ``"trl-marl/toy"``).

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
    if task not in TOY_PRESETS:
        raise ValueError(f"unknown toy task {task!r} in {name!r}; expected one of {tuple(TOY_PRESETS)}")
    return task
