"""Critics as adapters: each value function a LoRA adapter and a scalar head on the team's own base model.

`MultiAgentPPOConfig(value_adapter=True)` gives each critic (one per policy, or the central one of MAAC) an adapter
`critic_<i>` beside the agents' policy adapters on the PEFT model of the agent it judges, and a one-output linear head
(`score`) on the backbone's last hidden state. A value forward activates the critic's adapter and runs the base
model's backbone: the base weights are shared by the policies, the critics and the reference (adapters disabled), so a
team of three agents on a 1.5B base holds one copy of the base instead of four, and trains and stores optimizer states
for adapters and heads only. The value of a response token is then exactly what a separate sequence classifier of the
same base, with the same LoRA adapter and the same head, computes (`tests/trainers/test_adapter_critics.py`).

A critic saves as a PEFT adapter of a sequence classifier (`task_type="SEQ_CLS"`, the head in `modules_to_save`):
`AutoPeftModelForSequenceClassification.from_pretrained(folder, num_labels=1)` loads it, and so does
`trl_marl.trainers.ppo.load_value_model`, whose result is accepted as `value_model=` by either kind of critic.

Example:

```python
from peft import LoraConfig
from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer

config = MultiAgentPPOConfig(output_dir="debate", num_agents=3, value_adapter=True)
trainer = MultiAgentPPOTrainer(config, "Qwen/Qwen2.5-1.5B-Instruct", train_dataset=rows, reward_funcs=[reward],
                               peft_config=LoraConfig(r=16, target_modules="all-linear"))
trainer.wrapper.value_models[0]  # AdapterCritic(adapter='critic_0', model=0)
```
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from ...team import AgentTeam

if TYPE_CHECKING:
    from peft import PeftModel
    from transformers import PreTrainedModel

__all__ = ["AdapterCritic", "HEAD_KEY", "build_adapter_critics", "critic_adapter_name"]

HEAD_KEY = "base_model.model.score.weight"
"""The head's key in a saved critic adapter: where PEFT keeps a sequence classifier's `score` (`modules_to_save`)."""
ADAPTER_FILE = "adapter_model.safetensors"


def critic_adapter_name(index: int) -> str:
    """The adapter name of critic `index` on the team's PEFT model."""
    return f"critic_{index}"


