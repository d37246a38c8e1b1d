"""How `AgentTeam.build` makes a team: the models loaded (or copied per agent), their tokenizers, and the adapters.

`AgentTeam.build` checks a team that it is handed and calls [`build_team`] for anything else; the layouts themselves
are described in `trl_marl.team.policies`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from ..utils.inputs import check_lora_targets, check_model_path
from ..utils.model_names import resolve_model_name
from ..utils.quiet import peft_quietly
from ..utils.tokens import load_tokenizer

__all__ = ["build_team", "is_partitioned"]


def build_team(cls: Any, model: str | PreTrainedModel | Sequence[str | PreTrainedModel], num_agents: int,
               mode: str | None, peft_config: Any, processing_class: Any, model_init_kwargs: dict | None,
               policy_turns: int) -> Any:
    """[`AgentTeam.build`] for a model, a name, or a list of them (the arguments are `build`'s): a team of class
    `cls`."""
    members = num_agents * policy_turns
    if policy_turns > 1:
        if isinstance(model, (list, tuple)):
            if len(model) != num_agents:
                raise ValueError(f"Got {len(model)} models for {num_agents} agents.")
            model = [m if (t == 0 or isinstance(m, str)) else copy.deepcopy(m)
                     for t in range(policy_turns) for m in model]
            if isinstance(processing_class, (list, tuple)):
                processing_class = list(processing_class) * policy_turns
        team = cls.build(model, members, mode=mode, peft_config=peft_config, processing_class=processing_class,
                         model_init_kwargs=model_init_kwargs)
        team.policy_turns = policy_turns
        return team
    kwargs = dict(model_init_kwargs or {})

    def load(m: str | PreTrainedModel) -> PreTrainedModel:
        if isinstance(m, str):
            check_model_path(resolve_model_name(m))
            loaded = AutoModelForCausalLM.from_pretrained(resolve_model_name(m), **kwargs)
            if resolve_model_name(m) != m:  # a registered name ("toy", "smollm2-135m-instruct"): keep it, not
                loaded.config.name_or_path = loaded.name_or_path = m  # its cache folder (cards, adapters)
            # the name the user passed (e.g. "toy"), for the model card (`nn.Module` types its attributes as tensors
            # or modules; a string is stored as a plain attribute)
            cast(Any, loaded).trl_marl_model_name = m
            return loaded
        return m

    def tokenizer_for(m: str | PreTrainedModel) -> Any:
        name = resolve_model_name(m) if isinstance(m, str) else m.config._name_or_path
        if not name:
            raise ValueError("Pass `processing_class`: the model has no name or path to load a tokenizer from.")
        return load_tokenizer(name)

    if isinstance(model, (list, tuple)):
        if len(model) != num_agents:
            raise ValueError(f"Got {len(model)} models for `num_agents={num_agents}`: pass one model per agent.")
        if mode not in (None, "models"):
            raise ValueError(
                f"A list of models (one per agent) means a team in `models` mode, got mode={mode!r}: set "
                "`team_mode='models'` in the trainer's config (or leave it None), or `AgentTeam.build(..., "
                "mode='models')`."
            )
        mode = "models"
        models = [load(m) for m in model]
        tokenizers = _per_agent_tokenizers(processing_class, model, num_agents, tokenizer_for)
    else:
        if mode is None:
            mode = "adapters" if (peft_config is not None and num_agents > 1) else "models"
        if mode == "adapters" and peft_config is None:
            raise ValueError("`mode='adapters'` needs a `peft_config` (e.g. `peft.LoraConfig(r=16)`).")
        one = cast("str | PreTrainedModel", model)  # not a list or tuple: one model or name for every agent
        base = load(one)
        tokenizers = _per_agent_tokenizers(processing_class, [one] * num_agents, num_agents, tokenizer_for)
        if mode == "models":
            models = [base] + [_agent_copy(one, base, load) for _ in range(num_agents - 1)]
        else:
            models = [base]
    return _assemble(cls, models, tokenizers, mode, num_agents, peft_config)


def _per_agent_tokenizers(processing_class: Any, models: Sequence[Any], num_agents: int, load: Any) -> list[Any]:
    if processing_class is None:
        cache: dict[int, Any] = {}
        return [cache.setdefault(id(m), load(m)) for m in models]
    if isinstance(processing_class, (list, tuple)):
        if len(processing_class) != num_agents:
            raise ValueError(f"Got {len(processing_class)} tokenizers for {num_agents} agents.")
        return list(processing_class)
    return [processing_class] * num_agents


def _assemble(
    cls: Any, models: list[PreTrainedModel], tokenizers: list[Any], mode: str, num_agents: int, peft_config: Any
) -> Any:
    if peft_config is not None:
        for model in models:
            check_lora_targets(model, peft_config)
    if mode == "adapters":
        from peft import get_peft_model

        names = [f"agent_{i}" for i in range(num_agents)]
        with peft_quietly():
            peft_model = get_peft_model(models[0], peft_config, adapter_name=names[0])
            for name in names[1:]:
                peft_model.add_adapter(name, peft_config)
        # `add_adapter` leaves only the active adapter trainable, but `Trainer.create_optimizer` runs before any
        # forward and keeps only parameters that require gradients: every agent's adapter must be trainable now.
        peft_model.set_requires_grad(names, requires_grad=True)
        return cls([peft_model], tokenizers, mode, [0] * num_agents, names)
    if peft_config is not None:
        from peft import get_peft_model

        with peft_quietly():
            models = [get_peft_model(m, peft_config) for m in models]
        adapters: list[str | None] = ["default"] * num_agents
    else:
        adapters = [None] * num_agents
    agent_model = list(range(num_agents)) if mode == "models" else [0] * num_agents
    return cls(models, tokenizers, mode, agent_model, adapters)


def is_partitioned(model: nn.Module) -> bool:
    """Whether DeepSpeed ZeRO-3 partitioned `model`'s weights (transformers' `from_pretrained` does so when a ZeRO-3
    config is active): each process then holds a slice of every weight, and the module's own tensors are empty."""
    return any(hasattr(param, "ds_id") for param in model.parameters())


def _agent_copy(model: str | PreTrainedModel, base: PreTrainedModel, load: Any) -> PreTrainedModel:
    """Another agent's own copy of `base` (`models` mode from one model): a deep copy, or a fresh load of the same
    name when DeepSpeed ZeRO-3 partitioned the weights at load time (a deep copy of those is empty)."""
    if not is_partitioned(base):
        return copy.deepcopy(base)
    if isinstance(model, str):
        return load(model)
    raise ValueError(
        "Under DeepSpeed ZeRO-3 the model's weights are partitioned and cannot be copied for the other agents: pass "
        "the model's name or path (each agent then loads its own copy), or one model per agent."
    )
