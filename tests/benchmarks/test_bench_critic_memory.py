"""`benchmarks/memory/bench_critic_memory.py`: training-state bytes counted by hand, and issue 51's target counted at
Qwen2.5-0.5B's shape (meta device: nothing is allocated)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "memory" / "bench_critic_memory.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_state_bytes_by_hand(bench) -> None:
    frozen = torch.nn.Parameter(torch.zeros(10, dtype=torch.bfloat16), requires_grad=False)  # 20 bytes
    trained = torch.nn.Parameter(torch.zeros(3))  # 12 bytes, + 12 of gradient, + 24 of AdamW moments
    counted = bench.state_bytes([frozen, trained, trained])  # a parameter listed twice counts once
    assert counted == {"weights": 32, "gradients": 12, "adamw": 24, "total": 68, "trained_parameters": 3}


def test_adapter_critics_keep_a_3_agent_team_within_1_15x_at_a_half_billion_parameters(bench) -> None:
    none = bench.count_team("0.5b", "no_critic")
    adapters = bench.count_team("0.5b", "adapter_critics_r4")
    full = bench.count_team("0.5b", "full_critics")
    # one base either way: the critics add only their own float32 adapters and heads
    added = adapters["trained_parameters"] - none["trained_parameters"]
    assert 0 < added < 0.01 * none["weights"] and adapters["weights"] - none["weights"] == 4 * added
    assert adapters["total"] / none["total"] <= 1.15
    assert full["total"] / none["total"] > 9  # three more bases, each trained with gradients and AdamW moments
