"""The config fields that `MAGRPOConfig` and `MultiAgentPPOConfig` both declare, each defined once: its default and
its help text (what `--help` prints and the docs show), written for both trainers.

A config declares such a field as `num_turns: int = num_turns_field()`. Fields of other homes follow the same
pattern: the reward's (`reward_contract.settings`), the tools' (`tools.settings`), the console's
(`trainers.console`) and `compiled_sync_every` (`team.generation.settings`). A new trainer's config takes its shared
fields from these factories instead of copying help texts.

Example:

```python
from dataclasses import dataclass

from transformers import TrainingArguments

from trl_marl.trainers.fields import num_agents_field, num_turns_field


@dataclass
class MyTeamConfig(TrainingArguments):
    num_agents: int = num_agents_field(2)
    num_turns: int = num_turns_field()
```
"""

from __future__ import annotations

import dataclasses
import textwrap
from dataclasses import field
from typing import Any, TypeVar

from ..core.estimators import advantage_mode_help, scale_rewards_help

T = TypeVar("T")


def num_agents_field(default: int) -> Any:
    """`num_agents`: the team's size (MAGRPO's default 2, PPO's 1: TRL's single-agent PPO)."""
    return field(default=default, metadata={"help": "Number of agents in the team."})


def advantage_mode_field(default: str | None) -> Any:
    """`advantage_mode`: the trainer's one knob of credit assignment, a name in the estimator registry (MAGRPO's
    default None, chosen from `scale_rewards`; PPO's `"gae"`). The help lists both kinds' registered estimators."""
    return field(
        default=default,
        metadata={
            "help": "The credit assignment: an advantage estimator registered with "
            "trl_marl.core.register_advantage_estimator (one registry for every trainer). MAGRPO takes the group "
            "estimators: " + advantage_mode_help("group") + ". MAGRPO's default: the estimator GRPO's "
            "`scale_rewards` names (" + scale_rewards_help() + "); with any other value `scale_rewards` must stay "
            "'none'. PPO takes the critic estimators: " + advantage_mode_help("critic") + "; PPO's default: "
            "'gae' (TRL's PPO and MAPoRL: A_t = R - V(s_t) with gamma = lam = 1; 'turn' is CoMLRL's IAC/MAAC, the "
            "response as one action, whatever lam is)."
        },
    )


def num_turns_field() -> Any:
    """`num_turns`: the turns of an episode."""
    return field(default=1, metadata={"help": "The most turns an episode has (e.g. a debate's rounds); an "
                                      "environment may end an episode sooner."})


def team_mode_field() -> Any:
    """`team_mode`: the team's layout (`AgentTeam.build`'s `mode`)."""
    return field(
        default=None,
        metadata={
            "help": "Team layout: 'adapters' (one base model + one LoRA adapter per agent; needs a peft_config), "
            "'models' (one model per agent) or 'shared' (one set of weights for all agents). Default: 'adapters' "
            "with a peft_config and more than one agent, else 'models' (PPO: 'shared' with "
            "`policy_sharing='shared'`)."
        },
    )


def frozen_agents_field() -> Any:
    """`frozen_agents`: agents that act but are not trained (the papers' baseline of agents trained alone)."""
    return field(
        default_factory=list,
        metadata={
            "help": "Agents that act but are not trained, e.g. `[1]` to train agent 0 alone against a fixed partner "
            "(the 'training individual LLMs alone' baseline of the papers): a frozen agent answers at every turn and "
            "its answers are seen and scored, but its weights get no gradient and no optimizer step (in PPO neither "
            "do its policies of every turn, with 'agent_turn', nor its value models). Needs weights of its own: not "
            "with `team_mode='shared'` (PPO: nor `policy_sharing='shared'` or `critic='centralized'`)."
        },
    )


def backward_per_agent_field() -> Any:
    """`backward_per_agent`: one backward per agent (or PPO policy slot) instead of one of the summed loss."""
    return field(
        default=True,
        metadata={
            "help": "Backpropagate the loss one agent (PPO: one policy slot) at a time: one agent's activations in "
            "memory instead of all, the gradient of the summed loss (False). Why, and when the summed loss is taken "
            "anyway: trl_marl.trainers.per_agent."
        },
    )


