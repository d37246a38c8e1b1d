"""`MAGRPOTrainer` trains with whatever estimator `advantage_mode` names: a user's own, AT-GRPO's, Dr. MAS's."""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.core import AdvantageContext, agent_norm_advantages, register_advantage_estimator
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward

warnings.filterwarnings("ignore")
TARGET = 10
CALLS: list[dict] = []


@register_advantage_estimator("test_training_best_only")
def best_only(returns: torch.Tensor, context: AdvantageContext) -> torch.Tensor:
    """1 for the best return of the group, -1 for the others (a test estimator)."""
    CALLS.append({"shape": tuple(returns.shape), "turns": len(context.tree), "team": context.team_returns})
    best = returns.nan_to_num(float("-inf")).amax(dim=-1, keepdim=True)
    return torch.where(returns == best, 1.0, -1.0)


def _trainer(model_dir: str, tmp_path, mode: str, num_turns: int = 1, episodes: int = 4) -> MAGRPOTrainer:
    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, num_turns=num_turns, num_generations=8,
        per_device_train_batch_size=8 * episodes, max_completion_length=4, learning_rate=3e-3,
        lr_scheduler_type="constant", max_steps=1, logging_steps=1, report_to="none", save_strategy="no",
        gradient_checkpointing=False, temperature=1.0, disable_tqdm=True, seed=0, advantage_mode=mode,
    )
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5),
                         env=TargetSumEnv(2, num_turns=num_turns), args=args,
                         train_dataset=Dataset.from_dict({"target": [TARGET] * 32}))


def test_a_user_estimator_registered_by_the_decorator_drives_training(target_model_dir, tmp_path):
    CALLS.clear()
    trainer = _trainer(target_model_dir, tmp_path, "test_training_best_only")
    before = {k: v.clone() for k, v in trainer.model.state_dict().items() if "lora" in k or "weight" in k}
    trainer.train()
    turn = trainer.last_rollout.turns[0]
    returns = turn.agent_returns  # (4 episodes, 2 agents, 8)
    assert float(returns.std()) > 0  # the toy policy's samples differ, so the check is not vacuous
    expected = torch.where(returns == returns.amax(dim=-1, keepdim=True), 1.0, -1.0)
    torch.testing.assert_close(turn.advantages, expected)
    for a in range(2):  # what each agent's loss was weighted with
        torch.testing.assert_close(trainer.last_advantages[a].cpu(), expected[:, a, :].reshape(-1))
    # called by the trainer once per turn, with the rollout's context (the turn's team returns, every turn)
    assert CALLS and CALLS[-1]["shape"] == (4, 2, 8) and CALLS[-1]["turns"] == 1
    torch.testing.assert_close(CALLS[-1]["team"], turn.returns.reshape(-1))  # pooled over the (one) process
    assert trainer.state.global_step == 1
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items() if k in before)


@pytest.mark.parametrize("mode", ["agent_turn", "agent_norm"])
def test_each_multi_agent_estimator_trains_a_step(target_model_dir, tmp_path, mode):
    trainer = _trainer(target_model_dir, tmp_path, mode, num_turns=2, episodes=2)
    trainer.train()
    assert trainer.state.global_step == 1
    turns = trainer.last_rollout.turns
    assert [t.turn for t in turns] == [1, 2]
    tree = tuple((torch.tensor([node.row_index for node in t.nodes]), t.agent_returns) for t in turns)
    for t, (rows, _) in zip(turns, tree):
        assert torch.isfinite(t.advantages).all()
        if mode == "agent_turn":  # without `local_reward_funcs`: the group std advantage
            returns = t.agent_returns
            centered = returns - returns.mean(dim=-1, keepdim=True)
            expected = torch.nan_to_num(centered / (returns.std(dim=-1, keepdim=True) + 1e-4), nan=0.0)
        else:  # each agent's statistics over its samples of the episode's whole tree (both turns)
            expected = agent_norm_advantages(t.agent_returns, AdvantageContext(rows=rows, tree=tree))
        torch.testing.assert_close(t.advantages, expected)
    assert all(torch.isfinite(adv).all() for adv in trainer.last_advantages)
    assert any(float(t.agent_returns.std()) > 0 for t in turns)  # not a vacuous all-zero check
