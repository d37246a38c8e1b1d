"""Generation backends of an [`AgentTeam`]: what samples the agents' completions.

`"transformers"` (the default) is the team's own decoding (`AgentTeam.generate`: lean or `generate`, mixed-adapter
batches, shared prefills) and needs no backend object. `"compiled"` is `compiled.CompiledBackend`: the team's own
batches, decoded on a static KV cache with the one-token forward compiled (CUDA graphs on a GPU). `"vllm"` is
`vllm.VLLMBackend` (colocate: one in-process vLLM engine for the whole team, or one per distinct base model of a
`models` team, each agent's adapter a `LoRARequest`) or `vllm_server.VLLMServerBackend` (server: a running vLLM
server, adapters loaded over HTTP). The rollout engine never knows which one runs: it calls `AgentTeam.generate`,
and the team hands the tokenized rows to its backend. A trainer builds the backend from typed
[`GenerationSettings`] (`settings`), made once from its config.
"""

from .base import GENERATION_BACKENDS, EngineBackend, Generation, GenerationBackend, check_generation_backend
from .build import build_generation_backend
from .settings import GenerationSettings
from .transformers_backend import TransformersBackend

__all__ = [
    "GENERATION_BACKENDS",
    "EngineBackend",
    "Generation",
    "GenerationBackend",
    "GenerationSettings",
    "TransformersBackend",
    "build_generation_backend",
    "check_generation_backend",
]
