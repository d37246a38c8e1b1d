"""`MultiAgentPPOConfig.frozen_agents`: a frozen agent plays and is scored, but its policy and value model never move.

The "agents trained alone" arm of MAPoRL (each agent trained with its partner fixed, then paired) rests on it: after
training, every weight of the frozen agent's policy (its model or LoRA adapter, every turn's with
`policy_sharing="agent_turn"`) and of its value model is bit-identical to before and never got a gradient, while
the trained agent's moved; both agents' rewards are still logged, and the trained agent's rollout targets are the
ones it gets without a frozen partner. Settings that share a frozen agent's weights with a trained one are refused.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from trl_marl import AgentTeam, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv

warnings.filterwarnings("ignore")
LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def spread_reward(prompts: Any, completions: list[str], **kwargs: Any) -> list[float]:
    """A reward that tells almost any two responses apart, so that every update has a policy gradient."""
    return [float(sum(map(ord, str(c))) % 7) for c in completions]


def config(tmp_path: Path, **overrides: Any) -> MultiAgentPPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_turns=2, per_device_train_batch_size=4,
        num_ppo_epochs=1, total_episodes=8, response_length=4, stop_token="eos", learning_rate=1e-2,
        report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0, disable_tqdm=True, seed=0,
        temperature=1.0, kl_coef=0.05,
    )
    kwargs.update(overrides)
    return MultiAgentPPOConfig(**kwargs)


def trainer_for(model_dir: str, tmp_path: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    args = config(tmp_path, **overrides)
    return MultiAgentPPOTrainer(args=args, model=model_dir, env=TargetSumEnv(2, num_turns=2),
                                reward_funcs=spread_reward, train_dataset=Dataset.from_dict({"target": [10] * 16}),
                                peft_config=LORA if args.team_mode == "adapters" else None)


def slot_parameters(trainer: MultiAgentPPOTrainer, slot: int) -> dict[str, torch.nn.Parameter]:
    """The weights of policy slot `slot` (its own model, or its LoRA adapter) and of its value model."""
    team = trainer.team
    adapter = team.agent_adapter[slot]
    model_prefix = f"team.models.{team.agent_model[slot]}."
    return {name: p for name, p in trainer.wrapper.named_parameters()
            if (name.startswith(model_prefix) and (adapter is None or f".{adapter}." in name))
            or name.startswith(f"value_models.{slot}.")}


class GradientSpy:
    """Records, before each optimizer step, which parameters hold a gradient."""

    def __init__(self, trainer: MultiAgentPPOTrainer) -> None:
        self.with_grad: set[str] = set()
        self.optimized: set[int] = set()
        self.trainer = trainer
        create = trainer.create_optimizer_and_scheduler

        def create_and_spy(num_training_steps: int) -> None:
            create(num_training_steps)
            self.optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
            trainer.optimizer.register_step_pre_hook(self.record)

        trainer.create_optimizer_and_scheduler = create_and_spy

    def record(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.with_grad |= {name for name, p in self.trainer.wrapper.named_parameters() if p.grad is not None}


# (team_mode, policy_sharing, the frozen agent's policy slots)
CASES = {
    "models": ("models", "agent", [1]),
    "adapters": ("adapters", "agent", [1]),
    "adapters-agent_turn": ("adapters", "agent_turn", [1, 3]),  # agent 1's policies of turn 1 and turn 2
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_frozen_agent_keeps_its_policy_and_value_model(target_model_dir: str, tmp_path: Path, case: str) -> None:
    team_mode, sharing, frozen_slots = CASES[case]
    trainer = trainer_for(target_model_dir, tmp_path, team_mode=team_mode, policy_sharing=sharing, frozen_agents=[1])
    spy = GradientSpy(trainer)
    slots = range(trainer.team.num_agents)
    before = {s: {n: p.detach().clone() for n, p in slot_parameters(trainer, s).items()} for s in slots}
    assert all(before[s] for s in slots)
    trainer.train()
    assert trainer.state.global_step == 2
    for s in slots:
        after = slot_parameters(trainer, s)
        policy = [n for n in after if n.startswith("team.")]
        value = [n for n in after if n.startswith("value_models.")]
        assert policy and value
        if s in frozen_slots:
            assert all(torch.equal(after[n], before[s][n]) for n in after), f"slot {s} moved"
            assert not spy.with_grad & after.keys(), f"slot {s} got a gradient"
            assert not spy.optimized & {id(p) for p in after.values()}, f"slot {s} is in the optimizer"
        else:
            assert any(not torch.equal(after[n], before[s][n]) for n in policy), f"slot {s}'s policy did not learn"
            assert any(not torch.equal(after[n], before[s][n]) for n in value), f"slot {s}'s critic did not learn"
    updates = [h for h in trainer.state.log_history if "objective/scores" in h]
    assert len(updates) == 2
    for h in updates:  # both agents act and are scored; only agent 0 has losses
        assert {"agent_0/reward", "agent_1/reward", "agent_0/kl", "agent_1/kl"} <= h.keys()
        losses = {k for k in h if "/loss/" in k}
        if sharing == "agent":
            assert losses == {"agent_0/loss/policy_avg", "agent_0/loss/value_avg"}
        else:
            assert losses == {f"agent_0/turn_{t}/loss/{k}" for t in (1, 2) for k in ("policy_avg", "value_avg")}


def test_the_trained_agents_targets_do_not_depend_on_a_frozen_partner(target_model_dir: str, tmp_path: Path) -> None:
    rows = [{"target": 10}] * 4
    rollouts = []
    for frozen in ([], [1]):
        trainer = trainer_for(target_model_dir, tmp_path, team_mode="models", frozen_agents=frozen)
        torch.manual_seed(7)
        rollouts.append(trainer.rollout(rows))
    alone, together = rollouts[1], rollouts[0]
    for slot in (0, 1):  # the same episodes and scores for both agents
        assert alone[slot].texts == together[slot].texts
        assert torch.equal(alone[slot].scores, together[slot].scores)
    for field in ("logprobs", "values", "advantages", "returns"):  # the trained agent's targets, bit for bit
        assert torch.equal(getattr(alone[0], field), getattr(together[0], field)), field
    assert alone[0].advantages.abs().sum() > 0
    # the frozen agent's value model runs without gradients: its values may round differently (measured: 2e-8)
    torch.testing.assert_close(alone[1].values, together[1].values, rtol=0, atol=1e-6)


@pytest.mark.parametrize(("overrides", "message"), [
    (dict(frozen_agents=[2]), r"`frozen_agents` \[2\] are not agents of a team of 2"),
    (dict(frozen_agents=[-1]), r"`frozen_agents` \[-1\] are not agents of a team of 2"),
    (dict(frozen_agents=[0, 1]), "`frozen_agents` freezes every agent"),
    (dict(num_agents=1, num_turns=1, frozen_agents=[0]), "`frozen_agents` freezes every agent"),
    (dict(frozen_agents=[1], policy_sharing="shared"), "`frozen_agents` cannot freeze an agent under "
                                                       "policy_sharing='shared'"),
    (dict(frozen_agents=[1], team_mode="shared"), "`frozen_agents` cannot freeze an agent under team_mode='shared'"),
    (dict(frozen_agents=[0], critic="centralized"), "`frozen_agents` cannot freeze an agent under "
                                                    "critic='centralized'"),
])
def test_frozen_agents_config_errors(tmp_path: Path, overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        config(tmp_path, **overrides)
    assert str(raised.value).count("\n") == 0  # one message, on one line


def test_a_shared_team_cannot_freeze_an_agent(target_model_dir: str, tmp_path: Path) -> None:
    team = AgentTeam.build(target_model_dir, 2, mode="shared")
    with pytest.raises(ValueError, match=r"`frozen_agents=\[1\]` cannot freeze an agent of a 'shared' team"):
        MultiAgentPPOTrainer(args=config(tmp_path, frozen_agents=[1]), model=team, env=TargetSumEnv(2, num_turns=2),
                             reward_funcs=spread_reward, train_dataset=Dataset.from_dict({"target": [10] * 16}))


def test_no_frozen_agent_by_default(tmp_path: Path) -> None:
    assert config(tmp_path).frozen_agents == []
