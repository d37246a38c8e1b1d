"""`build_generation_backend`: the backend object a config names (the one module that imports every backend).

It lives apart from `base` (the interface every backend subclasses) so that no backend module and the interface
import each other.
"""

from __future__ import annotations

from typing import Any

from .base import GenerationBackend


def build_generation_backend(config: Any, team: Any) -> GenerationBackend | None:
    """The backend that `config.generation_backend` names, built for `team` (None: the team's own decoding)."""
    if config.generation_backend == "transformers":
        return None
    if config.generation_backend == "compiled":
        from .compiled import CompiledBackend

        return CompiledBackend(team)
    # which log-probabilities the engine returns for the importance-sampling correction (`vllm.LOGPROBS_MODES`)
    logprobs_mode = getattr(config, "vllm_logprobs_mode", "processed_logprobs")
    if getattr(config, "vllm_mode", "colocate") == "server":
        from .vllm_server import VLLMServerBackend

        url = config.vllm_server_base_url
        if url is None:
            host = "127.0.0.1" if config.vllm_server_host in ("0.0.0.0", "") else config.vllm_server_host
            url = f"http://{host}:{config.vllm_server_port}"
        backend: GenerationBackend = VLLMServerBackend(
            team, url, timeout=config.vllm_server_timeout, logprobs_mode=logprobs_mode,
            sampling_logprobs=bool(getattr(config, "vllm_importance_sampling_correction", False)))
    else:
        from .vllm import VLLMBackend

        backend = VLLMBackend(
            team,
            gpu_memory_utilization=getattr(config, "vllm_gpu_memory_utilization", 0.3),
            kv_cache_memory_bytes=getattr(config, "vllm_kv_cache_memory_bytes", None),
            max_model_len=getattr(config, "vllm_max_model_length", None),
            model_impl=getattr(config, "vllm_model_impl", "auto"),
            seed=getattr(config, "seed", 0),
            logprobs_mode=logprobs_mode,
        )
    backend.sampling_logprobs = bool(getattr(config, "vllm_importance_sampling_correction", False))
    return backend
