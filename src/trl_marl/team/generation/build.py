"""`build_generation_backend`: the backend a trainer config's `generation_backend` names, built by the factory
registered under that name (`registry`) from the trainer's [`GenerationSettings`]; the built-in factories.

The built-in names are `"transformers"` ([`TransformersBackend`], the team's own decoding), `"compiled"`
(`compiled.CompiledBackend`) and `"vllm"` (`vllm.VLLMBackend`, or `vllm_server.VLLMServerBackend` with
`vllm_mode="server"`); their modules are imported when first built. A user's backend is one more name:

```python
from trl_marl.team.generation import GenerationBackend, register_generation_backend


class EchoBackend(GenerationBackend):  # implements `generate` (see `GenerationBackend`)
    ...


register_generation_backend("echo", lambda settings, team: EchoBackend())
# then MAGRPOConfig(generation_backend="echo") or MultiAgentPPOConfig(generation_backend="echo")
```

A backend that returns the sampling engine's log-probabilities (`sampling_logprobs = True`, as vLLM's) gets the
trainers' importance-sampling correction when the config's `vllm_importance_sampling_correction` is on; the
trainers ask the rows the backend returned, never the backend's name.

It lives apart from `base` (the interface every backend subclasses) so that no backend module and the interface
import each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import GenerationBackend
from .registry import backend_factory, register_generation_backend
from .settings import GenerationSettings
from .transformers_backend import TransformersBackend

if TYPE_CHECKING:
    from ..policies import AgentTeam


def build_generation_backend(settings: GenerationSettings | Any, team: AgentTeam) -> GenerationBackend:
    """The backend that `settings.generation_backend` names, built for `team` by its registered factory.

    Args:
        settings: The [`GenerationSettings`] (a trainer builds them once from its config), or a config holding the
            same fields (read with `GenerationSettings.of`).
        team: The [`AgentTeam`] the backend samples for.
    """
    if not isinstance(settings, GenerationSettings):
        settings = GenerationSettings.of(settings)
    backend = backend_factory(settings.generation_backend)(settings, team)
    # whether the engine returns its log-probabilities, for the importance-sampling correction
    backend.sampling_logprobs = bool(backend.sampling_logprobs and settings.vllm_importance_sampling_correction)
    return backend


def _transformers(settings: GenerationSettings, team: AgentTeam) -> GenerationBackend:
    return TransformersBackend()


def _compiled(settings: GenerationSettings, team: AgentTeam) -> GenerationBackend:
    from .compiled import CompiledBackend

    return CompiledBackend(team, sync_every=settings.compiled_sync_every)


def _vllm(settings: GenerationSettings, team: AgentTeam) -> GenerationBackend:
    if settings.vllm_mode == "server":
        from .vllm_server import VLLMServerBackend

        return VLLMServerBackend(team, settings.server_url(), timeout=settings.vllm_server_timeout,
                                 logprobs_mode=settings.vllm_logprobs_mode,
                                 sampling_logprobs=settings.vllm_importance_sampling_correction)
    from .vllm import VLLMBackend

    return VLLMBackend(
        team,
        gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
        kv_cache_memory_bytes=settings.vllm_kv_cache_memory_bytes,
        max_model_len=settings.vllm_max_model_length,
        model_impl=settings.vllm_model_impl,
        seed=settings.seed,
        logprobs_mode=settings.vllm_logprobs_mode,
    )


for _name, _factory in (("transformers", _transformers), ("compiled", _compiled), ("vllm", _vllm)):
    register_generation_backend(_name, _factory)
