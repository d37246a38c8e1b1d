"""How many torch threads a CPU run uses, when the user has not said.

PyTorch starts one OpenMP thread per core. A tiny model's matrix products are too small to split: with several
threads each op pays the synchronisation (and, on a shared machine, oversubscription: a small Linear took 7.8 ms per
call with 2 threads vs 33 us with 1), so the toy models train many times faster on one thread, while a 100M+
parameter model does enough work per op to use every core. The rule ([`choose_cpu_threads`]): one thread below
[`SMALL_MODEL_PARAMS`] parameters, torch's default (one per core) above, fewer on a busy machine; an explicit choice
always wins: `OMP_NUM_THREADS` in the environment, or the trainer configs' `cpu_threads` field (`--cpu_threads` on the
command line, also on `trl-marl demo`).

A busy machine: one thread per core assumes the cores are free. When other processes keep them busy, torch's threads
wait on each other at every op (a thread that lost its core holds up the rest): on a 2-core machine at load average
7-10, a 135M model took 226 s per MAGRPO step with 2 threads where the docs say ~10 s. [`busy_cores`] estimates, from
the load average, how many of this process's cores other work occupies; [`choose_cpu_threads`] then takes the cores
left (at least one), and says so once, naming `--cpu_threads` and `OMP_NUM_THREADS`.

The trainers call [`apply_cpu_threads`] when they start on CPU, and it says once per process what it chose.

A colocated vLLM engine on CPU (vLLM's CPU worker) replaces `torch.set_num_threads` with a function that only logs,
for the whole process and for good: every later thread setting is skipped. [`set_torch_threads`] (which
[`apply_cpu_threads`] calls) notices a replaced `torch.set_num_threads` and says once that the setting was not
applied and how many threads torch runs instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

logger = logging.getLogger(__name__)

SMALL_MODEL_PARAMS = 20_000_000
"""Below this many parameters a CPU run uses one torch thread (the toy models have 0.1-2M; SmolLM2 has 135M)."""

_announced = False
_replaced_warned = False
_busy_at_start: float | None = None
"""[`busy_cores`] as measured at this process's first thread choice, reused by later ones: by then the load average
counts this process's own training (a second trainer in one process would see its first one as other work), and one
process keeps one thread count (one set of digits) for all its runs."""


HOW_TO_CHOOSE = "set `--cpu_threads N` (the config's `cpu_threads`) or OMP_NUM_THREADS=N to choose"
"""The end of every thread message: the option and the environment variable that decide instead."""


def choose_cpu_threads(num_params: int, cores: int, environ: Mapping[str, str] | None = None,
                       cpu_threads: int | None = None, busy: float = 0.0) -> tuple[int | None, str]:
    """The torch thread count for a CPU run, and why.

    Args:
        num_params: Parameters of the largest model that will run.
        cores: CPU cores available to the process.
        environ: The environment (default `os.environ`): a set `OMP_NUM_THREADS` is the user's choice.
        cpu_threads: An explicit thread count (a config's `cpu_threads`), or None.
        busy: How many of the `cores` other work keeps busy ([`busy_cores`]; 0: an idle machine). A large model then
            gets the cores left, rounded, at least one; with `busy >= cores` the machine is oversubscribed and it
            gets one.

    Returns:
        `(threads, reason)`: `threads` is the count to set, or None to leave torch's current setting alone.

    Example:

    ```python
    >>> choose_cpu_threads(135_000_000, cores=2, environ={}, busy=6.0)[0]
    1
    ```
    """
    environ = os.environ if environ is None else environ
    if cpu_threads is not None:
        if cpu_threads < 1:
            raise ValueError(f"`cpu_threads` must be >= 1 or None, got {cpu_threads}.")
        return cpu_threads, f"{cpu_threads} torch thread(s), as set by `cpu_threads`"
    if environ.get("OMP_NUM_THREADS"):
        return None, f"OMP_NUM_THREADS={environ['OMP_NUM_THREADS']} (set by you) decides the torch threads"
    millions = f"{num_params / 1e6:.2f}M"
    if num_params < SMALL_MODEL_PARAMS:
        return 1, (f"1 torch thread for a {millions}-parameter model on CPU (small models run fastest on one; "
                   "set OMP_NUM_THREADS or the config's `cpu_threads` to choose)")
    cores = max(1, cores)
    free = cores - max(0.0, busy)
    if free < cores - 0.5:  # other work holds at least half a core of ours
        threads = max(1, min(cores, int(free + 0.5)))
        state = "oversubscribed" if free <= 0 else "busy"
        return threads, (f"{threads} torch thread(s) for a {millions}-parameter model on CPU, not one per core: the "
                         f"machine is {state} (other work keeps about {busy:.1f} of this process's {cores} cores "
                         f"busy, from the load average), and threads that lose their core hold up the others; "
                         f"{HOW_TO_CHOOSE}")
    return cores, (f"{cores} torch threads (one per core) for a {millions}-parameter model on CPU "
                   "(set OMP_NUM_THREADS or the config's `cpu_threads` to choose)")


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def busy_cores(cores: int, load: float | None = None, total: int | None = None) -> float:
    """How many of this process's `cores` other work keeps busy: the 1-minute load average (`load`, default
    `os.getloadavg()`; 0 where there is none) less this process's own share (one runnable thread while it starts),
    spread evenly over the machine's `total` cores (default `os.cpu_count()`; a process pinned to some of them gets
    its share).

    Example:

    ```python
    >>> busy_cores(2, load=7.0, total=2), busy_cores(2, load=0.8, total=2), busy_cores(2, load=9.0, total=8)
    (6.0, 0.0, 2.0)
    ```
    """
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # not on Unix
            return 0.0
    total = max(total or os.cpu_count() or cores, cores, 1)
    return max(0.0, load - 1.0) * cores / total


def count_parameters(models: Iterable[Any]) -> int:
    """Parameters of the largest of `models` (agents sharing a base model count it once each)."""
    return max((sum(p.numel() for p in model.parameters()) for model in models), default=0)


def set_num_threads_replaced() -> str | None:
    """The import path of what replaced `torch.set_num_threads` (e.g. vLLM's CPU worker), or None when it is torch's
    own."""
    import torch

    current = torch.set_num_threads
    if current is torch._C.set_num_threads:
        return None
    return f"{getattr(current, '__module__', None) or '?'}.{getattr(current, '__qualname__', repr(current))}"


def set_torch_threads(threads: int) -> bool:
    """`torch.set_num_threads(threads)`, or, when something replaced it for the process (a colocated vLLM engine on
    CPU does), one warning per process that the setting was skipped.

    Returns:
        Whether torch now runs `threads` threads.
    """
    import torch

    global _replaced_warned
    if torch.get_num_threads() == threads:
        return True
    replaced = set_num_threads_replaced()
    if replaced is None:
        torch.set_num_threads(threads)
        return torch.get_num_threads() == threads
    if not _replaced_warned:
        _replaced_warned = True
        logger.warning(
            "torch.set_num_threads has been replaced in this process by %s (a colocated vLLM engine on CPU does this "
            "for the whole process, and every later call does nothing): trl-marl's setting of %d torch thread(s) is "
            "not applied, torch keeps %d. Set OMP_NUM_THREADS before starting Python to choose, or run vLLM as a "
            "server (`vllm_mode='server'`).", replaced, threads, torch.get_num_threads(),
        )
    return False


def apply_cpu_threads(models: Iterable[Any], cpu_threads: int | None = None, on_cpu: bool | None = None) -> int:
    """Set torch's thread count for a CPU run of `models` ([`choose_cpu_threads`]), saying once what was chosen.

    Args:
        models: The models that will run (their parameters are counted).
        cpu_threads: An explicit count (a config's `cpu_threads`), or None to choose from the model's size and the
            machine's load ([`busy_cores`]).
        on_cpu: Whether the run is on CPU (default: no CUDA, XPU or MPS device is available). On an accelerator
            nothing changes unless `cpu_threads` is set.

    Returns:
        The torch thread count in effect afterwards.
    """
    import torch

    global _announced
    if on_cpu is None:
        on_cpu = not (torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())
                      or torch.backends.mps.is_available())
    if not on_cpu and cpu_threads is None:
        return torch.get_num_threads()
    global _busy_at_start
    cores, params = available_cores(), count_parameters(models)
    if _busy_at_start is None:
        _busy_at_start = busy_cores(cores)
    threads, reason = choose_cpu_threads(params, cores, cpu_threads=cpu_threads, busy=_busy_at_start)
    if threads is not None:
        set_torch_threads(threads)
    if not _announced:
        # fewer threads than cores because the machine is busy: a warning, so that it shows without a handler
        busy = cpu_threads is None and threads is not None and params >= SMALL_MODEL_PARAMS and threads < cores
        logger.log(logging.WARNING if busy else logging.INFO, "%s", reason)
        _announced = True
    return torch.get_num_threads()


def show_thread_choice() -> None:
    """Print [`apply_cpu_threads`]'s one line on stderr (the command line and the examples call this)."""
    from .quiet import other_rank_quieted

    log = logging.getLogger(__name__)
    if other_rank_quieted():  # a process of a multi-process run other than the main one: the main one says it
        return
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[trl-marl] %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # said once, not again by a root handler that a library configured
