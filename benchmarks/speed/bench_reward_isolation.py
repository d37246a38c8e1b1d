"""What `reward_isolation` costs per reward call, and what it keeps (issue 54: reward functions lost their state).

Three ways to run a reward call with a `reward_timeout`, interleaved call by call on the same function objects:

- `thread`: a thread of this process (state kept, a call stuck in C code cannot be stopped);
- `fork per call`: a child forked for each call (the behaviour before issue 54; `utils.bounded.call_in_child`);
- `worker`: the function's long-lived worker process (`reward_isolation="process"` now; state kept in the worker).

Two functions: `trivial` (returns a constant) and `lazy` (sleeps `--load-s` seconds the first time it is called in
a process, as a reward that loads its scorer on first use). Reported per mode: the median seconds per call over
`--calls` calls and the number of loads the lazy reward did, and the ratios against `thread`. Run it alone: other
busy processes change the timings (the load counts do not depend on them).

    PYTHONPATH=src python benchmarks/speed/bench_reward_isolation.py [--calls 10] [--load-s 0.3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.provenance import git_state, machine_info  # noqa: E402

from trl_marl.reward_contract import call_reward_function  # noqa: E402
from trl_marl.reward_contract.calls import checked_reward_values  # noqa: E402
from trl_marl.utils.bounded import call_in_child  # noqa: E402


class Lazy:
    """Loads (sleeps `load_s`, appends a line to `log`) on its first call in a process, then scores 1.0."""

    def __init__(self, load_s: float, log: str) -> None:
        self.load_s, self.log, self.loaded = load_s, log, False

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        if not self.loaded:
            time.sleep(self.load_s)
            with open(self.log, "a") as handle:
                handle.write(f"{os.getpid()}\n")
            self.loaded = True
        return [1.0] * len(completions)


def trivial(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    return [1.0] * len(completions)


def one_call(mode: str, func: Any) -> float:
    arguments = {"prompts": ["p"] * 8, "completions": ["c"] * 8}
    start = time.perf_counter()
    if mode == "fork per call":
        call_in_child(lambda: checked_reward_values(func(**arguments), "f", 8), 60.0)
    else:
        call_reward_function(func, "f", 8, timeout=60.0, isolation="process" if mode == "worker" else "thread",
                             arguments=arguments)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--load-s", type=float, default=0.3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    modes = ("thread", "fork per call", "worker")
    logs = {mode: tempfile.NamedTemporaryFile(delete=False, suffix=".log").name for mode in modes}
    lazy = {mode: Lazy(args.load_s, logs[mode]) for mode in modes}
    seconds: dict[str, dict[str, list[float]]] = {m: {"trivial": [], "lazy": []} for m in modes}
    for _ in range(args.calls):  # interleaved: each round calls every mode once
        for mode in modes:
            seconds[mode]["trivial"].append(one_call(mode, trivial))
            seconds[mode]["lazy"].append(one_call(mode, lazy[mode]))
    results = {}
    for mode in modes:
        loads = len(Path(logs[mode]).read_text().split())
        results[mode] = {"trivial_median_s": statistics.median(seconds[mode]["trivial"]),
                         "lazy_total_s": sum(seconds[mode]["lazy"]), "lazy_loads": loads}
    for mode in modes:
        for key in ("trivial_median_s", "lazy_total_s"):
            results[mode][key.replace("_s", "_vs_thread")] = results[mode][key] / results["thread"][key]
    record = {"benchmark": "reward_isolation", "command": " ".join(["python", *sys.argv]),
              "settings": vars(args), "git": git_state(), "machine": machine_info(), "results": results}
    for mode, values in results.items():
        print(f"{mode:>14}: trivial {1000 * values['trivial_median_s']:.2f} ms/call "
              f"({values['trivial_median_vs_thread']:.1f}x thread), lazy {values['lazy_total_s']:.2f} s for "
              f"{args.calls} calls ({values['lazy_loads']} loads)")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1))
    return record


if __name__ == "__main__":
    main()
