"""What a checkpoint holds, and how much of the disk it takes (issue 39, item 8: `maporl` on the real model with LoRA
left 2.1 GB after 2 updates, a 1.1 GB `optimizer.pt` and two value models saved twice, without a word).

A checkpoint holds what a resume needs: MAGRPO with LoRA saves the adapters and Adam's state of the adapters only;
multi-agent PPO its policies, critics and Adam's state of what it trains; a value model with frozen weights is saved
as its trainable tensors (`load_value_model` restores the rest from its base model); every save logs its size.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from safetensors import safe_open
from transformers import AutoModelForSequenceClassification

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.trainers.ppo.value import VALUE_MODEL_INFO, freeze_below_top_layers, load_value_model
from trl_marl.utils.checkpoint_files import checkpoint_size_line, human_bytes

LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def tensor_names(folder: Path) -> dict[str, list[str]]:
    """Every tensor of every safetensors file under `folder`, by relative file path."""
    names = {}
    for path in sorted(folder.rglob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            names[str(path.relative_to(folder))] = sorted(handle.keys())
    return names


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@pytest.fixture
def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The checkpoint lines logged during the test (the `trl_marl.checkpoints` logger does not propagate)."""
    logger = logging.getLogger("trl_marl.checkpoints")
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep()
    logger.addHandler(handler)
    yield lines
    logger.removeHandler(handler)


def test_a_lora_magrpo_checkpoint_holds_adapters_and_their_optimizer_state_only(
    target_model_dir: str, tmp_path: Path, said: list[str]
) -> None:
    out = tmp_path / "magrpo"
    config = MAGRPOConfig(output_dir=str(out), num_agents=2, num_generations=4, per_device_train_batch_size=8,
                          max_completion_length=3, max_steps=2, save_strategy="steps", save_steps=1,
                          save_total_limit=None, report_to="none", disable_tqdm=True, seed=0,
                          activation_checkpointing=False)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=config, train_dataset=Dataset.from_dict({"target": [10] * 16}),
                            peft_config=LoraConfig(**LORA))
    trainer.train()
    checkpoint = out / "checkpoint-2"
    files = tensor_names(checkpoint)
    assert sorted(files) == ["agent_0/adapter_model.safetensors", "agent_1/adapter_model.safetensors"]
    assert all("lora_" in name for names in files.values() for name in names), files  # no frozen base weight
    trainable = [p for p in trainer.team.parameters() if p.requires_grad]
    frozen = sum(p.numel() for p in trainer.team.parameters() if not p.requires_grad)
    assert trainable and frozen > 10 * sum(p.numel() for p in trainable)
    optimizer = torch.load(checkpoint / "optimizer.pt", weights_only=False)
    states = list(optimizer["state"].values())
    assert sum(len(g["params"]) for g in optimizer["param_groups"]) == len(states) == len(trainable)
    assert sorted(tuple(s["exp_avg"].shape) for s in states) == sorted(tuple(p.shape) for p in trainable)
    # one line per save, with the folder's size measured here
    assert len(said) == 2, said
    first, second = (out / "checkpoint-1"), checkpoint
    assert said[1].startswith(f"checkpoint-2: {human_bytes(folder_size(second))} (agents ")
    both = human_bytes(folder_size(first) + folder_size(second))
    assert f"; 2 checkpoints take {both} in {out} (save_total_limit=None keeps every one" in said[1]


