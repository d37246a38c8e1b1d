"""`trl-marl teamwork`: a saved toy team and its ablations on a task's rows, printed, written as JSON and a plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peft import LoraConfig

from trl_marl import AgentTeam
from trl_marl.cli import main
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.teamwork import evaluate_teamwork

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved_team(target_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AgentTeam]:
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    team = AgentTeam.build(target_model_dir, 2, peft_config=lora).eval()
    path = tmp_path_factory.mktemp("teamwork") / "team"
    team.save_pretrained(path)
    return path, team


def test_target_sum_prints_the_table_and_writes_json_and_plot(saved_team: tuple[Path, AgentTeam], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path, team = saved_team
    out = tmp_path / "out"
    code = main(["teamwork", "--team", str(path), "--task", "target_sum", "--targets", "10,7",
                 "--samples-per-row", "3", "--seed", "5", "--output-dir", str(out)])
    printed = capsys.readouterr().out.splitlines()
    assert code == 0
    conditions = ["team", "blank_partner_0", "blank_partner_1", "untrained_partner_0", "untrained_partner_1",
                  "roles_swapped"]
    assert printed[0].split() == ["condition", "score", "team", "-", "this", "valid"]
    assert [line.split()[0] for line in printed[2:8]] == conditions
    assert printed[-1] == f"wrote {out / 'teamwork.json'}, {out / 'teamwork.png'}"
    record = json.loads((out / "teamwork.json").read_text())
    assert list(record["conditions"]) == conditions
    assert record["settings"]["samples_per_row"] == 3 and record["settings"]["max_new_tokens"] == 16
    # the team in this process, before saving, scores the same on the same rows and seed
    expected = evaluate_teamwork(team, TargetSumEnv(), [{"target": 10}, {"target": 7}], TargetSumReward(),
                                 samples_per_row=3, seed=5, max_new_tokens=16)
    for name in conditions:
        assert record["conditions"][name]["completions"] == expected[name].completions
    assert record["conditions"]["blank_partner_0"]["metrics"]["valid"] == 0.0
    assert (out / "teamwork.png").read_bytes()[:4] == b"\x89PNG"


def test_coding_on_toy_rows_scores_the_reward_terms(saved_team: tuple[Path, AgentTeam], tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["teamwork", "--team", str(saved_team[0]), "--task", "coding", "--rows", "2", "--samples-per-row",
                 "1", "--max-new-tokens", "4", "--conditions", "team,blank_partner_1", "--no-plot",
                 "--output-dir", str(tmp_path)])
    assert code == 0
    record = json.loads((tmp_path / "teamwork.json").read_text())
    assert list(record["conditions"]) == ["team", "blank_partner_1"]
    # whether main calls the helper, then every term of the coding team reward
    assert record["metric_names"][0] == "main_calls_helper" and "helper_used" in record["metric_names"]
    assert not (tmp_path / "teamwork.png").exists()
    assert "blank_partner_1" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--task", "target_sum", "--conditions", "blank_partner_5"], "unknown condition 'blank_partner_5'"),
    (["--task", "target_sum", "--targets", "ten"], "--targets 'ten': give whole numbers"),
    (["--task", "target_sum", "--data-files", "x.jsonl"], "--data-files: target_sum makes its own rows"),
    (["--task", "writing", "--rows", "0"], "--rows, --samples-per-row and --num-turns must be at least 1"),
])
def test_usage_errors_are_one_line(saved_team: tuple[Path, AgentTeam], tmp_path: Path, args: list[str],
                                   message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["teamwork", "--team", str(saved_team[0]), "--output-dir", str(tmp_path), *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("trl-marl teamwork: ") and message in err and err.count("\n") == 1, err


def test_a_folder_without_a_team_says_what_to_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["teamwork", "--team", str(tmp_path), "--task", "coding"]) == 2
    err = capsys.readouterr().err
    assert "--team" in err and "holds no team_config.json" in err and "OUTPUT_DIR/final" in err


def test_help_loads_nothing_heavy() -> None:
    probe = ("import sys\nfrom trl_marl.cli import main\ntry:\n    main(['teamwork', '--help'])\nexcept SystemExit:\n"
             "    pass\nprint('HEAVY=' + ','.join(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert result.stdout.startswith("usage: trl-marl teamwork [-h] --team PATH --task")
    assert result.stdout.rstrip().endswith("HEAVY="), result.stdout[-300:]
