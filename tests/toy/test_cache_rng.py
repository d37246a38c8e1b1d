"""Building a model cache leaves the caller's random generators alone (issue 35, item 7).

A run seeded before its model cache is built must draw the same numbers as a run whose cache already existed: the
real model's first build initialised a throwaway model from the global torch generator after the trainer had seeded
it, so a fresh machine's first run got other LoRA weights than every later run. The real model's GGUF dequantization
is replaced here by a builder that does what it does to the generators (`from_config` initialises weights from the
global torch generator before the real weights are copied in) on the suite's toy model, so these tests take seconds.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.offline_models import smollm2 as real
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.toy import make_toy_model

warnings.filterwarnings("ignore")


def generator_states() -> tuple[torch.Tensor, Any, np.ndarray]:
    """The global states of torch (CPU), Python's `random` and NumPy."""
    return torch.get_rng_state().clone(), random.getstate(), np.random.get_state()[1].copy()


def assert_same_states(before: tuple[torch.Tensor, Any, np.ndarray]) -> None:
    after = generator_states()
    assert torch.equal(before[0], after[0]), "the torch generator moved"
    assert before[1] == after[1], "Python's random moved"
    assert np.array_equal(before[2], after[2]), "NumPy's generator moved"


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


@pytest.fixture
def fake_real_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, target_model_dir: str) -> list[Path]:
    """Replace the GGUF dequantization with a build of the toy target model that uses the generators as the real
    build does (a model made with `from_config`, then the weights copied in), plus a draw from Python's `random` and
    NumPy's generator, which any future step of a build might make. Returns the folders built."""
    built: list[Path] = []

    def write(gguf_path: Path, directory: Path) -> None:
        config = AutoConfig.from_pretrained(target_model_dir)
        model = AutoModelForCausalLM.from_config(config)  # random initialisation: the global torch generator
        model.load_state_dict(AutoModelForCausalLM.from_pretrained(target_model_dir).state_dict())
        random.random()
        np.random.rand()
        model.save_pretrained(directory)
        AutoTokenizer.from_pretrained(target_model_dir).save_pretrained(directory)
        built.append(directory)

    monkeypatch.setattr(real, "_write_model", write)
    monkeypatch.setattr(real, "find_smollm2_gguf", lambda: tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setattr(real, "_check_gguf", lambda: None)
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path / "cache"))
    return built


def test_isolated_rng_puts_every_generator_back() -> None:
    from trl_marl.toy.pretrain import isolated_rng

    seed_everything(3)
    before = generator_states()
    expected = (torch.rand(2).tolist(), random.random(), float(np.random.rand()))
    seed_everything(3)
    with isolated_rng():
        torch.rand(5)
        random.random()
        np.random.rand(4)
    assert_same_states(before)
    assert (torch.rand(2).tolist(), random.random(), float(np.random.rand())) == expected


def test_building_the_real_model_leaves_the_generators_alone(fake_real_build: list[Path]) -> None:
    seed_everything(0)
    before = generator_states()
    folder = real.make_real_model()
    assert len(fake_real_build) == 1 and Path(folder) == real.real_model_cache_dir()
    assert_same_states(before)


@pytest.mark.parametrize("task", ["target", "debate"])
def test_building_a_toy_model_leaves_the_generators_alone(tmp_path: Path, task: str) -> None:
    seed_everything(1)
    before = generator_states()
    make_toy_model(tmp_path / task, task=task, hidden_size=16, num_layers=1, pretrain_steps=2, batch_size=4)
    assert_same_states(before)


def first_lora_a(model: str, output_dir: Path) -> list[float]:
    """Agent 0's first three `lora_A` values of a seeded MAGRPO trainer built on `model`."""
    from peft import LoraConfig

    args = MAGRPOConfig(
        output_dir=str(output_dir),
        num_agents=2,
        num_generations=2,
        per_device_train_batch_size=4,
        max_completion_length=3,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    trainer = MAGRPOTrainer(
        model=model,
        reward_funcs=TargetSumReward(0.5),
        args=args,
        train_dataset=Dataset.from_dict({"target": [10] * 4}),
        env=TargetSumEnv(2),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
    )
    name, weight = next((n, p) for n, p in trainer.team.models[0].named_parameters() if "lora_A" in n)
    assert "lora_A" in name
    return [round(v, 6) for v in weight.detach().flatten()[:3].tolist()]


def test_a_seeded_trainer_is_the_same_whether_the_model_cache_was_built_or_not(
    fake_real_build: list[Path], tmp_path: Path
) -> None:
    """The shape of the report: agent 0's first `lora_A` values differed between an empty and a built cache."""
    torch.manual_seed(123)  # what the caller did before does not matter: the trainer seeds
    fresh = first_lora_a(real.REAL_MODEL_NAME, tmp_path / "first")
    assert len(fake_real_build) == 1  # this run built the cache
    cached = first_lora_a(real.REAL_MODEL_NAME, tmp_path / "second")
    assert len(fake_real_build) == 1  # this one found it
    assert fresh == cached
