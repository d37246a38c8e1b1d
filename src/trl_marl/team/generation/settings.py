"""`GenerationSettings`: what a generation backend is built from, typed, with each default written once.

A trainer builds it once from its config (`GenerationSettings.of(args)`, in the trainer's constructor) and hands it
to `build_generation_backend`; nothing below the trainers reads a trainer config for these settings. The field names
are the config fields' names (TRL's `GRPOConfig` and trl-marl's configs), so `of` maps one onto the other; a config
without a field (e.g. `MultiAgentPPOConfig` has no `vllm_model_impl`) gets the default written here.

Example:

```python
>>> from trl_marl.team.generation.settings import GenerationSettings
>>> settings = GenerationSettings(generation_backend="vllm", vllm_mode="server", vllm_server_port=8001)
>>> settings.server_url()
'http://127.0.0.1:8001'
>>> GenerationSettings(generation_backend="compiled").vllm_gpu_memory_utilization
0.3
```
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .registry import generation_backend_names

VLLM_MODES = ("colocate", "server")
# vLLM's `logprobs_mode` values the backends take: after the repetition penalty, temperature and truncation (the
# distribution the tokens were drawn from), or the model's own log-softmax before any of them (at temperature 1 only)
LOGPROBS_MODES = ("processed_logprobs", "raw_logprobs")


def check_logprobs_mode(mode: str) -> str:
    """`mode` if the backends take it as vLLM's `logprobs_mode` ([`LOGPROBS_MODES`]), else a clear error."""
    if mode not in LOGPROBS_MODES:
        raise ValueError(
            f"`vllm_logprobs_mode` must be one of {LOGPROBS_MODES}, got {mode!r}: 'processed_logprobs' (after "
            "temperature, penalties and truncation) or 'raw_logprobs' (the model's untruncated log-softmax, at "
            "temperature 1 only)."
        )
    return mode


COMPILED_SYNC_EVERY = 8
"""Tokens between two host checks of the compiled decode loop (`compiled_sync_every`): from a cost model (a sync
per token against up to this many minus one wasted steps), not yet measured on a GPU."""


def compiled_sync_every_field() -> Any:
    """`compiled_sync_every` as both trainers' configs declare it (default [`COMPILED_SYNC_EVERY`])."""
    return field(
        default=COMPILED_SYNC_EVERY,
        metadata={
            "help": "With generation_backend='compiled': every this many tokens the host checks whether every row "
            "has ended (the decode loop's only host sync); up to this many minus one steps run past the end and are "
            f"cut, so the output is the same. {COMPILED_SYNC_EVERY} by default, from a cost model (a sync per token "
            "against wasted steps), not yet measured on a GPU."
        },
    )


@dataclass(frozen=True)
class GenerationSettings:
    """The settings of a team's generation backend (the config fields of the same names describe each one).

    Checked when built: a value outside its choices, or a vLLM feature the backend does not implement, raises with the
    field's name and the value that works.
    """

    generation_backend: str = "transformers"
    vllm_mode: str = "colocate"
    vllm_server_base_url: str | None = None
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    vllm_server_timeout: float = 240.0
    vllm_gpu_memory_utilization: float = 0.3
    vllm_kv_cache_memory_bytes: int | None = None
    vllm_max_model_length: int | None = None
    vllm_model_impl: str = "vllm"
    vllm_logprobs_mode: str = "processed_logprobs"
    vllm_importance_sampling_correction: bool = True
    vllm_enable_sleep_mode: bool = False
    vllm_tensor_parallel_size: int = 1
    vllm_structured_outputs_regex: str | None = None
    compiled_sync_every: int = COMPILED_SYNC_EVERY
    seed: int = 0

    @classmethod
    def of(cls, config: Any) -> GenerationSettings:
        """The settings that `config` (a trainer config) holds, field by field; a field it lacks keeps its default."""
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls) if hasattr(config, f.name)})

    def __post_init__(self) -> None:
        if self.generation_backend not in generation_backend_names():
            raise ValueError(f"`generation_backend` must be one of {generation_backend_names()} (a backend of your "
                             "own: `trl_marl.team.generation.register_generation_backend`), got "
                             f"{self.generation_backend!r}.")
        every = self.compiled_sync_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"`compiled_sync_every` must be a positive number of tokens, got {every!r} (e.g. 8).")
        if self.generation_backend != "vllm":
            return
        if self.vllm_mode not in VLLM_MODES:
            raise NotImplementedError(
                f"`vllm_mode={self.vllm_mode!r}` is not implemented: the vLLM backend runs 'colocate' (one in-process "
                "`vllm.LLM` serving every agent's adapter) or 'server' (a running vLLM server, see `trl-marl "
                "vllm-serve`)."
            )
        if self.vllm_mode == "server" and not self.vllm_server_timeout > 0:
            raise ValueError(f"`vllm_server_timeout` must be > 0 seconds, got {self.vllm_server_timeout}.")
        if self.vllm_enable_sleep_mode:
            raise NotImplementedError(
                "`vllm_enable_sleep_mode=True` is not implemented yet: the colocated engine keeps its memory during "
                "training. Set `vllm_enable_sleep_mode=False`."
            )
        if self.vllm_tensor_parallel_size != 1:
            raise NotImplementedError(
                f"`vllm_tensor_parallel_size={self.vllm_tensor_parallel_size}` is not implemented: the colocated "
                "engine runs on one device. Set `vllm_tensor_parallel_size=1`."
            )
        if self.vllm_structured_outputs_regex is not None:
            raise NotImplementedError(
                "`vllm_structured_outputs_regex` is not implemented by the vLLM backend: leave it None."
            )
        kv_bytes = self.vllm_kv_cache_memory_bytes
        if kv_bytes is not None and (not isinstance(kv_bytes, int) or kv_bytes <= 0):
            raise ValueError(
                f"`vllm_kv_cache_memory_bytes` must be a positive number of bytes or None, got {kv_bytes!r} (e.g. "
                "`256 << 20` for 256 MiB)."
            )
        check_logprobs_mode(self.vllm_logprobs_mode)
        if not 0.0 < self.vllm_gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"`vllm_gpu_memory_utilization` must be in (0, 1], got {self.vllm_gpu_memory_utilization}."
            )

    def server_url(self) -> str:
        """The vLLM server's address: `vllm_server_base_url`, else `http://<host>:<port>` (a wildcard host is reached
        on the loopback address)."""
        if self.vllm_server_base_url is not None:
            return self.vllm_server_base_url
        host = "127.0.0.1" if self.vllm_server_host in ("0.0.0.0", "") else self.vllm_server_host
        return f"http://{host}:{self.vllm_server_port}"
