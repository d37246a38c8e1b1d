"""The errors and warnings of the reward contract (`trl_marl.rewarding`), and the count of non-finite scores."""

from __future__ import annotations

from collections.abc import Sequence


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something other than one score (or `None`) per completion."""


class RewardTimeoutError(RewardFunctionError):
    """A reward function call took longer than the config's `reward_timeout` (its worker process was killed, or
    its thread abandoned; see [`~trl_marl.rewarding.calls.call_reward_function`])."""


class RewardTimeoutWarning(UserWarning):
    """A reward function runs without `reward_timeout`: it sets signal handlers, so it must run in the main thread."""


class RewardIsolationWarning(UserWarning):
    """A reward function meant for a worker process (`reward_isolation='process'`) runs in a thread (said once)."""


class RewardWorkerTraceback(Exception):
    """The traceback of an exception raised by a reward function in its worker process (the error's cause)."""


class NonFiniteError(RuntimeError):
    """Raised when more NaN/inf rewards or losses occurred than `max_nonfinite` allows."""


class NonFiniteCounter:
    """Counts the NaN/inf rewards and losses of a run and raises past `max_nonfinite` (both trainers)."""

    def __init__(self, max_nonfinite: int) -> None:
        self.max_nonfinite = max_nonfinite
        self.count = 0

    def add(self, count: int, what: str) -> None:
        if count == 0:
            return
        self.count += count
        if self.count > self.max_nonfinite:
            raise NonFiniteError(
                f"{self.count} non-finite rewards/losses so far (latest: {what}), more than "
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
