"""Overhead and throughput of the code-execution sandbox (`trl_marl.sandbox`).

Measures, on this machine:

1. the wall-clock time of one sandboxed run of a trivial passing program, sequential, `--runs` times (median, p90,
   min), with the full isolation (cgroup + namespaces + sandbox user + Python guards) and with layers turned off,
   next to the start-up time of a bare `python -I -c pass` (the floor of any fresh-interpreter sandbox);
2. programs per second for a HumanEval-sized batch (164 synthetic programs, one function + 7 asserts each) with
   `os.cpu_count()` workers;
3. with `--humaneval PATH` (OpenAI's `HumanEval.jsonl.gz`, never read by the package itself):
   HumanEval's 164 canonical solutions (every one must pass: a check of the harness) and 164 wrong solutions
   (`return None`), with their throughput.

Run it alone: other busy processes on the cores change every number (see DESIGN.md, "CPU timing pitfall").

    PYTHONPATH=src python benchmarks/speed/bench_sandbox.py [--runs 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from trl_marl.sandbox import SandboxLimits, TestSpec, run_program, run_programs
from trl_marl.utils.code import build_humaneval_program

TRIVIAL = "def f(x):\n    return x + 1\n"
TRIVIAL_TESTS = ["assert f(1) == 2"]


def _stats(seconds: list[float]) -> dict[str, float]:
    ms = sorted(1000 * s for s in seconds)
    return {
        "median_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ms[min(len(ms) - 1, int(0.9 * len(ms)))], 1),
        "min_ms": round(ms[0], 1),
    }


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def overhead(limits: SandboxLimits, runs: int) -> dict[str, float]:
    """Wall time of sequential runs of a trivial passing program (one warm-up run not counted), and the CPU time
    per run of the sandbox processes and of the caller (less sensitive than wall time to other load)."""
    run_program(TRIVIAL, TRIVIAL_TESTS, limits)
    times = []
    children, caller = _cpu_seconds(resource.RUSAGE_CHILDREN), _cpu_seconds(resource.RUSAGE_SELF)
    for _ in range(runs):
        start = time.perf_counter()
        result = run_program(TRIVIAL, TRIVIAL_TESTS, limits)
        times.append(time.perf_counter() - start)
        assert result.reason == "ok", result
    stats = _stats(times)
    stats["sandbox_cpu_ms"] = round(1000 * (_cpu_seconds(resource.RUSAGE_CHILDREN) - children) / runs, 1)
    stats["caller_cpu_ms"] = round(1000 * (_cpu_seconds(resource.RUSAGE_SELF) - caller) / runs, 1)
    return stats


def bare_startup(runs: int) -> dict[str, float]:
    """Wall time of `python -I -c pass` (no sandbox at all)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True)
        times.append(time.perf_counter() - start)
    return _stats(times)


def synthetic_batch(n: int = 164) -> tuple[list[str], list[TestSpec]]:
    """HumanEval-sized programs: one function of a few lines, 7 asserts in `check` (HumanEval's mean is ~7)."""
    programs, specs = [], []
    for i in range(n):
        programs.append(
            f"def task_{i}(xs):\n"
            f"    total = 0\n"
            f"    for x in xs:\n"
            f"        total += x * {i % 5 + 1}\n"
            f"    return total\n"
        )
        asserts = "\n".join(f"    assert candidate(list(range({k}))) == {(i % 5 + 1) * k * (k - 1) // 2}"
                            for k in range(7))
        specs.append(TestSpec.humaneval(f"def check(candidate):\n{asserts}\n", f"task_{i}"))
    return programs, specs


def throughput(programs: list[str], specs: list[TestSpec], limits: SandboxLimits, workers: int) -> dict[str, float]:
    start = time.perf_counter()
    results = run_programs(programs, specs, limits, max_workers=workers)
    seconds = time.perf_counter() - start
    return {
        "programs": len(programs),
        "seconds": round(seconds, 2),
        "programs_per_s": round(len(programs) / seconds, 1),
        "all_passed": sum(r.all_passed for r in results),
        "tests": sum(r.total for r in results),
        "mean_fraction": round(sum(r.fraction for r in results) / len(results), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50, help="sequential runs for the overhead")
    parser.add_argument("--humaneval", default=None, help="HumanEval.jsonl.gz (part 3 runs only with it)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()

    workers = os.cpu_count() or 1
    full = SandboxLimits()
    report: dict[str, object] = {
        "python": sys.version.split()[0],
        "cpu_count": workers,
        "euid": os.geteuid(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    probe = run_program(TRIVIAL, TRIVIAL_TESTS, full)
    report["isolation"] = list(probe.isolation)
    report["bare_python_startup"] = bare_startup(args.runs)
    report["overhead_full"] = overhead(full, args.runs)
    report["overhead_no_cgroups"] = overhead(SandboxLimits(cgroups=False), args.runs)
    report["overhead_no_namespaces_no_cgroups"] = overhead(SandboxLimits(namespaces=False, cgroups=False), args.runs)
    report["overhead_no_guards"] = overhead(SandboxLimits(python_guards=False), args.runs)
    programs, specs = synthetic_batch()
    report["synthetic_164"] = throughput(programs, specs, full, workers)
    report["synthetic_164_sequential"] = throughput(programs, specs, full, 1)
    path = Path(args.humaneval) if args.humaneval else None
    if path is not None:
        if not path.exists():
            raise SystemExit(f"--humaneval: no file at {path}")
        with gzip.open(path, "rt") as f:
            rows = [json.loads(line) for line in f]
        he_specs = [TestSpec.humaneval(r["test"], r["entry_point"]) for r in rows]
        canonical = [build_humaneval_program(r["prompt"], r["canonical_solution"], r["entry_point"]) for r in rows]
        wrong = [build_humaneval_program(r["prompt"], "    return None\n", r["entry_point"]) for r in rows]
        report["humaneval_canonical"] = throughput(canonical, he_specs, full, workers)
        report["humaneval_return_none"] = throughput(wrong, he_specs, full, workers)
    report["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
