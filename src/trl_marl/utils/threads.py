"""How many torch threads a CPU run uses, when the user has not said.

PyTorch starts one OpenMP thread per core. A tiny model's matrix products are too small to split: with several
threads each op pays the synchronisation (and, on a shared machine, oversubscription: a small Linear took 7.8 ms per
call with 2 threads vs 33 us with 1), so the toy models train many times faster on one thread, while a 100M+
parameter model does enough work per op to use every core. The rule ([`choose_cpu_threads`]): one thread below
[`SMALL_MODEL_PARAMS`] parameters, torch's default (one per core) above; an explicit choice always wins:
`OMP_NUM_THREADS` in the environment, or the trainer configs' `cpu_threads` field.

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


def choose_cpu_threads(num_params: int, cores: int, environ: Mapping[str, str] | None = None,
                       cpu_threads: int | None = None) -> tuple[int | None, str]:
    """The torch thread count for a CPU run, and why.

    Args:
        num_params: Parameters of the largest model that will run.
        cores: CPU cores available to the process.
        environ: The environment (default `os.environ`): a set `OMP_NUM_THREADS` is the user's choice.
        cpu_threads: An explicit thread count (a config's `cpu_threads`), or None.

    Returns:
        `(threads, reason)`: `threads` is the count to set, or None to leave torch's current setting alone.
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
    return max(1, cores), (f"{max(1, cores)} torch threads (one per core) for a {millions}-parameter model on CPU "
                           "(set OMP_NUM_THREADS or the config's `cpu_threads` to choose)")


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
        cpu_threads: An explicit count (a config's `cpu_threads`), or None to choose from the model's size.
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
    threads, reason = choose_cpu_threads(count_parameters(models), available_cores(), cpu_threads=cpu_threads)
    if threads is not None:
        set_torch_threads(threads)
    if not _announced:
        logger.info("%s", reason)
        _announced = True
    return torch.get_num_threads()


def show_thread_choice() -> None:
    """Print [`apply_cpu_threads`]'s one line on stderr (the command line and the examples call this)."""
    log = logging.getLogger(__name__)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[trl-marl] %(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # said once, not again by a root handler that a library configured