def max_staleness_field() -> Any:
    """`max_staleness`: asynchronous rollouts (TRL's `AsyncGRPOTrainer` field name), `trainers.async_support`."""
    return field(
        default=0,
        metadata={
            "help": "Asynchronous rollouts: with s > 0 a worker thread plays the episodes of the next s optimizer "
            "steps (PPO: updates) with its own copy of the adapters (and the vLLM engine, with "
            "generation_backend='vllm') while the current one trains; every agent's policy "
            "that sampled the episodes trained at step t is at most s steps old, the same for every turn of an "
            "episode, and the importance-sampling correction (`vllm_importance_sampling_correction`) weighs them "
            "by the truncated ratio of the current policy over that one. 0 (default): synchronous. Unsharded weights "
            "(one process or DDP) and generation_backend 'transformers' or 'vllm' only so far."
        },
    )


def max_staleness_value(config: Any) -> None:
    """Refuse a `max_staleness` that is not an integer >= 0 (`__post_init__` of both configs)."""
    value = config.max_staleness
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"`max_staleness` must be an integer >= 0 (0: synchronous rollouts; s > 0: rollouts "
                         f"generated up to s steps ahead), got {value!r}.")


def share_prompt_prefill_field() -> Any:
    """`share_prompt_prefill`: one prefill per distinct prompt and weights, its KV cache shared by the rows."""
    return field(
        default=True,
        metadata={
            "help": "Rows that repeat a prompt through the same weights (the G samples of a MAGRPO node; agents of "
            "a 'shared' team that see the same prompt) run its prefill once and share its KV cache; agents with "
            "different adapters or models never share one (their keys and values differ). Sampling is unchanged up "
            "to floating-point reordering. False: one prefill per row (a plain `generate`), faster only for tiny "
            "models with prompts of a few tokens (sharing costs one more forward call)."
        },
    )


def generation_backend_field() -> Any:
    """`generation_backend`: what samples the completions (`team.generation`)."""
    return field(
        default="transformers",
        metadata={
            "help": "What samples the agents' completions: 'transformers' (the team's own batched decoding), "
            "'compiled' (the same decoding on a static KV cache, bucketed to a few shapes, with the whole decode "
            "step compiled by torch.compile: the forward, the sampling and the EOS bookkeeping, CUDA graphs on a "
            "GPU, one host check of the rows' end per `compiled_sync_every` tokens; where that cannot run, e.g. "
            "beam search or a model without static-cache support, it decodes eager and logs why once), or "
            "'vllm' (one vLLM engine for the whole team, every agent's LoRA adapter a LoRARequest, all agents' rows "
            "in one call, adapters re-uploaded after each optimizer step; needs LoRA adapters (a peft_config) and "
            "vLLM installed). `use_vllm=True` selects 'vllm'. `vllm_mode='colocate'` runs the engine in-process "
            "(`vllm_gpu_memory_utilization`, `vllm_max_model_length`, `vllm_kv_cache_memory_bytes`; MAGRPO: "
            "`vllm_model_impl`); "
            "`vllm_mode='server'` uses a running server on the team's base model (`trl-marl vllm-serve`; "
            "`vllm_server_base_url` or `vllm_server_host`/`vllm_server_port`, `vllm_server_timeout`). "
            "Log-probabilities (and PPO's values) are recomputed by the training model either way, and with "
            "`vllm_importance_sampling_correction=True` (TRL's default) each agent's per-token policy loss is "
            "weighted by TRL's truncated importance ratio of the training model over vLLM "
            "(`vllm_importance_sampling_mode`, `_clip_min`, `_clip_max`; logged as `sampling/*`)."
        },
    )


def vllm_kv_cache_memory_bytes_field() -> Any:
    """`vllm_kv_cache_memory_bytes`: the vLLM engine's KV cache."""
    return field(
        default=None,
        metadata={
            "help": "Size of the vLLM engine's KV cache in bytes (`generation_backend='vllm'`). Default: sized from "
            "`vllm_gpu_memory_utilization` on a GPU, 256 MiB on a CPU (where vLLM's memory share means host RAM). "
            "Split evenly between the engines of a `models` team over several base models (one engine per base)."
        },
    )


