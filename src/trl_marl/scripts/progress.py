"""What the demos show while and after they train: one bar per training run with the latest reward (instead of
printed logs), and the per-turn accuracy rows of their tables."""

from __future__ import annotations

import os
import warnings
from typing import Any


def progress_callback(label: str, enabled: bool) -> Any:
    """A progress bar over training steps that shows the latest team reward."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class RewardBar(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.bar = tqdm(total=state.max_steps, desc=label, disable=not enabled, leave=False, dynamic_ncols=True)

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.bar.update(1)

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            for key in ("reward", "objective/scores"):
                if logs and key in logs:
                    self.bar.set_postfix({key.split("/")[-1]: f"{logs[key]:.2f}"})

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.bar.close()

    return RewardBar()


def replace_progress(callbacks: Any, callback: Any) -> None:
    """Swap a trainer's printed logs and step bar (in its `callback_handler`, `callbacks`) for `callback`: one bar
    with the latest reward."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    callbacks.remove_callback(PrinterCallback)
    callbacks.remove_callback(ProgressCallback)
    callbacks.add_callback(callback)


def turn_accuracy_rows(before: list[float], after: list[float]) -> list[str]:
    """The rows of a demo table with one column per debate turn: a header, then the accuracies before and after."""
    head = "".join(f"{'turn ' + str(t + 1):>9s}" for t in range(len(before)))
    return [
        f"  {'':16s}{head}",
        f"  {'before training':16s}" + "".join(f"{v:9.3f}" for v in before),
        f"  {'after training':16s}" + "".join(f"{v:9.3f}" for v in after),
    ]


def quiet_logs() -> None:
    """Silence the warnings and library logs that would drown a demo's own output."""
    import logging

    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # its optional CPU kernel hub warns at import
    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