def ppo_trainer(model_dir: str, out: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    kwargs: dict[str, Any] = dict(output_dir=str(out), num_agents=2, per_device_train_batch_size=2,
                                  total_episodes=2, response_length=3, num_ppo_epochs=1, learning_rate=1e-2,
                                  report_to="none", save_strategy="steps", save_steps=1, num_sample_generations=0,
                                  disable_tqdm=True, seed=0)
    value_model = overrides.pop("value_model", None)
    kwargs.update(overrides)
    return MultiAgentPPOTrainer(args=MultiAgentPPOConfig(**kwargs), model=model_dir,
                                reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                                train_dataset=Dataset.from_dict({"target": [10] * 8}),
                                peft_config=LoraConfig(**LORA), value_model=value_model)


def assert_same_weights(loaded: torch.nn.Module, trained: torch.nn.Module) -> None:
    mine, theirs = loaded.state_dict(), trained.state_dict()
    assert mine.keys() == theirs.keys()
    for name, value in theirs.items():
        assert torch.equal(mine[name], value), name


@pytest.mark.parametrize(("layers", "expected"), [
    (0, ["model.norm.weight", "score.weight"]),
    (1, ["model.layers.0.input_layernorm.weight", "model.layers.0.mlp.down_proj.weight",
         "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
         "model.layers.0.post_attention_layernorm.weight", "model.layers.0.self_attn.k_proj.bias",
         "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.o_proj.weight",
         "model.layers.0.self_attn.q_proj.bias", "model.layers.0.self_attn.q_proj.weight",
         "model.layers.0.self_attn.v_proj.bias", "model.layers.0.self_attn.v_proj.weight", "model.norm.weight",
         "score.weight"]),
])
def test_ppo_value_heads_are_saved_without_the_frozen_backbone(
    target_model_dir: str, tmp_path: Path, said: list[str], layers: int, expected: list[str]
) -> None:
    """Before: `value_train_layers` did not exist, PPO checkpoints held Adam's state of every value weight, and every
    value model was saved whole."""
    trainer = ppo_trainer(target_model_dir, tmp_path / "ppo", value_train_layers=layers)
    value_models = trainer.wrapper.value_models
    assert [sorted(n for n, p in vm.named_parameters() if p.requires_grad) for vm in value_models] == [expected] * 2
    trainer.train()
    checkpoint = tmp_path / "ppo" / "checkpoint-1"
    # what a resume needs: the optimizer (Adam's state of the trained tensors only), scheduler and random states
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth"} <= set(os.listdir(checkpoint))
    trained = sum(p.numel() for p in trainer.wrapper.parameters() if p.requires_grad)  # policies and critics
    states = torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"].values()
    assert sum(state["exp_avg"].numel() for state in states) == trained
    files = tensor_names(checkpoint)
    for index, vm in enumerate(value_models):
        assert files[f"value_model_{index}/trainable.safetensors"] == expected
        info = json.loads((checkpoint / f"value_model_{index}" / VALUE_MODEL_INFO).read_text())
        assert info["base_model"] == target_model_dir and info["tensors"] == expected
        assert_same_weights(load_value_model(checkpoint / f"value_model_{index}"), vm)
    assert all("lora_" in name for name in files["agent_0/adapter_model.safetensors"])
    assert said == [f"checkpoint-1: {human_bytes(folder_size(checkpoint))} (agents "
                    f"{human_bytes(folder_size(checkpoint / 'agent_0') + folder_size(checkpoint / 'agent_1'))}, "
                    f"value models {human_bytes(folder_size(checkpoint / 'value_model_0') + folder_size(checkpoint / 'value_model_1'))}, "  # noqa: E501
                    f"optimizer {human_bytes((checkpoint / 'optimizer.pt').stat().st_size)}, "
                    f"other {human_bytes(sum(p.stat().st_size for p in checkpoint.iterdir() if p.is_file() and p.name != 'optimizer.pt'))}); "  # noqa: E501
                    f"1 checkpoint takes {human_bytes(folder_size(checkpoint))} in {tmp_path / 'ppo'} "
                    "(save_total_limit=None keeps every one: set it to bound the disk use)"]


def test_a_passed_value_model_keeps_the_frozen_weights_its_base_does_not_hold(target_model_dir: str,
                                                                              tmp_path: Path) -> None:
    """A value model loaded and partly frozen by the user (as `trl-marl demo --real` does): its new score head and a
    frozen weight changed after loading are saved, the frozen weights equal to the base's are not."""
    value_models = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        vm = AutoModelForSequenceClassification.from_pretrained(target_model_dir, num_labels=1)
        freeze_below_top_layers(vm, 0)
        value_models.append(vm)
    with torch.no_grad():
        value_models[1].model.embed_tokens.weight[3] += 1.0  # frozen, but no longer the base's
    trainer = ppo_trainer(target_model_dir, tmp_path / "ppo", value_model=value_models)
    trainer.train()
    checkpoint = tmp_path / "ppo" / "checkpoint-1"
    files = tensor_names(checkpoint)
    assert files["value_model_0/trainable.safetensors"] == ["model.norm.weight", "score.weight"]
    assert files["value_model_1/trainable.safetensors"] == ["model.embed_tokens.weight", "model.norm.weight",
                                                           "score.weight"]
    for index, vm in enumerate(value_models):
        assert_same_weights(load_value_model(checkpoint / f"value_model_{index}"), vm)


def test_a_value_model_that_trains_every_weight_is_saved_whole(target_model_dir: str, tmp_path: Path) -> None:
    trainer = ppo_trainer(target_model_dir, tmp_path / "ppo")
    trainer.train()
    folder = tmp_path / "ppo" / "checkpoint-1" / "value_model_0"
    assert sorted(os.listdir(folder)) == ["config.json", "model.safetensors"]
    assert_same_weights(load_value_model(folder), trainer.wrapper.value_models[0])


@pytest.mark.parametrize("bad", [-1, 1.5, "2"])
def test_value_train_layers_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"`value_train_layers` must be None .* or an integer >= 0"):
        MultiAgentPPOConfig(output_dir="unused", value_train_layers=bad)


