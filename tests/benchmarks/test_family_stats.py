"""`benchmarks/learning/family_stats.py`: merging bench_family results over files and the statistics it reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "family_stats.py"


def _bench_file(path: Path, seeds: list[int], ours: list[list[float]], peer: list[list[float]]) -> Path:
    """A file in bench_family.py's layout with one `magrpo` entry."""
    runs = {"ours": [{"rewards": r} for r in ours], "comlrl": [{"rewards": r} for r in peer]}
    path.write_text(json.dumps({"seeds": seeds, "algorithms": {"magrpo": {"runs": runs}}}))
    return path


def test_merge_summary_and_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stats = load_script(SCRIPT)
    # finals over the last 2 updates: ours 0.5, 1.0, 0.0; comlrl 0.25, 0.75, 0.5
    first = _bench_file(tmp_path / "a.json", [0, 1], [[9, 0, 1], [9, 1, 1]], [[9, 0, 0.5], [9, 0.5, 1]])
    second = _bench_file(tmp_path / "b.json", [1, 2], [[7, 1, 1], [9, 0, 0]], [[7, 0.5, 1], [9, 0.5, 0.5]])
    merged = stats.merge([first, second], window=2)
    assert sorted(merged["magrpo"]["ours"]) == [0, 1, 2]
    (row,) = stats.summarize(merged, window=2)
    assert row["seeds"] == [0, 1, 2]
    assert row["ours"] == pytest.approx(0.5) and row["comlrl"] == pytest.approx(0.5)
    assert row["ours_sem"] == pytest.approx(0.5 / 3 ** 0.5)  # stdev of (0.5, 1, 0) is 0.5
    assert row["comlrl_sem"] == pytest.approx(0.25 / 3 ** 0.5)
    assert row["difference"] == pytest.approx(0.0)
    assert row["above_half"] == [1, 1]  # strictly above +0.5
    assert row["permutation_p"] == pytest.approx(1.0)  # no difference: every relabelling is as extreme
    out = tmp_path / "merged.json"
    stats.main([str(first), str(second), "--window", "2", "--json", str(out)])
    assert "| magrpo | 0-2 (3) |" in capsys.readouterr().out
    again = stats.summarize(stats.merge([out], window=2), window=2)  # the compact layout reads back
    assert again[0]["ours"] == pytest.approx(row["ours"]) and again[0]["seeds"] == [0, 1, 2]


def test_conflicting_duplicate_seed_is_an_error(tmp_path: Path) -> None:
    stats = load_script(SCRIPT)
    first = _bench_file(tmp_path / "a.json", [0], [[0, 1]], [[0, 1]])
    second = _bench_file(tmp_path / "b.json", [0], [[0, 0]], [[0, 1]])
    with pytest.raises(ValueError, match="seed 0 differs"):
        stats.merge([first, second], window=1)


def test_permutation_p_detects_a_clear_difference() -> None:
    stats = load_script(SCRIPT)
    assert stats.permutation_p([1.0] * 10, [0.0] * 10, draws=2000) < 0.01


def test_whole_curve_measures_and_ours_from(tmp_path: Path) -> None:
    stats = load_script(SCRIPT)
    # window 2, threshold 0.5: a curve takes off at the first update whose mean with the one before exceeds 0.5
    assert stats.takeoff([0, 0, 1, 1, 1], 2, 0.5) == 4  # (1 + 1) / 2 > 0.5 first at update 4
    assert stats.takeoff([0, 1, 0, 1], 2, 0.5) == 5  # never above (0.5 is not above 0.5): one past the end
    bench = _bench_file(tmp_path / "a.json", [0, 1], [[0, 0, 0, 0], [0, 1, 1, 1]], [[0, 0, 1, 1], [1, 1, 1, 1]])
    (row,) = stats.summarize(stats.merge([bench], window=2), window=2, threshold=0.5)
    assert row["mean_reward"]["ours"] == pytest.approx((0 + 0.75) / 2)
    assert row["mean_reward"]["comlrl"] == pytest.approx((0.5 + 1) / 2)
    assert row["takeoff"]["ours"] == pytest.approx((5 + 3) / 2)  # never; update 3
    assert row["takeoff"]["comlrl"] == pytest.approx((4 + 2) / 2)
    variant = _bench_file(tmp_path / "v.json", [0, 1], [[1, 1, 1, 1], [1, 1, 1, 1]], [[9, 9, 9, 9], [9, 9, 9, 9]])
    out = tmp_path / "m.json"
    stats.main([str(bench), "--window", "2", "--ours-from", str(variant), "--json", str(out)])
    summary = json.loads(out.read_text())["summary"][0]
    assert summary["ours"] == pytest.approx(1.0)  # the variant's runs
    assert summary["comlrl"] == pytest.approx(1.0)  # comlrl's from the positional file, not the variant's 9s
