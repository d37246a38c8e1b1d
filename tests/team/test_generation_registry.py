"""Generation backends by name (`register_generation_backend`): a user's backend is one more value of both configs'
`generation_backend`; the importance-sampling correction follows the log-probabilities the backend returns, not the
backend's name (issue 52, item 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from peft import LoraConfig

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.team.generation import (
    EngineBackend,
    GenerationSettings,
    TransformersBackend,
    build_generation_backend,
    generation_backend_names,
    register_generation_backend,
)

LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


class OwnDecodingEngine(EngineBackend):
    """An engine of a user's: the team's own decoding, returned uncut with a log-probability of -0.1 per token."""

    def generate_with_logprobs(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: Any,
                               logprobs: bool | None = None) -> tuple[list, list | None]:
        rows = TransformersBackend().generate(team, prompt_ids, generation_config).completion_ids
        wanted = self.sampling_logprobs if logprobs is None else logprobs
        return rows, [[[-0.1] * len(row) for row in agent] for agent in rows] if wanted else None


def _engine(settings: GenerationSettings, team: Any) -> OwnDecodingEngine:
    engine = OwnDecodingEngine()
    engine.sampling_logprobs = True  # it returns its log-probabilities (the factory keeps them if the config asks)
    return engine


register_generation_backend("own-engine", _engine)


def test_a_registered_name_is_a_value_of_both_configs(tmp_path: Path) -> None:
    assert generation_backend_names()[:3] == ("transformers", "compiled", "vllm")
    assert "own-engine" in generation_backend_names()
    for config in (MAGRPOConfig(output_dir=str(tmp_path), generation_backend="own-engine", report_to="none"),
                   MultiAgentPPOConfig(output_dir=str(tmp_path), generation_backend="own-engine", report_to="none")):
        assert type(build_generation_backend(config, None)) is OwnDecodingEngine
    with pytest.raises(ValueError, match=r"must be one of \(.*'own-engine'.*\) \(a backend of your own: "
                                         r"`trl_marl.team.generation.register_generation_backend`\), got 'onnx'"):
        MAGRPOConfig(output_dir=str(tmp_path), generation_backend="onnx", report_to="none")


def test_a_name_is_registered_once() -> None:
    register_generation_backend("own-engine", _engine)  # the same factory again: nothing changes
    with pytest.raises(ValueError, match="registered already"):
        register_generation_backend("own-engine", lambda settings, team: TransformersBackend())
    with pytest.raises(ValueError, match="non-empty string"):
        register_generation_backend("", _engine)


def test_the_config_switch_decides_whether_the_engine_returns_log_probabilities() -> None:
    on = build_generation_backend(GenerationSettings(generation_backend="own-engine"), None)
    off = build_generation_backend(GenerationSettings(generation_backend="own-engine",
                                                      vllm_importance_sampling_correction=False), None)
    assert (on.sampling_logprobs, off.sampling_logprobs) == (True, False)
    assert build_generation_backend(GenerationSettings(), None).sampling_logprobs is False


@pytest.mark.parametrize("correction", [True, False])
def test_a_user_engine_gets_the_importance_sampling_correction(correction: bool, target_model_dir: str,
                                                              tmp_path: Path) -> None:
    """The correction keys on the engine's log-probabilities: logged for a registered engine (it was keyed to the
    name 'vllm' before), and absent when the config switches it off."""
    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_generations=4, per_device_train_batch_size=8,
                        max_completion_length=3, max_steps=1, logging_steps=1, report_to="none", save_strategy="no",
                        disable_tqdm=True, seed=0, generation_backend="own-engine",
                        vllm_importance_sampling_correction=correction, no_signal_warning_interval=None)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 16}), peft_config=LORA)
    assert type(trainer.team.generation_backend) is OwnDecodingEngine
    trainer.train()
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert ("sampling/sampling_logp_difference/mean" in logged) is correction, sorted(logged)
