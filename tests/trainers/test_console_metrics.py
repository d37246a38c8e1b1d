"""The console shows a short line per logged step, the loggers get every metric (issue 53, item 8: a two-agent
MAGRPO step printed about 30 metrics, some 1,000 characters, per step)."""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from peft import LoraConfig

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.trainers.console import shown_metrics

LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def magrpo(model_dir: str, out: Path, **overrides: Any) -> MAGRPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(out), num_agents=2, num_generations=4, per_device_train_batch_size=8, max_completion_length=3,
        max_steps=2, logging_steps=1, report_to="none", save_strategy="no", temperature=1.0, disable_tqdm=True,
        seed=0, gradient_checkpointing=False,
    )
    kwargs.update(overrides)
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                         args=MAGRPOConfig(**kwargs), train_dataset=Dataset.from_dict({"target": [10] * 16}),
                         peft_config=LORA)


def ppo(model_dir: str, out: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(out), num_agents=2, per_device_train_batch_size=2, total_episodes=4, response_length=3,
        num_ppo_epochs=1, report_to="none", save_strategy="no", num_sample_generations=0, disable_tqdm=True, seed=0,
        logging_steps=1,
    )
    kwargs.update(overrides)
    return MultiAgentPPOTrainer(args=MultiAgentPPOConfig(**kwargs), model=model_dir, reward_funcs=TargetSumReward(0.5),
                                env=TargetSumEnv(2), train_dataset=Dataset.from_dict({"target": [10] * 8}),
                                peft_config=LORA)


def printed_dicts(text: str) -> list[dict[str, Any]]:
    """The metric dicts transformers' printer wrote (one per line)."""
    return [ast.literal_eval(line) for line in text.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("build", [magrpo, ppo], ids=["magrpo", "ppo"])
def test_the_console_shows_the_short_list_and_the_history_keeps_everything(build: Any, target_model_dir: str,
                                                                           tmp_path: Path, capsys: Any) -> None:
    trainer = build(target_model_dir, tmp_path / "out")
    trainer.train()
    steps = [entry for entry in trainer.state.log_history if "train_runtime" not in entry]
    shown = printed_dicts(capsys.readouterr().out)
    step_lines = [line for line in shown if "train_runtime" not in line]
    assert len(step_lines) == len(steps) >= 1
    for line, entry in zip(step_lines, steps):
        assert len(entry) > len(line) + 5  # the history holds many more metrics than the console line
        assert set(line) <= set(entry)
        assert len(str(line)) < 400
    default = trainer.console_metrics_default
    assert set(step_lines[0]) == {key for key in steps[0] if key == "epoch" or any(
        fnmatch.fnmatchcase(key, p) for p in default)}
    if build is magrpo:  # transformers' loop ends with a summary, always printed (PPO's loop, as TRL's, has none)
        assert any("train_runtime" in line for line in shown)
    wanted = {"reward", "reward_std", "loss"} if build is magrpo else {"objective/scores", "objective/kl", "lr"}
    assert wanted <= set(step_lines[0])


def test_all_prints_every_metric_and_patterns_choose(target_model_dir: str, tmp_path: Path, capsys: Any) -> None:
    trainer = magrpo(target_model_dir, tmp_path / "all", console_metrics=["all"])
    trainer.train()
    first = printed_dicts(capsys.readouterr().out)[0]
    assert set(first) == set(trainer.state.log_history[0]) - {"step"}

    trainer = magrpo(target_model_dir, tmp_path / "some", console_metrics="agent_*/entropy")
    trainer.train()
    first = printed_dicts(capsys.readouterr().out)[0]
    assert set(first) == {"agent_0/entropy", "agent_1/entropy", "epoch"}


def test_shown_metrics_by_hand() -> None:
    logs = {"loss": 1.0, "agent_0/kl": 0.1, "agent_1/kl": 0.2, "agent_0/entropy": 2.0, "epoch": 0.5,
            "train_runtime": 3.0, "eval_reward": 0.4}
    assert shown_metrics(logs, ["agent_*/kl"]) == {"agent_0/kl": 0.1, "agent_1/kl": 0.2, "epoch": 0.5,
                                                   "train_runtime": 3.0, "eval_reward": 0.4}
    assert shown_metrics(logs, ["all"]) == logs
    assert list(shown_metrics(logs, ["loss", "agent_1/kl"])) == ["loss", "agent_1/kl", "epoch", "train_runtime",
                                                                 "eval_reward"]


@pytest.mark.parametrize("config", [MAGRPOConfig, MultiAgentPPOConfig])
@pytest.mark.parametrize("bad", [[""], ["reward", 3], 5])
def test_a_bad_console_metrics_value_names_the_field(config: Any, bad: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"{config.__name__}\.console_metrics"):
        config(output_dir=str(tmp_path), console_metrics=bad)
