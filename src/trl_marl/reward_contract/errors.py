"""The errors and warnings of the reward contract (`trl_marl.reward_contract`), the count of non-finite scores, and
where a warning raised inside the training loop points ([`user_stacklevel`])."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import TrainerState

LIBRARY_PACKAGES = frozenset({"trl_marl", "transformers", "trl", "accelerate", "torch", "peft", "runpy", "importlib"})
"""The packages whose frames a training-loop warning skips to reach the user's code ([`user_stacklevel`])."""


def user_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn`, called by the caller of this function, that points to the first frame
    outside [`LIBRARY_PACKAGES`]: the user's `trainer.train()` line (or the script that runs it), rather than a line
    of transformers' loop that means nothing to the reader (`tr_loss_step = self.training_step(...)`)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).split(".")[0] in LIBRARY_PACKAGES:
        frame, level = frame.f_back, level + 1
    return level


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something other than one score (or `None`) per completion."""


class RewardTimeoutError(RewardFunctionError):
    """A reward function call took longer than the config's `reward_timeout` (its worker process was killed, or
    its thread abandoned; see [`~trl_marl.reward_contract.calls.call_reward_function`])."""


class RewardTimeoutWarning(UserWarning):
    """A reward function runs without `reward_timeout`: it sets signal handlers, so it must run in the main thread."""


class RewardIsolationWarning(UserWarning):
    """A reward function meant for a worker process (`reward_isolation='process'`) runs in a thread (said once)."""


class RewardWorkerTraceback(Exception):
    """The traceback of an exception raised by a reward function in its worker process (the error's cause)."""


class NonFiniteError(RuntimeError):
    """Raised when more NaN/inf rewards or losses occurred than `max_nonfinite` allows (a single-process run saves
    its last completed step first: `TeamTrainer.stop_after_reward_error`)."""


class NonFiniteRewardWarning(UserWarning):
    """A reward function returned NaN or infinity for the first time in a run (named, with the count and the step;
    later ones are counted as `nonfinite/rewards` against `max_nonfinite`)."""


_NONFINITE_RUNS: dict[str, Any] = {}
"""Each reward function (by name) that returned NaN/inf -> the trainer state of the run it last did so in."""


def note_nonfinite_reward(name: str, trainer_state: TrainerState | None) -> bool:
    """Remember that reward function `name` returned NaN/inf in the run of `trainer_state` (the trainer's
    `TrainerState`, new at every `train()`); whether it is the first time in that run."""
    first = name not in _NONFINITE_RUNS or _NONFINITE_RUNS[name] is not trainer_state
    _NONFINITE_RUNS[name] = trainer_state
    return first


def nonfinite_reward_names(trainer_state: TrainerState | None) -> list[str]:
    """The reward functions that returned NaN/inf in the run of `trainer_state` (see [`note_nonfinite_reward`])."""
    return sorted(name for name, state in _NONFINITE_RUNS.items() if state is trainer_state)


class NonFiniteCounter:
    """Counts the NaN/inf rewards and losses of a run and raises past `max_nonfinite` (both trainers).

    Args:
        max_nonfinite: How many non-finite rewards and losses a run may skip.
        trainer_state: Returns the run's `TrainerState`, so that the error names the reward functions that returned
            NaN/inf in it ([`nonfinite_reward_names`]); `None`: not named.
    """

    def __init__(self, max_nonfinite: int, trainer_state: Callable[[], Any] | None = None) -> None:
        self.max_nonfinite = max_nonfinite
        self.count = 0
        self.trainer_state = trainer_state

    def add(self, count: int, what: str) -> None:
        if count == 0:
            return
        self.count += count
        if self.count > self.max_nonfinite:
            names = nonfinite_reward_names(self.trainer_state()) if self.trainer_state is not None else []
            named = f" (reward functions that returned NaN/inf: {', '.join(f'`{n}`' for n in names)})" if names else ""
            raise NonFiniteError(
                f"{self.count} non-finite rewards/losses so far (latest: {what}){named}, more than "
                f"`max_nonfinite={self.max_nonfinite}`. They were skipped, not replaced; check the reward "
                "functions for NaN/inf, lower the learning rate, or raise `max_nonfinite`."
            )


def unscorable_message(names: Sequence[str], what: str, fix: str) -> str:
    """The message for completions that every reward function skipped (returned `None` for)."""
    return (
        f"Every reward function ({', '.join(f'`{n}`' for n in names)}) returned None for {what}, so there is "
        f"nothing to learn from. None means \"this function does not apply to this completion\"; {fix} Return a "
        "number instead where a completion should be scored (e.g. 0.0, or a penalty for an invalid output)."
    )
