"""`MAGRPOTrainer(local_reward_funcs=...)`: per-agent local rewards reach AT-GRPO's `"agent_turn"` in training.

Each agent's local reward is scored on its own completion, backed up through the tree like the team reward, and
mixed as alpha * R^team + R^loc (`team_reward_weight`) by `"agent_turn"`; an estimator that would drop it refuses
it, before any step.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.core import AdvantageContext, std_advantages
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward

warnings.filterwarnings("ignore")
TARGET = 10


def length_reward(prompts, completions, agent_index, **kwargs) -> list[float]:
    """A local reward: a quarter of the length of the agent's own completion."""
    return [len(c) / 4 for c in completions]


def own_number(prompts, completions, **kwargs) -> list[float]:
    """A local reward: the integer the agent wrote, over 10 (-1 when it wrote none)."""
    return [int(c.strip()) / 10 if c.strip().isdigit() else -1.0 for c in completions]


def constant_team(prompts, completions, **kwargs) -> list[float]:
    return [1.0] * len(completions)


def _args(tmp_path, **overrides) -> MAGRPOConfig:
    settings = dict(output_dir=str(tmp_path / "out"), num_agents=2, num_turns=1, num_generations=4,
                    per_device_train_batch_size=8, max_completion_length=4, learning_rate=3e-3,
                    lr_scheduler_type="constant", max_steps=1, logging_steps=1, report_to="none", save_strategy="no",
                    gradient_checkpointing=False, temperature=1.0, disable_tqdm=True, seed=0)
    settings.update(overrides)
    return MAGRPOConfig(**settings)


def _trainer(model_dir: str, args: MAGRPOConfig, reward=None, **kwargs) -> MAGRPOTrainer:
    return MAGRPOTrainer(model=model_dir, reward_funcs=reward or TargetSumReward(0.5),
                         env=TargetSumEnv(2, num_turns=args.num_turns), args=args,
                         train_dataset=Dataset.from_dict({"target": [TARGET] * 16}), **kwargs)


def test_agent_turn_trains_on_each_agents_local_reward(target_model_dir, tmp_path):
    # Two turns, G = 4 aligned, gamma = 1, alpha = .5: agent a's local reward of a sample is len(its completion) / 4,
    # its local return at turn 1 that plus the mean local reward of the child node's samples, and its advantage
    # (R~ - mean R~) / (std R~ + 1e-4) over its group, R~ = .5 * R^team + R^loc.
    args = _args(tmp_path, num_turns=2, advantage_mode="agent_turn", team_reward_weight=0.5)
    trainer = _trainer(target_model_dir, args, local_reward_funcs=[length_reward])
    trainer.train()
    first, second = trainer.last_rollout.turns
    G = 4
    for t in (first, second):  # aligned: joint action j of node k holds sample k * G + j of every agent
        expected = torch.tensor([[[len(t.completions[a][k * G + j]) / 4 for a in range(2)] for j in range(G)]
                                 for k in range(len(t.nodes))])
        torch.testing.assert_close(t.local_rewards, expected)
    torch.testing.assert_close(second.local_returns, second.local_rewards.permute(0, 2, 1))
    child_value = torch.zeros(len(first.nodes), 2, G)
    for (k, j), c in first.children.items():
        child_value[k, :, j] = second.local_rewards[c].mean(dim=0)
    torch.testing.assert_close(first.local_returns, first.local_rewards.permute(0, 2, 1) + child_value)
    assert float(first.local_returns.std()) > 0  # the toy's completions differ in length: not a vacuous check
    for t in (first, second):
        mixed = 0.5 * t.agent_returns + t.local_returns
        centered = mixed - mixed.mean(dim=-1, keepdim=True)
        expected = torch.nan_to_num(centered / (mixed.std(dim=-1, keepdim=True) + 1e-4), nan=0.0)
        torch.testing.assert_close(t.advantages, expected)
    assert not torch.allclose(first.advantages, std_advantages(first.agent_returns, AdvantageContext()))
    for a in range(2):  # what each agent's loss was weighted with: turn 1's samples, then turn 2's
        torch.testing.assert_close(trainer.last_advantages[a].cpu(),
                                   torch.cat([t.advantages[:, a, :].reshape(-1) for t in (first, second)]))
    logs = trainer.state.log_history[0]
    for a in range(2):
        turn1 = float(first.local_rewards[:, :, a].mean())
        assert logs[f"agent_{a}/local_reward"] == pytest.approx(turn1)
        assert logs[f"agent_{a}/turn_2/local_reward"] == pytest.approx(float(second.local_rewards[:, :, a].mean()))
        assert logs[f"agent_{a}/local_rewards/length_reward/mean"] == pytest.approx(turn1)


