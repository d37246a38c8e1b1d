"""`MAGRPOTrainer`: Multi-Agent Group Relative Policy Optimization (Liu et al., arXiv 2508.04652).

Read top to bottom, as TRL keeps `GRPOTrainer` in one file: the constructor, the data, the hooks
(`compute_rewards`, `compute_advantages`, `compute_agent_loss`), the training step (`training_step ->
_make_batches -> compute_loss`, or one backward per agent), logging and evaluation. Beside it in this package:
`config` (`MAGRPOConfig` and its family), `schedule` (which rows each micro-step plays, the sampling settings, the
reference sync), `entropy` (the entropy bonus and the high-entropy token masks) and `diagnostics` (the rollout metrics
and the no-learning warnings).

One backward per agent: the team loss, a sum over the trained agents, is backpropagated one agent's forward, loss and
backward at a time (`trainers.per_agent.backward_per_agent`); why that is the summed loss's gradient for MAGRPO's
terms, and when it runs, is argued once, in the `trainers/per_agent.py` docstring.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import GenerationConfig, PreTrainedModel, TrainerCallback

from ...core import (
    advantage_estimator,
    aggregate_token_loss,
    clipped_surrogate,
    estimator_uses_local_returns,
    k3_kl,
    log_importance_weights,
    masked_mean,
    off_policy_sequence_mask,
)
from ...envs.base import MultiAgentEnv, PromptEnv, Transcript
from ...reward_contract import (
    LocalReward,
    NonFiniteError,
    RewardFunc,
    RewardFunctionError,
    TeamReward,
)
from ...reward_contract.sets import AgentToolMessages, tool_keywords
from ...rollout import JointRollout, Rollout, TurnResult, assign_advantages, rollout_advantages
from ...team import AgentBatch, AgentTeam, pad_left, pad_right
from ...tools.loop import tool_masks_tensor
from ...tools.toolset import team_tools
from ...utils.precision import cast_lm_head_to_fp32
from ...validation import check_prompt_lengths
from ..base import TeamTrainer, rollout_phase
from ..distributed import gathered_rows
from ..engine_correction import (
    agent_correction,
    corrects_engine_mismatch,
    engine_correction,
    engine_logps,
    record_correction_metrics,
)
from ..fields import dict_field_value, field_value
from ..per_agent import backward_per_agent, backward_per_agent_supported
from .async_rollout import AsyncGeneration, AsyncRollouts
from .config import CONSOLE_METRICS, MAGRPOConfig, check_async_support
from .diagnostics import (
    DiagnosticSettings,
    TrainingDiagnostics,
    TrainingDiagnosticWarning,
    log_rollout,
    print_completions,
)
from .entropy import ENTROPY_STATE_FILE, EntropyControl, agent_high_entropy_mask, high_entropy_masks
from .reference import ReferenceSync
from .sampling_config import continuous_batching_config, generation_config
from .schedule import BlockRepeatSampler, GenerationSchedule, MicroStep

if TYPE_CHECKING:
    from transformers import Trainer, TrainerState

__all__ = ["MAGRPOTrainer", "NonFiniteError", "TrainingDiagnosticWarning", "zero_loss"]



def _mean_or_zero(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`masked_mean(values, mask)`, 0 for an empty mask, as a tensor (no host sync)."""
    return torch.where(mask.sum() > 0, masked_mean(values, mask), torch.zeros((), device=values.device))

