"""The command line's early checks (`scripts.early`): a user mistake is one line, exit 2, before torch, transformers or
TRL load, and it is the line the script's own parser gives once they have loaded; good commands pass untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_marl.scripts.early import early_problem, given_values

ROOT = Path(__file__).resolve().parents[2]
WRITING = str(ROOT / "examples" / "configs" / "magrpo_writing.yaml")
HEAVY = ("torch", "transformers", "peft", "datasets", "trl.trainer")  # `trl` alone: its lazy package, for TrlParser


def _mistakes(tmp_path: Path) -> dict[str, list[str]]:
    resumed = tmp_path / "finished"
    (resumed / "checkpoint-2").mkdir(parents=True)
    (resumed / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    busy = tmp_path / "busy"
    (busy / "checkpoint-1").mkdir(parents=True)
    base = ["magrpo", "--config", WRITING, "--model_name_or_path", "toy", "--max_steps", "2"]
    hidden_sum, gsm8k = (str(ROOT / "examples" / "configs" / f"maporl_{task}.yaml")
                         for task in ("hidden_sum", "gsm8k"))
    return {
        "misspelt shipped dataset": [*base, "--dataset_name", "trl-marl/team_writin", "--output_dir",
                                     str(tmp_path / "a")],
        "missing data file": [*base, "--data_files", str(tmp_path / "missing.jsonl"), "--output_dir",
                              str(tmp_path / "b")],
        "unknown model": ["magrpo", "--config", WRITING, "--model_name_or_path", "no-such/model",
                          "--output_dir", str(tmp_path / "c")],
        "negative learning rate": [*base, "--learning_rate", "-1", "--output_dir", str(tmp_path / "d")],
        "missing config": ["magrpo", "--config", WRITING.replace("writing", "writin"), "--model_name_or_path", "toy"],
        "resume with no checkpoint": [*base, "--resume_from_checkpoint", "true", "--output_dir", str(tmp_path / "e")],
        "resume a finished run": [*base, "--resume_from_checkpoint", "true", "--output_dir", str(resumed)],
        "another run's checkpoints": [*base, "--output_dir", str(busy)],
        "maporl learning rate": ["maporl", "hidden_sum", "--config", hidden_sum, "--model_name_or_path", "toy:debate",
                                 "--learning_rate=nan"],
        "maporl resume": ["maporl", "gsm8k", "--config", gsm8k, "--model_name_or_path", "toy:debate",
                          "--resume_from_checkpoint", "true"],
    }


_PROBE = """
import json, sys
from trl_marl.cli import main
try:
    main(json.loads(sys.argv[1]))
except SystemExit as stop:
    code = stop.code
else:
    code = 0
print(json.dumps({"code": code, "loaded": [m for m in HEAVY if m in sys.modules]}))
"""


def test_every_mistake_is_one_line_before_anything_heavy_loads(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for name, argv in _mistakes(tmp_path).items():
        run = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PROBE}", json.dumps(argv)],
                             capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        result = json.loads(run.stdout.strip().splitlines()[-1])
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert result == {"code": 2, "loaded": []}, (name, result, run.stderr)
        assert len(lines) == 1 and lines[0].startswith("trl-marl "), (name, run.stderr)


def test_the_early_line_is_the_line_the_script_gives_after_parsing(tmp_path: Path, monkeypatch, capsys) -> None:
    """Each mistake the script's parser (or its data and model checks) also refuses, with the same sentence: the
    early checks are the same functions, run sooner."""
    from trl_marl.scripts.magrpo import cli_main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, argv in _mistakes(tmp_path).items():
        if argv[0] != "magrpo" or name == "missing config":
            continue
        early = early_problem(argv[1:], "MAGRPOConfig")
        assert early is not None, name
        with pytest.raises(SystemExit) as stop:
            cli_main(argv[1:], prog="trl-marl magrpo")
        assert stop.value.code != 0
        said = capsys.readouterr().err
        assert early in " ".join(said.split()), (name, early, said)


def test_good_commands_pass_the_early_checks(tmp_path: Path) -> None:
    for config in sorted((ROOT / "examples" / "configs").glob("*.yaml")):
        args = ["--config", str(config), "--model_name_or_path", "toy", "--output_dir", str(tmp_path / config.stem)]
        assert early_problem(args, "MAGRPOConfig") is None, config
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"text": "a", "reference": "b"}\n')
    finished = tmp_path / "resumable"
    (finished / "checkpoint-1").mkdir(parents=True)
    (finished / "checkpoint-1" / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    good = [["--config", WRITING, "--data_files", str(rows), "--learning_rate", "1e-5", "--model_name_or_path",
             "smollm2-135m-instruct"],
            ["--config", WRITING, "--dataset_name", "trl-marl/team_writing", "--learning_rate=0"],
            ["--config", WRITING, "--output_dir", str(finished), "--resume_from_checkpoint", "true",
             "--max_steps", "3"],
            ["--config", WRITING, "--output_dir", str(finished), "--overwrite_output_dir"],
            ["--config", WRITING, "--model_name_or_path", str(tmp_path)]]
    for args in good:
        args = args if "--model_name_or_path" in args else [*args, "--model_name_or_path", "toy"]
        assert early_problem(args, "MAGRPOConfig") is None, args


def test_given_values_reads_the_yaml_then_the_options_over_it(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 1.0e-5\nmax_steps: 3\noutput_dir: out\n")
    values = given_values(["--config", str(config), "--max_steps", "7", "--learning_rate=-2", "--overwrite_output_dir",
                           "--bf16", "false"])
    assert values == {"learning_rate": "-2", "max_steps": "7", "output_dir": "out", "overwrite_output_dir": True,
                      "bf16": "false"}
    assert given_values(["--config", str(tmp_path / "none.yaml"), "--seed", "3"]) == {"seed": "3"}
    config.write_text("- a list, not a mapping\n")
    assert given_values(["--config", str(config)]) == {}


def test_values_the_parser_reads_otherwise_are_left_to_it(tmp_path: Path) -> None:
    """An abbreviated option or a value that is not a number is not refused early: the parser decides."""
    assert early_problem(["--learning_rat", "-1"], "MAGRPOConfig") is None
    assert early_problem(["--learning_rate", "fast"], "MAGRPOConfig") is not None  # not a number >= 0 either way
    assert early_problem(["--output_dir", str(tmp_path), "--max_steps", "many", "--resume_from_checkpoint",
                          "true"], "MAGRPOConfig") is None


def test_maporl_task_names_match_the_scripts_tasks() -> None:
    from trl_marl.scripts.help import MAPORL_TASKS
    from trl_marl.scripts.maporl import TASKS

    assert set(MAPORL_TASKS) == set(TASKS)
