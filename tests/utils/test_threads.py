"""The project's torch thread setting when something replaced `torch.set_num_threads` (vLLM's CPU worker does)."""

from __future__ import annotations

import logging

import pytest
import torch

from trl_marl.utils import threads


def skip_set_num_threads(count: int) -> None:
    """What vLLM's CPU worker installs as `torch.set_num_threads` for the whole process: a call that does nothing."""


def test_a_replaced_set_num_threads_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: `apply_cpu_threads` called the replaced function and went on as if the count were set."""
    before = torch.get_num_threads()
    wanted = before + 1
    monkeypatch.setattr(threads, "_replaced_warned", False)
    monkeypatch.setattr(torch, "set_num_threads", skip_set_num_threads)
    assert threads.set_num_threads_replaced() == f"{__name__}.skip_set_num_threads"
    model = torch.nn.Linear(2, 2)
    with caplog.at_level(logging.WARNING, logger=threads.__name__):
        assert threads.apply_cpu_threads([model], cpu_threads=wanted, on_cpu=True) == before
        assert threads.set_torch_threads(wanted) is False
        assert threads.apply_cpu_threads([model], cpu_threads=wanted + 1, on_cpu=True) == before
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1, said
    assert f"replaced in this process by {__name__}.skip_set_num_threads" in said[0]
    assert f"setting of {wanted} torch thread(s) is not applied, torch keeps {before}" in said[0]
    assert threads.set_torch_threads(before) is True  # already in effect: nothing to say


def test_torch_own_set_num_threads_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    before = torch.get_num_threads()
    assert threads.set_num_threads_replaced() is None
    try:
        assert threads.set_torch_threads(before + 1) is True
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)
