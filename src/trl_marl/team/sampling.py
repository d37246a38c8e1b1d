"""How `AgentTeam` samples: [`generate`] tokenizes every agent's prompts and hands the rows to the team's generation
backend (`team.generation_backend`, an object the team has), which returns a [`Generation`].

The backend is an object with one interface (`team.generation.base.GenerationBackend.generate`), never None: the
team's own decoding (`team.generation.transformers_backend.TransformersBackend`, the default: lean loop, shared
prompt prefills, `model.generate` fallback, continuous batching), the compiled one (`"compiled"`) or vLLM (`"vllm"`),
each cutting every completion after its first stop token. Which rows decode together, and how, is the backend's
business; the team's settings (`team.settings`, a `team.settings.TeamSettings`) hold the switches the default backend
reads (`lean_decode`, `share_prompt_prefill`, `continuous_batching_config`). `AgentTeam.generate`,
`AgentTeam.stop_token_ids` and the `AgentTeam.generation_backend` property (which sets the backend through
[`checked_backend`]) call the functions here.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel

from ..utils.tokens import Prompt, tokenize_prompts
from .generation.base import Generation, GenerationBackend
from .generation.transformers_backend import TransformersBackend


def _eos_ids(tokenizer: Any, model: PreTrainedModel) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, gen_eos):
        if value is None:
            continue
        ids.update(value if isinstance(value, list) else [value])
    return ids


def checked_backend(backend: GenerationBackend | None) -> GenerationBackend:
    """`backend`, or for None the team's own decoding (a new [`TransformersBackend`]); an object that is no
    [`GenerationBackend`] is refused with the fix (what `AgentTeam.generation_backend = ...` runs)."""
    if backend is None:
        return TransformersBackend()
    if not isinstance(backend, GenerationBackend):
        raise TypeError(
            f"`generation_backend` must be a `trl_marl.team.generation.GenerationBackend`, got "
            f"{type(backend).__name__}: subclass `GenerationBackend` and define `generate(team, prompt_ids, "
            "generation_config, stop_token_ids=None) -> Generation` (or set None for the team's own decoding)."
        )
    if not _takes_stop_token_ids(backend.generate):
        raise TypeError(
            f"{type(backend).__name__}.generate takes no `stop_token_ids`: a backend defines `generate(team, "
            "prompt_ids, generation_config, stop_token_ids=None)` and returns a `trl_marl.team.generation.Generation` "
            "(`Generation.from_rows` cuts uncut rows after the stop tokens; an engine that returns uncut rows with "
            "log-probabilities subclasses `EngineBackend` and defines `generate_with_logprobs`)."
        )
    return backend


def _takes_stop_token_ids(method: Any) -> bool:
    """Whether a backend's `generate` accepts the keyword `stop_token_ids` (named, or through `**kwargs`)."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the call itself will tell
        return True
    return "stop_token_ids" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def stop_token_ids(team: Any, agent_index: int) -> set[int]:
    """[`AgentTeam.stop_token_ids`]: agent `agent_index`'s tokenizer's EOS and every EOS of its model's generation
    config."""
    return _eos_ids(team.tokenizers[agent_index], team.base_model_of(agent_index))


@torch.no_grad()
def generate(
    team: Any, prompts: Sequence[Sequence[Prompt]], generation_config: GenerationConfig,
    chat_template_kwargs: dict | None = None, stop_token_ids: set[int] | None = None,
) -> Generation:
    """[`AgentTeam.generate`]: every agent's prompts tokenized and sampled by the team's backend
    (`team.generation_backend`), whose [`Generation`] is checked and returned (the arguments are those of
    `AgentTeam.generate`)."""
    if len(prompts) != team.num_agents:
        raise ValueError(f"Expected prompts for {team.num_agents} agents, got {len(prompts)}.")
    prompt_ids = [tokenize_prompts(team.tokenizers[a], prompts[a], chat_template_kwargs)
                  for a in range(team.num_agents)]
    backend = team.generation_backend
    generation = backend.generate(team, prompt_ids, generation_config, stop_token_ids=stop_token_ids)
    if not isinstance(generation, Generation):
        raise TypeError(
            f"{type(backend).__name__}.generate returned {type(generation).__name__}, not a "
            "`trl_marl.team.generation.Generation`: return `Generation.from_rows(team, prompt_ids, rows, ...)`."
        )
    return generation
