"""The torch threads of a CPU run on a busy machine (issue 39, item 4): on a 2-core machine at load 7-10 the CLI picked
"2 torch threads (one per core)" for a 135M model and ran at 226 s per step; now the load average decides how many
cores are left, and the choice says once how to set the threads. `trl-marl demo` takes `--cpu-threads`."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

import pytest
import torch

from trl_marl.scripts import demo, demo_real
from trl_marl.utils import threads
from trl_marl.utils.threads import busy_cores, choose_cpu_threads

BIG = 135_000_000  # SmolLM2-135M


@pytest.mark.parametrize(("load", "total", "busy"), [
    (7.0, 2, 6.0),  # the machine: 2 cores, load 7
    (10.0, 2, 9.0),
    (0.8, 2, 0.0),  # this process alone (its own runnable thread is not "other work")
    (1.0, 2, 0.0),
    (2.0, 2, 1.0),
    (9.0, 8, 2.0),  # pinned to 2 of 8 cores: its share of the machine's 8 busy cores
    (33.0, 64, 1.0),
])
def test_busy_cores_from_the_load_average(load: float, total: int, busy: float) -> None:
    assert busy_cores(2, load=load, total=total) == busy


@pytest.mark.parametrize(("cores", "busy", "expected"), [
    (2, 0.0, 2), (2, 0.4, 2),  # idle enough: one per core, as before
    (2, 0.6, 1), (2, 1.0, 1), (2, 6.0, 1), (2, 9.0, 1),  # busy or oversubscribed: fewer, at least one
    (8, 3.0, 5), (8, 2.4, 6), (8, 20.0, 1), (16, 0.49, 16),
])
def test_a_large_model_gets_the_cores_that_are_left(cores: int, busy: float, expected: int) -> None:
    assert choose_cpu_threads(BIG, cores=cores, environ={}, busy=busy)[0] == expected


def test_the_choice_says_why_and_how_to_choose() -> None:
    count, reason = choose_cpu_threads(BIG, cores=2, environ={}, busy=6.0)
    assert count == 1
    assert "machine is oversubscribed" in reason and "about 6.0 of this process's 2 cores" in reason
    assert "`--cpu_threads N`" in reason and "OMP_NUM_THREADS=N" in reason
    count, reason = choose_cpu_threads(BIG, cores=8, environ={}, busy=3.0)
    assert count == 5 and "machine is busy" in reason
    # the small-model rule and every explicit choice are unchanged by the load
    assert choose_cpu_threads(84_000, cores=2, environ={}, busy=6.0)[0] == 1
    assert choose_cpu_threads(BIG, cores=2, environ={}, cpu_threads=2, busy=6.0)[0] == 2
    assert choose_cpu_threads(BIG, cores=2, environ={"OMP_NUM_THREADS": "2"}, busy=6.0)[0] is None


def test_apply_reads_the_load_and_warns_once(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Before: the load was never read, and a 135M model got one thread per core on a machine at load 7."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (7.0, 6.0, 5.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "count_parameters", lambda models: BIG)
    monkeypatch.setattr(threads, "_announced", False)
    monkeypatch.setattr(threads, "_busy_at_start", None)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with caplog.at_level(logging.INFO, logger=threads.__name__):
            assert threads.apply_cpu_threads([], on_cpu=True) == 1
            assert threads.apply_cpu_threads([], on_cpu=True) == 1
        said = [r for r in caplog.records if r.name == threads.__name__]
        assert len(said) == 1 and said[0].levelno == logging.WARNING
        assert "1 torch thread(s) for a 135.00M-parameter model" in said[0].getMessage()
        # the first measure holds for the process: its own training raises the load for the next trainer
        monkeypatch.setattr(os, "getloadavg", lambda: (0.9, 0.5, 0.2))
        assert threads.apply_cpu_threads([], on_cpu=True) == 1
        # a quiet machine (a new process): one per core, said at INFO
        monkeypatch.setattr(threads, "_busy_at_start", None)
        monkeypatch.setattr(threads, "_announced", False)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=threads.__name__):
            assert threads.apply_cpu_threads([], on_cpu=True) == 2
            monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 2.0, 1.0))  # this process's own two threads
            assert threads.apply_cpu_threads([], on_cpu=True) == 2
        assert [r.levelno for r in caplog.records if r.name == threads.__name__] == [logging.INFO]
    finally:
        torch.set_num_threads(previous)


def demo_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_demo_arguments(parser)
    return parser.parse_args(argv)


def test_demo_takes_cpu_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `trl-marl demo` had no thread option."""
    seen: list[Any] = []
    monkeypatch.setattr(demo_real, "run_real_demo", seen.append)
    monkeypatch.setattr(demo, "run_demo", seen.append)
    monkeypatch.setattr(demo, "restart_with_pinned_numerics", lambda: None)
    assert demo.demo_command(demo_args(["--real", "--cpu-threads", "1"])) == 0
    assert demo.demo_command(demo_args(["--quick", "--cpu_threads", "3"])) == 0
    assert demo.demo_command(demo_args([])) == 0
    assert [c.cpu_threads for c in seen] == [1, 3, None]
    assert isinstance(seen[0], demo_real.RealDemoConfig) and isinstance(seen[1], demo.DemoConfig)
    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            demo_args(["--cpu-threads", bad])


def test_the_demo_trainers_get_the_threads(target_model_dir: str, tmp_path: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`--cpu-threads` reaches the trainers' configs (their own choice would put a toy model back on one thread)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    previous = torch.get_num_threads()
    try:
        trainer = demo._magrpo_trainer(target_model_dir, 1, 0, str(tmp_path), [], "t", False, cpu_threads=2)
        assert trainer.args.cpu_threads == 2 and torch.get_num_threads() == 2
        trainer = demo._magrpo_trainer(target_model_dir, 1, 0, str(tmp_path), [], "t", False)
        assert trainer.args.cpu_threads is None and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(previous)
