"""`benchmarks/speed/bench_async_overlap.py`: a micro run's record (its structure, the steps each arm trained, the
staleness of the async arms against their bound). No timing is checked: the numbers of a micro run mean nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "speed" / "bench_async_overlap.py"
STEPS = 3


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


def test_micro_run_records_every_arm(bench, tmp_path) -> None:
    out = tmp_path / "results" / "async_overlap.json"
    record = bench.main(["--repeats", "1", "--steps", str(STEPS), "--warmup", "1", "--completion-length", "2",
                         "--batch", "4", "--num-generations", "2", "--hidden", "32", "--layers", "1",
                         "--staleness", "1", "2", "--work-dir", str(tmp_path / "work"), "--output", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    assert record["benchmark"] == "async_overlap" and "benchmarks/speed/bench_async_overlap.py" in record["command"]
    assert {"commit", "dirty", "dirty_paths"} <= record["git"].keys()
    assert {"cpu_model", "torch_threads", "torch"} <= record["machine"].keys()
    settings = record["settings"]
    assert settings["arms"] == {"sync": 0, "async_s1": 1, "async_s2": 2}
    assert settings["torch_threads"]["sync"] == settings["torch_threads"]["async"] == 1
    assert settings["trainer"]["generation_kwargs"] == {"min_new_tokens": 2}

    arms = ("sync", "async_s1", "async_s2")
    runs = {run["arm"]: run for run in record["runs"]}
    assert [run["arm"] for run in record["runs"]] == list(arms)  # one repeat: each arm once, in order
    for arm, run in runs.items():
        # every arm trained the same steps, each with a record
        assert run["global_step"] == run["steps_trained"] == STEPS, arm
        assert [s["step"] for s in run["steps"]] == list(range(STEPS))
        for s in run["steps"]:
            assert s["wall_s"] > 0 and s["generation_s"] is not None and s["trainer_busy_s"] is not None
        bound = run["max_staleness"]
        if arm == "sync":
            assert bound == 0 and run["logged_staleness"] == [] and run["worker_rollouts"] == 0
            assert run["torch_threads"] == {"trainer": 1}
            assert all(s["generation_thread"] == "trainer" and s["staleness"] is None for s in run["steps"])
            continue
        # the async arms: every rollout played by the worker, none staler than the bound
        assert run["torch_threads"] == {"trainer": 1, "worker": 1}
        assert STEPS <= run["worker_rollouts"] <= STEPS + bound
        for s in run["steps"]:
            assert s["generation_thread"] == "worker" and s["behaviour_logps_s"] is not None
            assert s["staleness"] == s["step"] - min(s["policy_versions"])
            assert 0 <= s["staleness"] <= bound
        assert len(run["logged_staleness"]) == STEPS and max(run["logged_staleness"]) <= bound
        assert [float(s["staleness"]) for s in run["steps"]] == run["logged_staleness"]

    assert list(record["arms"]) == list(arms)
    for arm in arms:
        summary = record["arms"][arm]
        assert summary["timed_steps"] == STEPS - 1  # the warm-up step left out
        assert summary["median_step_s"] > 0 and summary["mean_generation_s"] > 0
        seen = summary["max_staleness_seen"]
        assert seen is None if arm == "sync" else seen <= settings["arms"][arm]
    for arm in arms[1:]:
        ratio = record["ratio_vs_sync"][arm]
        assert ratio["median_step_ratio"] > 0 and len(ratio["per_repeat"]) == 1
    assert 0.5 <= record["overlap_bound"] <= 1
    for arm in arms:
        assert f"| {arm} |" in record["table_markdown"]


def test_arguments_are_checked(bench) -> None:
    for bad in (["--staleness", "0"], ["--batch", "5", "--num-generations", "2"], ["--steps", "2", "--warmup", "2"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
    cli = bench.parse_args(["--threads", "2"])
    assert cli.sync_threads == 2 and cli.staleness == [1] and cli.repeats == 3
