"""The interface of a generation backend, and the config check of `generation_backend` (its settings: `settings`).

A backend turns the tokenized prompts of every agent into completion token ids, in the structure of the team's own
decoding: `completions[a][i]` is the list of token ids generated for prompt `i` of agent `a` (prompt excluded, not
yet cut after EOS: [`AgentTeam.generate`] cuts every backend's rows the same way). The trainers recompute every
log-probability with the training model; a backend that can also returns its own log-probability of every sampled
token (`generate_with_logprobs`), with which the trainers apply TRL's truncated importance-sampling correction of the
engine/trainer mismatch (`vllm_importance_sampling_correction`, `trl_marl.core.engine_importance_sampling_ratio`).
A backend that returns none (`None`) gets no correction.

Every backend samples with the same settings, resolved once as `generate` resolves them
([`resolve_generation_settings`]: the call's generation config, else the model's `generation_config`, else
transformers' defaults): the team's own decoding and the compiled backend through the lean loop's plan, vLLM through
the `SamplingParams` it builds from them (`team.generation.vllm.sampling_settings`), which refuses, naming it, any
setting the engine cannot mean the same way.
"""

from __future__ import annotations

import functools
from typing import Any

from transformers import GenerationConfig

from .settings import GENERATION_BACKENDS, LOGPROBS_MODES, VLLM_MODES, GenerationSettings

__all__ = [
    "GENERATION_BACKENDS", "INERT_SETTINGS", "LOGPROBS_MODES", "VLLM_MODES", "EngineBackend", "GenerationBackend",
    "GenerationSettings", "check_generation_backend", "generation_config_owner", "global_generation_defaults",
    "is_default_setting", "resolve_generation_settings",
]


# Settings that `generate`'s greedy/sampling loop never reads for a decoder-only model given `input_ids` and a
# `max_new_tokens`, with a dynamic cache, no assistant and no dict output (what the lean loop and vLLM require).
INERT_SETTINGS = frozenset({
    "max_length",  # replaced by prompt length + max_new_tokens
    "bos_token_id", "decoder_start_token_id",  # only to start sequences that have no prompt / encoder-decoder
    "early_stopping", "length_penalty",  # beam search
    "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
    "assistant_lookbehind", "target_lookbehind", "max_matching_ngram_size", "assistant_ensemble_weight",
    "speculation_type",  # assisted decoding
    "compile_config", "disable_compile",  # `generate` compiles only with a compileable (static) cache
    "cache_config", "max_cache_len",  # quantized and static caches
    "output_scores", "output_logits",  # read only with return_dict_in_generate
    "transformers_version",
})


@functools.cache
def global_generation_defaults() -> dict[str, Any] | None:
    """transformers' defaults for the settings that neither the call nor the model set (None if it has none)."""
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    return dict(defaults()) if callable(defaults) else None


def is_default_setting(name: str, value: Any, defaults: dict[str, Any]) -> bool:
    """Whether a resolved setting is transformers' default (None, or False for a setting without a default,
    counts as the default)."""
    default = defaults.get(name)
    if value is None or (default is None and value is False):
        return True
    try:
        return bool(value == default)
    except (TypeError, ValueError, RuntimeError):  # e.g. a tensor: not known to be the default
        return False


def generation_config_owner(model: Any) -> Any:
    """The model whose `generation_config` `model.generate` merges in: a `PeftModelForCausalLM` installs its own on
    the base model for the call, a plain `PeftModel` leaves the base model's."""
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        from peft import PeftModelForCausalLM

        return model if isinstance(model, PeftModelForCausalLM) else model.get_base_model()
    return model


