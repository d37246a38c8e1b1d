"""Asynchronous rollouts (`max_staleness > 0`) on vLLM: the rollout worker drives the one engine while the trainer
trains; the engine samples each episode with exactly the adapter version the worker loaded (its log-probabilities are
that version's, not the trainer's newer weights), each version goes up under a fresh name and replaces the one
before (one LoRA slot per adapter, whatever the staleness), and the staleness bound holds (see `conftest.py`)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest

pytest.importorskip("vllm")
warnings.filterwarnings("ignore")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The toy pretrained on the target-sum task (T=10), with one head of size 32 (vLLM's CPU attention minimum)."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy"), task="target", hidden_size=32, num_layers=1, num_heads=1,
                          pretrain_steps=100, seed=0, targets=(10,))


@pytest.fixture
def behaviour_checks(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """For every rollout the worker plays: the versions it loaded, the largest gap between the engine's
    log-probabilities and the worker copy's forward (the loaded version), and the engine's LoRA requests then; every
    rollout that may be stale is played after the trainer has moved past the loaded version."""
    from trl_marl.trainers.magrpo.async_rollout import AsyncRollouts

    checks: list[dict[str, Any]] = []
    original = AsyncRollouts._add_behaviour_logps
    load = AsyncRollouts._load_newest

    def load_then_fall_behind(self: AsyncRollouts) -> int:
        # a job that may be stale is generated only once the trainer has published a newer version than the one
        # loaded (the trainer's weights have moved on): an engine that sampled the trainer's adapters instead of
        # the loaded ones would give other log-probabilities than the copy's forward below
        version = load(self)
        job = self.running
        if job is not None and job.step > version:
            while self.published_version == version and not self.closed:
                time.sleep(0.002)
        return version

    def checked(self: AsyncRollouts, rollout: Any, versions: tuple[int, ...]) -> None:
        engine_logps = [turn.sampling_logps for turn in rollout.turns]
        assert all(logps is not None for logps in engine_logps)  # the engine's own: no forward needed
        for turn in rollout.turns:
            turn.sampling_logps = None
        original(self, rollout, versions)  # the loaded version's log-probabilities, with the copy's forward
        gap = max(abs(e - f) for turn, logps in zip(rollout.turns, engine_logps)
                  for ours, theirs in zip(turn.sampling_logps, logps) for a, b in zip(ours, theirs)
                  for e, f in zip(a, b))
        backend = self.team.generation_backend
        checks.append({"versions": versions, "gap": gap, "loaded": self.loaded_version,
                       "engine_loras": set(backend.llm.llm_engine.list_loras()),
                       "requests": {backend.lora_request(f"agent_{a}").lora_int_id for a in range(2)}})
        for turn, logps in zip(rollout.turns, engine_logps):
            turn.sampling_logps = logps  # what training reads: the engine's

    monkeypatch.setattr(AsyncRollouts, "_add_behaviour_logps", checked)
    monkeypatch.setattr(AsyncRollouts, "_load_newest", load_then_fall_behind)
    return checks


def test_magrpo_async_on_vllm_samples_each_version_it_loaded(target_dir: str, tmp_path: Any,
                                                             behaviour_checks: list[dict[str, Any]]) -> None:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    steps = 4
    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=16,
        max_completion_length=4, learning_rate=3e-2, max_steps=steps, logging_steps=1, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0, use_vllm=True, vllm_kv_cache_memory_bytes=16 << 20,
        max_staleness=1,
    )
    trainer = MAGRPOTrainer(model=target_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 64}),
                            peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    backend = trainer.team.generation_backend
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == steps
    assert [h["async/staleness"] for h in logs] == [0.0] + [1.0] * (steps - 1)  # every later step falls behind
    assert len(behaviour_checks) >= steps
    for check in behaviour_checks:
        # the engine sampled with the adapters of the version the worker loaded (float32: equal up to kernels)
        assert check["gap"] < 1e-3, check
        assert check["versions"] == (check["loaded"],) * 2
        assert check["engine_loras"] == check["requests"]  # one version per adapter in the engine: 2 slots
    loaded = [check["loaded"] for check in behaviour_checks]
    assert loaded == sorted(loaded) and loaded[-1] >= steps - 2  # the worker followed training
    # both adapters at the start, then both again for each newer version the worker loaded (trained with lr 3e-2,
    # every step changes both)
    assert backend.uploads == 2 * len(set(loaded))
    backend.close()


def test_ppo_async_on_vllm_trains_with_the_engines_log_probs(target_dir: str, tmp_path: Any,
                                                             behaviour_checks: list[dict[str, Any]]) -> None:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=4, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=1, total_episodes=16, response_length=4, stop_token="eos",
        learning_rate=1e-2, report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, temperature=1.0, generation_backend="vllm", vllm_kv_cache_memory_bytes=16 << 20,
        max_staleness=2,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=target_dir, env=TargetSumEnv(2), reward_funcs=TargetSumReward(),
                                   train_dataset=Dataset.from_dict({"target": [10] * 16}),
                                   peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    trainer.train()
    updates = [h for h in trainer.state.log_history if "objective/scores" in h]
    assert len(updates) == 4  # 16 episodes / 4 per update
    staleness = [h["async/staleness"] for h in updates]
    assert staleness[0] == 0.0 and max(staleness) <= 2
    assert len(behaviour_checks) == 4 and all(check["gap"] < 1e-3 for check in behaviour_checks)
    assert all(check["engine_loras"] == check["requests"] for check in behaviour_checks)
    assert trainer.async_rollouts is None
    trainer.team.generation_backend.close()
