"""The CoMLRL family as MAGRPO presets (MAREINFORCE, MARLOO, MAReMax) and GRPO's settings on MAGRPO.

MAREINFORCE: the raw return, MARLOO: leave-one-out, MAReMax: max baseline. The GRPO settings' equivalence with TRL's
GRPOTrainer is in `test_grpo_equivalence.py`; here what a team does with them.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.trainers.magrpo.schedule import BlockRepeatSampler

warnings.filterwarnings("ignore")
TARGET = 10
PRESETS = {MAREINFORCEConfig: "raw", MARLOOConfig: "loo", MAReMaxConfig: "max"}


def kwargs(tmp_path, **overrides) -> dict:
    base = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=8, per_device_train_batch_size=64,
        max_completion_length=4, learning_rate=3e-3, lr_scheduler_type="constant", max_steps=1, logging_steps=1,
        report_to="none", save_strategy="no", gradient_checkpointing=False, temperature=1.0, disable_tqdm=True,
        seed=0,
    )
    base.update(overrides)
    return base


def record_rollouts(trainer: MAGRPOTrainer) -> tuple[list[list[int]], list[int]]:
    """Lists filled as the trainer plays: the row ids of each rollout, and the global step it was played at."""
    played: list[list[int]] = []
    steps: list[int] = []
    original = trainer.joint_rollout.run

    def run(batch, **kw):
        played.append([row["id"] for row in batch])
        steps.append(trainer.state.global_step)
        return original(batch, **kw)

    trainer.joint_rollout.run = run
    return played, steps


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
def test_preset_trains_on_its_advantage(target_model_dir, tmp_path, preset):
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
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


def test_mareinforce_learns_to_coordinate(target_model_dir, tmp_path):
    torch.manual_seed(0)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=MAREINFORCEConfig(**kwargs(tmp_path, max_steps=40)),
                            train_dataset=Dataset.from_dict({"target": [TARGET] * 4096}))
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.2, rewards


def test_block_repeat_sampler():
    # blocks [0, 1], [2, 3] each twice: what num_iterations=2 reads for generations of two rows; [4] is not a whole
    # generation and is dropped, as TRL's RepeatSampler drops it
    assert list(BlockRepeatSampler(range(5), block_size=2, repeat=2)) == [0, 1, 0, 1, 2, 3, 2, 3]
    assert len(BlockRepeatSampler(range(5), block_size=2, repeat=3)) == 12
    assert list(BlockRepeatSampler([3, 1, 4], block_size=3, repeat=1)) == [3, 1, 4]


@pytest.mark.parametrize("mu", [1, 3])
def test_num_iterations_reuses_each_rollout(target_model_dir, tmp_path, mu):
    # 4 rows, one episode per step: an epoch is 4 rollouts; with mu = 3 each rollout serves 3 optimizer steps in a
    # row (12 steps in the epoch, as TRL counts), over every row once, and the policy moves on each step.
    rows = Dataset.from_dict({"target": [TARGET] * 4, "id": list(range(4))})
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=MAGRPOConfig(**kwargs(tmp_path, per_device_train_batch_size=8, max_steps=-1,
                                                       num_train_epochs=1, num_iterations=mu)),
                            train_dataset=rows)
    played, steps = record_rollouts(trainer)
    trainer.train()
    assert trainer.state.global_step == 4 * mu
    assert steps == [k * mu for k in range(4)]
    assert sorted(i for ids in played for i in ids) == [0, 1, 2, 3]
    clip = [h["agent_0/clip_ratio"] for h in trainer.state.log_history if "agent_0/clip_ratio" in h]
    if mu == 1:
        assert max(clip) == 0  # the ratio against the detached current policy is 1
    else:
        assert max(clip) > 0  # later passes over a rollout are off-policy: the importance ratio moves and clips


def test_sync_ref_model_needs_a_reference_copy(target_model_dir, tmp_path):
    with pytest.raises(ValueError, match="beta"):
        MAGRPOConfig(**kwargs(tmp_path, sync_ref_model=True, beta=0.0))
    from peft import LoraConfig

    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    with pytest.raises(ValueError, match="adapter"):
        MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), peft_config=lora,
                      args=MAGRPOConfig(**kwargs(tmp_path, sync_ref_model=True, beta=0.1)),
                      train_dataset=Dataset.from_dict({"target": [TARGET] * 8}))


def test_num_iterations_over_epochs_with_a_partial_generation(target_model_dir, tmp_path):
    # 5 rows, generations of 2 rows (steps_per_generation=2, one row per micro-step), mu = 2, two epochs: the fifth
    # row is not a whole generation and is dropped (as TRL's sampler does), so each epoch plays 2 generations, each
    # over 2 micro-batches x 2 passes = 4 optimizer steps, and the passes stay lined up with the repeated rows across
    # the epoch boundary.
    rows = Dataset.from_dict({"target": [TARGET] * 5, "id": list(range(5))})
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=MAGRPOConfig(**kwargs(tmp_path, per_device_train_batch_size=8, max_steps=-1,
                                                       num_train_epochs=2, num_iterations=2, steps_per_generation=2,
                                                       shuffle_dataset=False)),
                            train_dataset=rows)
    played, steps = record_rollouts(trainer)
    trainer.train()
    assert trainer.state.global_step == 16
    assert played == [[0, 1], [2, 3], [0, 1], [2, 3]] and steps == [0, 4, 8, 12]
