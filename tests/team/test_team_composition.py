"""`AgentTeam` *has* its parts (the log-probability forwards, a generation backend, an adapter control, a saver)
instead of inheriting them, and the knobs those parts read are one typed, checked `TeamSettings` value that trainers
set once."""

from __future__ import annotations

import ast
import copy
import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from torch import nn
from transformers import PreTrainedTokenizerBase

import trl_marl
from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.generation import GenerationBackend, TransformersBackend
from trl_marl.toy import build_toy_model
from trl_marl.utils.tokens import pad_left, pad_right

OLD_MIXINS = {"LogProbMixin", "SamplingMixin", "AdapterMixin", "SavingMixin"}


def adapters_team(tokenizer: PreTrainedTokenizerBase, num_agents: int = 2) -> AgentTeam:
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    return AgentTeam.build(model, num_agents, mode="adapters", peft_config=lora, processing_class=tokenizer)


def models_team(tokenizer: PreTrainedTokenizerBase) -> AgentTeam:
    models = [build_toy_model(tokenizer, hidden_size=16, num_layers=1, seed=s) for s in (0, 1)]
    return AgentTeam.build(models, 2, processing_class=tokenizer)


def batch() -> AgentBatch:
    return AgentBatch(*pad_left([[4, 5, 6], [7, 8]], 0), *pad_right([[9, 10], [11, 12]], 0))


def parts(team: AgentTeam) -> list[Any]:
    return [team.logprob_forwards, team.generation_backend, team.adapter_control, team.saver]


def test_the_team_has_its_parts_and_inherits_none_of_them(tokenizer: PreTrainedTokenizerBase) -> None:
    from trl_marl.team.adapters import AdapterControl
    from trl_marl.team.forward import LogProbForwards
    from trl_marl.team.saving import TeamSaver

    team = adapters_team(tokenizer)
    assert isinstance(team.logprob_forwards, LogProbForwards) and team.logprob_forwards.team is team
    assert isinstance(team.adapter_control, AdapterControl) and team.adapter_control.team is team
    assert isinstance(team.saver, TeamSaver) and team.saver.team is team
    assert isinstance(team.generation_backend, TransformersBackend) and not hasattr(team, "sampler")  # one name
    bases = [cls.__name__ for cls in type(team).__mro__]
    assert not OLD_MIXINS & set(bases), bases
    assert bases[-2:] == ["Module", "object"]
    # the team's state lives in its parts: the frozen agents in the adapter control, the model call in the
    # log-probability forwards
    team.freeze_agents([1])
    assert team.frozen is team.adapter_control.frozen == {1}
    team.forward_call = call = team.logprob_forwards.forward_call
    assert team.logprob_forwards.forward_call is call
    # the backend is set (and checked) as `generation_backend`; None restores the team's own decoding
    team.generation_backend = None
    assert isinstance(team.generation_backend, TransformersBackend)
    with pytest.raises(TypeError, match="`generation_backend` must be a"):
        team.generation_backend = object()


def test_the_parts_are_no_submodules_and_the_state_dict_is_the_models(tokenizer: PreTrainedTokenizerBase) -> None:
    for team in (adapters_team(tokenizer), models_team(tokenizer)):
        for part in parts(team):
            assert not isinstance(part, nn.Module)
        assert [name for name, _ in team.named_children()] == ["models"]
        expected = [f"models.{i}.{key}" for i, model in enumerate(team.models) for key in model.state_dict()]
        assert list(team.state_dict()) == expected
        assert sum(p.numel() for p in team.parameters()) == sum(p.numel() for m in team.models for p in m.parameters())
    # the toy adapters team by name: each q/v projection holds its base weights and two adapters' A and B
    keys = set(adapters_team(tokenizer).state_dict())
    prefix = "models.0.base_model.model.model.layers.0.self_attn.q_proj."
    assert {k for k in keys if k.startswith(prefix)} == {
        prefix + "base_layer.weight", prefix + "base_layer.bias",
        *(f"{prefix}lora_{m}.agent_{a}.weight" for m in "AB" for a in (0, 1)),
    }


BAD_SETTINGS = [
    ("temperature", 0.0), ("temperature", -0.5), ("temperature", math.nan), ("temperature", math.inf),
    ("temperature", True), ("temperature", "1.0"),
    ("logprob_chunk_elements", -1), ("logprob_chunk_elements", 1.5), ("logprob_chunk_elements", True),
    ("share_prompt_prefill", 1), ("share_prompt_prefill", "yes"), ("lean_decode", None),
    ("joint_adapter_forward", 0), ("continuous_batching_config", "paged"), ("continuous_batching_config", {}),
]