class MAGRPOTrainer(TeamTrainer):
    """Trains a team of LLM agents with MAGRPO (Multi-Agent Group Relative Policy Optimization).

    Each training micro-step plays `per_device_train_batch_size // num_generations` episodes of a
    [`MultiAgentEnv`]: every agent samples `num_generations` completions per node, the agents' samples form joint
    actions (`aligned` or `cross`), the reward functions give each joint action one centralized team reward, the
    episode continues for up to `num_turns` turns as a tree, and returns R_t = r_t + gamma * mean(R_{t+1}) become
    group-relative advantages among each agent's samples of a node. Each agent is then updated with the GRPO
    clipped surrogate over its own tokens (optionally with a k3 KL penalty to its reference policy); the team loss is
    the sum of the agents' losses, backpropagated one agent at a time (`backward_per_agent`), and every agent takes
    one optimizer step.

    With `num_agents=1` and `num_turns=1` the advantages, loss and update equal TRL's `GRPOTrainer`'s for the same
    rollouts (tested for every supported `loss_type`).

    Args:
        model: A model id or path, a `PreTrainedModel`, one of those per agent (heterogeneous team), or an
            [`AgentTeam`].
        reward_funcs: TRL-style reward functions `f(prompts, completions, **kwargs) -> list[float | None]`, called
            once per turn on all joint actions. Besides the dataset columns they receive `agent_prompts`,
            `agent_completions` (one list per agent), `agent_index=None`, `turn`, `transcript` and
            `trainer_state`. `prompts`/`completions` are agent 0's, so plain TRL functions work with one agent.
            Each entry is a number, or `None` to skip a joint action (the reward contract: `trl_marl.reward_contract`;
            a function declared an agent reward, e.g. `InfluenceAwareReward`, is called per agent and averaged).
        args: A [`MAGRPOConfig`].
        train_dataset: A `datasets.Dataset` whose rows the environment reads (by default a `prompt` column).
        eval_dataset: Optional evaluation dataset; `evaluate()` reports the team reward per turn on it and, with an
            answer verifier, per-turn majority accuracy and collaboration transitions (`trainers.base`).
        processing_class: A tokenizer, or one per agent. Default: loaded from the model names.
        env: The [`MultiAgentEnv`]. Default: [`PromptEnv`] over the `prompt` column.
        callbacks: `transformers.TrainerCallback`s.
        optimizers: `(optimizer, lr_scheduler)`, as in `transformers.Trainer`.
        peft_config: A `peft.LoraConfig`; with one base model and several agents it gives one adapter per agent.
        eval_verifier: An answer verifier (`extract(response)`, `score(response, gold)`, e.g. `AnswerVerifier`) for
            `evaluate()`. Default: a reward function that is one, or has one as `verifier`.
        gold_column: The dataset column holding the gold answer, for `evaluate()`.
        local_reward_funcs: Per-agent *local* rewards (AT-GRPO, arXiv 2510.11062): functions with the signature of
            an agent reward, each scoring one agent's own completion (`agent_index=a`, `prompts`/`completions` agent
            `a`'s, one entry per joint action); one list for every agent, or one list per agent. Each agent's local
            reward (weighted by `local_reward_weights`) is backed up through the tree like the team reward and mixed
            in by an estimator that reads it: `advantage_mode="agent_turn"`, with `team_reward_weight` (alpha)
            giving agent i the return alpha * R^team + R^loc_i (`reward_contract.LocalReward`; docs/extending.md).
            Refused with an estimator that would ignore it.

    Hooks (override in a subclass): `compute_rewards` (the team reward of each joint action of a turn),
    `compute_advantages` (every turn's advantages from its returns, in one call), `compute_agent_loss` (one
    agent's loss).

    Example:

    ```python
    from datasets import Dataset
    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards import target_sum_reward

    dataset = Dataset.from_dict({"target": [10] * 64})
    trainer = MAGRPOTrainer(
        model="toy",  # a tiny offline model; use e.g. "Qwen/Qwen2.5-0.5B-Instruct" with a peft_config for real work
        reward_funcs=target_sum_reward,
        env=TargetSumEnv(num_agents=2),
        args=MAGRPOConfig(output_dir="team", num_agents=2, num_generations=8, per_device_train_batch_size=64,
                          max_completion_length=4, learning_rate=3e-3, max_steps=60),
        train_dataset=dataset,
    )
    trainer.train()
    ```
    """

    args: MAGRPOConfig
    _tag_names = ["trl", "trl-marl", "magrpo", "multi-agent"]
    console_metrics_default = CONSOLE_METRICS
    _name = "MAGRPO"
    _paper = {
        "title": "LLM Collaboration With Multi-Agent Reinforcement Learning",
        "id": "2508.04652",
    }

    def __init__(
        self,
        model: str | PreTrainedModel | Sequence[str | PreTrainedModel] | AgentTeam,
        reward_funcs: RewardFunc | list[RewardFunc] | tuple[RewardFunc, ...],
        args: MAGRPOConfig | None = None,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        env: MultiAgentEnv | None = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        peft_config: Any = None,
        eval_verifier: Any = None,
        gold_column: str = "answer",
        local_reward_funcs: RewardFunc | Sequence[RewardFunc] | Sequence[Sequence[RewardFunc]] | None = None,
        tools: Sequence[Any] | None = None,
        environment_factory: Any = None,
    ) -> None:
        if args is None:
            name = model if isinstance(model, str) else "team"
            args = MAGRPOConfig(f"{os.path.basename(str(name))}-MAGRPO")
        if not isinstance(args, MAGRPOConfig):
            raise TypeError(f"`args` must be a MAGRPOConfig, got {type(args).__name__}.")
        env = env if env is not None else PromptEnv(num_agents=args.num_agents, num_turns=args.num_turns)
        self._check_inputs(env, args, train_dataset, eval_dataset, eval_verifier, gold_column)
        self.local_rewards = self._local_rewards(local_reward_funcs, args, env.num_agents)  # before any model loads
        agent_tools = team_tools(tools, environment_factory, env.num_agents)  # checked before any model loads

        model_init_kwargs = dict_field_value(args.model_init_kwargs, "model_init_kwargs")
        chat_template_kwargs = dict_field_value(args.chat_template_kwargs, "chat_template_kwargs")
        team = self._build_team(
            lambda: AgentTeam.build(model, args.num_agents, mode=args.team_mode, peft_config=peft_config,
                                    processing_class=processing_class, model_init_kwargs=model_init_kwargs),
            args, env, train_dataset, eval_dataset, field_value(args.max_completion_length, "max_completion_length"),
            f"{type(args).__name__}.max_completion_length", chat_template_kwargs=chat_template_kwargs,
            agent_tools=agent_tools,
        )
        if args.frozen_agents:
            team.freeze_agents(args.frozen_agents)
        if args.disable_dropout:
            self.disable_dropout([team])
        if args.cast_lm_head_to_fp32:  # before the reference copies are made, so that they get it too
            for member in [*team.models, *(ref for ref in team.ref_models if ref is not None)]:
                cast_lm_head_to_fp32(member)
        self._setup_generation(team, args, temperature=args.temperature,
                               continuous_batching_config=continuous_batching_config(args, team))
        if args.beta != 0.0:
            team.create_reference_models()
        if args.sync_ref_model:
            ReferenceSync.check(team)
        funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        self.reward_funcs = funcs
        self.rewards = self._timed_rewards(TeamReward(funcs, args.reward_weights), args)
        if args.data_seed is None:
            # accelerate reseeds the data sampler from each rank's torch seed, which differs per rank (below): a
            # fixed data seed keeps one shuffle shared by all ranks, so that they play disjoint rows.
            args.data_seed = args.seed
        self._init_trainer(team, env, args, model=team, train_dataset=train_dataset, eval_dataset=eval_dataset,
                           callbacks=callbacks, optimizers=optimizers)
        if args.sync_ref_model:
            self.add_callback(ReferenceSync(team, args.ref_model_sync_steps, args.ref_model_mixup_alpha))
        # Each process must sample its own completions: seed the generators per device, as TRL's GRPOTrainer does.
        set_seed(args.seed, device_specific=True)
        # The loss is summed over agents and already scaled for gradient accumulation in `compute_loss` (divided by
        # the accumulation steps, or for dapo normalised by the token count of the whole accumulated step).
        as_trainer: Trainer = self  # transformers declares `loss_is_scaled_for_ga: bool | None`; TRL's base, `None`
        as_trainer.loss_is_scaled_for_ga = True
        self.model_accepts_loss_kwargs = False
        self.joint_rollout = JointRollout(
            env=env,
            team=team,
            reward=self.rewards,
            generation_config=self._generation_config(),
            num_generations=field_value(args.num_generations, "num_generations"),
            joint_mode=args.joint_mode,
            discount=args.discount,
            max_branches=args.max_branches,
            early_stop_threshold=args.early_stop_threshold,
            chat_template_kwargs=chat_template_kwargs,
            score=self._score_turn,
            gather=functools.partial(gathered_rows, self.accelerator),  # batch statistics over every process
            local_reward=self.local_rewards,
            tool_loop=self.tool_loop,
        )
        # evaluation plays one sample per agent per episode with the same engine, scoring every turn
        self.eval_engine = JointRollout(
            env=env, team=team, reward=self.rewards, generation_config=self._generation_config(),
            num_generations=1, discount=args.discount, early_stop_threshold=args.early_stop_threshold,
            chat_template_kwargs=chat_template_kwargs, score=self._score_turn, tool_loop=self.tool_loop,
        )
        self.diagnostics = TrainingDiagnostics(DiagnosticSettings.of(args), self.accelerator.is_main_process)
        self._schedule = GenerationSchedule(field_value(args.steps_per_generation, "steps_per_generation"),
                                            args.num_iterations)
        self.entropy_control = EntropyControl(args, [a for a in range(env.num_agents) if a not in team.frozen])
        self.last_rollout: Rollout | None = None
        self.last_advantages: list[torch.Tensor] = []
        # `max_staleness > 0`: the rollout worker of a `train()` call (`async_rollout`), started at its first step
        check_async_support(args, self.accelerator.num_processes, self.is_sharded())
        self.async_rollouts: AsyncRollouts | None = None

    def _local_rewards(self, funcs: Any, args: MAGRPOConfig, num_agents: int) -> LocalReward | None:
        """The per-agent local rewards of `local_reward_funcs`, checked against the config before any step."""
        if funcs is None:
            if args.local_reward_weights is not None:
                raise ValueError("`local_reward_weights` is set but there is no local reward: pass the functions as "
                                 "`MAGRPOTrainer(local_reward_funcs=...)`, or leave `local_reward_weights` None.")
            if args.team_reward_weight != 1.0:
                raise ValueError(f"`team_reward_weight={args.team_reward_weight!r}` weighs the team reward against "
                                 "local rewards, but there are none: pass `MAGRPOTrainer(local_reward_funcs=...)`, or "
                                 "leave `team_reward_weight` at 1.0.")
            return None
        own_advantages = type(self).compute_advantages is not MAGRPOTrainer.compute_advantages  # reads them itself
        if not own_advantages and not estimator_uses_local_returns(field_value(args.advantage_mode, "advantage_mode")):
            raise ValueError(
                f"`local_reward_funcs` are given, but `advantage_mode={args.advantage_mode!r}` does not read local "
                "rewards: they would be scored and dropped. Use `advantage_mode='agent_turn'` (AT-GRPO: alpha * "
                "R^team + R^loc, `team_reward_weight`), or put the functions in `reward_funcs` (an agent reward there "
                "is averaged into the team reward), or register an estimator with `uses_local_returns=True`."
            )
        local = LocalReward(funcs, num_agents, args.local_reward_weights, field="local_reward_funcs",
                            weights_field=f"{type(args).__name__}.local_reward_weights")
        return self._timed_rewards(local, args)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: list[str] | None = None, **kwargs: Any) -> Any:
        """Train the team (`transformers.Trainer.train`), with sampling reseeded from `args.seed` first.

        Sampling, dropout and branch choice draw from the global generators; reseeding them here (per device, as in
        `__init__`) makes the run independent of whatever ran between building the trainer and training it (e.g. an
        evaluation). A resumed run then restores the checkpoint's generator states on top, as `Trainer` does.

        Raises:
            RewardFunctionError: a reward function raised or timed out (`reward_timeout`); the last completed step
                was saved first (`stop_after_reward_error`).
        """
        set_seed(self.args.seed, device_specific=True)
        try:
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial,
                                 ignore_keys_for_eval=ignore_keys_for_eval, **kwargs)
        except RewardFunctionError as error:  # a reward raised or timed out: save the last completed step, stop
            self.stop_after_reward_error(error)
        finally:  # `max_staleness > 0`: the rollouts generated ahead are dropped (a resumed run plays their rows)
            if self.async_rollouts is not None:
                self.async_rollouts.close()

    def _generation_config(self) -> GenerationConfig:
        return generation_config(self.args, self.team)

    # ------------------------------------------------------------------ data
    def _episodes_per_step(self) -> int:
        return self.args.per_device_train_batch_size // field_value(self.args.num_generations, "num_generations")

    def get_train_dataloader(self) -> DataLoader:
        """Batches of raw dataset rows: each micro-step plays one episode tree per row."""
        args = self.args
        # num_iterations > 1: the rows of each generation come num_iterations times in a row (BlockRepeatSampler)
        steps = field_value(args.steps_per_generation, "steps_per_generation")
        block = self._episodes_per_step() * steps * self.accelerator.num_processes
        return self.rows_dataloader(self._episodes_per_step(), shuffle=bool(args.shuffle_dataset),
                                    drop_last=args.dataloader_drop_last,
                                    wrap_sampler=None if args.num_iterations == 1 else
                                    lambda sampler: BlockRepeatSampler(sampler, block, args.num_iterations))

    # ------------------------------------------------------------------ hooks
    def compute_rewards(self, prompts: list[list[Any]], completions: list[list[str]], rows: list[dict[str, Any]],
                        transcripts: list[Transcript], turn: int,
                        tool_messages: AgentToolMessages | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Score the joint actions of one turn: one team reward per joint action (override to change rewards).

        Like TRL's `GRPOTrainer._calculate_rewards`, but public and multi-agent.

        Args:
            prompts: `prompts[a][i]`, agent a's prompt in joint action i.
            completions: `completions[a][i]`, agent a's completion text in joint action i.
            rows: The dataset row of each joint action.
            transcripts: Each joint action's transcript, including this turn.
            turn: The turn (1-based).
            tool_messages: With `tools`, `tool_messages[a][i]`, agent a's turn in joint action i as chat messages
                (its calls, their results, its answer; None for an agent without tools); the reward functions
                receive it as `agent_tool_messages`. None in a turn without tools.

        Returns:
            `(rewards_per_func, nonfinite)`: `(N, F)` scores (NaN where a function returned `None`) and a `(N,)`
            bool tensor marking NaN/inf scores; they are combined with `reward_weights` (`trl_marl.reward_contract`).
        """
        return self.rewards.score(prompts, completions, rows, transcripts, turn, self.state,
                                  tool_messages=tool_messages)

    def _score_turn(self, prompts: list[list[Any]], completions: list[list[str]], rows: list[dict[str, Any]],
                    transcripts: list[Transcript], turn: int, trainer_state: TrainerState | None = None,
                    tool_messages: AgentToolMessages | None = None,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.compute_rewards(prompts, completions, rows, transcripts, turn, **tool_keywords(tool_messages))

    def compute_advantages(self, rollout: Rollout) -> list[torch.Tensor]:
        """The advantages of every turn of one scored rollout, from its returns (override to change the credit).

        Called once per generation with the whole rollout tree. Each turn `t` of `rollout.turns` holds
        `t.returns` `(K, J)` (K nodes, J joint actions), `t.agent_returns` `(K, n, G)` (each sample's return: in
        `cross` mode the mean over the joint actions that contain it), `t.pooled_returns` (the turn's team returns on
        every process: what `advantage_mode="batch"` takes the std of, as TRL's `GRPOTrainer` gathers its rewards over
        the processes first) and `t.local_returns` `(K, n, G)` (each sample's local return with `local_reward_funcs`,
        else None). The default is the estimator registered as `advantage_mode` (`trl_marl.core.advantages`; a new
        one is a function and a decorator, docs/extending.md) over the whole tree.

        Returns:
            One `(K, n, G)` tensor per turn, in order; NaN becomes 0.
        """
        return rollout_advantages(rollout.turns, field_value(self.args.advantage_mode, "advantage_mode"),
                                  team_weight=self.args.team_reward_weight)

    # ------------------------------------------------------------------ training step
    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list[Any], None]:
        """The micro-steps of one optimizer step, each in a generation ([`GenerationSchedule`]); generation happens
        in `training_step`, so that a resumed run restores its random state first. With `max_staleness > 0` the
        rollout worker publishes this step's weights and reads the next steps' rows ahead
        (`AsyncRollouts.micro_steps`)."""
        staleness = self.args.max_staleness
        if staleness == 0:
            return self._schedule.micro_steps(epoch_iterator, num_batches), None
        if self.async_rollouts is None or self.async_rollouts.closed:  # weights loaded: resumed, or from the start
            self.async_rollouts = AsyncRollouts(
                self.team, self.joint_rollout, staleness, self.state.global_step, lambda: self.state,
                self.accelerator.autocast, field_value(self.args.steps_per_generation, "steps_per_generation"))
        return self.async_rollouts.micro_steps(epoch_iterator, num_batches, self.state.global_step), None

    def training_step(self, model: torch.nn.Module, inputs: Any, num_items_in_batch: Any = None) -> torch.Tensor:
        """Take the MAGRPO loss on one micro-batch; a generation's first micro-step plays its episodes.

        `inputs` is a [`MicroStep`] from `get_batch_samples`, or a plain list of dataset rows (then played as a
        step of its own).
        """
        last = True
        if isinstance(inputs, MicroStep):
            group = inputs.group
            batches = group.batches
            if batches is None:
                played = None
                if isinstance(group, AsyncGeneration):  # generated ahead (`max_staleness`): wait for it, check it
                    if self.async_rollouts is None:
                        raise RuntimeError("An asynchronous micro-step without a rollout worker.")
                    played = self.async_rollouts.take(group.job, self.state.global_step)
                    # how many optimizer steps behind the current policy its oldest agent policy was
                    self._metrics["train"]["async/staleness"].append(
                        float(self.state.global_step - min(group.job.versions or (self.state.global_step,))))
                # the synchronous call is unchanged (subclasses that override `_make_batches` keep working)
                made = (self._make_batches(group.row_batches, mode="train") if played is None
                        else self._make_batches(group.row_batches, mode="train", rollout=played))
                batches = group.batches = list(made)
            batch = batches[inputs.index]
            if batch is None:  # freed after its one use (`num_iterations=1`)
                raise RuntimeError(f"Micro-batch {inputs.index} of the generation was trained on already.")
            if self.args.num_iterations == 1:
                batches[inputs.index] = None  # free the micro-batch once used
            last = inputs.last
        else:
            batch = self._make_batch(inputs, mode="train")
        if self._takes_backward_per_agent(model):
            loss = self._backward_per_agent(model, batch)  # one agent's graph at a time
        else:
            loss = super().training_step(model, batch, num_items_in_batch)
        if last:  # the optimizer step's last micro-step: the entropy controllers and the diagnostics
            self.entropy_control.end_step(self.accelerator, self._metrics["train"])
            self.diagnostics.end_step(self._metrics["train"])
        return loss

    def _takes_backward_per_agent(self, model: torch.nn.Module) -> bool:
        """Whether a training step on `model` (the team, or the team wrapped by accelerate) takes a backward per agent
        (module docstring) rather than one of the summed loss: `backward_per_agent`, the trainer's own
        `compute_loss`, and a setup that `per_agent.backward_per_agent_supported` accepts."""
        if not (self.args.backward_per_agent and type(self).compute_loss is MAGRPOTrainer.compute_loss):
            return False
        return backward_per_agent_supported(self.args, model, self.team)

    def _backward_per_agent(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        """One training micro-step on `inputs` (a micro-batch of `_make_batches`) with a forward, loss and backward
        per trained agent (`per_agent.backward_per_agent`); returns the detached sum of the agents' losses, as
        `compute_loss` would (a zero loss over every trained parameter when no agent has a finite one)."""
        model.train()
        train = getattr(self.optimizer, "train", None)
        if callable(train):  # schedule-free optimizers, as `Trainer.training_step`
            train()
        frozen = self.team.frozen
        batches = inputs["batches"]
        n = len(batches)
        inputs["entropy"] = [None] * n
        inputs["entropy_mask"] = [None] * n
        entropy_grad = self.entropy_control.enabled  # entropies with gradients only for a bonus

        def one_agent(a: int) -> torch.Tensor | None:
            batch = batches[a]
            with self.compute_loss_context_manager():
                logps, entropy = model([batch if b == a else None for b in range(n)], compute_entropy=True,
                                       entropy_grad=entropy_grad)[a]
                inputs["entropy"][a] = entropy
                inputs["entropy_mask"][a] = agent_high_entropy_mask(
                    self.accelerator, entropy, batch.loss_mask, self.args.top_entropy_quantile)
                loss = self._agent_loss(a, logps, entropy, inputs, "train")
            inputs["entropy"][a] = entropy.detach()
            return loss

        def zero() -> torch.Tensor:
            with self.compute_loss_context_manager():
                return zero_loss(model)

        agents = [a for a, batch in enumerate(batches) if not (a in frozen or batch is None or len(batch) == 0)]
        # under DDP: `no_sync`, then the gradients averaged when DDP would (not under the trainer's own `no_sync`)
        total = backward_per_agent(model, self.accelerator.num_processes, agents, one_agent,
                                   self.accelerator.backward, fallback=zero)
        self._record_deferred_correction(inputs)
        steps = self.args.torch_empty_cache_steps
        if steps is not None and self.state.global_step % steps == 0:
            from accelerate.utils.memory import clear_device_cache

            clear_device_cache()
        return total

    def _inference_logps(self, batches: list[AgentBatch | None], reference: bool = False) -> list[Any]:
        """The old-policy (or reference) log-probabilities of each agent's batch (None: frozen). When the training
        step takes the summed loss (every agent's activations at once), an `adapters` team scores every agent's rows
        in one forward (`AgentTeam.inference_logps_all`); with a backward per agent, one forward per agent.

        Under the accelerator's autocast, as the training forward (and TRL's): with mixed precision the old-policy
        and reference log-probs are those of the same bf16/fp16 computation, so before any update the ratio is 1
        and the KL 0, not the gap between fp32 and mixed-precision logits."""
        with self.accelerator.autocast():
            if not self._takes_backward_per_agent(self.model_wrapped):
                return self.team.inference_logps_all(batches, reference=reference)
            scored = self.team.reference_logps if reference else self.team.policy_logps
            return [None if b is None else scored(a, b) for a, b in enumerate(batches)]

    def _prepare_inputs(self, inputs: Any) -> Any:
        return inputs  # `_make_batches` already placed the tensors on the device

    @torch.no_grad()
    def _make_batch(self, rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
        """Roll out, score and tokenize the episodes of `rows` as one micro-batch (see `_make_batches`)."""
        return self._make_batches([rows], mode)[0]

    @rollout_phase
    def _make_batches(self, row_batches: list[list[dict[str, Any]]], mode: str,
                      rollout: Rollout | None = None) -> list[dict[str, Any]]:
        """Play the episodes of every micro-batch of one optimizer step in one rollout, then split it by episode.
        `rollout`: the rows' rollout, already played (by the asynchronous worker, `max_staleness > 0`).

        Returns one input dict per micro-batch: an [`AgentBatch`] and an advantage vector per agent, reference
        log-probs when `beta != 0`, and `num_items`, each agent's completion-token count of the *whole* step
        across processes (the normalizer of `loss_type="dapo"`).
        """
        device = self.accelerator.device
        args, mu = self.args, self.args.num_iterations
        steps = field_value(args.steps_per_generation, "steps_per_generation")
        rows = [row for batch in row_batches for row in batch]
        if rollout is None:
            rollout = self.joint_rollout.run(rows, trainer_state=self.state)
        self.rewards.require_some_score([t.rewards_per_func for t in rollout.turns], rollout.nonfinite_rewards)
        self.last_rollout = rollout
        assign_advantages(rollout.turns, self.compute_advantages(rollout))  # the engine stops at returns
        self._count_nonfinite(rollout.nonfinite_rewards, "rewards")
        n = self.env.num_agents
        eos_ids = set().union(*(self.team.stop_token_ids(a) for a in range(n)))  # where generation stopped
        if mode == "train":
            # groups without a signal, rewards, cuts: a built-in estimator is asked again in float64; a user's
            # estimator (which may keep state or cost) is never called twice, and its assigned advantages are read
            # instead, as they are when `compute_advantages` is overridden
            hooked = type(self).compute_advantages is not MAGRPOTrainer.compute_advantages
            builtin = advantage_estimator(field_value(args.advantage_mode, "advantage_mode")).__module__.startswith(
                "trl_marl.")
            self.diagnostics.see_rollout(rollout, eos_ids, args.advantage_mode if builtin and not hooked else None)
        bounds = [0]
        for batch in row_batches:
            bounds.append(bounds[-1] + len(batch))
        # the row of every sample of every turn (sample k * G + g of a turn belongs to node k)
        G = field_value(self.args.num_generations, "num_generations")
        assigned = []  # each turn's (K, n, G) advantages, which `assign_advantages` filled
        for t in rollout.turns:
            if t.advantages is None:
                raise RuntimeError(f"Turn {t.turn} has no advantages after `compute_advantages`.")
            assigned.append(t.advantages)
        multiple = args.pad_to_multiple_of
        if isinstance(multiple, str):  # `__post_init__` resolves "auto"
            raise ValueError(f"`pad_to_multiple_of` must be an integer or None, got {multiple!r}.")
        sample_rows = [torch.tensor([node.row_index for node in t.nodes]).repeat_interleave(G) for t in rollout.turns]
        micro_batches: list[dict[str, Any]] = []
        all_batches: list[list[AgentBatch]] = []
        all_advantages: list[list[torch.Tensor]] = []
        all_turns: list[list[torch.Tensor]] = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            picks = [((r >= lo) & (r < hi)).nonzero().squeeze(-1).tolist() for r in sample_rows]
            batches: list[AgentBatch] = []
            advantages: list[torch.Tensor] = []
            turn_of_sample: list[torch.Tensor] = []
            for a in range(n):
                prompt_ids = [t.prompt_ids[a][i] for t, pick in zip(rollout.turns, picks) for i in pick]
                completion_ids = [t.completion_ids[a][i] for t, pick in zip(rollout.turns, picks) for i in pick]
                adv = torch.cat([turn_adv[:, a, :].reshape(-1)[pick] for turn_adv, pick in zip(assigned, picks)])
                turn_index = torch.cat([torch.full((len(pick),), t.turn) for t, pick in zip(rollout.turns, picks)])
                pad_id = self.team.tokenizers[a].pad_token_id
                p_ids, p_mask = pad_left(prompt_ids, pad_id, multiple)
                c_ids, c_mask = pad_right(completion_ids, pad_id, multiple)
                tool_mask = None
                if any(t.tool_masks is not None and t.tool_masks[a] is not None for t in rollout.turns):
                    tool_mask = tool_masks_tensor([_tool_mask(t, a, i) for t, pick in zip(rollout.turns, picks)
                                                   for i in pick], c_ids.size(1))
                if self.args.mask_truncated_completions:
                    own = self.team.stop_token_ids(a)  # this agent's EOS, not another agent's (issue 54, item 13)
                    truncated = torch.tensor([not (ids and ids[-1] in own) for ids in completion_ids])
                    c_mask = c_mask * (~truncated).unsqueeze(1).long()
                batches.append(AgentBatch(p_ids, p_mask, c_ids, c_mask, tool_mask=tool_mask).to(device))
                advantages.append(adv.float().to(device))
                turn_of_sample.append(turn_index)
            trained = [None if a in self.team.frozen else batches[a] for a in range(n)]
            ref_logps = None
            if self.args.beta != 0.0:
                ref_logps = self._inference_logps(trained, reference=True)
            # as TRL: when every micro-batch of the generation is used within one optimizer step, the ratio's
            # denominator is the detached current policy (old_logps None, no extra forward); otherwise (mu > 1, or
            # steps_per_generation > GA steps) each agent's log-probs at sampling time, from a forward of their own
            engine = engine_logps(rollout.turns, picks, batches) if corrects_engine_mismatch(args, mode) else None
            aligned = args.gradient_accumulation_steps % (steps * mu) == 0
            old_logps = self._inference_logps(trained) if mode == "train" and not aligned else None
            if engine is not None and old_logps is None:
                # the engine's (or an older version's) mismatch, aligned: the current policy at sampling time is
                # the training forward's, detached; the ratio is taken there (`_agent_loss`), not by an extra
                # forward (TRL's GRPOTrainer takes one)
                correction: dict[str, Any] = {"sampling_logps": engine, "importance_sampling_ratio": [None] * n,
                                              "deferred_correction": {}}
            else:
                correction = engine_correction(args, self.accelerator, self._metrics["train"], old_logps, engine,
                                               trained)
            micro_batches.append({"batches": batches, "advantages": advantages, "old_logps": old_logps,
                                  "ref_logps": ref_logps, "turn_of_sample": turn_of_sample, **correction,
                                  **_sample_versions(rollout.turns, picks, n)})
            all_batches.append(batches)
            all_advantages.append(advantages)
            all_turns.append(turn_of_sample)
        # dapo divides by the completion tokens of the whole step: every micro-batch, every process
        # as TRL: the generation's tokens, rescaled to one accumulation window; every agent's count in one all-gather
        window = args.gradient_accumulation_steps / steps if mode == "train" else 1.0
        counts = torch.stack([torch.stack([batches[a].loss_mask.sum() for batches in all_batches]).sum()
                              for a in range(n)]).to(device)  # [n]
        totals = self.accelerator.gather(counts).view(-1, n).sum(dim=0)  # [processes * n] -> [n]
        num_items = [total * window for total in totals.unbind()]
        for micro in micro_batches:
            micro["num_items"] = num_items
        self.last_advantages = [torch.cat([adv[a] for adv in all_advantages]) for a in range(n)]
        lengths = [torch.cat([b[a].loss_mask.sum(dim=1).float().cpu() for b in all_batches]) for a in range(n)]
        turns = [torch.cat([t[a] for t in all_turns]) for a in range(n)]
        self._log_rollout(rollout, lengths, self.last_advantages, turns, mode)
        return micro_batches

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> torch.Tensor:
        """Sum over agents of the GRPO clipped-surrogate loss on each agent's own tokens (+ beta * k3 KL, - the
        entropy bonus `c_a * H_a` with `entropy_coef`, see `magrpo.entropy`). Training backpropagates the same sum
        one agent at a time instead (`backward_per_agent`, module docstring) unless a subclass overrides this."""
        mode = "train" if self.model.training else "eval"
        frozen = self.team.frozen
        results = model([None if a in frozen else b for a, b in enumerate(inputs["batches"])], compute_entropy=True,
                        entropy_grad=self.entropy_control.enabled)  # entropies with gradients only for a bonus
        inputs["entropy"] = [None if r is None else r[1] for r in results]
        inputs["entropy_mask"] = high_entropy_masks(self.accelerator, inputs, self.args.top_entropy_quantile)
        losses = [self._agent_loss(a, result[0], result[1], inputs, mode)  # (log-probs, entropies)
                  for a, result in enumerate(results) if result is not None]
        self._record_deferred_correction(inputs)
        total: torch.Tensor | None = None
        for loss in losses:
            if loss is not None:  # a non-finite loss is skipped (and counted)
                total = loss if total is None else total + loss
        return zero_loss(model) if total is None else total

    def _take_deferred_ratio(self, agent: int, logps: torch.Tensor, inputs: dict[str, Any]) -> None:
        """Set `inputs["importance_sampling_ratio"][agent]` from `logps` (the training forward's, detached) when the
        micro-batch defers its engine correction to the training forward (`deferred_correction`) and it is not set
        yet; the metrics' values go to `deferred_correction[agent]`."""
        deferred = inputs.get("deferred_correction")
        if deferred is not None and agent not in deferred:
            ratio, deferred[agent] = agent_correction(self.args, logps, inputs["sampling_logps"][agent],
                                                      inputs["batches"][agent].loss_mask)
            inputs["importance_sampling_ratio"][agent] = ratio

    def _record_deferred_correction(self, inputs: dict[str, Any]) -> None:
        """Record the engine correction's metrics of a micro-batch whose ratios were taken from the training forward
        (`deferred_correction`, filled by `_agent_loss`), once every agent's loss is taken: per agent and pooled over
        the trained agents, each reduced over the processes, as `engine_correction` records them."""
        deferred = inputs.get("deferred_correction")
        if deferred is None:
            return
        inputs["deferred_correction"] = None  # recorded once; a reused micro-batch keeps its ratios
        trained = [a for a in range(len(inputs["batches"])) if a not in self.team.frozen]
        record_correction_metrics(self.accelerator, self._metrics["train"], trained, deferred)

    def _agent_loss(self, agent: int, logps: torch.Tensor, entropy: torch.Tensor, inputs: dict[str, Any],
                    mode: str) -> torch.Tensor | None:
        """Agent `agent`'s term of the MAGRPO loss, its metrics recorded: `compute_agent_loss`, divided by the
        accumulation steps in training (except for `dapo`), minus the entropy bonus; `None` (counted under
        `nonfinite/loss`) when it is not finite. `inputs["entropy"][agent]` and `inputs["entropy_mask"][agent]` must
        be set."""
        args = self.args
        bonus = self.entropy_control
        metrics = self._metrics[mode]
        mask = inputs["batches"][agent].loss_mask
        self._take_deferred_ratio(agent, logps, inputs)  # before a subclass's `compute_agent_loss` reads it
        loss, kl, clipped = self.compute_agent_loss(agent, logps, inputs)
        if mode == "train" and args.loss_type != "dapo":
            loss = loss / self.current_gradient_accumulation_steps
        prefix = f"agent_{agent}/"
        # metrics are recorded as device tensors, read on the host once per log (`MetricsBook`): no host sync per
        # agent here but the finiteness check, which decides whether the agent's loss is used
        if bonus.enabled:  # over the tokens the policy loss acts on, scaled for accumulation only (as TRL)
            metrics[prefix + "policy_loss"].append(loss.detach())
            tokens = mask if inputs["entropy_mask"][agent] is None else mask * inputs["entropy_mask"][agent]
            scale = self.current_gradient_accumulation_steps if mode == "train" else 1.0
            loss = loss - bonus.bonus(agent, entropy, tokens, scale, train=mode == "train")
        if not torch.isfinite(loss):
            self._count_nonfinite(1, "loss")
            return None
        fmask = mask.float()
        metrics[prefix + "entropy"].append(_mean_or_zero(entropy.detach(), fmask))
        if mode == "train":
            self.diagnostics.add_entropy(agent, entropy, fmask)
        if kl is not None:
            metrics[prefix + "kl"].append(_mean_or_zero(kl.detach(), fmask))
        clip_mask = clipped.expand_as(fmask).float() if clipped.dim() == 2 else clipped.float()
        metrics[prefix + "clip_ratio"].append(_mean_or_zero(clip_mask, fmask))
        metrics[prefix + "loss"].append(loss.detach())
        return loss

    def compute_agent_loss(self, agent_index: int, logps: torch.Tensor,
                           inputs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """One agent's loss on a micro-batch (override to change the objective; the trainer sums the agents').

        The default is GRPO's: the clipped surrogate of `logps` against the detached current policy (or
        `inputs["old_logps"][a]`) with `inputs["advantages"][a]`, without the drifted negative-advantage samples
        (`off_policy_mask_threshold`) and on the tokens of `inputs["entropy_mask"][a]` (`top_entropy_quantile`),
        plus `beta` times the k3 KL to `inputs["ref_logps"][a]` (times the importance ratio with
        `use_bias_correction_kl`, TRL's default), aggregated over the tokens by `loss_type` (the trainer then
        divides by the accumulation steps, except for `dapo`, and subtracts the entropy bonus).

        Args:
            agent_index: The agent.
            logps: `(B, L)` per-token log-probs of its completions under its current policy (with gradients).
            inputs: The micro-batch from `_make_batch`: `batches[a]` (an `AgentBatch`), `advantages[a]`,
                `old_logps`, `ref_logps`, `num_items`, `turn_of_sample[a]`, `entropy[a]` (per-token entropies),
                `entropy_mask[a]` (`None`: every token) and, with asynchronous rollouts (`max_staleness > 0`),
                `policy_versions[a]` (the version of agent a's policy that sampled each row) with the behaviour
                policy's `sampling_logps[a]` and `importance_sampling_ratio[a]`.

        Returns:
            `(loss, kl, clipped)`: the scalar loss, the per-token KL (`None` without one, for logging) and the
            clipped mask (for `clip_ratio`).
        """
        args = self.args
        mask = inputs["batches"][agent_index].loss_mask
        old = logps.detach() if inputs["old_logps"] is None else inputs["old_logps"][agent_index]
        per_token_loss, clipped = clipped_surrogate(
            logps, old, inputs["advantages"][agent_index], epsilon_low=args.epsilon, epsilon_high=args.epsilon_high,
            delta=args.delta, importance_sampling_level=args.importance_sampling_level, mask=mask,
        )
        engine = inputs.get("sampling_logps")  # vLLM's log-probs: drift and the engine mismatch (`engine_correction`)
        if engine is not None:
            self._take_deferred_ratio(agent_index, logps, inputs)
        if args.off_policy_mask_threshold is not None:  # drop drifted sequences of negative advantage (TRL: vs vLLM's)
            per_token_loss = per_token_loss * off_policy_sequence_mask(inputs["advantages"][agent_index], logps, old if
                                                                       engine is None else engine[agent_index], mask,
                                                                       args.off_policy_mask_threshold)
        entropy_masks = inputs.get("entropy_mask")  # absent when a subclass builds its own inputs
        entropy_mask = None if entropy_masks is None else entropy_masks[agent_index]
        if entropy_mask is not None:  # top_entropy_quantile: the policy gradient only on high-entropy tokens
            per_token_loss = per_token_loss * entropy_mask
        if engine is not None:  # TRL's truncated importance-sampling weight of the engine mismatch
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"][agent_index]
        kl = None
        if args.beta != 0.0:
            kl = k3_kl(logps, inputs["ref_logps"][agent_index])
            if args.use_bias_correction_kl:  # TRL's default: kl * rho (rho's gradient acts even where rho = 1)
                kl = kl * torch.exp(log_importance_weights(logps, old, args.importance_sampling_level, mask))
            per_token_loss = per_token_loss + args.beta * kl
        # dapo: `num_items` counts the tokens of every micro-batch of the step on every process; gradients are
        # averaged over processes, hence the division by their number (and none by the accumulation steps)
        num_items = inputs["num_items"][agent_index] / self.accelerator.num_processes
        loss = aggregate_token_loss(per_token_loss, mask, args.loss_type,
                                    max_completion_length=args.max_completion_length, num_items_in_batch=num_items)
        return loss, kl, clipped

    def save_extra_state(self, checkpoint_dir: str) -> None:
        self.entropy_control.save(checkpoint_dir)

    def load_extra_state(self, checkpoint_dir: str) -> None:
        self.entropy_control.load(checkpoint_dir)

    def extra_state_files(self) -> list[str]:
        return [ENTROPY_STATE_FILE] if self.entropy_control.adaptive else []

    def _count_nonfinite(self, count: int, what: str) -> None:
        if count:
            self._metrics["train"][f"nonfinite/{what}"].append(float(count))
        self.nonfinite.add(count, what)

    # ------------------------------------------------------------------ logging
    def _log_rollout(self, rollout: Rollout, lengths: list[torch.Tensor], advantages: list[torch.Tensor],
                     turn_of_sample: list[torch.Tensor], mode: str) -> None:
        """Record a rollout's metrics (`diagnostics.log_rollout`), and print a few joint actions with
        `log_completions`."""
        log_rollout(self._metrics[mode], rollout, self.rewards.names, lengths, advantages, turn_of_sample,
                    local_reward_names=None if self.local_rewards is None else
                    [self.local_rewards.names(a) for a in range(self.env.num_agents)])
        if self.args.log_completions and self.accelerator.is_main_process and mode == "train":
            print_completions(rollout, self.env.num_agents, field_value(self.args.num_generations, "num_generations"),
                              self.args.num_completions_to_print or 4, self.state.global_step)

    # ------------------------------------------------------------------ evaluation
    def check_evaluation_prompts(self, dataset: Any) -> None:
        self.validate_dataset(self.env, dataset, "eval_dataset")
        args = self.args
        check_prompt_lengths(self.team, self.env, dataset, "eval_dataset",
                             field_value(args.max_completion_length, "max_completion_length"),
                             f"{type(self.args).__name__}.max_completion_length",
                             chat_template_kwargs=dict_field_value(args.chat_template_kwargs, "chat_template_kwargs"),
                             on_long=self.args.prompt_length_check,
                             member_template_kwargs=self._member_template_kwargs(self.args))

    def evaluation_samples_per_row(self) -> int:
        return field_value(self.args.num_generations_eval, "num_generations_eval")

    def play_evaluation_episodes(
        self, rows: list[dict[str, Any]], temperature: float | None = None
    ) -> tuple[list[Transcript], dict[int, list[float]]]:
        """One episode per row, one sample per agent (the training engine with `num_generations=1`)."""
        config = None
        if temperature is not None:
            config = self._generation_config()
            config.temperature = temperature
        rollout = self.eval_engine.run(rows, trainer_state=self.state, generation_config=config)
        self.rewards.require_some_score([t.rewards_per_func for t in rollout.turns], rollout.nonfinite_rewards)
        return (rollout.episode_transcripts(len(rows)),
                {t.turn: t.rewards[:, 0].tolist() for t in rollout.turns})

    # ------------------------------------------------------------------ model card
    def create_model_card(  # type: ignore[override]  # TRL's signature (not transformers'), and the folder
            self, model_name: str | None = None, dataset_name: str | None = None, tags: str | list[str] | None = None,
            output_dir: str | None = None) -> None:
        """Write `README.md` in `output_dir`: the algorithm, the paper, the agents and the rewards."""
        args = self.args
        self.write_model_card(
            "MAGRPO (Multi-Agent Group Relative Policy Optimization)", self.rewards.names,
            {"num_agents": args.num_agents, "num_turns": args.num_turns, "num_generations": args.num_generations,
             "joint_mode": args.joint_mode, "advantage_mode": args.advantage_mode, "discount": args.discount,
             "loss_type": args.loss_type, "beta": args.beta, "learning_rate": args.learning_rate},
            model_name, dataset_name, tags, output_dir)


def _sample_versions(turns: Sequence[TurnResult], picks: Sequence[Sequence[int]], n: int) -> dict[str, Any]:
    """`{"policy_versions": [agent] (B,) the policy version of every sample of a micro-batch}` when the rollout
    records them (asynchronous rollouts), else `{}`."""
    if not turns or any(t.policy_versions is None for t in turns):
        return {}
    versions = [t.policy_versions or [] for t in turns]
    return {"policy_versions": [torch.cat([torch.full((len(pick),), v[a], dtype=torch.long)
                                           for v, pick in zip(versions, picks)]) for a in range(n)]}


def _tool_mask(turn: TurnResult, agent: int, sample: int) -> list[int]:
    """Sample `sample`'s tool mask of `agent` at `turn` (all ones for an agent without tools)."""
    masks = turn.tool_masks[agent] if turn.tool_masks is not None else None
    return masks[sample] if masks is not None else [1] * len(turn.completion_ids[agent][sample])


def zero_loss(model: torch.nn.Module) -> torch.Tensor:
    """A zero loss that touches every trained parameter (when every agent's loss was non-finite)."""
    return sum((p.sum() * 0.0 for p in model.parameters() if p.requires_grad), torch.zeros(()))
