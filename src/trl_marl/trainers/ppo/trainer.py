"""`MultiAgentPPOTrainer` (multi-agent PPO as in MAPoRL, arXiv 2502.18439) and the drop-in `PPOTrainer`.

PPO is "play, score, then value/GAE/epochs": the rollout engine (`trl_marl.rollout.JointRollout`, the one MAGRPO
uses) plays episodes of any [`MultiAgentEnv`] with one sample per agent per turn; every (turn, agent) response is
scored (`compute_rewards`, the reward contract of `trl_marl.reward_contract`, or a reward model) and becomes one PPO
sample of its policy slot (`AgentTeam.slot`): per-token KL penalty to its reference policy, the score on the last
step, GAE and whitening (`compute_advantages`), clipped policy and value losses (`compute_agent_loss`). With one
agent, one turn, a tokenized `input_ids` dataset and a reward model, it is TRL 1.12's `PPOTrainer` (same
constructor, config fields, loop and metric names), so code written for it runs after changing only the import.

Hooks to override (no private method needed): `compute_rewards`, `compute_advantages`, `compute_agent_loss`.
Modules of this package: `config` (`MultiAgentPPOConfig`, `PPOConfig`), `value` (value/reward models,
`PolicyValueTeam`), `samples` (each policy slot's samples and PPO targets), `logging` (the metrics of an update),
`dropin` (TRL's `PPOTrainer` interface).

One backward per policy slot: `_ppo_micro_step` sums the slots' losses for one backward; with `backward_per_agent`
each slot's forward, loss and backward run in turn instead (`_backward_per_agent`, on
`trainers.per_agent.backward_per_agent`), with the same gradient and the same logged statistics (`_agent_loss`). Why,
and when it runs, is argued once, in the `trainers/per_agent.py` docstring.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, cast

import torch
from torch import nn
from torch.utils.data import DataLoader
from transformers import GenerationConfig, PreTrainedModel, TrainerCallback, TrainerState, set_seed
from transformers.trainer import TRAINER_STATE_NAME

from ...core.estimators import CriticInputs, critic_estimator
from ...core.ppo import (
    INVALID_LOGPROB,
    bootstrap_next_turn,
    clipped_value_loss,
    ppo_policy_loss,
)
from ...envs.base import MultiAgentEnv, PromptEnv, TokenizedPromptEnv, Transcript
from ...reward_contract import NonFiniteError, RewardFunc, RewardFunctionError, RewardSet
from ...reward_contract.sets import AgentToolMessages, tool_keywords
from ...rollout import JointRollout, Rollout
from ...team import AgentTeam, sequence_model_inputs
from ...team.quantized import keep_4bit_trainable
from ...tools.toolset import team_tools
from ...utils.checkpoint_files import CheckpointSpec
from ...validation import check_prompt_lengths
from ..async_support import check_async_common
from ..base import TeamTrainer, rollout_phase
from ..fields import field_value
from ..logbook import log_tool_use
from ..magrpo.async_rollout import AsyncRollouts
from ..per_agent import backward_per_agent, backward_per_agent_supported
from .adapter_critic import build_adapter_critics
from .config import CONSOLE_METRICS, MultiAgentPPOConfig, logit_temperature, resume_problem
from .logging import STAT_NAMES, ScoreSignalCheck, completions_table, print_completions_table, update_metrics
from .samples import (
    AgentRollout,
    filled,
    forward_targets,
    micro_batch_indices,
    micro_batches,
    next_turn_values,
    put_tool_steps_back,
    score_with_reward_funcs,
    score_with_reward_model,
    skip_tool_steps,
    slot_rollouts,
)
from .value import (
    PolicyValueTeam,
    build_value_models,
    check_joint_tokenizers,
    check_single_label,
    first_true_index,
    sequence_scores,
    value_model_files,
    value_model_folder,
)

__all__ = ["AgentRollout", "MultiAgentPPOTrainer", "PolicyValueTeam", "first_true_index", "sequence_model_inputs",
           "sequence_scores"]

class MultiAgentPPOTrainer(TeamTrainer):
    """Multi-agent PPO over a [`MultiAgentEnv`] with a value model per agent (MAPoRL, arXiv 2502.18439).

    Each update plays `local_batch_size` episodes per process with the rollout engine (`JointRollout`, one sample
    per agent per turn, until `num_turns` or `env.is_done`). Every response is scored once the episode is over (a
    reward model, or `compute_rewards`: the reward functions under the reward contract of `trl_marl.reward_contract`,
    agent rewards once per (turn, agent), team rewards once per joint action), and becomes one PPO sample of its
    policy slot: per-token reward -kl_coef * KL plus the score on the last step, GAE(gamma, lam) and whitened
    advantages (`compute_advantages`), clipped policy and value losses (`compute_agent_loss`). The slots' losses
    are summed; each agent's gradients reach only its own parameters (adapter or model, and value model). An agent
    of `frozen_agents` plays and is scored, but its slots have no loss: its policy and value model never move.

    Args:
        args: A [`MultiAgentPPOConfig`].
        model: A model id or path, a `PreTrainedModel`, one per agent, or an [`AgentTeam`].
        train_dataset: Rows the environment reads.
        env: The environment. Default: `TokenizedPromptEnv` for datasets with `input_ids`, else `PromptEnv`.
        reward_funcs: TRL-style reward functions (see above). Exclusive with `reward_model`. They follow the reward
            contract of `trl_marl.reward_contract` (as in MAGRPO): one number or `None` (skip) per entry, weighted by
            `reward_weights`; a response that every function skips, or that got NaN/inf, leaves the loss (NaN/inf
            counted against `max_nonfinite`); a string or a wrong-length list raises a `RewardFunctionError`.
        reward_model: A sequence classifier (`num_labels=1`) scoring query + response tokens.
        value_model: A sequence classifier (`num_labels=1`) for the value function, or one per agent. Default: a
            fresh head on a copy of each agent's base model (training every weight, or its top
            `value_train_layers` layers and head). Saved as `value_model_<i>/`, without the frozen weights that its
            base model holds (`value.load_value_model` restores them).
        processing_class: A tokenizer (or one per agent).
        ref_model: A frozen reference policy (single agent). Default: the adapter-disabled policy with a
            `peft_config`, else a frozen copy.
        eval_dataset: Optional evaluation rows (sample-completion tables, and `evaluate()`: the reward per turn,
            per-turn majority accuracy and collaboration transitions; see `trainers.base`).
        peft_config: A `peft.LoraConfig` (one adapter per agent on one base model when there are several).
        eval_verifier: An answer verifier (`extract(response)`, `score(response, gold)`, e.g. `AnswerVerifier`) for
            `evaluate()`. Default: the verifier of a reward function that has one.
        gold_column: The dataset column holding the gold answer, for `evaluate()`.
        tools: Functions the agents may call, TRL's `tools` (docs/tools.md): one list for the whole team, or one
            per agent (`[[calculator], None]`). Within its turn an agent calls them and reads the results before it
            answers; the results' tokens are part of its response but never trained on (out of the policy and value
            losses, and skipped by GAE). Needs `stop_token='eos'` and a team with one member per agent.
        environment_factory: TRL's `environment_factory` (the whole team, or one per agent): each sample gets a
            fresh environment whose public methods are its tools.

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

    args: MultiAgentPPOConfig
    _tag_names = ["trl", "trl-marl", "ppo", "multi-agent"]
    console_metrics_default = CONSOLE_METRICS
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
        reward_funcs: RewardFunc | list[RewardFunc] | tuple[RewardFunc, ...] | None = None,
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
        tools: Sequence[Any] | None = None,
        environment_factory: Any = None,
    ) -> None:
        if ref_model is not None and ref_model is model:
            raise ValueError(
                "`model` and `ref_model` cannot be the same object: pass a copy, or `ref_model=None` with a "
                "`peft_config` (the reference is then the policy with its adapter disabled)."
            )
        if (reward_funcs is None) == (reward_model is None):
            raise ValueError("Pass exactly one of `reward_funcs` and `reward_model`.")
        if env is None and train_dataset is not None:
            columns = list(getattr(train_dataset, "column_names", None) or list(train_dataset[0]))
            tokenized = "input_ids" in columns
            env = TokenizedPromptEnv(args.num_agents) if tokenized else PromptEnv(args.num_agents, args.num_turns)
        if env is None:  # no dataset to choose it from: refused as `_check_inputs` refuses it
            raise ValueError(f"`train_dataset` is required: {self._name} plays one episode per dataset row.")
        self._check_inputs(env, args, train_dataset, eval_dataset, eval_verifier, gold_column)
        agent_tools = team_tools(tools, environment_factory, env.num_agents)  # checked before any model loads
        if any(t is not None for t in agent_tools) and args.stop_token is None and args.stop_token_id is None:
            raise ValueError("An agent with tools must stop generating at the end of its message (the tool calls are "
                             "read from it): set `stop_token='eos'` in the MultiAgentPPOConfig (with no stop token "
                             "every response runs to `response_length`).")

        # turn 1 of agent a: team member a; value heads are drawn after the team, from the same seeded state
        team = self._build_team(lambda: self._build_policies(model, args, peft_config, processing_class), args, env,
                                train_dataset, eval_dataset, args.response_length,
                                f"{type(args).__name__}.response_length",
                                agent_tools=agent_tools)
        self.frozen_slots = self._freeze_policies(team, args)
        self._setup_generation(team, args, temperature=logit_temperature(args.temperature))
        if ref_model is not None:
            if args.num_agents != 1:
                raise ValueError("`ref_model` is for a single agent; multi-agent teams use their own references.")
            ref_model.eval().requires_grad_(False)
            team.ref_models[0] = ref_model
        elif all(a is None for a in team.agent_adapter):
            team.create_reference_models()
        self.agent_stop_token_ids = self._resolve_stop_token(args, team)
        # the one stop token of every agent; None when there is none, or when the agents' differ (issue 54, item 13)
        self.stop_token_id = self.agent_stop_token_ids[0] if len(set(self.agent_stop_token_ids)) == 1 else None

        if args.critic == "centralized":
            check_joint_tokenizers(team.tokenizers)
        value_models: list[nn.Module]
        if args.value_adapter:  # adapters and heads on the policies' base (`adapter_critic`)
            if args.torch_compile and args.activation_checkpointing:
                raise ValueError("`value_adapter=True` with `torch_compile=True` and `activation_checkpointing=True`: "
                                 "the compiled policy forwards recompute without switching adapters, so a critic's "
                                 "layers would be recomputed with a policy's adapter. Turn one of the three off.")
            value_models = list(build_adapter_critics(team, args.policy_sharing, args.critic, value_model,
                                                      rank=args.value_adapter_rank))
        else:
            value_models = build_value_models(value_model, team, args.policy_sharing, args.critic,
                                              train_layers=args.value_train_layers)
        for critic in value_models:  # trained too: a 4-bit critic keeps its gradients as the team's models do
            keep_4bit_trainable(critic)
        for slot in self.frozen_slots:  # a frozen agent's critic: one per slot (`frozen_agents` refuses a shared one)
            value_models[slot].requires_grad_(False)
        self.reward_model = reward_model
        if reward_model is not None:
            check_single_label(reward_model, "reward_model")
            reward_model.eval().requires_grad_(False)
        self.reward_funcs = (
            list(reward_funcs)
            if isinstance(reward_funcs, (list, tuple))
            else ([reward_funcs] if reward_funcs is not None else [])
        )
        # `trl_marl.reward_contract`: a function without a kind scores each (turn, agent) response
        self.rewards = (self._timed_rewards(RewardSet(self.reward_funcs, args.reward_weights, "agent"), args)
                        if self.reward_funcs else None)
        self.reward_names = self.rewards.names if self.rewards is not None else ["reward_model"]
        self.disable_dropout([*team.models, *value_models, reward_model, ref_model, *team.ref_models])
        self.data_collator_user = data_collator  # accepted for API parity: rows are padded by the trainer
        shared = args.policy_sharing == "shared"  # one policy: one value model and one whitening group for the team
        one_critic = shared or args.critic == "centralized"  # MAAC: one value model, a whitening group per policy
        self.whitening_group = [0 if shared else s for s in range(team.num_agents)]
        wrapper = PolicyValueTeam(team, value_models, [0 if one_critic else s for s in range(team.num_agents)])
        self._init_trainer(team, env, args, model=wrapper, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           callbacks=callbacks, optimizers=optimizers)
        self.wrapper = wrapper
        self._set_batch_sizes()
        if self.reward_model is not None:
            self.reward_model.to(self.accelerator.device)
        for ref in team.ref_models:
            if ref is not None:
                ref.to(self.accelerator.device)
        self.last_rollout: Rollout | None = None
        # the rollout engine, with one sample per agent: episodes over turns, scored afterwards (`compute_rewards`)
        self.joint_rollout = JointRollout(
            env, team, self.rewards, self._generation_config(args.temperature), num_generations=1,
            # agents with different stop tokens: None, each agent cut at its own (`team.stop_token_ids(a)`)
            stop_token_ids=({self.stop_token_id} if self.stop_token_id is not None else
                            None if any(t is not None for t in self.agent_stop_token_ids) else set()),
            tool_loop=self.tool_loop,
        )
        # `max_staleness > 0`: the rollout worker of a `train()` call (`magrpo.async_rollout`), started by its loop
        check_async_common(args, self.accelerator.num_processes, self.is_sharded())
        self.async_rollouts: AsyncRollouts | None = None
        self._staleness: float | None = None  # of the update being trained (logged as `async/staleness`)

    # ------------------------------------------------------------------ setup helpers
    @staticmethod
    def _build_policies(model: str | PreTrainedModel | Sequence[str | PreTrainedModel] | AgentTeam,
                        args: MultiAgentPPOConfig, peft_config: Any, processing_class: Any) -> AgentTeam:
        """The team's policy slots: one per agent, one per (turn, agent), or one shared set of weights."""
        mode = args.team_mode
        if args.policy_sharing == "shared" and not isinstance(model, AgentTeam):
            if mode not in (None, "shared") or isinstance(model, (list, tuple)):
                raise ValueError("`policy_sharing='shared'` means one model for every agent (`team_mode='shared'`).")
            mode = "shared"
        turns = args.num_turns if args.policy_sharing == "agent_turn" else 1
        return AgentTeam.build(model, args.num_agents, mode=mode, peft_config=peft_config,
                               processing_class=processing_class, policy_turns=turns)

    @staticmethod
    def _freeze_policies(team: AgentTeam, args: MultiAgentPPOConfig) -> frozenset[int]:
        """Freeze the policy slots of `args.frozen_agents` (every turn's, with `policy_sharing="agent_turn"`:
        `AgentTeam.freeze_agents`) and return them; the training loop skips their losses (`_trained_slots`)."""
        if not args.frozen_agents:
            return frozenset()
        if team.mode == "shared":
            raise ValueError(f"`frozen_agents={args.frozen_agents}` cannot freeze an agent of a 'shared' team: every "
                             "agent runs the same weights. Pass a team with weights per agent ('adapters' or "
                             "'models').")
        slots = frozenset(team.slot(turn, a) for a in args.frozen_agents for turn in range(1, team.policy_turns + 1))
        team.freeze_agents(sorted(slots))
        return slots

    def _trained_slots(self, rollouts: Sequence[AgentRollout | None]) -> list[int]:
        """The policy slots an update trains: those with samples, but a frozen agent's (`frozen_agents`). Their
        order numbers the columns of the update's statistics."""
        return [s for s, ro in enumerate(rollouts) if ro is not None and s not in self.frozen_slots]

    @staticmethod
    def _resolve_stop_token(args: MultiAgentPPOConfig, team: AgentTeam) -> list[int | None]:
        """Each team member's stop token, written into its model's generation config: its own tokenizer's EOS with
        `stop_token='eos'` (a `models` team of different base models ends each agent at its own EOS, not agent 0's),
        else `stop_token_id` (None: every response runs to `response_length`)."""
        stops = [team.tokenizers[a].eos_token_id if args.stop_token == "eos" else args.stop_token_id
                 for a in range(team.num_agents)]
        for a, stop in enumerate(stops):  # generation stops exactly at the stop token (or runs to full length)
            team.base_model_of(a).generation_config.eos_token_id = stop
        return stops

    def _set_batch_sizes(self) -> None:
        self.args.set_batch_sizes(self.accelerator.num_processes, len(self.train_dataset))
        updates = field_value(self.args.num_total_batches, "num_total_batches")
        self.sample_generations_freq = max(1, updates // max(1, self.args.num_sample_generations))

    def get_train_dataloader(self) -> DataLoader:
        return self.rows_dataloader(field_value(self.args.local_batch_size, "local_batch_size"), shuffle=True,
                                    drop_last=True)

    def slot(self, turn: int, agent_index: int) -> int:
        """The team member (policy and value model) that plays agent `agent_index` at turn `turn` (1-based)."""
        return self.team.slot(turn, agent_index)

    # ------------------------------------------------------------------ rollout
    def _generation_config(self, temperature: float) -> GenerationConfig:
        tok = self.team.tokenizers[0]
        return GenerationConfig(
            max_new_tokens=self.args.response_length,
            temperature=logit_temperature(temperature),
            top_k=0,
            top_p=1.0,
            do_sample=True,
            pad_token_id=tok.pad_token_id,
            eos_token_id=self.stop_token_id,
        )

    @rollout_phase
    def play_episodes(self, rows: list[dict[str, Any]], temperature: float | None = None) -> Rollout:
        """Play the episodes of `rows` with the rollout engine (one sample per agent per turn, no scoring)."""
        config = self._generation_config(self.args.temperature if temperature is None else temperature)
        return self.joint_rollout.run(rows, trainer_state=self.state, generation_config=config, score=False)

    @rollout_phase
    def rollout(self, rows: list[dict[str, Any]], temperature: float | None = None,
                played: Rollout | None = None) -> list[AgentRollout | None]:
        """Play the episodes of `rows`, score every trained (turn, agent) response and compute the PPO targets.

        `played`: the episodes of `rows`, already played (by the asynchronous worker, `max_staleness > 0`, with the
        sampling policy's log-probabilities): only scored and given their targets here.

        Returns one [`AgentRollout`] per policy slot (`None` for a slot without trained samples, e.g. turn-1
        policies when `train_turns_from=2`).
        """
        if played is None:
            played = self.play_episodes(rows, temperature)
        self.last_rollout = played  # what the engine played (for inspection, as in MAGRPO)
        rollouts = slot_rollouts(played, self.slot, self.team.num_agents, self.team.tokenizers,
                                 self.args.response_length, self.stop_token_id, self.args.train_turns_from,
                                 self.args.value_input, self.accelerator.device, self.args.critic,
                                 self.args.critic_type)
        if self.reward_model is not None:
            self._score_with_reward_model(rollouts)
        else:
            self._score_with_reward_funcs(rollouts, played, rows)
        self._prepare_ppo_targets(rollouts)
        return rollouts

    def compute_rewards(self, prompts: list[list[Any]], completions: list[list[str]], rows: list[dict[str, Any]],
                        transcripts: list[Transcript], turn: int,
                        tool_messages: AgentToolMessages | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Score the responses of one turn of the batch's episodes, per agent (override to change the rewards).

        Args:
            prompts: `prompts[a][i]`, agent a's prompt in episode i at `turn`.
            completions: `completions[a][i]`, its response text.
            rows: The dataset row of each episode.
            transcripts: Each episode's complete transcript.
            turn: The turn (1-based).
            tool_messages: In a turn with tools, each agent's turn per episode as messages, as in
                `MAGRPOTrainer.compute_rewards` (the functions' `agent_tool_messages`); else None.

        Returns:
            `(rewards_per_func, nonfinite)`: `(B, A, F)` scores (NaN where a function returned `None`) and a
            `(B, A)` bool tensor marking NaN/inf scores; combined by `reward_weights` (`trl_marl.reward_contract`).
        """
        if self.rewards is None:  # exactly one of `reward_funcs` and `reward_model`
            raise ValueError("This trainer scores with its `reward_model`: it has no reward functions.")
        return self.rewards.score(prompts, completions, rows, transcripts, turn, self.state, per_agent=True,
                                  tool_messages=tool_messages)

    def _score_with_reward_model(self, rollouts: list[AgentRollout | None]) -> None:
        """TRL's PPO: the reward model's output at the last token of query + (stop-truncated) response."""
        if self.reward_model is None:  # exactly one of `reward_funcs` and `reward_model`
            raise ValueError("This trainer scores with its reward functions: it has no `reward_model`.")
        for s, ro in enumerate(rollouts):
            if ro is not None:
                score_with_reward_model(ro, self.reward_model, self.team.tokenizers[s].pad_token_id,
                                        self.args.local_rollout_forward_batch_size)

    def _score_with_reward_funcs(self, rollouts: list[AgentRollout | None], played: Rollout,
                                 rows: list[dict[str, Any]]) -> None:
        """One score per trained (turn, agent) response by `compute_rewards`, once the episode is over."""
        if self.rewards is None:  # exactly one of `reward_funcs` and `reward_model`
            raise ValueError("This trainer scores with its `reward_model`: it has no reward functions.")
        nonfinite = score_with_reward_funcs(rollouts, played, rows, self.compute_rewards, self.rewards, self.slot,
                                            self.args.train_turns_from)
        self.nonfinite.add(nonfinite, "rewards")

    def _prepare_ppo_targets(self, rollouts: list[AgentRollout | None]) -> None:
        """Old log-probs, reference log-probs, values, KL-shaped rewards, then `compute_advantages` per group.

        The forwards run under the accelerator's autocast, as the update's forward of the prepared policies and value
        models: with mixed precision the first micro-step's ratio is then 1 and its value predictions the old ones
        (TRL 1.12 takes them outside autocast)."""
        with self.accelerator.autocast():
            for s, ro in enumerate(rollouts):
                if ro is not None:
                    forward_targets(ro, s, self.team, self.wrapper.value_model(s), self.args)
        if self.args.turn_gamma is not None:  # eq. 6: bootstrap each turn from the next turn's value
            for ro, nxt in zip(rollouts, next_turn_values(rollouts)):
                if ro is not None:
                    ro.returns = bootstrap_next_turn(filled(ro.returns), filled(ro.sequence_lengths), filled(nxt),
                                                     self.args.turn_gamma)
        # Whitening groups: one per policy slot (one for the whole team when it shares one policy).
        groups: dict[int, list[AgentRollout]] = defaultdict(list)
        for s, ro in enumerate(rollouts):
            if ro is not None:
                groups[self.whitening_group[s]].append(ro)
        for members in groups.values():
            # with tools, `compute_advantages` sees each response without the steps the tool loop wrote (GAE runs
            # over the agent's own tokens: `skip_tool_steps`), and its results go back to their steps
            def skip(x: torch.Tensor | None, ro: AgentRollout, fill: Any = 0) -> torch.Tensor:
                return filled(x) if ro.tool_mask is None else skip_tool_steps(filled(x), ro.tool_mask, fill)

            advantages, returns = self.compute_advantages(
                [skip(ro.returns, ro) for ro in members], [skip(ro.values, ro) for ro in members],
                [skip(ro.policy_mask, ro, False) for ro in members],
                [skip(ro.value_mask, ro, False) for ro in members],
            )
            for ro, adv, ret in zip(members, advantages, returns):
                if ro.tool_mask is not None:
                    adv, ret = put_tool_steps_back(adv, ro.tool_mask), put_tool_steps_back(ret, ro.tool_mask)
                ro.advantages, ro.returns = adv, ret

    def compute_advantages(
        self, rewards: list[torch.Tensor], values: list[torch.Tensor], policy_masks: list[torch.Tensor],
        value_masks: list[torch.Tensor],
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Per-token advantages and returns of one whitening group (a policy slot; the team when it shares one).

        The default calls the critic estimator registered as `advantage_mode` (`trl_marl.core.estimators`; the
        built-in ones in `trl_marl.core.ppo`): `"gae"`, TRL's (optional reward whitening, GAE(gamma, lam), whitened
        advantages, pads 0), or `"turn"`, each response's R - V(s) (eq. 7, independent of lam) whitened over the
        group's responses and given to every token; the returns (value targets) are GAE's either way. A new credit
        assignment is one registered function (docs/extending.md); override this method only to change what the
        estimator is given.

        Args:
            rewards: Per slot, `(N, L)` per-token rewards (KL penalty plus the score at the last step).
            values: Per slot, `(N, L)` value predictions.
            policy_masks: Per slot, `(N, L)` bool: the steps that the policy loss counts.
            value_masks: Per slot, `(N, L)` bool: the steps that the value loss counts.

        Returns:
            `(advantages, returns)`, one `(N, L)` tensor of each per slot.
        """
        args = self.args
        inputs = CriticInputs(rewards, values, policy_masks, value_masks, gamma=args.gamma, lam=args.lam,
                              whiten_rewards=args.whiten_rewards)
        return critic_estimator(args.advantage_mode)(inputs)

    # ------------------------------------------------------------------ training loop
    @property
    def resumable(self) -> bool:  # type: ignore[override]
        """PPO resumes from checkpoints that hold its critics (`save_value_model=True`, the default)."""
        return bool(self.args.save_value_model)

    def checkpoint_spec(self) -> CheckpointSpec:
        """The team's checkpoint files ([`TeamCheckpointMixin.checkpoint_spec`]) and, to resume, every critic's."""
        spec = super().checkpoint_spec()
        if not self.resumable or self.args.save_only_model:
            return spec
        critics = tuple(value_model_files(value_model_folder(i)) for i in range(len(self.wrapper.value_models)))
        return dataclasses.replace(spec, required=spec.required + critics)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial: object = None,
              ignore_keys_for_eval: list[str] | None = None, **kwargs: Any) -> Any:
        """Run PPO for `num_total_batches` updates (TRL 1.12's loop, over every policy slot of the team).

        Args:
            resume_from_checkpoint: A checkpoint folder of this run, or `True` for the newest good one of
                `output_dir`: the policies, critics, optimizer, scheduler, random states and step are restored and
                the run goes on as if it had never stopped (the same weights, on one machine). TRL's PPOTrainer
                could not resume.
            trial, ignore_keys_for_eval: `Trainer.train`'s, unused (no hyperparameter search; `evaluate()` is
                whole), as any other keyword argument.

        Raises:
            ValueError: the checkpoint cannot be resumed from (see `TeamCheckpointMixin.resume_checkpoint`), the
                run is finished, or resuming is impossible here (`save_value_model=False`, `save_only_model`,
                FSDP or DeepSpeed).
            RewardFunctionError: a reward function raised or timed out (`reward_timeout`); the last completed
                update was saved first (`stop_after_reward_error`).
            NonFiniteError: more NaN/inf rewards or losses than `max_nonfinite`; saved first likewise.
        """
        if resume_from_checkpoint:
            self._check_resumable()
        checkpoint = self.resume_checkpoint(resume_from_checkpoint)
        if checkpoint is not None:
            step = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME)).global_step
            if step >= field_value(self.args.num_total_batches, "num_total_batches"):
                raise ValueError(
                    f"Cannot resume from {checkpoint}: it is at update {step} of {self.args.num_total_batches} "
                    "(`total_episodes` / `batch_size`), so this run is finished. To train further, raise "
                    "`total_episodes`; to use the trained team, load it with "
                    f'`AgentTeam.from_pretrained("{checkpoint}")`.')
        try:
            return self._train_updates(checkpoint)
        except (RewardFunctionError, NonFiniteError) as error:  # save the last completed update, then stop
            self.stop_after_reward_error(error)
        finally:  # `max_staleness > 0`: the episodes played ahead are dropped (a resumed run plays their rows)
            if self.async_rollouts is not None:
                self.async_rollouts.close()
                self.async_rollouts = None

    def _check_resumable(self) -> None:
        problem = resume_problem(self.args, bool(self.is_fsdp_enabled or self.is_deepspeed_enabled))
        if problem is not None:
            raise ValueError(problem)

    def _resume_from(self, checkpoint: str, model: nn.Module) -> TrainerState:
        """Restore the trained weights (policies and critics), the optimizer and the scheduler of `checkpoint`;
        return its trainer state."""
        self._load_from_checkpoint(checkpoint, model)
        self.wrapper.load_value_models_(checkpoint)
        self._load_optimizer_and_scheduler(checkpoint)
        return TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_NAME))

    def _train_updates(self, checkpoint: str | None = None) -> None:
        """The PPO loop of `train()`, from `checkpoint` when given."""
        args = self.args
        updates = field_value(args.num_total_batches, "num_total_batches")  # the batch sizes: `set_batch_sizes`
        batch_size = field_value(args.batch_size, "batch_size")
        mini_batch = field_value(args.local_mini_batch_size, "local_mini_batch_size")
        self.create_optimizer_and_scheduler(num_training_steps=updates)
        if self.lr_scheduler is None:  # just created
            raise RuntimeError("`create_optimizer_and_scheduler` left no learning-rate scheduler.")
        set_seed(args.seed)  # python, numpy (mini-batch order) and torch, whatever ran since `__init__`
        model, self.optimizer, dataloader = self.accelerator.prepare(
            self.wrapper, self.optimizer, self.get_train_dataloader()
        )
        self.model_wrapped = model
        self.deepspeed = model if self.is_deepspeed_enabled else None  # what Trainer.save_model saves under DeepSpeed
        torch.manual_seed(args.seed + self.accelerator.process_index * 100003)
        ga = args.gradient_accumulation_steps
        pads = [tok.pad_token_id for tok in self.team.tokenizers]
        per_agent = self._takes_backward_per_agent(model)

        def batches_forever() -> Any:
            while True:
                yield from dataloader

        data = iter(batches_forever())
        n_micro = math.ceil(mini_batch / args.per_device_train_batch_size)
        done = 0
        if checkpoint is not None:
            self.state = self._resume_from(checkpoint, model)
            done = self.state.global_step
            for _ in range(done):  # the rows the finished updates took (the sampler has its own seeded generator)
                next(data)
            self._load_rng_state(checkpoint)  # sampling goes on as it would have
        self.state.global_step = done
        state, episodes = self.state, field_value(args.total_episodes, "total_episodes")
        state.max_steps = updates
        # floats where `TrainerState` says int, as TRL 1.12 (and `Trainer`, of `logging_steps` and `save_steps`)
        state.num_train_epochs = cast(int, episodes / len(self.train_dataset))
        state.logging_steps = cast(int, args.logging_steps if args.logging_steps >= 1
                                   else math.ceil(updates * args.logging_steps))
        state.save_steps = cast(int, args.save_steps if args.save_steps >= 1 else math.ceil(updates * args.save_steps))
        episode = done * batch_size
        start = time.time()
        signal = ScoreSignalCheck(getattr(args, "no_signal_warning_interval", 10), self.accelerator.is_main_process)
        self.control = self.callback_handler.on_train_begin(args, self.state, self.control)
        model.train()
        micro_step = done * args.num_ppo_epochs * args.num_mini_batches * n_micro
        read = done  # batches of rows read from `data` (ahead of the update, with asynchronous rollouts)

        def read_rows() -> list[dict[str, Any]] | None:  # the next update's rows (None past the last update's)
            nonlocal read
            if read >= updates:
                return None
            read += 1
            return next(data)

        if args.max_staleness > 0:  # the worker copies the team now, with the weights loaded from a checkpoint
            self.async_rollouts = self._start_async_rollouts(done)
        for update in range(done + 1, updates + 1):
            episode += batch_size
            rows, played = self._rows_of_update(read_rows, update)
            # synchronous training calls `rollout(rows)` exactly as before `max_staleness` (a subclass or a wrapper
            # that overrides `rollout(rows, temperature)` keeps working)
            rollouts = self.rollout(rows) if played is None else self.rollout(rows, played=played)
            signal.see_update(update, rollouts, self.accelerator)  # warns when every score of the update is equal
            sizes = {s: len(ro.texts) for s in self._trained_slots(rollouts)  # a frozen agent's: none
                     if (ro := rollouts[s]) is not None}
            # TRL 1.12: a mini-batch of `local_mini_batch_size` episodes is cut into `n_micro` micro-batches of
            # `per_device_train_batch_size` (the last may be smaller; one micro-batch when the mini-batch is smaller)
            micro_share = args.per_device_train_batch_size / mini_batch
            shape = (args.num_ppo_epochs, args.num_mini_batches, n_micro, len(sizes))
            stats = {k: torch.zeros(shape) for k in STAT_NAMES}
            for epoch in range(args.num_ppo_epochs):
                for mb, k, idx in micro_batch_indices(sizes, args.num_mini_batches, n_micro, micro_share):
                    micro_step += 1
                    sync = micro_step % ga == 0
                    if per_agent:  # one slot's forward, loss and backward at a time (`backward_per_agent`)
                        self._backward_per_agent(model, rollouts, idx, pads, stats, (epoch, mb, k), sync)
                    else:
                        with model.no_sync() if (not sync and hasattr(model, "no_sync")) else nullcontext():
                            loss = self._ppo_micro_step(model, rollouts, idx, pads, stats, (epoch, mb, k))
                            self.accelerator.backward(loss / ga)
                    if sync:
                        self.optimizer.step()
                        self.optimizer.zero_grad()
            self.state.global_step += 1
            metrics = update_metrics(self.accelerator, args, self.env, self.team.tokenizers,
                                     float(self.lr_scheduler.get_last_lr()[0]), rollouts, stats, episode, start,
                                     columns=list(sizes))
            if self._staleness is not None:  # how many updates behind its oldest sampling policy was
                metrics["async/staleness"] = self._staleness
            if self.tool_loop is not None and self.last_rollout is not None:  # `agent_<a>/tools/*`, as in MAGRPO
                tool_metrics: dict[str, list[float | torch.Tensor]] = defaultdict(list)
                log_tool_use(tool_metrics, self.last_rollout)  # floats
                metrics.update({name: float(values[0]) for name, values in tool_metrics.items()})
            self.state.epoch = episode / len(self.train_dataset)
            self.log(metrics)
            self.lr_scheduler.step()
            self.control = self.callback_handler.on_step_end(args, self.state, self.control)
            if self.control.should_save:
                self._save_checkpoint(model, trial=None)
                self.control = self.callback_handler.on_save(args, self.state, self.control)
            if args.num_sample_generations > 0 and (update - 1) % self.sample_generations_freq == 0:
                self.generate_completions(sampling=True)
            can_evaluate = self.answer_verifier() is not None or self.rewards is not None
            if self.control.should_evaluate and self.eval_dataset is not None and can_evaluate:
                self.evaluate()
            if self.control.should_training_stop:
                break
        self.control = self.callback_handler.on_train_end(args, self.state, self.control)
        if self.control.should_save:
            self._save_checkpoint(model, trial=None)
            self.control = self.callback_handler.on_save(args, self.state, self.control)
        return None

    def _start_async_rollouts(self, version: int) -> AsyncRollouts:
        """The rollout worker of `max_staleness > 0`: it plays episodes as `play_episodes` does (the trainer's
        sampling settings, no scoring) and gives every turn the sampling policy's log-probabilities; the trainer
        scores the episodes and computes their targets when it takes them (`rollout(rows, played=...)`)."""
        config = self._generation_config(self.args.temperature)

        def play(engine: JointRollout, rows: list[dict[str, Any]], state: Any) -> Rollout:
            return engine.run(rows, trainer_state=state, generation_config=config, score=False)

        return AsyncRollouts(self.team, self.joint_rollout, self.args.max_staleness, version, lambda: self.state,
                             self.accelerator.autocast, 1, play=play)

    def _rows_of_update(self, read_rows: Callable[[], list[dict[str, Any]] | None],
                        update: int) -> tuple[list[dict[str, Any]], Rollout | None]:
        """The rows of update `update` and, with asynchronous rollouts, their episodes played by the worker (after
        publishing the current weights and reading the next updates' rows ahead)."""
        worker = self.async_rollouts
        taken = None if worker is None else worker.rollout_of_step(read_rows, self.state.global_step)
        rows = read_rows() if worker is None else None if taken is None else taken[0].rows
        if rows is None:
            raise RuntimeError(f"No rows left for update {update}.")
        if taken is None:
            return rows, None
        job, played = taken  # `take` checked its versions against the bound
        self._staleness = float(self.state.global_step - min(job.versions or (self.state.global_step,)))
        return rows, played

    def compute_agent_loss(
        self, slot: int, new_logprobs: torch.Tensor, values: torch.Tensor, rollout: AgentRollout, idx: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The PPO loss of one policy slot on one micro-batch (override to change the objective).

        The default is TRL's: the clipped surrogate plus `vf_coef` times the clipped value loss
        (`trl_marl.core.ppo`).

        Args:
            slot: The policy slot (team member).
            new_logprobs: `(n, L)` log-probs of the sampled tokens under the current policy (pads already masked).
            values: `(n, L)` value predictions (pads 0).
            rollout: The slot's samples; `rollout.<field>[idx]` are this micro-batch's old log-probs, advantages,
                returns, old values and masks.
            idx: The micro-batch's sample indices.

        Returns:
            `(loss, stats)`; `stats` holds scalar tensors `pg_loss`, `vf_loss`, `pg_clipfrac`, `vf_clipfrac` and
            `ratio` (the logged `loss/policy_avg`, `loss/value_avg`, `policy/clipfrac_avg`, `val/clipfrac_avg`,
            `val/ratio`).
        """
        args = self.args
        policy_mask, value_mask = filled(rollout.policy_mask)[idx], filled(rollout.value_mask)[idx]
        vf_loss, vf_clipfrac = clipped_value_loss(
            values, filled(rollout.values)[idx], filled(rollout.returns)[idx], args.cliprange_value, value_mask
        )
        weight = rollout.importance_sampling_ratio  # vLLM's mismatch: TRL's truncated IS (`engine_correction`)
        pg_loss, pg_clipfrac, ratio = ppo_policy_loss(
            new_logprobs, filled(rollout.logprobs)[idx], filled(rollout.advantages)[idx], args.cliprange, policy_mask,
            None if weight is None else weight[idx])
        stats = {"pg_loss": pg_loss, "vf_loss": vf_loss, "pg_clipfrac": pg_clipfrac, "vf_clipfrac": vf_clipfrac,
                 "ratio": ratio.mean()}
        return pg_loss + args.vf_coef * vf_loss, stats

    def _ppo_micro_step(
        self,
        model: nn.Module,
        rollouts: list[AgentRollout | None],
        indices: dict[int, torch.Tensor],
        pads: list[int],
        stats: dict[str, torch.Tensor],
        where: tuple[int, int, int],
    ) -> torch.Tensor:
        """One forward of every trained slot on its micro-batch (`indices[slot]`), `compute_agent_loss` of each,
        summed (the way of `backward_per_agent=False`; `_backward_per_agent` takes the slots in turn)."""
        outputs = model(micro_batches(rollouts, indices), pads, self.args.temperature)
        losses = [self._agent_loss(slot, out, rollouts, indices, stats, where)
                  for slot, out in enumerate(outputs) if out is not None]
        return sum(losses[1:], losses[0])

    def _agent_loss(
        self,
        slot: int,
        output: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        rollouts: Sequence[AgentRollout | None],
        indices: dict[int, torch.Tensor],
        stats: dict[str, torch.Tensor],
        where: tuple[int, int, int],
    ) -> torch.Tensor:
        """Slot `slot`'s PPO loss on its micro-batch (`compute_agent_loss` of its masked log-probs and values), not
        divided by the accumulation steps; fills the slot's column of `stats` at `where` (epoch, mini-batch,
        micro-batch): `approxkl`, the loss statistics and the mean entropy.

        Args:
            slot: The policy slot.
            output: `(entropies, new log-probs, values)` of the slot (`PolicyValueTeam.forward`).
            rollouts: Every slot's samples (`None` for a slot without any); a slot's stats column counts the trained
                slots with samples before it (`_trained_slots`).
            indices: Each slot's sample indices in this micro-batch.
            stats: The update's statistics, `(epochs, mini-batches, micro-batches, slots with samples)` each.
            where: `(epoch, mini-batch, micro-batch)`.
        """
        ro, idx = rollouts[slot], indices[slot]
        if ro is None:  # a slot with an output has samples
            raise ValueError(f"Policy slot {slot} has no samples in this update.")
        column = self._trained_slots(rollouts).index(slot)
        entropy, new_logprobs, vpred = output
        new_logprobs = torch.masked_fill(new_logprobs, ~filled(ro.policy_mask)[idx], INVALID_LOGPROB)
        vpred = torch.masked_fill(vpred, ~filled(ro.value_mask)[idx], 0)
        loss, loss_stats = self.compute_agent_loss(slot, new_logprobs, vpred, ro, idx)
        with torch.no_grad():
            e, m, k = where
            log_diff = new_logprobs - filled(ro.logprobs)[idx]
            stats["approxkl"][e, m, k, column] = 0.5 * (log_diff**2).mean()
            for key, value in loss_stats.items():
                stats[key][e, m, k, column] = value
            stats["entropy"][e, m, k, column] = entropy.mean()
        return loss

    def _takes_backward_per_agent(self, model: nn.Module) -> bool:
        """Whether the PPO loop takes a backward per policy slot (module docstring) or one of the summed loss:
        `backward_per_agent`, two or more slots (with one there is one backward either way, and DDP's own reducer
        is kept), the trainer's own `_ppo_micro_step` (a subclass that overrides it keeps the summed loss; the hook
        `compute_agent_loss` is called per slot both ways), and a setup that `per_agent.backward_per_agent_supported`
        accepts (`model`: the wrapper, or the wrapper as accelerate prepared it)."""
        own_step = type(self)._ppo_micro_step is MultiAgentPPOTrainer._ppo_micro_step
        if not (self.args.backward_per_agent and own_step) or self.team.num_agents < 2:
            return False
        return backward_per_agent_supported(self.args, model, self.wrapper)

    def _backward_per_agent(
        self,
        model: nn.Module,
        rollouts: Sequence[AgentRollout | None],
        indices: dict[int, torch.Tensor],
        pads: Sequence[int],
        stats: dict[str, torch.Tensor],
        where: tuple[int, int, int],
        synchronise: bool,
    ) -> None:
        """One PPO micro-step with a forward, loss and backward per policy slot (`per_agent.backward_per_agent`):
        the gradient that `backward(_ppo_micro_step(...) / gradient_accumulation_steps)` accumulates, and the same
        `stats`. `synchronise`: whether this micro-step ends an accumulation window (under DDP the gradients are then
        averaged over the processes once every slot's backward ran); the rest as for [`_agent_loss`]."""
        batches = micro_batches(rollouts, indices)
        ga = self.args.gradient_accumulation_steps

        def one_slot(slot: int) -> torch.Tensor:
            alone = [batches[slot] if s == slot else None for s in range(len(batches))]
            output = model(alone, pads, self.args.temperature)[slot]
            return self._agent_loss(slot, output, rollouts, indices, stats, where)

        slots = [slot for slot, batch in enumerate(batches) if batch is not None]
        backward_per_agent(model, self.accelerator.num_processes, slots, one_slot,
                           lambda loss: self.accelerator.backward(loss / ga), synchronise)

    # ------------------------------------------------------------------ evaluation
    def check_evaluation_prompts(self, dataset: Any) -> None:
        self.validate_dataset(self.env, dataset, "eval_dataset")
        check_prompt_lengths(self.team, self.env, dataset, "eval_dataset", self.args.response_length,
                             f"{type(self.args).__name__}.response_length", on_long=self.args.prompt_length_check,
                             member_template_kwargs=self._member_template_kwargs(self.args))

    def play_evaluation_episodes(
        self, rows: list[dict[str, Any]], temperature: float | None = None
    ) -> tuple[list[Transcript], dict[int, list[float]]]:
        played = self.play_episodes(rows, temperature)
        transcripts = played.episode_transcripts(len(rows))
        rewards: dict[int, list[float]] = {}
        if self.rewards is not None:
            for t in played.turns:  # with tools, the rewards read each agent's calls as in training
                per_func, bad = self.compute_rewards(t.prompts, t.completions, [rows[n.row_index] for n in t.nodes],
                                                     [transcripts[n.row_index] for n in t.nodes], t.turn,
                                                     **tool_keywords(t.tool_messages))
                rewards[t.turn] = self.rewards.combine(per_func, bad).nanmean(dim=1).tolist()
        return transcripts, rewards

    @torch.no_grad()
    def generate_completions(self, sampling: bool = False) -> None:
        """Print (and report to wandb/comet) a table of completions on the evaluation set, with their scores."""
        if self.eval_dataset is None:
            return
        rows = [self.eval_dataset[i] for i in range(min(len(self.eval_dataset), self.args.per_device_eval_batch_size))]
        table = completions_table(self.rollout(rows, temperature=0.01), self.team.tokenizers)
        if self.accelerator.is_main_process:
            print_completions_table(table, self.args.report_to)

    # ------------------------------------------------------------------ saving
    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        super()._save(output_dir, state_dict)
        output_dir = output_dir if output_dir is not None else self._output_dir()
        if self.args.should_save and self.args.save_value_model:
            self.wrapper.save_value_models(output_dir, state_dict)  # value_model_<i>/

    def create_model_card(  # type: ignore[override]  # TRL's signature (not transformers'), and the folder
        self,
        model_name: str | None = None,
        dataset_name: str | None = None,
        tags: str | list[str] | None = None,
        output_dir: str | None = None,
    ) -> None:
        """Write `README.md` in `output_dir`: the algorithm, the paper, the agents and the rewards."""
        args = self.args
        self.write_model_card(
            "PPO" if self.env.num_agents == 1 else "multi-agent PPO (MAPoRL-style)", self.reward_names,
            {key: getattr(args, key) for key in ("num_agents", "num_turns", "kl_coef", "kl_estimator", "gamma", "lam",
                                                 "cliprange", "vf_coef", "num_ppo_epochs", "learning_rate")},
            model_name, dataset_name, tags, output_dir)
