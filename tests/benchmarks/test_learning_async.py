"""`benchmarks/learning/learning_async.py`: a micro run's record (every seed and staleness trained its steps, the
logged staleness within its bound, the summary's arithmetic). What the numbers of a 4-step run say is not checked."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "learning_async.py"
STEPS = 4


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_takeoff_is_the_first_window_at_the_threshold(bench) -> None:
    assert bench.takeoff_step([0.0] * 5 + [1.0] * 10) == 14  # the window of steps 5..14 holds nine 1s: mean 0.9
    assert bench.takeoff_step([0.5] * 20) is None
    assert bench.takeoff_step([1.0] * 3) is None  # shorter than the window


def test_micro_run_records_every_seed_and_arm(bench, tmp_path) -> None:
    out = tmp_path / "learning_async.json"
    record = bench.main(["--seeds", "0", "1", "--staleness", "0", "1", "--steps", str(STEPS), "--episodes", "16",
                         "--output", str(out), "--work-dir", str(tmp_path / "work")])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert "benchmarks/learning/learning_async.py" in record["command"]
    assert [(r["seed"], r["max_staleness"]) for r in record["runs"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for run in record["runs"]:
        assert run["global_step"] == STEPS and len(run["curve"]) == STEPS
        assert 0.0 <= run["final_success"] <= 1.0
        if run["max_staleness"] == 0:
            assert run["staleness_max"] is None  # the synchronous trainer logs none
        else:
            assert 0 <= run["staleness_max"] <= 1
    summary = record["summary"]
    for s in (0, 1):
        finals = [r["final_success"] for r in record["runs"] if r["max_staleness"] == s]
        assert summary[f"staleness_{s}"]["final_success_mean"] == pytest.approx(statistics.fmean(finals))
        assert summary[f"staleness_{s}"]["final_success_min"] == min(finals)
    sync = summary["staleness_0"]
    inside = sync["final_success_min"] <= summary["staleness_1"]["final_success_mean"] <= sync["final_success_max"]
    assert summary["staleness_1"]["mean_within_sync_seed_range"] is inside
    assert "mean_within_sync_seed_range" not in sync


@pytest.mark.slow  # builds the demo's three pretrained debate models when no test has yet (minutes on 2 cores)
def test_micro_debate_run_records_the_ppo_arms(bench, tmp_path) -> None:
    out = tmp_path / "debate.json"
    record = bench.main(["--job", "debate", "--seeds", "0", "--staleness", "0", "1", "--steps", "2",
                         "--episodes", "8", "--output", str(out), "--work-dir", str(tmp_path / "work")])
    assert record["benchmark"] == "learning_async_debate" and record["settings"]["job"] == "debate"
    assert [(r["seed"], r["max_staleness"]) for r in record["runs"]] == [(0, 0), (0, 1)]
    sync, stale = record["runs"]
    assert sync["global_step"] == stale["global_step"] == 2
    assert sync["staleness_max"] is None and stale["staleness_max"] is not None and stale["staleness_max"] <= 1
    for run in record["runs"]:
        assert len(run["after_majority_accuracy"]) == 3  # every turn of the debate
        assert run["final_success"] == run["after_majority_accuracy"][-1]
