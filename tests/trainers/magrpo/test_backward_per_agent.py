"""`MAGRPOConfig.backward_per_agent`: a forward, loss and backward per agent gives the gradient of the summed loss.

Each case trains the same team twice from the same seed, once with a backward per agent (the default) and once with
the summed loss and one backward (`backward_per_agent=False`, `Trainer.training_step`), and compares the gradients
the optimizer gets at every step, the logged losses and metrics, and the final weights. The settings that could
couple the agents' losses are on: a reference KL (`beta`), the `top_entropy_quantile` token mask, an entropy bonus
(fixed and adaptive), `dapo`'s step-wide normaliser, gradient accumulation, `num_iterations=2` (old log-probs),
frozen agents and gradient checkpointing. A forward spy shows which way each step went. (Two processes under DDP:
`tests/trainers/test_accelerate.py`.)
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from helpers import spread_reward
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv

warnings.filterwarnings("ignore")
LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def train(model_dir: str, tmp_path, capture_cls: type, cls: type = MAGRPOTrainer, peft_config: Any = None,
          num_agents: int = 2, **overrides) -> tuple[MAGRPOTrainer, Any, list[int]]:
    """Train; returns the trainer, its gradients (a `capture_cls`, conftest's `GradientCapture`) and, per forward
    of the team, how many agents it ran."""
    kwargs = dict(
        output_dir=str(tmp_path / f"out-{overrides.get('backward_per_agent', True)}"), num_agents=num_agents,
        num_generations=4, per_device_train_batch_size=8, max_completion_length=4, learning_rate=1e-2,
        max_steps=2, logging_steps=1, report_to="none", save_strategy="no", gradient_checkpointing=False,
        disable_tqdm=True, seed=0, max_grad_norm=0.0,
    )
    kwargs.update(overrides)
    capture = capture_cls()
    trainer = cls(model=model_dir, reward_funcs=spread_reward, env=TargetSumEnv(num_agents),
                  args=MAGRPOConfig(**kwargs), train_dataset=Dataset.from_dict({"target": [10] * 32}),
                  peft_config=peft_config, callbacks=[capture])
    capture.team = trainer.team
    agents_per_forward: list[int] = []
    forward = trainer.team.forward

    def spy(batches, *args, **kwargs):
        if torch.is_grad_enabled():  # the training forwards (not the no-grad old/reference ones)
            agents_per_forward.append(sum(b is not None for b in batches))
        return forward(batches, *args, **kwargs)

    trainer.team.forward = spy
    trainer.train()
    return trainer, capture, agents_per_forward


def logged(trainer: MAGRPOTrainer) -> list[dict[str, float]]:
    return [{k: v for k, v in h.items() if k not in ("grad_norm", "tokens_per_second") and "runtime" not in k
             and "per_second" not in k} for h in trainer.state.log_history]


def assert_same_training(per_agent: tuple, summed: tuple, trained_agents: int, same_gradients: Any,
                         steps: int = 2) -> None:
    (ours, our_capture, our_forwards), (theirs, their_capture, their_forwards) = per_agent, summed
    # the way each step went: one forward per trained agent with one agent each, or one forward of all of them
    assert our_forwards and set(our_forwards) == {1}
    assert set(their_forwards) == {trained_agents} and len(our_forwards) == trained_agents * len(their_forwards)
    assert len(our_capture.grads) == len(their_capture.grads) == steps
    same_gradients(our_capture.grads, their_capture.grads)
    for step, reference in enumerate(their_capture.grads):
        largest = max(float(g.abs().max()) for g in reference.values() if g is not None)
        assert largest > 1e-4, f"step {step}: no gradient to compare"
    # the same logged losses and metrics (the loss is the sum over agents, as before)
    for mine, reference in zip(logged(ours), logged(theirs)):
        assert mine.keys() == reference.keys()
        for key, value in reference.items():
            assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-7, nan_ok=True), key
    for (name, p), q in zip(ours.team.named_parameters(), theirs.team.parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("team_mode", "num_agents", "settings"),
    [
        ("adapters", 3, dict(beta=0.04, top_entropy_quantile=0.5, entropy_coef=0.05, loss_type="dapo",
                             gradient_accumulation_steps=2, per_device_train_batch_size=4)),
        ("models", 2, dict(beta=0.04, use_adaptive_entropy=True, entropy_coef=0.1, entropy_target=50.0,
                           loss_type="grpo", num_iterations=2, top_entropy_quantile=0.8)),
        ("adapters", 3, dict(frozen_agents=[1], gradient_checkpointing=True, beta=0.02, loss_type="bnpo")),
    ],
    ids=["adapters-kl-quantile-bonus-dapo-ga2", "models-adaptive-mu2", "adapters-frozen-checkpointing"],
)
def test_backward_per_agent_gives_the_summed_loss_gradient(target_model_dir, tmp_path, team_mode, num_agents, settings,
                                                           assert_same_gradients, gradient_capture):
    peft = LORA if team_mode == "adapters" else None
    runs = [train(target_model_dir, tmp_path, gradient_capture, peft_config=peft, num_agents=num_agents,
                  team_mode=team_mode, backward_per_agent=flag, **settings) for flag in (True, False)]
    trained = num_agents - len(settings.get("frozen_agents", []))
    assert_same_training(*runs, trained_agents=trained, same_gradients=assert_same_gradients)


class NonFiniteAgentOne(MAGRPOTrainer):
    """Agent 1's loss is NaN in every micro-step: it is skipped (and counted) on both ways."""

    def compute_agent_loss(self, agent_index, logps, inputs):  # noqa: ANN001, ANN201
        loss, kl, clipped = super().compute_agent_loss(agent_index, logps, inputs)
        return (loss * math.nan if agent_index == 1 else loss), kl, clipped


def test_a_non_finite_agent_loss_is_skipped_alike(target_model_dir, tmp_path, assert_same_gradients,
                                                  gradient_capture):
    runs = [train(target_model_dir, tmp_path, gradient_capture, cls=NonFiniteAgentOne, backward_per_agent=flag,
                  max_nonfinite=100) for flag in (True, False)]
    assert_same_training(*runs, trained_agents=2, same_gradients=assert_same_gradients)
    grads = runs[0][1].grads[0]
    assert all(g is None for name, g in grads.items() if name.startswith("models.1."))
    assert any(g is not None and g.abs().max() > 0 for name, g in grads.items() if name.startswith("models.0."))
    assert [h["nonfinite/loss"] for h in runs[0][0].state.log_history if "nonfinite/loss" in h] == [1.0, 1.0]


class HalvedLoss(MAGRPOTrainer):
    """A `compute_loss` override: the trainer keeps the summed loss and one backward, so the override acts."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
        return 0.5 * super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def test_a_compute_loss_override_keeps_one_backward(target_model_dir, tmp_path, gradient_capture):
    _, halved, forwards = train(target_model_dir, tmp_path, gradient_capture, cls=HalvedLoss, max_steps=1)
    _, default, _ = train(target_model_dir, tmp_path, gradient_capture, max_steps=1, backward_per_agent=False)
    assert forwards == [2]  # one forward of both agents: `Trainer.training_step` over the override
    for name, grad in default.grads[0].items():
        torch.testing.assert_close(halved.grads[0][name], 0.5 * grad, rtol=1e-5, atol=1e-8, msg=name)
