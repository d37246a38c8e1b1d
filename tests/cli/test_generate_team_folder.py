"""`trl-marl generate` refuses what it cannot use in one line with status 2: a folder that holds no team, naming what
trainers write (issue 53, item 9: the error pointed to `OUTPUT_DIR/final`, which no trainer writes); flags out of
range, a malformed or damaged team, a prompt longer than the context window (issue 54, item 12: tracebacks, a hang,
and bit-flipped weights loaded silently)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from trl_marl.scripts.generate import add_generate_arguments, generate_command, team_folder_problem
from trl_marl.utils.checkpoint_files import write_manifest


def generate(team: Path, capsys: pytest.CaptureFixture[str], *flags: str, prompt: str = "x") -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    add_generate_arguments(parser)
    code = generate_command(parser.parse_args(["--team", str(team), "--prompt", prompt, *flags]))
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


@pytest.fixture(scope="module")
def saved_team(target_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from peft import LoraConfig

    from trl_marl import AgentTeam

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    path = tmp_path_factory.mktemp("generate") / "team"
    AgentTeam.build(target_model_dir, 2, peft_config=lora).save_pretrained(path)
    return path


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--max-new-tokens", "0"], "--max-new-tokens 0: pass a positive number"),
    (["--sample", "--temperature", "0"], "--temperature 0.0 with --sample: pass a temperature > 0"),
    (["--sample", "--temperature", "nan"], "--temperature nan with --sample"),
    (["--top-p", "5"], "--top-p 5.0: pass a probability mass in (0, 1]"),
    (["--seed", str(2**80)], f"--seed {2**80}: pass a seed in 0..4294967295"),
    (["--seed", "-1"], "--seed -1: pass a seed"),
])
def test_flags_out_of_range_are_one_line_before_anything_loads(tmp_path, capsys, flags, fragment):
    code, message = generate(tmp_path / "no-team-here", capsys, *flags)  # refused before the folder is looked at
    assert code == 2 and message.startswith("trl-marl generate: ") and fragment in message, message
    assert len(message.splitlines()) == 1


def test_a_malformed_team_config_and_truncated_weights_are_one_line(saved_team, tmp_path, capsys):
    broken = tmp_path / "config"
    shutil.copytree(saved_team, broken)
    (broken / "team_config.json").write_text('{"num_agents": 2, ')
    code, message = generate(broken, capsys)
    assert code == 2 and len(message.splitlines()) == 1 and "could not be loaded (" in message, message
    truncated = tmp_path / "weights"
    shutil.copytree(saved_team, truncated)
    weights = truncated / "agent_0" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    code, message = generate(truncated, capsys)
    assert code == 2 and len(message.splitlines()) == 1 and "could not be loaded (" in message, message


def test_a_checkpoint_whose_weights_changed_is_refused_by_its_manifest(saved_team, tmp_path, capsys):
    """A checkpoint folder (it has a manifest): one flipped byte in a weight file is caught by the SHA-256 before
    anything is loaded (the file's structure is intact, so a load would succeed with the wrong weights)."""
    checkpoint = tmp_path / "checkpoint-3"
    shutil.copytree(saved_team, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 3, "log_history": []}))
    write_manifest(str(checkpoint))
    code, message = generate(checkpoint, capsys, "--max-new-tokens", "2")
    assert code == 0, message
    weights = checkpoint / "agent_1" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x01  # the last tensor's data: the header still parses
    weights.write_bytes(bytes(data))
    code, message = generate(checkpoint, capsys)
    assert code == 2 and len(message.splitlines()) == 1
    assert "is damaged" in message and "SHA-256" in message and "agent_1/adapter_model.safetensors" in message


def test_a_prompt_longer_than_the_context_window_is_refused(saved_team, capsys):
    code, message = generate(saved_team, capsys, "--max-new-tokens", "2", prompt="T=10: " * 20_000)
    assert code == 2 and len(message.splitlines()) == 1, message
    assert "longer than its model's context window (max_position_embeddings=128)" in message
