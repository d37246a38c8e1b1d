"""The CoMLRL family as MAGRPO presets: MAREINFORCE (raw return), MARLOO (leave-one-out), MAReMax (max baseline)."""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.toy import make_toy_model

warnings.filterwarnings("ignore")
TARGET = 10
PRESETS = {MAREINFORCEConfig: "raw", MARLOOConfig: "loo", MAReMaxConfig: "max"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return make_toy_model(tmp_path_factory.mktemp("toy"), task="target", hidden_size=32, num_layers=1,
                          pretrain_steps=100, seed=0, targets=(TARGET,))


def kwargs(tmp_path, **overrides) -> dict:
    base = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=8, per_device_train_batch_size=64,
        max_completion_length=4, learning_rate=3e-3, lr_scheduler_type="constant", max_steps=1, logging_steps=1,
        report_to="none", save_strategy="no", gradient_checkpointing=False, temperature=1.0, disable_tqdm=True,
        seed=0,
    )
    base.update(overrides)
    return base


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_sets_the_advantage_and_no_std_scaling(tmp_path, preset):
    args = preset(**kwargs(tmp_path))
    assert isinstance(args, MAGRPOConfig)
    assert args.advantage_mode == PRESETS[preset] and args.scale_rewards == "none"
    # scaling by the std would change the algorithm's advantage: refused with the reason
    with pytest.raises(ValueError, match="scale_rewards='none'"):
        preset(**kwargs(tmp_path, scale_rewards="group"))
    # the mode can still be spelled on MAGRPOConfig itself
    assert MAGRPOConfig(**kwargs(tmp_path, advantage_mode=PRESETS[preset])).advantage_mode == PRESETS[preset]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_trains_on_its_advantage(model_dir, tmp_path, preset):
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=preset(**kwargs(tmp_path)),
                            train_dataset=Dataset.from_dict({"target": [TARGET] * 64}))
    trainer.train()
    turn = trainer.last_rollout.turns[0]
    returns = turn.agent_returns  # (K, n, G)
    expected = {
        "raw": returns,
        "max": returns - returns.amax(dim=-1, keepdim=True),
        "loo": (returns * 8 - returns.sum(dim=-1, keepdim=True)) / 7,
    }[PRESETS[preset]]
    torch.testing.assert_close(turn.advantages, expected)
    assert float(returns.std()) > 0  # the toy policy's samples differ, so the check is not vacuous
    for a in range(2):
        torch.testing.assert_close(trainer.last_advantages[a].cpu(), expected[:, a, :].reshape(-1))


def test_mareinforce_learns_to_coordinate(model_dir, tmp_path):
    torch.manual_seed(0)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=MAREINFORCEConfig(**kwargs(tmp_path, max_steps=40)),
                            train_dataset=Dataset.from_dict({"target": [TARGET] * 4096}))
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.2, rewards
