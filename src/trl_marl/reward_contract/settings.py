"""The reward-call settings that both trainers' configs carry, written once: `reward_timeout` and
`reward_isolation` (the contract they set: [`~trl_marl.reward_contract.calls.call_reward_function`]). Both configs
declare them with the field functions below and check them in `__post_init__` (`check_timeout`, `check_choice` with
[`REWARD_ISOLATIONS`])."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from .calls import DEFAULT_REWARD_TIMEOUT

__all__ = ["reward_isolation_field", "reward_timeout_field"]


def reward_timeout_field() -> Any:
    """`reward_timeout`: seconds one reward function call may take (default [`DEFAULT_REWARD_TIMEOUT`])."""
    return field(
        default=DEFAULT_REWARD_TIMEOUT,
        metadata={
            "help": "Seconds one call of a reward function may take before training stops with a RewardTimeoutError "
            "naming the function (a single-process run first saves a checkpoint of the last completed step). The "
            "default, 600, is far above a local Python reward (milliseconds) and leaves room for a sandboxed "
            "coding reward (parallel programs, seconds each) or a remote verifier that retries; set it above the "
            "longest legitimate call, e.g. the remote client's whole retry budget. None disables the limit. The "
            "call runs where `reward_isolation` says; a function's own `reward_timeout` attribute overrides this "
            "value for that function."
        },
    )


def reward_isolation_field() -> Any:
    """`reward_isolation`: where a reward call with a time limit runs (default `"process"`)."""
    return field(
        default="process",
        metadata={
            "help": "Where a reward call with a `reward_timeout` runs. 'process': in the function's own long-lived "
            "worker process (forked at its first call; each call's arguments pickled to it), killed at the limit "
            "even when stuck in C code (a backtracking regular expression) and then replaced at the next call; a "
            "crash, SystemExit or os._exit there is a RewardFunctionError; what the function keeps in its own "
            "memory (a scorer loaded on first use, caches, counters) stays in the worker between calls and does "
            "not reach the trainer. 'thread': in a thread of the trainer's process, which keeps such side effects "
            "but cannot be killed (an overrunning call is abandoned, a late result refused). A function with a "
            "model on a GPU runs in a thread either way. A function's own `reward_isolation` attribute overrides "
            "this value for that function."
        },
    )