def test_the_size_line_by_hand(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step, sizes in ((3, {"agent_0/adapter_model.safetensors": 1500, "optimizer.pt": 2_000_000,
                             "trainer_state.json": 500}),
                        (6, {"agent_0/adapter_model.safetensors": 1500, "agent_1/adapter_model.safetensors": 2500,
                             "value_model_0/trainable.safetensors": 999, "optimizer.pt": 1_200_000,
                             "scheduler.pt": 1}),):
        for name, size in sizes.items():
            path = run / f"checkpoint-{step}" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"x" * size)
    (run / "tmp-checkpoint-9").mkdir()  # an interrupted save is not a checkpoint
    assert checkpoint_size_line(str(run / "checkpoint-6"), save_total_limit=2) == (
        f"checkpoint-6: 1.2 MB (agents 4.0 kB, value models 999 B, optimizer 1.2 MB, other 1 B); 2 checkpoints take "
        f"3.2 MB in {run} (save_total_limit=2 keeps the newest 2)")
    assert [human_bytes(n) for n in (0, 999, 1000, 1_234_567, 2_100_000_000)] == ["0 B", "999 B", "1.0 kB", "1.2 MB",
                                                                                    "2.10 GB"]


def test_save_value_model_false_keeps_the_policies_only(target_model_dir: str, tmp_path: Path) -> None:
    """Issue 53, item 6: one PPO update of the examples on a 135M base wrote 2.1 GB, 1.08 GB of it value models in
    the checkpoint and again with `save_model`. Without them a checkpoint and a saved team hold the adapters only."""
    trainer = ppo_trainer(target_model_dir, tmp_path / "ppo", save_value_model=False)
    trainer.train()
    trainer.save_model(str(tmp_path / "team"))
    for folder in (tmp_path / "ppo" / "checkpoint-1", tmp_path / "team"):
        assert not [name for name in os.listdir(folder) if name.startswith("value_model")], folder
        assert set(tensor_names(folder)) == {"agent_0/adapter_model.safetensors", "agent_1/adapter_model.safetensors"}
    kept = ppo_trainer(target_model_dir, tmp_path / "kept")  # the default keeps them, in both places
    kept.train()
    kept.save_model(str(tmp_path / "kept-team"))
    for folder in (tmp_path / "kept" / "checkpoint-1", tmp_path / "kept-team"):
        assert {"value_model_0", "value_model_1"} <= set(os.listdir(folder))