@pytest.mark.parametrize(("name", "value"), BAD_SETTINGS, ids=[f"{n}={v!r}" for n, v in BAD_SETTINGS])
def test_a_bad_setting_is_refused_with_its_name(tokenizer: PreTrainedTokenizerBase, name: str, value: Any) -> None:
    from trl_marl.team.settings import TeamSettings

    with pytest.raises((ValueError, TypeError), match=f"`{name}` must be"):
        TeamSettings(**{name: value})
    team = adapters_team(tokenizer)
    before = team.settings
    with pytest.raises((ValueError, TypeError), match=f"`{name}` must be"):
        setattr(team, name, value)  # the old attribute: the same check
    with pytest.raises((ValueError, TypeError), match=f"`{name}` must be"):
        team.configure(**{"lean_decode": False, "temperature": 0.5, name: value})
    assert team.settings is before  # nothing applied, not even the good changes next to the bad one


def test_configure_sets_everything_at_once_and_the_attributes_still_work(tokenizer: PreTrainedTokenizerBase) -> None:
    from trl_marl.team.settings import TeamSettings

    team = adapters_team(tokenizer)
    assert team.settings == TeamSettings()  # the defaults, written once
    assert (team.temperature, team.share_prompt_prefill, team.lean_decode, team.continuous_batching_config,
            team.joint_adapter_forward, team.logprob_chunk_elements) == (1.0, True, True, None, True, 2**24)
    seen: list[TeamSettings] = []

    def build(t: AgentTeam) -> GenerationBackend:
        seen.append(t.settings)  # a backend built from settings sees the ones just applied
        return TransformersBackend()

    applied = team.configure(TeamSettings(temperature=0.5), lean_decode=False, generation_backend=build)
    assert applied == team.settings == TeamSettings(temperature=0.5, lean_decode=False) == seen[0]
    assert team.temperature == 0.5 and team.lean_decode is False
    assert isinstance(team.generation_backend, TransformersBackend)
    with pytest.raises(TypeError, match="Unknown team setting"):
        team.configure(temprature=0.7)
    with pytest.raises(TypeError, match="`settings` must be a"):
        team.configure({"temperature": 0.7})
    # the old attributes replace one field of the frozen settings
    settings = team.settings
    team.joint_adapter_forward = False
    team.logprob_chunk_elements = 0
    assert settings.joint_adapter_forward is True and team.settings is not settings
    assert team.settings == TeamSettings(temperature=0.5, lean_decode=False, joint_adapter_forward=False,
                                         logprob_chunk_elements=0)
    # and the parts read them: the log-probability forwards divide the logits by the team's temperature
    model = team.policy(0)
    b = batch()
    with torch.no_grad():
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, 2:4]
        expected = torch.log_softmax(logits / 0.5, -1).gather(-1, b.completion_ids[..., None])[..., 0]
    torch.testing.assert_close(team.policy_logps(0, b), expected, rtol=1e-5, atol=1e-6)


def test_lockstep_play_turns_the_shared_prefill_off_and_back(tokenizer: PreTrainedTokenizerBase) -> None:
    team = adapters_team(tokenizer)
    team.share_prompt_prefill = True

    def any_process(mine: bool) -> bool:
        return mine

    with team.playing_in_lockstep(any_process):
        assert team.lockstep is any_process and team.share_prompt_prefill is False
        team.temperature = 0.3  # a change made meanwhile stays
    assert team.lockstep is None and team.share_prompt_prefill is True and team.temperature == 0.3


def test_a_deep_copy_has_parts_of_its_own(tokenizer: PreTrainedTokenizerBase) -> None:
    team = adapters_team(tokenizer)
    team.temperature = 0.8
    team.freeze_agents([0])
    clone = copy.deepcopy(team)
    for mine, theirs in zip(parts(team), parts(clone), strict=True):
        assert type(mine) is type(theirs) and mine is not theirs
    assert clone.logprob_forwards.team is clone and clone.adapter_control.team is clone and clone.saver.team is clone
    assert clone.settings == team.settings and clone.frozen == {0} and clone.frozen is not team.frozen
    assert list(clone.state_dict()) == list(team.state_dict())
    b = batch()
    torch.testing.assert_close(clone.policy_logps(1, b), team.policy_logps(1, b))
    clone.temperature = 2.0
    clone.adapter_control.activate(1)
    assert team.temperature == 0.8 and clone.policy(0).active_adapter == "agent_1"
    assert team.policy(0) is not clone.policy(0)


