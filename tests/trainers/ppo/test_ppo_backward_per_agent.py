"""`MultiAgentPPOConfig.backward_per_agent`: a forward, loss and backward per policy slot gives the gradient of the
summed loss.

Each case trains the same team twice from the same seed, once with a backward per policy slot (the default) and
once with the slots' summed loss and one backward (`backward_per_agent=False`), and compares the gradients the
optimizer gets at every step, the logged metrics (the `stats` of every micro-step) and the final weights. The cases
cover `models` and `adapters` teams, per-agent critics and the centralized critic (one value model that every slot's
backward reaches), `policy_sharing="agent_turn"` (a policy per (turn, agent)) and `"shared"`, `num_ppo_epochs=2`,
`num_mini_batches=2`, `gradient_accumulation_steps=2` (two micro-batches per mini-batch, too), a frozen agent and
gradient checkpointing. A forward spy shows which way each micro-step went. (Two processes under DDP:
`tests/trainers/test_accelerate.py`.)
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import set_seed

from trl_marl import AgentTeam, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv

warnings.filterwarnings("ignore")
LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def spread_reward(prompts, completions, **kwargs) -> list[float]:
    """A reward that tells almost any two responses apart (so that every micro-step has a policy gradient)."""
    return [float(sum(map(ord, str(c))) % 7) for c in completions]


class Recording(MultiAgentPPOTrainer):
    """Records the trained parameters' gradients right before each optimizer step, and per training forward of the
    policies and value models how many slots it ran."""

    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        super().create_optimizer_and_scheduler(num_training_steps)
        self.grads: list[dict[str, torch.Tensor | None]] = []
        self.slots_per_forward: list[int] = []
        self.initial = {name: p.detach().clone() for name, p in self.wrapper.named_parameters()}
        self.optimizer.register_step_pre_hook(self._record_gradients)
        forward = self.wrapper.forward

        def spy(batches, *args, **kwargs):
            if torch.is_grad_enabled():
                self.slots_per_forward.append(sum(b is not None for b in batches))
            return forward(batches, *args, **kwargs)

        self.wrapper.forward = spy

    def _record_gradients(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.grads.append({name: None if p.grad is None else p.grad.detach().clone()
                           for name, p in self.wrapper.named_parameters() if p.requires_grad})


def train(model_dir: str, tmp_path: Path, cls: type = Recording, frozen: tuple[int, ...] = (), num_agents: int = 2,
          num_turns: int = 2, **overrides: Any) -> Recording:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / f"out-{overrides.get('backward_per_agent', True)}"), num_agents=num_agents,
        num_turns=num_turns, per_device_train_batch_size=4, gradient_accumulation_steps=1, num_mini_batches=1,
        num_ppo_epochs=1, total_episodes=8, response_length=4, stop_token="eos", learning_rate=1e-2,
        report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0, disable_tqdm=True, seed=0,
        temperature=1.0, gradient_checkpointing=False, kl_coef=0.05,
    )
    kwargs.update(overrides)
    args = MultiAgentPPOConfig(**kwargs)
    peft = LORA if args.team_mode == "adapters" else None
    model: Any = model_dir
    if frozen:  # PPO trains the team it is given: a member frozen beforehand keeps its policy (its critic learns)
        set_seed(0)  # the same adapters in both runs (the trainer seeds only what it builds itself)
        model = AgentTeam.build(model_dir, num_agents, mode=args.team_mode, peft_config=peft)
        model.freeze_agents(frozen)
        peft = None
    trainer = cls(args=args, model=model, env=TargetSumEnv(num_agents, num_turns=num_turns),
                  reward_funcs=spread_reward, train_dataset=Dataset.from_dict({"target": [10] * 16}), peft_config=peft)
    trainer.train()
    return trainer


def logged(trainer: MultiAgentPPOTrainer) -> list[dict[str, float]]:
    return [{k: v for k, v in h.items() if "time" not in k and "per_second" not in k and "eps" != k}
            for h in trainer.state.log_history]


def assert_same_training(ours: Recording, theirs: Recording, slots: int, optimizer_steps: int,
                         same_gradients: Any) -> None:
    # the way each micro-step went: one forward per slot with one slot each, or one forward of every slot
    assert ours.slots_per_forward and set(ours.slots_per_forward) == {1}
    assert set(theirs.slots_per_forward) == {slots}
    assert len(ours.slots_per_forward) == slots * len(theirs.slots_per_forward)
    assert len(ours.grads) == len(theirs.grads) == optimizer_steps
    same_gradients(ours.grads, theirs.grads)
    for step, reference in enumerate(theirs.grads):
        for prefix in ("team.", "value_models."):  # policies and critics both got a gradient to compare
            largest = max(float(g.abs().max()) for n, g in reference.items() if g is not None and n.startswith(prefix))
            assert largest > 1e-5, f"step {step}: no {prefix} gradient to compare"
    # the same logged metrics: every micro-step's stats (losses, clip fractions, KL, entropy) and the rollout's
    for mine, reference in zip(logged(ours), logged(theirs), strict=True):
        assert mine.keys() == reference.keys()
        for key, value in reference.items():
            assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-7, nan_ok=True), key
    # the weights after the optimizer steps (lr 1e-2): Adam divides by the gradient's root mean square, so the
    # rounding of a gradient element near Adam's eps (a LoRA A matrix right after its B left zero) shows up larger
    for (name, p), q in zip(ours.wrapper.named_parameters(), theirs.wrapper.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-5, msg=name)


# (settings, policy slots, optimizer steps over the 2 updates of 8 episodes)
CASES = {
    # 2 epochs x 2 mini-batches x 1 micro-batch, an optimizer step every 2 micro-steps: 2 per update
    "models-per_agent-epochs2-minibatches2-ga2": (
        dict(team_mode="models", num_ppo_epochs=2, num_mini_batches=2, gradient_accumulation_steps=2,
             per_device_train_batch_size=2, total_episodes=8), 2, 4),
    # one critic for 3 agents; 2 micro-batches per mini-batch; every layer recomputed in the backward
    "adapters-centralized-Q-ga2-checkpointing": (
        dict(team_mode="adapters", num_agents=3, critic="centralized", critic_type="Q", gradient_checkpointing=True,
             gradient_accumulation_steps=2, per_device_train_batch_size=2), 3, 2),
    # a policy per (turn, agent): 4 slots, each with its own adapter and critic
    "adapters-agent_turn-per_agent": (dict(team_mode="adapters", policy_sharing="agent_turn"), 4, 2),
    # one policy and one critic for the whole team, reached by both slots' backwards
    "shared-policy": (dict(policy_sharing="shared", num_ppo_epochs=2), 2, 4),
    "models-centralized-V-one_turn": (dict(team_mode="models", critic="centralized", num_turns=1), 2, 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_backward_per_slot_gives_the_summed_loss_gradient(target_model_dir, tmp_path, case, assert_same_gradients):
    settings, slots, steps = CASES[case]
    runs = [train(target_model_dir, tmp_path, backward_per_agent=flag, **settings) for flag in (True, False)]
    same = assert_same_gradients
    if settings.get("policy_sharing") == "shared":
        # one policy serves every slot: each of its gradients is a sum over the slots, added up in another order by
        # each layout, so float32 rounding differs by a few units in the last place of the sum (measured on an AMD
        # EPYC with AVX2 kernels: 7.3e-7 absolute, 1.8e-5 relative, on 2 of 736 embedding elements)
        same = functools.partial(assert_same_gradients, rtol=1e-4, atol=1e-6)
    assert_same_training(*runs, slots=slots, optimizer_steps=steps, same_gradients=same)


@pytest.mark.parametrize("team_mode", ["models", "adapters"])
def test_a_frozen_agent_keeps_its_policy_and_trains_its_critic_alike(target_model_dir, tmp_path, team_mode,
                                                                     assert_same_gradients):
    runs = [train(target_model_dir, tmp_path, frozen=(1,), team_mode=team_mode, backward_per_agent=flag)
            for flag in (True, False)]
    assert_same_training(*runs, slots=2, optimizer_steps=2, same_gradients=assert_same_gradients)
    ours = runs[0]
    changed = {name: not torch.equal(p.detach(), ours.initial[name]) for name, p in ours.wrapper.named_parameters()}
    policy_1 = [n for n in changed if n.startswith("team.") and ("models.1." in n or "agent_1" in n)]
    assert policy_1 and not any(changed[n] for n in policy_1)  # agent 1 plays its initial policy throughout
    assert any(changed[n] for n in changed if n.startswith("team.") and n not in policy_1)  # agent 0 learns
    assert all(changed[n] for n in changed if n.startswith("value_models.1."))  # agent 1's critic learns


class SummedTwice(Recording):
    """A `_ppo_micro_step` override: the loop keeps the summed loss and one backward, so the override acts."""

    def _ppo_micro_step(self, model, rollouts, indices, pads, stats, where):  # noqa: ANN001, ANN202
        return 2.0 * super()._ppo_micro_step(model, rollouts, indices, pads, stats, where)


def test_a_micro_step_override_keeps_one_backward(target_model_dir, tmp_path):
    doubled = train(target_model_dir, tmp_path, cls=SummedTwice, total_episodes=4)
    default = train(target_model_dir, tmp_path, backward_per_agent=False, total_episodes=4)
    assert set(doubled.slots_per_forward) == {2}  # one forward of both slots, then one backward of the override
    for name, grad in default.grads[0].items():
        expected = None if grad is None else 2.0 * grad
        if expected is None:
            assert doubled.grads[0][name] is None, name
        else:
            torch.testing.assert_close(doubled.grads[0][name], expected, rtol=1e-5, atol=1e-8, msg=name)


def test_one_policy_slot_keeps_one_backward(target_model_dir, tmp_path, monkeypatch):
    # with one slot there is one forward and one backward either way: the loop keeps `_ppo_micro_step` (and DDP's
    # own reducer), as before; with two slots the default loop does not call it
    calls: list[int] = []
    original = MultiAgentPPOTrainer._ppo_micro_step

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN202
        calls.append(self.team.num_agents)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiAgentPPOTrainer, "_ppo_micro_step", counted)
    single = train(target_model_dir, tmp_path, num_agents=1, num_turns=1, total_episodes=4)
    assert calls == [1] and single.slots_per_forward == [1] and len(single.grads) == 1
    team = train(target_model_dir, tmp_path, total_episodes=4)
    assert calls == [1] and team.slots_per_forward == [1, 1]
