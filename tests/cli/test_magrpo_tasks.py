"""The tasks of `trl-marl magrpo` are a registry (issue 52, item 3): the built-in ones registered like a user's, a
user's task trains through the script's `main`, and an unknown or bad registration is a clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from trl_marl.envs import TargetSumEnv
from trl_marl.envs.writing_halves import HalvesWritingEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.rewards.writing_halves import HalvesTeamReward
from trl_marl.scripts import magrpo as script
from trl_marl.scripts.data_sources import UsageError


def test_the_built_in_tasks_are_registered_in_order() -> None:
    assert script.magrpo_task_names()[:5] == ("writing", "coding", "target_sum", "tool_relay", "writing_halves")
    assert script.magrpo_task("tool_relay").default_tools == ("calculator", "none")
    assert script.magrpo_task("writing").default_tools is None


def test_an_unknown_task_names_the_closest(monkeypatch) -> None:
    with pytest.raises(UsageError, match="`--task` 'writing_halfs' is not a task: did you mean `writing_halves`"):
        script.magrpo_task("writing_halfs")


def test_a_users_task_trains_through_the_script(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(script, "_TASKS", dict(script._TASKS))  # registered for this test only
    seen: list[Any] = []

    def target_twelve(script_args: Any, num_agents: int, num_turns: int, offline: bool) -> Any:
        seen.append((num_agents, num_turns, offline))
        return TargetSumEnv(num_agents, num_turns), TargetSumReward(), Dataset.from_dict({"target": [12] * 16})

    script.register_magrpo_task("target_twelve", target_twelve, "Two numbers that add up to 12.")
    assert "target_twelve" in script.magrpo_task_names()
    trainer = script.cli_main(["--task", "target_twelve", "--model_name_or_path", "toy", "--max_steps", "1",
                               "--per_device_train_batch_size", "4", "--num_generations", "2",
                               "--max_completion_length", "4", "--report_to", "none", "--save_strategy", "no",
                               "--output_dir", str(tmp_path)], prog="trl-marl magrpo")
    assert seen == [(2, 1, True)] and trainer.state.global_step == 1
    with pytest.raises(ValueError, match="registered already"):
        script.register_magrpo_task("target_twelve", target_twelve, "again")
    script.register_magrpo_task("target_twelve", target_twelve, "again", replace=True)
    with pytest.raises(ValueError, match="`default_tools` of task 'bad'"):
        script.register_magrpo_task("bad", target_twelve, "x", default_tools=("hammer", "none"))
    with pytest.raises(ValueError, match="non-empty string"):
        script.register_magrpo_task(" ", target_twelve, "x")


def test_writing_halves_uses_the_shipped_texts_and_toy_rows_offline() -> None:
    real = script.MAGRPOScriptArguments(task="writing_halves", dataset_split="heldout")
    env, reward, rows = script.build_task(real, 2, 1, offline=False)
    assert isinstance(env, HalvesWritingEnv) and env.chat and isinstance(reward, HalvesTeamReward)
    assert len(rows) == 44 and set(rows.column_names) >= {"text", "reference"}  # trl-marl/team_writing, held out
    env, _, rows = script.build_task(script.MAGRPOScriptArguments(task="writing_halves"), 2, 1, offline=True)
    assert not env.chat and rows[0]["text"].startswith("Q0:")  # synthetic rows for the toy's 128 positions
    with pytest.raises(UsageError, match="2 writers and 1 turn"):
        script.build_task(real, 3, 1, offline=False)


def test_writing_halves_trains_from_the_command_line_on_the_toy(tmp_path: Path) -> None:
    trainer = script.cli_main(["--task", "writing_halves", "--model_name_or_path", "toy", "--max_steps", "1",
                               "--per_device_train_batch_size", "4", "--num_generations", "2",
                               "--max_completion_length", "8", "--report_to", "none", "--save_strategy", "no",
                               "--output_dir", str(tmp_path)], prog="trl-marl magrpo")
    assert trainer.state.global_step == 1 and isinstance(trainer.env, HalvesWritingEnv)
    assert (tmp_path / "agent_1").is_dir()
