"""The interface of a generation backend, the value it returns, and the config check of `generation_backend` (its
settings: `settings`).

Every backend is an object with one method that the team calls, [`GenerationBackend.generate`]: it turns the
tokenized prompts of every agent (`prompt_ids[a][i]`) into a [`Generation`]: the prompts, one completion per prompt
(`completion_ids[a][i]`, prompt excluded, cut after the first stop token: [`stop_ids`]), and the engine's
log-probability of every sampled token where the backend has them (`sampling_logps`, else None). The team's own
decoding is such an object too (`transformers_backend.TransformersBackend`, the default), and so is the compiled one
(`compiled.CompiledBackend`, a `TransformersBackend` that decodes each batch on a static cache). An engine that
samples every agent's rows at once, uncut, with log-probabilities (vLLM, in process or as a server) subclasses
[`EngineBackend`], whose `generate` cuts them ([`Generation.from_rows`]).

The trainers recompute every log-probability with the training model; with the engine's own (`sampling_logps`) they
apply TRL's truncated importance-sampling correction of the engine/trainer mismatch
(`vllm_importance_sampling_correction`, `trl_marl.core.engine_importance_sampling_ratio`). A backend that gives none
(None) gets no correction.

Every backend samples with the same settings, resolved once as `generate` resolves them
([`resolve_generation_settings`]: the call's generation config, else the model's `generation_config`, else
transformers' defaults): the team's own decoding and the compiled backend through the lean loop's plan, vLLM through
the `SamplingParams` it builds from them (`team.generation.vllm.sampling_settings`), which refuses, naming it, any
setting the engine cannot mean the same way.

Example, a backend that answers every prompt with the same tokens:

```python
from trl_marl.team.generation import Generation, GenerationBackend

class Constant(GenerationBackend):
    name = "constant"

    def generate(self, team, prompt_ids, generation_config, stop_token_ids=None):
        rows = [[[5, 6, 7]] * len(prompts) for prompts in prompt_ids]  # uncut, one row per prompt
        return Generation.from_rows(team, prompt_ids, rows, None, stop_token_ids, generation_config)

team.generation_backend = Constant()  # None restores the team's own decoding
```
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, overload

from transformers import GenerationConfig

from ...utils.tokens import truncate_after_eos
from .settings import LOGPROBS_MODES, VLLM_MODES, GenerationSettings

__all__ = [
    "INERT_SETTINGS", "LOGPROBS_MODES", "VLLM_MODES", "EngineBackend", "Generation",
    "GenerationBackend", "GenerationSettings", "agent_generation_config", "check_generation_backend",
    "generation_config_owner",
    "global_generation_defaults", "is_default_setting", "resolve_generation_settings", "stop_ids",
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


@dataclass(eq=False)
class Generation:
    """What [`AgentTeam.generate`] returns, from every backend: one completion per prompt, for every agent.

    `prompt_ids[a][i]` is the tokenized prompt `i` of agent `a`, `completion_ids[a][i]` its completion (cut after the
    first stop token), and `sampling_logps[a][i][t]` the engine's log-probability of `completion_ids[a][i][t]` (vLLM:
    the input of the importance-sampling correction), or None when the backend gives none (the team's own decoding).

    It reads as the list of `(prompt_ids, completion_ids)` pairs that `generate` returned before it was a value:
    `generation[a]` is agent `a`'s pair, `for prompts, completions in generation` and `len(generation)` (the number
    of agents) work, and it equals such a list when its pairs do.

    Example:

    ```python
    >>> from trl_marl.team.generation import Generation
    >>> out = Generation(prompt_ids=[[[1, 2]], [[3]]], completion_ids=[[[7, 0]], [[8]]])
    >>> prompts, completions = out[1]
    >>> completions, out.sampling_logps
    ([[8]], None)
    >>> out == [([[1, 2]], [[7, 0]]), ([[3]], [[8]])]
    True
    ```
    """

    prompt_ids: list[list[list[int]]]
    completion_ids: list[list[list[int]]]
    sampling_logps: list[list[list[float]]] | None = None

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @overload
    def __getitem__(self, index: int) -> tuple[list[list[int]], list[list[int]]]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[list[list[int]], list[list[int]]]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        pairs = list(zip(self.prompt_ids, self.completion_ids))
        return pairs[index]

    def __iter__(self) -> Iterator[tuple[list[list[int]], list[list[int]]]]:
        return iter(zip(self.prompt_ids, self.completion_ids))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Generation):
            return (self.prompt_ids, self.completion_ids, self.sampling_logps) == (
                other.prompt_ids, other.completion_ids, other.sampling_logps)
        if isinstance(other, (list, tuple)):  # the list of pairs `generate` returned before
            return [tuple(pair) for pair in self] == [tuple(pair) for pair in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable lists inside

    @classmethod
    def from_rows(
        cls, team: Any, prompt_ids: list[list[list[int]]], rows: list[list[list[int]]],
        sampling_logps: list[list[list[float]]] | None = None, stop_token_ids: set[int] | None = None,
        generation_config: GenerationConfig | None = None,
    ) -> Generation:
        """The generation of an engine that returns every agent's rows uncut: each row cut after the first of agent
        `a`'s stop tokens ([`stop_ids`]), its log-probabilities (if any) cut to the same length.

        Args:
            team: The [`AgentTeam`] the rows were sampled for (its agents' stop tokens).
            prompt_ids: `prompt_ids[a][i]`, as the backend was given them.
            rows: `rows[a][i]`: the generated token ids of prompt `i` of agent `a` (prompt excluded).
            sampling_logps: `sampling_logps[a][i][t]` the engine's log-probability of `rows[a][i][t]`, or None.
            stop_token_ids: The call's stop tokens (None: each agent's default, see [`stop_ids`]).
            generation_config: The call's settings (its `eos_token_id` stops rows too when `stop_token_ids` is None).
        """
        stops = [stop_ids(team, a, stop_token_ids, generation_config) for a in range(len(rows))]
        cut = [[truncate_after_eos(row, stops[a]) for row in rows[a]] for a in range(len(rows))]
        logps = None if sampling_logps is None else [
            [list(lp[: len(row)]) for lp, row in zip(sampling_logps[a], cut[a])] for a in range(len(rows))]
        return cls(list(prompt_ids), cut, logps)


def stop_ids(team: Any, agent_index: int, stop_token_ids: set[int] | None,
             generation_config: GenerationConfig | None = None) -> set[int]:
    """The tokens agent `agent_index`'s completions are cut after: `stop_token_ids`; when None, the team's
    `stop_token_ids(agent_index)` and every `eos_token_id` of the call's `generation_config` (a row that decoding ended
    at such a token is padded after it: without the cut, the padding would count as completion tokens)."""
    if stop_token_ids is not None:
        return stop_token_ids
    stops = team.stop_token_ids(agent_index)
    called = getattr(generation_config, "eos_token_id", None)
    if called is not None:
        stops |= set(called if isinstance(called, list) else [called])
    return stops


def agent_generation_config(team: Any, agent_index: int, generation_config: GenerationConfig,
                            stop_token_ids: set[int] | None = None) -> GenerationConfig:
    """The call's settings as agent `agent_index`'s model decodes them: in a team whose agents end at different
    tokens (a `models` team of different base models), a config without `eos_token_id` (what the trainers give such
    a team) in a call without `stop_token_ids` gets a copy with the agent's own stop tokens
    (`team.stop_token_ids(agent_index)`) and its tokenizer's pad token. A config with an EOS keeps it, for every
    agent (a caller's explicit choice), and so does a call with `stop_token_ids` (an empty set: no stop, every row
    runs to `max_new_tokens`) and every call to a team whose agents share their stop tokens.

    Args:
        team: The [`AgentTeam`].
        agent_index: The agent (every agent of one model shares its tokenizer, so any of them stands for the model).
        generation_config: The call's settings.
        stop_token_ids: The call's stop tokens (None: each agent's own).

    Returns:
        `generation_config` itself, or the agent's copy.
    """
    if stop_token_ids is not None or getattr(generation_config, "eos_token_id", None) is not None:
        return generation_config
    if len({frozenset(team.stop_token_ids(a)) for a in range(team.num_agents)}) == 1:
        return generation_config
    stops = sorted(team.stop_token_ids(agent_index))
    if not stops:
        return generation_config
    config = copy.deepcopy(generation_config)
    config.eos_token_id = stops if len(stops) > 1 else stops[0]
    pad = getattr(team.tokenizers[agent_index], "pad_token_id", None)
    config.pad_token_id = pad if pad is not None else stops[0]
    return config


class GenerationBackend:
    """What samples a team's completions: every backend, the team's own decoding (`TransformersBackend`) included,
    defines [`GenerationBackend.generate`] and returns a [`Generation`] (see the module docstring).

    A subclass defines `generate(team, prompt_ids, generation_config, stop_token_ids=None) -> Generation` (an engine
    that returns uncut rows: subclass [`EngineBackend`]); the team refuses one whose `generate` takes no
    `stop_token_ids` when it is set (`AgentTeam.generation_backend = ...`).
    """

    name: str = ""
    # whether the engine's log-probabilities come with the samples (`EngineBackend`; the factory sets it from the
    # settings' `vllm_importance_sampling_correction`)
    sampling_logprobs: bool = False

    def generate(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
                 stop_token_ids: set[int] | None = None) -> Generation:
        """One completion per tokenized prompt, for every agent.

        Args:
            team: The [`AgentTeam`] whose policies generate; the backend reads its current weights from it.
            prompt_ids: `prompt_ids[a]` is the list of tokenized prompts of agent `a` (may be empty).
            generation_config: The sampling settings, with the meaning they have in `transformers`' `generate`.
            stop_token_ids: Completions are cut after the first of these tokens; None: each agent's default
                ([`stop_ids`]); an empty set keeps every generated token.

        Returns:
            A [`Generation`]: `prompt_ids` as given, the cut completions, and the engine's log-probabilities (or None).
        """
        raise NotImplementedError(f"{type(self).__name__} is a GenerationBackend: it must define "
                                  "`generate(team, prompt_ids, generation_config, stop_token_ids=None) -> Generation` "
                                  "(or subclass `EngineBackend` and define `generate_with_logprobs`).")

    def close(self) -> None:
        """Release the backend's resources (engine, temporary folders). The default holds none."""


