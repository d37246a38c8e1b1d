"""TRL's truncated importance-sampling correction of the vLLM engine / training model mismatch (Yao et al., 2025):
the ratio on hand-computed values for every mode, and the trainers weighting their loss by it."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from trl_marl.core import VLLM_IMPORTANCE_SAMPLING_MODES, engine_importance_sampling_ratio
from trl_marl.team.generation import EngineBackend, TransformersBackend

LN2, LN3 = math.log(2.0), math.log(3.0)
# row 0: d = [ln 2, ln 2, (pad)] -> token ratios [2, 2], sequence ratio 4
# row 1: d = [-ln 2, ln 3, 0]    -> token ratios [0.5, 3, 1], sequence ratio 1.5
OLD = torch.tensor([[LN2 - 1.0, LN2 - 2.0, 5.0], [-LN2 - 0.5, LN3 - 0.25, -0.75]])
SAMPLING = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.25, -0.75]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


@pytest.mark.parametrize(("mode", "clip_min", "clip_max", "expected"), [
    ("token_truncate", None, 2.5, [[2.0, 2.0, 1.0], [0.5, 2.5, 1.0]]),
    ("token_truncate", 0.8, 2.5, [[2.0, 2.0, 1.0], [0.8, 2.5, 1.0]]),
    ("token_mask", None, 2.5, [[2.0, 2.0, 1.0], [0.5, 0.0, 1.0]]),
    ("token_mask", 0.8, None, [[2.0, 2.0, 1.0], [0.0, 3.0, 1.0]]),
    ("sequence_truncate", None, 3.0, [[3.0], [1.5]]),
    ("sequence_truncate", 2.0, 5.0, [[4.0], [2.0]]),
    ("sequence_mask", None, 3.0, [[0.0], [1.5]]),
    ("sequence_mask", 2.0, None, [[4.0], [0.0]]),
])
def test_ratio_on_hand_values(mode: str, clip_min: float | None, clip_max: float | None,
                              expected: list[list[float]]) -> None:
    ratio = engine_importance_sampling_ratio(OLD, SAMPLING, MASK, mode, clip_min, clip_max)
    torch.testing.assert_close(ratio, torch.tensor(expected), rtol=1e-6, atol=1e-6)


def test_nan_engine_logprob_counts_as_no_mismatch_and_ratio_has_no_gradient() -> None:
    old = OLD.clone().requires_grad_(True)
    sampling = SAMPLING.clone()
    sampling[1, 0] = float("nan")  # a token the engine could not score: d = 0 there, as in TRL
    ratio = engine_importance_sampling_ratio(old, sampling, MASK, "token_truncate", None, 10.0)
    torch.testing.assert_close(ratio, torch.tensor([[2.0, 2.0, 1.0], [1.0, 3.0, 1.0]]))
    assert not ratio.requires_grad
    seq = engine_importance_sampling_ratio(old, sampling, MASK, "sequence_truncate", None, 10.0)
    torch.testing.assert_close(seq, torch.tensor([[4.0], [3.0]]))


def test_unknown_mode_is_refused() -> None:
    assert "sequence_mask" in VLLM_IMPORTANCE_SAMPLING_MODES
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        engine_importance_sampling_ratio(OLD, SAMPLING, MASK, "sequence")


# ---------------------------------------------------------------------------------------------------------------
# The trainers, with a fake engine: the team's own tokens, log-probs off the training model's by a known shift
# ---------------------------------------------------------------------------------------------------------------
class ShiftedEngine(EngineBackend):
    """A generation backend that samples with the team's own decoding and reports, as its log-probability of every
    token, the training model's minus `shift`: log pi_old - log pi_engine = shift on every completion token."""

    name = "shifted"

    def __init__(self, shift: float, logprobs: bool = True) -> None:
        self.shift = shift
        self.sampling_logprobs = logprobs
        self.calls = 0

    def generate_with_logprobs(self, team: Any, prompt_ids: list, config: Any,
                               logprobs: bool | None = None) -> tuple[list, list | None]:
        from trl_marl.team import AgentBatch, pad_left, pad_right

        self.calls += 1
        completions = TransformersBackend().generate(team, prompt_ids, config).completion_ids
        if not self.sampling_logprobs:
            return completions, None
        scores = []
        for a, rows in enumerate(completions):
            pad = team.tokenizers[a].pad_token_id
            batch = AgentBatch(*pad_left(prompt_ids[a], pad), *pad_right(rows, pad))
            with torch.no_grad():
                logps = team.policy_logps(a, batch)
            scores.append([(logps[i, : len(row)] - self.shift).tolist() for i, row in enumerate(rows)])
        return completions, scores


