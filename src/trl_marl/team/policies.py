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

`AgentTeam` holds its policies and references and *has* one part per role, each a plain object (no submodule: the
team's `state_dict` holds the models' weights alone) from its own module of `trl_marl.team`, holding a reference to
the team:

- `team.logprob_forwards` (`forward.LogProbForwards`): the log-probability forwards (`forward`, `token_logps`,
  `policy_logps`, `reference_logps`, `inference_logps_all`, PPO's `response_logprobs` and logits, `compile_forwards`);
- `team.generation_backend` (a `generation.GenerationBackend`): samples the completions
  (`generate`, through `sampling.generate`);
- `team.adapter_control` (`adapters.AdapterControl`): the active adapter, the frozen agents, activation checkpointing;
- `team.saver` (`saving.TeamSaver`): `save_pretrained`, `load_weights_` (`from_pretrained`: `saving.load_team`).

The team's public methods of those names are short calls of its parts; the parts call each other directly. The knobs
the parts read are one typed value, `team.settings` (a `settings.TeamSettings`), which a trainer sets once with
[`AgentTeam.configure`]; the old attributes (`team.temperature`, `team.joint_adapter_forward`, ...) read and replace
one field of it. Text in and text out and merged adapters (`chat.ChatMixin`) stay a mixin: they hold no state and only
call the team's public methods, so they are API sugar on the class rather than a part with a life of its own.
This module holds the layouts, the per-(turn, agent) slots and the reference policies.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn
from transformers import GenerationConfig, PreTrainedModel

from . import sampling
from .adapters import AdapterControl
from .building import build_team, is_partitioned
from .chat import ChatMixin
from .forward import AgentBatch, LogProbForwards, TokenWindow
from .generation.base import Generation, GenerationBackend
from .quantized import keep_4bit_trainable
from .saving import TeamSaver, load_team
from .settings import TeamSettings

if TYPE_CHECKING:
    from peft import PeftModel

TEAM_MODES = ("adapters", "models", "shared")


_KEEP: Any = object()  # `configure(generation_backend=...)` left out


def _setting(name: str) -> property:
    """A team attribute that reads field `name` of `team.settings` and replaces it (checked) when set."""

    def get(self: AgentTeam) -> Any:
        return getattr(self._settings, name)

    def set_(self: AgentTeam, value: Any) -> None:
        self._settings = self._settings.replace(**{name: value})

    return property(get, set_, doc=f"`team.settings.{name}` ([`TeamSettings`]); setting it replaces that field.")


class AgentTeam(ChatMixin, nn.Module):
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

    The settings its parts read (`temperature`, `share_prompt_prefill`, `lean_decode`, `continuous_batching_config`,
    `joint_adapter_forward`, `logprob_chunk_elements`) are one [`TeamSettings`] value, `team.settings`: set several at
    once with [`AgentTeam.configure`] (what the trainers do), or one with the attribute of its name
    (`team.temperature = 0.7`: the field replaced and checked, as `configure(temperature=0.7)`).

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
        models: Sequence[PreTrainedModel | PeftModel],
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
        for model in self.models:  # bitsandbytes' CPU inference layout has no gradient (`team.quantized`)
            keep_4bit_trainable(model)
        self.tokenizers = list(tokenizers)
        self.mode = mode
        self.agent_model = list(agent_model)
        self.agent_adapter = list(agent_adapter)
        self.ref_models: list[PreTrainedModel | None] = [None] * len(self.models)  # frozen copies, when needed
        # the knobs the parts read (see `TeamSettings`), and the parts: plain objects, never submodules
        self._settings = TeamSettings(share_prompt_prefill=share_prompt_prefill)
        self.logprob_forwards = LogProbForwards(self)
        self.adapter_control = AdapterControl(self)
        self.saver = TeamSaver(self)
        self._generation_backend: GenerationBackend = sampling.checked_backend(None)  # the team's own decoding
        # Set while the team's weights are sharded across processes (FSDP2, DeepSpeed ZeRO-3): given
        # whether this process has episodes left, whether any process has; the rollout then plays turns in lockstep
        # (see `playing_in_lockstep`).
        self.lockstep: Callable[[bool], bool] | None = None
        if policy_turns < 1 or len(agent_model) % policy_turns:
            raise ValueError(f"{len(agent_model)} members cannot be split into {policy_turns} turns of agents.")
        self.policy_turns = policy_turns
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
        return build_team(cls, model, num_agents, mode, peft_config, processing_class, model_init_kwargs,
                          policy_turns)

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
        return cast(PreTrainedModel, self.models[self.agent_model[agent_index]])  # `nn.ModuleList` is not generic

    def _peft_policy(self, agent_index: int) -> PeftModel:
        """The model of a member with an adapter: a `PeftModel` (which `policy` types as the model it wraps)."""
        return cast("PeftModel", self.policy(agent_index))

    def base_model_of(self, agent_index: int) -> PreTrainedModel:
        if self.agent_adapter[agent_index] is None:
            return self.policy(agent_index)
        return cast(PreTrainedModel, self._peft_policy(agent_index).get_base_model())  # PEFT types it `nn.Module`

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
            if adapter is not None:
                self._peft_policy(a).set_requires_grad([adapter], requires_grad=False)
            elif self.mode != "adapters":  # (an `adapters` member without an adapter has no weights of its own)
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
                ref = cast(PreTrainedModel, copy.deepcopy(model).eval())  # `nn.ModuleList` is not generic
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
            yield self.adapter_control.activate(agent_index)
            return
        model_index = self.agent_model[agent_index]
        if self.agent_adapter[agent_index] is not None and self.ref_models[model_index] is None:
            model = self._peft_policy(agent_index)  # the model of `model_index`
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
        # (transformers' `functools.wraps` on `PreTrainedModel.to` hides its bound `self` from mypy)
        yield cast(nn.Module, ref).to(self.device)

    # ------------------------------------------------------------------ settings
    temperature = _setting("temperature")
    share_prompt_prefill = _setting("share_prompt_prefill")
    lean_decode = _setting("lean_decode")
    continuous_batching_config = _setting("continuous_batching_config")
    joint_adapter_forward = _setting("joint_adapter_forward")
    logprob_chunk_elements = _setting("logprob_chunk_elements")
    share_prompt_forward = _setting("share_prompt_forward")

    @property
    def settings(self) -> TeamSettings:
        """The knobs the team's parts read, one checked [`TeamSettings`] value (change them with `configure`)."""
        return self._settings

    def configure(self, settings: TeamSettings | None = None, *, generation_backend: Any = _KEEP,
                  **changes: Any) -> TeamSettings:
        """Set the team's settings at once: `settings` (default: the current ones) with `changes` applied, checked
        as one [`TeamSettings`]; then, if given, the generation backend (`team.generation_backend`), so that a
        backend built from settings sees the new ones. Returns the settings now in force.

        Args:
            settings: A whole [`TeamSettings`] to install (default: keep the current ones).
            generation_backend: A `GenerationBackend`, None (the team's own decoding), or a function of the team that
                builds one (called after the settings are applied, e.g. `lambda team: build_generation_backend(
                GenerationSettings(generation_backend="compiled"), team)`); left out, the backend stays.
            **changes: Fields of [`TeamSettings`] to replace (an unknown name raises, listing the fields).

        Example: `team.configure(temperature=0.7, share_prompt_prefill=False)`
        """
        if settings is not None and not isinstance(settings, TeamSettings):
            raise TypeError(f"`settings` must be a `trl_marl.team.settings.TeamSettings`, got "
                            f"{type(settings).__name__}: build one, e.g. `TeamSettings(temperature=0.7)`, or pass "
                            "the fields as keywords.")
        self._settings = (self._settings if settings is None else settings).replace(**changes)
        if generation_backend is not _KEEP:
            if callable(generation_backend) and not isinstance(generation_backend, GenerationBackend):
                generation_backend = generation_backend(self)  # a builder: it sees the settings just applied
            self.generation_backend = generation_backend
        return self._settings

    @contextmanager
    def playing_in_lockstep(self, lockstep: Callable[[bool], bool]) -> Iterator[None]:
        """While the team's weights are sharded across processes (FSDP2, DeepSpeed ZeRO-3), its forwards are
        collectives: within the context the rollout plays turns in lockstep (`lockstep(mine)`: whether any process
        has episodes left, given whether this one has) and no prompt prefill is shared (one more forward on a process
        whose rows repeat a prompt, which the others would not run). Both are restored afterwards."""
        previous, self.lockstep = self.lockstep, lockstep
        settings, self._settings = self._settings, self._settings.replace(share_prompt_prefill=False)
        try:
            yield
        finally:
            self.lockstep, self._settings = previous, self._settings.replace(
                share_prompt_prefill=settings.share_prompt_prefill)

    # ------------------------------------------------------------------ parts (see the module docstring)
    @property
    def generation_backend(self) -> GenerationBackend:
        """The part that samples the team's completions: a `GenerationBackend`, by default a
        `TransformersBackend` (the team's own decoding). Setting None restores the default; an object that is no
        `GenerationBackend` is refused."""
        return self._generation_backend

    @generation_backend.setter
    def generation_backend(self, backend: GenerationBackend | None) -> None:
        self._generation_backend = sampling.checked_backend(backend)

    @property
    def forward_call(self) -> Callable[..., Any]:
        """The causal LM call of the log-probability forwards (`team.logprob_forwards.forward_call`: eager, or
        compiled by `compile_forwards`); setting it sets theirs."""
        return self.logprob_forwards.forward_call

    @forward_call.setter
    def forward_call(self, call: Callable[..., Any]) -> None:
        self.logprob_forwards.forward_call = call

    @property
    def frozen(self) -> set[int]:
        """The agents whose weights are not trained (`team.adapter_control.frozen`; see `freeze_agents`)."""
        return self.adapter_control.frozen

    def forward(self, batches: Sequence[AgentBatch | None], compute_entropy: bool = False,
                entropy_grad: bool = False) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """Per-token log-probabilities (and entropies) of each agent's completions under its current policy, every
        agent in one call (what DistributedDataParallel wraps): [`LogProbForwards.forward`]."""
        return self.logprob_forwards.forward(batches, compute_entropy=compute_entropy, entropy_grad=entropy_grad)

    def token_logps(
        self, model: PreTrainedModel, window: TokenWindow, labels: Sequence[torch.Tensor],
        temperature: float | None = None, compute_entropy: bool = False, entropy_grad: bool = False,
        adapter_rows: tuple[list[str], Any] | None = None,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The one log-probability primitive of the log-probability forwards: [`LogProbForwards.token_logps`]."""
        return self.logprob_forwards.token_logps(model, window, labels, temperature=temperature,
                                                 compute_entropy=compute_entropy, entropy_grad=entropy_grad,
                                                 adapter_rows=adapter_rows)

    def policy_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the current policy, without gradients:
        [`LogProbForwards.policy_logps`]."""
        return self.logprob_forwards.policy_logps(agent_index, batch)

    def reference_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the reference policy: [`LogProbForwards.reference_logps`]."""
        return self.logprob_forwards.reference_logps(agent_index, batch)

    def inference_logps_all(self, batches: Sequence[AgentBatch | None],
                            reference: bool = False) -> list[torch.Tensor | None]:
        """`policy_logps` (or `reference_logps`) of every agent that has a batch, in as few forwards as the layout
        allows: [`LogProbForwards.inference_logps_all`]."""
        return self.logprob_forwards.inference_logps_all(batches, reference=reference)

    def sequence_logits(self, agent_index: int, query_responses: torch.Tensor, pad_token_id: int,
                        reference: bool = False) -> torch.Tensor:
        """The logits of every position of PPO's layout: [`LogProbForwards.sequence_logits`]."""
        return self.logprob_forwards.sequence_logits(agent_index, query_responses, pad_token_id, reference=reference)

    def response_logits(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                        pad_token_id: int, reference: bool = False) -> torch.Tensor:
        """The logits that score PPO's response tokens: [`LogProbForwards.response_logits`]."""
        return self.logprob_forwards.response_logits(agent_index, query_responses, context_length, pad_token_id,
                                                     reference=reference)

    def response_logprobs(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                          pad_token_id: int, responses: torch.Tensor, temperature: float, reference: bool = False,
                          compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities (and entropies) of PPO's responses: [`LogProbForwards.response_logprobs`]."""
        return self.logprob_forwards.response_logprobs(agent_index, query_responses, context_length, pad_token_id,
                                                       responses, temperature, reference=reference,
                                                       compute_entropy=compute_entropy)

    def compile_forwards(self, backend: str | None = None, mode: str | None = None) -> None:
        """Run the log-probability forwards through `torch.compile`: [`LogProbForwards.compile_forwards`]."""
        self.logprob_forwards.compile_forwards(backend=backend, mode=mode)

    def generate(self, prompts: Sequence[Sequence[Any]], generation_config: GenerationConfig,
                 chat_template_kwargs: dict | None = None, stop_token_ids: set[int] | None = None) -> Generation:
        """Sample one completion per prompt for every agent, through the team's `generation_backend`.

        With the default backend, rows that repeat a prompt through the same weights share one prefill when
        `share_prompt_prefill` is on; agents with different adapters or models never do.

        Args:
            prompts: `prompts[a]` is the list of prompts of agent `a` (strings, chat messages or token ids).
            generation_config: Sampling settings (`max_new_tokens`, `temperature`, ...).
            chat_template_kwargs: Passed to the chat template of chat prompts.
            stop_token_ids: Completions are cut after the first of these tokens. Default: the EOS tokens of the
                tokenizer and the model's generation config. An empty set keeps every generated token.

        Returns:
            A `Generation`: per agent, the prompt ids and the completion ids (token id lists), and the backend's
            log-probabilities of the completion tokens where it gives them (else None). It still reads as the list of
            `(prompt_ids, completion_ids)` pairs this method returned before: `generation[a]`, iteration, equality.
        """
        return sampling.generate(self, prompts, generation_config, chat_template_kwargs, stop_token_ids)

    def stop_token_ids(self, agent_index: int) -> set[int]:
        """The tokens that end agent `agent_index`'s completions by default: its tokenizer's EOS and every EOS of its
        model's generation config (instruct models often have several, e.g. `<|im_end|>` and `<|endoftext|>`)."""
        return sampling.stop_token_ids(self, agent_index)

    def activation_checkpointing_enable(self, activation_checkpointing_kwargs: dict | None = None,
                                        every_n_layers: int = 1, offload: bool = False,
                                        gradient_checkpointing_kwargs: dict | None = None) -> None:
        """Enable activation (gradient) checkpointing in every model (called by `transformers.Trainer`):
        [`AdapterControl.activation_checkpointing_enable`]."""
        self.adapter_control.activation_checkpointing_enable(
            activation_checkpointing_kwargs, every_n_layers=every_n_layers, offload=offload,
            gradient_checkpointing_kwargs=gradient_checkpointing_kwargs)

    gradient_checkpointing_enable = activation_checkpointing_enable

    def save_pretrained(self, output_dir: str | os.PathLike, save_base_model: bool | None = None,
                        state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save every agent to `output_dir/agent_<i>/` plus `team_config.json`: [`TeamSaver.save_pretrained`]."""
        self.saver.save_pretrained(output_dir, save_base_model=save_base_model, state_dict=state_dict)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, is_trainable: bool = True,
                        model_init_kwargs: dict | None = None) -> AgentTeam:
        """Load a team saved by [`AgentTeam.save_pretrained`] (or a trainer checkpoint): `saving.load_team`."""
        return load_team(cls, path, is_trainable=is_trainable, model_init_kwargs=model_init_kwargs)

    def load_weights_(self, path: str | os.PathLike) -> None:
        """Load the weights of a team saved with the same layout into this team, in place (for resuming):
        [`TeamSaver.load_weights_`]."""
        self.saver.load_weights_(path)


def no_split_modules(modules: Iterable[nn.Module]) -> list[str]:
    """The union, in order, of the `_no_split_modules` (layer classes) of `modules` (or of their PEFT base models)."""
    names: dict[str, None] = {}
    for module in modules:
        base = cast("PeftModel", module).get_base_model() if hasattr(module, "get_base_model") else module
        names.update(dict.fromkeys(getattr(base, "_no_split_modules", None) or []))
    return list(names)
