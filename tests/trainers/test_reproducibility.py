"""A run is a function of its seed: same `args.seed`, same machine -> bit-identical weights and logs.

Each pair of runs starts from a *different* global RNG state (as when a user's script draws random numbers, builds
other models or evaluates before the trainer exists), so a trainer that initialises adapters or value heads, or
samples, before seeding from `args.seed` fails here.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward

warnings.filterwarnings("ignore")
TARGET = 10
_TIMING = ("runtime", "per_second")  # wall-clock metrics (and PPO's `eps`, episodes per second) differ run to run


def scramble_global_rng(state: int) -> None:
    """Leave python, numpy and torch's global generators in a state that depends on `state`."""
    random.seed(state)
    np.random.seed(state)
    torch.manual_seed(state)
    torch.rand(state % 97 + 1)


def weights(trainer: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.named_parameters() if v.requires_grad}


def logs(trainer: Any) -> list[dict[str, float]]:
    return [{k: v for k, v in h.items() if k != "eps" and not any(t in k for t in _TIMING)}
            for h in trainer.state.log_history]


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        assert torch.equal(a[key], b[key]), key


def differs(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def magrpo_run(model_dir: str, tmp_path: Path, rng_state: int, seed: int, team_mode: str) -> MAGRPOTrainer:
    scramble_global_rng(rng_state)
    args = MAGRPOConfig(
        output_dir=str(tmp_path / f"magrpo-{team_mode}-{rng_state}-{seed}"), num_agents=2, num_turns=2,
        num_generations=4, max_branches=2, per_device_train_batch_size=8, max_completion_length=4,
        learning_rate=3e-3, max_steps=3, logging_steps=1, report_to="none", save_strategy="no",
        temperature=1.0, disable_tqdm=True, seed=seed, team_mode=team_mode,
    )
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    peft_config = lora if team_mode == "adapters" else None
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, num_turns=2),
                            args=args, train_dataset=Dataset.from_dict({"target": [TARGET] * 64}),
                            peft_config=peft_config)
    scramble_global_rng(rng_state + 1)  # whatever happens between building and training does not matter either
    trainer.train()
    return trainer


@pytest.mark.parametrize("team_mode", ["adapters", "models"])
def test_magrpo_run_is_a_function_of_its_seed(target_model_dir: str, tmp_path: Path, team_mode: str) -> None:
    first = magrpo_run(target_model_dir, tmp_path, rng_state=1, seed=7, team_mode=team_mode)
    second = magrpo_run(target_model_dir, tmp_path, rng_state=2, seed=7, team_mode=team_mode)
    assert_same(weights(first), weights(second))
    assert logs(first) == logs(second)
    other = magrpo_run(target_model_dir, tmp_path, rng_state=1, seed=8, team_mode=team_mode)
    assert differs(weights(first), weights(other))


def test_lora_initialisation_follows_the_seed(target_model_dir: str, tmp_path: Path) -> None:
    """The adapters' initial weights (before any step) depend on `args.seed` alone."""
    def initial(rng_state: int, seed: int) -> dict[str, torch.Tensor]:
        scramble_global_rng(rng_state)
        trainer = MAGRPOTrainer(
            model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
            args=MAGRPOConfig(output_dir=str(tmp_path / "init"), num_agents=2, num_generations=4,
                              per_device_train_batch_size=8, max_completion_length=4, report_to="none",
                              seed=seed),
            train_dataset=Dataset.from_dict({"target": [TARGET] * 8}),
            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        )
        return weights(trainer)

    a, b, c = initial(1, 3), initial(2, 3), initial(1, 4)
    assert_same(a, b)
    assert differs(a, c)


def ppo_run(model_dir: str, tmp_path: Path, rng_state: int, seed: int) -> MultiAgentPPOTrainer:
    scramble_global_rng(rng_state)
    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / f"ppo-{rng_state}-{seed}"), num_agents=2, per_device_train_batch_size=4,
        gradient_accumulation_steps=2,
        num_mini_batches=2, total_episodes=16, response_length=4, stop_token="eos", num_ppo_epochs=2,
        learning_rate=1e-3, temperature=1.0, report_to="none", save_strategy="no", num_sample_generations=0,
        logging_steps=1, seed=seed, disable_tqdm=True,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=model_dir, reward_funcs=TargetSumReward(0.5),
                                   env=TargetSumEnv(2), train_dataset=Dataset.from_dict({"target": [TARGET] * 64}))
    scramble_global_rng(rng_state + 1)
    trainer.train()
    return trainer


def test_multi_agent_ppo_run_is_a_function_of_its_seed(target_model_dir: str, tmp_path: Path) -> None:
    """Policies and the freshly initialised value heads, mini-batch order and sampling all follow `args.seed`."""
    first = ppo_run(target_model_dir, tmp_path, rng_state=1, seed=5)
    second = ppo_run(target_model_dir, tmp_path, rng_state=2, seed=5)
    a, b = weights(first), weights(second)
    assert any("value_models" in k for k in a)
    assert_same(a, b)
    assert logs(first) == logs(second)
    assert differs(a, weights(ppo_run(target_model_dir, tmp_path, rng_state=1, seed=6)))
