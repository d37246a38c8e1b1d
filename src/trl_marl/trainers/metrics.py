"""`MetricsBook`: what a trainer records between two logs, and how `log` reduces it (TRL's `_metrics`, one type)."""

from __future__ import annotations

import math
from collections import defaultdict

__all__ = ["MetricsBook"]


class MetricsBook:
    """The metrics a trainer records between two logs, per mode (`"train"`, `"eval"`): a list of values per name.

    `book[mode][name].append(value)` records; [`logged`] gives what `log` adds to its line, then [`clear`].

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
        self._modes: dict[str, dict[str, list[float]]] = {"train": defaultdict(list), "eval": defaultdict(list)}

    def __getitem__(self, mode: str) -> dict[str, list[float]]:
        return self._modes[mode]

    def logged(self, mode: str) -> dict[str, float]:
        """The mode's metrics as `log` adds them to its line: each name's mean; the latest value of a `diagnostics/`
        streak (a state, not a rate); the sum of a `nonfinite/` count; a non-finite result as NaN; `eval_` before
        every name in `eval` mode (TRL's style)."""
        metrics = self._modes[mode]
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