class EngineBackend(GenerationBackend):
    """A backend whose engine returns every agent's rows at once, uncut, with their log-probabilities (vLLM, in
    process or as a server): it defines [`EngineBackend.generate_with_logprobs`], and `generate` cuts what it returns
    into a [`Generation`] ([`Generation.from_rows`]).

    One `generate` call at a time per process: the rollout worker of asynchronous rollouts (`max_staleness > 0`)
    and the trainer (evaluation, sample tables) drive the same engine from two threads, each syncing the adapters
    of its own copy of the team before it samples."""

    _calls = threading.Lock()

    def generate(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
                 stop_token_ids: set[int] | None = None) -> Generation:
        with self._calls:  # the adapters synced by this call are the ones it samples from
            rows, logps = self.generate_with_logprobs(team, prompt_ids, generation_config)
        return Generation.from_rows(team, prompt_ids, rows, logps, stop_token_ids, generation_config)

    def generate_with_logprobs(
        self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
        logprobs: bool | None = None,
    ) -> tuple[list[list[list[int]]], list[list[list[float]]] | None]:
        """The engine's rows (`rows[a][i]`: the generated token ids of `prompt_ids[a][i]`, prompt excluded, not yet
        cut after a stop token) and, when `logprobs` (default: `sampling_logprobs`), its log-probability of every
        sampled token (`logprobs[a][i][t]` for `rows[a][i][t]`), else None."""
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
