"""`trl-marl generate --team` names what trainers write when the folder holds no team (issue 53, item 9: the error
pointed to `OUTPUT_DIR/final`, which no trainer writes)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from trl_marl.scripts.generate import generate_command, team_folder_problem


def generate(team: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    args = argparse.Namespace(team=str(team), prompt=["x"])
    code = generate_command(args)
    return code, capsys.readouterr().err.strip()


def test_a_folder_without_a_team_names_what_trainers_write(tmp_path, capsys):
    code, message = generate(tmp_path, capsys)
    assert code == 2 and len(message.splitlines()) == 1
    assert "final" not in message  # no trainer writes OUTPUT_DIR/final
    assert "`output_dir` of a finished run" in message and "checkpoint-N" in message
    assert "AgentTeam.save_pretrained" in message


def test_an_unfinished_run_names_its_newest_checkpoint(tmp_path, capsys):
    for step in (2, 10, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "team_config.json").write_text("{}")
    (tmp_path / "checkpoint-12").mkdir()  # an interrupted save: no team in it
    code, message = generate(tmp_path, capsys)
    assert code == 2 and f"--team {tmp_path / 'checkpoint-10'}" in message and "final" not in message


def test_a_missing_folder_and_a_saved_team(tmp_path):
    assert "is not a folder" in team_folder_problem(str(tmp_path / "nowhere"))
    (tmp_path / "team_config.json").write_text("{}")  # where `trainer.save_model(output_dir)` writes it
    assert team_folder_problem(str(tmp_path)) is None
