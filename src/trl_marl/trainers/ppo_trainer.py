"""`MultiAgentPPOTrainer` (multi-agent PPO as in MAPoRL, arXiv 2502.18439) and the drop-in `PPOTrainer`.

One implementation serves both: an [`AgentTeam`] with a value model per agent plays episodes of any
[`MultiAgentEnv`] (one response per agent per turn), every response is scored, and each agent is trained with
PPO on its own responses: per-token KL penalty to its reference policy, the score on the last step, GAE,
whitened advantages, clipped policy and value losses (`trl_marl.core.ppo`). With one agent, one turn, a
tokenized `input_ids` dataset and a reward model, it is TRL 1.12's `PPOTrainer` (same constructor, config
fields, loop and metric names), so code written for it runs after changing only the import.
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler
from transformers import GenerationConfig, PreTrainedModel, TrainerCallback, set_seed

from .._trl_compat import TeamCheckpointMixin, TRLBaseTrainer
from ..core import entropy_from_logits, selective_log_softmax, whiten, whiten_jointly
from ..core.ppo import (
    INVALID_LOGPROB,
    clipped_value_loss,
    generalized_advantage_estimation,
    kl_penalty,
    ppo_policy_loss,
    response_masks,
    shaped_token_rewards,
)
from ..envs.base import MultiAgentEnv, PromptEnv, TokenizedPromptEnv, Transcript
from ..team import AgentTeam, pad_left
from ..validation import (
    RewardFunctionError,
    call_reward_function,
    check_dataset_prompts,
    check_prompt_lengths,
    unscorable_message,
)
from .magrpo_trainer import _identity
from .ppo_config import MultiAgentPPOConfig, PPOConfig

RewardFunc = Callable[..., Sequence[float | None]]


def first_true_index(flags: torch.Tensor) -> torch.Tensor:
    """Index of the first True of each row (the row length when there is none)."""
    width = flags.size(-1)
    positions = torch.arange(width, device=flags.device).expand_as(flags)
    return torch.where(flags, positions, torch.full_like(positions, width)).min(dim=-1).values


def sequence_model_inputs(query_responses: torch.Tensor, pad_token_id: int) -> dict[str, torch.Tensor]:
    """Inputs for a forward over left-padded query + right-padded response rows (pads masked, positions shifted)."""
    attention_mask = query_responses != pad_token_id
    position_ids = attention_mask.long().cumsum(1) - attention_mask.long()
    input_ids = torch.masked_fill(query_responses, ~attention_mask, 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}


def sequence_scores(
    model: nn.Module, query_responses: torch.Tensor, pad_token_id: int, context_length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token outputs of a sequence-classification model's head, and the output at the last response token.

    Returns:
        `(per_token, final)`: `(B, S)` per-token scores (the head's single label) and `(B,)` scores at the last
        non-pad token of each response.
    """
    backbone = getattr(model, model.base_model_prefix)
    output = backbone(
        **sequence_model_inputs(query_responses, pad_token_id),
        return_dict=True,
        output_hidden_states=True,
        use_cache=False,
    )
    per_token = model.score(output.hidden_states[-1]).squeeze(-1)
    last = first_true_index(query_responses[:, context_length:] == pad_token_id) - 1 + context_length
    final = per_token[torch.arange(per_token.size(0), device=per_token.device), last]
    return per_token, final


@dataclass
class AgentRollout:
    """The PPO samples of one policy slot in an update (its responses, rows in turn-major order)."""

    query_responses: torch.Tensor  # (N, C + L)
    context_length: int
    responses: torch.Tensor  # (N, L) raw sampled tokens
    postprocessed: torch.Tensor  # (N, L) cut after the stop token
    turns: torch.Tensor  # (N,) 1-based turn of each sample
    texts: list[str]
    prompts: list[Any] | None = None  # the prompt each response answers (what reward functions get)
    agents: torch.Tensor | None = None  # (N,) agent of each sample
    value_query_responses: torch.Tensor | None = None  # what the value model reads (see `value_input`)
    value_context_length: int = 0
    logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    sequence_lengths: torch.Tensor | None = None
    policy_mask: torch.Tensor | None = None
    value_mask: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    non_score_rewards: torch.Tensor | None = None


class PolicyValueTeam(nn.Module):
    """The trainable modules of PPO in one `nn.Module`: the team's policies and their value models.

    Its `forward` runs every slot's policy and value model on that slot's micro-batch, so one
    DistributedDataParallel wrapper sees one forward per backward. `value_index[s]` is the value model of policy
    slot `s` (one per slot, or one for the whole team when it shares one policy).
    """

    def __init__(self, team: AgentTeam, value_models: Sequence[nn.Module],
                 value_index: Sequence[int] | None = None) -> None:
        super().__init__()
        self.team = team
        self.value_models = nn.ModuleList(value_models)
        self.value_index = list(value_index) if value_index is not None else list(range(len(value_models)))

    def value_model(self, slot: int) -> nn.Module:
        """The value model of policy slot `slot`."""
        return self.value_models[self.value_index[slot]]

    @property
    def config(self) -> Any:
        return self.team.config

    def activation_checkpointing_enable(self, **kwargs: Any) -> None:
        self.team.activation_checkpointing_enable(**kwargs)

    gradient_checkpointing_enable = activation_checkpointing_enable

    def policy_logits(self, agent_index: int, query_responses: torch.Tensor, pad_token_id: int) -> torch.Tensor:
        model = self.team._activate(agent_index)
        return model(**sequence_model_inputs(query_responses, pad_token_id), return_dict=True).logits

    def forward(
        self,
        batches: Sequence[tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, int] | None],
        pad_token_ids: Sequence[int],
        temperature: float,
    ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]:
        """For each slot's `(query_responses, context, responses, value_query_responses, value_context)`:
        `(logits, new log-probs, values)` of its policy and value model."""
        outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None] = []
        for s, batch in enumerate(batches):
            if batch is None:
                outputs.append(None)
                continue
            query_responses, context, responses, value_qr, value_context = batch
            logits = self.policy_logits(s, query_responses, pad_token_ids[s])[:, context - 1 : -1]
            logits = logits / (temperature + 1e-7)
            logprobs = selective_log_softmax(logits, responses)
            values, _ = sequence_scores(self.value_model(s), value_qr, pad_token_ids[s], value_context)
            outputs.append((logits, logprobs, values[:, value_context - 1 : -1]))
        return outputs


