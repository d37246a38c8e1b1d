"""`MetricsBook`, the trainers' log book: what a trainer records between two logs, and how `log` reduces it
(TRL's `_metrics`, one type)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import torch

from ..rollout import Rollout

__all__ = ["MetricsBook", "log_tool_use"]


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


def log_tool_use(metrics: dict[str, list[float | torch.Tensor]], rollout: Rollout) -> None:
    """Each agent with tools' use of them over the rollout's turns, under TRL's names with the agent's prefix:
    `agent_<a>/tools/call_frequency` (calls per sample), `agent_<a>/tools/failure_frequency` (failed calls per call:
    an error, a timeout, an unknown tool), `agent_<a>/tools/rounds` (generations after a tool result per sample: the
    turns the agent used) and `agent_<a>/tools/cut_by_budget` (samples whose results did not fit the completion
    budget, per sample)."""
    totals: dict[int, list[int]] = {}
    for t in rollout.turns:
        for a, stats in enumerate(t.tool_stats or []):
            if stats is None:
                continue
            total = totals.setdefault(a, [0, 0, 0, 0, 0])
            for k, value in enumerate((stats.samples, stats.calls, stats.failed_calls, stats.rounds,
                                       stats.cut_by_budget)):
                total[k] += value
    for a, (samples, calls, failed, rounds, cut) in sorted(totals.items()):
        prefix = f"agent_{a}/tools/"
        metrics[prefix + "call_frequency"].append(calls / max(1, samples))
        metrics[prefix + "failure_frequency"].append(failed / calls if calls else 0.0)
        metrics[prefix + "rounds"].append(rounds / max(1, samples))
        metrics[prefix + "cut_by_budget"].append(cut / max(1, samples))
