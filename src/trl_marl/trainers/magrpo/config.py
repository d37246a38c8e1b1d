"""Configuration of [`MAGRPOTrainer`]."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ..._trl_compat import GRPOConfig
from ...core import (
    JOINT_MODES,
    SUPPORTED_LOSS_TYPES,
    advantage_estimator,
    estimator_for_scale_rewards,
    estimator_scale_rewards,
    estimator_uses_local_returns,
    scale_rewards_help,
)
from ...reward_contract import REWARD_ISOLATIONS
from ...reward_contract.settings import reward_isolation_field, reward_timeout_field
from ...team.generation import check_generation_backend, compiled_sync_every_field
from ...tools.settings import (
    check_tool_settings,
    max_tool_result_chars_field,
    tool_call_timeout_field,
    tool_turn_timeout_field,
)
from ...validation import (
    PROMPT_LENGTH_CHECKS,
    check_choice,
    check_importance_sampling,
    check_learning_rate,
    check_mixed_precision,
    check_positive,
    check_timeout,
    generation_batch_error,
    has_accelerator,
    use_activation_checkpointing_name,
    use_cpu_for_cpu_processes,
)
from ..async_support import async_names, check_async_common
from ..console import check_console_metrics, console_metrics_field
from ..fields import (
    advantage_mode_field,
    backward_per_agent_field,
    cpu_threads_field,
    field_value,
    frozen_agents_field,
    generation_backend_field,
    max_nonfinite_field,
    max_staleness_field,
    max_staleness_value,
    num_agents_field,
    num_turns_field,
    prompt_length_check_field,
    share_prompt_prefill_field,
    team_mode_field,
    vllm_kv_cache_memory_bytes_field,
    vllm_logprobs_mode_field,
)

# GRPO fields that MAGRPOTrainer implements; any other GRPOConfig field must keep its default (checked below), so
# that a setting is never silently ignored.
HONOURED_GRPO_FIELDS = frozenset({
    "model_init_kwargs", "disable_dropout", "remove_unused_columns", "num_generations", "max_completion_length",
    "shuffle_dataset", "generation_batch_size", "steps_per_generation", "temperature", "top_p", "top_k", "min_p",
    "generation_kwargs", "chat_template_kwargs", "repetition_penalty", "beta", "epsilon", "epsilon_high", "delta",
    "importance_sampling_level", "reward_weights", "scale_rewards", "loss_type", "mask_truncated_completions",
    "log_completions", "num_completions_to_print", "learning_rate", "logging_steps", "gradient_checkpointing", "bf16",
    "lr_scheduler_kwargs", "use_liger_kernel", "torch_empty_cache_steps", "num_iterations", "cache_implementation",
    "trust_remote_code", "use_bias_correction_kl", "top_entropy_quantile", "sync_ref_model",
    "pad_to_multiple_of", "entropy_coef", "use_adaptive_entropy", "entropy_coef_min", "entropy_coef_max",
    "entropy_coef_delta", "entropy_target", "off_policy_mask_threshold", "cast_lm_head_to_fp32",
    "num_generations_eval", "use_transformers_continuous_batching", "use_transformers_paged",
    "transformers_continuous_batching_config",
    # vLLM's fields: honoured by `generation_backend="vllm"` (which `use_vllm` selects), or refused there with a reason
    # (`trl_marl.team.generation.check_generation_backend`)
    "vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode", "vllm_structured_outputs_regex", "vllm_server_base_url",
    "vllm_server_host", "vllm_server_port", "vllm_server_timeout", "vllm_group_port", "vllm_gpu_memory_utilization",
    "vllm_max_model_length", "vllm_tensor_parallel_size", "vllm_importance_sampling_correction",
    "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max", "vllm_importance_sampling_clip_min",
    "vllm_importance_sampling_cap",
    # fields of the SAPO/VESPO losses, which are refused through `loss_type`
    "sapo_temperature_neg", "sapo_temperature_pos", "vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg",
    "vespo_lambda_neg",
    "ref_model_mixup_alpha", "ref_model_sync_steps",  # sync_ref_model's
    "log_multimodal",
    "max_tool_calling_iterations",  # the rounds of tool calls in one agent's turn (`trl_marl.tools.ToolLoop`)
})


# Why a GRPO setting is refused, for the ones with a reason worth telling (the others: not implemented in MAGRPO).
_REFUSAL_REASONS = {
    "router_aux_loss_coef": "not implemented yet: the team's forward does not ask MoE models for their router "
    "logits, so there is no load-balancing loss to weight",
}


# GRPOConfig.__post_init__ rewrites some defaults (e.g. pad_to_multiple_of "auto" -> None on CPU and GPU)
_NORMALIZED_DEFAULTS = {"pad_to_multiple_of": ("auto", None)}


CONSOLE_METRICS = ("loss", "reward", "reward_std", "agent_*/kl", "grad_norm", "learning_rate")
"""What the console shows of each logged step when `console_metrics` is None (every metric is logged)."""


@dataclass
class MAGRPOConfig(GRPOConfig):
    r"""Configuration of [`MAGRPOTrainer`]: Multi-Agent Group Relative Policy Optimization (arXiv 2508.04652).

    It subclasses `trl.GRPOConfig`, so every GRPO field keeps its name and meaning, and adds the multi-agent and
    multi-turn fields below. A GRPO field that MAGRPO does not implement (tool calling, vLLM sleep mode, ...)
    raises an error when set, instead of being ignored.

    `num_iterations` (GRPO's mu) works as in GRPO: each rollout is used for `num_iterations` optimizer steps in a
    row; every agent's per-token log-probs at sampling time are kept and the clipped surrogate takes the importance
    ratio pi_theta / pi_theta_old against them (with `num_iterations=1` no extra forward pass is made: the ratio is
    1 and its gradient is the policy gradient). The sampler hands out each generation's rows `num_iterations`
    times, so an epoch still plays every row once, as in TRL.

    Batch sizes follow GRPO: `per_device_train_batch_size` counts completions *per agent* per micro-step at turn 1
    and must be a multiple of `num_generations`; each micro-step trains on `per_device_train_batch_size //
    num_generations` episodes. As in GRPO, the episodes of `steps_per_generation` micro-steps (by default
    `gradient_accumulation_steps`: one optimizer step) are played together in one rollout at the first of them, and
    `loss_type="dapo"` divides by that rollout's completion tokens rescaled to one accumulation window. With
    `steps_per_generation > gradient_accumulation_steps` a rollout serves several optimizer steps (the later ones
    with the importance ratio against the log-probs kept at sampling time); with fewer, a step plays several.

    These GRPO settings act per agent, with GRPO's meaning (tested against `GRPOTrainer` with one agent):
    `entropy_coef` subtracts `entropy_coef * H_a` from each agent's loss, `H_a` the mean entropy of its policy over
    the tokens its policy loss acts on; with `use_adaptive_entropy` each agent's coefficient follows its own
    entropy (`entropy_target`, `entropy_coef_delta/min/max`), logged as `agent_<i>/entropy_coef`
    (`trainers.magrpo.entropy`). `off_policy_mask_threshold` drops from an agent's loss its negative-advantage
    samples whose policy drifted further than the threshold since sampling (DeepSeek-V3.2). `cast_lm_head_to_fp32`
    keeps every model's LM head (and its reference copy's) in float32, LoRA teams included (an adapter on `lm_head`
    is refused). `use_transformers_continuous_batching` (or the deprecated `use_transformers_paged`) generates with
    transformers' continuous batching in `models` and `shared` teams; an `adapters` team is refused, since its
    mixed-adapter batches need one adapter per row, which `generate_batch` does not take.

    Parameters that differ from GRPO or are new:
        num_agents (`int`, defaults to `2`): Number of agents in the team.
        num_turns (`int`, defaults to `1`): Maximum number of turns of an episode.
        joint_mode (`str`, defaults to `"aligned"`): How agents' samples form joint actions: `"aligned"` (sample g of
            every agent, G joint actions) or `"cross"` (Cartesian product, G^n joint actions, each completion
            credited the mean return of the joint actions that contain it).
        discount (`float`, defaults to `1.0`): Discount gamma of the multi-turn return R_t = r_t + gamma *
            mean(R_{t+1}).
        advantage_mode (`str`, *optional*): The advantage estimator: a name registered with
            `trl_marl.core.register_advantage_estimator` (the built-in ones, their equations and papers:
            `trl_marl.core.advantages` and the table in docs/architecture.md); the one knob of MAGRPO's credit
            assignment. Default: the estimator GRPO's `scale_rewards` names (`"none"`: `"mean"`, the paper's;
            `"group"`: `"std"`; `"batch"`: `"batch"`, each declared where it is registered); any other mode takes
            `scale_rewards="none"` (see [`MAREINFORCEConfig`]).
        local_reward_weights (`list[float]`, *optional*): One weight per function of the trainer's
            `local_reward_funcs` (per-agent local rewards, docs/extending.md), in order; default 1 each.
        team_reward_weight (`float`, defaults to `1.0`): AT-GRPO's alpha: an estimator that reads local rewards
            (`"agent_turn"`) mixes agent i's return as alpha * R^team + R^loc_i.
        scale_rewards (`str`, defaults to `"none"`): GRPO's name for three estimators, read only to choose
            `advantage_mode` when that is unset; the default is the paper's unscaled advantage.
        num_generations_eval (`int`, *optional*, defaults to `1`): As in GRPO, the samples per prompt at evaluation:
            `evaluate()` plays this many independent episodes of every row (one sample per agent per turn each) and
            averages rewards and accuracies over them; `per_device_eval_batch_size` counts episodes, as GRPO's counts
            completions. The default is one episode per row (`None`: GRPO's default, `num_generations`).
        max_branches (`int`, *optional*): Branching cap: how many joint actions of a node continue to the next turn.
        early_stop_threshold (`float`, *optional*): A node whose mean reward reaches it does not continue; its
            success is taken to persist for the turns it skips (`trl_marl.core.early_stop_returns`).
        tool_call_timeout (`float`, *optional*, defaults to `30.0`): Seconds one tool call may take (agents with
            tools); a slower call's result is an error message. `max_tool_calling_iterations` (GRPO's) bounds the
            rounds of calls in one agent's turn.
        tool_turn_timeout (`float`, *optional*): Seconds all the tool calls of one turn may take together, over
            every sample; None: 4 x `tool_call_timeout`.
        max_tool_result_chars (`int`, *optional*, defaults to `4000`): Longest tool result; longer ones are cut.
        team_mode (`str`, *optional*): `"adapters"`, `"models"` or `"shared"` (see [`AgentTeam`]).
        generation_backend (`str`, defaults to `"transformers"`): What samples the completions: the team's own
            decoding, `"compiled"` (the same decoding on a static KV cache with the decode forward compiled: CUDA
            graphs on a GPU; `trl_marl.team.generation.compiled`), or `"vllm"` (one vLLM engine serving every agent's
            LoRA adapter, in-process with `vllm_mode="colocate"` or a running server with `vllm_mode="server"`;
            `use_vllm=True` selects it; see `trl_marl.team.generation`). TRL's `vllm_importance_sampling_correction`
            (default True), `_mode`, `_clip_min` and `_clip_max` work as in `GRPOTrainer`: the completions are scored
            by the training model at sampling time (also with `num_iterations=1`) and each agent's per-token policy
            loss is multiplied by the bounded ratio of the two (`trainers.engine_correction`).
        vllm_logprobs_mode (`str`, defaults to `"processed_logprobs"`): The engine's log-probabilities for the
            correction: `"processed_logprobs"` (after penalties, temperature and truncation: biased low with any
            truncation, see docs/scaling.md) or `"raw_logprobs"` (untruncated; sampling at temperature 1 only).
        vllm_kv_cache_memory_bytes (`int`, *optional*): The vLLM engine's KV cache in bytes (default on a CPU:
            256 MiB; on a GPU: sized from `vllm_gpu_memory_utilization`). A `models` team of LoRA agents over N
            distinct base models gets N engines, which split this (or `vllm_gpu_memory_utilization`) evenly.
        share_prompt_prefill (`bool`, defaults to `True`): Run each node's prompt prefill once for its G samples
            (and for agents of the same weights that see the same prompt) and copy the KV cache to every sample
            (`AgentTeam.share_prompt_prefill`).
        share_prompt_forward (`bool`, defaults to `False`): The training log-probability forward runs each distinct
            prompt of an agent's batch once and its G completions after the prompt's KV cache (`team.shared_prompt`):
            `U * P + B * (C - 1)` tokens instead of `B * (P + C - 1)`; the same log-probabilities and gradients up to
            floating-point reordering. Each agent's forward then runs apart (the joint adapter forward of
            `backward_per_agent=False` does not share prompts). Not with dropout, activation checkpointing or
            `torch_compile` (a warning says so and the usual forward runs).
        max_staleness (`int`, defaults to `0`): Asynchronous rollouts (TRL's `AsyncGRPOTrainer` field name): with
            s > 0 a worker thread generates the rollouts of the next s optimizer steps, with its own copy of the
            team's trained parameters (and the vLLM engine, with `generation_backend="vllm"`), while the current
            step trains; a rollout trained at step t was sampled by every agent's policy
            of step t - s or later, one version per episode, and the importance-sampling correction
            (`vllm_importance_sampling_correction`) weighs it by the truncated ratio of the current policy over
            that one. 0: synchronous. Unsharded weights (one process or DDP) and `generation_backend`
            "transformers" or "vllm" only so far
            (`trainers.magrpo.async_rollout`; docs/scaling.md, "Asynchronous rollouts").
        backward_per_agent (`bool`, defaults to `True`): Backpropagate the team loss one agent at a time, with one
            agent's activations in memory instead of every agent's and the gradient of the summed loss (`False`);
            why, and when the summed loss is taken anyway: the `trainers/per_agent.py` docstring.
        zero_std_warning_fraction (`float`, defaults to `0.9`), zero_std_warning_steps (`int`, defaults to `20`):
            Warn once when at least this fraction of groups had zero return std (no learning signal) for this many
            consecutive optimizer steps.
        no_signal_warning_interval (`int` or `None`, defaults to `10`): Warn at the first step with no learning signal
            at all (every group flat, or every advantage 0), with what was measured and the likely causes, then
            every this many steps while it lasts.
        entropy_warning_threshold (`float`, defaults to `0.01`), entropy_warning_steps (`int`, defaults to `20`):
            Warn once when an agent's mean token entropy stays below the threshold for this many steps.
        max_nonfinite (`int`, defaults to `10`): NaN/inf rewards or losses are skipped and counted; training stops
            with an error after this many.
        compiled_sync_every (`int`, defaults to `8`): With `generation_backend="compiled"`, the tokens between the
            decode loop's host checks of whether every row has ended.
        frozen_agents (`list[int]`, defaults to `[]`): Agents that act but are not trained (the papers' baseline of
            agents trained alone, e.g. `[1]` trains agent 0 against a fixed partner).
        prompt_length_check (`str`, defaults to `"warn"`): What a turn-1 prompt plus `max_completion_length` longer
            than the model's context does when the trainer is built: `"warn"`, `"error"` or `"ignore"`.
        console_metrics (`list[str]` or `None`): The metrics the console prints per logged step (names or shell
            patterns; `["all"]`: every one); the `report_to` loggers always get every metric.
        cpu_threads (`int` or `None`, defaults to `None`): Torch threads of a CPU run; `None` chooses them from the
            model's size and the machine's load, unless `OMP_NUM_THREADS` is set.
        reward_timeout (`float` or `None`, defaults to `600`): Seconds one reward function call may take; training
            then stops with an error naming the function, after saving the last completed step. `None`: no limit.
        reward_isolation (`str`, defaults to `"process"`): Where a limited reward call runs: `"process"` (a worker
            process, killed at the limit; the function's side effects stay there) or `"thread"` (keeps them, cannot
            be killed).

    Example:

    ```python
    from trl_marl import MAGRPOConfig

    args = MAGRPOConfig(output_dir="team", num_agents=2, num_generations=8, per_device_train_batch_size=32,
                        max_completion_length=128, learning_rate=1e-5)
    ```
    """

    num_agents: int = num_agents_field(2)
    num_turns: int = num_turns_field()
    joint_mode: str = field(
        default="aligned",
        metadata={
            "help": "How the agents' samples form joint actions: 'aligned' (sample g of every agent forms joint "
            "action g; G joint actions per node) or 'cross' (Cartesian product; G^n joint actions, each completion "
            "credited the mean return over the joint actions that contain it)."
        },
    )
    discount: float = field(
        default=1.0, metadata={"help": "Discount gamma of the multi-turn return R_t = r_t + gamma * mean(R_{t+1})."}
    )
    advantage_mode: str | None = advantage_mode_field(None)
    local_reward_weights: list[float] | None = field(
        default=None,
        metadata={
            "help": "Weights of the trainer's `local_reward_funcs` (per-agent local rewards), one per function in "
            "order (with one list of functions per agent: agent 0's first); default 1 each."
        },
    )
    team_reward_weight: float = field(
        default=1.0,
        metadata={
            "help": "AT-GRPO's alpha (arXiv 2510.11062): an advantage estimator that reads local rewards "
            "('agent_turn') gives agent i the return alpha * R^team + R^loc_i, R^loc_i its own local reward "
            "(`local_reward_funcs`) backed up through the tree like the team's. Must be >= 0."
        },
    )
    num_generations_eval: int | None = field(
        default=1,
        metadata={
            "help": "Samples per prompt at evaluation, as in GRPO: evaluate() plays this many independent episodes of "
            "every evaluation row (one sample per agent per turn each) and averages the team reward, the accuracies "
            "and the transitions over them. MAGRPO defaults to one episode per row; None takes GRPO's default, "
            "`num_generations`."
        },
    )
    scale_rewards: str = field(
        default="none",
        metadata={
            "help": "GRPO's reward scaling, read only to choose `advantage_mode` when that is unset (GRPO's names for "
            "three estimators: " + scale_rewards_help() + "). MAGRPO defaults to 'none' (the paper's "
            "A = R - mean R); set `advantage_mode` instead."
        },
    )
    max_branches: int | None = field(
        default=None,
        metadata={
            "help": "Branching cap for multi-turn rollouts: how many joint actions of each node (chosen at random) "
            "continue to the next turn. None continues all of them (G^T leaves in 'aligned' mode)."
        },
    )
    early_stop_threshold: float | None = field(
        default=None,
        metadata={
            "help": "A node whose mean team reward reaches this value does not continue to the next turn. Its joint "
            "actions are credited as if that mean reward persisted for the turns it skips (R_t = r_t + "
            "sum_{k=1}^{T-t} gamma^k * mean r_t), so stopping early on success never looks worse than continuing."
        },
    )
    tool_call_timeout: float | None = tool_call_timeout_field()
    tool_turn_timeout: float | None = tool_turn_timeout_field()
    max_tool_result_chars: int | None = max_tool_result_chars_field()
    team_mode: str | None = team_mode_field()
    share_prompt_prefill: bool = share_prompt_prefill_field()
    share_prompt_forward: bool = field(
        default=False,
        metadata={
            "help": "The training log-probability forward runs each distinct prompt of an agent's batch once, with "
            "gradients, and the completions after its KV cache: U*P + B*(C-1) tokens instead of B*(P+C-1) (U "
            "distinct prompts, B rows); the same log-probabilities and gradients up to floating-point reordering. "
            "Not with dropout, activation checkpointing or torch_compile (a warning says why and every row's "
            "prompt runs)."
        },
    )
    generation_backend: str = generation_backend_field()
    compiled_sync_every: int = compiled_sync_every_field()
    vllm_logprobs_mode: str = vllm_logprobs_mode_field()
    vllm_kv_cache_memory_bytes: int | None = vllm_kv_cache_memory_bytes_field()
    max_staleness: int = max_staleness_field()
    backward_per_agent: bool = backward_per_agent_field()
    frozen_agents: list[int] = frozen_agents_field()
    zero_std_warning_fraction: float = field(
        default=0.9,
        metadata={
            "help": "Diagnosis of a learning signal that vanished: a step counts as 'flat' when at least this "
            "fraction of its groups (nodes of the rollout tree) gave every joint action the same return, hence "
            "advantage 0. See `zero_std_warning_steps`."
        },
    )
    zero_std_warning_steps: int | None = field(
        default=20,
        metadata={
            "help": "After this many consecutive flat optimizer steps (see `zero_std_warning_fraction`) the trainer "
            "warns once: the team gets no gradient any more (typically a collapse onto one output, or an invalid "
            "output that every sample repeats). The streak is logged as `diagnostics/zero_std_streak`. None disables."
        },
    )
    no_signal_warning_interval: int | None = field(
        default=10,
        metadata={
            "help": "Warn at the first optimizer step without any learning signal (every group's samples got the "
            "same return, `frac_reward_zero_std` = 1, or every advantage was 0), naming what it measured and the "
            "likely causes (a constant reward, an answer format never met, a too short `max_completion_length`), "
            "then every this many steps while it lasts. None disables."
        },
    )
    entropy_warning_threshold: float | None = field(
        default=0.01,
        metadata={
            "help": "Diagnosis of entropy collapse: an agent whose mean per-token entropy (nats) stays below this "
            "value for `entropy_warning_steps` consecutive optimizer steps triggers a warning (logged as "
            "`diagnostics/entropy_collapse_streak`). None disables."
        },
    )
    entropy_warning_steps: int = field(
        default=20,
        metadata={"help": "Consecutive optimizer steps of low entropy before the entropy-collapse warning."},
    )
    prompt_length_check: str = prompt_length_check_field()
    reward_timeout: float | None = reward_timeout_field()
    reward_isolation: str = reward_isolation_field()
    console_metrics: list[str] | None = console_metrics_field(CONSOLE_METRICS)
    max_nonfinite: int = max_nonfinite_field()
    cpu_threads: int | None = cpu_threads_field()

    def __post_init__(self) -> None:
        self.console_metrics = check_console_metrics(self.console_metrics, f"{type(self).__name__}.console_metrics")
        if self.num_generations is not None and self.num_generations < 2:
            raise ValueError(
                f"`num_generations` must be >= 2: MAGRPO's advantages compare several samples per agent per node "
                f"(got {self.num_generations}). Use e.g. `num_generations=8`."
            )
        if self.bf16 is None and not self.fp16 and not has_accelerator():
            self.bf16 = False  # TRL defaults to bf16, which fails on a machine without GPU unless use_cpu is set
        check_mixed_precision(self)
        if self.num_generations_eval is None:  # GRPO's default
            self.num_generations_eval = self.num_generations
        check_positive(self, "num_generations_eval", "the episodes evaluate() plays per evaluation row")
        check_positive(self, "max_completion_length", "the tokens each agent may generate per turn")
        check_learning_rate(self)
        batch_error = generation_batch_error(self)
        if batch_error is not None:  # before TRL's message, which names `generation_batch_size`
            raise batch_error
        use_cpu_for_cpu_processes(self)  # several processes without GPU (accelerate launch / torchrun): gloo
        use_activation_checkpointing_name(self)
        super().__post_init__()
        if self.num_agents < 1:
            raise ValueError(f"`num_agents` must be >= 1, got {self.num_agents}.")
        check_positive(self, "num_iterations", "the optimizer steps taken on each rollout (GRPO's mu)")
        if self.num_turns < 1:
            raise ValueError(f"`num_turns` must be >= 1, got {self.num_turns}.")
        if self.joint_mode not in JOINT_MODES:
            raise ValueError(f"`joint_mode` must be one of {JOINT_MODES}, got {self.joint_mode!r}.")
        if not 0.0 <= self.discount <= 1.0:
            raise ValueError(f"`discount` must be in [0, 1], got {self.discount}.")
        if self.max_branches is not None and self.max_branches < 1:
            raise ValueError(f"`max_branches` must be >= 1 or None, got {self.max_branches}.")
        check_tool_settings(self)
        if self.team_mode not in (None, "adapters", "models", "shared"):
            raise ValueError(f"`team_mode` must be 'adapters', 'models', 'shared' or None, got {self.team_mode!r}.")
        check_choice(self, "prompt_length_check", PROMPT_LENGTH_CHECKS)
        check_timeout(self, "reward_timeout")
        check_choice(self, "reward_isolation", REWARD_ISOLATIONS)
        if self.use_adaptive_entropy and not 0.0 <= self.entropy_coef_min <= self.entropy_coef_max:
            raise ValueError(
                f"`use_adaptive_entropy=True` needs 0 <= entropy_coef_min <= entropy_coef_max, got "
                f"{self.entropy_coef_min} and {self.entropy_coef_max}: set the bounds of the adaptive coefficient."
            )
        if self.use_adaptive_entropy and self.entropy_coef_delta <= 0.0:
            raise ValueError(f"`entropy_coef_delta` must be > 0 with `use_adaptive_entropy=True`, got "
                             f"{self.entropy_coef_delta}.")
        if self.off_policy_mask_threshold is not None and self.off_policy_mask_threshold < 0.0:
            raise ValueError(
                f"`off_policy_mask_threshold` must be >= 0 (a KL bound, e.g. 0.5), got "
                f"{self.off_policy_mask_threshold}: below 0 it would drop every negative-advantage sample, even "
                "on-policy. Use None to disable it."
            )
        if self.sync_ref_model and self.beta == 0.0:
            raise ValueError(
                "`sync_ref_model=True` with `beta=0.0`: without a KL term there is no reference policy to sync. Set "
                "`beta` > 0 or `sync_ref_model=False`."
            )
        # one knob: `advantage_mode`; GRPO's `scale_rewards` names three of its estimators (declared at registration)
        if self.advantage_mode is None:
            self.advantage_mode = estimator_for_scale_rewards(self.scale_rewards)
        advantage_estimator(self.advantage_mode)  # a ValueError naming `advantage_mode` and the registered modes
        if self.scale_rewards != "none" and estimator_scale_rewards(self.advantage_mode) != self.scale_rewards:
            raise ValueError(
                f"`scale_rewards={self.scale_rewards!r}` is GRPO's name for `advantage_mode="
                f"{estimator_for_scale_rewards(self.scale_rewards)!r}`, which contradicts `advantage_mode="
                f"{self.advantage_mode!r}`: set only `advantage_mode` (and leave `scale_rewards='none'`). Dividing by "
                "the reward std would change what another estimator's advantage means (MAREINFORCE's would no longer "
                "be the return, MAReMax's no longer the distance to the best sample)."
            )
        check_local_reward_fields(self)
        if self.num_generations is None:  # MAGRPO compares several samples per agent per node
            raise ValueError("`num_generations` must be set (>= 2): e.g. `num_generations=8`.")
        if self.per_device_train_batch_size % self.num_generations != 0:
            raise ValueError(
                f"`per_device_train_batch_size` ({self.per_device_train_batch_size}) must be a multiple of "
                f"`num_generations` ({self.num_generations}): each micro-step plays per_device_train_batch_size // "
                "num_generations episodes with num_generations samples per agent."
            )
        if self.no_signal_warning_interval is not None and (
                not isinstance(self.no_signal_warning_interval, int) or self.no_signal_warning_interval < 1):
            raise ValueError("`no_signal_warning_interval` must be a positive number of optimizer steps or None (no "
                             f"warning), got {self.no_signal_warning_interval!r}.")
        if not 0.0 < self.zero_std_warning_fraction <= 1.0:
            raise ValueError(f"`zero_std_warning_fraction` must be in (0, 1], got {self.zero_std_warning_fraction}.")
        if self.zero_std_warning_steps is not None and self.zero_std_warning_steps < 1:
            raise ValueError(f"`zero_std_warning_steps` must be >= 1 or None, got {self.zero_std_warning_steps}.")
        if self.entropy_warning_steps < 1:
            raise ValueError(f"`entropy_warning_steps` must be >= 1, got {self.entropy_warning_steps}.")
        bad = [a for a in self.frozen_agents if not 0 <= a < self.num_agents]
        if bad:
            raise ValueError(f"`frozen_agents` {bad} are not agents of a team of {self.num_agents}.")
        if len(set(self.frozen_agents)) >= self.num_agents:
            raise ValueError("`frozen_agents` freezes every agent: nothing would be trained.")
        max_staleness_value(self)
        check_generation_backend(self)
        check_importance_sampling(self)
        check_async_support(self)  # the backend and the schedule; the trainer checks processes and tools again
        self._refuse_unsupported()

    def _refuse_unsupported(self) -> None:
        problems = []
        if self.loss_type not in SUPPORTED_LOSS_TYPES:
            problems.append(f"loss_type={self.loss_type!r} (supported: {SUPPORTED_LOSS_TYPES})")
        if self.multi_objective_aggregation != "sum_then_normalize":
            problems.append(f"multi_objective_aggregation={self.multi_objective_aggregation!r}")
        defaults = {f.name: f.default for f in fields(GRPOConfig)}
        from ..._trl_compat import grpo_config_field_names

        for name in sorted(grpo_config_field_names() - HONOURED_GRPO_FIELDS):
            if name in ("use_vllm", "loss_type", "multi_objective_aggregation"):
                continue
            accepted = _NORMALIZED_DEFAULTS.get(name, (defaults.get(name),))
            if getattr(self, name) not in accepted:
                reason = _REFUSAL_REASONS.get(name)
                problems.append(f"{name}={getattr(self, name)!r}" + (f" ({reason})" if reason else ""))
        if problems:
            raise ValueError(
                "MAGRPOTrainer does not implement these GRPO settings; leave them at their defaults: "
                + "; ".join(problems)
            )


def check_local_reward_fields(config: MAGRPOConfig) -> None:
    """Refuse `team_reward_weight` and `local_reward_weights` where nothing reads them (`advantage_mode`).

    Raises:
        ValueError: `team_reward_weight` negative or not finite; either field set with an estimator that does not
            read local rewards, naming the field and the fix.
    """
    alpha = config.team_reward_weight
    if not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"`team_reward_weight` (AT-GRPO's alpha) must be a finite number >= 0, got {alpha!r}.")
    if estimator_uses_local_returns(field_value(config.advantage_mode, "advantage_mode")):
        return
    for name, default in (("local_reward_weights", None), ("team_reward_weight", 1.0)):
        if getattr(config, name) != default:
            raise ValueError(
                f"`{name}={getattr(config, name)!r}` weighs local rewards, which `advantage_mode="
                f"{config.advantage_mode!r}` does not read. Use `advantage_mode='agent_turn'` (AT-GRPO), or leave "
                f"`{name}` at its default ({default!r})."
            )


def check_async_support(args: MAGRPOConfig, num_processes: int = 1, sharded: bool = False) -> None:
    """Refuse, before any step, what `max_staleness > 0` does not support yet, naming the field and the fix.

    Args:
        args: A `MAGRPOConfig`.
        num_processes, sharded: What the trainer found; see
            [`~trl_marl.trainers.async_support.check_async_common`], which checks them (and the backend).

    Warns:
        UserWarning: asynchronous rollouts without the importance-sampling correction.

    Raises:
        ValueError: an unsupported combination.

    Example:

    ```python
    >>> from trl_marl import MAGRPOConfig
    >>> try:  # `__post_init__` calls it with one process
    ...     MAGRPOConfig(output_dir="out", num_generations=2, per_device_train_batch_size=4, max_staleness=1,
    ...                  generation_backend="compiled")
    ... except ValueError as error:
    ...     print(str(error)[:80])
    `max_staleness=1` (asynchronous rollouts) supports `generation_backend` 'transformers'
    """
    if args.max_staleness == 0:
        return
    name, sync = async_names(args)
    if args.num_iterations != 1:
        raise ValueError(f"{name} takes one optimizer step per rollout, got `num_iterations={args.num_iterations}`: "
                         f"set `num_iterations=1`, {sync}.")
    if args.steps_per_generation != args.gradient_accumulation_steps:
        raise ValueError(f"{name} generates one rollout per optimizer step, got `steps_per_generation="
                         f"{args.steps_per_generation}` and `gradient_accumulation_steps="
                         f"{args.gradient_accumulation_steps}`: leave `steps_per_generation` None (it then equals "
                         f"`gradient_accumulation_steps`), {sync}.")
    if args.use_transformers_continuous_batching:
        raise ValueError(f"{name} does not decode with continuous batching yet: set "
                         f"`use_transformers_continuous_batching=False`, {sync}.")
    check_async_common(args, num_processes, sharded)