class MultiAgentPPOTrainer(TeamCheckpointMixin, TRLBaseTrainer):
    """Multi-agent PPO over a [`MultiAgentEnv`] with a value model per agent (MAPoRL, arXiv 2502.18439).

    Each update plays `local_batch_size` episodes per process: at every turn each agent writes one response to
    the prompt the environment builds from the transcript. Every response is scored (a reward model, or reward
    functions called once per (turn, agent) with `agent_index`, `turn` and the whole `transcript`), and becomes
    one PPO sample of its agent: per-token reward -kl_coef * KL plus the score on the last step, GAE(gamma, lam),
    whitened advantages, clipped policy and value losses. The agents' losses are summed; each agent's gradients
    reach only its own parameters (adapter or model, and value model).

    Args:
        args: A [`MultiAgentPPOConfig`].
        model: A model id or path, a `PreTrainedModel`, one per agent, or an [`AgentTeam`].
        train_dataset: Rows the environment reads.
        env: The environment. Default: `TokenizedPromptEnv` for datasets with `input_ids`, else `PromptEnv`.
        reward_funcs: TRL-style reward functions (see above). Exclusive with `reward_model`. They follow the reward
            contract of [`~trl_marl.rollout.TeamReward`]: one number or `None` (skip) per response, summed over the
            functions; a response that every function skips, a string, or a NaN/inf score raises a
            `RewardFunctionError` (PPO needs a finite score for every response).
        reward_model: A sequence classifier (`num_labels=1`) scoring query + response tokens.
        value_model: A sequence classifier (`num_labels=1`) for the value function, or one per agent. Default: a
            fresh head on a copy of each agent's base model.
        processing_class: A tokenizer (or one per agent).
        ref_model: A frozen reference policy (single agent). Default: the adapter-disabled policy with a
            `peft_config`, else a frozen copy.
        eval_dataset: Optional evaluation rows (sample-completion tables).
        peft_config: A `peft.LoraConfig` (one adapter per agent on one base model when there are several).
        eval_verifier: An answer verifier (`extract(response)`, `score(response, gold)`, e.g. `AnswerVerifier`) for
            `evaluate()`. Default: the verifier of a reward function that has one.
        gold_column: The dataset column holding the gold answer, for `evaluate()`.

    Example:

    ```python
    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards import target_sum_reward

    trainer = MultiAgentPPOTrainer(
        args=MultiAgentPPOConfig(output_dir="ppo-team", num_agents=2, per_device_train_batch_size=16,
                                 total_episodes=4096, response_length=4, learning_rate=1e-3),
        model="toy", reward_funcs=target_sum_reward, env=TargetSumEnv(num_agents=2),
        train_dataset=dataset,
    )
    trainer.train()
    ```
    """

    _tag_names = ["trl", "trl-marl", "ppo", "multi-agent"]
    _name = "MultiAgentPPO"
    _paper = {
        "title": "MAPoRL: Multi-Agent Post-Co-Training for Collaborative Large Language Models with Reinforcement "
        "Learning",
        "id": "2502.18439",
    }

    def __init__(
        self,
        args: MultiAgentPPOConfig,
        model: str | PreTrainedModel | Sequence[str | PreTrainedModel] | AgentTeam,
        train_dataset: Any,
        env: MultiAgentEnv | None = None,
        reward_funcs: RewardFunc | Sequence[RewardFunc] | None = None,
        reward_model: nn.Module | None = None,
        value_model: nn.Module | Sequence[nn.Module] | None = None,
        processing_class: Any = None,
        ref_model: PreTrainedModel | None = None,
        eval_dataset: Any = None,
        data_collator: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        callbacks: list[TrainerCallback] | None = None,
        peft_config: Any = None,
        eval_verifier: Any = None,
        gold_column: str = "answer",
    ) -> None:
        if train_dataset is None:
            raise ValueError("`train_dataset` is required.")
        self.eval_verifier = eval_verifier
        self.gold_column = gold_column
        if ref_model is not None and ref_model is model:
            raise ValueError(
                "`model` and `ref_model` cannot be the same object: pass a copy, or `ref_model=None` with a "
                "`peft_config` (the reference is then the policy with its adapter disabled)."
            )
        if (reward_funcs is None) == (reward_model is None):
            raise ValueError("Pass exactly one of `reward_funcs` and `reward_model`.")
        columns = list(getattr(train_dataset, "column_names", None) or list(train_dataset[0]))
        if env is None:
            env = (
                TokenizedPromptEnv(args.num_agents)
                if "input_ids" in columns
                else PromptEnv(args.num_agents, args.num_turns)
            )
        if env.num_agents != args.num_agents or env.num_turns != args.num_turns:
            raise ValueError(
                f"The environment has {env.num_agents} agents and {env.num_turns} turns but the config says "
                f"num_agents={args.num_agents}, num_turns={args.num_turns}; make them agree."
            )
        if len(train_dataset) == 0:
            raise ValueError("`train_dataset` is empty.")
        env.validate_row(dict.fromkeys(columns), where="`train_dataset`")
        checked = {"train_dataset": check_dataset_prompts(env, train_dataset, "train_dataset")}
        if eval_dataset is not None:
            eval_columns = list(getattr(eval_dataset, "column_names", None) or list(eval_dataset[0]))
            env.validate_row(dict.fromkeys(eval_columns), where="`eval_dataset`")
            checked["eval_dataset"] = check_dataset_prompts(env, eval_dataset, "eval_dataset")

        # A run is a function of `args.seed`: adapters and value heads are initialised now, before `Trainer.__init__`
        # seeds, so seed here (whatever the global RNG held before the trainer was built).
        set_seed(args.seed)
        team = self._build_team(model, args, peft_config, processing_class)
        for tok in team.tokenizers:
            if tok.pad_token_id is None:
                raise ValueError("The tokenizer has no pad token: set one, e.g. `tokenizer.pad_token = ...`.")
        for where, (indices, prompts) in checked.items():  # turn 1 of agent a is played by team member a
            check_prompt_lengths(team, prompts, indices, where, args.response_length,
                                 f"{type(args).__name__}.response_length", on_long=args.prompt_length_check)
        team.temperature = args.temperature + 1e-7
        if ref_model is not None:
            if args.num_agents != 1:
                raise ValueError("`ref_model` is for a single agent; multi-agent teams use their own references.")
            ref_model.eval().requires_grad_(False)
            team.ref_models[0] = ref_model
        elif all(a is None for a in team.agent_adapter):
            team.create_reference_models()
        self.stop_token_id = self._resolve_stop_token(args, team)

        value_models = self._value_models(value_model, team, args.policy_sharing)
        self.reward_model = reward_model
        if reward_model is not None:
            _check_single_label(reward_model, "reward_model")
            reward_model.eval().requires_grad_(False)
        self.reward_funcs = (
            list(reward_funcs)
            if isinstance(reward_funcs, (list, tuple))
            else ([reward_funcs] if reward_funcs is not None else [])
        )
        self.reward_names = [
            getattr(f, "name", None) or getattr(f, "__name__", type(f).__name__) for f in self.reward_funcs
        ] or ["reward_model"]
        for module in [*team.models, *value_models, reward_model, ref_model, *[r for r in team.ref_models if r]]:
            if module is not None:
                for sub in module.modules():
                    if isinstance(sub, nn.Dropout):
                        sub.p = 0.0
        self.env = env
        self.team = team
        self.data_collator_user = data_collator  # accepted for API parity: rows are padded by the trainer
        args.remove_unused_columns = False
        shared = args.policy_sharing == "shared"  # one policy: one value model and one whitening group for the team
        wrapper = PolicyValueTeam(team, value_models, [0 if shared else s for s in range(team.num_agents)])
        super().__init__(
            model=wrapper,
            args=args,
            data_collator=_identity,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            processing_class=team.tokenizers[0],
            callbacks=callbacks,
            optimizers=optimizers,
        )
        self.wrapper = wrapper
        self._set_batch_sizes()
        if self.reward_model is not None:
            self.reward_model.to(self.accelerator.device)
        for ref in team.ref_models:
            if ref is not None:
                ref.to(self.accelerator.device)
        self._metrics: dict[str, list[float]] = defaultdict(list)

    # ------------------------------------------------------------------ setup helpers
    @staticmethod
    def _build_team(model: Any, args: MultiAgentPPOConfig, peft_config: Any, processing_class: Any) -> AgentTeam:
        """The team's policy slots: one per agent, one per (turn, agent), or one shared set of weights."""
        A, T = args.num_agents, args.num_turns
        if isinstance(model, AgentTeam):
            expected = A * T if args.policy_sharing == "agent_turn" else A
            if model.num_agents != expected:
                raise ValueError(
                    f"The team has {model.num_agents} members but policy_sharing={args.policy_sharing!r} needs "
                    f"{expected}."
                )
            return model
        mode = args.team_mode
        if args.policy_sharing == "shared":
            if mode not in (None, "shared") or isinstance(model, (list, tuple)):
                raise ValueError("`policy_sharing='shared'` means one model for every agent (`team_mode='shared'`).")
            mode = "shared"
        if args.policy_sharing != "agent_turn":
            return AgentTeam.build(model, A, mode=mode, peft_config=peft_config, processing_class=processing_class)
        # theta_{t,a}: turn t of agent a is played by slot (t - 1) * A + a
        if isinstance(model, (list, tuple)):
            if len(model) != A:
                raise ValueError(f"Got {len(model)} models for {A} agents.")
            import copy

            model = [m if (t == 0 or isinstance(m, str)) else copy.deepcopy(m) for t in range(T) for m in model]
            if isinstance(processing_class, (list, tuple)):
                processing_class = list(processing_class) * T
        return AgentTeam.build(model, A * T, mode=mode, peft_config=peft_config, processing_class=processing_class)

    @staticmethod
    def _resolve_stop_token(args: MultiAgentPPOConfig, team: AgentTeam) -> int | None:
        stop = team.tokenizers[0].eos_token_id if args.stop_token == "eos" else args.stop_token_id
        for a in range(team.num_agents):  # generation stops exactly at the stop token (or runs to full length)
            team.base_model_of(a).generation_config.eos_token_id = stop
        return stop

    def _value_models(self, value_model: Any, team: AgentTeam, policy_sharing: str = "agent") -> list[nn.Module]:
        """One value model per policy slot, or a single one when every agent shares one policy."""
        n = 1 if policy_sharing == "shared" else team.num_agents
        if value_model is None:
            from transformers import AutoModelForSequenceClassification

            from ..team import _base_state_dict

            models = []
            for a in range(n):
                base = team.base_model_of(a)
                if getattr(base, "is_quantized", False):
                    raise ValueError(
                        f"Agent {a}'s policy is quantized, so the default value model (a copy of the policy's "
                        "weights with a new head) cannot be built from it: pass `value_model=AutoModelFor"
                        "SequenceClassification.from_pretrained(..., num_labels=1)`."
                    )
                full = _base_state_dict(team.policy(a)) if team.agent_adapter[a] is not None else base.state_dict()
                prefix = base.base_model_prefix + "."
                vm_config = base.config.__class__.from_dict(base.config.to_dict())
                vm_config.num_labels = 1  # `from_config(config, num_labels=1)` passes it to __init__: TypeError
                vm = AutoModelForSequenceClassification.from_config(vm_config)
                getattr(vm, vm.base_model_prefix).load_state_dict(
                    {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}, strict=True
                )
                models.append(vm.to(next(base.parameters()).device))
            return models
        models = list(value_model) if isinstance(value_model, (list, tuple)) else [value_model]
        if len(models) == 1 and n > 1:
            import copy

            models = models + [copy.deepcopy(models[0]) for _ in range(n - 1)]
        if len(models) != n:
            raise ValueError(
                f"Got {len(models)} value models for {n} policies (policy_sharing={policy_sharing!r}): pass one, or "
                "one per policy."
            )
        for vm in models:
            _check_single_label(vm, "value_model")
        return models

    def _set_batch_sizes(self) -> None:
        args = self.args
        if args.total_episodes is None:
            args.total_episodes = int(args.num_train_epochs * len(self.train_dataset))
        args.world_size = self.accelerator.num_processes
        args.local_batch_size = args.per_device_train_batch_size * args.gradient_accumulation_steps
        args.micro_batch_size = args.per_device_train_batch_size * args.world_size
        args.batch_size = args.local_batch_size * args.world_size
        args.mini_batch_size = args.batch_size // args.num_mini_batches
        args.local_mini_batch_size = args.local_batch_size // args.num_mini_batches
        args.num_total_batches = math.ceil(args.total_episodes / args.batch_size)
        if args.whiten_rewards and args.local_mini_batch_size < 8:
            raise ValueError(
                f"`whiten_rewards` needs at least 8 episodes per mini-batch per process, got "
                f"{args.local_mini_batch_size}: raise per_device_train_batch_size or gradient_accumulation_steps."
            )
        self.sample_generations_freq = max(1, args.num_total_batches // max(1, args.num_sample_generations))

    def get_train_dataloader(self) -> DataLoader:
        generator = torch.Generator().manual_seed(self.args.seed)
        loader = DataLoader(
            self.train_dataset,
            batch_size=self.args.local_batch_size,
            drop_last=True,
            sampler=RandomSampler(self.train_dataset, generator=generator),
            collate_fn=_identity,
        )
        return self.accelerator.prepare(loader)

    # ------------------------------------------------------------------ rollout
    def _generation_config(self, temperature: float) -> GenerationConfig:
        tok = self.team.tokenizers[0]
        return GenerationConfig(
            max_new_tokens=self.args.response_length,
            temperature=temperature + 1e-7,
            top_k=0,
            top_p=1.0,
            do_sample=True,
            pad_token_id=tok.pad_token_id,
            eos_token_id=self.stop_token_id,
        )

    def slot(self, turn: int, agent_index: int) -> int:
        """The team member (policy and value model) that plays agent `agent_index` at turn `turn` (1-based)."""
        if self.args.policy_sharing == "agent_turn":
            return (turn - 1) * self.env.num_agents + agent_index
        return agent_index

    @torch.no_grad()
    def play_episodes(
        self, rows: list[dict[str, Any]], temperature: float | None = None
    ) -> tuple[list[dict[str, list[Any]]], list[Transcript]]:
        """Play the episodes of `rows`: at each turn every agent answers the prompt the environment builds.

        Returns the samples of each policy slot (turns >= `train_turns_from`) and the final transcripts; every
        turn's texts and prompts stay in `self._turn_texts[t][a][row]` and `self._turn_prompts[t][a][row]`.
        """
        A, T = self.env.num_agents, self.env.num_turns
        n_slots = self.team.num_agents
        config = self._generation_config(self.args.temperature if temperature is None else temperature)
        stops = {self.stop_token_id} if self.stop_token_id is not None else set()
        transcripts = [Transcript() for _ in rows]
        per_slot: list[dict[str, list[Any]]] = [defaultdict(list) for _ in range(n_slots)]
        first_prompt_ids: list[list[list[int]]] = []  # [agent][row]: the turn-1 prompt (value_input="answer")
        self._turn_texts: list[list[list[str]]] = []  # [turn][agent][row]
        self._turn_prompts: list[list[list[Any]]] = []
        for turn in range(1, T + 1):
            by_agent = [[self.env.agent_prompt(row, a, tr) for row, tr in zip(rows, transcripts)] for a in range(A)]
            slot_prompts: list[list[Any]] = [[] for _ in range(n_slots)]
            for a in range(A):
                slot_prompts[self.slot(turn, a)] = by_agent[a]
            generated = self.team.generate(slot_prompts, config, stop_token_ids=stops)
            texts = []
            for a in range(A):
                s = self.slot(turn, a)
                prompt_ids, completion_ids = generated[s]
                decoded = self.team.tokenizers[s].batch_decode(
                    [_cut(ids, self.stop_token_id) for ids in completion_ids], skip_special_tokens=True
                )
                texts.append(decoded)
                if turn == 1:
                    first_prompt_ids.append(prompt_ids)
                if turn >= self.args.train_turns_from:
                    store = per_slot[s]
                    store["prompt_ids"] += prompt_ids
                    store["value_prompt_ids"] += first_prompt_ids[a] if self.args.value_input == "answer" else []
                    store["completion_ids"] += completion_ids
                    store["texts"] += decoded
                    store["prompts"] += by_agent[a]
                    store["turns"] += [turn] * len(rows)
                    store["agents"] += [a] * len(rows)
            self._turn_texts.append(texts)
            self._turn_prompts.append(by_agent)
            new = []
            for i, (row, tr) in enumerate(zip(rows, transcripts)):
                responses = [texts[a][i] for a in range(A)]
                extended = tr.extend(responses)
                feedback = self.env.feedback(row, extended)
                new.append(tr.extend(responses, feedback) if feedback is not None else extended)
            transcripts = new
        self._last_transcripts = transcripts
        return per_slot, transcripts

    @torch.no_grad()
    def rollout(self, rows: list[dict[str, Any]], temperature: float | None = None) -> list[AgentRollout | None]:
        """Play the episodes of `rows` and tokenize the PPO samples of each policy slot.

        At each turn every agent answers the prompt the environment builds from the transcript; all agents of a
        turn generate together. Returns one [`AgentRollout`] per slot (`None` for a slot without trained samples,
        e.g. turn-1 policies when `train_turns_from=2`).
        """
        device = self.accelerator.device
        n_slots = self.team.num_agents
        per_slot, transcripts = self.play_episodes(rows, temperature)
        rollouts: list[AgentRollout | None] = []
        for s in range(n_slots):
            store = per_slot[s]
            if not store["completion_ids"]:
                rollouts.append(None)
                continue
            pad = self.team.tokenizers[s].pad_token_id
            queries, _ = pad_left(store["prompt_ids"], pad)
            # as TRL: the response window is as wide as the longest response generated (at most response_length)
            longest = max(len(ids) for ids in store["completion_ids"])
            width = max(1, min(self.args.response_length, longest))
            responses = torch.full((len(queries), width), pad, dtype=torch.long)
            for i, ids in enumerate(store["completion_ids"]):
                ids = ids[:width]
                responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            post = _truncate_tensor(responses, self.stop_token_id, pad)
            query_responses = torch.cat([queries, responses], 1).to(device)
            value_qr, value_context = query_responses, queries.size(1)
            if self.args.value_input == "answer":
                value_queries, _ = pad_left(store["value_prompt_ids"], pad)
                value_qr, value_context = torch.cat([value_queries, responses], 1).to(device), value_queries.size(1)
            rollouts.append(
                AgentRollout(
                    query_responses=query_responses,
                    context_length=queries.size(1),
                    responses=responses.to(device),
                    postprocessed=post.to(device),
                    turns=torch.tensor(store["turns"]),
                    texts=store["texts"],
                    prompts=store["prompts"],
                    agents=torch.tensor(store["agents"]),
                    value_query_responses=value_qr,
                    value_context_length=value_context,
                )
            )
        self._score(rollouts, rows, transcripts)
        self._prepare_ppo_targets(rollouts)
        return rollouts

    def _score(
        self, rollouts: list[AgentRollout | None], rows: list[dict[str, Any]], transcripts: list[Transcript]
    ) -> None:
        """One score per sample: the reward model on query + response, or the reward functions per (turn, agent)."""
        B = len(rows)
        A = self.env.num_agents
        for s, ro in enumerate(rollouts):
            if ro is None:
                continue
            if self.reward_model is not None:
                pad = self.team.tokenizers[s].pad_token_id
                qr = torch.cat([ro.query_responses[:, : ro.context_length], ro.postprocessed], 1)
                chunks = []
                step = self.args.local_rollout_forward_batch_size
                for i in range(0, qr.size(0), step):
                    chunks.append(sequence_scores(self.reward_model, qr[i : i + step], pad, ro.context_length)[1])
                ro.scores = torch.cat(chunks).float()
            else:
                ro.scores = torch.zeros(len(ro.texts), device=ro.responses.device)
        if self.reward_model is not None:
            return
        columns = {key: [row.get(key) for row in rows] for key in rows[0]}
        for t in range(self.args.train_turns_from, self.env.num_turns + 1):
            texts, prompts = self._turn_texts[t - 1], self._turn_prompts[t - 1]
            for a in range(A):
                ro = rollouts[self.slot(t, a)]
                total = torch.zeros(B)
                scored: list[list[float | None]] = []
                for func, name in zip(self.reward_funcs, self.reward_names):
                    # the multi-agent keywords win over dataset columns of the same name (e.g. PromptEnv's
                    # `agent_prompts` column), as in MAGRPO's TeamReward
                    kwargs = {
                        **columns,
                        "agent_completions": texts,
                        "agent_prompts": prompts,
                        "agent_index": a,
                        "turn": t,
                        "transcript": transcripts,
                        "trainer_state": self.state,
                    }
                    kwargs.pop("prompts", None)
                    kwargs.pop("completions", None)
                    scored.append(call_reward_function(func, name, B, prompts=prompts[a], completions=texts[a],
                                                       **kwargs))
                for i in range(B):
                    values = [v[i] for v in scored if v[i] is not None]
                    if not values:
                        raise RewardFunctionError(unscorable_message(
                            self.reward_names, f"the response of agent {a} at turn {t} to row {i} of this batch",
                            "PPO needs a score for every response (it has no group baseline to fall back on)."))
                    if not all(math.isfinite(v) for v in values):
                        raise RewardFunctionError(
                            f"A reward function ({', '.join(self.reward_names)}) returned {values} for the response "
                            f"of agent {a} at turn {t} to row {i} of this batch; PPO needs a finite score."
                        )
                    total[i] = sum(values)
                rows_of_sample = ((ro.turns == t) & (ro.agents == a)).nonzero().squeeze(-1)
                ro.scores[rows_of_sample.to(ro.scores.device)] = total.to(ro.scores.device)

    def _prepare_ppo_targets(self, rollouts: list[AgentRollout | None]) -> None:
        """Old log-probs, reference log-probs, values, KL-shaped rewards, GAE advantages and returns per slot."""
        args = self.args
        step = args.local_rollout_forward_batch_size
        for s, ro in enumerate(rollouts):
            if ro is None:
                continue
            pad = self.team.tokenizers[s].pad_token_id
            C, Cv = ro.context_length, ro.value_context_length
            logps, ref_logps, values = [], [], []
            for i in range(0, ro.query_responses.size(0), step):
                qr = ro.query_responses[i : i + step]
                resp = ro.responses[i : i + step]
                logits = self.wrapper.policy_logits(s, qr, pad)[:, C - 1 : -1] / (args.temperature + 1e-7)
                logps.append(selective_log_softmax(logits, resp))
                ref_logits = self._reference_logits(s, qr, pad)[:, C - 1 : -1] / (args.temperature + 1e-7)
                ref_logps.append(selective_log_softmax(ref_logits, resp))
                vqr = ro.value_query_responses[i : i + step]
                full_values, _ = sequence_scores(self.wrapper.value_model(s), vqr, pad, Cv)
                values.append(full_values[:, Cv - 1 : -1])
            logprobs, ref_logprobs, value = torch.cat(logps), torch.cat(ref_logps), torch.cat(values).float()
            contains_eos = (ro.postprocessed == self.team.tokenizers[s].eos_token_id).any(dim=-1)
            if args.missing_eos_penalty is not None:
                ro.scores = ro.scores.clone()
                ro.scores[~contains_eos] -= args.missing_eos_penalty
            ro.sequence_lengths = first_true_index(ro.postprocessed == pad) - 1
            policy_mask, value_mask = response_masks(ro.sequence_lengths, ro.responses.size(1))
            logprobs = torch.masked_fill(logprobs, ~policy_mask, INVALID_LOGPROB)
            ref_logprobs = torch.masked_fill(ref_logprobs, ~policy_mask, INVALID_LOGPROB)
            value = torch.masked_fill(value, ~value_mask, 0)
            kl = kl_penalty(logprobs, ref_logprobs, args.kl_estimator)
            rewards, non_score = shaped_token_rewards(ro.scores, kl, args.kl_coef, ro.sequence_lengths)
            ro.logprobs, ro.ref_logprobs, ro.values = logprobs, ref_logprobs, value
            ro.policy_mask, ro.value_mask, ro.kl, ro.non_score_rewards = policy_mask, value_mask, kl, non_score
            ro.returns = rewards  # per-token rewards until GAE below turns them into returns
        # Whitening groups: the slots that share a value model (every slot when the team shares one policy).
        groups: dict[int, list[AgentRollout]] = defaultdict(list)
        for s, ro in enumerate(rollouts):
            if ro is not None:
                groups[self.wrapper.value_index[s]].append(ro)
        for members in groups.values():
            if args.whiten_rewards:
                whitened = _whiten_group([ro.returns for ro in members], [ro.value_mask for ro in members], False)
                for ro, rewards in zip(members, whitened):
                    ro.returns = torch.masked_fill(rewards, ~ro.value_mask, 0)
            for ro in members:
                ro.advantages, ro.returns = generalized_advantage_estimation(
                    ro.returns, ro.values, args.gamma, args.lam
                )
            whitened = _whiten_group([ro.advantages for ro in members], [ro.policy_mask for ro in members], True)
            for ro, advantages in zip(members, whitened):
                ro.advantages = torch.masked_fill(advantages, ~ro.policy_mask, 0)

    def _reference_logits(self, agent_index: int, query_responses: torch.Tensor, pad: int) -> torch.Tensor:
        team = self.team
        inputs = sequence_model_inputs(query_responses, pad)
        if team.agent_adapter[agent_index] is not None and team.ref_models[team.agent_model[agent_index]] is None:
            model = team.policy(agent_index)
            flags = [(p, p.requires_grad) for p in model.parameters()]
            try:
                with model.disable_adapter():
                    return model(**inputs, return_dict=True).logits
            finally:
                for p, flag in flags:
                    p.requires_grad_(flag)
        return team.ref_models[team.agent_model[agent_index]](**inputs, return_dict=True).logits

    # ------------------------------------------------------------------ training loop
    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """Run PPO for `num_total_batches` updates (TRL 1.12's loop, over every policy slot of the team)."""
        if resume_from_checkpoint:
            raise ValueError("Resuming PPO from a checkpoint is not supported yet; start from the saved team instead.")
        args = self.args
        self.create_optimizer_and_scheduler(num_training_steps=args.num_total_batches)
        set_seed(args.seed)  # python, numpy (mini-batch order) and torch, whatever ran since `__init__`
        model, self.optimizer, dataloader = self.accelerator.prepare(
            self.wrapper, self.optimizer, self.get_train_dataloader()
        )
        self.model_wrapped = model
        torch.manual_seed(args.seed + self.accelerator.process_index * 100003)
        ga = args.gradient_accumulation_steps
        pads = [tok.pad_token_id for tok in self.team.tokenizers]

        def batches_forever() -> Any:
            while True:
                yield from dataloader

        data = iter(batches_forever())
        self.state.global_step = 0
        self.state.max_steps = args.num_total_batches
        self.state.num_train_epochs = args.total_episodes / len(self.train_dataset)
        self.state.logging_steps = (
            args.logging_steps if args.logging_steps >= 1 else math.ceil(args.num_total_batches * args.logging_steps)
        )
        self.state.save_steps = (
            args.save_steps if args.save_steps >= 1 else math.ceil(args.num_total_batches * args.save_steps)
        )
        episode = 0
        start = time.time()
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        model.train()
        micro_step = 0
        for update in range(1, args.num_total_batches + 1):
            episode += args.batch_size
            rows = next(data)
            rollouts = self.rollout(rows)
            active = [s for s, ro in enumerate(rollouts) if ro is not None]
            local = len(rollouts[active[0]].texts)  # samples per slot (equal for every trained slot)
            per_row = local // len(rows)
            mini = args.local_mini_batch_size * per_row
            micro = args.per_device_train_batch_size * per_row
            shape = (args.num_ppo_epochs, args.num_mini_batches, -(-mini // micro), len(active))
            stats = {
                k: torch.zeros(shape)
                for k in ("approxkl", "pg_clipfrac", "pg_loss", "vf_loss", "vf_clipfrac", "entropy", "ratio")
            }
            for epoch in range(args.num_ppo_epochs):
                order = np.random.permutation(local)
                for mb, mb_start in enumerate(range(0, local, mini)):
                    mini_idx = order[mb_start : mb_start + mini]
                    for k, micro_start in enumerate(range(0, mini, micro)):
                        idx = torch.as_tensor(mini_idx[micro_start : micro_start + micro])
                        micro_step += 1
                        sync = micro_step % ga == 0
                        ctx = model.no_sync() if (not sync and hasattr(model, "no_sync")) else nullcontext()
                        with ctx:
                            loss = self._ppo_micro_step(model, rollouts, idx, pads, stats, (epoch, mb, k))
                            self.accelerator.backward(loss / ga)
                        if sync:
                            self.optimizer.step()
                            self.optimizer.zero_grad()
            self.state.global_step += 1
            self._log_update(rollouts, stats, episode, start)
            self.lr_scheduler.step()
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_save:
                self._save_checkpoint(model, trial=None)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
            if args.num_sample_generations > 0 and (update - 1) % self.sample_generations_freq == 0:
                self.generate_completions(sampling=True)
            if self.control.should_evaluate and self.eval_dataset is not None and self._answer_verifier():
                self.evaluate()
            if self.control.should_training_stop:
                break
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        if self.control.should_save:
            self._save_checkpoint(model, trial=None)
            self.control = self.callback_handler.on_save(args, self.state, self.control)
        return None

    def _ppo_micro_step(
        self,
        model: nn.Module,
        rollouts: list[AgentRollout | None],
        idx: torch.Tensor,
        pads: list[int],
        stats: dict[str, torch.Tensor],
        where: tuple[int, int, int],
    ) -> torch.Tensor:
        """Clipped policy + value loss of one micro-batch, summed over the trained slots."""
        args = self.args
        batches = [
            None
            if ro is None
            else (
                ro.query_responses[idx],
                ro.context_length,
                ro.responses[idx],
                ro.value_query_responses[idx],
                ro.value_context_length,
            )
            for ro in rollouts
        ]
        outputs = model(batches, pads, args.temperature)
        total = None
        column = 0
        for ro, out in zip(rollouts, outputs):
            if ro is None:
                continue
            logits, new_logprobs, vpred = out
            policy_mask, value_mask = ro.policy_mask[idx], ro.value_mask[idx]
            new_logprobs = torch.masked_fill(new_logprobs, ~policy_mask, INVALID_LOGPROB)
            vpred = torch.masked_fill(vpred, ~value_mask, 0)
            vf_loss, vf_clipfrac = clipped_value_loss(
                vpred, ro.values[idx], ro.returns[idx], args.cliprange_value, value_mask
            )
            pg_loss, pg_clipfrac, ratio = ppo_policy_loss(
                new_logprobs, ro.logprobs[idx], ro.advantages[idx], args.cliprange, policy_mask
            )
            loss = pg_loss + args.vf_coef * vf_loss
            total = loss if total is None else total + loss
            with torch.no_grad():
                e, m, k = where
                log_diff = new_logprobs - ro.logprobs[idx]
                stats["approxkl"][e, m, k, column] = 0.5 * (log_diff**2).mean()
                stats["pg_clipfrac"][e, m, k, column] = pg_clipfrac
                stats["pg_loss"][e, m, k, column] = pg_loss
                stats["vf_loss"][e, m, k, column] = vf_loss
                stats["vf_clipfrac"][e, m, k, column] = vf_clipfrac
                stats["entropy"][e, m, k, column] = entropy_from_logits(logits).mean()
                stats["ratio"][e, m, k, column] = ratio.mean()
            column += 1
        return total

    # ------------------------------------------------------------------ logging
    def _log_update(
        self, rollouts: list[AgentRollout | None], stats: dict[str, torch.Tensor], episode: int, start: float
    ) -> None:
        gather = self.accelerator.gather_for_metrics
        trained = [ro for ro in rollouts if ro is not None]
        kl = torch.cat([ro.kl.sum(1) for ro in trained])
        entropy = torch.cat([((-ro.logprobs) * ro.policy_mask.float()).sum(1) for ro in trained])
        non_score = torch.cat([ro.non_score_rewards.sum(1) for ro in trained])
        scores = torch.cat([ro.scores for ro in trained])
        metrics: dict[str, float] = {"eps": int(episode / max(time.time() - start, 1e-9))}
        metrics["objective/kl"] = gather(kl.mean()).mean().item()
        metrics["objective/entropy"] = gather(entropy.mean()).mean().item()
        metrics["objective/non_score_reward"] = gather(non_score.mean()).mean().item()
        metrics["objective/rlhf_reward"] = gather(non_score.mean() + scores.mean()).mean().item()
        metrics["objective/scores"] = gather(scores.mean()).mean().item()
        names = {
            "approxkl": "policy/approxkl_avg",
            "pg_clipfrac": "policy/clipfrac_avg",
            "pg_loss": "loss/policy_avg",
            "vf_loss": "loss/value_avg",
            "vf_clipfrac": "val/clipfrac_avg",
            "entropy": "policy/entropy_avg",
        }
        device = self.accelerator.device
        for key, name in names.items():
            metrics[name] = gather(stats[key].to(device)).mean().item()
        metrics["val/ratio"] = gather(stats["ratio"].to(device)).mean().item()
        metrics["val/ratio_var"] = gather(stats["ratio"].to(device)).var().item()
        metrics["val/num_eos_tokens"] = sum(
            int((ro.responses == self.team.tokenizers[s].eos_token_id).sum())
            for s, ro in enumerate(rollouts)
            if ro is not None
        )
        metrics["lr"] = self.lr_scheduler.get_last_lr()[0]
        metrics["episode"] = episode
        if self.env.num_agents > 1 or self.env.num_turns > 1:
            agents = torch.cat([ro.agents for ro in trained])
            turns = torch.cat([ro.turns for ro in trained])
            sample_kl = kl.cpu()
            for a in range(self.env.num_agents):
                mine = agents == a
                if not mine.any():
                    continue
                metrics[f"agent_{a}/scores"] = float(scores.cpu()[mine].mean())
                metrics[f"agent_{a}/kl"] = float(sample_kl[mine].mean())
                for t in turns[mine].unique().tolist():
                    cell = mine & (turns == t)
                    metrics[f"agent_{a}/turn_{t}/scores"] = float(scores.cpu()[cell].mean())
            for t in turns.unique().tolist():
                metrics[f"turn_{t}/scores"] = float(scores.cpu()[turns == t].mean())
            active = [slot for slot, ro in enumerate(rollouts) if ro is not None]
            A = self.env.num_agents
            for column, slot in enumerate(active):
                prefix = (
                    f"agent_{slot % A}/turn_{slot // A + 1}/"
                    if self.args.policy_sharing == "agent_turn"
                    else (f"agent_{slot}/")
                )
                metrics[prefix + "loss/policy_avg"] = float(stats["pg_loss"][..., column].mean())
                metrics[prefix + "loss/value_avg"] = float(stats["vf_loss"][..., column].mean())
        self.state.epoch = episode / len(self.train_dataset)
        self.log(metrics)

    def _answer_verifier(self) -> Any:
        """The object that extracts and checks answers for `evaluate()`: `eval_verifier`, or a reward's verifier."""
        if self.eval_verifier is not None:
            return self.eval_verifier
        for func in self.reward_funcs:
            for candidate in (func, getattr(func, "verifier", None)):
                if candidate is not None and hasattr(candidate, "extract") and hasattr(candidate, "score"):
                    return candidate
        return None

    @torch.no_grad()
    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        temperature: float | None = None,
    ) -> dict[str, float]:
        """Play the evaluation debates and report MAPoRL's metrics under `<prefix>/`.

        Per turn: majority-vote accuracy (ties score the fraction of tied answers that are right) and mean agent
        accuracy; per turn change: collaboration transitions (W->R, R->W, persuaded, persuader); see
        `trl_marl.evaluation`. Answers are extracted and checked by `eval_verifier` (or the verifier of a reward
        function, e.g. `InfluenceAwareReward(AnswerVerifier(...))`) against the `gold_column` of each row.
        """
        from ..evaluation import evaluate_debates

        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("No evaluation dataset: pass `eval_dataset` to the trainer or to `evaluate()`.")
        verifier = self._answer_verifier()
        if verifier is None:
            raise ValueError(
                "evaluate() needs an answer verifier: pass `eval_verifier=AnswerVerifier(...)` to the trainer."
            )
        indices, prompts = check_dataset_prompts(self.env, dataset, "eval_dataset")
        check_prompt_lengths(self.team, prompts, indices, "eval_dataset", self.args.response_length,
                             f"{type(self.args).__name__}.response_length", on_long=self.args.prompt_length_check)
        rows = [dataset[i] for i in range(len(dataset))]
        rows = rows[self.accelerator.process_index :: self.accelerator.num_processes]
        if rows and self.gold_column not in rows[0]:
            raise KeyError(f"evaluate() reads the gold answer from the column {self.gold_column!r}, which is missing.")
        start = time.time()
        answers, correct = [], []
        size = self.args.per_device_eval_batch_size
        for i in range(0, len(rows), size):
            chunk = rows[i : i + size]
            self.play_episodes(chunk, temperature)
            for r, row in enumerate(chunk):
                gold = row[self.gold_column]
                turns = self._turn_texts
                answers.append(
                    [[verifier.extract(turns[t][a][r]) for a in range(self.env.num_agents)] for t in range(len(turns))]
                )
                correct.append(
                    [
                        [verifier.score(turns[t][a][r], gold) >= 0.5 for a in range(self.env.num_agents)]
                        for t in range(len(turns))
                    ]
                )
        gathered_answers = _gather_objects(self.accelerator, answers)
        gathered_correct = _gather_objects(self.accelerator, correct)
        metrics = {
            f"{metric_key_prefix}/{k}": v for k, v in evaluate_debates(gathered_answers, gathered_correct).items()
        }
        metrics[f"{metric_key_prefix}/runtime"] = time.time() - start
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    @torch.no_grad()
    def generate_completions(self, sampling: bool = False) -> None:
        """Print (and report to wandb/comet) a table of completions on the evaluation set, with their scores."""
        if self.eval_dataset is None:
            return
        rows = [self.eval_dataset[i] for i in range(min(len(self.eval_dataset), self.args.per_device_eval_batch_size))]
        rollouts = self.rollout(rows, temperature=0.01)
        table = defaultdict(list)
        for slot, ro in enumerate(rollouts):
            if ro is None:
                continue
            queries = self.team.tokenizers[slot].batch_decode(
                ro.query_responses[:, : ro.context_length], skip_special_tokens=True
            )
            table["agent"] += ro.agents.tolist()
            table["turn"] += ro.turns.tolist()
            table["query"] += queries
            table["model response"] += ro.texts
            table["score"] += [float(s) for s in ro.scores]
        if not self.accelerator.is_main_process:
            return
        lines = [" | ".join(str(table[c][i])[:60] for c in table) for i in range(min(5, len(table["query"])))]
        print("\n".join([" | ".join(table), *lines]))
        if "wandb" in (self.args.report_to or []):
            import wandb

            if wandb.run is not None:
                import pandas as pd

                wandb.log({"completions": wandb.Table(dataframe=pd.DataFrame(table))})

    # ------------------------------------------------------------------ saving
    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        super()._save(output_dir, state_dict)
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if self.args.should_save:
            for a, vm in enumerate(self.wrapper.value_models):
                vm.save_pretrained(os.path.join(output_dir, f"value_model_{a}"))

    def create_model_card(
        self,
        model_name: str | None = None,
        dataset_name: str | None = None,
        tags: str | list[str] | None = None,
        output_dir: str | None = None,
    ) -> None:
        """Write `README.md` in `output_dir`: the algorithm, the paper, the agents and the rewards."""
        if not self.is_world_process_zero():
            return
        from ..model_card import write_team_model_card

        args = self.args
        write_team_model_card(
            output_dir=output_dir or args.output_dir,
            team=self.team,
            algorithm="PPO" if self.env.num_agents == 1 else "multi-agent PPO (MAPoRL-style)",
            paper=self._paper,
            reward_names=self.reward_names,
            env_name=type(self.env).__name__,
            config_summary={
                "num_agents": args.num_agents,
                "num_turns": args.num_turns,
                "kl_coef": args.kl_coef,
                "kl_estimator": args.kl_estimator,
                "gamma": args.gamma,
                "lam": args.lam,
                "cliprange": args.cliprange,
                "vf_coef": args.vf_coef,
                "num_ppo_epochs": args.num_ppo_epochs,
                "learning_rate": args.learning_rate,
            },
            model_name=model_name,
            dataset_name=dataset_name,
            tags=[*self._tag_names, *([tags] if isinstance(tags, str) else (tags or []))],
        )


class PPOTrainer(MultiAgentPPOTrainer):
    """Drop-in replacement for TRL 1.12's `trl.experimental.ppo.PPOTrainer` (deleted in TRL 1.13).

    Same constructor, config fields and defaults, dataset format (tokenized `input_ids`), model types (a causal-LM
    policy; reward and value models as `AutoModelForSequenceClassification` with `num_labels=1`), loop and logged
    metric names. `ref_model=None` with a `peft_config` uses the adapter-disabled policy as reference.
    `save_model` writes the policy alone (loadable with `AutoModelForCausalLM.from_pretrained`). As in TRL 1.12,
    gradients are not clipped (`max_grad_norm` is unused).

    Two deliberate differences from TRL 1.12 (measured in `benchmarks/RESULTS.md`): with `num_mini_batches > 1`,
    TRL 1.12 averages its per-micro-batch statistics over slots it never fills (so `val/ratio` reads about
    1 / num_mini_batches too low); this trainer averages the micro-batches it ran. And TRL 1.12 takes an optimizer
    step at every micro-batch of the update that consumes the dataloader's last batch; this one always steps once
    every `gradient_accumulation_steps` micro-batches.

    Example:

    ```python
    # from trl.experimental.ppo import PPOConfig, PPOTrainer
    from trl_marl import PPOConfig, PPOTrainer

    trainer = PPOTrainer(args=PPOConfig(output_dir="ppo"), processing_class=tokenizer, model=policy,
                         ref_model=ref_policy, reward_model=reward_model, value_model=value_model,
                         train_dataset=dataset)
    trainer.train()
    ```
    """

    _tag_names = ["trl", "trl-marl", "ppo"]
    _name = "PPO"
    _paper = {"title": "Fine-Tuning Language Models from Human Preferences", "id": "1909.08593"}

    def __init__(
        self,
        args: PPOConfig,
        processing_class: Any,
        model: PreTrainedModel,
        ref_model: PreTrainedModel | None,
        reward_model: nn.Module,
        train_dataset: Any,
        value_model: nn.Module | None = None,
        data_collator: Any = None,
        eval_dataset: Any = None,
        optimizers: tuple[Any, Any] = (None, None),
        callbacks: list[TrainerCallback] | None = None,
        peft_config: Any = None,
    ) -> None:
        if not isinstance(args, MultiAgentPPOConfig):
            raise TypeError(f"`args` must be a PPOConfig, got {type(args).__name__}.")
        if args.num_agents != 1 or args.num_turns != 1:
            raise ValueError("PPOTrainer trains one agent for one turn; use MultiAgentPPOTrainer for teams.")
        columns = getattr(train_dataset, "column_names", None) or list(train_dataset[0])
        if "input_ids" not in columns:
            raise ValueError(
                f"PPOTrainer expects a tokenized dataset with an `input_ids` column, got columns {list(columns)}: "
                "map it first, e.g. `dataset.map(lambda x: tokenizer(x['prompt']), remove_columns=...)`."
            )
        if processing_class is None or getattr(processing_class, "pad_token_id", None) is None:
            raise ValueError(
                "`processing_class` must be a tokenizer with a pad token (e.g. `tokenizer.add_special_tokens("
                "{'pad_token': '[PAD]'})`)."
            )
        super().__init__(
            args=args,
            model=model,
            train_dataset=train_dataset,
            env=TokenizedPromptEnv(1),
            reward_model=reward_model,
            value_model=value_model,
            processing_class=processing_class,
            ref_model=ref_model,
            eval_dataset=eval_dataset,
            data_collator=data_collator,
            optimizers=optimizers,
            callbacks=callbacks,
            peft_config=peft_config,
        )

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        """Save the policy alone at the top of `output_dir` (what TRL's PPOTrainer writes)."""
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        os.makedirs(output_dir, exist_ok=True)
        self.team.policy(0).save_pretrained(output_dir)
        self.team.tokenizers[0].save_pretrained(output_dir)
        from transformers.trainer import TRAINING_ARGS_NAME

        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))
        self.create_model_card(output_dir=output_dir)


