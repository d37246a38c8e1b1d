"""One call of a reward function under the reward contract (`trl_marl.reward_contract`): where it runs, its time limit,
and the check of what it returns.

- [`call_reward_function`]: calls a function on `size` completions, directly, in the function's long-lived worker
  process (killed at its `reward_timeout`, replaced at the next call) or in a thread ([`REWARD_ISOLATIONS`]), and
  turns whatever goes wrong into a [`~trl_marl.reward_contract.errors.RewardFunctionError`] naming the function.
- [`checked_reward_values`] and [`reward_value`]: the output checked entry by entry (a number, or `None` to skip).
"""

from __future__ import annotations

import atexit
import inspect
import math
import numbers
import pickle
import threading
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..utils.bounded import (
    ChildDied,
    ForkFailed,
    Overran,
    Worker,
    call_in_child,
    call_in_thread,
    exception_text,
    fork_obstacle,
)
from .errors import (
    NonFiniteRewardWarning,
    RewardFunctionError,
    RewardIsolationWarning,
    RewardTimeoutError,
    RewardTimeoutWarning,
    RewardWorkerTraceback,
    note_nonfinite_reward,
    user_stacklevel,
)

REWARD_ISOLATIONS = ("process", "thread")
"""The choices of the configs' `reward_isolation` field (and of a function's own `reward_isolation` attribute)."""

DEFAULT_REWARD_TIMEOUT = 600.0
"""The configs' default `reward_timeout` (seconds per reward function call; see [`call_reward_function`])."""


def reward_value(value: Any, name: str, index: int) -> float | None:
    """One entry of a reward function's output as a float, or `None` for "skip" (see `trl_marl.reward_contract`).

    NaN and infinity are returned as they are: each trainer decides what a non-finite score means.

    Raises:
        RewardFunctionError: for a string or any other value that is not a real number.
    """
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, np.ndarray) and value.size == 1:
        return reward_value(value.item(), name, index)
    if isinstance(value, (numbers.Real, np.bool_)):
        return float(value)
    hint = (
        " Strings are not parsed: return the number itself (e.g. `float(text)` inside the function)."
        if isinstance(value, (str, bytes))
        else ""
    )
    raise RewardFunctionError(
        f"Reward function `{name}` returned {value!r} ({type(value).__name__}) for completion {index}; each entry "
        f"must be a number (int, float, bool, a NumPy scalar or a one-element tensor) or None to skip.{hint}"
    )


def call_reward_function(func: Callable[..., Any], name: str, size: int, /, timeout: float | None = None,
                         timeout_field: str = "reward_timeout", *, isolation: str = "process",
                         isolation_field: str = "reward_isolation", arguments: Mapping[str, Any] | None = None,
                         **kwargs: Any) -> list[float | None]:
    """Call one reward function on `size` completions and check its output against the reward contract.

    Without a `timeout` the function is called directly. With one, `isolation` says where (docs/extending.md):

    - `"process"` (the default): in the function's own worker process ([`~trl_marl.utils.bounded.Worker`]),
      forked at its first limited call (it inherits the function as it was then) and kept for its later calls,
      which send it their arguments pickled; it sends back only the checked scores. What the function keeps in its
      memory (a scorer loaded on first use, a cache, a counter) stays in the worker from call to call, but never
      reaches the caller: a function whose side effects the caller reads must run in `"thread"` mode. A call that
      overruns is *killed* at the limit with its worker, even in C code that holds the GIL (a backtracking regular
      expression); the next call starts a new worker and warns that the state is lost. A crash or `os._exit` is a
      [`RewardFunctionError`]. Arguments that cannot be pickled (a lambda in a dataset column) run in a process
      forked for the call instead, as does a function that takes no weak reference; the worker is closed when its
      function is garbage-collected. A function that holds a model or tensor on a GPU, or fails in the child
      because CUDA cannot be used after a fork, runs in a thread, as every function does where `os.fork` is missing
      (Windows), with a [`RewardIsolationWarning`] once.
    - `"thread"`: in a daemon thread, awaited at most `timeout` seconds. A call that overruns is *abandoned* (Python
      cannot kill a thread), and a result that comes back after the limit (C code holding the GIL keeps the caller
      from noticing the limit on time) is refused. The thread gets the caller's context variables, autograd mode
      and CUDA device. A function that fails there because it sets signal handlers (main thread only) is called
      again directly, without the limit, with a [`RewardTimeoutWarning`].

    A `SystemExit` or `KeyboardInterrupt` from the function (or a Ctrl-C while it runs here) is a
    [`RewardFunctionError`] too: a reward cannot end training without its checkpoint.

    Args:
        func: The reward function, called as `func(**arguments, **kwargs)`.
        name: Its name, for messages.
        size: The number of completions it must score.
        timeout: Seconds one call may take; `None` waits as long as it takes.
        timeout_field: The config field that holds `timeout`, for the message (e.g. `"MAGRPOConfig.reward_timeout"`).
        isolation: `"process"` or `"thread"` (see above; [`REWARD_ISOLATIONS`]).
        isolation_field: The config field that holds `isolation`, for messages.
        arguments: What the function receives (`prompts`, `completions` and the keyword arguments), as a mapping,
            so that a dataset column may have any name (`timeout`, `name`, ...).
        **kwargs: More arguments for the function.

    The first NaN or infinite score of a function in a run is named in a [`NonFiniteRewardWarning`] (the function,
    how many of its scores, the step, turn and agent); later ones are counted by the trainer (`nonfinite/rewards`).

    Returns:
        One float (possibly NaN or infinite) or `None` per completion.

    Raises:
        RewardTimeoutError: when the call did not return within `timeout` seconds.
        RewardFunctionError: when the function raises, returns something that is not a list of `size` entries,
            or an entry that is not a number or `None`.
    """
    kwargs = {**(arguments or {}), **kwargs}
    values = _call_and_check(func, name, size, timeout, timeout_field, isolation, isolation_field, kwargs)
    warn_nonfinite(values, name, kwargs)
    return values


