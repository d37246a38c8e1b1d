"""Multi-agent PPO resumes from a checkpoint exactly (issue 53, item 1): the policies, critics, optimizer, scheduler,
random states, step and data position come back, so a run stopped after checkpoint-2 and resumed ends with the
weights and the logged metrics of the run that never stopped; what cannot resume says so before training."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from helpers import StopAfter
from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward

UPDATES = 4


def trainer_in(model_dir: str, output_dir: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    settings: dict[str, Any] = dict(
        output_dir=str(output_dir), num_agents=2, per_device_train_batch_size=8, gradient_accumulation_steps=2,
        num_mini_batches=2, num_ppo_epochs=2, total_episodes=16 * UPDATES, response_length=4, stop_token="eos",
        learning_rate=1e-3, lr_scheduler_type="linear", report_to="none", save_strategy="steps", save_steps=2,
        logging_steps=1, num_sample_generations=0, disable_tqdm=True, seed=0, temperature=1.0)
    settings.update(overrides)
    return MultiAgentPPOTrainer(args=MultiAgentPPOConfig(**settings), model=model_dir, env=TargetSumEnv(2),
                                reward_funcs=TargetSumReward(),
                                train_dataset=Dataset.from_dict({"target": [8, 10, 12, 14] * 12}))


def weights(trainer: MultiAgentPPOTrainer) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in trainer.wrapper.state_dict().items()}


def updates(trainer: MultiAgentPPOTrainer) -> list[dict[str, Any]]:
    """The logged metrics of every update, without the wall-clock ones."""
    return [{k: v for k, v in entry.items() if "time" not in k and k != "eps"}
            for entry in trainer.state.log_history if "objective/scores" in entry]


@pytest.fixture(scope="module")
def reference(target_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> MultiAgentPPOTrainer:
    trainer = trainer_in(target_model_dir, tmp_path_factory.mktemp("uninterrupted"))
    trainer.train()
    return trainer


@pytest.mark.parametrize("how", ["true", "path"])
def test_a_resumed_run_ends_where_the_uninterrupted_one_did(target_model_dir: str, tmp_path: Path,
                                                           reference: MultiAgentPPOTrainer, how: str) -> None:
    stopped = trainer_in(target_model_dir, tmp_path)
    stopped.add_callback(StopAfter(2))
    stopped.train()
    assert stopped.state.global_step == 2
    checkpoint = tmp_path / "checkpoint-2"
    assert {"optimizer.pt", "scheduler.pt", "rng_state.pth", "value_model_0", "value_model_1"} <= set(
        os.listdir(checkpoint))
    resumed = trainer_in(target_model_dir, tmp_path)
    resumed.train(resume_from_checkpoint=True if how == "true" else str(checkpoint))
    assert resumed.state.global_step == UPDATES
    expected, got = weights(reference), weights(resumed)
    assert expected.keys() == got.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=0, msg=name)
    assert updates(resumed) == updates(reference)  # steps 1-2 from the checkpoint's state, 3-4 trained again
    assert [entry["episode"] for entry in updates(resumed)] == [16, 32, 48, 64]


def test_what_cannot_resume_says_why(target_model_dir: str, tmp_path: Path, reference: MultiAgentPPOTrainer) -> None:
    finished = reference.args.output_dir + f"/checkpoint-{UPDATES}"
    with pytest.raises(ValueError, match=f"at update {UPDATES} of {UPDATES}.*raise `total_episodes`"):
        trainer_in(target_model_dir, tmp_path / "again").train(resume_from_checkpoint=finished)
    without_critics = trainer_in(target_model_dir, tmp_path / "no-critics", save_value_model=False)
    assert without_critics.resumable is False
    with pytest.raises(ValueError, match="save_value_model=False.*no critics"):
        without_critics.train(resume_from_checkpoint=True)
    with pytest.raises(ValueError, match="No complete checkpoint"):
        trainer_in(target_model_dir, tmp_path / "empty").train(resume_from_checkpoint=True)


def test_a_checkpoint_without_its_critic_is_refused(target_model_dir: str, tmp_path: Path) -> None:
    stopped = trainer_in(target_model_dir, tmp_path)
    stopped.add_callback(StopAfter(2))
    stopped.train()
    for name in os.listdir(tmp_path / "checkpoint-2" / "value_model_1"):
        if name.endswith(".safetensors"):
            os.remove(tmp_path / "checkpoint-2" / "value_model_1" / name)
    with pytest.raises(ValueError, match="value_model_1"):
        trainer_in(target_model_dir, tmp_path).train(resume_from_checkpoint=str(tmp_path / "checkpoint-2"))


def test_the_command_line_refuses_a_resume_without_critics_before_loading(tmp_path: Path, monkeypatch,
                                                                         capsys) -> None:
    import trl_marl.scripts.maporl as script

    monkeypatch.setattr(script, "build_models", lambda *args: pytest.fail("the model was loaded"))
    (tmp_path / "checkpoint-3").mkdir()
    with pytest.raises(SystemExit):
        script.main(["gsm8k", "--output_dir", str(tmp_path), "--report_to", "none", "--resume_from_checkpoint",
                     "true", "--save_value_model", "false"])
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and "save_value_model=False" in message, message
