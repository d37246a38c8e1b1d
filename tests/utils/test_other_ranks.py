"""Under `accelerate launch` every process used to print every warning, log line and progress bar (issue 39, item
5): `import trl_marl` now leaves them to the main process (global rank 0), unless `TRL_MARL_LOG_ALL_RANKS=1`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_marl.utils.quiet import process_rank

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import logging, warnings
logging.basicConfig(format="%(name)s: %(message)s")
import trl_marl
from trl_marl.utils.threads import apply_cpu_threads, show_thread_choice
from transformers.utils import logging as hf_logging
warnings.warn("W-MARK: a warning")
logging.getLogger("trl_marl.trainers").warning("L-MARK: a trl_marl log line")
hf_logging.get_logger("transformers.trainer").warning("T-MARK: a transformers log line")
for _ in hf_logging.tqdm(range(2), desc="P-MARK: a transformers progress bar"):
    pass
show_thread_choice()
apply_cpu_threads([], cpu_threads=1, on_cpu=True)
logging.getLogger("trl_marl.trainers").error("E-MARK: an error")
"""
MARKS = ["W-MARK", "L-MARK", "T-MARK", "P-MARK", "1 torch thread(s), as set by `cpu_threads`", "E-MARK"]


def run_probe(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TRL_MARL_LOG_ALL_RANKS", "TRANSFORMERS_VERBOSITY",
                            "HF_HUB_DISABLE_PROGRESS_BARS", "PYTHONWARNINGS")}
    environ.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **env)
    done = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("env", [{}, {"RANK": "0", "WORLD_SIZE": "2"}, {"LOCAL_RANK": "0"},
                                 {"RANK": "1", "WORLD_SIZE": "2", "TRL_MARL_LOG_ALL_RANKS": "1"}])
def test_the_main_process_and_an_asking_user_see_everything(env: dict[str, str]) -> None:
    said = run_probe(**env)
    assert [mark for mark in MARKS if mark not in said] == []


@pytest.mark.parametrize("env", [{"RANK": "1", "WORLD_SIZE": "2"}, {"RANK": "3", "LOCAL_RANK": "1"},
                                 {"LOCAL_RANK": "1"}, {"RANK": "1", "TRL_MARL_LOG_ALL_RANKS": "0"}])
def test_another_process_shows_errors_only(env: dict[str, str]) -> None:
    """Before: every line above but the progress bar's was printed by every process."""
    said = run_probe(**env)
    assert [mark for mark in MARKS if mark in said] == ["E-MARK"], said


@pytest.mark.parametrize(("env", "rank"), [({}, 0), ({"RANK": "2"}, 2), ({"LOCAL_RANK": "1"}, 1),
                                           ({"RANK": "0", "LOCAL_RANK": "1"}, 0), ({"RANK": " 3 "}, 3),
                                           ({"RANK": "x", "LOCAL_RANK": "2"}, 2), ({"RANK": ""}, 0)])
def test_process_rank(env: dict[str, str], rank: int) -> None:
    assert process_rank(env) == rank


def test_a_scripts_line_shows_in_the_main_process_only(capsys):
    from trl_marl.utils.quiet import say

    say("[trl-marl] one", environ={})
    say("[trl-marl] two", environ={"RANK": "1"})
    say("[trl-marl] three", environ={"RANK": "1", "TRL_MARL_LOG_ALL_RANKS": "1"})
    assert capsys.readouterr().out == "[trl-marl] one\n[trl-marl] three\n"
