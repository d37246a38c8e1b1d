"""Saving and loading a team ([`TeamSaver`], `team.saver`: an object the team has), and the weights of a PEFT model.

`save_pretrained` writes `agent_<i>/` per agent (a full model, or a PEFT adapter folder) with its tokenizer, the base
model when adapters are used and it has no loadable name (`base_model/`), and `team_config.json`;
`from_pretrained` rebuilds the team from that ([`load_team`]), and `load_weights_` loads such weights into a team
of the same layout. `AgentTeam.save_pretrained`, `AgentTeam.load_weights_` and the classmethod
`AgentTeam.from_pretrained` call these.
[`base_state_dict`] and `_save_adapter` (the base model's own weights, one adapter as a standalone folder) are also
what the vLLM backends upload (`team.generation.vllm`).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from ..utils.model_names import resolve_model_name
from ..utils.quiet import peft_quietly
from ..utils.tokens import load_tokenizer

if TYPE_CHECKING:
    from peft import PeftModel

TEAM_CONFIG_NAME = "team_config.json"
_Team = TypeVar("_Team")


def _agent_dir(output_dir: str | os.PathLike, agent_index: int) -> str:
    return os.path.join(os.fspath(output_dir), f"agent_{agent_index}")


class TeamSaver:
    """Saving and loading the weights of an `AgentTeam` (`team.saver`; it reads the team's models, adapters and
    tokenizers).

    Args:
        team: The `AgentTeam` it saves (a plain reference: the saver is no submodule of the team).
    """

    def __init__(self, team: Any) -> None:
        self.team = team

    def save_pretrained(self, output_dir: str | os.PathLike, save_base_model: bool | None = None,
                        state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save every agent to `output_dir/agent_<i>/` plus `team_config.json`.

        Each `agent_<i>/` is loadable on its own: a full model (`AutoModelForCausalLM.from_pretrained`) or a PEFT
        adapter (`task_type` `CAUSAL_LM`; `AutoPeftModelForCausalLM.from_pretrained("agent_<i>")`: its
        `base_model_name_or_path` is the base's Hub id or folder, and for an offline name such as `"toy"` the folder
        the name stands for on this machine; elsewhere `PeftModel.from_pretrained(base, "agent_<i>")` with the base
        loaded from `resolve_model_name(name)`), with the agent's tokenizer. When
        adapters are used and the base model has no loadable name or path, the base is saved to `base_model/` too.

        `state_dict` (keys as in `self.state_dict()`) replaces the team's own weights, e.g. the full weights that
        FSDP gathered from the processes' shards (the team's parameters are then shards and are not read).
        """
        team = self.team
        output_dir = os.fspath(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        base_paths: list[str | None] = []
        for i, model in enumerate(team.models):
            agents = [a for a in range(team.num_agents) if team.agent_model[a] == i]
            own = None if state_dict is None else _sub_state_dict(state_dict, f"models.{i}.")
            base_path = None
            if team.agent_adapter[agents[0]] is not None:
                base = model.get_base_model()
                name = base.config._name_or_path
                must_save_base = save_base_model if save_base_model is not None else not _loadable(name)
                if must_save_base:
                    base_path = f"base_model_{i}" if len(team.models) > 1 else "base_model"
                    # The base still holds the LoRA layers (`q_proj.base_layer.weight`, `q_proj.lora_A...`): save
                    # its own weights under their original names, or reloading it leaves those layers random.
                    base.save_pretrained(os.path.join(output_dir, base_path), state_dict=base_state_dict(model, own))
                    team.tokenizers[agents[0]].save_pretrained(os.path.join(output_dir, base_path))
                else:
                    base_path = name
            base_paths.append(base_path)
            for a in agents:
                agent_dir = _agent_dir(output_dir, a)
                adapter = team.agent_adapter[a]
                if adapter is None:
                    model.save_pretrained(agent_dir, state_dict=own)
                else:
                    _save_adapter(model, adapter, agent_dir, own)
                team.tokenizers[a].save_pretrained(agent_dir)
        config = {
            "mode": team.mode,
            "num_agents": team.num_agents,
            "agent_model": team.agent_model,
            "agent_adapter": team.agent_adapter,
            "base_models": base_paths,
            "policy_turns": team.policy_turns,
        }
        with open(os.path.join(output_dir, TEAM_CONFIG_NAME), "w") as f:
            json.dump(config, f, indent=2)

    def load_weights_(self, path: str | os.PathLike) -> None:
        """Load the weights of a team saved with the same layout into this team, in place (for resuming)."""
        from safetensors.torch import load_file

        team = self.team
        path = os.fspath(path)
        for a in range(team.num_agents):
            agent_dir = _agent_dir(path, a)
            adapter = team.agent_adapter[a]
            model = team.policy(a)
            if adapter is not None:
                from peft import set_peft_model_state_dict

                state = load_file(os.path.join(agent_dir, "adapter_model.safetensors"))
                set_peft_model_state_dict(model, state, adapter_name=adapter)
            elif team.mode != "shared" or a == 0:
                loaded = type(model).from_pretrained(agent_dir, torch_dtype=next(model.parameters()).dtype)
                model.load_state_dict(loaded.state_dict())


def load_team(cls: Callable[..., _Team], path: str | os.PathLike, is_trainable: bool = True,
              model_init_kwargs: dict | None = None) -> _Team:
    """[`AgentTeam.from_pretrained`]: the team of class `cls` saved in `path` by `AgentTeam.save_pretrained` (or a
    trainer checkpoint)."""
    path = os.fspath(path)
    config_file = os.path.join(path, TEAM_CONFIG_NAME)
    if not os.path.isfile(config_file):
        raise FileNotFoundError(f"{path} holds no {TEAM_CONFIG_NAME}: it is not a saved AgentTeam.")
    with open(config_file) as f:
        config = json.load(f)
    kwargs = dict(model_init_kwargs or {})
    n = config["num_agents"]
    tokenizers = [load_tokenizer(_agent_dir(path, a)) for a in range(n)]
    models: list[PreTrainedModel | PeftModel] = []
    for i, base_path in enumerate(config["base_models"]):
        agents = [a for a in range(n) if config["agent_model"][a] == i]
        if config["agent_adapter"][agents[0]] is None:
            models.append(AutoModelForCausalLM.from_pretrained(_agent_dir(path, agents[0]), **kwargs))
            continue
        from peft import PeftModel

        local_base = os.path.join(path, base_path)
        base = AutoModelForCausalLM.from_pretrained(
            local_base if os.path.isdir(local_base) else resolve_model_name(base_path), **kwargs)
        first, *rest = agents
        with peft_quietly():
            peft_model = PeftModel.from_pretrained(base, _agent_dir(path, first),
                                                   adapter_name=config["agent_adapter"][first],
                                                   is_trainable=is_trainable)
            for a in rest:
                peft_model.load_adapter(_agent_dir(path, a), adapter_name=config["agent_adapter"][a],
                                        is_trainable=is_trainable)
        models.append(peft_model)
    return cls(models, tokenizers, config["mode"], config["agent_model"], config["agent_adapter"],
               config.get("policy_turns", 1))


def _loadable(name: str | None) -> bool:
    """Whether `name` can be given to `from_pretrained` later: a local model folder or a Hub id."""
    if not name:
        return False
    if resolve_model_name(name) != name:  # a registered name (e.g. "smollm2-135m-instruct")
        return True
    if os.path.isdir(name):
        return os.path.isfile(os.path.join(name, "config.json"))
    return name.count("/") == 1 and not name.startswith((".", "/"))


def _sub_state_dict(state_dict: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {key[len(prefix):]: value for key, value in state_dict.items() if key.startswith(prefix)}


def base_state_dict(peft_model: Any, state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The weights of a `PeftModel`'s base model under their original names, without any adapter weight.

    `state_dict` (keys as in `peft_model.state_dict()`) replaces the model's own weights (LoRA's key layout).
    """
    if state_dict is not None:
        inner, prefix = "base_model.model.", peft_model.base_model.prefix
        return {key[len(inner):].replace(".base_layer.", "."): value for key, value in state_dict.items()
                if key.startswith(inner) and prefix not in key}
    try:
        from peft import get_base_model_state_dict
    except ImportError:  # older PEFT: LoRA wraps each target module and keeps its weights under `base_layer`
        prefix = peft_model.base_model.prefix
        return {key.replace(".base_layer.", "."): value
                for key, value in peft_model.get_base_model().state_dict().items() if prefix not in key}
    return get_base_model_state_dict(peft_model)


def _save_adapter(model: Any, adapter: str, agent_dir: str, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """Save one adapter of a PeftModel as a standalone adapter folder (from `state_dict`, keyed as
    `model.state_dict()`, when given)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    os.makedirs(agent_dir, exist_ok=True)
    # An offline name ("smollm2-135m-instruct", "toy") is neither a Hub id nor a folder: the saved adapter records the
    # folder the name stands for on this machine, as PEFT records any base loaded from a folder, so that PEFT reads
    # the base's config.json (to see whether the vocabulary grew) and a plain `AutoPeftModelForCausalLM` loads the
    # agent offline. The team keeps the name (`team_config.json`, the model card), which loads on any machine.
    peft_config, recorded = model.peft_config[adapter], model.peft_config[adapter].base_model_name_or_path
    if recorded:
        peft_config.base_model_name_or_path = resolve_model_name(recorded)
    try:
        state = get_peft_model_state_dict(model, state_dict=state_dict, adapter_name=adapter)
        config = copy.deepcopy(peft_config)
    finally:
        peft_config.base_model_name_or_path = recorded
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()},
              os.path.join(agent_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    config.inference_mode = True
    if config.task_type is None:  # PEFT's `AutoPeftModelForCausalLM` picks its class from the task type
        config.task_type = "CAUSAL_LM"
    config.save_pretrained(agent_dir)
