"""`torch.compile` for a team's training forwards (what `TrainingArguments.torch_compile` turns on).

transformers' `Trainer` hands `torch_compile` to accelerate, which compiles the whole module it prepares. In a
trl-marl trainer that module is the `AgentTeam`, whose forward loops over agents, switches adapters and slices
batches in Python: compiled whole, it recompiles at every new completion length (tens of seconds each on a CPU) and
runs no faster. A trl-marl trainer therefore keeps accelerate from compiling the team and compiles only the causal
LM call of the team's log-probability forwards (the one model call of `AgentTeam.token_logps` and of PPO's
`sequence_logits` and `response_logits`, `team.forward`): one compiled function with dynamic shapes, so that a
new sequence length or batch size reuses the same graph, and models of the same architecture share it (their weights
are inputs of the graph).

What still compiles a graph of its own, once: each LoRA adapter (PEFT reads the active adapter's name), the disabled
adapter of a reference forward, and each grad mode (a training forward, a `no_grad` or an `inference_mode` one).
`CompiledForward` raises dynamo's recompile limit so that a team's graphs fit (`graphs_needed`).

Generation stays eager: its KV cache grows by one token per forward.

A compiler failure never stops training: when tracing or compiling fails (any `torch._dynamo` error, e.g. a C++
compiler error in inductor's generated code), `CompiledForward` warns once and runs every later forward eager
(`failure` says why). The forward that hit it is run again eager: the forwards have no side effects, and an error
of the model or its inputs then surfaces as the eager forward raises it.

Example:

```python
>>> forward = CompiledForward(backend="inductor", num_agents=2)
>>> logits = forward(model, input_ids=ids, attention_mask=mask).logits  # same values as model(...)
```
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["CompiledForward", "call_model", "graphs_needed"]

GRAD_MODES = 3  # a forward with gradients, under `torch.no_grad`, under `torch.inference_mode`


def call_model(model: nn.Module, **inputs: Any) -> Any:
    """`model(**inputs)`: the eager call, and the function that `CompiledForward` compiles."""
    return model(**inputs)


def graphs_needed(num_agents: int) -> int:
    """How many graphs a team's forwards can compile: every agent's policy and a reference, in every grad mode."""
    return GRAD_MODES * (num_agents + 1)


class CompiledForward:
    """`model(**inputs)` through `torch.compile(..., dynamic=True)`; the same values as the eager call.

    Each instance compiles its own copy of `call_model` (a code object of its own): dynamo keeps its graphs, and
    counts recompiles, per code object, so two trainers in one process never share or evict each other's graphs.

    Args:
        backend: `torch.compile`'s backend (`TrainingArguments.torch_compile_backend`; `None` means "inductor"), or
            a backend callable.
        mode: `torch.compile`'s mode (`TrainingArguments.torch_compile_mode`), e.g. "max-autotune"; `None` for the
            default.
        num_agents: the team's members; dynamo's recompile limit is raised to `graphs_needed(num_agents)` when it is
            lower (a process-wide setting of `torch._dynamo.config`), so that no agent falls back to eager.
        on_failure: called with the reason when compiling fails, before the failed forward runs again eager (the
            team goes back to its eager settings there).
    """

    def __init__(self, backend: str | Callable[..., Any] | None = None, mode: str | None = None,
                 num_agents: int = 1, on_failure: Callable[[str], None] | None = None) -> None:
        import torch._dynamo.config as dynamo_config
        from torch._dynamo.exc import TorchDynamoException

        self.backend = backend or "inductor"
        self.mode = mode
        needed = graphs_needed(num_agents)
        if dynamo_config.recompile_limit < needed:
            dynamo_config.recompile_limit = needed
        code = call_model.__code__.replace(co_name=f"call_model_{id(self):x}")
        own_copy = types.FunctionType(code, call_model.__globals__, code.co_name)
        self._compiled = torch.compile(own_copy, backend=self.backend, mode=mode, dynamic=True)
        self.failure: str | None = None  # why compiling failed; every forward then runs eager
        self.on_failure = on_failure
        self._compiler_errors = TorchDynamoException  # (looked up once, not on every forward)

    def __call__(self, model: nn.Module, **inputs: Any) -> Any:
        if self.failure is None:
            try:
                return self._compiled(model, **inputs)
            except self._compiler_errors as exc:
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]  # backend; its error
                self.failure = f"{type(exc).__name__}: {' '.join(lines)}"
                warnings.warn(
                    f"torch.compile failed ({self.failure}); the team's log-probability forwards run eager from now "
                    "on, so training goes on at eager speed. To stop trying, set `torch_compile=False`; another "
                    "`torch_compile_backend` (e.g. 'aot_eager') may compile.",
                    RuntimeWarning, stacklevel=2,
                )
                if self.on_failure is not None:
                    self.on_failure(self.failure)
        return call_model(model, **inputs)

    def __repr__(self) -> str:
        return f"CompiledForward(backend={self.backend!r}, mode={self.mode!r})"
