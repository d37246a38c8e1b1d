"""Generation backends of an [`AgentTeam`]: what samples the agents' completions, behind one interface.

Every backend is a [`GenerationBackend`] whose `generate` returns a [`Generation`] (`base`). `"transformers"` (the
default) is [`TransformersBackend`] (`transformers_backend`): the team's own decoding (lean loop or `generate`,
mixed-adapter batches, shared prefills, continuous batching). `"compiled"` is `compiled.CompiledBackend`: the same
batches, decoded on a static KV cache with the one-token forward compiled (CUDA graphs on a GPU). `"vllm"` is
`vllm.VLLMBackend` (colocate: one in-process vLLM engine for the whole team, or one per distinct base model of a
`models` team, each agent's adapter a `LoRARequest`) or `vllm_server.VLLMServerBackend` (server: a running vLLM
server, adapters loaded over HTTP), both [`EngineBackend`]s. The rollout engine never knows which one runs: it calls
`AgentTeam.generate`, and the team hands the tokenized rows to `team.generation_backend` (never None) and returns
its `Generation`. A trainer builds the backend from typed [`GenerationSettings`] (`settings`), made once from its
config, through the registry of backend names (`registry`: [`register_generation_backend`] adds a user's
backend; `build` registers the built-in ones).
"""

from .base import EngineBackend, Generation, GenerationBackend, check_generation_backend
from .build import build_generation_backend
from .registry import BackendFactory, generation_backend_names, register_generation_backend
from .settings import COMPILED_SYNC_EVERY, GenerationSettings, compiled_sync_every_field
from .transformers_backend import TransformersBackend

__all__ = [
    "COMPILED_SYNC_EVERY",
    "BackendFactory",
    "EngineBackend",
    "Generation",
    "GenerationBackend",
    "GenerationSettings",
    "TransformersBackend",
    "build_generation_backend",
    "check_generation_backend",
    "compiled_sync_every_field",
    "generation_backend_names",
    "register_generation_backend",
]
