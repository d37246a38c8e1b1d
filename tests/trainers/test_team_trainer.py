"""`TeamTrainer`, the base class of both trainers: its setup steps make a new algorithm's constructor a few lines, and
both trainers share them (the same checks, the same state), instead of repeating them."""

from __future__ import annotations

import ast
import inspect
import pathlib
import textwrap
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, PPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.reward_contract import NonFiniteCounter, TeamReward
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.team import AgentTeam
from trl_marl.team.generation import TransformersBackend
from trl_marl.trainers.base import MetricsBook, TeamTrainer, TeamTrainingArguments

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "trl_marl" / "trainers"


class OneStepTrainer(TeamTrainer):
    """A new algorithm's constructor, written only with the base class's setup steps (the class docstring's sketch)."""

    _name = "OneStep"

    def __init__(self, model: Any, reward_funcs: Any, args: MAGRPOConfig, train_dataset: Any, env: Any,
                 eval_dataset: Any = None) -> None:
        self._check_inputs(env, args, train_dataset, eval_dataset)
        team = self._build_team(lambda: AgentTeam.build(model, args.num_agents), args, env, train_dataset,
                                eval_dataset, args.max_completion_length, "MAGRPOConfig.max_completion_length")
        self._setup_generation(team, args, temperature=0.7)
        self.rewards = self._timed_rewards(TeamReward([reward_funcs], None), args)
        self._init_trainer(team, env, args, model=team, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           callbacks=None)


def args_for(tmp_path: Path, **overrides: Any) -> MAGRPOConfig:
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path), num_agents=2, num_generations=2,
                                  per_device_train_batch_size=4, max_completion_length=3, report_to="none",
                                  save_strategy="no", disable_tqdm=True, seed=0, reward_timeout=12.5,
                                  reward_isolation="thread")
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def test_a_new_algorithm_is_set_up_by_the_base_class_steps(target_model_dir: str, tmp_path: Path) -> None:
    dataset = Dataset.from_dict({"target": [10] * 8})
    args = args_for(tmp_path)
    trainer = OneStepTrainer(target_model_dir, TargetSumReward(), args, dataset, TargetSumEnv(num_agents=2))
    assert isinstance(trainer.team, AgentTeam) and trainer.model is trainer.team
    assert trainer.team.num_agents == 2 and trainer.team.temperature == 0.7
    assert trainer.team.share_prompt_prefill is args.share_prompt_prefill
    assert type(trainer.team.generation_backend) is TransformersBackend  # the default: the team's own decoding
    assert trainer.rewards.timeout == 12.5 and trainer.rewards.isolation == "thread"
    assert isinstance(trainer._metrics, MetricsBook) and isinstance(trainer.nonfinite, NonFiniteCounter)
    assert trainer.nonfinite.max_nonfinite == args.max_nonfinite
    assert args.remove_unused_columns is False  # the environment reads raw rows
    assert trainer.processing_class is trainer.team.tokenizers[0]
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch[0] == {"target": 10}  # raw rows: the collator keeps every column


def test_the_steps_refuse_bad_input_before_any_model_loads(tmp_path: Path) -> None:
    """The first step runs before a model is loaded: a missing training set or an environment that disagrees with
    the config fails at once (the model path does not even exist)."""
    env = TargetSumEnv(num_agents=2)
    with pytest.raises(ValueError, match="`train_dataset` is required: OneStep plays one episode"):
        OneStepTrainer("/no/such/model", TargetSumReward(), args_for(tmp_path), None, env)
    with pytest.raises(ValueError, match="num_agents=3"):
        OneStepTrainer("/no/such/model", TargetSumReward(), args_for(tmp_path, num_agents=3),
                       Dataset.from_dict({"target": [10] * 4}), env)


def test_both_trainers_stand_on_the_base_class() -> None:
    for trainer in (MAGRPOTrainer, MultiAgentPPOTrainer, PPOTrainer):
        assert issubclass(trainer, TeamTrainer)
    for config in (MAGRPOConfig(output_dir="/tmp/unused", num_generations=2, per_device_train_batch_size=2),
                   MultiAgentPPOConfig(output_dir="/tmp/unused")):
        assert isinstance(config, TeamTrainingArguments)  # every field the setup steps read
    import trl_marl.trainers.base as base

    assert not hasattr(base, "TeamTrainerMixin")  # an unreleased package keeps no old names (issue 52)


def _calls(function: Any) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(tree) if isinstance(node, ast.Call)}


@pytest.mark.parametrize("trainer", [MAGRPOTrainer, MultiAgentPPOTrainer])
def test_each_constructor_keeps_only_what_differs(trainer: type) -> None:
    """Both constructors call every setup step and none of what those steps hold (the seed, the thread count, the
    prompt-length check, the backend, the timeouts, `Trainer.__init__`), so the shared setup lives once."""
    calls = _calls(trainer.__init__)
    assert {"_check_inputs", "_build_team", "_setup_generation", "_timed_rewards", "_init_trainer"} <= calls
    assert not calls & {"apply_cpu_threads", "check_prompt_lengths", "build_generation_backend", "set_timeout",
                        "check_env_agrees", "validate_dataset", "MetricsBook", "NonFiniteCounter", "__init__"}


def test_the_base_class_reads_only_state_it_owns() -> None:
    """The shared code was a mixin that silenced the type checker wherever it read the trainer's state; as the base
    class of `Trainer` it owns that state."""
    assert "type: ignore" not in (SRC / "base.py").read_text()


def test_a_ppo_team_and_a_magrpo_team_get_the_same_setup(target_model_dir: str, tmp_path: Path) -> None:
    """The shared steps give both trainers the same state for the same settings (PPO samples at its temperature +
    1e-7, as TRL's PPOTrainer does)."""
    dataset = Dataset.from_dict({"target": [10] * 8})
    env = TargetSumEnv(num_agents=2)
    magrpo = MAGRPOTrainer(target_model_dir, TargetSumReward(), args_for(tmp_path / "m", temperature=0.9),
                           train_dataset=dataset, env=env)
    ppo = MultiAgentPPOTrainer(
        MultiAgentPPOConfig(output_dir=str(tmp_path / "p"), num_agents=2, per_device_train_batch_size=2,
                            total_episodes=2, response_length=3, report_to="none", save_strategy="no",
                            num_sample_generations=0, disable_tqdm=True, seed=0, temperature=0.9,
                            reward_timeout=12.5, reward_isolation="thread"),
        target_model_dir, dataset, env=env, reward_funcs=TargetSumReward())
    assert magrpo.team.temperature == 0.9 and ppo.team.temperature == pytest.approx(0.9 + 1e-7, abs=0)
    for trainer in (magrpo, ppo):
        assert trainer.rewards.timeout == 12.5 and trainer.rewards.isolation == "thread"
        assert trainer.env is env and trainer.args.remove_unused_columns is False
        assert trainer.nonfinite.max_nonfinite == trainer.args.max_nonfinite
