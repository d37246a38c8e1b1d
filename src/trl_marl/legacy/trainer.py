"""The classic `PPOTrainer` (`generate` -> score -> `step(queries, responses, scores)`), on `trl_marl.core` math.

One `step()` (Ziegler et al. 2019; the loop of TRL <= 0.11):

1. lay out each query + response as one right-padded sequence (natural positions, like the generation);
2. forward the policy (log-probs, values) and the reference (log-probs) without gradients;
3. per-token reward `r_t = -beta * kl_t`, plus the score on the last response token (`core.ppo.shaped_token_rewards`,
   `core.ppo.classic_kl_penalty`); beta from the adaptive or fixed KL controller;
4. GAE and whitened advantages (`core.ppo.generalized_advantage_estimation`, `core.whiten`);
5. `ppo_epochs` passes over shuffled mini-batches: clipped policy loss + `vf_coef` * clipped value loss
   (`core.ppo.ppo_policy_loss`, `core.ppo.clipped_value_loss`), one optimizer step per backward batch;
6. the stats dict of TRL 0.11 and a KL-controller update.

The policies live in an `AgentTeam` (`mode="models"`), one agent per value-head model: the team generates, holds the
reference policies (a frozen copy, or the adapters disabled for a PEFT model) and saves. With several models, each
agent has its own optimizer and KL controller and `step(..., agent_index=i)` (or lists per agent) updates it.
"""

from __future__ import annotations

import copy
import inspect
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, SupportsFloat, cast, overload

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel, set_seed

from ..core import entropy_from_logits, masked_mean, masked_var, selective_log_softmax, whiten
from ..core.ppo import (
    classic_kl_penalty,
    clipped_value_loss,
    generalized_advantage_estimation,
    ppo_policy_loss,
    running_moments_update,
    shaped_token_rewards,
)
from ..team import AgentTeam
from .config import PPOConfig
from .kl import AdaptiveKLController, FixedKLController
from .value_head import AutoModelForCausalLMWithValueHead, _is_peft, create_reference_model


@dataclass
class _Layout:
    """Query + response sequences, right-padded, and the response window `(B, R)` inside them."""

    input_ids: Tensor  # (B, L)
    attention_mask: Tensor  # (B, L)
    positions: Tensor  # (B, R): index of the logits that predict response token t
    targets: Tensor  # (B, R): response token ids (pad past the end)
    mask: Tensor  # (B, R) float: 1 on the response tokens that count

    def rows(self, index: Tensor) -> _Layout:
        return _Layout(*(t[index] for t in (self.input_ids, self.attention_mask, self.positions, self.targets,
                                             self.mask)))


@dataclass
class _Agent:
    """The training state of one agent."""

    model: AutoModelForCausalLMWithValueHead
    ref_model: AutoModelForCausalLMWithValueHead | None
    optimizer: torch.optim.Optimizer
    lr_scheduler: Any
    kl_ctl: AdaptiveKLController | FixedKLController
    score_mean: float = 0.0
    score_var: float = 1.0
    score_count: float = 1e-24
    steps_since_sync: int = 0


def _as_list(value: Any, n: int, what: str) -> list[Any]:
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"Got {len(value)} {what} for {n} models.")
        return list(value)
    if n > 1 and value is not None:
        raise ValueError(f"With {n} models pass one {what[:-1]} per model (a list), or None.")
    return [value] * n