def resolve_generation_settings(generation_config: GenerationConfig, model: Any = None) -> dict[str, Any]:
    """Every public setting as `generate` resolves it for `model`: the call's (`generation_config`), else the
    model's `generation_config`, else transformers' default. The one resolution every backend samples with.

    Args:
        generation_config: The call's settings (unset fields are None).
        model: The model that generates (a PEFT model, its base model, or None: no model settings), or directly a
            `GenerationConfig` standing for the model's.
    """
    defaults = global_generation_defaults() or {}
    if model is None or isinstance(model, GenerationConfig):
        model_config = model
    else:
        model_config = getattr(generation_config_owner(model), "generation_config", None)
    names = set(vars(generation_config)) | (set(vars(model_config)) if model_config is not None else set())
    settings = {}
    for name in names:
        if name.startswith("_"):
            continue
        value = getattr(generation_config, name, None)
        if value is None and model_config is not None:
            value = getattr(model_config, name, None)
        settings[name] = defaults.get(name) if value is None else value
    if settings.get("cache_implementation") == "hybrid":  # `generate` reads it as the default (dynamic) cache
        settings["cache_implementation"] = None
    return settings


class GenerationBackend:
    """What samples a team's completions in place of the team's own decoding (see the module docstring)."""

    name: str = ""
    # True for a backend that decodes the team's own batches: `AgentTeam` then calls its `decode` (the signature of
    # `team.generation.lean.decode`) for each batch in place of the eager loop, and never its `generate`
    decodes_rows: bool = False
    # whether `generate_with_logprobs` returns the engine's log-probabilities (the factory sets it from the settings'
    # `vllm_importance_sampling_correction`)
    sampling_logprobs: bool = False

    def generate(self, team: Any, prompt_ids: list[list[list[int]]],
                 generation_config: GenerationConfig) -> list[list[list[int]]]:
        """The generated token ids of every agent's prompts (`prompt_ids[a][i]`, token ids), in the same structure.

        Args:
            team: The [`AgentTeam`] whose policies generate; the backend reads its current weights from it.
            prompt_ids: `prompt_ids[a]` is the list of tokenized prompts of agent `a` (may be empty).
            generation_config: The sampling settings, with the meaning they have in `transformers`' `generate`.
        """
        raise NotImplementedError(f"{type(self).__name__} is a GenerationBackend: it must define `generate` (or "
                                  "`generate_with_logprobs`, or set `decodes_rows` and define `decode`).")

    def generate_with_logprobs(
        self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]] | None]:
        """[`GenerationBackend.generate`], plus the engine's log-probability of every generated token
        (`logprobs[a][i][t]` for `completions[a][i][t]`), or None when the backend does not give them (the default)
        or `sampling_logprobs` is off. [`AgentTeam.generate`] calls this one."""
        return self.generate(team, prompt_ids, generation_config), None

    def close(self) -> None:
        """Release the backend's resources (engine, temporary folders). The default holds none."""


class EngineBackend(GenerationBackend):
    """A backend whose engine returns log-probabilities with its samples (vLLM, in process or as a server): it
    defines `generate_with_logprobs` with a `logprobs` switch, and `generate` is that call without them."""

    def generate(self, team: Any, prompt_ids: list[list[list[int]]],
                 generation_config: GenerationConfig) -> list[list[list[int]]]:
        completions, _ = self.generate_with_logprobs(team, prompt_ids, generation_config, logprobs=False)
        return completions

    def generate_with_logprobs(
        self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
        logprobs: bool | None = None,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]] | None]:
        """Completions and, when `logprobs` (default: `sampling_logprobs`), the engine's log-probability of every
        sampled token."""
        raise NotImplementedError(f"{type(self).__name__} is an EngineBackend: it must define "
                                  "`generate_with_logprobs`.")


def check_generation_backend(config: Any) -> None:
    """Validate (and normalise) the generation-backend fields of a trainer config, in its `__post_init__`.

    `use_vllm=True` (TRL's switch) selects `generation_backend="vllm"`, and `generation_backend="vllm"` sets
    `use_vllm` (TRL's reading of the same choice). The fields themselves are checked by building their
    [`GenerationSettings`]: settings of vLLM that the backend does not implement are refused with the setting that
    works, never ignored.
    """
    if config.use_vllm:
        if config.generation_backend not in ("transformers", "vllm"):
            raise ValueError(
                "`use_vllm=True` selects `generation_backend='vllm'`, but "
                f"`generation_backend={config.generation_backend!r}` is set too: set only one of them."
            )
        config.generation_backend = "vllm"
    GenerationSettings.of(config)
    if config.generation_backend == "vllm":
        config.use_vllm = True
