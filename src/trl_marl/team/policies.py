"""`AgentTeam`: the policies of a team of LLM agents, in one of three layouts.

| mode       | what it is                                                  | when                                |
|------------|-------------------------------------------------------------|-------------------------------------|
| `adapters` | one base model, one LoRA adapter per agent                  | homogeneous teams, small memory     |
| `models`   | a separate model (and tokenizer) per agent                  | heterogeneous teams, full fine-tune |
| `shared`   | one set of weights for all agents (prompts tell roles apart)| parameter-sharing baseline          |

In `adapters` mode every agent's completions come from **one batched `generate` call** (PEFT's mixed-adapter
batches), and the reference policy is the base model with adapters disabled, so memory stays about one base
model plus N adapters. In `models` mode each agent has its own weights; its reference policy is a frozen copy
(made only when a KL penalty needs it) or, with a LoRA config, the same model with its adapter disabled.
`continuous_batching_config` switches generation to transformers' continuous batching (`generate_batch`), which
runs one policy per model: for `models` and `shared` teams, not for mixed-adapter batches.

The team is an `nn.Module`, so `transformers.Trainer` and `accelerate` can prepare, wrap and checkpoint it.
Its `forward` computes the per-token log-probabilities of *every* agent in one call (one forward per optimizer
micro-step, as DistributedDataParallel requires).

`AgentTeam` is assembled from one mixin per role, each in its own module of `trl_marl.team`: the log-probability
forwards (`forward.LogProbMixin`), sampling (`sampling.SamplingMixin`, which hands the rows to the team's generation
backend, a `generation.GenerationBackend`, and returns its `generation.Generation`), the active adapter and
activation checkpointing (`adapters.AdapterMixin`), saving and loading (`saving.SavingMixin`), text in and text out
and merged adapters (`chat.ChatMixin`).
This module holds the layouts, the per-(turn, agent) slots and the reference policies.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedModel

from ..core import DEFAULT_CHUNK_ELEMENTS
from ..utils.inputs import check_lora_targets, check_model_path
from ..utils.model_names import resolve_model_name
from ..utils.quiet import peft_quietly
from ..utils.tokens import load_tokenizer
from .adapters import AdapterMixin, AdapterSwitch
from .chat import ChatMixin
from .compile import call_model
from .forward import LogProbMixin
from .sampling import SamplingMixin
from .saving import SavingMixin

TEAM_MODES = ("adapters", "models", "shared")


class AgentTeam(LogProbMixin, SamplingMixin, ChatMixin, AdapterMixin, SavingMixin, nn.Module):
    """The policies of a team of agents (see the module docstring for the three modes).

    Build a team with [`AgentTeam.build`] (from a model name, a model, or a list of them) or reload a saved one
    with [`AgentTeam.from_pretrained`].

    Args:
        models (`list[PreTrainedModel]`): The distinct models of the team (one in `adapters`/`shared` mode).
        tokenizers (`list`): One tokenizer per agent.
        mode (`str`): `"adapters"`, `"models"` or `"shared"`.
        agent_model (`list[int]`): For each agent, the index of its model in `models`.
        agent_adapter (`list[str | None]`): For each agent, the PEFT adapter it uses (`None`: no adapter).
        policy_turns (`int`): 1 (a member per agent), or the number of turns T when every (turn, agent) has its own
            member (MAPoRL's theta_{t,a}: turn t of agent a is member `(t - 1) * A + a`, see [`AgentTeam.slot`]).
        share_prompt_prefill (`bool`): In [`AgentTeam.generate`], run the prompt's forward once for rows that repeat
            the same prompt through the same weights (the G samples of a node; agents of one model and one adapter
            that see the same prompt) and copy its KV cache to every such row (`trl_marl.team.generation.prefill`).
            Agents with different adapters or models never share a prefill: their keys and values differ. Sampling
            is unchanged up to floating-point reordering; False runs one prefill per row, as a plain `generate`.

    Example:

    ```python
    from peft import LoraConfig
    from trl_marl import AgentTeam

    team = AgentTeam.build("Qwen/Qwen2.5-0.5B-Instruct", num_agents=2, peft_config=LoraConfig(r=16))
    answers = team.chat(0, ["Write a haiku."], max_new_tokens=32)  # text in, text out (see `team.chat`)
    team.save_pretrained("my-team")  # my-team/agent_0/, my-team/agent_1/, my-team/team_config.json
    team = AgentTeam.from_pretrained("my-team")
    ```
    """

    def __init__(
        self,
        models: Sequence[PreTrainedModel],
        tokenizers: Sequence[Any],
        mode: str,
        agent_model: Sequence[int],
        agent_adapter: Sequence[str | None],
        policy_turns: int = 1,
        share_prompt_prefill: bool = True,
    ) -> None:
        super().__init__()
        if mode not in TEAM_MODES:
            raise ValueError(f"Unknown team mode {mode!r}; choose one of {TEAM_MODES}.")
        if not (len(tokenizers) == len(agent_model) == len(agent_adapter)):
            raise ValueError("`tokenizers`, `agent_model` and `agent_adapter` need one entry per agent.")
        self.models = nn.ModuleList(models)
        self.tokenizers = list(tokenizers)
        self.mode = mode
        self.agent_model = list(agent_model)
        self.agent_adapter = list(agent_adapter)
        self.ref_models: list[PreTrainedModel | None] = [None] * len(self.models)  # frozen copies, when needed
        self.temperature = 1.0  # logits are divided by it before log-softmax, as in TRL's GRPO
        # a `transformers.ContinuousBatchingConfig`: generate with `generate_batch` (continuous batching) instead of
        # `generate`; only for teams whose models each run one policy (see `generate_with_continuous_batching`)
        self.continuous_batching_config: Any = None
        # the `team.generation.GenerationBackend` that samples: the team's own decoding (`TransformersBackend`) unless
        # a trainer or the user sets another (setting None restores it; see `SamplingMixin.generation_backend`)
        self.generation_backend = None
        # decode with `team.generation.lean` (generate's tokens without its per-call setup) where it supports the
        # settings
        self.lean_decode = True
        # the causal LM call of the log-probability forwards: eager, or a `team.compile.CompiledForward`
        # (`compile_forwards`; generation always runs eager)
        self.forward_call: Callable[..., Any] = call_model
        # `adapters` mode: `forward` runs the batches of several agents as one forward through the shared base model,
        # each row through its agent's adapter (`_joint_logps`), where it can; False: one forward per agent
        self.joint_adapter_forward = True
        # log-probability forwards take each token's log-probability through the LM head a chunk of positions at a
        # time, with at most this many logits per chunk (`team.forward.head_path`; TRL's fused LM head does the same);
        # 0: the full [batch, length, vocab] logits at once (the path of models that `head_path` refuses)
        self.logprob_chunk_elements = DEFAULT_CHUNK_ELEMENTS
        self._joint_rows: tuple[list[str], Any] | None = None  # the rows' adapters and plan while a joint forward runs
        self._checkpointing_kwargs: dict | None = None  # set by `activation_checkpointing_enable`
        self.frozen: set[int] = set()  # agents whose weights are not trained (see `freeze_agents`)
        self._adapter_switches: dict[int, AdapterSwitch] = {}  # per PEFT model, made on the first switch
        # Set by a trainer while the team's weights are sharded across processes (FSDP2, DeepSpeed ZeRO-3): given
        # whether this process has episodes left, whether any process has; the rollout then plays turns in lockstep.
        self.lockstep: Callable[[bool], bool] | None = None
        if policy_turns < 1 or len(agent_model) % policy_turns:
            raise ValueError(f"{len(agent_model)} members cannot be split into {policy_turns} turns of agents.")
        self.policy_turns = policy_turns
        self.share_prompt_prefill = share_prompt_prefill
        for tok in self.tokenizers:
            if tok.pad_token_id is None:
                raise ValueError(
                    f"The tokenizer of {type(tok).__name__} has no pad token: set one before training, e.g. "
                    "`tokenizer.pad_token = tokenizer.eos_token`."
                )
        self._check_shared_tokenizers()

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(
        cls,
        model: str | PreTrainedModel | Sequence[str | PreTrainedModel] | AgentTeam,
        num_agents: int,
        mode: str | None = None,
        peft_config: Any = None,
        processing_class: Any = None,
        model_init_kwargs: dict | None = None,
        policy_turns: int = 1,
    ) -> AgentTeam:
        """Build a team from one model (or name) shared by all agents, or one model (or name) per agent.

        Args:
            model: A model, a model id / local path, a list with one of those per agent, or an `AgentTeam`.
            num_agents: Number of agents.
            mode: `"adapters"`, `"models"` or `"shared"`. Default: `"models"` for a list, `"adapters"` for one
                model with a `peft_config`, otherwise `"models"` (each agent gets its own copy of the weights).
            peft_config: A `peft.PeftConfig` (LoRA). Required for `"adapters"`; optional otherwise.
            processing_class: A tokenizer, or one per agent. Default: loaded from each model's name or path.
            model_init_kwargs: Keyword arguments for `AutoModelForCausalLM.from_pretrained` when names are given.
            policy_turns: With T > 1, every (turn, agent) gets its own policy (MAPoRL's theta_{t,a}): the team has
                `num_agents * T` members, built from the same model(s) (a list of models is copied per turn).
        """
        members = num_agents * policy_turns
        if isinstance(model, AgentTeam):
            if model.num_agents != members:
                raise ValueError(
                    f"The team has {model.num_agents} members but `num_agents={num_agents}` with "
                    f"`policy_turns={policy_turns}` needs {members} (one per agent and turn of policies)."
                )
            model.policy_turns = policy_turns
            return model
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
                loaded.trl_marl_model_name = m  # the name the user passed (e.g. "toy"), for the model card
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
            tokenizers = cls._per_agent_tokenizers(processing_class, model, num_agents, tokenizer_for)
        else:
            if mode is None:
                mode = "adapters" if (peft_config is not None and num_agents > 1) else "models"
            if mode == "adapters" and peft_config is None:
                raise ValueError("`mode='adapters'` needs a `peft_config` (e.g. `peft.LoraConfig(r=16)`).")
            base = load(model)
            tokenizers = cls._per_agent_tokenizers(processing_class, [model] * num_agents, num_agents, tokenizer_for)
            if mode == "models":
                models = [base] + [_agent_copy(model, base, load) for _ in range(num_agents - 1)]
            else:
                models = [base]
        return cls._assemble(models, tokenizers, mode, num_agents, peft_config)

    @staticmethod
    def _per_agent_tokenizers(processing_class: Any, models: Sequence[Any], num_agents: int, load: Any) -> list[Any]:
        if processing_class is None:
            cache: dict[int, Any] = {}
            return [cache.setdefault(id(m), load(m)) for m in models]
        if isinstance(processing_class, (list, tuple)):
            if len(processing_class) != num_agents:
                raise ValueError(f"Got {len(processing_class)} tokenizers for {num_agents} agents.")
            return list(processing_class)
        return [processing_class] * num_agents

    @classmethod
    def _assemble(
        cls, models: list[PreTrainedModel], tokenizers: list[Any], mode: str, num_agents: int, peft_config: Any
    ) -> AgentTeam:
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

    def _check_shared_tokenizers(self) -> None:
        if self.mode == "models":
            return
        ref = self.tokenizers[0]
        for i, tok in enumerate(self.tokenizers[1:], start=1):
            if tok is ref:
                continue
            if tok.get_vocab() != ref.get_vocab() or tok.pad_token_id != ref.pad_token_id:
                raise ValueError(
                    f"With `team_mode={self.mode!r}` all agents share one model and one generation batch, but agent "
                    f"{i}'s tokenizer differs from agent 0's (vocabulary or pad token). Use the same tokenizer for "
                    "every agent, or, for a heterogeneous team, `team_mode='models'` in the trainer's config "
                    "(MAGRPOConfig or MultiAgentPPOConfig; `mode='models'` for `AgentTeam.build`)."
                )

    # ------------------------------------------------------------------ properties
    @property
    def num_agents(self) -> int:
        return len(self.agent_model)

    @property
    def config(self) -> Any:
        """The config of agent 0's model (what `transformers.Trainer` inspects)."""
        return self.policy(0).config

    @property
    def _no_split_modules(self) -> list[str]:
        """The layer classes of the agents' models: FSDP (accelerate's transformer wrap policy) shards each such
        layer of every agent as a unit of its own."""
        return no_split_modules(self.models)

    @property
    def agents_per_turn(self) -> int:
        """The number of agents of the environment (members / `policy_turns`)."""
        return self.num_agents // self.policy_turns

    def slot(self, turn: int, agent_index: int) -> int:
        """The member (policy) that plays agent `agent_index` at turn `turn` (1-based).

        Member `agent_index` at every turn, or `(turn - 1) * A + agent_index` with per-turn policies (turns past
        `policy_turns` keep the last turn's policies).
        """
        if self.policy_turns == 1:
            return agent_index
        return (min(turn, self.policy_turns) - 1) * self.agents_per_turn + agent_index

    def policy(self, agent_index: int) -> PreTrainedModel:
        """The model that agent `agent_index` runs (a `PeftModel` when adapters are used)."""
        return self.models[self.agent_model[agent_index]]

    def base_model_of(self, agent_index: int) -> PreTrainedModel:
        model = self.policy(agent_index)
        return model.get_base_model() if self.agent_adapter[agent_index] is not None else model

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def __repr__(self) -> str:  # a short summary instead of every layer
        return f"AgentTeam(mode={self.mode!r}, num_agents={self.num_agents}, models={len(self.models)})"

    def freeze_agents(self, agent_indices: Sequence[int]) -> None:
        """Stop training these agents: their weights keep `requires_grad=False` (e.g. partners fixed at their
        pretrained policy, for the "train each agent alone" baseline)."""
        for a in agent_indices:
            if not 0 <= a < self.num_agents:
                raise ValueError(f"Cannot freeze agent {a}: the team has agents 0..{self.num_agents - 1}.")
            if self.mode == "shared":
                raise ValueError("In `shared` mode every agent runs the same weights: no single agent can be frozen.")
            self.frozen.add(a)
            adapter = self.agent_adapter[a]
            if self.mode == "adapters":
                self.policy(a).set_requires_grad([adapter], requires_grad=False)
            elif adapter is not None:
                self.policy(a).set_requires_grad([adapter], requires_grad=False)
            else:
                self.policy(a).requires_grad_(False)

    # ------------------------------------------------------------------ reference policies
    def create_reference_models(self) -> None:
        """Make frozen copies of models without adapters, to serve as the KL reference policy."""
        for i, model in enumerate(self.models):
            has_adapter = any(self.agent_adapter[a] is not None for a, m in enumerate(self.agent_model) if m == i)
            if not has_adapter and self.ref_models[i] is None:
                if is_partitioned(model):
                    raise ValueError(
                        "A frozen reference copy of an agent's model cannot be made from weights that DeepSpeed "
                        "ZeRO-3 partitioned when it loaded them. Under ZeRO-3 use `team_mode='adapters'` (the "
                        "reference is the base model with the adapter disabled), or `beta=0.0` in MAGRPO, or ZeRO-2 / "
                        "FSDP2."
                    )
                ref = copy.deepcopy(model).eval()
                ref.requires_grad_(False)
                # stored outside the module tree: never trained, never checkpointed, never wrapped by DDP
                self.ref_models[i] = ref

    @contextmanager
    def acting(self, agent_index: int, reference: bool = False) -> Any:
        """The model that computes member `agent_index`'s policy (or, with `reference`, its reference policy).

        The reference of a member with an adapter is its model with adapters disabled (the trainable flags that
        `disable_adapter` resets are restored afterwards), else its frozen copy (`create_reference_models`, or a
        `ref_model` a trainer installed).
        """
        if not reference:
            yield self._activate(agent_index)
            return
        model_index = self.agent_model[agent_index]
        if self.agent_adapter[agent_index] is not None and self.ref_models[model_index] is None:
            model = self.models[model_index]
            # Disabling and re-enabling the adapters leaves only the active one trainable: restore the flags.
            requires_grad = [(p, p.requires_grad) for p in model.parameters()]
            try:
                with model.disable_adapter():
                    yield model
            finally:
                for param, flag in requires_grad:
                    param.requires_grad_(flag)
            return
        ref = self.ref_models[model_index]
        if ref is None:
            raise RuntimeError("No reference model: call `team.create_reference_models()` first.")
        yield ref.to(self.device)


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


def no_split_modules(modules: Sequence[nn.Module]) -> list[str]:
    """The union, in order, of the `_no_split_modules` (layer classes) of `modules` (or of their PEFT base models)."""
    names: dict[str, None] = {}
    for module in modules:
        base = module.get_base_model() if hasattr(module, "get_base_model") else module
        names.update(dict.fromkeys(getattr(base, "_no_split_modules", None) or []))
    return list(names)
