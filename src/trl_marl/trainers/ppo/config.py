"""Configurations of [`MultiAgentPPOTrainer`] and of the drop-in single-agent [`PPOTrainer`]."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..._trl_compat import TRLBaseConfig
from ...core.estimators import critic_estimator
from ...reward_contract import REWARD_ISOLATIONS
from ...reward_contract.settings import reward_isolation_field, reward_timeout_field
from ...team.generation import check_generation_backend, compiled_sync_every_field
from ...tools.settings import (
    check_tool_settings,
    max_tool_calling_iterations_field,
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
    has_accelerator,
    use_activation_checkpointing_name,
    use_cpu_for_cpu_processes,
)
from ..async_support import check_async_common
from ..console import check_console_metrics, console_metrics_field
from ..fields import (
    advantage_mode_field,
    backward_per_agent_field,
    cpu_threads_field,
    fields_section,
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

POLICY_SHARING = ("shared", "agent", "agent_turn")
CRITICS = ("per_agent", "centralized")
CRITIC_TYPES = ("V", "Q")


TEMPERATURE_EPS = 1e-7
"""What TRL's PPO adds to `temperature` before dividing the logits by it (the sampling and every log-prob of a
response): `logits / (temperature + TEMPERATURE_EPS)`, so a temperature of 0 is never a division by zero. Use
[`logit_temperature`]."""


def logit_temperature(temperature: float) -> float:
    """The divisor of the logits for `temperature`, as TRL's PPO computes it (`temperature + 1e-7`)."""
    return temperature + TEMPERATURE_EPS


CONSOLE_METRICS = (
    "objective/scores", "objective/kl", "objective/entropy", "loss/policy_avg", "loss/value_avg", "lr", "episode",
)
"""What the console shows of each logged step when `console_metrics` is None (every metric is logged)."""


