"""Multi-agent PPO's asynchronous rollouts (`MultiAgentPPOConfig.max_staleness`; issue 50).

The worker of MAGRPO's asynchronous rollouts (`trainers.magrpo.async_rollout.AsyncRollouts`) plays PPO's episodes
without scoring them; the trainer scores them, computes their values, old log-probabilities and advantages with the
current models when it takes them, and weighs each response by the truncated ratio of the current policy over the
sampling one. What must hold whatever the timing: an update trained after t updates plays episodes sampled by
policies of update t - s or later (delays forced by waits on the worker's state, never measured); every update trains
the rows the synchronous run trains, in the same order, across a resume; the sampling log-probabilities are the
policy's own (with PPO's temperature divisor); unsupported settings are refused before any step.
"""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from helpers import ANSWER, StopAfter, add, scripted, tool_chat_model
from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward

warnings.filterwarnings("ignore")
UPDATES = 6
WORKER = "trl-marl-rollouts"


def config(tmp_path: Path, **overrides: Any) -> MultiAgentPPOConfig:
    settings: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=4, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=2, total_episodes=4 * UPDATES, response_length=4, stop_token="eos",
        learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, temperature=0.7)
    settings.update(overrides)
    return MultiAgentPPOConfig(**settings)


class Recording(MultiAgentPPOTrainer):
    """Records each update's rows (ids), the trainer's step and the sampling versions of its episodes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trained: list[dict[str, Any]] = []

    def rollout(self, rows, temperature=None, played=None):
        self.before_rollout()
        if temperature is None:  # a training update (the evaluation and sample tables pass a temperature)
            self.trained.append({"step": self.state.global_step, "ids": [row["id"] for row in rows],
                                 "versions": None if played is None else [t.policy_versions for t in played.turns],
                                 "thread": threading.current_thread().name})
        return super().rollout(rows, temperature=temperature, played=played)

    def before_rollout(self) -> None:
        """A hook of the tests below (runs in the trainer's thread before each update's targets)."""


def build(cls: type[MultiAgentPPOTrainer], model_dir: str, args: MultiAgentPPOConfig,
          rows: int = 40) -> MultiAgentPPOTrainer:
    return cls(args=args, model=model_dir, env=TargetSumEnv(2), reward_funcs=TargetSumReward(0.5),
               train_dataset=Dataset.from_dict({"target": [10] * rows, "id": list(range(rows))}))


def wait_until(condition: Any) -> None:
    """Poll `condition` (the order of events is forced by what it waits for, not by how long)."""
    while not condition():
        time.sleep(0.002)


def worker_alive() -> bool:
    return any(t.name == WORKER and t.is_alive() for t in threading.enumerate())


def synchronous_ids(model_dir: str, tmp_path: Path) -> list[list[int]]:
    trainer = build(Recording, model_dir, config(tmp_path / "sync"))
    trainer.train()
    assert all(r["versions"] is None for r in trainer.trained)
    assert not any("async/staleness" in h for h in trainer.state.log_history)
    return [r["ids"] for r in trainer.trained]


def test_a_subclass_with_the_synchronous_rollout_signature_still_trains(target_model_dir, tmp_path):
    # `rollout(rows, temperature=None)` as it was before `max_staleness`: synchronous training never passes `played`
    class OldSignature(MultiAgentPPOTrainer):
        calls: list[int] = []

        def rollout(self, rows, temperature=None):
            self.calls.append(len(rows))
            return super().rollout(rows, temperature)

    trainer = build(OldSignature, target_model_dir, config(tmp_path))
    trainer.train()
    assert trainer.state.global_step == UPDATES
    assert OldSignature.calls == [4] * UPDATES


@pytest.mark.parametrize("staleness", [1, 2])
def test_slow_trainer_meets_the_bound_exactly_and_trains_the_synchronous_rows(target_model_dir, tmp_path,
                                                                              staleness):
    class SlowTrainer(Recording):
        def before_rollout(self):
            # the trainer is slower than the worker: it waits until every update read ahead is played, so the
            # worker runs as far ahead as the bound lets it
            wait_until(lambda: all(job.done.is_set() for job in self.async_rollouts.pending))

    expected = synchronous_ids(target_model_dir, tmp_path)
    trainer = build(SlowTrainer, target_model_dir, config(tmp_path / "async", max_staleness=staleness))
    trainer.train()
    assert trainer.state.global_step == UPDATES
    assert [r["step"] for r in trainer.trained] == list(range(UPDATES))
    assert [r["ids"] for r in trainer.trained] == expected  # the same rows, in the same updates
    for r in trainer.trained:
        t = r["step"]
        (versions,) = r["versions"]  # one turn: one version per agent
        assert versions == [versions[0]] * 2
        assert t - versions[0] == min(t, staleness), (t, versions)  # the initial weights, then exactly s behind
        assert r["thread"] == threading.main_thread().name  # scored and trained in the trainer's thread
    logged = [h["async/staleness"] for h in trainer.state.log_history if "async/staleness" in h]
    assert logged == [float(min(t, staleness)) for t in range(UPDATES)]
    assert trainer.async_rollouts is None and not worker_alive()  # closed at the end


def test_slow_generator_never_exceeds_the_bound(target_model_dir, tmp_path):
    staleness = 2
    holder: dict[str, Any] = {}

    class SlowEngine(Recording):
        def _start_async_rollouts(self, version):
            worker = super()._start_async_rollouts(version)
            play = worker._play

            def slow_play(engine, rows, state):
                job = worker.running
                # the worker is slower than the trainer: it plays an update only once the trainer waits for it
                # (or, for rows read ahead past the last update, once training has ended and closes it)
                wait_until(lambda: worker.waiting_for is job or worker.closed)
                return play(engine, rows, state)

            worker._play = slow_play
            holder["worker"] = worker
            return worker

    trainer = build(SlowEngine, target_model_dir, config(tmp_path, max_staleness=staleness))
    trainer.train()
    assert [r["step"] for r in trainer.trained] == list(range(UPDATES))
    for r in trainer.trained:
        (versions,) = r["versions"]
        assert all(0 <= r["step"] - v <= staleness for v in versions), r
    assert holder["worker"].closed and not worker_alive()


def test_sampling_logprobs_are_the_policys_own(target_model_dir, tmp_path):
    # learning rate 0: every version is one policy, so PPO's old log-probabilities (temperature divisor included)
    # and the worker's sampling ones agree up to float noise, and the correction's ratio is 1
    trainer = build(Recording, target_model_dir, config(tmp_path, max_staleness=1, learning_rate=0.0))
    trainer.train()
    logged = [h for h in trainer.state.log_history if "sampling/sampling_logp_difference/max" in h]
    assert len(logged) == UPDATES
    assert max(h["sampling/sampling_logp_difference/max"] for h in logged) < 1e-5
    assert all(abs(h["sampling/importance_sampling_ratio/min"] - 1) < 1e-5 for h in logged)
    # training moves the policy: episodes sampled by an older version get a real correction
    moving = build(Recording, target_model_dir, config(tmp_path / "moving", max_staleness=2, learning_rate=3e-2,
                                                        per_device_train_batch_size=8, total_episodes=8 * UPDATES))
    moving.train()
    stale = [h["sampling/sampling_logp_difference/max"] for h in moving.state.log_history
             if "sampling/sampling_logp_difference/max" in h]
    assert max(stale) > 1e-3


def test_resume_discards_the_episodes_played_ahead(target_model_dir, tmp_path):
    save = dict(max_staleness=2, save_strategy="steps", save_steps=1)
    first = build(Recording, target_model_dir, config(tmp_path, **save))
    first.add_callback(StopAfter(3))
    first.train()
    assert first.state.global_step == 3 and not worker_alive()
    resumed = build(Recording, target_model_dir, config(tmp_path, **save))
    resumed.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-2"))
    assert [r["step"] for r in resumed.trained] == list(range(2, UPDATES))
    expected = synchronous_ids(target_model_dir, tmp_path)
    # the rows read ahead before the save are read again, and played by the checkpoint's weights or later ones
    assert [r["ids"] for r in resumed.trained] == expected[2:]
    for r in resumed.trained:
        assert all(2 <= v <= r["step"] for v in r["versions"][0]), r


def test_unsupported_settings_are_refused_before_any_step(target_model_dir, tmp_path):
    with pytest.raises(ValueError, match="`max_staleness` must be an integer >= 0"):
        config(tmp_path, max_staleness=-1)
    with pytest.raises(ValueError, match=r"max_staleness=1.*'transformers'.*or 'vllm'.*got 'compiled'"
                                         r".*max_staleness=0"):
        config(tmp_path, max_staleness=1, generation_backend="compiled")
    with pytest.warns(UserWarning, match=r"max_staleness=1.*vllm_importance_sampling_correction=True"):
        config(tmp_path, max_staleness=1, vllm_importance_sampling_correction=False)



def test_tool_calls_run_in_the_worker_and_the_answers_are_scored(tmp_path):
    rows = Dataset.from_list([{"prompt": [{"role": "user", "content": "Add 2 and 3."}]}] * 8)
    args = config(tmp_path, max_staleness=1, num_agents=1, response_length=160, total_episodes=8)

    def reward(completions, **kw):
        return [1.0 if ANSWER in str(c) else 0.0 for c in completions]

    trainer = MultiAgentPPOTrainer(args=args, model=tool_chat_model(tmp_path / "chat"), train_dataset=rows,
                                   tools=[add], reward_funcs=reward)
    calls = {"first": 0, "after_tool": 0}
    trainer.team.generate = scripted(trainer, calls, [[]])
    trainer.train()
    updates = [h for h in trainer.state.log_history if "objective/scores" in h]
    assert len(updates) == 2 and all(h["objective/scores"] == 1.0 for h in updates)  # the answer after the result
    assert calls == {"first": 8, "after_tool": 8}  # 2 updates x 4 episodes, each a call then an answer
    assert [h["async/staleness"] for h in updates] == [0.0, 1.0]
    assert not worker_alive()
