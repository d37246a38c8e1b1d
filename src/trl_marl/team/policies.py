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
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel

from ..core import entropy_from_logits, selective_log_softmax
from ..utils.inputs import check_lora_targets, check_model_path
from ..utils.model_names import resolve_model_name
from ..utils.tokens import (  # noqa: F401  (re-exported: importable from trl_marl.team as before)
    Prompt,
    is_chat,
    is_token_ids,
    joint_model_inputs,
    load_tokenizer,
    pad_left,
    pad_right,
    sequence_model_inputs,
    tokenize_prompts,
    truncate_after_eos,
)
from .adapters import AdapterSwitch
from .compile import CompiledForward, call_model
from .forward import checkpointing_paused, dropout_active, no_autograd, takes_logits_to_keep
from .generation.lean import decode
from .generation.prefill import shared_prefill_cache
from .mixed_adapters import sliced_adapter_rows, sliced_adapter_rows_plan

TEAM_CONFIG_NAME = "team_config.json"
TEAM_MODES = ("adapters", "models", "shared")


def _agent_dir(output_dir: str | os.PathLike, agent_index: int) -> str:
    return os.path.join(os.fspath(output_dir), f"agent_{agent_index}")


@dataclass
class AgentBatch:
    """Tokenized samples of one agent: left-padded prompts followed by right-padded completions."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def to(self, device: torch.device | str) -> AgentBatch:
        return AgentBatch(*(t.to(device) for t in (self.prompt_ids, self.prompt_mask, self.completion_ids,
                                                   self.completion_mask)))

    def __len__(self) -> int:
        return self.prompt_ids.size(0)


def _eos_ids(tokenizer: Any, model: PreTrainedModel) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, gen_eos):
        if value is None:
            continue
        ids.update(value if isinstance(value, list) else [value])
    return ids


def logits_dtype_autocast(logits: torch.Tensor) -> AbstractContextManager[Any]:
    """A context in which log-softmaxes of `logits` run in the logits' own dtype (autocast off), as in TRL.

    accelerate runs a prepared model's `forward` under autocast in bf16/fp16 training. `AgentTeam.forward` (and the
    PPO policy-value wrapper) compute log-probabilities inside that forward, where CUDA autocast would run
    `log_softmax` in float32 and keep a float32 copy of every completion logit for the backward: on an H100 that was
    6.5 bytes per logit more than TRL's `GRPOTrainer` (4.2 GiB at 32 x 128 completions over Qwen2.5's 152k-token
    vocabulary; benchmarks/RESULTS.md). TRL computes log-probabilities outside the model's forward, in the logits'
    dtype; so do we.
    """
    return torch.autocast(device_type=logits.device.type, enabled=False)


class AgentTeam(nn.Module):
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
    completions = team.generate([["Write a haiku."] * 4, ["Summarize it."] * 4], GenerationConfig(max_new_tokens=32))
    team.save_pretrained("my-team")  # my-team/agent_0/, my-team/agent_1/, my-team/team_config.json
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
        # a `team.generation.GenerationBackend` that samples instead of the team's own decoding (None: our own)
        self.generation_backend: Any = None
        # the backend's log-probability of every token of the last `generate` call's completions ([agent][row][t]),
        # None when the team decoded itself or the backend gave none (TRL's importance-sampling correction)
        self.sampling_logps: list[list[list[float]]] | None = None
        # decode with `team.generation.lean` (generate's tokens without its per-call setup) where it supports the
        # settings
        self.lean_decode = True
        # the causal LM call of the log-probability forwards: eager, or a `team.compile.CompiledForward`
        # (`compile_forwards`; generation always runs eager)
        self.forward_call: Callable[..., Any] = call_model
        # `adapters` mode: `forward` runs the batches of several agents as one forward through the shared base model,
        # each row through its agent's adapter (`_joint_logps`), where it can; False: one forward per agent
        self.joint_adapter_forward = True
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
            peft_model = get_peft_model(models[0], peft_config, adapter_name=names[0])
            for name in names[1:]:
                peft_model.add_adapter(name, peft_config)
            # `add_adapter` leaves only the active adapter trainable, but `Trainer.create_optimizer` runs before any
            # forward and keeps only parameters that require gradients: every agent's adapter must be trainable now.
            peft_model.set_requires_grad(names, requires_grad=True)
            return cls([peft_model], tokenizers, mode, [0] * num_agents, names)
        if peft_config is not None:
            from peft import get_peft_model

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

    def stop_token_ids(self, agent_index: int) -> set[int]:
        """The tokens that end agent `agent_index`'s completions by default: its tokenizer's EOS and every EOS of its
        model's generation config (instruct models often have several, e.g. `<|im_end|>` and `<|endoftext|>`)."""
        return _eos_ids(self.tokenizers[agent_index], self.base_model_of(agent_index))

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

    # ------------------------------------------------------------------ adapters
    def _activate(self, agent_index: int) -> PreTrainedModel:
        """Make agent `agent_index`'s adapter the active one while keeping every adapter trainable."""
        model = self.policy(agent_index)
        name = self.agent_adapter[agent_index]
        if name is not None and self.mode == "adapters":
            self._set_active_adapter(model, name)
        return model

    def _set_active_adapter(self, model: Any, name: str) -> None:
        if model.active_adapter != name:
            switch = self._adapter_switches.get(id(model))
            if switch is None or switch.model is not model:
                switch = self._adapter_switches[id(model)] = AdapterSwitch(model)
            # every adapter but the frozen agents' stays trainable: the optimizer keeps updating all of them
            trainable = [a for i, a in enumerate(self.agent_adapter) if a is not None and i not in self.frozen]
            switch.activate(name, trainable)

    def _checkpoint_contexts(self, user_context_fn: Any = None) -> tuple[Any, Any]:
        """`context_fn` of `torch.utils.checkpoint.checkpoint` in `adapters` mode.

        The agents of one forward share the checkpointed layers but not the active adapter, and the backward
        recomputes every layer after the last agent's forward: the recomputation must run with the adapter that was
        active when the layer first ran, or every agent but the last gets the gradients of the wrong policy. A joint
        forward over several agents' rows (`_joint_logps`) is recomputed with each row's adapter again.
        """
        model = self.models[0]
        name = model.active_adapter
        joint_rows = self._joint_rows  # a forward over several agents' rows (`_joint_logps`)
        forward_ctx, recompute_ctx = user_context_fn() if user_context_fn else (nullcontext(), nullcontext())

        @contextmanager
        def recompute() -> Any:
            if joint_rows is not None:  # each row through its agent's adapter again (the forward's plan)
                names, plan = joint_rows
                with sliced_adapter_rows(model, names, training=True, plan=plan), recompute_ctx:
                    yield
                return
            previous = model.active_adapter
            self._set_active_adapter(model, name)
            try:
                with recompute_ctx:
                    yield
            finally:
                self._set_active_adapter(model, previous)

        return forward_ctx, recompute()

    def activation_checkpointing_enable(
        self,
        activation_checkpointing_kwargs: dict | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
        gradient_checkpointing_kwargs: dict | None = None,
    ) -> None:
        """Enable activation (gradient) checkpointing in every model (called by `transformers.Trainer`).

        Every layer is checkpointed; checkpointing only every n-th layer and offloading activations are not
        supported for teams and raise an error rather than being ignored.
        """
        if every_n_layers != 1 or offload:
            raise ValueError(
                "AgentTeam checkpoints every layer: remove `every_n_layers`/`offload` from "
                "`activation_checkpointing_kwargs`."
            )
        kwargs = dict(activation_checkpointing_kwargs or gradient_checkpointing_kwargs or {"use_reentrant": False})
        self._checkpointing_kwargs = dict(kwargs)  # (`compile_forwards` enables it again)
        if self.mode == "adapters" and len(set(self.agent_adapter)) > 1:
            if kwargs.setdefault("use_reentrant", False):
                raise ValueError(
                    "`adapters` mode needs non-reentrant activation checkpointing (`use_reentrant=False`): the "
                    "recomputation in the backward must switch to each agent's adapter."
                )
            # A compiled forward's backward recomputes from its graph, whose inputs are the adapter weights that the
            # forward used (and dynamo refuses a `context_fn` that is not a pair of dispatch modes).
            if not isinstance(self.forward_call, CompiledForward):
                kwargs["context_fn"] = partial(self._checkpoint_contexts, kwargs.get("context_fn"))
        for model in self.models:
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            if hasattr(base, "activation_checkpointing_enable"):  # transformers' current name (5.2x)
                base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()

    gradient_checkpointing_enable = activation_checkpointing_enable

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

    # ------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[Prompt]], generation_config: GenerationConfig,
        chat_template_kwargs: dict | None = None, stop_token_ids: set[int] | None = None,
    ) -> list[tuple[list[list[int]], list[list[int]]]]:
        """Sample one completion per prompt for every agent.

        Rows that repeat a prompt through the same weights share one prefill when `share_prompt_prefill` is on (see
        the class docstring); agents with different adapters or models never do.

        Args:
            prompts: `prompts[a]` is the list of prompts of agent `a` (strings, chat messages or token ids).
            generation_config: Sampling settings (`max_new_tokens`, `temperature`, ...).
            stop_token_ids: Completions are cut after the first of these tokens. Default: the EOS tokens of the
                tokenizer and the model's generation config. An empty set keeps every generated token.

        Returns:
            For each agent, `(prompt_ids, completion_ids)`: token id lists.
        """
        if len(prompts) != self.num_agents:
            raise ValueError(f"Expected prompts for {self.num_agents} agents, got {len(prompts)}.")
        prompt_ids = [tokenize_prompts(self.tokenizers[a], prompts[a], chat_template_kwargs)
                      for a in range(self.num_agents)]
        self.sampling_logps = None
        backend = self.generation_backend
        if backend is not None and not getattr(backend, "decodes_rows", False):  # e.g. vLLM: all rows, cut below
            outputs, logps = backend.generate_with_logprobs(self, prompt_ids, generation_config)
            cut = [[truncate_after_eos(row, self._stop_ids(a, stop_token_ids)) for row in outputs[a]]
                   for a in range(self.num_agents)]
            if logps is not None:
                self.sampling_logps = [[list(lp[: len(row)]) for lp, row in zip(logps[a], cut[a])]
                                       for a in range(self.num_agents)]
            return [(prompt_ids[a], cut[a]) for a in range(self.num_agents)]
        completion_ids: list[list[list[int]] | None] = [None] * self.num_agents
        # Agents that run on the same model generate in one batch (one adapter name per row in `adapters` mode).
        for model_index, model in enumerate(self.models):
            agents = [a for a in range(self.num_agents) if self.agent_model[a] == model_index and prompt_ids[a]]
            # A 4-bit model generates in train mode (see `_keeps_train_mode`), where PEFT refuses mixed-adapter
            # batches: its agents then generate one after the other.
            groups = [[a] for a in agents] if _keeps_train_mode(model) else ([agents] if agents else [])
            for group in groups:
                rows = [ids for a in group for ids in prompt_ids[a]]
                outputs = self._generate_rows(model, group[0], rows, generation_config,
                                              [self.agent_adapter[a] for a in group for _ in prompt_ids[a]],
                                              stop_token_ids)
                start = 0
                for a in group:
                    completion_ids[a] = outputs[start: start + len(prompt_ids[a])]
                    start += len(prompt_ids[a])
        return [(prompt_ids[a], completion_ids[a] or []) for a in range(self.num_agents)]

    def _generate_rows(
        self, model: PreTrainedModel, agent_index: int, rows: list[list[int]], generation_config: GenerationConfig,
        adapter_names: list[str | None], stop_token_ids: set[int] | None = None,
    ) -> list[list[int]]:
        tokenizer = self.tokenizers[agent_index]
        ids, mask = pad_left(rows, tokenizer.pad_token_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        kwargs: dict[str, Any] = {}
        if self.mode == "adapters" and len(set(adapter_names)) > 1:
            kwargs["adapter_names"] = adapter_names
        elif self.mode == "adapters":
            self._activate(agent_index)
        was_training = model.training
        keeps_train_mode = _keeps_train_mode(model)
        if not keeps_train_mode:
            model.eval()
        try:
            # in train mode, checkpointed layers would drop the KV cache while decoding: pause checkpointing there
            with checkpointing_paused(model) if keeps_train_mode else nullcontext():
                outputs = self._decode_rows(model, ids, mask, rows, generation_config, adapter_names, kwargs)
        finally:
            model.train(was_training)
        return [truncate_after_eos(row, self._stop_ids(agent_index, stop_token_ids)) for row in outputs]

    def _stop_ids(self, agent_index: int, stop_token_ids: set[int] | None) -> set[int]:
        """The tokens an agent's completions are cut after: `stop_token_ids`, or [`stop_token_ids`] when None."""
        return self.stop_token_ids(agent_index) if stop_token_ids is None else stop_token_ids

    def _decode_rows(self, model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, rows: list[list[int]],
                     generation_config: GenerationConfig, adapter_names: list[str | None],
                     kwargs: dict[str, Any]) -> list[list[int]]:
        """The generated token ids of each row (prompt excluded, not yet cut at EOS)."""
        if self.continuous_batching_config is not None:
            if len(set(adapter_names)) > 1:
                raise ValueError("Continuous batching cannot take a mixed-adapter batch (one adapter per row).")
            return generate_with_continuous_batching(model, rows, generation_config, self.continuous_batching_config)
        # `inference_mode` when safe (`no_autograd`): no autograd bookkeeping in the many small ops of decoding;
        # nothing made here outlives the call but token id lists (continuous batching, above, keeps its own cache and
        # thread, and stays under `no_grad`)
        # a row-decoding backend (`"compiled"`) decodes the same batches, without a shared prefill (its static KV
        # caches outlive the call, kept apart per inference/no_grad mode)
        backend = self.generation_backend
        row_decode = backend.decode if backend is not None else decode
        with no_autograd():
            if self.share_prompt_prefill and backend is None:  # one prefill per distinct (prompt, adapter)
                cache = shared_prefill_cache(model, ids, mask, generation_config, kwargs.get("adapter_names"))
                if cache is not None:
                    kwargs["past_key_values"] = cache
            out = row_decode(model, ids, mask, generation_config, lean=self.lean_decode, **kwargs)
            return [row.tolist() for row in out[:, ids.size(1):]]

    # ------------------------------------------------------------------ log-probabilities
    def compile_forwards(self, backend: str | None = None, mode: str | None = None) -> None:
        """Run the log-probability forwards (training, old-policy, reference; not generation) through
        `torch.compile` with dynamic shapes (`team.compile`): the same values, one graph per model architecture,
        adapter and grad mode, compiled on first use. A trainer calls it when `args.torch_compile` is set.

        Example: `team.compile_forwards(backend="inductor")`; `team.forward_call = trl_marl.team.compile.call_model`
        goes back to eager.
        """
        self.forward_call = CompiledForward(backend, mode, num_agents=self.num_agents,
                                            on_failure=self._forwards_run_eager)
        if self._checkpointing_kwargs is not None:  # already on: without the eager recomputation's adapter switch
            self.activation_checkpointing_enable(self._checkpointing_kwargs)

    def _forwards_run_eager(self, reason: str) -> None:
        """A compiled forward failed (`CompiledForward` warned with `reason`): back to eager forwards, and to the
        eager recomputation's adapter switch when activation checkpointing is on."""
        self.forward_call = call_model
        if self._checkpointing_kwargs is not None:
            self.activation_checkpointing_enable(self._checkpointing_kwargs)

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

    def _logps(
        self, model: PreTrainedModel, batch: AgentBatch, compute_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        width = batch.completion_ids.size(1)
        if dropout_active(model):  # TRL's layout, so that dropout draws the same masks (`team.forward`)
            logits = self.forward_call(model, input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                                       logits_to_keep=width + 1).logits[:, :-1, :]
        else:  # the last completion token predicts nothing that is scored: the forward stops before it
            input_ids = torch.cat([batch.prompt_ids, batch.completion_ids[:, :-1]], dim=1)
            attention_mask = torch.cat([batch.prompt_mask, batch.completion_mask[:, :-1]], dim=1)
            logits = self.forward_call(model, input_ids=input_ids, attention_mask=attention_mask,
                                       logits_to_keep=width).logits
        return self._score(logits, batch, compute_entropy, entropy_grad)

    def _score(self, logits: torch.Tensor, batch: AgentBatch, compute_entropy: bool,
               entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities (and entropies) of `batch`'s completions from the logits that predict them."""
        with logits_dtype_autocast(logits):
            logits = logits / self.temperature
            logps = selective_log_softmax(logits, batch.completion_ids)
            entropy = None
            if compute_entropy:  # with gradients only when asked (an entropy bonus): they keep a softmax per chunk
                entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
        return logps, entropy

    def forward(
        self, batches: Sequence[AgentBatch | None], compute_entropy: bool = False, entropy_grad: bool = False
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """Per-token log-probabilities (and entropies) of each agent's completions under its current policy.

        One call covers every agent, so that a DistributedDataParallel wrapper sees one forward per backward.
        `batches[a]` is agent `a`'s samples (or `None` when it has none this step). The entropies are computed on
        detached logits (for logging and token selection) unless `entropy_grad` (an entropy bonus in the loss).
        """
        joint = self._joint_adapter_rows(batches)
        if joint is not None:
            return self._joint_logps(batches, joint, compute_entropy, entropy_grad)
        results: list[tuple[torch.Tensor, torch.Tensor | None] | None] = []
        for agent_index, batch in enumerate(batches):
            if batch is None or len(batch) == 0:
                results.append(None)
                continue
            model = self._activate(agent_index)
            results.append(self._logps(model, batch, compute_entropy, entropy_grad))
        return results

    def _joint_adapter_rows(self, batches: Sequence[AgentBatch | None]) -> tuple[list[str], Any] | None:
        """One adapter name per row of the agents' batches in order, and the row slices' plan for them
        (`team.mixed_adapters.sliced_adapter_rows_plan`), when [`AgentTeam.forward`] can run them as one forward
        through the shared base model (see `joint_adapter_forward`), else None."""
        agents = [a for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        if not self.joint_adapter_forward or self.mode != "adapters" or len(agents) < 2:
            return None
        if any(self.agent_adapter[a] is None or self.agent_model[a] != self.agent_model[agents[0]] for a in agents):
            return None
        model = self.policy(agents[0])
        if dropout_active(model):  # the per-agent forwards keep TRL's layout and dropout draws
            return None
        names = [self.agent_adapter[a] for a in agents for _ in range(len(batches[a]))]
        plan = sliced_adapter_rows_plan(model, names, training=model.training)
        return None if isinstance(plan, str) else (names, plan)

    def _joint_logps(
        self, batches: Sequence[AgentBatch | None], rows: tuple[list[str], Any], compute_entropy: bool,
        entropy_grad: bool,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """[`AgentTeam.forward`] of an `adapters` team as one forward over every agent's rows, each row through its
        agent's adapter (`team.mixed_adapters`), instead of one forward per agent.

        The rows of each agent keep the inputs they have in their own forward: prompts padded further on the left
        keep their position ids (passed explicitly), completions padded further on the right are masked and come
        after every scored position, so each agent's logits are those of its own forward up to floating-point
        reordering; each adapter gets the gradient of its own rows only.
        """
        model = self._activate(next(a for a, b in enumerate(batches) if b is not None and len(b) > 0))
        return self._joint_forward(model, batches, rows, compute_entropy, entropy_grad)

    def _joint_forward(
        self, model: PreTrainedModel, batches: Sequence[AgentBatch | None], rows: tuple[list[str], Any] | None,
        compute_entropy: bool, entropy_grad: bool,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """One forward of `model` over the rows of every non-empty batch, scored per batch; each row through the
        adapter that `rows` (`_joint_adapter_rows`) names for it (row slices), or, with `rows` None, every row through
        the model as it is."""
        agents = [a for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        input_ids, attention_mask, position_ids = joint_model_inputs([batches[a] for a in agents])
        widths = [batches[a].completion_ids.size(1) for a in agents]
        self._joint_rows = rows  # for the recomputation of checkpointed layers (`_checkpoint_contexts`)
        try:
            with nullcontext() if rows is None else sliced_adapter_rows(model, rows[0], training=model.training,
                                                                        plan=rows[1]):
                logits = self.forward_call(model, input_ids=input_ids, attention_mask=attention_mask,
                                           position_ids=position_ids, logits_to_keep=max(widths)).logits
        finally:
            self._joint_rows = None
        results: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * len(batches)
        start = 0
        for a, width in zip(agents, widths, strict=True):
            stop = start + len(batches[a])
            results[a] = self._score(logits[start:stop, :width], batches[a], compute_entropy, entropy_grad)
            start = stop
        return results

    @torch.no_grad()
    def reference_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the reference policy (adapter disabled, or the frozen copy)."""
        with self.acting(agent_index, reference=True) as model:
            return self._inference_logps(model, batch)

    @torch.no_grad()
    def policy_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the current policy, without gradients."""
        return self._inference_logps(self._activate(agent_index), batch)

    @torch.no_grad()
    def inference_logps_all(self, batches: Sequence[AgentBatch | None],
                            reference: bool = False) -> list[torch.Tensor | None]:
        """[`AgentTeam.policy_logps`] (or, with `reference`, [`AgentTeam.reference_logps`]) of every agent that has a
        batch, as one forward over all their rows where the team's training forward takes one (`adapters` mode, see
        [`AgentTeam.forward`]; the reference of adapters is their base model, every row through it): fewer, larger
        forwards, with every agent's logits at once.

        Example: `old_logps = team.inference_logps_all([batch_0, None, batch_2])  # [tensor, None, tensor]`
        """
        rows = self._joint_adapter_rows(batches)
        if rows is not None and reference and any(self.ref_models[self.agent_model[a]] is not None
                                                  for a, b in enumerate(batches) if b is not None):
            rows = None  # frozen copies: one forward per agent
        if rows is None or any(b is not None and len(b) == 0 for b in batches):
            scored = self.reference_logps if reference else self.policy_logps
            return [None if b is None else scored(a, b) for a, b in enumerate(batches)]
        first = next(a for a, b in enumerate(batches) if b is not None)
        with self.acting(first, reference=reference) as model, no_autograd():
            results = self._joint_forward(model, batches, None if reference else rows, False, False)
        # (clones outside `inference_mode`: normal tensors a loss may use, as `_inference_logps` returns)
        return [None if r is None else (r[0].clone() if r[0].is_inference() else r[0]) for r in results]

    def _inference_logps(self, model: PreTrainedModel, batch: AgentBatch) -> torch.Tensor:
        # `inference_mode` when safe (`no_autograd`); the clone, outside it, is a normal tensor that a loss may use
        # anywhere (inference tensors cannot be saved for a backward or changed in place)
        with no_autograd():
            logps = self._logps(model, batch, compute_entropy=False)[0]
        return logps.clone() if logps.is_inference() else logps

    def sequence_logits(self, agent_index: int, query_responses: torch.Tensor, pad_token_id: int,
                        reference: bool = False) -> torch.Tensor:
        """Logits of member `agent_index`'s policy (or reference) over PPO's layout (`sequence_model_inputs`).

        Returns the logits of every position (not divided by the temperature); gradients flow for the policy.
        """
        inputs = sequence_model_inputs(query_responses, pad_token_id)
        with self.acting(agent_index, reference) as model:
            return self.forward_call(model, **inputs, return_dict=True).logits

    def response_logits(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                        pad_token_id: int, reference: bool = False) -> torch.Tensor:
        """The logits that score the response tokens of PPO's layout: those of `sequence_logits` at positions
        `context_length - 1` to the second to last (`sequence_logits(...)[:, context_length - 1 : -1]`).

        Only those are computed: the forward stops before the last token and the LM head runs over the response
        window alone (`logits_to_keep`, when the model takes it), unless dropout is active (`team.forward`).
        """
        with self.acting(agent_index, reference) as model:
            if dropout_active(model):
                inputs = sequence_model_inputs(query_responses, pad_token_id)
                return self.forward_call(model, **inputs, return_dict=True).logits[:, context_length - 1 : -1]
            inputs = sequence_model_inputs(query_responses[:, :-1], pad_token_id)
            window = query_responses.size(1) - context_length
            if takes_logits_to_keep(model) and window > 0:  # (`logits_to_keep=0` would keep every position)
                return self.forward_call(model, **inputs, logits_to_keep=window, return_dict=True).logits
            return self.forward_call(model, **inputs, return_dict=True).logits[:, context_length - 1 :]

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, output_dir: str | os.PathLike, save_base_model: bool | None = None,
                        state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save every agent to `output_dir/agent_<i>/` plus `team_config.json`.

        Each `agent_<i>/` is loadable on its own: a full model (`AutoModelForCausalLM.from_pretrained`) or a PEFT
        adapter (`PeftModel.from_pretrained(base, "agent_<i>")`), with the agent's tokenizer. When adapters are
        used and the base model has no loadable name or path, the base is saved to `base_model/` too.

        `state_dict` (keys as in `self.state_dict()`) replaces the team's own weights, e.g. the full weights that
        FSDP gathered from the processes' shards (the team's parameters are then shards and are not read).
        """
        output_dir = os.fspath(output_dir)
        os.makedirs(output_dir, exist_ok=True)
        base_paths: list[str | None] = []
        for i, model in enumerate(self.models):
            agents = [a for a in range(self.num_agents) if self.agent_model[a] == i]
            own = None if state_dict is None else _sub_state_dict(state_dict, f"models.{i}.")
            base_path = None
            if self.agent_adapter[agents[0]] is not None:
                base = model.get_base_model()
                name = base.config._name_or_path
                must_save_base = save_base_model if save_base_model is not None else not _loadable(name)
                if must_save_base:
                    base_path = f"base_model_{i}" if len(self.models) > 1 else "base_model"
                    # The base still holds the LoRA layers (`q_proj.base_layer.weight`, `q_proj.lora_A...`): save
                    # its own weights under their original names, or reloading it leaves those layers random.
                    base.save_pretrained(os.path.join(output_dir, base_path), state_dict=base_state_dict(model, own))
                    self.tokenizers[agents[0]].save_pretrained(os.path.join(output_dir, base_path))
                else:
                    base_path = name
            base_paths.append(base_path)
            for a in agents:
                agent_dir = _agent_dir(output_dir, a)
                adapter = self.agent_adapter[a]
                if adapter is None:
                    model.save_pretrained(agent_dir, state_dict=own)
                else:
                    _save_adapter(model, adapter, agent_dir, own)
                self.tokenizers[a].save_pretrained(agent_dir)
        config = {
            "mode": self.mode,
            "num_agents": self.num_agents,
            "agent_model": self.agent_model,
            "agent_adapter": self.agent_adapter,
            "base_models": base_paths,
            "policy_turns": self.policy_turns,
        }
        with open(os.path.join(output_dir, TEAM_CONFIG_NAME), "w") as f:
            json.dump(config, f, indent=2)

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, is_trainable: bool = True, model_init_kwargs: dict | None = None
    ) -> AgentTeam:
        """Load a team saved by [`AgentTeam.save_pretrained`] (or a trainer checkpoint)."""
        path = os.fspath(path)
        config_file = os.path.join(path, TEAM_CONFIG_NAME)
        if not os.path.isfile(config_file):
            raise FileNotFoundError(f"{path} holds no {TEAM_CONFIG_NAME}: it is not a saved AgentTeam.")
        with open(config_file) as f:
            config = json.load(f)
        kwargs = dict(model_init_kwargs or {})
        n = config["num_agents"]
        tokenizers = [load_tokenizer(_agent_dir(path, a)) for a in range(n)]
        models: list[PreTrainedModel] = []
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
            peft_model = PeftModel.from_pretrained(base, _agent_dir(path, first),
                                                   adapter_name=config["agent_adapter"][first],
                                                   is_trainable=is_trainable)
            for a in rest:
                peft_model.load_adapter(_agent_dir(path, a), adapter_name=config["agent_adapter"][a],
                                        is_trainable=is_trainable)
            models.append(peft_model)
        return cls(models, tokenizers, config["mode"], config["agent_model"], config["agent_adapter"],
                   config.get("policy_turns", 1))

    def load_weights_(self, path: str | os.PathLike) -> None:
        """Load the weights of a team saved with the same layout into this team, in place (for resuming)."""
        from safetensors.torch import load_file

        path = os.fspath(path)
        for a in range(self.num_agents):
            agent_dir = _agent_dir(path, a)
            adapter = self.agent_adapter[a]
            model = self.policy(a)
            if adapter is not None:
                from peft import set_peft_model_state_dict

                state = load_file(os.path.join(agent_dir, "adapter_model.safetensors"))
                set_peft_model_state_dict(model, state, adapter_name=adapter)
            elif self.mode != "shared" or a == 0:
                loaded = type(model).from_pretrained(agent_dir, torch_dtype=next(model.parameters()).dtype)
                model.load_state_dict(loaded.state_dict())


def generate_with_continuous_batching(model: PreTrainedModel, rows: list[list[int]],
                                      generation_config: GenerationConfig, config: Any) -> list[list[int]]:
    """Sample one completion per prompt with transformers' continuous batching (`generate_batch`, paged cache).

    The model runs its active policy for every row: `generate_batch` passes no per-row adapter names, so a team
    whose agents share a model through different LoRA adapters cannot generate this way. A request that fails or
    goes missing (transformers only logs those) raises instead of silently shortening the batch.
    """
    outputs = list(model.generate_batch(rows, generation_config=generation_config, continuous_batching_config=config,
                                        progress_bar=False).values())
    failed = [o.error for o in outputs if o.error is not None]
    if len(outputs) != len(rows) or failed:
        raise RuntimeError(f"Continuous batching returned {len(outputs) - len(failed)} of {len(rows)} completions"
                           + (f"; first error: {failed[0]}" if failed else "") + ".")
    return [list(o.generated_tokens) for o in outputs]


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


def _keeps_train_mode(model: Any) -> bool:
    """Whether `model` must generate in train mode: a bitsandbytes 4-bit model on CPU.

    bitsandbytes (0.50, CPUs with AVX512-BF16) repacks 4-bit weights in place for its CPU inference kernel on the
    first eval-mode no-grad forward; every later forward then runs a kernel without input gradient, so the LoRA
    adapters below the last layer would silently train on wrong gradients. Generation in train mode avoids the
    repacking (trainers disable dropout, so sampling is unchanged).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "is_loaded_in_4bit", False):
        return False
    return next(base.parameters()).device.type == "cpu"


def _loadable(name: str | None) -> bool:
    """Whether `name` can be given to `from_pretrained` later: a local model folder or a Hub id."""
    if not name:
        return False
    if resolve_model_name(name) != name:  # a registered name (e.g. "smollm2-135m-instruct")
        return True
    if os.path.isdir(name):
        return os.path.isfile(os.path.join(name, "config.json"))
    return name.count("/") == 1 and not name.startswith((".", "/"))


def no_split_modules(modules: Sequence[nn.Module]) -> list[str]:
    """The union, in order, of the `_no_split_modules` (layer classes) of `modules` (or of their PEFT base models)."""
    names: dict[str, None] = {}
    for module in modules:
        base = module.get_base_model() if hasattr(module, "get_base_model") else module
        names.update(dict.fromkeys(getattr(base, "_no_split_modules", None) or []))
    return list(names)


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
    # PEFT reads the base's config.json (to see whether the vocabulary grew) from `base_model_name_or_path`: give it
    # the folder of a registered name ("smollm2-135m-instruct"), which it would otherwise look up on the Hub.
    peft_config, recorded = model.peft_config[adapter], model.peft_config[adapter].base_model_name_or_path
    if recorded:
        peft_config.base_model_name_or_path = resolve_model_name(recorded)
    try:
        state = get_peft_model_state_dict(model, state_dict=state_dict, adapter_name=adapter)
    finally:
        peft_config.base_model_name_or_path = recorded
    save_file({k: v.detach().contiguous().cpu() for k, v in state.items()},
              os.path.join(agent_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    config = copy.deepcopy(model.peft_config[adapter])
    config.inference_mode = True
    config.save_pretrained(agent_dir)
