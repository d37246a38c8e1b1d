"""Multi-agent PPO says when it learns nothing, as MAGRPO does, and both no-signal warnings keep to their interval and
point at the user's line (issue 53, items 5 and 8).

The report: a verifier that always returns 0 gave six PPO updates of `objective/scores: 0` and no warning (MAGRPO warns
from step 1); MAGRPO's `NoLearningSignalWarning` came three times in 12 steps although it says every 10, each followed
by a stray source line of transformers' loop (`tr_loss_step = self.training_step(...)`). The runs below are on the
suite's toy target model (conftest.py's `target_model_dir`).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.trainers.magrpo.diagnostics import NoLearningSignalWarning
from trl_marl.trainers.ppo.logging import ScoreSignalCheck


def always_zero(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """A verifier that never finds the answer."""
    return [0.0] * len(completions)


def ppo_warnings(model_dir: str, tmp_path: Any, reward: Any, updates: int) -> list[warnings.WarningMessage]:
    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=2, total_episodes=2 * updates,
        response_length=3, num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="no",
        num_sample_generations=0, disable_tqdm=True, seed=0, reward_timeout=None,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=model_dir, reward_funcs=reward,
                                   train_dataset=Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    return [w for w in caught if issubclass(w.category, NoLearningSignalWarning)]


def test_ppo_warns_when_every_score_of_an_update_is_the_same(target_model_dir, tmp_path):
    caught = ppo_warnings(target_model_dir, tmp_path, always_zero, updates=3)
    assert len(caught) == 1  # update 1; the interval (10) keeps updates 2 and 3 quiet
    message = str(caught[0].message)
    assert "no learning signal from the rewards for 1 update in a row" in message
    assert "got the same score (0)" in message and "verifier" in message and "`response_length`" in message
    assert caught[0].filename == __file__  # the user's `trainer.train()` line


def test_ppo_with_a_reward_that_separates_responses_does_not_warn(target_model_dir, tmp_path):
    def by_length(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [float(i % 2) for i in range(len(completions))]

    assert ppo_warnings(target_model_dir, tmp_path, by_length, updates=2) == []


class FakeAccelerator:
    """One process: `gather` returns what it is given."""

    device = torch.device("cpu")

    @staticmethod
    def gather(tensor: torch.Tensor) -> torch.Tensor:
        return tensor


class Scored:
    """The two fields of an `AgentRollout` the check reads."""

    def __init__(self, scores: list[float]) -> None:
        self.scores = torch.tensor(scores)
        self.scorable = torch.ones(len(scores), dtype=torch.bool)


def test_the_ppo_check_keeps_to_its_interval_across_a_learning_update():
    check = ScoreSignalCheck(interval=3, is_main_process=True)
    flat, spread = [Scored([0.5, 0.5]), None, Scored([0.5])], [Scored([0.0, 1.0])]
    plan = [flat] * 4 + [spread] + [flat] * 3
    warned = []
    for update, rollouts in enumerate(plan, start=1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check.see_update(update, rollouts, FakeAccelerator())
        warned += [update] * len(caught)
    assert warned == [1, 4, 7]  # not at 6, the first flat update after the learning one
    assert ScoreSignalCheck(interval=None, is_main_process=True).streak == 0


def test_magrpo_warns_at_most_every_interval_and_points_at_the_users_line(target_model_dir, tmp_path):
    """Flat steps 1, 3 and 5 with a signal at steps 2 and 4: with an interval of 4, steps 1 and 5 warn. Before, every
    flat step after a step with a signal warned as the start of a new streak (1, 3 and 5)."""
    calls = {"n": 0}

    def flat_but_steps_2_and_4(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        calls["n"] += 1
        if calls["n"] in (2, 4):  # the samples differ
            return [float(i % 2) for i in range(len(completions))]
        return [0.0] * len(completions)

    args = MAGRPOConfig(output_dir=str(tmp_path / "out"), num_agents=2, num_generations=2,
                        per_device_train_batch_size=4, max_completion_length=3, learning_rate=1e-3, max_steps=5,
                        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
                        no_signal_warning_interval=4, reward_timeout=None)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=flat_but_steps_2_and_4, env=TargetSumEnv(2),
                            args=args, train_dataset=Dataset.from_dict({"target": [10] * 64}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    named = [w for w in caught if issubclass(w.category, NoLearningSignalWarning)]
    flat_steps = [h["step"] for h in trainer.state.log_history if h.get("frac_reward_zero_std") == 1.0]
    assert flat_steps == [1, 3, 5]
    assert len(named) == 2  # steps 1 and 5
    assert "at most every 4 steps" in str(named[0].message)
    assert all(w.filename == __file__ for w in named)  # not transformers' `tr_loss_step = ...` line


def test_a_learning_magrpo_run_stays_quiet(target_model_dir, tmp_path):
    args = MAGRPOConfig(output_dir=str(tmp_path / "out"), num_agents=2, num_generations=8,
                        per_device_train_batch_size=16, max_completion_length=3, max_steps=2, report_to="none",
                        save_strategy="no", disable_tqdm=True, seed=0, reward_timeout=None)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=args, train_dataset=Dataset.from_dict({"target": [10] * 64}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in caught if issubclass(w.category, NoLearningSignalWarning)]
