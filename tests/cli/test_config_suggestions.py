"""An unknown field in a YAML config or on the command line of `trl-marl magrpo|maporl` ends the program with the
closest known names (issue 39: a YAML `num_generation` got TRL's generic "Please remove them…" and a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trl_marl.cli import main


def yaml_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return str(path)


def refused(capsys: pytest.CaptureFixture, argv: list[str]) -> list[str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err.splitlines()


def test_a_yaml_typo_names_the_field_meant(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = yaml_file(tmp_path, "num_generation: 4\nlearning_rate: 1.0e-5\nbeta_kl: 0.1\n")
    lines = refused(capsys, ["magrpo", "--config", config])
    assert lines[0] == (f"trl-marl magrpo: {config} sets `num_generation`, which is not an option: did you mean "
                        "`num_generations` or `num_generations_eval`?")
    assert lines[1] == f"trl-marl magrpo: {config} sets `beta_kl`, which is not an option: did you mean `beta`?"
    assert lines[-1] == "trl-marl magrpo: `trl-marl magrpo --help-all` lists every option."


def test_a_command_line_typo_names_the_option_meant(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = yaml_file(tmp_path, "learning_rate: 1.0e-5\n")
    lines = refused(capsys, ["magrpo", "--config", config, "--lora_targets", "q_proj", "--outputdir=x"])
    assert lines[0] == "trl-marl magrpo: unknown option `--lora_targets`: did you mean `--lora_target_modules`?"
    assert lines[1] == "trl-marl magrpo: unknown option `--outputdir`: did you mean `--output_dir`?"


def test_maporl_too(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = yaml_file(tmp_path, "alpha_0: 0.5\n")
    lines = refused(capsys, ["maporl", "gsm8k", "--config", config, "--num_agnets", "3"])
    assert lines[0] == (f"trl-marl maporl gsm8k: {config} sets `alpha_0`, which is not an option: did you mean "
                        "`alpha0` or `alpha1`?")
    assert lines[1].startswith("trl-marl maporl gsm8k: unknown option `--num_agnets`: did you mean `--num_agents`")


def test_a_name_far_from_every_field_gets_no_guess(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = yaml_file(tmp_path, "zzzz_qqqq: 1\n")
    lines = refused(capsys, ["magrpo", "--config", config])
    assert lines[0] == f"trl-marl magrpo: {config} sets `zzzz_qqqq`, which is not an option"


def test_known_fields_parse_as_before(tmp_path: Path) -> None:
    from trl_marl.scripts.magrpo import parse

    config = yaml_file(tmp_path, "num_generations: 4\nper_device_train_batch_size: 8\nenv:\n  SOME_VAR: '1'\n")
    script, training, model = parse(["--config", config, "--learning_rate", "2e-5", "--output_dir", str(tmp_path)])
    assert training.num_generations == 4 and training.learning_rate == 2e-5


def test_a_missing_config_file_is_one_line_with_the_closest_file(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture) -> None:
    """A new user's replay: a misspelt `--config` path gave a 22-line FileNotFoundError traceback."""
    yaml_file(tmp_path, "learning_rate: 1.0e-5\n")
    lines = refused(capsys, ["magrpo", "--config", str(tmp_path / "rum.yaml")])
    assert lines == [f"trl-marl magrpo: `--config {tmp_path / 'rum.yaml'}`: no such file; did you mean "
                     f"{tmp_path / 'run.yaml'}?"]
    lines = refused(capsys, ["maporl", "gsm8k", "--config", str(tmp_path / "no" / "where.yaml")])
    assert len(lines) == 1 and "no such file; pass a YAML file" in lines[0]


@pytest.mark.parametrize("command", [["magrpo"], ["maporl", "gsm8k"]])
def test_a_config_value_a_field_refuses_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                    command: list[str]) -> None:
    """A field's own check (`__post_init__`) ended in a 30-line ValueError traceback; now its message alone."""
    config = yaml_file(tmp_path, "learning_rate: -1\n")
    lines = refused(capsys, [*command, "--config", config, "--output_dir", str(tmp_path / "out")])
    assert len(lines) == 1 and "learning_rate` must be a finite number >= 0" in lines[0]
    assert lines[0].startswith(f"trl-marl {' '.join(command)}: ")
