"""A NaN reward is named at its first occurrence, and a run that stops for too many keeps its last step (issue 53,
item 3).

The report: one NaN per step gave only `'nonfinite/rewards': '1'` in the metric dicts, then `NonFiniteError` at step
11 with an empty output folder and no reward function named, while a reward that raises saves its last completed step
and says how to resume. The runs below are MAGRPO and multi-agent PPO on the suite's toy target model (conftest.py's
`target_model_dir`), with a reward whose first score of every call is NaN.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, NonFiniteError
from trl_marl._trl_compat import is_complete_checkpoint
from trl_marl.envs import TargetSumEnv
from trl_marl.reward_contract.errors import NonFiniteRewardWarning
from trl_marl.rewards.arithmetic import TargetSumReward


def nan_first(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """NaN for the first completion of every call, a finite score for the others."""
    return [float("nan")] + [float(len(str(c)) % 2) for c in completions[1:]]


def magrpo(model_dir: str, output_dir: Path, reward: Any, **overrides: Any) -> MAGRPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir), num_agents=2, num_generations=2, per_device_train_batch_size=4,
        max_completion_length=3, learning_rate=1e-3, max_steps=4, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0, logging_steps=1, max_nonfinite=2,
    )
    kwargs.update(overrides)
    return MAGRPOTrainer(model=model_dir, reward_funcs=reward, args=MAGRPOConfig(**kwargs),
                         train_dataset=Dataset.from_dict({"target": [10] * 8}), env=TargetSumEnv(2))


def nonfinite_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if issubclass(w.category, NonFiniteRewardWarning)]


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_magrpo_names_the_first_nan_reward_then_saves_and_says_how_to_resume(target_model_dir, tmp_path, isolation):
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, nan_first, reward_timeout=60, reward_isolation=isolation)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(NonFiniteError) as stopped:
        warnings.simplefilter("always")
        trainer.train()
    named = nonfinite_warnings(caught)
    assert len(named) == 1, [str(w.message) for w in named]  # the first occurrence only; later ones are counted
    first = str(named[0].message)
    assert "`nan_first` returned 1 NaN of" in first and "step 1" in first and "max_nonfinite" in first
    assert named[0].filename == __file__  # the user's `trainer.train()` line, not one inside transformers' loop

    message = str(stopped.value)
    checkpoint = out / "checkpoint-2"
    assert "during step 3" in message and "`nan_first`" in message and "max_nonfinite=2" in message
    assert str(checkpoint) in message and "resume_from_checkpoint=True" in message
    assert "--resume_from_checkpoint true" in message
    assert is_complete_checkpoint(checkpoint)  # saved although save_strategy="no"
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2

    resumed = magrpo(target_model_dir, out, TargetSumReward(0.5))  # the reward fixed: the run goes on to the end
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 4


def test_a_second_run_names_its_first_nan_again(target_model_dir, tmp_path):
    for run in range(2):
        trainer = magrpo(target_model_dir, tmp_path / f"run{run}", nan_first, max_steps=1, reward_timeout=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train()
        assert len(nonfinite_warnings(caught)) == 1


@pytest.mark.parametrize("critics_saved", [True, False])
def test_ppo_names_the_nan_reward_and_saves_the_last_update(target_model_dir, tmp_path, critics_saved):
    out = tmp_path / "out"
    args = MultiAgentPPOConfig(
        output_dir=str(out), num_agents=2, per_device_train_batch_size=2, total_episodes=6, response_length=3,
        num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="no", num_sample_generations=0,
        disable_tqdm=True, seed=0, max_nonfinite=2, reward_timeout=None, save_value_model=critics_saved,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=target_model_dir, reward_funcs=nan_first,
                                   train_dataset=Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4}))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(NonFiniteError) as stopped:
        warnings.simplefilter("always")
        trainer.train()
    named = nonfinite_warnings(caught)
    assert len(named) == 1 and "`nan_first` returned 1 NaN" in str(named[0].message)
    assert "step 1" in str(named[0].message)
    message = str(stopped.value)
    assert "`nan_first`" in message and "during step 2" in message
    assert str(out / "checkpoint-1") in message
    # a checkpoint without critics cannot resume: the team is loaded from it instead
    assert ("resume_from_checkpoint=True" if critics_saved else "AgentTeam.from_pretrained") in message
    assert is_complete_checkpoint(out / "checkpoint-1")
    assert sorted(os.listdir(out)) == ["checkpoint-1"]