def warn_nonfinite(values: Sequence[float | None], name: str, arguments: Mapping[str, Any]) -> None:
    """Warn ([`NonFiniteRewardWarning`]) the first time in a run that reward function `name` returned NaN or
    infinity: how many of `values`, at which step (`arguments["trainer_state"]`), turn and agent."""
    bad = [v for v in values if v is not None and not math.isfinite(v)]
    state = arguments.get("trainer_state")
    if not bad or not note_nonfinite_reward(name, state):
        return
    nan = sum(math.isnan(v) for v in bad)
    kinds = " and ".join(part for part in (f"{nan} NaN" if nan else "", f"{len(bad) - nan} infinite"
                                           if len(bad) > nan else "") if part)
    step = getattr(state, "global_step", None)
    where = [f"step {step + 1}"] if isinstance(step, int) else []
    where += [f"{key} {arguments[key]}" for key in ("turn", "agent_index") if arguments.get(key) is not None]
    warnings.warn(
        f"Reward function `{name}` returned {kinds} of {len(values)} scores"
        + (f" ({', '.join(where).replace('agent_index', 'agent')})" if where else "")
        + ": the first non-finite score of this run. Such scores are skipped (never replaced by a number) and "
        "counted (`nonfinite/rewards`) against `max_nonfinite`, past which training stops. Return a finite number "
        "(e.g. guard a division by zero or a log of 0), or None for a completion the function does not score.",
        NonFiniteRewardWarning, stacklevel=user_stacklevel(),
    )


def _call_and_check(func: Callable[..., Any], name: str, size: int, timeout: float | None, timeout_field: str,
                    isolation: str, isolation_field: str, kwargs: dict[str, Any]) -> list[float | None]:
    """[`call_reward_function`]'s call and check, without the non-finite warning."""
    if timeout is not None and isolation == "process":
        reason = _CUDA_REASON if _THREAD_ONLY.get(id(func)) is func else fork_obstacle(func)
        try:
            if reason is None:
                return _call_in_process(func, name, size, kwargs, timeout, timeout_field, isolation_field)
        except _NeedsCuda:
            _THREAD_ONLY[id(func)] = func
            reason = _CUDA_REASON
        except ForkFailed as exc:
            reason = f"no worker process could be started ({exc})"
        _warn_once(name, f"Reward function `{name}` runs in a thread, not in a worker process (`{isolation_field}="
                   f"'process'`), because {reason}. A call stuck in C code that holds the GIL (e.g. a backtracking "
                   f"regular expression) cannot be stopped at `{timeout_field}` there (its late result is refused). "
                   f"Set `{isolation_field}='thread'` (or the function's `reward_isolation`) to silence this.")
    try:
        if timeout is None:
            values = func(**kwargs)
        else:
            values, seconds = call_in_thread(func, kwargs, timeout)
            if seconds > timeout:
                raise RewardTimeoutError(
                    f"Reward function `{name}` returned after {seconds:.1f} s, past `{timeout_field}` ({timeout:g} s)"
                    f", while scoring {size} completions: its result is refused. It ran in a thread "
                    f"(`{isolation_field}='thread'`) and held the GIL (C code such as a backtracking regular "
                    f"expression), so the limit could not stop it; `{isolation_field}='process'` kills such a call at "
                    "the limit."
                )
    except Overran:
        raise RewardTimeoutError(
            f"Reward function `{name}` did not return within {timeout:g} s (`{timeout_field}`) while scoring {size} "
            "completions; it may hang (a dead server, a deadlock, an endless loop). Its thread was abandoned "
            f"(`{isolation_field}='thread'`; Python cannot kill it). Fix the function, or raise `{timeout_field}` "
            "if such calls are legitimately slow (`None` disables the limit)."
        ) from None
    except RewardFunctionError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised with the function's name
        if timeout is not None and isinstance(exc, ValueError) and "main thread" in str(exc):  # `signal.signal`
            warnings.warn(
                f"Reward function `{name}` sets signal handlers (e.g. a `signal.alarm` time limit), which Python "
                f"allows in the main thread only, so it runs there, without `{timeout_field}`: a hang in it is not "
                f"caught. Give it a time limit of its own, avoid signals in it, or run it with "
                f"`{isolation_field}='process'` (in a worker process, whose main thread it gets).",
                RewardTimeoutWarning, stacklevel=user_stacklevel(),
            )
            return _call_and_check(func, name, size, None, timeout_field, isolation, isolation_field, kwargs)
        raise RewardFunctionError(f"Reward function `{name}` raised {type(exc).__name__}: {exc}") from exc
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: never end training without its checkpoint
        raise RewardFunctionError(_ended_message(name, type(exc).__name__, exception_text(exc))) from exc
    return checked_reward_values(values, name, size)