class ValueHead(nn.Linear):
    """The scalar head of an adapter critic: `Linear(hidden_size, 1, bias=False)` as transformers' sequence
    classifiers' `score`, reading the hidden states in its own dtype (float32 on a bf16 or 4-bit base)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return super().forward(hidden.to(self.weight.dtype))


class AdapterCritic(nn.Module):
    """A value model that is an adapter and a head on one of the team's PEFT models.

    It looks like the transformers sequence classifiers PPO's value functions read (`trainers.ppo.value`): a
    backbone under `base_model_prefix` (the team model's backbone, run with this critic's adapter active) and a
    `score` head. Its only own weights are the head's; the adapter's LoRA weights belong to the team's model, where
    the optimizer finds them with the policies' (`AdapterControl.other_adapters` keeps them trainable).

    Args:
        team: The team whose model holds the adapter (a plain reference, not a submodule).
        model_index: Which of `team.models` holds it.
        adapter_name: The adapter's name on that model (`critic_<i>`).
        head: The value head (`ValueHead`).
    """

    base_model_prefix = "backbone"

    def __init__(self, team: AgentTeam, model_index: int, adapter_name: str, head: ValueHead) -> None:
        super().__init__()
        self.score = head
        self.model_index = model_index
        self.adapter_name = adapter_name
        object.__setattr__(self, "_team", team)  # the team's weights stay the team's: no second owner in state_dict

    def __repr__(self) -> str:
        return f"AdapterCritic(adapter={self.adapter_name!r}, model={self.model_index})"

    @property
    def team(self) -> AgentTeam:
        return cast(AgentTeam, self.__dict__["_team"])

    @property
    def peft_model(self) -> PeftModel:
        """The team's PEFT model that holds this critic's adapter."""
        return cast("PeftModel", self.team.models[self.model_index])

    @property
    def config(self) -> Any:
        return self.peft_model.config

    @property
    def dropout_model(self) -> nn.Module:
        """The module whose dropout a value forward draws (the base model with its adapters)."""
        return self.peft_model

    @property
    def backbone(self) -> Any:
        """The base model's backbone, called with this critic's adapter active."""
        return self._backbone_forward

    def _backbone_forward(self, **kwargs: Any) -> Any:
        model = self.peft_model
        self.team.adapter_control.set_active_adapter(model, self.adapter_name)
        inner = cast("PreTrainedModel", model.get_base_model())
        return getattr(inner, inner.base_model_prefix)(**kwargs)

    def requires_grad_(self, requires_grad: bool = True) -> AdapterCritic:
        """Train this critic (its adapter and head) or not (a frozen agent's critic)."""
        self.score.requires_grad_(requires_grad)
        self.team.adapter_control.set_trained(self.adapter_name, requires_grad)
        return self

    # ------------------------------------------------------------------ saving
    def adapter_state(self, state_dict: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """The critic's tensors as a PEFT sequence classifier's adapter saves them: the LoRA weights (from
        `state_dict`, keyed as the PEFT model's own `state_dict()`, when given) and the head under [`HEAD_KEY`]."""
        from peft import get_peft_model_state_dict

        state = dict(get_peft_model_state_dict(self.peft_model, state_dict=state_dict,
                                               adapter_name=self.adapter_name))
        state[HEAD_KEY] = self.score.weight
        return state

    def save(self, folder: str, state_dict: dict[str, torch.Tensor] | None = None,
             head: torch.Tensor | None = None) -> list[str]:
        """Save the critic to `folder` as a PEFT adapter of a sequence classifier (`adapter_config.json`,
        `adapter_model.safetensors` with the head). Returns the tensor names written."""
        from safetensors.torch import save_file

        from ...utils.model_names import resolve_model_name

        state = self.adapter_state(state_dict)
        if head is not None:
            state[HEAD_KEY] = head
        os.makedirs(folder, exist_ok=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, os.path.join(folder, ADAPTER_FILE),
                  metadata={"format": "pt"})
        config: Any = copy.deepcopy(self.peft_model.peft_config[self.adapter_name])  # a LoraConfig or another tuner's
        name = config.base_model_name_or_path or getattr(self.config, "_name_or_path", None) or None
        config.base_model_name_or_path = resolve_model_name(name) if name else None
        config.task_type = "SEQ_CLS"
        config.modules_to_save = ["score"]
        config.inference_mode = True
        config.save_pretrained(folder)
        classifier = copy.deepcopy(self.config)  # the base's config as a one-label classifier's, for a plain PEFT load
        classifier.num_labels = 1
        classifier.save_pretrained(folder)
        return sorted(state)

    def load_state_(self, state: dict[str, torch.Tensor], source: str) -> None:
        """Set the critic's adapter and head from `state` (keyed as [`adapter_state`]: a saved critic, or the
        adapter of a PEFT sequence classifier).

        Raises:
            ValueError: `state` has no head, or its LoRA tensors are not this critic's (names or shapes).
        """
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        if HEAD_KEY not in state:
            raise ValueError(f"{source} holds no value head ({HEAD_KEY}): it is not a critic saved by a trainer or a "
                             "PEFT sequence classifier's adapter with its `score` head.")
        lora = {k: v for k, v in state.items() if k != HEAD_KEY}
        expected = get_peft_model_state_dict(self.peft_model, adapter_name=self.adapter_name)
        wrong = sorted(k for k in expected if k not in lora or lora[k].shape != expected[k].shape)
        extra = sorted(set(lora) - set(expected))
        if wrong or extra:
            raise ValueError(f"{source} does not fit critic {self.adapter_name!r}: missing or reshaped {wrong[:4]}, "
                             f"unknown {extra[:4]} (the critic's adapter uses the policies' `peft_config`).")
        set_peft_model_state_dict(self.peft_model, lora, adapter_name=self.adapter_name)
        with torch.no_grad():
            self.score.weight.copy_(state[HEAD_KEY].reshape(self.score.weight.shape))

    def load_(self, folder: str) -> None:
        """Load the critic saved in `folder` by [`save`] (to resume training)."""
        from safetensors.torch import load_file

        self.load_state_(load_file(os.path.join(folder, ADAPTER_FILE)), folder)


def _hidden_size(config: Any) -> int:
    size = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None)
    if not isinstance(size, int):
        raise ValueError(f"`value_adapter=True` needs the hidden size of {type(config).__name__} (`hidden_size`).")
    return size


def build_adapter_critics(team: AgentTeam, policy_sharing: str = "agent", critic: str = "per_agent",
                          value_model: nn.Module | Sequence[nn.Module] | None = None,
                          rank: int | None = None) -> list[AdapterCritic]:
    """One adapter critic per policy slot, or one for a shared policy or a centralized critic (MAAC), each on the PEFT
    model of the agent it judges (agent 0's for a single one), with the adapter configuration of that agent's policy
    adapter (no `modules_to_save`; with `rank`, that LoRA rank and `lora_alpha` scaled by `rank / r`) and a fresh
    head drawn as transformers draws a sequence classifier's `score` (normal, `initializer_range`). A `value_model`
    (a PEFT sequence classifier, e.g. from `load_value_model`; one, or one per critic) gives the critics' starting
    adapters and heads.

    Raises:
        ValueError: An agent has no LoRA adapter (the critics need the team's frozen base), or `value_model` does not
            fit.
    """
    n = 1 if policy_sharing == "shared" or critic == "centralized" else team.num_agents
    critics = []
    for index in range(n):
        adapter = team.agent_adapter[index]
        if adapter is None:
            raise ValueError(
                "`value_adapter=True` puts each critic as a LoRA adapter on the policies' frozen base model, but "
                f"agent {index}'s policy has no adapter (it trains every weight): pass a `peft_config` to the "
                "trainer, or leave `value_adapter=False` (a separate value model per critic).")
        model_index = team.agent_model[index]
        model = cast("PeftModel", team.models[model_index])
        config: Any = copy.deepcopy(model.peft_config[adapter])  # a LoraConfig or another tuner's
        config.modules_to_save = None  # the policy's auxiliary copies (e.g. of lm_head) are no use to a critic
        if rank is not None:
            if not hasattr(config, "r"):
                raise ValueError(f"`value_adapter_rank` sets a LoRA rank, but agent {index}'s adapter is a "
                                 f"{type(config).__name__}: leave `value_adapter_rank` unset.")
            config.lora_alpha = config.lora_alpha * rank / config.r
            config.r, config.rank_pattern, config.alpha_pattern = rank, {}, {}
        name = critic_adapter_name(index)
        team.adapter_control.add_adapter(model, name, config)
        inner = cast("PreTrainedModel", model.get_base_model())
        embeddings = inner.get_input_embeddings().weight
        # float32 on a half-precision or quantized base, as PEFT keeps the adapters' weights
        dtype = embeddings.dtype if embeddings.dtype in (torch.float32, torch.float64) else torch.float32
        head = ValueHead(_hidden_size(inner.config), 1, bias=False, device=embeddings.device, dtype=dtype)
        nn.init.normal_(head.weight, mean=0.0, std=float(getattr(inner.config, "initializer_range", 0.02)))
        critics.append(AdapterCritic(team, model_index, name, head))
    if value_model is not None:
        sources = [value_model] * n if isinstance(value_model, nn.Module) else list(value_model)
        if len(sources) != n:
            raise ValueError(f"Got {len(sources)} value models for {n} adapter critics: pass one, or one per critic.")
        for index, (critic_i, source) in enumerate(zip(critics, sources)):
            critic_i.load_state_(_peft_classifier_state(source), f"value_model[{index}]")
    return critics


def _peft_classifier_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter and head of a PEFT sequence classifier, keyed as a saved critic."""
    from peft import PeftModel, get_peft_model_state_dict

    if not isinstance(model, PeftModel):
        raise ValueError(
            "With `value_adapter=True`, `value_model=` starts the adapter critics from a PEFT sequence classifier "
            f"(`load_value_model(folder)` of a saved adapter critic), got {type(model).__name__}. Pass a full value "
            "model with `value_adapter=False`.")
    state = dict(get_peft_model_state_dict(model))
    head = next((v for k, v in state.items() if k.endswith("score.weight")), None)
    if head is not None:
        state = {k: v for k, v in state.items() if not k.endswith("score.weight")}
        state[HEAD_KEY] = head
    return state