def vllm_logprobs_mode_field() -> Any:
    """`vllm_logprobs_mode`: the log-probabilities vLLM returns for the importance-sampling correction."""
    return field(
        default="processed_logprobs",
        metadata={
            "help": "Which log-probabilities vLLM returns for `vllm_importance_sampling_correction`: "
            "'processed_logprobs' (TRL's: after the repetition penalty, temperature and top-k/top-p/min-p "
            "truncation, so with any of these each token's log-ratio is <= 0 and the ratio is biased low, more so "
            "for longer completions) or 'raw_logprobs' (the model's untruncated log-softmax: the ratio then "
            "measures only the engine's numerical mismatch; sampling at temperature 1 only). A `trl-marl "
            "vllm-serve` server must run with the same `--logprobs-mode`."
        },
    )


def prompt_length_check_field() -> Any:
    """`prompt_length_check`: what a prompt too long for the model's context does when the trainer is built."""
    return field(
        default="warn",
        metadata={
            "help": "What to do when the turn-1 prompt of a dataset row plus the completion length "
            "(`max_completion_length`; PPO: `response_length`) exceeds the model's context window "
            "(`max_position_embeddings`), checked on every row when the trainer is built: 'warn' (one "
            "ContextLengthWarning naming the first such row, the count and the fixes; rotary models such as Qwen or "
            "Llama still run past it, with degraded output), 'error' (a ValueError), or 'ignore' (no check). With "
            "'warn' or 'error', a prompt longer than 4 context windows cannot fit and is always a ValueError naming "
            "the row and its longest field."
        },
    )


def max_nonfinite_field() -> Any:
    """`max_nonfinite`: how many NaN or infinite rewards (and losses) a run skips before it stops."""
    return field(
        default=10,
        metadata={
            "help": "NaN or infinite rewards (and, in MAGRPO, losses) are skipped, never replaced: the sample leaves "
            "the loss, and each is counted in the logs; training raises once more than this many occurred."
        },
    )


def cpu_threads_field() -> Any:
    """`cpu_threads`: torch's threads on a CPU run."""
    return field(
        default=None,
        metadata={
            "help": "Torch threads of a CPU run. None: chosen for you (1 for models under 20M parameters, which run "
            "fastest on one thread; one per core above, fewer when other work keeps the cores busy, by the load "
            "average), unless OMP_NUM_THREADS is set, which then decides."
        },
    )


def fields_section(cls: type, heading: str, inherited: type) -> str:
    """A docstring section, as TRL's configs write theirs, for every field that the dataclass `cls` declares and
    `inherited` does not: `name (`type`, defaults to `value`): its help text`. A config appends it to its docstring,
    so that the docstring and `--help` say the same from one text."""
    known = {f.name for f in dataclasses.fields(inherited)}
    lines = [f"\n\n    {heading}\n"]
    for f in dataclasses.fields(cls):
        if f.name in known:
            continue
        if f.default is not dataclasses.MISSING:
            default = f"defaults to `{f.default!r}`"
        elif f.default_factory is not dataclasses.MISSING:
            default = f"defaults to `{f.default_factory()!r}`"
        else:
            default = "required"
        entry = f"{f.name} (`{f.type}`, {default}): {f.metadata.get('help', '')}"
        lines.append(textwrap.fill(entry, width=116, initial_indent=" " * 8, subsequent_indent=" " * 12) + "\n")
    return "".join(lines)


def field_value(value: T | None, name: str) -> T:
    """The value of a config field typed `X | None` where None only asks the config to fill it in: its
    `__post_init__` (TRL's `steps_per_generation`, `num_generations_eval`, MAGRPO's `advantage_mode`) or, for PPO's
    batch sizes, `set_batch_sizes` (called by the trainer's constructor)."""
    if value is None:
        raise ValueError(f"`{name}` is None here: the config fills it in (`__post_init__`, `set_batch_sizes`).")
    return value


def dict_field_value(value: dict[str, Any] | str | None, name: str) -> dict[str, Any] | None:
    """The value of a dict field that TRL types `dict | str | None` for the command line (`__post_init__` reads a
    JSON object string into a dict); an empty string counts as None (as it always did), any other string is refused
    (it failed with a TypeError before)."""
    if isinstance(value, str):
        if not value:
            return None
        raise ValueError(f"`{name}` must be a dict (or a JSON object string), got {value!r}.")
    return value