def make_trainer(model_dir: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, engine: ShiftedEngine | None,
                 **kwargs: Any) -> Any:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.trainers import base as trainer_base

    if engine is not None:  # what `build_generation_backend` would build for `use_vllm=True`, without vLLM
        monkeypatch.setattr(trainer_base, "build_generation_backend", lambda settings, team: engine)
    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_generations=2, per_device_train_batch_size=4,
                        max_completion_length=3, learning_rate=1e-3, max_steps=1, logging_steps=1, report_to=[],
                        save_strategy="no", disable_tqdm=True, seed=0, use_vllm=engine is not None, **kwargs)
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                         train_dataset=Dataset.from_dict({"target": [10] * 8}),
                         peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))


def micro_batch(trainer: Any) -> dict:
    rows = [{"target": 10}, {"target": 10}]
    trainer.model.train()
    return trainer._make_batches([rows], mode="train")[0]


def test_magrpo_weights_each_agents_token_loss_by_the_truncated_ratio(target_model_dir: str, tmp_path: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    shift = math.log(1.5)
    trainer = make_trainer(target_model_dir, tmp_path, monkeypatch, ShiftedEngine(shift),
                           vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=10.0)
    inputs = micro_batch(trainer)
    # num_iterations == 1: the training model at sampling time is the training forward's (no extra forward, unlike
    # TRL's); the ratio is taken there, and the metrics recorded once every agent's loss is
    assert inputs["old_logps"] is None and inputs["importance_sampling_ratio"] == [None, None]
    # advantages of one sign: a loss whose value is not ~0 (group-centred advantages sum to 0)
    inputs["advantages"] = [torch.linspace(0.5, 2.0, len(adv)) for adv in inputs["advantages"]]
    trainer.compute_loss(trainer.model, inputs)
    for a in range(2):
        mask = inputs["batches"][a].completion_mask.bool()
        ratio = inputs["importance_sampling_ratio"][a]
        torch.testing.assert_close(ratio[mask], torch.full((int(mask.sum()),), 1.5), rtol=1e-4, atol=1e-4)
        logps = trainer.team([b if i == a else None for i, b in enumerate(inputs["batches"])])[a][0]
        weighted, _, _ = trainer.compute_agent_loss(a, logps, inputs)
        plain = {k: v for k, v in inputs.items()
                 if k not in ("sampling_logps", "importance_sampling_ratio", "deferred_correction")}
        unweighted, _, _ = trainer.compute_agent_loss(a, logps, plain)
        assert abs(unweighted.item()) > 1e-4
        torch.testing.assert_close(weighted, 1.5 * unweighted, rtol=1e-4, atol=1e-7)
        params = [p for p in trainer.team.parameters() if p.requires_grad]
        grads = torch.autograd.grad(weighted, params, retain_graph=True, allow_unused=True)
        plain_grads = torch.autograd.grad(unweighted, params, allow_unused=True)
        pairs = [(g, h) for g, h in zip(grads, plain_grads) if h is not None]
        assert pairs and any(h.abs().max() > 0 for _, h in pairs)
        for g, h in pairs:  # the weight is a constant of the graph: the gradient scales with it too
            torch.testing.assert_close(g, 1.5 * h, rtol=1e-4, atol=1e-8)
    for name in ("importance_sampling_ratio/min", "importance_sampling_ratio/mean", "importance_sampling_ratio/max"):
        assert trainer._metrics["train"][f"sampling/{name}"][-1] == pytest.approx(1.5, abs=1e-4)
        assert trainer._metrics["train"][f"agent_1/sampling/{name}"][-1] == pytest.approx(1.5, abs=1e-4)
    assert trainer._metrics["train"]["sampling/sampling_logp_difference/mean"][-1] == pytest.approx(shift, abs=1e-4)
    assert trainer._metrics["train"]["sampling/sampling_logp_difference/max"][-1] == pytest.approx(shift, abs=1e-4)


def test_magrpo_sequence_mask_drops_sequences_past_the_cap(target_model_dir: str, tmp_path: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.5 nats per token: exp(0.5 * length) is 1.65, 2.72, 4.48 for 1, 2, 3 tokens; the cap 3 drops length 3
    trainer = make_trainer(target_model_dir, tmp_path, monkeypatch, ShiftedEngine(0.5))  # TRL's default mode and cap
    assert (trainer.args.vllm_importance_sampling_mode, trainer.args.vllm_importance_sampling_clip_max) == (
        "sequence_mask", 3.0)
    inputs = micro_batch(trainer)
    trainer.compute_loss(trainer.model, inputs)  # the ratios, from the training forward
    lengths = torch.cat([b.completion_mask.sum(1) for b in inputs["batches"]]).float()
    ratio = torch.cat([r.squeeze(1) for r in inputs["importance_sampling_ratio"]])
    expected = torch.where(torch.exp(0.5 * lengths) > 3.0, 0.0, torch.exp(0.5 * lengths))
    assert (lengths == 3).any() and (lengths < 3).any()
    torch.testing.assert_close(ratio, expected, rtol=1e-4, atol=1e-4)


def test_without_engine_logprobs_training_is_unchanged(target_model_dir: str, tmp_path: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for engine, kwargs in ((None, {}), (ShiftedEngine(0.5, logprobs=False), {}),
                           (ShiftedEngine(0.5), {"vllm_importance_sampling_correction": False})):
        trainer = make_trainer(target_model_dir, tmp_path, monkeypatch, engine, **kwargs)
        inputs = micro_batch(trainer)
        assert inputs["old_logps"] is None  # no extra forward: exactly today's path
        assert "importance_sampling_ratio" not in inputs and "sampling_logps" not in inputs
        assert not any(k.startswith("sampling/") for k in trainer._metrics["train"])


def test_magrpo_trains_with_the_correction_and_logs_trls_metrics(target_model_dir: str, tmp_path: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    engine = ShiftedEngine(0.1)
    trainer = make_trainer(target_model_dir, tmp_path, monkeypatch, engine)
    trainer.train()
    assert engine.calls >= 1
    logged = next(h for h in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in h)
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx(0.1, abs=1e-4)
    assert 1.0 < logged["sampling/importance_sampling_ratio/max"] <= 3.0


def make_ppo_trainer(model_dir: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, engine: ShiftedEngine | None,
                     **kwargs: Any) -> Any:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.trainers import base as trainer_base

    if engine is not None:
        monkeypatch.setattr(trainer_base, "build_generation_backend", lambda settings, team: engine)
    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path), num_agents=2, per_device_train_batch_size=4, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=1, total_episodes=4, response_length=3, stop_token="eos",
        learning_rate=1e-3, report_to=[], save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, temperature=1.0, use_vllm=engine is not None, **kwargs)
    return MultiAgentPPOTrainer(args=args, model=model_dir, env=TargetSumEnv(2), reward_funcs=TargetSumReward(),
                                train_dataset=Dataset.from_dict({"target": [10] * 4}),
                                peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))


def test_ppo_weights_each_slots_policy_loss_by_the_truncated_ratio(target_model_dir: str, tmp_path: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = make_ppo_trainer(target_model_dir, tmp_path, monkeypatch, ShiftedEngine(math.log(1.5)),
                               vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=10.0)
    rollouts = trainer.rollout([{"target": 10}] * 4)
    for slot, ro in enumerate(rollouts):
        mask = ro.policy_mask
        torch.testing.assert_close(ro.importance_sampling_ratio[mask], torch.full((int(mask.sum()),), 1.5),
                                   rtol=1e-4, atol=1e-4)
        ro.advantages = torch.linspace(0.5, 2.0, ro.advantages.numel()).view_as(ro.advantages)  # loss not ~0
        idx = torch.arange(len(ro.texts))
        new = ro.logprobs.clone() + 0.01 * mask  # a policy one step on: the clip is inactive (ratio 1.01)
        _, weighted = trainer.compute_agent_loss(slot, new, ro.values.clone(), ro, idx)
        ratio, ro.importance_sampling_ratio = ro.importance_sampling_ratio, None
        _, plain = trainer.compute_agent_loss(slot, new, ro.values.clone(), ro, idx)
        assert abs(plain["pg_loss"].item()) > 1e-3
        torch.testing.assert_close(weighted["pg_loss"], 1.5 * plain["pg_loss"], rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(weighted["vf_loss"], plain["vf_loss"])  # the value loss is not weighted
        ro.importance_sampling_ratio = ratio


def test_ppo_without_engine_logprobs_has_no_ratio_and_logs_trls_metrics_with_them(
        target_model_dir: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for engine in (None, ShiftedEngine(0.2, logprobs=False)):
        trainer = make_ppo_trainer(target_model_dir, tmp_path, monkeypatch, engine)
        assert all(ro.importance_sampling_ratio is None and ro.sampling_logprobs is None
                   for ro in trainer.rollout([{"target": 10}] * 4))
    trainer = make_ppo_trainer(target_model_dir, tmp_path, monkeypatch, ShiftedEngine(0.2))
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "sampling/importance_sampling_ratio/mean" in h)
    assert logged["sampling/sampling_logp_difference/mean"] == pytest.approx(0.2, abs=1e-4)
    assert logged["sampling/importance_sampling_ratio/max"] <= 3.0  # TRL's default: sequence_mask, C_max = 3


@pytest.mark.parametrize("make", ["magrpo", "ppo"])
def test_config_checks_trls_importance_sampling_fields(make: str, tmp_path: Any) -> None:
    from trl_marl import MAGRPOConfig, MultiAgentPPOConfig

    def build(**kwargs: Any) -> Any:
        if make == "magrpo":
            return MAGRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2,
                                report_to=[], **kwargs)
        return MultiAgentPPOConfig(output_dir=str(tmp_path), report_to=[], **kwargs)

    config = build(use_vllm=True)
    assert (config.vllm_importance_sampling_correction, config.vllm_importance_sampling_mode,
            config.vllm_importance_sampling_clip_max, config.vllm_importance_sampling_clip_min) == (
        True, "sequence_mask", 3.0, None)  # TRL 1.16's defaults
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        build(use_vllm=True, vllm_importance_sampling_mode="sequence")
    build(vllm_importance_sampling_mode="sequence")  # as TRL: the mode means nothing (unchecked) while vLLM is off
    with pytest.raises(ValueError, match="vllm_importance_sampling_clip_min"):
        build(use_vllm=True, vllm_importance_sampling_clip_min=2.0, vllm_importance_sampling_clip_max=1.0)
    with pytest.raises(ValueError, match="clip_m"):
        build(use_vllm=True, vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=None)
    with pytest.warns(FutureWarning, match="vllm_importance_sampling_cap"):
        config = build(use_vllm=True, vllm_importance_sampling_cap=5.0)
    assert config.vllm_importance_sampling_clip_max == 5.0
