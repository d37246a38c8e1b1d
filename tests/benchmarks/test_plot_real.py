"""benchmarks/learning/plot_real.py: the series it draws are the records' end-of-training values and curves."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "plot_real.py"


@pytest.fixture(scope="module")
def plot() -> Any:
    spec = importlib.util.spec_from_file_location("plot_real", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _split(success: float) -> dict[str, Any]:
    return {"success": success, "reward": 2 * success}


def _magrpo_record(path: Path, seed: int, task: str = "coding") -> None:
    run = {"seed": seed, "untrained": {"heldout": _split(0.25)},
           "team": {"reward_curve": [1.0, 2.0, 3.0], "heldout": _split(0.5)},
           "alone": {"agents": [{"reward_curve": [1.0, 1.0, 1.0]}, {"reward_curve": [3.0, 1.0, 2.0]}],
                     "heldout": _split(0.375)}}
    path.write_text(json.dumps({"settings": {"task": task}, "runs": [run]}))


def test_magrpo_series_takes_each_arms_curves_and_heldout_before_and_after(plot: Any, tmp_path: Path) -> None:
    for seed in (0, 1):
        _magrpo_record(tmp_path / f"rec{seed}.json", seed)
    arms = plot.magrpo_series(plot.load_runs([str(tmp_path / "rec*.json")]))
    assert list(arms) == ["team", "alone"]  # no central arm in these records: none drawn
    assert arms["team"]["curves"] == [[1.0, 2.0, 3.0]] * 2
    assert arms["team"]["before"] == [0.25, 0.25] and arms["team"]["after"] == [0.5, 0.5]
    # the alone arm's curve is the mean of its two agents' trainings, step by step
    assert arms["alone"]["curves"][0] == [2.0, 1.0, 1.5] and arms["alone"]["after"] == [0.375, 0.375]
    assert arms["team"]["seeds"] == [0, 1]


def test_writing_plots_the_heldout_team_reward_on_a_0_to_4_axis(plot: Any, tmp_path: Path) -> None:
    def split(success: float, reward: float) -> dict[str, Any]:
        return {"success": success, "metrics": {"team_reward": reward}}

    run = {"seed": 3, "untrained": {"heldout": split(0.09, 2.36)},
           "team": {"reward_curve": [2.3, 2.6], "heldout": split(0.09, 2.56)}}
    (tmp_path / "w.json").write_text(json.dumps({"settings": {"task": "writing"}, "runs": [run]}))
    value, label, top = plot.MAGRPO_METRICS["writing"]
    arms = plot.magrpo_series(plot.load_runs([str(tmp_path / "w.json")]), value)
    # the team reward, not the success rate (which is the same before and after here)
    assert arms["team"]["before"] == [2.36] and arms["team"]["after"] == [2.56]
    assert top == 4.0 and "team reward" in label
    assert plot.MAGRPO_METRICS["coding"][0](split(0.25, 3.0)) == 0.25
    # the rule division: its pass rate, the split's mean reward
    assert plot.MAGRPO_METRICS["rule_division"][0]({"success": 0.0, "reward": 0.17}) == 0.17
    # the writing halves: the split's mean reward (a collision at 0), not the metrics' team reward, on a 0-1 axis
    value, label, top = plot.MAGRPO_METRICS["writing_halves"]
    assert value({"success": 0.05, "reward": 0.29, "metrics": {"team_reward": 0.33}}) == 0.29 and top == 1.0
    assert plot.RECORD_TASKS["writing_halves"] == "writing_halves_summary_options"


def test_debate_series_reads_the_last_turn_and_the_reward_kind(plot: Any, tmp_path: Path) -> None:
    for kind, after in (("influence", 0.8), ("verifier", 0.4)):
        run = {"seed": 0, "score_curve": [0.1, 0.5], "before": {"majority_accuracy": [0.03, 0.17]},
               "after": {"majority_accuracy": [0.05, after]}}
        (tmp_path / f"{kind}.json").write_text(json.dumps({"settings": {"reward": kind}, "runs": [run]}))
    arms = plot.debate_series(plot.load_runs([str(tmp_path / "*.json")]))
    assert arms["influence"]["before"] == [0.17] and arms["influence"]["after"] == [0.8]
    assert arms["verifier"]["after"] == [0.4] and arms["verifier"]["curves"] == [[0.1, 0.5]]


def test_main_writes_the_png_and_refuses_an_empty_glob(plot: Any, tmp_path: Path) -> None:
    _magrpo_record(tmp_path / "rec.json", 0)
    out = tmp_path / "curve.png"
    plot.main(["coding", "--records", str(tmp_path / "rec.json"), "--output", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 1000
    with pytest.raises(SystemExit, match="no record matches"):
        plot.main(["coding", "--records", str(tmp_path / "none*.json"), "--output", str(out)])


def test_a_plot_keeps_only_the_records_of_its_task(plot: Any, tmp_path: Path) -> None:
    """`..._coding_*.json` also matches the other coding tasks' records: the coding plot leaves them out."""
    _magrpo_record(tmp_path / "coding.json", 0)
    record = json.loads((tmp_path / "coding.json").read_text())
    record["settings"]["task"] = "coding"
    (tmp_path / "coding.json").write_text(json.dumps(record))
    record["settings"]["task"], record["runs"][0]["seed"] = "coding_rule_division_decide_2or1_named", 7
    (tmp_path / "coding_rule.json").write_text(json.dumps(record))
    runs = plot.load_runs([str(tmp_path / "coding*.json")])
    assert [run["seed"] for _, run in plot.of_task(runs, "coding")] == [0]
    assert [run["seed"] for _, run in plot.of_task(runs, plot.RECORD_TASKS["rule_division"])] == [7]
    with pytest.raises(SystemExit, match="ran --task writing"):
        plot.main(["writing", "--records", str(tmp_path / "coding_rule.json"), "--output", str(tmp_path / "w.png")])


