"""A mistake in a run's data is one line that names the option and the fix, with status 2, not a traceback (issue 53,
item 10): a missing file, a file that is not valid JSON Lines, a file without the task's columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trl_marl.scripts.data_sources import DataSource, UsageError, first_bad_json_line, local_rows

COMMON = ["--report_to", "none", "--save_strategy", "no"]
TINY_PPO = ["--total_episodes", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
            "--num_ppo_epochs", "1", "--num_agents", "2", "--num_turns", "2", "--load_in_4bit", "false"]
"""Were a test to train by mistake, one short update."""


def run(command: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """`trl-marl COMMAND ARGV` in this process: its exit status and its stderr lines that start with its name."""
    from trl_marl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([*command.split(), *argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return int(exit_info.value.code), [line for line in err.splitlines() if line.startswith(f"trl-marl {command}:")]


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    return {
        "bad": write(tmp_path / "bad.jsonl", '{"text": "a", "reference": "b"}\n{"text": "c"\n'),
        "no_columns": write(tmp_path / "rows.jsonl", '{"body": "a"}\n'),
        "missing": str(tmp_path / "nope.jsonl"),
        "list": write(tmp_path / "list.json", '[{"text": "a"}]'),
        "array_line": write(tmp_path / "array.jsonl", '{"text": "a"}\n[1, 2]\n'),
    }


def test_first_bad_json_line(files):
    assert first_bad_json_line(files["bad"]) == "line 2: Expecting ',' delimiter (column 13)"
    assert first_bad_json_line(files["list"]) is None  # one JSON list of rows is a JSON file too
    assert first_bad_json_line(files["array_line"]) == "line 2: a JSON list, not an object of columns"
    assert first_bad_json_line(files["no_columns"]) is None


def test_local_rows_turns_a_loaders_errors_into_one_line(files):
    from trl_marl.data import load_gsm8k

    source = DataSource("local", files["bad"], "`--data_files`")
    with pytest.raises(UsageError, match=r"^`--data_files` '.*bad.jsonl' is not valid JSON Lines \(or one JSON list "
                                         r"of rows\): line 2: Expecting ',' delimiter \(column 13\)\. Fix that line"):
        with local_rows(source, "COLUMNS"):
            load_gsm8k(data_files=source.files)
    source = DataSource("local", files["no_columns"], "`--eval_data_files`")
    with pytest.raises(UsageError, match=r"^`--eval_data_files`: load_gsm8k expects the columns .* \(it has "
                                         r"\['body'\]\)\. The task reads COLUMNS\.$"):
        with local_rows(source, "COLUMNS"):
            load_gsm8k(data_files=source.files)
    with pytest.raises(RuntimeError):  # not a mistake in the data: raised as it is
        with local_rows(source, "COLUMNS"):
            raise RuntimeError("a bug")


@pytest.mark.parametrize("mistake, expected", [
    ("missing", r"^trl-marl magrpo: `--data_files` '.*nope.jsonl': no such file \(.*\); pass an existing .jsonl"),
    ("bad", r"^trl-marl magrpo: `--data_files` '.*bad.jsonl' is not valid JSON Lines .*: line 2: .* Fix that line: "
            r"each line one JSON object with columns `text` and `reference`"),
    ("no_columns", r"^trl-marl magrpo: `--data_files`: load_tldr expects the columns 'prompt' and 'completion' .*"
                   r"\(it has \['body'\]\)\.( The task reads columns `text` and `reference`.*)?$"),
])
def test_magrpo_names_the_data_mistake_in_one_line(files, mistake, expected, tmp_path, capsys):
    status, lines = run("magrpo", ["--task", "writing", "--model_name_or_path", "toy", "--data_files",
                                   files[mistake], "--output_dir", str(tmp_path / "out"), *COMMON], capsys)
    assert status == 2 and len(lines) == 1, lines
    assert re.search(expected, lines[0]), lines[0]


@pytest.mark.parametrize("mistake, option, expected", [
    ("missing", "--data_files", r"`--data_files` '.*nope.jsonl': no such file"),
    ("missing", "--eval_data_files", r"`--eval_data_files` '.*nope.jsonl': no such file"),
    ("bad", "--data_files", r"`--data_files` '.*bad.jsonl' is not valid JSON Lines .*: line 2: "),
    ("no_columns", "--data_files", r"`--data_files`: load_gsm8k expects the columns \['question', 'answer'\].*"
                                   r"The task reads GSM8K's columns `question` and `answer`"),
])
@pytest.mark.slow
def test_maporl_names_the_data_mistake_in_one_line(files, tmp_path, mistake, option, expected, capsys):
    good = write(tmp_path / "good.jsonl", '{"question": "1+1", "answer": "#### 2"}\n')
    data = {"--data_files": good, "--eval_data_files": good, option: files[mistake]}
    status, lines = run("maporl gsm8k", ["--model_name_or_path", "toy:debate", *[x for kv in data.items() for x in kv],
                                         "--eval_split", "test", "--output_dir", str(tmp_path / "out"), *COMMON,
                                         *TINY_PPO], capsys)
    assert status == 2 and len(lines) == 1, lines
    assert re.search(expected, lines[0]), lines[0]
