"""`MetricsBook`: what a trainer records between two logs, and how `log` reduces it (TRL's `_metrics`, one type)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

__all__ = ["MetricsBook"]


class MetricsBook:
    """The metrics a trainer records between two logs, per mode (`"train"`, `"eval"`): a list of values per name.

    `book[mode][name].append(value)` records; [`logged`] gives what `log` adds to its line, then [`clear`].
    A value may be a one-element tensor, on any device: the book reads all of them on the host at once, in
    [`logged`], so recording a metric in the middle of a step never waits for the device (one host sync per log
    instead of one per value; what decides a step's speed on a GPU when every agent records a few metrics).

    Example:

    ```python
    >>> book = MetricsBook()
    >>> book["train"]["reward"] += [0.5, 1.0]
    >>> book["train"]["nonfinite/rewards"] += [1.0, 2.0]
    >>> book.logged("train")
    {'reward': 0.75, 'nonfinite/rewards': 3.0}
    >>> book.clear("train")
    >>> book.logged("train")
    {}
    ```
    """

    def __init__(self) -> None:
        self._modes: dict[str, dict[str, list[Any]]] = {"train": defaultdict(list), "eval": defaultdict(list)}

    def __getitem__(self, mode: str) -> dict[str, list[Any]]:
        return self._modes[mode]

    def resolve(self, mode: str) -> dict[str, list[float]]:
        """The mode's values as floats: its tensors read on the host with one transfer per device (and the lists
        rewritten with the floats)."""
        metrics = self._modes[mode]
        pending: dict[torch.device, list[tuple[list[Any], int]]] = defaultdict(list)
        for values in metrics.values():
            for index, value in enumerate(values):
                if isinstance(value, torch.Tensor):
                    pending[value.device].append((values, index))
        for places in pending.values():
            read = torch.stack([places_list[i].detach().reshape(()).float() for places_list, i in places]).tolist()
            for (values, index), number in zip(places, read):
                values[index] = number
        return metrics

    def logged(self, mode: str) -> dict[str, float]:
        """The mode's metrics as `log` adds them to its line: each name's mean; the latest value of a `diagnostics/`
        streak (a state, not a rate); the sum of a `nonfinite/` count; a non-finite result as NaN; `eval_` before
        every name in `eval` mode (TRL's style)."""
        metrics = self.resolve(mode)
        averaged = {k: sum(v) / len(v) for k, v in metrics.items() if v and not k.startswith("nonfinite")}
        averaged.update({k: v[-1] for k, v in metrics.items() if v and k.startswith("diagnostics/")})
        averaged.update({k: float(sum(v)) for k, v in metrics.items() if k.startswith("nonfinite")})
        averaged = {k: (v if math.isfinite(v) else float("nan")) for k, v in averaged.items()}
        if mode == "eval":
            averaged = {f"eval_{k}": v for k, v in averaged.items()}
        return averaged

    def clear(self, mode: str) -> None:
        """Forget the mode's metrics (once logged)."""
        self._modes[mode].clear()