@dataclass
class MultiAgentPPOConfig(TRLBaseConfig):
    r"""Configuration of [`MultiAgentPPOTrainer`]: PPO with a value model per agent, GAE and a KL penalty.

    The PPO fields have the names and defaults of TRL 1.12's `trl.experimental.ppo.PPOConfig`, so a
    single-agent script written for TRL's PPOTrainer runs unchanged with [`PPOConfig`]. Batch sizes follow it too:
    each update plays `per_device_train_batch_size * gradient_accumulation_steps` episodes per process (the
    `local_batch_size`), then runs `num_ppo_epochs` passes over them in `num_mini_batches` mini-batches of
    micro-batches of `per_device_train_batch_size`; as in TRL 1.12, the optimizer steps once every
    `gradient_accumulation_steps` micro-batches (so once per mini-batch when `num_mini_batches=1`), and gradients
    are not clipped (`max_grad_norm` is unused). Every batch configuration TRL 1.12 accepts runs with its arithmetic:
    `local_batch_size` must be a multiple of `num_mini_batches`, and a mini-batch smaller than
    `per_device_train_batch_size` (e.g. `per_device_train_batch_size=8, num_mini_batches=2,
    gradient_accumulation_steps=1`) is one micro-batch of the mini-batch's size; the optimizer still steps every
    `gradient_accumulation_steps` micro-batches, across mini-batch boundaries. One deliberate difference in the
    logs: TRL 1.12 averages `policy/*`, `loss/*`, `val/clipfrac_avg` and `val/ratio*` over
    `num_ppo_epochs * num_mini_batches * gradient_accumulation_steps` slots, of which only
    `num_ppo_epochs * num_mini_batches * ceil(gradient_accumulation_steps / num_mini_batches)` are ever written
    (the rest stay 0 and dilute the means when both `num_mini_batches` and `gradient_accumulation_steps` exceed 1);
    these metrics average the micro-batches that ran. `tests/test_trl112_parity.py` checks the first update of
    both trainers against each other over a grid of these settings.

    With several agents and turns, every (turn, agent) response is one PPO sample with its own score; each agent is
    optimized on its own samples, and the agents' losses are summed (and backpropagated one policy slot at a time,
    `backward_per_agent`). The critic is IAC's or MAAC's (CoMLRL's names): `critic="per_agent"` (IAC, the default)
    gives each policy its own value model reading that agent's own history (its prompt, which holds the transcript
    as it sees it, and its response); `critic="centralized"` (MAAC) gives the whole team one value model reading the
    joint history of the turn, every agent's prompt in agent order, before the agent's response: `critic_type="V"`
    reads the joint history only (V(s), then the agent's own tokens), `critic_type="Q"` the joint history and the
    other agents' responses of the turn, then the agent's own tokens. Before the agent's first token the Q critic's
    value is therefore Q(s, a_-i), the return expected from the state and the other agents' actions, averaged over
    the agent's own response (COMA's counterfactual baseline, learned directly), and at the response's last token
    it has read the joint action, Q(s, a). This is not CoMLRL's MAAC `critic_type="q"`, whose critic reads the whole
    joint action, the agent's own response included, and whose advantage is r - Q(s, a): a baseline that depends on
    the action it judges biases the policy gradient (with an exact critic every advantage is the reward's noise
    around Q(s, a), 0 for a deterministic reward), while Q(s, a_-i) does not depend on the agent's action (the
    agents of a turn answer independently), so R - Q(s, a_-i) is a sound advantage of that action. Either critic's
    values feed the same GAE (`gamma`, `lam`) and the same clipped value loss; with `turn_gamma`, each turn also
    bootstraps from the critic's value of the agent's next-turn state (multi-turn with a discount between turns).
    TRL's PPO credits each token (`advantage_mode="gae"`, GAE(gamma, lam) per token: A_t = R - V(s_t) with
    `gamma = lam = 1`); CoMLRL's IAC and MAAC treat the whole response as one action, which is
    `advantage_mode="turn"`: every token gets the response's A = R - V(s) (R its return, the score minus the KL
    penalty of its tokens plus `turn_gamma * V(s_{k+1})`; V(s) the critic's value before its first token, Q(s, a_-i)
    with `critic_type="Q"`), whatever `lam` is, whitened over the responses of the policy (one entry per response,
    whatever its length) before it is given to the tokens. The value targets are GAE(gamma, lam)'s returns at
    either level.

    With `max_staleness=s > 0` (asynchronous rollouts, as MAGRPO's) a worker thread plays the episodes of the next
    s updates with its own copy of the team's trained parameters (and the vLLM engine, with
    `generation_backend="vllm"`) while the current update trains; an update trained at step t (t
    updates done) plays episodes sampled by policies of update t - s or later, scored, valued and given their old
    log-probabilities by the current models in the trainer's thread, and weighted by the truncated ratio of the
    current policy over the sampling one (`vllm_importance_sampling_correction`): the decoupled PPO objective of
    asynchronous RL (the clip bounds the update around the current policy, the ratio corrects the staleness).

    Example:

    ```python
    from trl_marl import PPOConfig

    args = PPOConfig(output_dir="ppo", per_device_train_batch_size=16, total_episodes=10_000, response_length=64)
    ```
    """

    learning_rate: float = field(default=3e-6, metadata={"help": "Initial learning rate of AdamW."})
    dataset_num_proc: int | None = field(
        default=None, metadata={"help": "Processes for dataset preprocessing in user scripts (kept for TRL parity)."}
    )
    num_mini_batches: int = field(default=1, metadata={"help": "Mini-batches each rollout batch is split into."})
    total_episodes: int | None = field(
        default=None,
        metadata={
            "help": "Episodes (dataset rows played) in the whole run. Default: num_train_epochs * len(dataset)."
        },
    )
    local_rollout_forward_batch_size: int = field(
        default=64, metadata={"help": "Rows per no-grad forward pass (log-probs, values, scores) during rollouts."}
    )
    num_sample_generations: int = field(
        default=10,
        metadata={"help": "How many times a table of sample completions on the eval set is printed during training."},
    )
    response_length: int = field(default=53, metadata={"help": "Maximum number of tokens of each response."})
    stop_token: str | None = field(
        default=None,
        metadata={
            "help": "Stop generation at this token: 'eos' for the tokenizer's EOS, or None (see stop_token_id)."
        },
    )
    stop_token_id: int | None = field(
        default=None,
        metadata={"help": "Token id that ends a response (exclusive with stop_token). None: no stop token."},
    )
    temperature: float = field(default=0.7, metadata={"help": "Sampling temperature."})
    missing_eos_penalty: float | None = field(
        default=None,
        metadata={"help": "Subtracted from the score of a response without an EOS token (encourages ending)."},
    )
    sft_model_path: str = field(
        default="EleutherAI/pythia-160m", metadata={"help": "Path of the SFT policy (read by example scripts)."}
    )
    world_size: int | None = field(default=None, metadata={"help": "Number of processes (computed)."})
    num_total_batches: int | None = field(default=None, metadata={"help": "Number of updates (computed)."})
    micro_batch_size: int | None = field(
        default=None, metadata={"help": "per_device_train_batch_size * world_size (computed)."}
    )
    local_batch_size: int | None = field(
        default=None, metadata={"help": "Episodes per process per update: per_device * grad. accumulation (computed)."}
    )
    batch_size: int | None = field(
        default=None, metadata={"help": "Episodes per update over all processes (computed)."}
    )
    local_mini_batch_size: int | None = field(
        default=None, metadata={"help": "Mini-batch size per process (computed)."}
    )
    mini_batch_size: int | None = field(default=None, metadata={"help": "Mini-batch size over processes (computed)."})
    push_to_hub: bool = field(default=False, metadata={"help": "Push the trained model to the Hub after training."})
    reward_model_path: str = field(
        default="EleutherAI/pythia-160m", metadata={"help": "Path of the reward model (read by example scripts)."}
    )
    model_adapter_name: str | None = field(
        default=None, metadata={"help": "Name of the trained PEFT adapter when the policy holds several adapters."}
    )
    ref_adapter_name: str | None = field(
        default=None, metadata={"help": "Name of a PEFT adapter to use as reference policy (None: adapter disabled)."}
    )
    num_ppo_epochs: int = field(default=4, metadata={"help": "Passes of PPO over each rollout batch."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whiten the per-token rewards before GAE."})
    kl_coef: float = field(default=0.05, metadata={"help": "Coefficient of the per-token KL penalty in the reward."})
    kl_estimator: str = field(
        default="k1",
        metadata={
            "help": "KL estimator: 'k1' (log-ratio, unbiased) or 'k3' (lower variance, unbiased, non-negative)."
        },
    )
    cliprange: float = field(default=0.2, metadata={"help": "Clip range of the policy's importance ratio."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range of the value predictions."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor of GAE."})
    lam: float = field(default=0.95, metadata={"help": "Lambda of GAE."})
    ds3_gather_for_generation: bool = field(
        default=True, metadata={"help": "With DeepSpeed ZeRO-3, gather the policy's weights for generation."}
    )
    # ---- multi-agent fields (trl-marl) ----
    num_agents: int = num_agents_field(1)
    num_turns: int = num_turns_field()
    team_mode: str | None = team_mode_field()
    generation_backend: str = generation_backend_field()
    compiled_sync_every: int = compiled_sync_every_field()
    use_vllm: bool = field(
        default=False, metadata={"help": "TRL's switch for vLLM generation: sets `generation_backend='vllm'`."}
    )
    vllm_mode: str = field(
        default="colocate",
        metadata={
            "help": "As in TRL's GRPOConfig: 'colocate' (an in-process engine) or 'server' (a running vLLM server "
            "on the team's base model, see `trl-marl vllm-serve`)."
        },
    )
    vllm_server_base_url: str | None = field(
        default=None,
        metadata={"help": "Server mode: the server URL (default: from vllm_server_host and vllm_server_port)."},
    )
    vllm_server_host: str = field(default="127.0.0.1", metadata={"help": "Server mode: the server's host."})
    vllm_server_port: int = field(default=8000, metadata={"help": "Server mode: the server's port."})
    vllm_server_timeout: float = field(
        default=240.0, metadata={"help": "Server mode: seconds one request to the server may take."}
    )
    vllm_gpu_memory_utilization: float = field(
        default=0.3,
        metadata={"help": "As in TRL: the share of the GPU's memory the vLLM engine may take (unused on a CPU); the "
                  "N engines of a `models` team over N base models take 1/N of it each."},
    )
    vllm_kv_cache_memory_bytes: int | None = vllm_kv_cache_memory_bytes_field()
    vllm_max_model_length: int | None = field(
        default=None,
        metadata={"help": "As in TRL: the vLLM engine's context length (default: the model's)."},
    )
    vllm_importance_sampling_correction: bool = field(
        default=True,
        metadata={
            "help": "As TRL's GRPOConfig (TRL's PPO has no vLLM): with `generation_backend='vllm'`, weight each "
            "token's policy loss by the bounded importance ratio pi_old / pi_vllm of the training model (its "
            "log-probs at sampling time, PPO's old log-probs) over the vLLM engine that sampled it (truncated IS, "
            "Yao et al. 2025), correcting the engine/trainer mismatch. The value loss is not weighted. False: no "
            "correction."
        },
    )
    vllm_logprobs_mode: str = vllm_logprobs_mode_field()
    vllm_importance_sampling_mode: str = field(
        default="sequence_mask",
        metadata={
            "help": "As in TRL: 'token_truncate' (each token's ratio clipped to [clip_min, clip_max]), 'token_mask' "
            "(ratios outside the bounds set to 0), 'sequence_truncate' / 'sequence_mask' (one ratio per response, "
            "the product over its tokens, clipped, or the response dropped when outside the bounds)."
        },
    )
    vllm_importance_sampling_clip_max: float | None = field(
        default=3.0,
        metadata={"help": "As in TRL: the upper bound C_max of the importance ratio (None: no upper bound)."},
    )
    vllm_importance_sampling_clip_min: float | None = field(
        default=None,
        metadata={"help": "As in TRL: the lower bound C_min of the importance ratio (None: no lower bound)."},
    )
    vllm_importance_sampling_cap: float | None = field(
        default=None,
        metadata={"help": "Deprecated in TRL, kept for its name: sets `vllm_importance_sampling_clip_max`."},
    )
    share_prompt_prefill: bool = share_prompt_prefill_field()
    max_staleness: int = max_staleness_field()
    backward_per_agent: bool = backward_per_agent_field()
    frozen_agents: list[int] = frozen_agents_field()
    policy_sharing: str = field(
        default="agent",
        metadata={
            "help": "Which policy plays each (turn, agent): 'agent' (one policy per agent, all turns), "
            "'agent_turn' (one per agent and turn, MAPoRL's theta_{t,a}) or 'shared' (one for every agent and turn). "
            "Each policy has its own value model and its own advantage whitening: with 'shared', one value model "
            "and one whitening group for the whole team."
        },
    )
    value_input: str = field(
        default="history",
        metadata={
            "help": "What the value model reads: 'history' (the agent's whole prompt, i.e. the debate so far, and "
            "its response) or 'answer' (the turn-1 prompt, i.e. the question, and its response)."
        },
    )
    critic: str = field(
        default="per_agent",
        metadata={
            "help": "The critic: 'per_agent' (IAC: one value model per policy, reading the agent's own history) or "
            "'centralized' (MAAC: one value model for the team, reading the joint history of every agent)."
        },
    )
    critic_type: str | None = field(
        default=None,
        metadata={
            "help": "With critic='centralized': 'V' (V(s): the joint history, then the agent's response; default) or "
            "'Q' (the joint history and the other agents' responses, then the agent's response: Q(s, a_-i) before "
            "the agent's first token, Q(s, a) at its last; unlike CoMLRL's MAAC 'q', whose baseline Q(s, a) also "
            "reads the agent's own response, see MultiAgentPPOConfig)."
        },
    )
    advantage_mode: str = advantage_mode_field("gae")
    turn_gamma: float | None = field(
        default=None,
        metadata={
            "help": "Discount between turns (multi-turn IAC/MAAC, as CoMLRL's actor-critic): the score step of a "
            "turn's response also gets turn_gamma * V(s_{k+1}), the critic's value of the agent's next-turn state "
            "(0 after the last turn), so GAE bootstraps across turns. None: each turn is scored on its own (MAPoRL, "
            "whose influence-aware reward already looks at the later turns)."
        },
    )
    train_turns_from: int = field(
        default=1,
        metadata={"help": "Train only on the responses of turns >= this (2 = MAPoRL's Experiment 1)."},
    )
    reward_weights: list[float] | None = field(
        default=None,
        metadata={
            "help": "Weights of the reward functions (one per function; default 1 each): a response's score is the "
            "weighted sum over the functions that scored it (`None` skips; see `trl_marl.reward_contract`)."
        },
    )
    reward_timeout: float | None = reward_timeout_field()
    reward_isolation: str = reward_isolation_field()
    console_metrics: list[str] | None = console_metrics_field(CONSOLE_METRICS)
    max_nonfinite: int = max_nonfinite_field()
    value_train_layers: int | None = field(
        default=None,
        metadata={
            "help": "Layers that the default value models train: None trains every weight, N trains only the top N "
            "decoder layers, the norms after them and the score head (0: the value head alone, on the frozen "
            "backbone). Frozen layers cost no optimizer state, no backward below the top layers, and are left out "
            "of checkpoints (`load_value_model` restores them from the base model). Ignored with `value_model=`."
        },
    )
    value_adapter: bool = field(
        default=False,
        metadata={
            "help": "Make each critic (one per policy, or the centralized one) a LoRA adapter `critic_<i>` and a "
            "scalar head on the policies' own base model, beside their adapters (the adapter configuration of the "
            "agent's `peft_config`), instead of a separate value model: the frozen base is shared by policies, "
            "critics and the reference, so a team holds one copy of it and trains adapters and heads only. Needs "
            "LoRA policies (`peft_config`); QLoRA bases included. Saved as a PEFT sequence-classifier adapter "
            "(`load_value_model` loads it). Classic TRL's `AutoModelForCausalLMWithValueHead` with a `peft_config` "
            "shares one base the same way (`trl_marl.legacy`)."
        },
    )
    value_adapter_rank: int | None = field(
        default=None,
        metadata={
            "help": "With `value_adapter=True`: the LoRA rank of the critics' adapters (their `lora_alpha` scaled "
            "with it, so that alpha / rank stays the policies'); None: the policies' rank. A critic learns one "
            "number per token: rank 4 on the policies' targets keeps a 3-agent team's training state within 1.15x "
            "of the team without critics from 135M to 1.5B bases (benchmarks/memory/bench_critic_memory.py). Ignored "
            "with `value_adapter=False` (a config can keep it while a command line turns adapter critics off)."
        },
    )
    save_value_model: bool = field(
        default=True,
        metadata={
            "help": "Save each value model as `value_model_<i>/` in every checkpoint and with `save_model` (whole "
            "when it trains every weight: one copy of the base model per critic, 538 MB each on SmolLM2-135M; only "
            "its trainable tensors with `value_train_layers`), so that `load_value_model` can start another run's "
            "critics from it. False saves the policies only, as TRL's PPOTrainer did: a run on a 135M base then "
            "writes megabytes instead of gigabytes, and its critics are not kept."
        },
    )
    cpu_threads: int | None = cpu_threads_field()
    prompt_length_check: str = prompt_length_check_field()
    max_tool_calling_iterations: int | None = max_tool_calling_iterations_field()
    tool_call_timeout: float | None = tool_call_timeout_field()
    tool_turn_timeout: float | None = tool_turn_timeout_field()
    max_tool_result_chars: int | None = max_tool_result_chars_field()

    def __post_init__(self) -> None:
        self.console_metrics = check_console_metrics(self.console_metrics, f"{type(self).__name__}.console_metrics")
        if self.bf16 is None and not self.fp16 and not has_accelerator():
            self.bf16 = False  # TRL defaults to bf16, which fails on a machine without GPU unless use_cpu is set
        check_mixed_precision(self)
        check_learning_rate(self)
        use_cpu_for_cpu_processes(self)  # several processes without GPU (accelerate launch / torchrun): gloo
        use_activation_checkpointing_name(self)
        super().__post_init__()
        if self.world_size is None:  # the field hides TrainingArguments.world_size, which DeepSpeed's setup reads
            state = getattr(self, "distributed_state", None)
            self.world_size = state.num_processes if state is not None else 1
        if self.kl_estimator not in ("k1", "k3"):
            raise ValueError(f"`kl_estimator` must be 'k1' or 'k3', got {self.kl_estimator!r}.")
        if self.stop_token not in (None, "eos"):
            raise ValueError(f"`stop_token` must be 'eos' or None, got {self.stop_token!r}.")
        if self.stop_token is not None and self.stop_token_id is not None:
            raise ValueError("Set only one of `stop_token` and `stop_token_id`.")
        check_positive(self, "response_length", "the tokens each response may have")
        if self.num_mini_batches < 1 or self.num_ppo_epochs < 1:
            raise ValueError("`num_mini_batches` and `num_ppo_epochs` must be >= 1.")
        local = self.per_device_train_batch_size * self.gradient_accumulation_steps
        if local % self.num_mini_batches != 0:
            raise ValueError(
                f"per_device_train_batch_size * gradient_accumulation_steps ({local}) must be a multiple of "
                f"`num_mini_batches` ({self.num_mini_batches}): each mini-batch gets the same number of episodes."
            )
        if self.num_agents < 1 or self.num_turns < 1:
            raise ValueError("`num_agents` and `num_turns` must be >= 1.")
        if self.policy_sharing not in POLICY_SHARING:
            raise ValueError(f"`policy_sharing` must be one of {POLICY_SHARING}, got {self.policy_sharing!r}.")
        self._check_frozen_agents()
        if self.value_train_layers is not None and (type(self.value_train_layers) is not int
                                                    or self.value_train_layers < 0):
            raise ValueError(f"`value_train_layers` must be None (train every weight of the value models) or an "
                             f"integer >= 0 (the top layers to train), got {self.value_train_layers!r}.")
        if self.value_adapter and self.value_train_layers is not None:
            raise ValueError("`value_train_layers` chooses the layers a separate value model trains; with "
                             "`value_adapter=True` each critic trains its adapter and head only: leave "
                             "`value_train_layers` unset, or set `value_adapter=False`.")
        if self.value_adapter_rank is not None and (type(self.value_adapter_rank) is not int
                                                    or self.value_adapter_rank < 1):
            raise ValueError(f"`value_adapter_rank` must be None (the policies' rank) or an integer >= 1, got "
                             f"{self.value_adapter_rank!r}.")
        if self.value_input not in ("history", "answer"):
            raise ValueError(f"`value_input` must be 'history' or 'answer', got {self.value_input!r}.")
        check_choice(self, "critic", CRITICS)
        critic_estimator(self.advantage_mode)  # a ValueError naming `advantage_mode` and the registered ones
        if self.critic_type is not None:
            self.critic_type = str(self.critic_type).upper()
            check_choice(self, "critic_type", CRITIC_TYPES)
            if self.critic == "per_agent":
                raise ValueError(
                    f"`critic_type={self.critic_type!r}` applies to the centralized critic (MAAC) only: set "
                    "`critic='centralized'`, or leave `critic_type` unset for per-agent critics (IAC)."
                )
        elif self.critic == "centralized":
            self.critic_type = "V"
        if self.critic == "centralized" and self.value_input != "history":
            raise ValueError(
                "`value_input='answer'` is for per-agent critics: the centralized critic reads the joint history of "
                "the turn. Set `value_input='history'` or `critic='per_agent'`."
            )
        if self.turn_gamma is not None and not 0.0 <= self.turn_gamma <= 1.0:
            raise ValueError(f"`turn_gamma` must be between 0 and 1 (or None), got {self.turn_gamma}.")
        if not 1 <= self.train_turns_from <= self.num_turns:
            raise ValueError(
                f"`train_turns_from` must be between 1 and num_turns={self.num_turns}, got {self.train_turns_from}."
            )
        if self.team_mode not in (None, "adapters", "models", "shared"):
            raise ValueError(f"`team_mode` must be 'adapters', 'models', 'shared' or None, got {self.team_mode!r}.")
        check_choice(self, "prompt_length_check", PROMPT_LENGTH_CHECKS)
        check_timeout(self, "reward_timeout")
        check_choice(self, "reward_isolation", REWARD_ISOLATIONS)
        check_tool_settings(self)
        check_generation_backend(self)
        check_importance_sampling(self)
        max_staleness_value(self)
        check_async_common(self)  # the backend; the trainer checks processes and tools again
        if self.model_adapter_name is not None or self.ref_adapter_name is not None:
            raise ValueError(
                "`model_adapter_name`/`ref_adapter_name` are not supported: pass the base model with a `peft_config` "
                "(the reference policy is then the model with its adapter disabled)."
            )

    def _check_frozen_agents(self) -> None:
        """`frozen_agents`: agents of the team, not all of them, each with weights no trained agent shares."""
        bad = [a for a in self.frozen_agents if not 0 <= a < self.num_agents]
        if bad:
            raise ValueError(f"`frozen_agents` {bad} are not agents of a team of {self.num_agents}.")
        if not self.frozen_agents:
            return
        if len(set(self.frozen_agents)) >= self.num_agents:
            raise ValueError("`frozen_agents` freezes every agent: nothing would be trained.")
        shared = [f"{name}={value!r}" for name, value in (("policy_sharing", self.policy_sharing),
                                                          ("team_mode", self.team_mode), ("critic", self.critic))
                  if value in ("shared", "centralized")]
        if shared:
            raise ValueError(f"`frozen_agents` cannot freeze an agent under {' and '.join(shared)}: its weights "
                             "(one policy, or one value model, for the whole team) are the trained agents' too. Use "
                             "`policy_sharing='agent'` or 'agent_turn', a team with weights per agent and "
                             "`critic='per_agent'`.")

    def set_batch_sizes(self, num_processes: int, dataset_size: int) -> None:
        """Fill the computed batch-size fields (TRL 1.12's rules) for `num_processes` processes."""
        if self.total_episodes is None:
            self.total_episodes = int(self.num_train_epochs * dataset_size)
        self.world_size = num_processes
        self.local_batch_size = self.per_device_train_batch_size * self.gradient_accumulation_steps
        self.micro_batch_size = self.per_device_train_batch_size * self.world_size
        self.batch_size = self.local_batch_size * self.world_size
        self.mini_batch_size = self.batch_size // self.num_mini_batches
        self.local_mini_batch_size = self.local_batch_size // self.num_mini_batches
        self.num_total_batches = math.ceil(self.total_episodes / self.batch_size)
        if self.whiten_rewards and self.local_mini_batch_size < 8:
            raise ValueError(
                f"`whiten_rewards` needs at least 8 episodes per mini-batch per process, got "
                f"{self.local_mini_batch_size}: raise per_device_train_batch_size or gradient_accumulation_steps."
            )


MultiAgentPPOConfig.__doc__ = (MultiAgentPPOConfig.__doc__ or "") + fields_section(
    MultiAgentPPOConfig, "Parameters beyond `transformers.TrainingArguments` (each as `--help` gives it):",
    TRLBaseConfig)


def resume_problem(args: MultiAgentPPOConfig, distributed: bool = False) -> str | None:
    """Why a PPO run with `args` cannot resume from its checkpoints, as one sentence naming the fix; None when it can.

    Args:
        args: The run's config.
        distributed: The run is sharded by FSDP or DeepSpeed (also when an accelerate config says so, which `args`
            does not show).
    """
    why = ("with `save_value_model=False`: its checkpoints hold no critics" if not args.save_value_model
           else "with `save_only_model=True`: its checkpoints hold no optimizer or random states"
           if args.save_only_model
           else "under FSDP or DeepSpeed (not supported yet for PPO)"
           if distributed or args.fsdp or args.deepspeed else None)
    if why is None:
        return None
    return (f"This PPO run cannot resume from a checkpoint {why}. Leave `resume_from_checkpoint` out and start a new "
            "run from the saved team (`model=` the checkpoint's folder; `value_model=load_value_model(...)`).")


@dataclass
class PPOConfig(MultiAgentPPOConfig):
    r"""Configuration of the single-agent drop-in [`PPOTrainer`]: TRL 1.12's `PPOConfig`, field for field.

    Replace `from trl.experimental.ppo import PPOConfig` with `from trl_marl import PPOConfig`.
    """
