"""A reward call that hangs or fails never leaves training silent or loses the completed steps (issue 26, item 4).

Every reward function call is limited by the configs' `reward_timeout` (a worker thread, abandoned on timeout); a
reward that times out or raises during `train()` saves the last completed step as a checkpoint and stops with an
error naming the function, the field and the checkpoint. The trainer runs below are MAGRPO and multi-agent PPO on
the suite's toy target model (conftest.py's `target_model_dir`).
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, RewardFunctionError
from trl_marl._trl_compat import is_complete_checkpoint
from trl_marl.envs import TargetSumEnv
from trl_marl.rewarding import RewardSet
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.utils.checkpoint_files import MANIFEST_FILE
from trl_marl.validation import (
    DEFAULT_REWARD_TIMEOUT,
    RewardTimeoutError,
    RewardTimeoutWarning,
    call_reward_function,
)

warnings.filterwarnings("ignore")


@pytest.fixture
def release() -> Any:
    """An event that the hanging rewards wait for; set at the end of the test, so no thread outlives it for long."""
    event = threading.Event()
    yield event
    event.set()


# ------------------------------------------------------------------------------------------------ one call


def test_a_hanging_call_times_out_naming_the_function_and_the_field(release: threading.Event) -> None:
    def stuck_verifier(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        release.wait()
        return [1.0] * len(completions)

    start = time.monotonic()
    with pytest.raises(RewardTimeoutError) as caught:
        call_reward_function(stuck_verifier, "stuck_verifier", 2, timeout=0.2,
                             timeout_field="MAGRPOConfig.reward_timeout", prompts=["a", "b"], completions=["1", "2"])
    assert time.monotonic() - start < 5.0  # returned although the function never did
    message = str(caught.value)
    assert "`stuck_verifier`" in message and "0.2 s" in message and "`MAGRPOConfig.reward_timeout`" in message
    assert isinstance(caught.value, RewardFunctionError)


def test_a_call_within_the_timeout_behaves_as_a_direct_call() -> None:
    seen: dict[str, Any] = {}

    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        seen["grad"] = torch.is_grad_enabled()
        seen["thread"] = threading.current_thread().name
        return [float(len(c)) for c in completions]

    with torch.no_grad():
        values = call_reward_function(reward, "reward", 2, timeout=30.0, prompts=["a", "b"], completions=["x", "yz"])
    assert values == [1.0, 2.0]
    assert seen == {"grad": False, "thread": "reward:reward"}  # in a worker thread, under the caller's no_grad

    def broken(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        raise KeyError("gold")

    with pytest.raises(RewardFunctionError, match="`broken` raised KeyError: 'gold'"):
        call_reward_function(broken, "broken", 1, timeout=30.0, prompts=["a"], completions=["x"])

    # without a timeout the function runs in the calling thread
    call_reward_function(reward, "reward", 1, timeout=None, prompts=["a"], completions=["x"])
    assert seen["thread"] == threading.current_thread().name


def test_a_function_that_sets_signal_handlers_runs_in_the_main_thread() -> None:
    """Python allows `signal.signal` in the main thread only (e.g. a reward with a `signal.alarm` time limit, as
    math_verify has): such a function is called there, without the timeout, and says so once."""
    import signal

    calls: list[str] = []

    def alarmed(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        calls.append(threading.current_thread().name)
        previous = signal.signal(signal.SIGALRM, signal.getsignal(signal.SIGALRM))
        signal.signal(signal.SIGALRM, previous)
        return [1.0] * len(completions)

    with pytest.warns(RewardTimeoutWarning, match="`alarmed` sets signal handlers.*without `MAGRPOConfig.reward_time"):
        values = call_reward_function(alarmed, "alarmed", 1, timeout=30.0,
                                      timeout_field="MAGRPOConfig.reward_timeout", prompts=["a"], completions=["x"])
    assert values == [1.0]
    assert calls == ["reward:alarmed", threading.main_thread().name]


def test_reward_set_applies_the_timeout_and_a_function_may_keep_its_own(release: threading.Event) -> None:
    def slow(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        time.sleep(0.5)
        return [1.0] * len(completions)

    rewards = RewardSet([slow])
    rewards.set_timeout(0.1, "MultiAgentPPOConfig.reward_timeout")
    args = ([["p"]], [["c"]], [{"prompt": "p"}], [None], 1)
    with pytest.raises(RewardTimeoutError, match="MultiAgentPPOConfig.reward_timeout"):
        rewards.score(*args)
    slow.reward_timeout = 5.0  # e.g. a remote verifier whose retry budget is longer than the run's limit
    scores, _ = rewards.score(*args)
    assert scores.tolist() == [[1.0]]


@pytest.mark.parametrize("cls", [MAGRPOConfig, MultiAgentPPOConfig])
def test_reward_timeout_field(tmp_path: Path, cls: type) -> None:
    extra = {"num_generations": 2} if cls is MAGRPOConfig else {}
    assert DEFAULT_REWARD_TIMEOUT == 600.0
    assert cls(output_dir=str(tmp_path), report_to="none", **extra).reward_timeout == 600.0
    assert cls(output_dir=str(tmp_path), report_to="none", reward_timeout=None, **extra).reward_timeout is None
    for bad in (0, -1.0, float("inf"), "10", True):
        with pytest.raises(ValueError, match=f"`{cls.__name__}.reward_timeout` must be a number of seconds > 0"):
            cls(output_dir=str(tmp_path), report_to="none", reward_timeout=bad, **extra)


# ------------------------------------------------------------------------------------------------ during training


class FailingReward(TargetSumReward):
    """`TargetSumReward`, until the given optimizer step: then it hangs (`"hang"`) or raises (`"raise"`)."""

    def __init__(self, fail_at_step: int, how: str, release: threading.Event) -> None:
        super().__init__(0.5)
        self.name = self.__name__ = "flaky_verifier"
        self.fail_at_step, self.how, self.release = fail_at_step, how, release

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        if state is not None and state.global_step + 1 >= self.fail_at_step:
            if self.how == "hang":
                self.release.wait()
            else:
                raise ConnectionError("verifier at http://127.0.0.1:9 refused the connection")
        return super().__call__(prompts, completions, **kwargs)


def magrpo(model_dir: str, output_dir: Path, reward: Any, max_steps: int = 3, **overrides: Any) -> MAGRPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir), num_agents=2, num_generations=2, per_device_train_batch_size=4,
        max_completion_length=3, learning_rate=1e-3, max_steps=max_steps, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0, logging_steps=1,
    )
    kwargs.update(overrides)
    return MAGRPOTrainer(model=model_dir, reward_funcs=reward, args=MAGRPOConfig(**kwargs),
                         train_dataset=Dataset.from_dict({"target": [10] * 8}),
                         env=TargetSumEnv(2))


@pytest.mark.parametrize("how", ["hang", "raise"])
def test_a_failing_reward_saves_the_last_completed_step_and_stops(target_model_dir: str, tmp_path: Path,
                                                                  release: threading.Event, how: str) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(3, how, release), reward_timeout=0.5)
    error = RewardTimeoutError if how == "hang" else RewardFunctionError
    with pytest.raises(error) as caught:
        trainer.train()
    message = str(caught.value)
    checkpoint = out / "checkpoint-2"
    assert "during step 3" in message and "`flaky_verifier`" in message and str(checkpoint) in message
    assert ("MAGRPOConfig.reward_timeout" in message) == (how == "hang")
    assert "resume_from_checkpoint=True" in message
    # saved although save_strategy="no": the two completed steps, with the optimizer, scheduler and random state
    assert sorted(os.listdir(out)) == ["checkpoint-2"]
    assert is_complete_checkpoint(checkpoint)
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", MANIFEST_FILE):
        assert (checkpoint / name).exists(), name
    saved = json.loads((checkpoint / MANIFEST_FILE).read_text())["files"]
    assert "optimizer.pt" in saved and "agent_0/model.safetensors" in saved

    # once the reward works again, the run goes on from step 2 to the end
    resumed = magrpo(target_model_dir, out, TargetSumReward(0.5))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3
    assert [entry["step"] for entry in resumed.state.log_history if "loss" in entry] == [1, 2, 3]


def test_a_reward_failing_in_the_first_step_saves_nothing(target_model_dir: str, tmp_path: Path,
                                                           release: threading.Event) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(1, "raise", release))
    with pytest.raises(RewardFunctionError, match="during step 1: .*No training step had completed"):
        trainer.train()
    assert not any(name.startswith("checkpoint-") for name in os.listdir(out)) if out.exists() else True


def test_ppo_saves_the_last_completed_update_when_a_reward_hangs(target_model_dir: str, tmp_path: Path,
                                                                 release: threading.Event) -> None:
    out = tmp_path / "out"
    args = MultiAgentPPOConfig(
        output_dir=str(out), num_agents=2, per_device_train_batch_size=2, total_episodes=6, response_length=3,
        num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="no", num_sample_generations=0,
        disable_tqdm=True, seed=0, reward_timeout=0.5,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=target_model_dir, reward_funcs=FailingReward(2, "hang", release),
                                   train_dataset=Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4}))
    with pytest.raises(RewardTimeoutError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "`flaky_verifier`" in message and "MultiAgentPPOConfig.reward_timeout" in message
    assert str(out / "checkpoint-1") in message and "AgentTeam.from_pretrained" in message
    assert is_complete_checkpoint(out / "checkpoint-1")
    assert (out / "checkpoint-1" / "value_model_0").is_dir()


def test_a_failed_save_is_reported_with_the_reward_error(target_model_dir: str, tmp_path: Path,
                                                         release: threading.Event) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(2, "raise", release))

    def full_disk(model: Any, trial: Any) -> None:
        raise OSError(28, "No space left on device")

    trainer._save_checkpoint = full_disk
    with pytest.raises(RewardFunctionError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "`flaky_verifier` raised ConnectionError" in message
    assert f"Saving the last completed step (1) in {out / 'checkpoint-1'} failed too (OSError: " in message
    assert "the newest checkpoint is none" in message
    assert isinstance(caught.value.__cause__, RewardFunctionError)
