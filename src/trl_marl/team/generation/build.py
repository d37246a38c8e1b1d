"""`build_generation_backend`: the backend object that a trainer's [`GenerationSettings`] name (the one module that
imports every backend).

It lives apart from `base` (the interface every backend subclasses) so that no backend module and the interface
import each other.
"""

from __future__ import annotations

from typing import Any

from .base import GenerationBackend
from .settings import GenerationSettings
from .transformers_backend import TransformersBackend


def build_generation_backend(settings: GenerationSettings | Any, team: Any) -> GenerationBackend:
    """The backend that `settings.generation_backend` names, built for `team`: a [`TransformersBackend`] (the team's
    own decoding) for `"transformers"`.

    Args:
        settings: The [`GenerationSettings`] (a trainer builds them once from its config), or a config holding the
            same fields (read with `GenerationSettings.of`).
        team: The [`AgentTeam`] the backend samples for.
    """
    if not isinstance(settings, GenerationSettings):
        settings = GenerationSettings.of(settings)
    if settings.generation_backend == "transformers":
        return TransformersBackend()
    if settings.generation_backend == "compiled":
        from .compiled import CompiledBackend

        return CompiledBackend(team, sync_every=settings.compiled_sync_every)
    backend: GenerationBackend
    if settings.vllm_mode == "server":
        from .vllm_server import VLLMServerBackend

        backend = VLLMServerBackend(team, settings.server_url(), timeout=settings.vllm_server_timeout,
                                    logprobs_mode=settings.vllm_logprobs_mode,
                                    sampling_logprobs=settings.vllm_importance_sampling_correction)
    else:
        from .vllm import VLLMBackend

        backend = VLLMBackend(
            team,
            gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
            kv_cache_memory_bytes=settings.vllm_kv_cache_memory_bytes,
            max_model_len=settings.vllm_max_model_length,
            model_impl=settings.vllm_model_impl,
            seed=settings.seed,
            logprobs_mode=settings.vllm_logprobs_mode,
        )
    # whether the engine returns its log-probabilities, for the importance-sampling correction
    backend.sampling_logprobs = settings.vllm_importance_sampling_correction
    return backend
