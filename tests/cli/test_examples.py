"""The MAGRPO examples and `trl-marl magrpo` run end to end offline on the toy model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMOKE = ["--model_name_or_path", "toy", "--max_steps", "2", "--per_device_train_batch_size", "4",
         "--num_generations", "2", "--max_completion_length", "6", "--use_peft", "false", "--num_toy_rows", "8",
         "--logging_steps", "1", "--save_strategy", "no"]


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1",
               TRL_MARL_CACHE=os.environ.get("TRL_MARL_CACHE", str(tmp_path / "cache")))
    result = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.parametrize("task", ["writing", "coding"])
@pytest.mark.slow
def test_example_runs_offline(task, tmp_path):
    out = tmp_path / task
    result = run([f"examples/magrpo_{task}.py", "--config", f"examples/configs/magrpo_{task}.yaml", *SMOKE,
                  "--output_dir", str(out)], tmp_path)
    assert "ContextLengthWarning" not in result.stderr  # the toy's prompts fit its 128 positions
    for name in ("agent_0", "agent_1", "team_config.json", "README.md"):
        assert (out / name).exists(), name
    layout = json.loads((out / "team_config.json").read_text())
    assert layout["num_agents"] == 2
    card = (out / "README.md").read_text()
    assert "MAGRPO" in card
    # every reward term of the task is a separate, named reward function (logged as rewards/<term>/mean)
    terms = ["length_ratio", "lexical_diversity", "rouge_l"] if task == "writing" else ["tests", "helper_used"]
    for term in terms:
        assert f"`{term}`" in card, (term, card)


@pytest.mark.parametrize("entry", ["examples/magrpo_writing.py", "cli"])
@pytest.mark.slow
def test_centralized_baseline_runs_offline(entry, tmp_path):
    # the same task and team reward, played by one policy that writes both agents' parts in tagged sections
    out = tmp_path / "centralized"
    command = ([entry, "--config", "examples/configs/magrpo_writing.yaml"] if entry != "cli" else
               ["-m", "trl_marl.cli", "magrpo", "--config", "examples/configs/magrpo_coding.yaml"])
    result = run([*command, *SMOKE, "--centralized", "true", "--output_dir", str(out)], tmp_path)
    assert "max_completion_length 6 -> 12" in result.stdout
    layout = json.loads((out / "team_config.json").read_text())
    assert layout["num_agents"] == 1 and (out / "agent_0").exists() and not (out / "agent_1").exists()
    card = (out / "README.md").read_text()
    term = "centralized_length_ratio" if entry != "cli" else "centralized_tests"
    assert f"`{term}`" in card, card


@pytest.mark.slow
def test_cli_magrpo_with_config(tmp_path):
    out = tmp_path / "cli"
    run(["-m", "trl_marl.cli", "magrpo", "--config", "examples/configs/magrpo_coding.yaml", *SMOKE,
         "--output_dir", str(out)], tmp_path)
    assert (out / "agent_1" / "config.json").exists()
    state = json.loads((out / "team_config.json").read_text())
    assert state["mode"] == "models"


@pytest.mark.slow
def test_maporl_example_runs_offline(tmp_path):
    out = tmp_path / "maporl"
    result = run(["examples/maporl_gsm8k.py", "--config", "examples/configs/maporl_gsm8k.yaml",
                  "--model_name_or_path", "toy:debate", "--load_in_4bit", "false",
                  "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--total_episodes", "8",
                  "--num_ppo_epochs", "1", "--response_length", "4", "--max_eval_samples", "8",
                  "--output_dir", str(out), "--report_to", "none"], tmp_path)
    assert "ContextLengthWarning" not in result.stderr
    for name in ("agent_0", "agent_2", "team_config.json"):
        assert (out / name).exists(), name
    # the config's critics are adapters on the agents' base (`value_adapter: true`, issue 51): saved as PEFT adapters
    for index in range(3):
        config = json.loads((out / f"value_model_{index}" / "adapter_config.json").read_text())
        assert config["task_type"] == "SEQ_CLS"
    assert not (out / "value_model_0" / "model.safetensors").exists()  # no copy of the base


@pytest.mark.slow
def test_maporl_command_runs_anli_offline(tmp_path):
    """`trl-marl maporl anli` (the shared MAPoRL setup of `trl_marl.scripts.maporl`) runs on the toy debate."""
    out = tmp_path / "maporl-anli"
    result = run(["-m", "trl_marl.cli", "maporl", "anli", "--config", "examples/configs/maporl_anli.yaml",
                  "--model_name_or_path", "toy:debate", "--use_peft", "false", "--load_in_4bit", "false",
                  "--value_adapter", "false",  # full policies: the critics are separate value models
                  "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "1", "--total_episodes", "8",
                  "--num_ppo_epochs", "1", "--max_eval_samples", "8", "--output_dir", str(out),
                  "--save_value_model", "true", "--report_to", "none"], tmp_path)
    for name in ("agent_0", "value_model_0", "team_config.json"):  # the critics kept on the command line
        assert (out / name).exists(), name
    # the config's response_length (250, for a real model) is cut to what the toy answers in
    assert "response_length 250 -> 8" in result.stdout
    assert json.loads((out / "team_config.json").read_text())["num_agents"] == 3

