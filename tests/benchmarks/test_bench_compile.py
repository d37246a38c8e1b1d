"""`benchmarks/speed/bench_compile.py`: its step accounting (by hand) and a smoke run (dynamo's "eager" backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import load_script

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "speed"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH_DIR / "bench_compile.py")


def test_step_times_leave_out_each_rounds_warmup(bench) -> None:
    # round 1 starts at 0.0 and its steps end at 5.0 (compiling), 5.1, 5.3; round 2 starts at 10, steps end 10.2, 10.3
    rounds = [[0.0, 5.0, 5.1, 5.3], [10.0, 10.2, 10.3]]
    assert bench.step_times(rounds, warmup=1) == pytest.approx([0.1, 0.2, 0.1])
    assert bench.step_times(rounds, warmup=0) == pytest.approx([5.0, 0.1, 0.2, 0.2, 0.1])


@pytest.mark.slow
def test_smoke_run_writes_every_column(bench, tmp_path) -> None:
    out = tmp_path / "compile.json"
    results = bench.main(["--sizes", "small", "--prompts", "1", "--modes", "adapters", "--rounds", "1", "--steps", "3",
                          "--warmup", "1", "--backend", "eager", "--no-comlrl", "--work-dir", str(tmp_path),
                          "--json", str(out), "--backward", "both"])
    assert out.exists()
    per_agent, summed = results["rows"]
    assert per_agent["backward_per_agent"] and not summed["backward_per_agent"]
    for row in (per_agent, summed):
        assert row["team_mode"] == "adapters" and row["comlrl_step_ms"] is None
        assert row["eager_steps_timed"] == row["compiled_steps_timed"] == 2
        assert row["eager_step_ms"] > 0 and row["compiled_step_ms"] > 0
        assert row["compiled_speedup"] == pytest.approx(row["eager_step_ms"] / row["compiled_step_ms"])
    assert "| 84k | 1 | `adapters` | per agent |" in results["table_markdown"]
    assert "| 84k | 1 | `adapters` | summed |" in results["table_markdown"]


def test_backward_variants(bench) -> None:
    assert bench.variants(["models", "adapters"], "per-agent") == [("models", True), ("adapters", True)]
    assert bench.variants(["adapters"], "both") == [("adapters", True), ("adapters", False)]
    assert bench.variant_name("adapters", False) == "adapters_summed"