class PPOTrainer:
    """The classic PPO trainer: call `generate`, score the responses, then `step(queries, responses, scores)`.

    The constructor and methods take TRL 0.11's arguments, so a script written for `trl.PPOTrainer` runs with its
    import changed to `trl_marl.legacy`. Multi-agent extension: pass a list of value-head models (and optionally a
    list of reference models / optimizers / schedulers); `generate(..., agent_index=i)` and
    `step(..., agent_index=i)` act for agent i, and `step` also takes one list of queries/responses/scores per agent.

    Args:
        config: The `PPOConfig`.
        model: An `AutoModelForCausalLMWithValueHead` (or a list of them, one per agent).
        ref_model: The reference model(s). Default: a frozen copy (`create_reference_model`), or for a PEFT model the
            same model with its adapters disabled.
        tokenizer: The tokenizer (its pad token is used for padding).
        dataset: Optional `datasets.Dataset` / torch dataset for `trainer.dataloader`.
        optimizer: Optimizer(s). Default: `Adam(lr=config.learning_rate)` over the trainable parameters.
        data_collator: `collate_fn` of `trainer.dataloader`.
        num_shared_layers: Layers shared with the default reference model (see `create_reference_model`).
        lr_scheduler: Scheduler(s), stepped once per `step()`.
        training_data_collator: Accepted for compatibility; sequences are always laid out by the trainer.

    Example:
        ```python
        from trl_marl.legacy import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

        config = PPOConfig(batch_size=8, mini_batch_size=4, learning_rate=1e-4)
        model = AutoModelForCausalLMWithValueHead.from_pretrained("gpt2")
        trainer = PPOTrainer(config, model, None, tokenizer)
        responses = trainer.generate(queries, return_prompt=False, max_new_tokens=16, do_sample=True)
        stats = trainer.step(queries, responses, [torch.tensor(r) for r in rewards])
        ```
    """

    def __init__(
        self,
        config: PPOConfig | None = None,
        model: AutoModelForCausalLMWithValueHead | Sequence[AutoModelForCausalLMWithValueHead] | None = None,
        ref_model: AutoModelForCausalLMWithValueHead | Sequence[AutoModelForCausalLMWithValueHead] | None = None,
        tokenizer: Any = None,
        dataset: Any = None,
        optimizer: Any = None,
        data_collator: Callable | None = None,
        num_shared_layers: int | None = None,
        lr_scheduler: Any = None,
        training_data_collator: Callable | None = None,
    ) -> None:
        if not isinstance(config, PPOConfig):
            raise ValueError(f"config must be a PPOConfig, got {type(config)}")
        if tokenizer is None or not hasattr(tokenizer, "pad"):
            raise ValueError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer)}")
        models: list[AutoModelForCausalLMWithValueHead] = []
        for m in list(model) if isinstance(model, (list, tuple)) else [model]:
            if not isinstance(m, AutoModelForCausalLMWithValueHead):
                raise ValueError(f"model must be an AutoModelForCausalLMWithValueHead, got {type(m)}")
            models.append(m)
        if config.push_to_hub_if_best_kwargs:
            raise ValueError("`push_to_hub_if_best_kwargs` is not supported by trl_marl.legacy.PPOTrainer.")
        set_seed(config.seed)
        self.config = config
        from accelerate import Accelerator
        from accelerate.utils import ProjectConfiguration

        self.accelerator = Accelerator(log_with=config.log_with, project_config=ProjectConfiguration(
            **config.project_kwargs), **config.accelerator_kwargs)
        if self.accelerator.num_processes > 1:
            raise RuntimeError(
                f"trl_marl.legacy.PPOTrainer trains in one process, but {self.accelerator.num_processes} were "
                "launched: run the script with `python` (one process), or use `trl_marl.PPOTrainer` / "
                "`MultiAgentPPOTrainer`, which shard episodes across processes (see docs/legacy_ppo.md)."
            )
        config.world_size = 1
        config.global_backward_batch_size = config.backward_batch_size
        config.global_batch_size = config.batch_size
        self.is_peft_model = models[0].is_peft_model
        self.is_encoder_decoder = False
        config.is_peft_model = self.is_peft_model
        config.is_encoder_decoder = False
        self.accelerator.init_trackers(config.tracker_project_name, config=config.to_dict(),
                                       init_kwargs=config.tracker_kwargs)
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            raise ValueError("The tokenizer has no pad token: set one (`tokenizer.pad_token = tokenizer.eos_token`).")
        self.current_device = self.accelerator.device
        n = len(models)
        refs = _as_list(ref_model, n, "ref_models")
        optimizers = _as_list(optimizer, n, "optimizers")
        schedulers = _as_list(lr_scheduler, n, "lr_schedulers")
        self._agents: list[_Agent] = []
        for m, ref, opt, sched in zip(models, refs, optimizers, schedulers):
            m.to(self.current_device)
            if ref is None and not m.is_peft_model:
                ref = create_reference_model(m, num_shared_layers=num_shared_layers)
            elif ref is not None and num_shared_layers is not None:
                warnings.warn("`num_shared_layers` is ignored when `ref_model` is given.", UserWarning, stacklevel=2)
            if m.is_peft_model:
                ref = None
            if ref is not None:
                ref.to(self.current_device).eval()
                ref.requires_grad_(False)
            if config.gradient_checkpointing:
                m.gradient_checkpointing_enable()
                m.pretrained_model.enable_input_require_grads()
            if opt is None:
                opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=config.learning_rate)
            kl_ctl = (AdaptiveKLController(config.init_kl_coef, config.target, config.horizon) if config.adap_kl_ctrl
                      else FixedKLController(config.init_kl_coef))
            self._agents.append(_Agent(m, ref, opt, sched, kl_ctl))
        # The team holds the policies (one agent per model), their reference policies and generation.
        adapters = [m.pretrained_model.active_adapter if _is_peft(m.pretrained_model) else None for m in models]
        self.team = AgentTeam([m.pretrained_model for m in models], [tokenizer] * n, "models", list(range(n)),
                              adapters)
        for i, agent in enumerate(self._agents):
            if agent.ref_model is not None:  # (a frozen copy: an agent with adapters has none)
                self.team.ref_models[i] = cast(PreTrainedModel, agent.ref_model.pretrained_model)
        self._ref_teams: dict[int, AgentTeam] = {}
        base = self.team.base_model_of(0)  # models[0]'s transformers model (under its adapter)
        self._logits_to_keep = "logits_to_keep" in inspect.signature(base.forward).parameters
        self.dataset = dataset
        self._signature_columns: list[str] | None = None
        if dataset is None:
            warnings.warn("No dataset is provided: `trainer.dataloader` is None.", UserWarning, stacklevel=2)
            self.dataloader = None
        else:
            self.dataloader = self.prepare_dataloader(dataset, data_collator)
        self.data_collator = training_data_collator
        self.current_step = 0

    # ------------------------------------------------------------------ agent 0 views (the classic attributes)
    @property
    def model(self) -> AutoModelForCausalLMWithValueHead:
        """The policy (agent 0's)."""
        return self._agents[0].model

    @property
    def ref_model(self) -> AutoModelForCausalLMWithValueHead | None:
        """The reference model (agent 0's; None for a PEFT policy, whose reference is the adapters disabled)."""
        return self._agents[0].ref_model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._agents[0].optimizer

    @property
    def lr_scheduler(self) -> Any:
        return self._agents[0].lr_scheduler

    @property
    def kl_ctl(self) -> AdaptiveKLController | FixedKLController:
        return self._agents[0].kl_ctl

    @property
    def num_agents(self) -> int:
        return len(self._agents)

    # ------------------------------------------------------------------ data
    def prepare_dataloader(self, dataset: Any, data_collator: Callable | None = None) -> torch.utils.data.DataLoader:
        """A shuffled `DataLoader` of `config.batch_size` samples (last incomplete batch dropped)."""
        try:
            import datasets
        except ImportError:  # pragma: no cover
            datasets = None
        if datasets is not None and isinstance(dataset, datasets.Dataset) and self.config.remove_unused_columns:
            keep = set(inspect.signature(self.model.forward).parameters) | {"label", "query", "response"}
            unused = [c for c in dataset.column_names if c not in keep]
            if unused:
                dataset = dataset.remove_columns(unused)
        return torch.utils.data.DataLoader(dataset, batch_size=self.config.batch_size, collate_fn=data_collator,
                                           shuffle=True, drop_last=True)

    # ------------------------------------------------------------------ generation
    @contextmanager
    def _reference_team(self, agent_index: int) -> Any:
        """A team that generates with agent `agent_index`'s reference policy."""
        agent = self._agents[agent_index]
        policy = agent.model.pretrained_model
        if _is_peft(policy):  # (`agent.model.is_peft_model`)
            with policy.disable_adapter():
                yield self.team, agent_index
            return
        if agent_index not in self._ref_teams:
            if agent.ref_model is None:  # the constructor makes one for every agent without adapters
                raise RuntimeError(f"Agent {agent_index} has no reference model.")
            self._ref_teams[agent_index] = AgentTeam([agent.ref_model.pretrained_model], [self.tokenizer], "models",
                                                     [0], [None])
        yield self._ref_teams[agent_index], 0

    def _generate_list(
        self, team: AgentTeam, agent_index: int, queries: list[Tensor], length_sampler: Callable | None,
        batch_size: int, return_prompt: bool, generation_kwargs: dict[str, Any],
    ) -> list[Tensor]:
        from transformers import GenerationConfig

        base = team.base_model_of(agent_index)
        outputs: list[Tensor] = []
        batch_size = max(1, min(len(queries), batch_size))
        for start in range(0, len(queries), batch_size):
            kwargs = dict(generation_kwargs)
            if length_sampler is not None:
                kwargs["max_new_tokens"] = int(length_sampler())
            gen_config = copy.deepcopy(base.generation_config) if base.generation_config is not None \
                else GenerationConfig()
            gen_config.update(**kwargs)
            chunk = queries[start:start + batch_size]
            prompts: list[list[list[int]]] = [[] for _ in range(team.num_agents)]
            prompts[agent_index] = [q.tolist() for q in chunk]
            stop = {self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set()
            completions = team.generate(prompts, gen_config, stop_token_ids=stop).completion_ids[agent_index]
            for query, completion in zip(chunk, completions):
                response = torch.tensor(completion, dtype=torch.long, device=query.device)
                outputs.append(torch.cat([query, response]) if return_prompt else response)
        return outputs

    def generate(
        self,
        query_tensor: Tensor | list[Tensor],
        length_sampler: Callable | None = None,
        batch_size: int = 4,
        return_prompt: bool = True,
        generate_ref_response: bool = False,
        agent_index: int = 0,
        **generation_kwargs: Any,
    ) -> Any:
        """Sample responses to queries (token-id tensors), in batches of `batch_size` left-padded queries.

        Args:
            query_tensor: One query `(seq_len,)` or a list of them.
            length_sampler: Callable giving `max_new_tokens` for each generation batch.
            batch_size: Queries per `generate` call.
            return_prompt: Return query + response (True) or the response only.
            generate_ref_response: Also sample from the reference policy; returns `(responses, ref_responses)`.
            agent_index: The agent that generates (multi-agent extension).
            **generation_kwargs: `transformers` generation settings (`max_new_tokens`, `do_sample`, `top_k`, ...).

        Returns:
            A list of 1-D tensors for a list of queries (each cut after its first EOS token), or a `(1, len)` tensor
            for a single query.
        """
        single = isinstance(query_tensor, Tensor)
        queries = [query_tensor] if isinstance(query_tensor, Tensor) else list(query_tensor)
        if single and queries[0].dim() != 1:
            raise ValueError("query_tensor must be a tensor of shape (seq_len,) or a list of such tensors.")
        args = (length_sampler, batch_size, return_prompt, generation_kwargs)
        response = self._generate_list(self.team, agent_index, queries, *args)
        ref_response = None
        if generate_ref_response:
            with self._reference_team(agent_index) as (team, index):
                ref_response = self._generate_list(team, index, queries, *args)
        if single:
            one = response[0].unsqueeze(0)
            ref_one = ref_response[0].unsqueeze(0) if ref_response is not None else None
            return (one, ref_one) if generate_ref_response else one
        return (response, ref_response) if generate_ref_response else response

    # ------------------------------------------------------------------ step
    def _check_inputs(
        self, queries: Any, responses: Any, scores: Any, response_masks: Any
    ) -> tuple[list[Tensor], list[Tensor], Tensor, list[Tensor] | None]:
        for name, values in (("queries", queries), ("responses", responses), ("scores", scores)):
            if not isinstance(values, list):
                raise ValueError(f"{name} must be a list of tensors - got {type(values)}")
            if len(values) != self.config.batch_size:
                raise ValueError(f"Batch size ({self.config.batch_size}) does not match number of examples - but got "
                                 f"{len(values)} for: {name}")
        for name, values in (("queries", queries), ("responses", responses)):
            if not all(isinstance(t, Tensor) and t.dim() == 1 and t.numel() > 0 for t in values):
                raise ValueError(f"Elements in {name} must be non-empty 1-D tensors.")
        device = self.current_device
        score_list = []
        for score in scores:
            score = torch.as_tensor(score, dtype=torch.float32 if not isinstance(score, Tensor) else None)
            if score.dim() > 1 or score.numel() != 1:
                raise ValueError(f"Scores must be scalars (0-d or one-element 1-D tensors) - got {score}")
            score_list.append(score.reshape(()).to(device))
        masks = [m.to(device) for m in response_masks] if response_masks is not None else None
        return [q.to(device) for q in queries], [r.to(device) for r in responses], torch.stack(score_list), masks

    def _layout(self, queries: list[Tensor], responses: list[Tensor], response_masks: list[Tensor] | None) -> _Layout:
        device = self.current_device
        lengths_q = torch.tensor([len(q) for q in queries], device=device)
        lengths_r = torch.tensor([len(r) for r in responses], device=device)
        width = int((lengths_q + lengths_r).max())
        window = int(lengths_r.max())
        input_ids = torch.full((len(queries), width), self.tokenizer.pad_token_id, dtype=torch.long, device=device)
        attention_mask = torch.zeros_like(input_ids)
        for i, (q, r) in enumerate(zip(queries, responses)):
            input_ids[i, : len(q) + len(r)] = torch.cat([q, r])
            attention_mask[i, : len(q) + len(r)] = 1
        steps = torch.arange(window, device=device)
        positions = (lengths_q - 1).unsqueeze(1) + steps
        positions = positions.clamp(max=width - 2)
        targets = input_ids.gather(1, positions + 1)
        mask = (steps.unsqueeze(0) < lengths_r.unsqueeze(1)).float()
        if response_masks is not None:
            extra = torch.zeros_like(mask)
            for i, m in enumerate(response_masks):
                extra[i, : len(m)] = m.float()
            mask = mask * extra
        return _Layout(input_ids, attention_mask, positions, targets, mask)

    @overload
    def _forward(self, model: torch.nn.Module, layout: _Layout, with_values: Literal[True],
                 keep_logits: Literal[True]) -> tuple[Tensor, Tensor, Tensor]: ...

    @overload
    def _forward(self, model: torch.nn.Module, layout: _Layout, with_values: Literal[True],
                 keep_logits: bool) -> tuple[Tensor, Tensor, Tensor | None]: ...

    @overload
    def _forward(self, model: torch.nn.Module, layout: _Layout, with_values: bool,
                 keep_logits: bool) -> tuple[Tensor, Tensor | None, Tensor | None]: ...

    def _forward(
        self, model: torch.nn.Module, layout: _Layout, with_values: bool, keep_logits: bool
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Log-probs `(B, R)` of the response tokens, their values and (optionally) logits `(B, R, V)`.

        The forward stops before the last column: the layout reads positions up to the second to last only (the last
        token predicts nothing), and this loop runs its models in eval mode, so no dropout draw changes.
        """
        first = int(layout.positions.min())
        input_ids, attention_mask = layout.input_ids[:, :-1], layout.attention_mask[:, :-1]
        kwargs: dict[str, Any] = {}
        offset = 0
        if self._logits_to_keep:
            kwargs["logits_to_keep"] = input_ids.size(1) - first
            offset = first
        if with_values:
            logits, _, values = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            values = values.gather(1, layout.positions).float()
        else:
            logits = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
            values = None
        index = (layout.positions - offset).unsqueeze(-1).expand(-1, -1, logits.size(-1))
        window_logits = logits.gather(1, index).float()
        # one (B*R, V) block: selective_log_softmax loops over its leading dimension
        logps = selective_log_softmax(window_logits.reshape(1, -1, window_logits.size(-1)),
                                      layout.targets.reshape(1, -1)).reshape(layout.targets.shape)
        return logps, values, (window_logits if keep_logits else None)

    @torch.no_grad()
    def _rollout_forward(
        self, agent_index: int, layout: _Layout, full_kl: bool
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
        """Old log-probs, values and reference log-probs (and log-distributions for `kl_penalty='full'`)."""
        agent = self._agents[agent_index]
        model = agent.model
        model.eval()
        fbs = self.config.mini_batch_size
        pieces: list[tuple] = []
        for start in range(0, layout.input_ids.size(0), fbs):
            rows = torch.arange(start, min(start + fbs, layout.input_ids.size(0)), device=self.current_device)
            part = layout.rows(rows)
            logps, values, logits = self._forward(model, part, with_values=True, keep_logits=full_kl)
            ref_logps, ref_logits = self._reference_forward(agent_index, part, full_kl)
            pieces.append((logps, values, ref_logps,  # (the logits are kept, not None, with `full_kl`)
                           logits.log_softmax(-1) if logits is not None else None,
                           ref_logits.log_softmax(-1) if ref_logits is not None else None))
        columns = list(zip(*pieces))
        full = [torch.cat(x) if x[0] is not None else None for x in columns[3:]]
        return torch.cat(columns[0]), torch.cat(columns[1]), torch.cat(columns[2]), full[0], full[1]

    def _reference_forward(self, agent_index: int, layout: _Layout, keep_logits: bool) -> tuple[Tensor, Tensor | None]:
        agent = self._agents[agent_index]
        peft_model = agent.model.pretrained_model
        if _is_peft(peft_model):  # (`agent.model.is_peft_model`)
            flags = [(p, p.requires_grad) for p in peft_model.parameters()]
            try:
                with peft_model.disable_adapter():
                    logps, _, logits = self._forward(peft_model, layout, with_values=False, keep_logits=keep_logits)
            finally:
                for param, flag in flags:
                    param.requires_grad_(flag)
            return logps, logits
        ref = self.team.ref_models[agent_index]
        if ref is None:  # the constructor makes one for every agent without adapters
            raise RuntimeError(f"Agent {agent_index} has no reference model.")
        logps, _, logits = self._forward(ref, layout, with_values=False, keep_logits=keep_logits)
        return logps, logits

    def _scale_scores(self, agent: _Agent, scores: Tensor) -> Tensor:
        if self.config.use_score_scaling:
            agent.score_mean, agent.score_var, agent.score_count = running_moments_update(
                agent.score_mean, agent.score_var, agent.score_count, scores)
            count = agent.score_count
            std = (agent.score_var * count / (count - 1)) ** 0.5 if count > 1 else 1.0
            scale = std + torch.finfo(scores.dtype).eps
            scores = (scores - agent.score_mean) / scale if self.config.use_score_norm else scores / scale
            scores = scores.float()
        if self.config.score_clip is not None:
            scores = scores.clamp(-self.config.score_clip, self.config.score_clip)
        return scores

    def step(
        self,
        queries: list[Tensor] | list[list[Tensor]],
        responses: list[Tensor] | list[list[Tensor]],
        scores: list[Tensor] | list[list[Tensor]],
        response_masks: list[Tensor] | list[list[Tensor]] | None = None,
        agent_index: int | None = None,
    ) -> dict[str, Any] | list[dict[str, Any]]:
        """One PPO optimisation step on a batch of `config.batch_size` (query, response, score) samples.

        Queries and responses may have different lengths. `response_masks[i]` (optional, one 0/1 per response
        token) excludes tokens from the loss (e.g. tool outputs).

        Args:
            queries: Token-id tensors of the queries.
            responses: Token-id tensors of the responses (without the query).
            scores: One scalar tensor (or number) per sample.
            response_masks: Optional per-token masks of the responses.
            agent_index: With several agents: the agent to update. Without it, pass one list per agent
                (`queries[a]` is agent a's batch) and get one stats dict per agent.

        Returns:
            The stats dict of TRL 0.11 (`objective/kl`, `ppo/policy/*`, `time/ppo/*`, ...), or a list of them.
        """
        nested = (self.num_agents > 1 and agent_index is None and isinstance(queries, list) and queries
                  and isinstance(queries[0], list))
        if nested:
            masks = response_masks if response_masks is not None else [None] * self.num_agents
            if not (len(queries) == len(responses) == len(scores) == len(masks) == self.num_agents):
                raise ValueError(f"Pass one list of queries, responses and scores per agent ({self.num_agents}).")
            return [self._step(a, q, r, s, m) for a, (q, r, s, m) in enumerate(zip(queries, responses, scores,
                                                                                   masks))]
        if agent_index is None:
            if self.num_agents > 1:
                raise ValueError("With several agents pass `agent_index=` or one list per agent.")
            agent_index = 0
        return self._step(agent_index, queries, responses, scores, response_masks)

    def _step(
        self, agent_index: int, queries: Any, responses: Any, scores: Any, response_masks: Any
    ) -> dict[str, Any]:
        config = self.config
        agent = self._agents[agent_index]
        batch_size = config.batch_size
        queries, responses, scores, response_masks = self._check_inputs(queries, responses, scores, response_masks)
        scores = self._scale_scores(agent, scores)
        timing: dict[str, float] = {}
        t0 = t = time.time()
        layout = self._layout(queries, responses, response_masks)
        full_kl = config.kl_penalty == "full"
        old_logps, values, ref_logps, full_logps, full_ref_logps = self._rollout_forward(agent_index, layout, full_kl)
        timing["time/ppo/forward_pass"] = time.time() - t
        mask = layout.mask
        with torch.no_grad():
            t = time.time()
            kl_coef = agent.kl_ctl.value
            kls = (classic_kl_penalty(full_logps, full_ref_logps, "full")
                   if full_logps is not None and full_ref_logps is not None  # `full_kl`: both kept
                   else classic_kl_penalty(old_logps, ref_logps, config.kl_penalty))
            # the score lands on the last counted response token (shaped_token_rewards puts it one step after `len`)
            width = mask.size(1)
            last = (width - 1) - torch.argmax(mask.flip(1), dim=1)
            rewards, non_score = shaped_token_rewards(scores, kls, kl_coef, last - 1)
            timing["time/ppo/compute_rewards"] = time.time() - t
            t = time.time()
            values = values * mask
            rewards = rewards * mask
            if config.whiten_rewards:
                rewards = whiten(rewards, mask, shift_mean=False)
            advantages, returns = generalized_advantage_estimation(rewards, values, config.gamma, config.lam)
            advantages = whiten(advantages, mask).detach()
            timing["time/ppo/compute_advantages"] = time.time() - t

        t = time.time()
        all_stats: list[dict[str, Tensor]] = []
        gas = config.gradient_accumulation_steps
        backward_batch_size = config.backward_batch_size
        if backward_batch_size is None:  # PPOConfig.__post_init__ derives it
            raise ValueError("`config.backward_batch_size` is None: build the config with `PPOConfig(...)`.")
        for _ in range(config.ppo_epochs):
            order = torch.as_tensor(np.random.permutation(batch_size), device=self.current_device)
            stats = None
            for b_start in range(0, batch_size, backward_batch_size):
                backward_rows = order[b_start:b_start + backward_batch_size]
                for m_start in range(0, backward_batch_size, config.mini_batch_size):
                    rows = backward_rows[m_start:m_start + config.mini_batch_size]
                    stats = self._train_minibatch(agent, layout.rows(rows), old_logps[rows], values[rows],
                                                  advantages[rows], returns[rows], gas)
                    all_stats.append(stats)
            if config.early_stopping and stats is not None and stats["policy/policykl"] > 1.5 * config.target_kl:
                agent.optimizer.zero_grad()
                break
        timing["time/ppo/optimize_step"] = time.time() - t

        t = time.time()
        out = self._record_stats(scores, old_logps, ref_logps, non_score, kls, mask, kl_coef, queries, responses,
                                 all_stats)
        timing["time/ppo/calc_stats"] = time.time() - t
        out["ppo/learning_rate"] = agent.optimizer.param_groups[0]["lr"]
        agent.kl_ctl.update(out["objective/kl"], batch_size)
        timing["time/ppo/total"] = time.time() - t0
        out.update(timing)
        if agent.lr_scheduler is not None:
            agent.lr_scheduler.step()
        return out

    def _train_minibatch(
        self, agent: _Agent, part: _Layout, old_logps: Tensor, old_values: Tensor, advantages: Tensor,
        returns: Tensor, gas: int,
    ) -> dict[str, Tensor]:
        config = self.config
        model = agent.model
        model.eval()  # dropout off in every forward, as in TRL 0.11's loop
        mask = part.mask
        logps, vpreds, logits = self._forward(model, part, with_values=True, keep_logits=True)
        pg_loss, pg_clipfrac, ratio = ppo_policy_loss(logps, old_logps, advantages, config.cliprange, mask)
        vf_loss, vf_clipfrac = clipped_value_loss(vpreds, old_values, returns, config.cliprange_value, mask)
        loss = pg_loss + config.vf_coef * vf_loss
        mean_ratio = masked_mean(ratio, mask).item()
        if mean_ratio > config.ratio_threshold:
            warnings.warn(f"Mean ratio {mean_ratio:.2f} > ratio_threshold {config.ratio_threshold}: this mini-batch "
                          "is skipped (its loss is multiplied by 0).", UserWarning, stacklevel=3)
            pg_loss, vf_loss, loss = pg_loss * 0.0, vf_loss * 0.0, loss * 0.0
        (loss / gas).backward()
        agent.steps_since_sync += 1
        if agent.steps_since_sync % gas == 0:
            if config.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                               config.max_grad_norm)
            agent.optimizer.step()
            agent.optimizer.zero_grad()
        with torch.no_grad():
            logps_d, vpreds_d = logps.detach(), vpreds.detach()
            keep = mask.bool()
            return {
                "loss/policy": pg_loss.detach(),
                "loss/value": vf_loss.detach(),
                "loss/total": loss.detach(),
                "policy/entropy": masked_mean(entropy_from_logits(logits.detach()), mask),
                "policy/approxkl": 0.5 * masked_mean((logps_d - old_logps) ** 2, mask),
                "policy/policykl": masked_mean(old_logps - logps_d, mask),
                "policy/clipfrac": pg_clipfrac.detach(),
                "policy/advantages": advantages[keep],
                "policy/advantages_mean": masked_mean(advantages, mask),
                "policy/ratio": ratio.detach()[keep],
                "returns/mean": masked_mean(returns, mask),
                "returns/var": masked_var(returns, mask),
                "val/vpred": masked_mean(vpreds_d, mask),
                "val/error": masked_mean((vpreds_d - returns) ** 2, mask),
                "val/clipfrac": vf_clipfrac.detach(),
                "val/mean": masked_mean(old_values, mask),
                "val/var": masked_var(old_values, mask),
            }

    def _record_stats(
        self, scores: Tensor, logps: Tensor, ref_logps: Tensor, non_score: Tensor, kls: Tensor, mask: Tensor,
        kl_coef: float, queries: list[Tensor], responses: list[Tensor], all_stats: list[dict[str, Tensor]],
    ) -> dict[str, Any]:
        kl_per_sample = (kls * mask).sum(dim=-1)
        mean_kl = kl_per_sample.mean()
        if mean_kl.item() < -1.0:
            warnings.warn(f"KL divergence is negative ({mean_kl.item():.2f}): check the generation settings "
                          "(sampling must follow the policy's distribution).", UserWarning, stacklevel=4)
        query_lens = torch.tensor([len(q) for q in queries], dtype=torch.float)
        response_lens = torch.tensor([len(r) for r in responses], dtype=torch.float)
        stats: dict[str, Any] = {
            "objective/kl": mean_kl,
            "objective/kl_dist": kl_per_sample,
            "objective/logprobs": logps,
            "objective/ref_logprobs": ref_logps,
            "objective/kl_coef": kl_coef,
            "objective/entropy": (-logps * mask).sum(dim=-1).mean(),
            "ppo/mean_non_score_reward": masked_mean(non_score, mask),
            "ppo/mean_scores": scores.mean(),
            "ppo/std_scores": scores.std(),
            "tokens/queries_len_mean": query_lens.mean().item(),
            "tokens/queries_len_std": query_lens.std().item(),
            "tokens/queries_dist": query_lens,
            "tokens/responses_len_mean": response_lens.mean().item(),
            "tokens/responses_len_std": response_lens.std().item(),
            "tokens/responses_dist": response_lens,
        }
        for key in all_stats[0]:
            values = [s[key] for s in all_stats]
            if values[0].dim() == 0:
                stats[f"ppo/{key}"] = torch.stack(values).mean()
            else:
                stats[f"ppo/{key}"] = torch.cat(values)
        stats["ppo/val/var_explained"] = 1 - stats["ppo/val/error"] / stats["ppo/returns/var"]
        return {key: _to_python(value) for key, value in stats.items()}

    # ------------------------------------------------------------------ logging / saving
    def log_stats(
        self, stats: dict[str, Any], batch: dict[str, Any], rewards: Any,
        columns_to_log: Sequence[str] = ("query", "response"),
    ) -> None:
        """Send `stats` plus `env/reward_mean`, `env/reward_std`, `env/reward_dist` to the tracker (`log_with`).

        With `log_with="wandb"` the `columns_to_log` of `batch` and the rewards are logged as a table `game_log`.
        """
        rewards_t = rewards if isinstance(rewards, Tensor) else torch.tensor([float(r) for r in rewards])
        rewards_t = rewards_t.detach().float().flatten().cpu()
        logs: dict[str, Any] = {}
        if "query" not in batch and "response" not in batch:
            warnings.warn("The batch has no 'query' and 'response' keys: the game logs are not logged.", UserWarning,
                          stacklevel=2)
        elif self.config.log_with == "wandb":
            import wandb

            missing = [c for c in columns_to_log if c not in batch]
            if missing:
                raise ValueError(f"Columns to log {missing} are not in the batch {list(batch)}.")
            rows = [list(r) for r in zip(*[batch[c] for c in columns_to_log], rewards_t.tolist())]
            logs["game_log"] = wandb.Table(columns=[*columns_to_log, "reward"], rows=rows)
        logs.update(stats)
        logs["env/reward_mean"] = rewards_t.mean().item()
        logs["env/reward_std"] = rewards_t.std().item()
        logs["env/reward_dist"] = rewards_t.numpy()
        if self.config.log_with == "tensorboard":
            self.current_step += 1
        self.accelerator.log(logs, step=self.current_step if self.config.log_with == "tensorboard" else None)

    def save_pretrained(self, save_directory: str) -> None:
        """Save the policy with its value head and the tokenizer (agent i in `save_directory/agent_<i>` for teams)."""
        import os

        for i, agent in enumerate(self._agents):
            target = save_directory if self.num_agents == 1 else os.path.join(save_directory, f"agent_{i}")
            agent.model.save_pretrained(target)
            self.tokenizer.save_pretrained(target)

    def _save_pretrained(self, save_directory: str) -> None:
        self.save_pretrained(save_directory)


def _to_python(value: Any) -> Any:
    """Stats as TRL 0.11 returns them: floats for scalars, numpy arrays for distributions."""
    if isinstance(value, Tensor):
        value = value.detach().float().cpu().numpy()
    if isinstance(value, np.ndarray) and (value.ndim == 0 or value.shape == (1,)):
        return float(value.reshape(()))
    if np.isscalar(value):
        return float(cast(SupportsFloat, value))  # a number (numpy's `isscalar` also admits strings)
    return value