def test_a_constant_team_reward_teaches_nothing_but_the_local_reward_does(target_model_dir, tmp_path):
    # every joint action gets team reward 1: "std" gives every advantage 0 (no update); "agent_turn" with a local
    # reward for agent 1 alone (one list per agent) moves agent 1's advantages only.
    plain = _trainer(target_model_dir, _args(tmp_path, advantage_mode="std"), reward=constant_team)
    before = {k: v.clone() for k, v in plain.model.state_dict().items()}
    plain.train()
    assert all(not adv.any() for adv in plain.last_advantages)
    assert all(torch.equal(before[k], v) for k, v in plain.model.state_dict().items())
    local = _trainer(target_model_dir, _args(tmp_path, advantage_mode="agent_turn", local_reward_weights=[2.0]),
                     reward=constant_team, local_reward_funcs=[[], [own_number]])
    local.train()
    turn = local.last_rollout.turns[0]
    torch.testing.assert_close(turn.local_rewards[:, :, 0], torch.zeros(2, 4))  # agent 0 has no local reward
    torch.testing.assert_close(turn.local_returns[:, 1],  # weight 2 times own_number of each completion
                               torch.tensor([[2 * own_number(None, [turn.completions[1][k * 4 + g]])[0]
                                              for g in range(4)] for k in range(2)]))
    assert not local.last_advantages[0].any() and local.last_advantages[1].abs().sum() > 0
    logs = local.state.log_history[0]
    assert logs["agent_1/local_reward"] == pytest.approx(float(turn.local_rewards[:, :, 1].mean()))
    assert "agent_0/local_reward" not in logs  # logged for the agents that have a local reward
    assert any(not torch.equal(before[k], v) for k, v in local.model.state_dict().items())


class OwnAdvantages(MAGRPOTrainer):
    def compute_advantages(self, rollout):
        return [t.local_returns - t.local_returns.mean(dim=-1, keepdim=True) for t in rollout.turns]


@pytest.mark.parametrize(("overrides", "kwargs", "error"), [
    ({}, {"local_reward_funcs": [length_reward]},
     r"`local_reward_funcs` are given, but `advantage_mode='mean'` does not read local rewards.*"
     r"advantage_mode='agent_turn'"),
    ({"advantage_mode": "agent_norm"}, {"local_reward_funcs": [length_reward]}, "`advantage_mode='agent_norm'`"),
    ({"advantage_mode": "agent_turn", "local_reward_weights": [1.0]}, {},
     r"`local_reward_weights` is set but there is no local reward: pass the functions as "
     r"`MAGRPOTrainer\(local_reward_funcs=...\)`"),
    ({"advantage_mode": "agent_turn", "team_reward_weight": 2.0}, {},
     r"`team_reward_weight=2.0` weighs the team reward against local rewards, but there are none"),
    ({"advantage_mode": "agent_turn", "local_reward_weights": [1.0, 2.0]}, {"local_reward_funcs": [length_reward]},
     r"`MAGRPOConfig.local_reward_weights` has 2 entries but `local_reward_funcs` has 1 functions"),
    ({"advantage_mode": "agent_turn"}, {"local_reward_funcs": [[length_reward]]},
     r"`local_reward_funcs` has 1 lists for a team of 2 agents"),
])
def test_bad_local_reward_settings_fail_before_any_model_loads(tmp_path, overrides, kwargs, error):
    with pytest.raises(ValueError, match=error):
        _trainer("no-such-model-is-loaded", _args(tmp_path, **overrides), **kwargs)


@pytest.mark.parametrize(("overrides", "error"), [
    ({"team_reward_weight": 0.5}, r"`team_reward_weight=0.5` weighs local rewards, which `advantage_mode='std'`"),
    ({"local_reward_weights": [1.0]}, r"`local_reward_weights=\[1.0\]` weighs local rewards.*'agent_turn'"),
    ({"advantage_mode": "agent_turn", "team_reward_weight": -1.0}, r"`team_reward_weight` .* must be a finite"),
    ({"advantage_mode": "agent_turn", "team_reward_weight": float("inf")}, r"`team_reward_weight` .* finite"),
])
def test_the_config_refuses_local_reward_fields_nothing_reads(tmp_path, overrides, error):
    with pytest.raises(ValueError, match=error):
        _args(tmp_path, **{"advantage_mode": "std", **overrides})


def test_a_subclass_that_computes_its_own_advantages_may_read_local_rewards(target_model_dir, tmp_path):
    trainer = OwnAdvantages(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=_args(tmp_path), train_dataset=Dataset.from_dict({"target": [TARGET] * 16}),
                            local_reward_funcs=[own_number])
    trainer.train()
    turn = trainer.last_rollout.turns[0]
    torch.testing.assert_close(turn.advantages, turn.local_returns - turn.local_returns.mean(dim=-1, keepdim=True))
    assert turn.advantages.abs().sum() > 0


def test_the_extending_guide_local_reward_example_runs(tmp_path, monkeypatch):
    # docs/extending.md's "Per-agent local rewards" block, as written, then one step
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "extending.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "local_reward_funcs=" in b)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block, "extending.md", "exec"), namespace)  # noqa: S102 - the project's own documentation
    trainer = namespace["trainer"]
    trainer.train()
    turn = trainer.last_rollout.turns[0]
    expected = [[[float(turn.completions[a][k * 4 + j].strip().isdigit()) for a in range(2)] for j in range(4)]
                for k in range(2)]
    torch.testing.assert_close(turn.local_rewards, torch.tensor(expected))
    mixed = 2.0 * turn.agent_returns + turn.local_returns
    centered = mixed - mixed.mean(dim=-1, keepdim=True)
    torch.testing.assert_close(turn.advantages,
                               torch.nan_to_num(centered / (mixed.std(dim=-1, keepdim=True) + 1e-4), nan=0.0))
    assert "agent_1/local_rewards/wrote_a_number/mean" in trainer.state.log_history[0]