def test_records_of_different_lengths_are_plotted_one_length_at_a_time(plot: Any, tmp_path: Path) -> None:
    """20-step and 40-step runs of one task match one glob: without `--steps` the plot refuses the mix."""
    for seed, steps in ((0, 20), (1, 40), (2, 40)):
        _magrpo_record(tmp_path / f"rec{seed}.json", seed)
        record = json.loads((tmp_path / f"rec{seed}.json").read_text())
        record["settings"]["steps"] = steps
        (tmp_path / f"rec{seed}.json").write_text(json.dumps(record))
    runs = plot.load_runs([str(tmp_path / "rec*.json")])
    assert [run["seed"] for _, run in plot.of_steps(runs, 40)] == [1, 2]
    assert [run["seed"] for _, run in plot.of_steps(runs[:1], None)] == [0]
    with pytest.raises(SystemExit, match=r"ran \[20, 40\] optimizer steps: plot one length at a time with --steps"):
        plot.of_steps(runs, None)
    out = tmp_path / "c.png"
    plot.main(["coding", "--records", str(tmp_path / "rec*.json"), "--output", str(out), "--steps", "20"])
    assert out.exists()


def test_arms_of_different_lengths_plot_together_each_arm_one_length(plot: Any, tmp_path: Path) -> None:
    """A team of 40 steps beside agents trained alone for 80 (`--steps 40 80`); an arm of two lengths is refused."""
    def write(seed: int, arm: str, steps: int) -> None:
        data: dict[str, Any] = {"heldout": _split(0.5)}
        if arm == "alone":
            data["agents"] = [{"reward_curve": [0.1] * steps}, {"reward_curve": [0.3] * steps}]
        else:
            data["reward_curve"] = [0.2] * steps
        run = {"seed": seed, "untrained": {"heldout": _split(0.25)}, arm: data}
        (tmp_path / f"rec{seed}.json").write_text(json.dumps({"settings": {"task": "coding", "steps": steps},
                                                              "runs": [run]}))

    for seed, (arm, steps) in enumerate((("team", 40), ("alone", 80), ("alone", 80))):
        write(seed, arm, steps)
    runs = plot.load_runs([str(tmp_path / "rec*.json")])
    assert [run["seed"] for _, run in plot.of_steps(runs, [40, 80])] == [0, 1, 2]
    assert [run["seed"] for _, run in plot.of_steps(runs, 80)] == [1, 2]
    series = plot.magrpo_series(plot.of_steps(runs, [40, 80]))
    assert {arm: [len(c) for c in s["curves"]] for arm, s in series.items()} == {"team": [40], "alone": [80, 80]}
    out = tmp_path / "mixed.png"
    plot.main(["coding", "--records", str(tmp_path / "rec*.json"), "--output", str(out), "--steps", "40", "80"])
    assert out.exists()
    write(2, "alone", 40)
    with pytest.raises(SystemExit, match=r"the alone arm's records trained \[40, 80\] steps"):
        plot.main(["coding", "--records", str(tmp_path / "rec*.json"), "--output", str(out), "--steps", "40", "80"])
