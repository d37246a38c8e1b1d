"""A reward function keeps its state between calls in its own worker process (issue 54: with the default
`reward_isolation="process"` every call was a fresh fork, so a reward that loads its scorer lazily loaded it on every
call, 10 loads in 10 steps). One long-lived worker per function: state kept, a hang still killed at the limit, the
state's loss said when a worker is replaced, the worker gone with its function."""

from __future__ import annotations

import gc
import os
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

from trl_marl.reward_contract import RewardIsolationWarning, RewardTimeoutError, call_reward_function
from trl_marl.reward_contract.calls import REWARD_WORKERS


class LazyScorer:
    """Loads its 'model' on the first call (recording each load in a file, the only way out of the worker), then
    scores with it; `hang_on` makes one call hang."""

    def __init__(self, loads: Path) -> None:
        self.loads, self.model, self.calls, self.hang_on = loads, None, 0, None

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        if self.model is None:
            with open(self.loads, "a") as handle:
                handle.write(f"{os.getpid()}\n")
            self.model = {"weight": 0.5}
        self.calls += 1
        if self.calls == self.hang_on:
            time.sleep(3600)
        return [self.model["weight"] * self.calls] * len(completions)


def call(func: Any, timeout: float = 30.0) -> list[float | None]:
    return call_reward_function(func, "lazy", 2, timeout=timeout, prompts=["a", "b"], completions=["1", "2"])


def test_a_lazy_reward_loads_once_and_counts_in_its_worker(tmp_path: Path) -> None:
    loads = tmp_path / "loads"
    scorer = LazyScorer(loads)
    assert [call(scorer) for _ in range(10)] == [[0.5 * k] * 2 for k in range(1, 11)]  # its counter went on
    pids = loads.read_text().split()
    assert len(pids) == 1 and pids[0] != str(os.getpid())  # one load, in the worker, never in the trainer
    assert scorer.model is None and scorer.calls == 0  # the trainer's copy is untouched


def test_a_hang_is_still_killed_and_the_next_worker_says_its_state_was_lost(tmp_path: Path) -> None:
    loads = tmp_path / "loads"
    scorer = LazyScorer(loads)
    scorer.hang_on = 3
    assert call(scorer) == [0.5, 0.5] and call(scorer) == [1.0, 1.0]
    start = time.monotonic()
    with pytest.raises(RewardTimeoutError, match="Its worker process was killed \\(the state it kept is lost\\)"):
        call(scorer, timeout=1.0)
    assert time.monotonic() - start < 10
    with pytest.warns(RewardIsolationWarning, match="`lazy` runs in a new worker process: .* state it kept"):
        assert call(scorer) == [0.5, 0.5]  # a fresh worker: the model loaded again, the counter from the trainer's 0
    assert len(loads.read_text().split()) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert call(scorer) == [1.0, 1.0]  # said once


def test_the_worker_goes_with_its_function(tmp_path: Path) -> None:
    scorer = LazyScorer(tmp_path / "loads")
    call(scorer)
    worker = REWARD_WORKERS._workers[REWARD_WORKERS._key(scorer)[0]]
    os.kill(worker.pid, 0)  # alive
    del scorer
    gc.collect()
    assert worker.closed
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(worker.pid, 0)