def _whiten_group(values: list[torch.Tensor], masks: list[torch.Tensor], shift_mean: bool) -> list[torch.Tensor]:
    """PPO whitening of one group: `whiten` for one slot (TRL's numerics), `whiten_jointly` for several."""
    if len(values) == 1:
        return [whiten(values[0], masks[0], shift_mean=shift_mean)]
    return whiten_jointly(values, masks, shift_mean=shift_mean)


def _gather_objects(accelerator: Any, items: list[Any]) -> list[Any]:
    """All processes' items (in process order); the items themselves on a single process."""
    if accelerator.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def _check_single_label(model: nn.Module, name: str) -> None:
    labels = getattr(getattr(model, "config", None), "num_labels", None)
    if labels != 1:
        raise ValueError(
            f"`{name}` must be a sequence classifier with one output (`num_labels=1`), got num_labels={labels}: "
            "load it with `AutoModelForSequenceClassification.from_pretrained(..., num_labels=1)`."
        )
    if not hasattr(model, "score") or not hasattr(model, "base_model_prefix"):
        raise ValueError(f"`{name}` needs a `score` head and a `base_model_prefix` backbone (a transformers model).")


def _cut(ids: list[int], stop: int | None) -> list[int]:
    if stop is None or stop not in ids:
        return ids
    return ids[: ids.index(stop) + 1]


def _truncate_tensor(responses: torch.Tensor, stop: int | None, pad: int) -> torch.Tensor:
    """Replace every token after the first stop token with padding."""
    if stop is None:
        return responses
    first = first_true_index(responses == stop).unsqueeze(-1)
    steps = torch.arange(responses.size(1)).unsqueeze(0)
    return torch.masked_fill(responses, steps > first, pad)