def _team_assignments(path: Path) -> list[str]:
    """`team.x = ...`, `self.team.x = ...` (also augmented and annotated) and `setattr(team, ...)` in `path`."""

    def is_team(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "team") or (
            isinstance(node, ast.Attribute) and node.attr == "team")

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):  # `a, team.x = ...` too; `team.models[0] = ...` sets no attribute of it
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and node.args:
            if is_team(node.args[0]):
                found.append(f"{path.name}:{node.lineno}: setattr")
        for target in targets:
            if isinstance(target, ast.Attribute) and is_team(target.value):
                found.append(f"{path.name}:{node.lineno}: team.{target.attr} =")
    return sorted(found, key=lambda hit: int(hit.split(":")[1]))


def test_the_trainers_set_no_team_attribute(tmp_path: Path) -> None:
    """The trainers hand the team its settings once (`AgentTeam.configure` in `TeamTrainer._setup_generation`,
    `playing_in_lockstep` for sharded rollouts), never attribute by attribute."""
    trainers = Path(trl_marl.__file__).parent / "trainers"
    files = sorted(trainers.rglob("*.py"))
    assert len(files) > 10
    assert [hit for path in files for hit in _team_assignments(path)] == []
    # the check finds each form of assignment, and no item or nested assignment
    code = tmp_path / "code.py"
    code.write_text("team.temperature = 0.7\nself.team.lockstep = f\nteam.x += 1\nteam.y: int = 2\n"
                    "setattr(team, 'z', 3)\na, team.w = 1, 2\nteam.configure(temperature=0.7)\n"
                    "other.temperature = 1\nteam.ref_models[0] = None\nteam.policy(0).config.x = 1\n")
    assert _team_assignments(code) == ["code.py:1: team.temperature =", "code.py:2: team.lockstep =",
                                       "code.py:3: team.x =", "code.py:4: team.y =", "code.py:5: setattr",
                                       "code.py:6: team.w ="]


@pytest.mark.parametrize("trainer", ["magrpo", "ppo"])
def test_a_trainer_configures_its_team_once(target_model_dir: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, trainer: str) -> None:
    from trl_marl.team.settings import TeamSettings

    calls: list[dict[str, Any]] = []
    configure = AgentTeam.configure

    def counted(self: AgentTeam, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return configure(self, *args, **kwargs)

    monkeypatch.setattr(AgentTeam, "configure", counted)
    dataset = Dataset.from_dict({"target": [10] * 8})
    if trainer == "magrpo":
        args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_generations=2, per_device_train_batch_size=4,
                            max_completion_length=3, report_to="none", save_strategy="no", seed=0, temperature=0.7,
                            share_prompt_prefill=False)
        built = MAGRPOTrainer(target_model_dir, TargetSumReward(), args, train_dataset=dataset, env=TargetSumEnv(2))
        expected = TeamSettings(temperature=0.7, share_prompt_prefill=False)
    else:
        args = MultiAgentPPOConfig(output_dir=str(tmp_path), num_agents=2, per_device_train_batch_size=2,
                                   total_episodes=2, response_length=3, report_to="none", save_strategy="no",
                                   num_sample_generations=0, seed=0, temperature=0.9)
        built = MultiAgentPPOTrainer(args, target_model_dir, train_dataset=dataset, env=TargetSumEnv(2),
                                     reward_funcs=TargetSumReward())
        expected = TeamSettings(temperature=0.9 + 1e-7, share_prompt_prefill=True)  # TRL's PPO: temperature + 1e-7
    team = built.team
    assert len(calls) == 1 and "generation_backend" in calls[0]
    assert team.settings == expected and isinstance(team.generation_backend, TransformersBackend)
    # a rollout over sharded weights plays in lockstep without a shared prefill, then the settings are back
    monkeypatch.setattr(type(built), "is_sharded", lambda self: True)
    with built.rollout_context():
        assert team.lockstep is not None and team.lockstep(True) is True
        assert team.settings == dataclasses.replace(expected, share_prompt_prefill=False)
    assert team.lockstep is None and team.settings == expected and len(calls) == 1