def test_a_bound_method_keeps_one_worker_for_its_object(tmp_path: Path) -> None:
    class Holder:
        def __init__(self) -> None:
            self.scorer = LazyScorer(tmp_path / "loads")

        def score(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
            return self.scorer(prompts, completions, **kwargs)

    holder = Holder()
    assert [call(holder.score) for _ in range(3)] == [[0.5] * 2, [1.0] * 2, [1.5] * 2]  # a new bound method each time
    assert len((tmp_path / "loads").read_text().split()) == 1


def test_arguments_that_cannot_be_pickled_run_in_a_process_per_call(tmp_path: Path) -> None:
    scorer = LazyScorer(tmp_path / "loads")
    unpicklable = [lambda: None, lambda: None]
    with pytest.warns(RewardIsolationWarning, match="cannot be pickled"):
        values = [call_reward_function(scorer, "lazy_unpicklable", 2, timeout=30.0, prompts=["a", "b"],
                                       completions=["1", "2"], column=unpicklable) for _ in range(2)]
    assert values == [[0.5, 0.5], [0.5, 0.5]]  # forked per call: nothing kept


def test_a_collection_inside_the_registry_does_not_deadlock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A function in a reference cycle is freed by the garbage collector, which may run while the registry holds its
    lock (starting another function's worker): its finalizer closes its worker in the same thread, without waiting
    for the lock (the suite once hung there). The collection is made to happen right there."""
    import threading

    from trl_marl.reward_contract import calls
    from trl_marl.utils.bounded import Worker

    def collecting_worker(handler: Any) -> Worker:
        gc.collect()  # inside `get`, with the registry's lock held
        return Worker(handler)

    scorer = LazyScorer(tmp_path / "cyclic")
    scorer.cycle = scorer  # type: ignore[attr-defined]  # freed only by the collector
    call(scorer)
    worker = REWARD_WORKERS._workers[REWARD_WORKERS._key(scorer)[0]]
    del scorer
    monkeypatch.setattr(calls, "Worker", collecting_worker)
    done = threading.Event()

    def work() -> None:
        try:
            call(LazyScorer(tmp_path / "other"))
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    assert done.wait(60), "the registry deadlocked on its own finalizer"
    assert worker.closed  # the cyclic function's worker went with it


def run_parent_until_eof(tmp_path: Path, source: str) -> tuple[float, int]:
    """Runs `source` as a script with its output captured, which waits until every process holding the output's
    pipes (the script and any worker it left) is gone: the seconds that took and the script's return code."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(source)
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90)
    return time.monotonic() - start, done.returncode


def test_a_worker_leaves_when_its_parent_dies_mid_call(tmp_path: Path) -> None:
    """A parent that ends by `os._exit` (as a pytest-xdist worker does) while its reward worker is busy in a long call
    runs no exit handler: the worker must still leave, or it keeps the pipes it inherited open for as long as the call
    runs (a test runner reading them waits that long)."""
    seconds, _ = run_parent_until_eof(
        tmp_path,
        "import os, threading, time\n"
        "from trl_marl.reward_contract import call_reward_function\n"
        "def score(prompts, completions, **kwargs):\n"
        "    time.sleep(3600)\n"
        "    return [1.0] * len(completions)\n"
        "threading.Thread(target=call_reward_function, args=(score, 'score', 1), daemon=True,\n"
        "                 kwargs=dict(timeout=600.0, prompts=['p'], completions=['c'])).start()\n"
        "time.sleep(3)\n"
        "os._exit(0)\n",
    )
    assert seconds < 60  # the worker left with its parent, not after the hour-long call


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc (Linux)")
def test_a_worker_runs_no_thread_of_its_own() -> None:
    """A thread started in the child of a multi-threaded parent can wait forever on a lock that another parent
    thread held at the fork (a test run hung so: the child's watcher thread never ran, so it never answered): the
    worker watches its parent without one, even when the parent runs threads of its own at the fork."""
    import threading

    from trl_marl.utils.bounded import Worker

    stop = threading.Event()
    busy = [threading.Thread(target=stop.wait, daemon=True) for _ in range(3)]
    for thread in busy:
        thread.start()
    worker = Worker(lambda request: len(os.listdir("/proc/self/task")))
    try:
        assert worker.call(None, timeout=30.0) == {"value": 1}  # the thread that serves it, no other
    finally:
        worker.close()
        stop.set()


def test_an_idle_worker_leaves_when_its_parent_dies(tmp_path: Path) -> None:
    """Between requests the worker polls its parent: a parent that ends by `os._exit` leaves no worker behind holding
    the pipes it inherited (the test runner reading them would wait forever)."""
    seconds, returncode = run_parent_until_eof(
        tmp_path,
        "import os\n"
        "from trl_marl.utils.bounded import Worker\n"
        "worker = Worker(lambda request: request)\n"
        "assert worker.call(7, timeout=30.0) == {'value': 7}\n"
        "os._exit(0)\n",
    )
    assert returncode == 0 and seconds < 60


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, RuntimeError])
def test_a_forked_child_never_returns_into_its_parents_code(raised: type[BaseException]) -> None:
    """Whatever a child's life raises, the child ends by `os._exit` (70): it never comes back into the caller's code,
    where it would run the rest of a test (or a training step) a second time beside its parent and write into the
    parent's pipes (a pytest-xdist worker escaped so and sent the runner a duplicate report)."""
    from trl_marl.utils import bounded

    parent = os.getpid()

    def life(pipes: list[tuple[int, int]]) -> None:
        raise raised("out of the child's life")

    pid, pipes = bounded._fork_child(1, life)
    if os.getpid() != parent:  # the child came back: end it with a status the parent recognises
        os._exit(99)
    for fd in pipes[0]:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 70
