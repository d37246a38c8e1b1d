"""What a trainer prints on the console at each logging step: a short dict of the metrics that say whether training
works, instead of every metric (a two-agent MAGRPO step logs about 30, some 1,000 characters; a debate team's PPO
update more). Every metric still reaches the `report_to` loggers and `trainer.state.log_history`: only the printed
copy is filtered.

Both configs carry `console_metrics` ([`console_metrics_field`]); the trainer swaps transformers' printing callbacks
(`ProgressCallback`, `PrinterCallback` with `disable_tqdm=True`) for filtering ones ([`install_console_metrics`]).

Example:

```python
from trl_marl import MAGRPOConfig

MAGRPOConfig(output_dir="out", console_metrics=["reward", "agent_*/kl"])  # exactly these on the console
MAGRPOConfig(output_dir="out", console_metrics=["all"])  # every metric, as transformers prints them
```
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments

__all__ = ["ALWAYS_SHOWN", "console_metrics_field", "check_console_metrics", "install_console_metrics",
           "shown_metrics"]

ALL = "all"
"""The `console_metrics` entry that prints every metric."""

ALWAYS_SHOWN = ("train_*", "eval_*", "epoch")
"""Shown whatever `console_metrics` says: the end-of-training summary (`train_runtime`, `train_loss`, ...), the
evaluation results and the epoch (where training is)."""


def console_metrics_field(default: Sequence[str]) -> Any:
    """`console_metrics`: which logged metrics the console shows (`default`: the trainer's own list)."""
    default_list = ", ".join(default)
    return field(
        default=None,
        metadata={
            "help": "The metrics printed on the console at each logging step: names or shell-style patterns "
            f"(`agent_*/kl`). None: the trainer's short list ({default_list}); `all`: every metric, as transformers "
            "prints them. The end-of-training summary (`train_*`), evaluation results (`eval_*`) and `epoch` are "
            "always shown. The `report_to` loggers and `trainer.state.log_history` get every metric whatever this "
            "says."
        },
    )


def check_console_metrics(value: Any, where: str) -> list[str] | None:
    """`console_metrics` as a list of patterns (None kept); a string is one pattern. Raises `ValueError` naming
    `where` for anything else or an empty pattern."""
    if value is None:
        return None
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, Sequence) or not all(isinstance(p, str) and p.strip() for p in patterns):
        raise ValueError(
            f"`{where}` must be None, 'all' or a list of metric names or patterns such as ['reward', 'agent_*/kl'] "
            f"(non-empty strings), got {value!r}."
        )
    return [p.strip() for p in patterns]


def shown_metrics(logs: dict[str, Any], patterns: Sequence[str]) -> dict[str, Any]:
    """The entries of `logs` whose names match one of `patterns` or [`ALWAYS_SHOWN`], in `logs`' order; all of
    them when `patterns` holds `"all"`."""
    if ALL in patterns:
        return dict(logs)
    wanted = (*patterns, *ALWAYS_SHOWN)
    return {key: value for key, value in logs.items() if any(fnmatch.fnmatchcase(key, p) for p in wanted)}


class _ShownOnly(TrainerCallback):
    """Before a printing callback of transformers: hand its `on_log` only the metrics of `patterns`."""

    patterns: list[str]

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().on_log(args, state, control, logs=shown_metrics(logs or {}, self.patterns), **kwargs)


class _FilteredProgress(_ShownOnly, ProgressCallback):
    """transformers' progress bar, printing only the metrics of `patterns`."""


class _FilteredPrinter(_ShownOnly, PrinterCallback):
    """transformers' printer (`disable_tqdm=True`), printing only the metrics of `patterns`."""


def install_console_metrics(callback_handler: Any, patterns: Sequence[str] | None, default: Sequence[str]) -> None:
    """Swap, in place, the printing callbacks of a trainer's `callback_handler` for ones that print only
    `patterns` (`default` when None). With `"all"` nothing is swapped. Other callbacks, including a demo's own bar
    and every logger, are left as they are."""
    chosen = list(default) if patterns is None else list(patterns)
    if ALL in chosen:
        return
    callbacks = callback_handler.callbacks
    for index, callback in enumerate(callbacks):
        filtered: _ShownOnly | None = None
        if type(callback) is ProgressCallback:
            filtered = _FilteredProgress(max_str_len=callback.max_str_len)
        elif type(callback) is PrinterCallback:
            filtered = _FilteredPrinter()
        if filtered is not None:
            filtered.patterns = chosen
            callbacks[index] = filtered
