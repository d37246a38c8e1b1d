"""benchmarks/learning/cooperation_target.py: issue 55's target computed from team and alone records."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "cooperation_target.py"


@pytest.fixture(scope="module")
def target() -> Any:
    spec = importlib.util.spec_from_file_location("cooperation_target", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _arm(value: float, blanked: tuple[float, float] | None, agents: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"heldout": {"reward": value, "success": 0.0}}
    if agents:
        out["agents"] = [{"reward_curve": [0.1 * (a + 1)] * 6 + [0.2 * (a + 1)] * 4} for a in range(agents)]
    else:
        out["reward_curve"] = [0.1, 0.2, 0.3]
    if blanked is not None:
        out["teamwork"] = {"conditions": {"team": {"score": value}, "blank_partner_0": {"score": blanked[0]},
                                          "blank_partner_1": {"score": blanked[1]},
                                          "roles_swapped": {"score": 0.9}}}
    return out


def _write(path: Path, arm: str, seed: int, untrained: float, value: float,
           blanked: tuple[float, float] | None = (0.0, 0.0), task: str = "job", steps: int = 40) -> str:
    run = {"seed": seed, "untrained": {"heldout": {"reward": untrained, "success": 0.0}},
           arm: _arm(value, blanked, agents=2 if arm == "alone" else 0)}
    path.write_text(json.dumps({"settings": {"task": task, "steps": steps}, "runs": [run]}))
    return str(path)


TEAM = [0.30, 0.40, 0.35, 0.20, 0.25]
ALONE = [0.10, 0.30, 0.10, 0.15, 0.05]


def _records(tmp_path: Path) -> list[str]:
    paths = []
    for seed, (team, alone) in enumerate(zip(TEAM, ALONE)):
        paths.append(_write(tmp_path / f"team_seed{seed}.json", "team", seed, 0.05, team,
                            blanked=(0.0, 0.2) if seed == 3 else (0.0, 0.0)))
        paths.append(_write(tmp_path / f"alone_seed{seed}.json", "alone", seed, 0.05, alone))
    return paths


def test_gap_spread_and_necessity_by_hand(target: Any, tmp_path: Path) -> None:
    settings, results = target.load(_records(tmp_path))
    assert settings == {"task": "job", "steps": {"team": 40, "alone": 40}}
    assert [r.gap for r in results] == pytest.approx([0.20, 0.10, 0.25, 0.05, 0.20])
    v = target.verdict(results)
    # team: mean 0.30, squared deviations 0, .01, .0025, .01, .0025 -> variance .025 / 4 -> std 0.0790569
    # alone: mean 0.14, squared deviations .0016, .0256, .0016, .0001, .0081 -> .037 / 4 -> std 0.0961769 (larger)
    assert v["spread"] == pytest.approx(0.0961769, abs=1e-6)
    assert v["seeds_above_spread"] == [0, 1, 2, 4]  # 0.10 > 0.096; seed 3's 0.05 is not
    assert v["gain_holds"] and v["team_ahead"] == [0, 1, 2, 3, 4]
    # seed 3: gain 0.15, blanking agent 1's partner leaves 0.20, a cost of 0.00 < 0.075: necessity fails there
    assert v["necessity_seeds"] == {0: True, 1: True, 2: True, 3: False, 4: True}
    assert not v["necessity_holds"]
    assert not target.verdict(results, min_seeds=5)["gain_holds"]


def test_alone_agents_training_rewards_are_shown_first_and_last_window(target: Any, tmp_path: Path) -> None:
    _, results = target.load(_records(tmp_path))
    # agent 0's curve: 0.1 x6 then 0.2 x4; agent 1's doubled
    assert "0.100 -> 0.100 -> 0.200, 0.200 -> 0.200 -> 0.400" in target.table(results, window=4)
    # window 3: steps 1-3, 5-7 (0.1, 0.1, 0.2: 0.1333) and 8-10
    assert "0.100 -> 0.133 -> 0.200, 0.200 -> 0.267 -> 0.400" in target.table(results, window=3)


def test_cli_prints_verdict_and_writes_json(target: Any, tmp_path: Path, capsys: Any) -> None:
    _records(tmp_path)
    out = tmp_path / "verdict.json"
    report = target.main([str(tmp_path / "{team,alone}_seed*.json"), "--json", str(out)])
    assert json.loads(out.read_text())["verdict"] == json.loads(json.dumps(report["verdict"]))
    printed = capsys.readouterr().out
    assert "job, 40 steps" in printed and "gap above it on seeds [0, 1, 2, 4] (target: 4): holds" in printed
    assert "necessity: does not hold" in printed


def test_one_seed_gives_no_spread_and_no_verdict(target: Any, tmp_path: Path) -> None:
    paths = [_write(tmp_path / "t.json", "team", 0, 0.05, 0.3), _write(tmp_path / "a.json", "alone", 0, 0.05, 0.1)]
    v = target.verdict(target.load(paths)[1])
    assert v["spread"] is None and not v["gain_holds"]


@pytest.mark.parametrize("case, message", [
    ("task", "compare records of one task"),
    ("steps", "alone may train longer than the team .to their plateau., never shorter"),
    ("arm_steps", "compare records of one step count per arm"),
    ("disagree", "the records disagree"),
    ("scale", "different scales"),
    ("none", "No records matched"),
])
def test_bad_records_are_refused_with_the_reason(target: Any, tmp_path: Path, case: str, message: str) -> None:
    paths = [_write(tmp_path / "t.json", "team", 0, 0.05, 0.3)]
    if case == "task":
        paths.append(_write(tmp_path / "a.json", "alone", 0, 0.05, 0.1, task="other"))
    elif case == "steps":
        paths.append(_write(tmp_path / "a.json", "alone", 0, 0.05, 0.1, steps=20))
    elif case == "arm_steps":  # two team records of different lengths
        paths.append(_write(tmp_path / "t1.json", "team", 1, 0.05, 0.3, steps=80))
    elif case == "disagree":  # the untrained team of one seed measured twice, differently
        paths.append(_write(tmp_path / "a.json", "alone", 0, 0.06, 0.1))
    elif case == "scale":
        data = json.loads(Path(paths[0]).read_text())
        data["runs"][0]["team"]["teamwork"]["conditions"]["team"]["score"] = 0.9
        Path(paths[0]).write_text(json.dumps(data))
    elif case == "none":
        paths = []
    with pytest.raises(SystemExit, match=message):
        target.load(paths)


def test_single_policy_records_in_the_glob_are_skipped(target: Any, tmp_path: Path, capsys: Any) -> None:
    central = tmp_path / "central_seed0.json"
    central.write_text(json.dumps({"settings": {"task": "job", "steps": 40, "arms": ["central"]},
                                   "runs": [{"seed": 0, "central_untrained": {}, "central": {}}]}))
    _, with_central = target.load([str(central), *_records(tmp_path)])
    _, without = target.load(_records(tmp_path))
    assert with_central == without
    assert "skipped" in capsys.readouterr().err


def test_plateau_test_by_hand(target: Any) -> None:
    # windows of 2: before (0.1, 0.3) mean 0.2 var 0.02; last (0.4, 0.6) mean 0.5 var 0.02;
    # standard error sqrt(0.02 / 2 + 0.02 / 2) = 0.1414; rise 0.3 > 2 x 0.1414 = 0.283: still rising
    assert target.plateaued([0.0, 0.1, 0.3, 0.4, 0.6], window=2) is False
    # last (0.3, 0.5): rise 0.2 <= 0.283: plateaued; a fall is a plateau too
    assert target.plateaued([0.1, 0.3, 0.3, 0.5], window=2) is True
    assert target.plateaued([0.5, 0.7, 0.1, 0.2], window=2) is True
    assert target.plateaued([0.1, 0.2, 0.3], window=2) is None  # shorter than two windows
    with pytest.raises(SystemExit, match="--plateau-window is 1"):
        target.plateaued([0.1, 0.2, 0.3], window=1)


def test_alone_arm_trained_longer_is_compared_and_its_plateau_reported(target: Any, tmp_path: Path,
                                                                         capsys: Any) -> None:
    paths = [_write(tmp_path / "team_seed0.json", "team", 0, 0.05, 0.3),
             _write(tmp_path / "team_seed1.json", "team", 1, 0.05, 0.4),
             _write(tmp_path / "alone_seed0.json", "alone", 0, 0.05, 0.1, steps=80),
             _write(tmp_path / "alone_seed1.json", "alone", 1, 0.05, 0.0, steps=80)]
    # the fixture's alone curves: agent 0 is 0.1 x6 then 0.2 x4; windows of 5 are (0.1 x5) and (0.1, 0.2 x4):
    # rise 0.08, variances 0 and 0.002, standard error sqrt(0.002 / 5) = 0.02: 0.08 > 0.04, rising (agent 1 doubled)
    report = target.main([*paths, "--min-seeds", "2", "--plateau-window", "5"])
    assert report["settings"]["steps"] == {"team": 40, "alone": 80}
    assert report["verdict"]["alone_plateaued"] == {0: [False, False], 1: [False, False]}
    assert report["verdict"]["alone_plateau_holds"] is False
    printed = capsys.readouterr().out
    assert "job, team 40 steps, alone 80 steps" in printed and "alone agents plateaued: not all" in printed
    # windows of 2 cover the flat 0.2 x4: no rise, plateaued
    assert target.verdict(target.load(paths)[1], plateau_window=2)["alone_plateau_holds"] is True
    # curves of 10 steps are too short for windows of 10
    assert target.verdict(target.load(paths)[1])["alone_plateau_holds"] is None
