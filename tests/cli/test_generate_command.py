"""`trl-marl generate`: a fresh process loads a saved team and prints each agent's answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from peft import LoraConfig

from trl_marl import AgentTeam

ROOT = Path(__file__).resolve().parents[2]


def run_generate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-m", "trl_marl.cli", "generate", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, input=stdin)


@pytest.fixture(scope="module")
def saved_team(target_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, AgentTeam]:
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    team = AgentTeam.build(target_model_dir, 2, peft_config=lora).eval()
    path = tmp_path_factory.mktemp("generate") / "team"
    team.save_pretrained(path)
    return path, team


@pytest.mark.slow
def test_a_fresh_process_prints_every_agents_answer(saved_team: tuple[Path, AgentTeam]) -> None:
    path, team = saved_team
    prompts = ["T=10:", "T=6:"]
    result = run_generate("--team", str(path), "--prompt", prompts[0], "--prompt", prompts[1],
                          "--max-new-tokens", "5")
    assert result.returncode == 0, result.stderr[-2000:]
    answers = team.chat_team(prompts, max_new_tokens=5)  # the team in this process, before saving
    expected = []
    for i, prompt in enumerate(prompts):
        expected += [f"prompt {i + 1}: {prompt}", f"  agent 0: {answers[0][i]}", f"  agent 1: {answers[1][i]}"]
    assert result.stdout.splitlines() == expected


@pytest.mark.slow
def test_one_agent_and_prompts_from_stdin(saved_team: tuple[Path, AgentTeam]) -> None:
    path, team = saved_team
    result = run_generate("--team", str(path), "--agent", "1", "--max-new-tokens", "4", stdin="T=9:\n\nT=3:\n")
    assert result.returncode == 0, result.stderr[-2000:]
    answers = team.chat(1, ["T=9:", "T=3:"], max_new_tokens=4)
    assert result.stdout.splitlines() == ["prompt 1: T=9:", f"  agent 1: {answers[0]}",
                                          "prompt 2: T=3:", f"  agent 1: {answers[1]}"]


@pytest.mark.parametrize("args, message", [
    (["--agent", "2", "--prompt", "x"], "--agent 2: the team has agents 0..1"),
    (["--prompt", "x", "--team-is-not-an-option"], "unrecognized arguments"),
])
@pytest.mark.slow
def test_usage_errors(saved_team: tuple[Path, AgentTeam], args: list[str], message: str) -> None:
    result = run_generate("--team", str(saved_team[0]), *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]


def test_a_folder_without_a_team_says_what_to_pass(tmp_path: Path) -> None:
    result = run_generate("--team", str(tmp_path), "--prompt", "x")
    assert result.returncode == 2
    assert "holds no team_config.json" in result.stderr and "`output_dir` of a finished run" in result.stderr
