"""Where a benchmark record comes from: the commit it ran at, whether the tree was clean, and the machine.

A record is evidence only if its code can be found again. [`git_state`] reads the commit and the paths that differ
from it *when the run starts* (a record rewritten after every seed keeps that first reading, not a later one), and
[`require_clean`] refuses to start on a tree with uncommitted changes unless the caller allows it (development
runs); the record then says `"dirty": true` and lists the changed paths. Result files under `benchmarks/results/`
are not code and never make the tree dirty, so a study may write its records before they are committed.

[`machine_info`] names what decides the floating-point results on a CPU besides the code: the processor, the
instruction set PyTorch's kernels dispatch to, the BLAS and its settings, and the thread count (docs/demo.md,
"What reproduces where").
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = "benchmarks/results"
"""Record files: never code, so never a reason to call the tree dirty."""

NUMERICS_ENV = (
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "MKL_ENABLE_INSTRUCTIONS",
    "ONEDNN_MAX_CPU_ISA",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
"""Environment variables that change which CPU kernels run, hence the last bits of every result."""


def _git(args: list[str], cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def git_state(root: str | os.PathLike[str] = REPO_ROOT) -> dict[str, Any]:
    """The commit checked out at `root` and the paths that differ from it (tracked changes and untracked files,
    ignored files and `benchmarks/results/` excepted).

    Returns:
        `{"commit": sha, "dirty": bool, "dirty_paths": [...]}`; `commit` is `"unknown"` and `dirty` None outside a
        git checkout (an installed copy), where nothing can be checked.
    """
    root = Path(root)
    try:
        commit = _git(["rev-parse", "HEAD"], root).strip()
        status = _git(["status", "--porcelain", "--untracked-files=all", "--", ".", f":(exclude){RESULTS}"], root)
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "dirty": None, "dirty_paths": []}
    paths = sorted({line[3:].split(" -> ")[-1] for line in status.splitlines() if line.strip()})
    return {"commit": commit, "dirty": bool(paths), "dirty_paths": paths}


def require_clean(state: dict[str, Any], allow_dirty: bool, flag: str = "--allow-dirty") -> None:
    """Refuse to start a run whose record would not name its code: a tree with uncommitted changes, unless
    `allow_dirty` (then the record says `"dirty": true`).

    Raises:
        SystemExit: The tree is dirty and `allow_dirty` is False; the message lists the changed paths.
    """
    if not state["dirty"] or allow_dirty:
        return
    shown = state["dirty_paths"][:10]
    more = f" and {len(state['dirty_paths']) - len(shown)} more" if len(state["dirty_paths"]) > len(shown) else ""
    raise SystemExit(
        f"The working tree differs from commit {state['commit'][:12]} ({', '.join(shown)}{more}): a record made now "
        f"would not name the code that produced it. Commit or stash the changes, or pass {flag} for a development "
        'run (the record then says "dirty": true and lists the paths).'
    )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> list[str]:
    """The instruction-set extensions that change which kernels run (x86: AVX2, AVX-512 and its bf16/VNNI, AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    return sorted(f for f in flags if f in {"avx", "avx2", "fma"} or f.startswith(("avx512", "amx")))
    except OSError:
        pass
    return []


def machine_info() -> dict[str, Any]:
    """The machine as far as it decides a CPU run's numbers (and its speed)."""
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numerics_env": {k: os.environ[k] for k in NUMERICS_ENV if k in os.environ},
    }
