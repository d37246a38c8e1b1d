"""A MAGRPO run without any learning signal says so at once, with what it measured and the likely causes, then again
every `no_signal_warning_interval` steps while it lasts (issue 39: a run with every reward -0.5, `reward_std` 0 and
loss 0 at every step used to say nothing)."""

from __future__ import annotations

import warnings
from collections import defaultdict

import pytest
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.trainers.magrpo.diagnostics import DiagnosticSettings, NoLearningSignalWarning, TrainingDiagnostics


def run(model_dir: str, tmp_path, reward, **overrides) -> tuple[MAGRPOTrainer, list[str]]:
    kwargs = dict(output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=8,
                  max_completion_length=4, learning_rate=1e-3, max_steps=5, logging_steps=1, report_to="none",
                  save_strategy="no", disable_tqdm=True, seed=0)
    kwargs.update(overrides)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=reward, env=TargetSumEnv(2), args=MAGRPOConfig(**kwargs),
                            train_dataset=Dataset.from_dict({"target": [10] * 64}))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        trainer.train()
    return trainer, [str(w.message) for w in record if issubclass(w.category, NoLearningSignalWarning)]


def test_a_constant_reward_warns_at_once_then_every_interval(target_model_dir: str, tmp_path) -> None:
    def never_parsed(prompts, completions, **kwargs):  # what a parser that never finds the format returns
        return [-0.5] * len(completions)

    trainer, messages = run(target_model_dir, tmp_path, never_parsed, no_signal_warning_interval=2)
    assert len(messages) == 3  # steps 1, 3 and 5 of 5
    assert "for 1 optimizer step in a row" in messages[0] and "for 3 optimizer steps in a row" in messages[1]
    for message in messages:
        assert "every group gave all its samples the same return (`frac_reward_zero_std` = 1)" in message
        assert "Every reward of the last rollout was -0.5." in message
        for cause in ("the reward is constant", "format the reward parses is never met", "`max_completion_length`",
                      "log_completions=True"):
            assert cause in message, cause
    assert all(h["frac_reward_zero_std"] == 1.0 for h in trainer.state.log_history if "frac_reward_zero_std" in h)


def test_completions_cut_at_the_length_limit_are_named(target_model_dir: str, tmp_path) -> None:
    def constant(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    _, messages = run(target_model_dir, tmp_path, constant, max_completion_length=1, max_steps=1)
    assert len(messages) == 1
    # the toy model answers with digits then `</s>`: one token is never a whole answer
    assert "of 16 completions stopped at `max_completion_length` (1 tokens) without an end-of-sequence" in messages[0]


def test_none_disables_it(target_model_dir: str, tmp_path) -> None:
    _, messages = run(target_model_dir, tmp_path, lambda completions, **kw: [1.0] * len(completions), max_steps=2,
                      no_signal_warning_interval=None)
    assert messages == []


def test_a_learning_run_does_not_warn(target_model_dir: str, tmp_path) -> None:
    _, messages = run(target_model_dir, tmp_path, TargetSumReward(0.5), max_steps=3, num_generations=8,
                      per_device_train_batch_size=16)
    assert messages == []


def diagnostics(interval: int | None = 3) -> TrainingDiagnostics:
    args = DiagnosticSettings(advantage_mode="mean", team_reward_weight=1.0, max_completion_length=8,
                              no_signal_warning_interval=interval, zero_std_warning_steps=None,
                              zero_std_warning_fraction=0.9, entropy_warning_threshold=None, entropy_warning_steps=20)
    return TrainingDiagnostics(args, is_main_process=True)


def steps(diag: TrainingDiagnostics, plan: list[tuple[float, bool]]) -> list[int]:
    """Run optimizer steps of (flat fraction, every advantage 0); the steps (1-based) that warned."""
    warned = []
    for step, (flat, zero_advantages) in enumerate(plan, start=1):
        diag.flat_fraction, diag.zero_advantages = flat, zero_advantages
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            diag.end_step(defaultdict(list))
        if any(issubclass(w.category, NoLearningSignalWarning) for w in record):
            warned.append(step)
    return warned


def test_the_streak_warns_first_then_every_interval_and_a_signal_between_does_not_make_it_sooner() -> None:
    flat, learning = (1.0, True), (0.5, False)
    plan = [flat] * 7 + [learning] + [flat] * 3
    assert steps(diagnostics(3), plan) == [1, 4, 7, 10]  # issue 53, item 8: not at 9, two steps after 7


@pytest.mark.parametrize("step, warns", [
    ((0.5, True), True),    # some groups have spread, yet every advantage is 0 (e.g. a custom advantage)
    ((1.0, False), True),   # every group flat (MAREINFORCE's raw advantages are the rewards, not 0)
    ((0.99, False), False),
])
def test_either_sign_is_enough(step: tuple[float, bool], warns: bool) -> None:
    assert steps(diagnostics(), [step]) == ([1] if warns else [])


def test_a_zero_loss_alone_is_no_sign(target_model_dir: str, tmp_path) -> None:
    """On-policy (ratio 1) the surrogate loss of a group is minus the mean of its centred advantages: with completions
    of one length (here one token) and G = 8 (dyadic means: exact sums) it reads exactly 0 at every step, also at
    steps whose groups differ and whose gradient is not 0. Only the steps with every group flat warn."""
    trainer, messages = run(target_model_dir, tmp_path, TargetSumReward(0.5), max_steps=4, num_generations=8,
                            per_device_train_batch_size=16, max_completion_length=1, no_signal_warning_interval=1)
    history = [h for h in trainer.state.log_history if "frac_reward_zero_std" in h]
    assert all(h["agent_0/loss"] == 0.0 and h["agent_1/loss"] == 0.0 for h in history)
    assert any(h["frac_reward_zero_std"] < 1.0 for h in history)  # steps that learn, with a loss of 0
    assert len(messages) == sum(h["frac_reward_zero_std"] == 1.0 for h in history)


def test_the_interval_must_be_positive(tmp_path) -> None:
    with pytest.raises(ValueError, match="`no_signal_warning_interval` must be a positive number"):
        MAGRPOConfig(output_dir=str(tmp_path), report_to="none", no_signal_warning_interval=0)
