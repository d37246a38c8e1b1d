"""The CPU kernels of `trl-marl demo`: pinned, so that its digits do not depend on the machine's instruction set.

Why and what was measured: docs/demo.md, "What reproduces where". [`restart_with_pinned_numerics`] restarts a demo
process with [`NUMERICS_PINS`] in its environment; [`numerics_info`] says what a run computed with.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterable, Mapping
from typing import Any

NUMERICS_PINS: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
"""The CPU kernels `trl-marl demo` computes with on every x86 machine with AVX2 (docs/demo.md, "What reproduces
where").

A run is bit-identical from process to process on one machine, but its last bits depend on which kernels the machine
picks, and 80 sampled PPO updates turn those bits into other digits. Two choices vary: PyTorch's own kernels
dispatch on the CPU's widest instruction set (AVX-512 where the CPU has it, AVX2 here), and MKL's matrix products
pick their code path and blocking from the CPU model and its cache sizes. `ATEN_CPU_CAPABILITY=avx2` fixes the first,
MKL's conditional numerical reproducibility branch `MKL_CBWR=AVX2` (fixed code path, cache sizes and reduction
order) the second. On one AVX2 machine, `ATEN_CPU_CAPABILITY=default` and any `MKL_CBWR` branch each changed the
trained weights; the pins cost no measurable time there (docs/demo.md). A variable the user set is left as it is, and
[`NATIVE_KERNELS_ENV`] turns the pins off.
"""

NATIVE_KERNELS_ENV = "TRL_MARL_NATIVE_KERNELS"
"""Set to 1 to run the demo on the kernels the machine picks (faster on some CPUs; the digits then depend on it)."""

_DEMO_PROGRAMS = ("trl-marl", "trl-marl.exe", "cli.py", "demo.py")
"""`sys.argv[0]` of a process started as the demo's command line (`trl-marl demo`, `python -m trl_marl.cli demo`,
`python -m trl_marl.scripts.demo`): only such a process is restarted with [`NUMERICS_PINS`]."""


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (`/proc/cpuinfo`); empty where that file does not exist."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def numerics_pins(environ: Mapping[str, str], flags: Iterable[str]) -> dict[str, str]:
    """The variables of [`NUMERICS_PINS`] that a demo process still lacks: none on a CPU without AVX2 (not x86, or an
    old one: there the kernels cannot be pinned to the README's), none that the user set to a value of their own, and
    none at all when [`NATIVE_KERNELS_ENV`] is set.

    Example:

    ```python
    >>> numerics_pins({"MKL_CBWR": "COMPATIBLE"}, {"avx", "avx2"})
    {'ATEN_CPU_CAPABILITY': 'avx2'}
    ```
    """
    if "avx2" not in set(flags) or environ.get(NATIVE_KERNELS_ENV, "") not in ("", "0"):
        return {}
    return {key: value for key, value in NUMERICS_PINS.items() if key not in environ}


def restart_with_pinned_numerics(
    environ: Mapping[str, str] | None = None,
    flags: Iterable[str] | None = None,
    programs: Iterable[str] | None = _DEMO_PROGRAMS,
) -> None:
    """Restart this demo process with [`NUMERICS_PINS`] set, when any is missing; return when none is.

    The variables must be set before the first tensor operation (PyTorch fixes its kernels then, MKL at its first
    call), and importing `trl_marl` already runs some, so the process re-executes itself (`os.execve`, the same
    interpreter and command line, `sys.orig_argv`) with them in its environment. A process that was not started as
    the demo's command line (a test, a script calling [`run_demo`]) is never restarted; a script that measures the
    demo restarts itself by passing `programs=None`.
    """
    environ = os.environ if environ is None else environ
    if programs is not None and os.path.basename(sys.argv[0]) not in set(programs):
        return
    pins = numerics_pins(environ, cpu_flags() if flags is None else flags)
    if not pins:
        return
    print(
        "Pinning the CPU kernels so that the digits match the README's on any AVX2 machine: "
        + " ".join(f"{k}={v}" for k, v in pins.items())
        + " (docs/demo.md, 'What reproduces where')",
        flush=True,
    )
    os.execve(sys.executable, list(sys.orig_argv), {**environ, **pins})


def numerics_info() -> dict[str, Any]:
    """What decided this run's last bits (written to `demo_metrics.json`): kernels, their pins, threads, the CPU."""
    import torch

    return {
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "pins": {k: os.environ[k] for k in NUMERICS_PINS if k in os.environ},
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "avx512": any(f.startswith("avx512") for f in cpu_flags()),
    }


def kernel_tag() -> str:
    """The kernels this process computes with, as a folder name: the demo keeps the toy models it pretrains under it,
    so that a model pretrained on other kernels (an older, unpinned run, or `TRL_MARL_NATIVE_KERNELS=1`) is never
    trained on, which would change the digits again. `"avx2-mkl-avx2"` when pinned, `"avx2-mkl-default"` on this
    kind of machine unpinned."""
    import torch

    cbwr = os.environ.get("MKL_CBWR", "default").split(",")[0].replace("BRANCH=", "")
    return f"{torch.backends.cpu.get_cpu_capability().lower()}-mkl-{cbwr.lower()}"
