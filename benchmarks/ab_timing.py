"""Paired A/B timing of two settings of one call, shared by the benchmarks that compare a path with its fallback."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def time_ab(run: Callable[[bool], Any], reps: int, labels: tuple[str, str], changed: str) -> dict[str, float]:
    """Median wall and CPU milliseconds of `run(False)` and `run(True)`, alternated A B B A ...

    Alternating makes a busy neighbour on the machine slow both settings alike. Both settings must return the same
    output on their first (warm-up) call, else `AssertionError("<changed> changed the samples")`. The minimum wall
    time is reported too: on a shared machine it is the figure least disturbed by other processes.

    Returns:
        `<label>_wall_ms`, `<label>_cpu_ms`, `<label>_min_wall_ms` for `labels = (label of False, label of True)`,
        and `saved_wall_ms`, `saved_min_wall_ms`, `speedup_wall`, `speedup_cpu` (False's time over True's).
    """
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    outputs = {flag: run(flag) for flag in (False, True)}
    if outputs[False] != outputs[True]:
        raise AssertionError(f"{changed} changed the samples")
    for rep in range(reps):
        for flag in ((False, True) if rep % 2 == 0 else (True, False)):
            wall, cpu = time.perf_counter(), time.process_time()
            run(flag)
            samples[flag].append((time.perf_counter() - wall, time.process_time() - cpu))
    result = {}
    for flag, name in zip((False, True), labels):
        result[f"{name}_wall_ms"] = 1e3 * statistics.median(s[0] for s in samples[flag])
        result[f"{name}_cpu_ms"] = 1e3 * statistics.median(s[1] for s in samples[flag])
        result[f"{name}_min_wall_ms"] = 1e3 * min(s[0] for s in samples[flag])
    a, b = labels
    result["saved_wall_ms"] = result[f"{a}_wall_ms"] - result[f"{b}_wall_ms"]
    result["saved_min_wall_ms"] = result[f"{a}_min_wall_ms"] - result[f"{b}_min_wall_ms"]
    result["speedup_wall"] = result[f"{a}_wall_ms"] / result[f"{b}_wall_ms"]
    result["speedup_cpu"] = result[f"{a}_cpu_ms"] / result[f"{b}_cpu_ms"]
    return result
