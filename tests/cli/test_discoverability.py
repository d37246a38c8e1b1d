"""What a user can find without reading the source (issue 53, item 7): every task and shipped dataset in `--help`,
the closest shipped names for a mistyped one, one line for a missing optional extra, and a writing command in
docs/examples.md that runs on shipped data."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from trl_marl.scripts.data_sources import (
    SHIPPED_DATASETS,
    DatasetUnavailableError,
    DataSource,
    UsageError,
    hub_dataset,
    resolve_source,
    shipped_suggestions,
)
from trl_marl.scripts.help import short_help

ROOT = Path(__file__).resolve().parents[2]
INSTALL_REWARDS = 'pip install "trl-marl[rewards]"'


def run_magrpo(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`trl-marl magrpo ARGV` in this process: its exit status and the lines it wrote to stderr."""
    from trl_marl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["magrpo", *argv])
    return int(exit_info.value.code), capsys.readouterr().err.splitlines()


def test_short_help_names_every_task_and_every_shipped_dataset():
    from trl_marl.scripts.magrpo import magrpo_task_names

    text = " ".join(short_help("magrpo").split())
    task_help = re.search(r"--task NAME (.*?)\.", text).group(1)
    for task in magrpo_task_names():
        assert task in task_help, task
    for name in SHIPPED_DATASETS:
        assert name in text, name
    assert INSTALL_REWARDS in text  # the writing and coding rewards' extra, before a run needs it


@pytest.mark.parametrize("typed, meant", [
    ("trl-marl/team_writin", "trl-marl/team_writing"), ("trl_marl/team_writing", "trl-marl/team_writing"),
    ("team_codng", "trl-marl/team_coding"), ("TRL-MARL/Team_Coding", "trl-marl/team_coding"),
    ("trl-marl/writing", "trl-marl/team_writing"),
])
def test_a_mistyped_shipped_name_suggests_the_shipped_one(typed, meant):
    assert shipped_suggestions(typed) == [meant]
    assert shipped_suggestions("openai/gsm8k") == [] and shipped_suggestions("trl-lib/tldr") == []


def test_an_unknown_trl_marl_name_is_refused_before_the_hub_with_the_closest_shipped_names():
    with pytest.raises(UsageError, match=r"`--dataset_name` 'trl-marl/team_writin' is not a dataset shipped with "
                                         r"trl-marl: did you mean `trl-marl/team_writing`\?"):
        resolve_source("trl-marl/team_writin")
    with pytest.raises(UsageError, match="The shipped datasets are trl-marl/team_coding, trl-marl/team_writing"):
        resolve_source("trl-marl/nothing_like_it")


def test_a_hub_name_close_to_a_shipped_one_names_it_when_the_hub_cannot_give_it():
    class Refused(ConnectionError):
        pass

    with pytest.raises(DatasetUnavailableError) as info:
        with hub_dataset(DataSource("hub", "team_writing", "`--dataset_name`"), "ROUTE"):
            raise Refused("no route to host")
    assert "Did you mean `trl-marl/team_writing` (shipped with trl-marl)? ROUTE" in str(info.value)


def test_the_command_refuses_a_mistyped_shipped_name_in_one_line(tmp_path, capsys):
    status, err = run_magrpo(["--task", "writing", "--model_name_or_path", "toy", "--dataset_name",
                              "trl-marl/team_writin", "--output_dir", str(tmp_path / "out"), "--report_to", "none"],
                             capsys)
    mine = [line for line in err if line.startswith("trl-marl magrpo:")]
    assert status == 2 and not any("Traceback" in line for line in err), err
    assert len(mine) == 1 and "did you mean `trl-marl/team_writing`?" in mine[0], err


def test_a_mistyped_task_gets_the_closest_task_in_one_line(tmp_path, capsys):
    status, err = run_magrpo(["--task", "tool_rely", "--model_name_or_path", "toy", "--output_dir",
                              str(tmp_path / "out"), "--report_to", "none"], capsys)
    assert status == 2 and err[-1].startswith("trl-marl magrpo: `--task` 'tool_rely' is not a task: did you mean "
                                              "`tool_relay`?"), err
    assert "Traceback" not in "\n".join(err)


def test_the_writing_task_without_the_rewards_extra_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "rouge_score", None)  # `import rouge_score` now raises ImportError
    status, err = run_magrpo(["--task", "writing", "--model_name_or_path", "toy", "--output_dir",
                              str(tmp_path / "out"), "--report_to", "none"], capsys)
    assert status == 1 and not any("Traceback" in line for line in err), err
    mine = [line for line in err if line.startswith("trl-marl magrpo:")]
    assert len(mine) == 1 and INSTALL_REWARDS in mine[0], err
    assert not (tmp_path / "out").exists()


def test_an_import_error_of_no_extra_still_raises():
    from trl_marl.scripts.data_sources import exit_on_unavailable

    def broken() -> None:
        raise ImportError("No module named 'something_else'")

    with pytest.raises(ImportError, match="something_else"):
        exit_on_unavailable(broken, "prog")


def test_the_documented_offline_writing_command_needs_no_file_of_the_users():
    text = (ROOT / "docs" / "examples.md").read_text()
    block = text.split("## Offline: the real model and local data", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [shlex.split(command.replace("\\\n", " ")) for command in block.strip().split("\ntrl-marl ")]
    writing = next(argv for argv in commands if "examples/configs/magrpo_writing.yaml" in argv)
    if "--data_files" in writing:  # a file of the user's own: the docs must say how to make it
        name = writing[writing.index("--data_files") + 1]
        assert re.search(rf"{re.escape(name)}.{{0,200}}(one JSON object per line|write)", text, re.S), name
    else:
        assert writing[writing.index("--dataset_name") + 1] in SHIPPED_DATASETS
    assert INSTALL_REWARDS in text
