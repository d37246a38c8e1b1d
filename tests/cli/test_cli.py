"""`trl-marl`'s help: every `--help` exits 0 without loading torch and names its command; so do the full lists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the command in a fresh interpreter and reports the heavy modules it imported (after the help was printed).
PROBE = """
import sys
from trl_marl.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "transformers", "trl", "datasets") if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
sys.exit(code)
"""


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("args, usage", [
    (["--help"], "usage: trl-marl [-h] COMMAND"),
    (["magrpo", "--help"], "usage: trl-marl magrpo --config FILE"),
    (["maporl", "--help"], "usage: trl-marl maporl {gsm8k,anli,hidden_sum} --config FILE"),
    (["maporl", "gsm8k", "-h"], "usage: trl-marl maporl {gsm8k,anli,hidden_sum} --config FILE"),
    (["demo", "--help"], "usage: trl-marl demo [-h]"),
    (["generate", "--help"], "usage: trl-marl generate [-h] --team PATH"),
    (["serve-verifier", "--help"], "usage: trl-marl serve-verifier [-h]"),
    (["vllm-serve", "--help"], "usage: trl-marl vllm-serve [-h]"),
])
def test_help_is_fast_and_names_its_command(args, usage):
    result = run_cli(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(usage), result.stdout[:300]
    assert "HEAVY=\n" in result.stdout, result.stdout[-200:]  # no torch, transformers, TRL or datasets


def test_short_help_lists_what_a_user_sets_first():
    result = run_cli("magrpo", "--help")
    lines = result.stdout.splitlines()
    assert len(lines) < 80, len(lines)  # not TrlParser's 1,500 lines
    for option in ("--model_name_or_path", "--task", "--num_generations", "--learning_rate", "--output_dir"):
        assert any(line.strip().startswith(option) for line in lines), option
    text = " ".join(result.stdout.split())
    assert "`toy`" in text and "smollm2-135m-instruct" in text
    assert "trl-marl magrpo --help-all" in text


def test_maporl_without_a_task_says_what_to_do():
    result = run_cli("maporl")
    assert result.returncode == 2
    assert "name a task first (gsm8k, anli or hidden_sum)" in result.stderr


def test_every_short_option_exists_in_the_full_parser():
    from trl_marl.cli import SHORT_OPTIONS
    from trl_marl.scripts.magrpo import build_parser as magrpo_parser
    from trl_marl.scripts.maporl import build_parser as maporl_parser

    for command, parser in (("magrpo", magrpo_parser()), ("maporl", maporl_parser("gsm8k"))):
        known = {option for action in parser._actions for option in action.option_strings}
        for _, options in SHORT_OPTIONS[command]:
            for usage, _ in options:
                for option in (word.rstrip(",") for word in usage.split() if word.startswith("--")):
                    assert option in known, (command, option)


def test_help_all_names_the_command_and_the_offline_models(capsys):
    from trl_marl.cli import main

    assert main(["magrpo", "--help-all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trl-marl magrpo [-h]")
    assert "--max_completion_length" in out and "--lora_target_modules" in out  # the full list
    assert "smollm2-135m-instruct" in " ".join(out.split())
    assert main(["maporl", "anli", "--help-all"]) == 0
    assert capsys.readouterr().out.startswith("usage: trl-marl maporl anli [-h]")


LAZY = """
import sys
import trl_marl
from trl_marl.utils.model_names import resolve_model_name
assert "torch" not in sys.modules and "trl_marl.toy" not in sys.modules, "import trl_marl stays light"
assert "AgentTeam" in dir(trl_marl) and "MAGRPOTrainer" in trl_marl.__all__
try:  # the first name resolved loads the offline models, whose resolver answers (here: an unknown toy task)
    resolve_model_name("toy:no-such-task")
    raise AssertionError("toy names are not resolved")
except ValueError as exc:
    assert "unknown toy task 'no-such-task'" in str(exc), exc
assert "trl_marl.offline_models" in sys.modules and resolve_model_name("gpt2") == "gpt2"
from trl_marl import MAGRPOTrainer, AgentTeam  # the public names load on first use
assert MAGRPOTrainer.__module__ == "trl_marl.trainers.magrpo.trainer" and trl_marl.AgentTeam is AgentTeam
print("OK")
"""


@pytest.mark.slow
def test_import_is_lazy_and_toy_names_still_resolve():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    result = subprocess.run([sys.executable, "-c", LAZY], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("OK"), result.stdout + result.stderr[-2000:]
