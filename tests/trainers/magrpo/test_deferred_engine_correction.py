"""The engine importance-sampling correction taken from the training forward (issue 50).

When every micro-batch of a generation is trained within one optimizer step (`num_iterations=1`, aligned
accumulation), the policy at sampling time *is* the policy of the training forward: the correction's denominator is
that forward's log-probs, detached, and no forward of its own is run. What must hold: no extra forward in that case
(counted), one in the others; the ratio and the logged metrics are those the extra forward would give (up to float
noise), on both the summed-loss and the per-agent backward paths.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.core import engine_importance_sampling_ratio
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.team.generation import (
    EngineBackend,
    GenerationSettings,
    TransformersBackend,
    register_generation_backend,
)

warnings.filterwarnings("ignore")


def config(tmp_path, **overrides: Any) -> MAGRPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=16,
        max_completion_length=4, learning_rate=1e-2, lr_scheduler_type="constant", max_steps=4, logging_steps=1,
        report_to="none", save_strategy="no", gradient_checkpointing=False, temperature=1.0, disable_tqdm=True,
        seed=0, max_staleness=1,
    )
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


class Checked(MAGRPOTrainer):
    """Counts the old-policy forwards and checks each agent's ratio against one taken by an extra forward."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.old_policy_forwards = 0
        self.ratio_gaps: list[float] = []
        self.logps_gaps: list[float] = []

    def _inference_logps(self, batches, reference=False):
        if not reference:
            self.old_policy_forwards += 1
        return super()._inference_logps(batches, reference=reference)

    def compute_agent_loss(self, agent_index, logps, inputs):
        ratio = inputs["importance_sampling_ratio"][agent_index]
        if ratio is not None and inputs["old_logps"] is None:
            batch = inputs["batches"][agent_index]
            with torch.no_grad():
                scored = self.team.policy_logps(agent_index, batch)
            args = self.args
            expected = engine_importance_sampling_ratio(
                scored.float(), inputs["sampling_logps"][agent_index], batch.loss_mask,
                args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_min,
                args.vllm_importance_sampling_clip_max)
            self.ratio_gaps.append((ratio - expected).abs().max().item())
            self.logps_gaps.append(((logps.detach() - scored) * batch.loss_mask).abs().max().item())
        return super().compute_agent_loss(agent_index, logps, inputs)


def build(model_dir: str, args: MAGRPOConfig) -> Checked:
    rows = Dataset.from_dict({"target": [10] * 64})
    return Checked(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                   train_dataset=rows)


@pytest.mark.parametrize("backward_per_agent", [True, False])
def test_aligned_correction_takes_the_training_forward(target_model_dir, tmp_path, backward_per_agent):
    trainer = build(target_model_dir, config(tmp_path, backward_per_agent=backward_per_agent))
    trainer.train()
    assert trainer.old_policy_forwards == 0
    # every step's ratio, for each agent, is the one an extra forward gives (and the weights moved: a real ratio)
    assert len(trainer.ratio_gaps) == 2 * trainer.state.global_step == 8
    assert max(trainer.logps_gaps) < 1e-5
    assert max(trainer.ratio_gaps) < 1e-4
    logged = [h for h in trainer.state.log_history if "sampling/importance_sampling_ratio/min" in h]
    assert len(logged) == 4
    for h in logged:  # pooled and per agent, as the extra-forward path records them
        for name in ("sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                     "sampling/importance_sampling_ratio/mean", "sampling/importance_sampling_ratio/max"):
            assert name in h and f"agent_0/{name}" in h and f"agent_1/{name}" in h
        assert h["sampling/importance_sampling_ratio/min"] <= h["sampling/importance_sampling_ratio/max"]
    stale = [h["sampling/sampling_logp_difference/max"] for h in logged]
    assert max(stale) > 1e-3  # older versions sampled some rollouts: the correction is not trivially 1


class ConstantEngine(EngineBackend):
    """A user's engine: the team's own decoding, with a log-probability of -0.1 per sampled token."""

    def generate_with_logprobs(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: Any,
                               logprobs: bool | None = None) -> tuple[list, list | None]:
        rows = TransformersBackend().generate(team, prompt_ids, generation_config).completion_ids
        return rows, [[[-0.1] * len(row) for row in agent] for agent in rows]


def _engine(settings: GenerationSettings, team: Any) -> ConstantEngine:
    engine = ConstantEngine()
    engine.sampling_logprobs = True
    return engine


register_generation_backend("deferred-correction-engine", _engine)


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_an_engine_correction_takes_an_extra_forward_only_for_reused_batches(target_model_dir, tmp_path,
                                                                           num_iterations):
    # synchronous, with an engine of its own (vLLM's case): one update per generation needs no extra forward; two
    # updates on one generation (one micro-step per optimizer step) move the policy between them, so the
    # denominator must be the policy at sampling time, scored by a forward of its own
    args = config(tmp_path, max_staleness=0, generation_backend="deferred-correction-engine",
                  num_iterations=num_iterations, max_steps=4)
    trainer = build(target_model_dir, args)
    trainer.train()
    assert trainer.old_policy_forwards == (0 if num_iterations == 1 else 2)  # (one per generation)
    assert len(trainer.ratio_gaps) == (8 if num_iterations == 1 else 0)
    if trainer.ratio_gaps:
        assert max(trainer.ratio_gaps) < 1e-4
    logged = sum("sampling/importance_sampling_ratio/min" in h for h in trainer.state.log_history)
    assert logged == 4 // num_iterations  # recorded once per generation, either way
