"""What the demos show while and after they train: one bar per training run with the latest reward (instead of
printed logs), one per evaluation, a timed line per phase without steps (loading a model), and the per-turn accuracy
rows of their tables. Every bar stays on screen when its phase ends."""

from __future__ import annotations

import os
import shlex
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.data import DataLoader
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler


def progress_callback(label: str, enabled: bool) -> TrainerCallback:
    """A progress bar over training steps that shows the latest team reward, and one over the evaluation batches of
    every `evaluate()`. Both stay on screen when they end (with their final count, time and reward), so that the
    demo's output keeps a record of every phase."""
    from tqdm.auto import tqdm
    from transformers import TrainerCallback

    class RewardBar(TrainerCallback):
        bar: Any = None
        eval_bar: Any = None

        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           **kwargs: Any) -> None:
            self.bar = tqdm(total=state.max_steps, desc=label, disable=not enabled, leave=True, dynamic_ncols=True)

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.update(1)

        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   logs: dict[str, float] | None = None, **kwargs: Any) -> None:
            for key in ("reward", "objective/scores"):
                if logs and key in logs and self.bar is not None:
                    self.bar.set_postfix({key.split("/")[-1]: f"{logs[key]:.2f}"})

        def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                         **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

        def on_prediction_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                               eval_dataloader: DataLoader | None = None, **kwargs: Any) -> None:
            if self.eval_bar is None:
                total = len(eval_dataloader) if eval_dataloader is not None else None
                self.eval_bar = tqdm(total=total, desc=f"{label}: evaluating", unit="batch", disable=not enabled,
                                     leave=True, dynamic_ncols=True)
            self.eval_bar.update(1)

        def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        **kwargs: Any) -> None:
            if self.eval_bar is not None:
                self.eval_bar.close()
                self.eval_bar = None

    return RewardBar()


@contextmanager
def phase_bar(label: str, enabled: bool, tick_seconds: float = 1.0) -> Iterator[Any]:
    """A line that shows `label` and the time spent so far while the block runs (a model loading, an evaluation in
    one batch), refreshed every `tick_seconds` from a background thread, and left on screen, marked `done`, when the
    block ends. Yields the tqdm bar (its postfix can carry a result)."""
    import threading

    from tqdm.auto import tqdm

    bar = tqdm(total=1, desc=label, disable=not enabled, leave=True, dynamic_ncols=True,
               bar_format="{desc}: {elapsed}{postfix}")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(tick_seconds):
            bar.refresh()

    ticker = threading.Thread(target=tick, name="trl-marl-phase-bar", daemon=True)
    if enabled:
        ticker.start()
    try:
        yield bar
        bar.update(1)
        if not getattr(bar, "postfix", None):
            bar.set_postfix_str("done", refresh=False)
    finally:
        stop.set()
        if enabled:
            ticker.join()
        bar.close()


def replace_progress(callbacks: CallbackHandler, callback: TrainerCallback) -> None:
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


TEAMS_FOLDER = "teams"
"""With `--keep-teams`, a demo saves its trained teams to `<output_dir>/teams/magrpo` and
`<output_dir>/teams/maporl`."""


def teams_line(magrpo_dir: str | None, maporl_dir: str | None, teams: str, try_prompt: str | None = None) -> str:
    """A demo's last line: where its trained teams are and how to try one (`trl-marl generate`, with `try_prompt` as
    an example prompt when given), or that they were deleted and which option keeps them (in `teams`)."""
    if magrpo_dir is None or maporl_dir is None:
        return f"The trained teams were deleted; `--keep-teams` saves them to {teams}."
    prompt = f" --prompt {shlex.quote(try_prompt)}" if try_prompt else ""
    return (f"Trained teams saved: MAGRPO in {magrpo_dir}, MAPoRL in {maporl_dir} (AgentTeam.from_pretrained loads "
            f"them). Try one: trl-marl generate --team {shlex.quote(maporl_dir)}{prompt}")