def checked_reward_values(values: Any, name: str, size: int) -> list[float | None]:
    """A reward function's output checked against the contract: one float (or `None`) per completion; a
    [`RewardFunctionError`] for anything else (not a list of `size` entries, an entry that is not a number)."""
    if values is None or isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise RewardFunctionError(
            f"Reward function `{name}` returned {type(values).__name__}; it must return a list with one float "
            f"(or None) per completion ({size} here)."
        )
    if len(values) != size:
        raise RewardFunctionError(
            f"Reward function `{name}` returned {len(values)} values for {size} completions; it must return one "
            "float (or None) per completion."
        )
    return [reward_value(v, name, i) for i, v in enumerate(values)]


class _NeedsCuda(Exception):
    """A reward function failed in its worker process because CUDA cannot be used after a fork."""


_CUDA_REASON = "it uses CUDA, which a forked process cannot"
_THREAD_ONLY: dict[int, Any] = {}  # functions that failed in a worker process for want of CUDA (kept: ids stay theirs)
_WARNED: set[str] = set()  # the functions warned about (by name), once each per process

def _warn_once(name: str, message: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(message, RewardIsolationWarning, stacklevel=user_stacklevel())


def _ended_message(name: str, kind: str, text: str) -> str:
    return (f"Reward function `{name}` raised {kind}: {text} (or was interrupted). A reward function may not end or "
            "interrupt training: raise an ordinary exception, or return None for what it cannot score.")


class _RewardWorkers:
    """One long-lived [`Worker`] process per reward function (`reward_isolation="process"`), started at its first
    limited call: what the function keeps between calls (a scorer loaded on first use, a cache) stays in its worker.
    A worker killed at the time limit, or one that died, is replaced at the next call, with a warning that the state
    it kept is lost. A worker lives as long as its function (closed when the function is garbage-collected, and at
    the interpreter's exit); a bound method's worker as long as its object."""

    def __init__(self) -> None:
        self._workers: dict[tuple[int, int], Worker] = {}
        self._lost: set[tuple[int, int]] = set()  # functions whose worker was killed or died (the next one warns)
        # reentrant: a garbage collection while `get` holds it (the fork, a new dict entry) may run a finalizer,
        # `_forget`, in the same thread
        self._lock = threading.RLock()

    @staticmethod
    def _key(func: Callable[..., Any]) -> tuple[tuple[int, int], Any] | None:
        """The identity of `func` and the object whose lifetime bounds its worker; None when it cannot be tracked
        (an object without weak references: it then runs in a process forked per call)."""
        owner, code = (func.__self__, func.__func__) if inspect.ismethod(func) else (func, None)
        try:
            weakref.ref(owner)
        except TypeError:
            return None
        return (id(owner), id(code)), owner

    def get(self, func: Callable[..., Any], name: str) -> Worker | None:
        """The worker of `func` (started now if it has none), or None when `func` cannot be tracked."""
        found = self._key(func)
        if found is None:
            return None
        key, owner = found
        with self._lock:
            worker = self._workers.get(key)
            if worker is not None and not worker.closed:
                return worker

            def handle(request: dict[str, Any]) -> list[float | None]:
                return checked_reward_values(func(**request["kwargs"]), name, request["size"])

            worker = self._workers[key] = Worker(handle)
            weakref.finalize(owner, self._forget, key, worker)
            if key in self._lost:
                self._lost.discard(key)
                warnings.warn(
                    f"Reward function `{name}` runs in a new worker process: its previous one was killed at its time "
                    "limit or died, so the state it kept between calls (a model loaded on first use, caches, "
                    "counters) is lost and is built again.", RewardIsolationWarning, stacklevel=user_stacklevel())
            return worker

    def _forget(self, key: tuple[int, int], worker: Worker) -> None:
        """`func` was garbage-collected: close its worker (its id may be reused by another function)."""
        with self._lock:
            if self._workers.get(key) is worker:
                del self._workers[key]
            self._lost.discard(key)
        worker.close()

    def lost(self, func: Callable[..., Any]) -> None:
        """The worker of `func` was killed or died: forget it (the next call starts another)."""
        found = self._key(func)
        if found is None:
            return
        with self._lock:
            worker = self._workers.pop(found[0], None)
            if worker is not None:
                worker.close()
                self._lost.add(found[0])

    def close_all(self) -> None:
        """Stop every worker (the interpreter's exit)."""
        with self._lock:
            workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            worker.close()


REWARD_WORKERS = _RewardWorkers()
"""The reward functions' worker processes of this process (see [`call_reward_function`])."""
atexit.register(REWARD_WORKERS.close_all)


_NO_REPLY = object()  # the worker could not be asked: the call runs in a child forked for it


def _ask_worker(worker: Worker, name: str, size: int, kwargs: dict[str, Any], timeout: float) -> Any:
    """The worker's reply to one call, or `_NO_REPLY` when the arguments cannot be pickled (said once)."""
    try:
        return worker.call({"size": size, "kwargs": kwargs}, timeout)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        _warn_once(f"{name}:pickle", f"Reward function `{name}` gets arguments that cannot be pickled "
                   f"({type(exc).__name__}: {exc}), so each of its calls runs in a process forked for it, and what "
                   "it keeps between calls (a model loaded on first use, caches) is built again every call. Keep "
                   "the dataset columns and reward arguments picklable to keep its state.")
        return _NO_REPLY


def _call_in_process(func: Callable[..., Any], name: str, size: int, kwargs: dict[str, Any], timeout: float,
                     timeout_field: str, isolation_field: str) -> list[float | None]:
    """One call in the function's worker process (see [`call_reward_function`]): the checked scores, or the error. A
    call whose arguments cannot be pickled runs in a process forked for it instead (the function's state is then not
    kept between such calls)."""
    def work() -> list[float | None]:
        return checked_reward_values(func(**kwargs), name, size)

    try:
        worker = REWARD_WORKERS.get(func, name)  # None for an object without weak references
        reply = _NO_REPLY if worker is None else _ask_worker(worker, name, size, kwargs, timeout)
        if reply is _NO_REPLY:
            reply = call_in_child(work, timeout)
    except Overran:
        REWARD_WORKERS.lost(func)
        raise RewardTimeoutError(
            f"Reward function `{name}` did not return within {timeout:g} s (`{timeout_field}`) while scoring {size} "
            "completions; it may hang (a dead server, a deadlock, an endless loop, C code such as a backtracking "
            f"regular expression). Its worker process was killed (the state it kept is lost). Fix the function, or "
            f"raise `{timeout_field}` if such calls are legitimately slow (`None` disables the limit)."
        ) from None
    except ChildDied as exc:
        REWARD_WORKERS.lost(func)
        raise RewardFunctionError(f"Reward function `{name}` ran in a worker process (`{isolation_field}='process'`) "
                                  f"that ended without its scores: {exc}. Fix the function.") from None
    reply = reply if isinstance(reply, dict) else {}
    if "raised" in reply:
        kind, text = str(reply.get("raised")), str(reply.get("message", ""))
        cause = RewardWorkerTraceback(str(reply.get("traceback", "")))
        if kind == "RewardFunctionError":  # the contract check, run in the worker
            raise RewardFunctionError(text) from cause
        if "Cannot re-initialize CUDA in forked subprocess" in text:
            REWARD_WORKERS.lost(func)
            raise _NeedsCuda
        if kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
            raise RewardFunctionError(_ended_message(name, kind, text)) from cause
        raise RewardFunctionError(f"Reward function `{name}` raised {kind}: {text}") from cause
    values = reply.get("value")
    if (not isinstance(values, list) or len(values) != size
            or not all(v is None or type(v) is float for v in values)):
        raise RewardFunctionError(
            f"Reward function `{name}`'s worker process sent {str(values)[:200]!r}, not {size} scores (float or None)."
        )
    return values
