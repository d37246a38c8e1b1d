"""The name transformers gives the key/value cache: `cache` from 5.2x on, `past_key_values` before.

transformers renamed the forward and `generate` keyword `past_key_values` (and the outputs' attribute) to `cache`;
the old name still works but warns on every run (a `FutureWarning` and a logged deprecation). trl-marl supports
both sides of the rename, so it asks the installed version which name is current.

[`cache_unsupported`] says why a model cannot run from a KV cache that trl-marl builds and shares (the generation's
shared prefill, `team.generation.prefill`; the training's shared prompt forward, `team.shared_prompt`).
"""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def cache_kwarg() -> str:
    """`"cache"` when the installed transformers uses the new name, else `"past_key_values"`."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in getattr(CausalLMOutputWithPast, "__dataclass_fields__", {}) else "past_key_values"


def output_cache(outputs: Any) -> Any:
    """The key/value cache of a model's forward outputs (None if the model returned none)."""
    return getattr(outputs, cache_kwarg(), None)


def cache_unsupported(model: Any) -> str | None:
    """Why `model` (a causal LM, or a PEFT model wrapping one) cannot run from a shared `DynamicCache` now (None: it
    can): an encoder-decoder model, a model that does not use a `DynamicCache`, PEFT prompt learning (virtual tokens
    go in front of the cache), activation checkpointing in train mode (transformers' checkpointed layers drop the
    cache)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base.config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    supports_dynamic = getattr(type(base), "_supports_default_dynamic_cache", None)
    if supports_dynamic is None or not supports_dynamic():
        return f"{type(base).__name__} does not run with a DynamicCache"
    peft_config = getattr(model, "active_peft_config", None)
    if peft_config is not None and getattr(peft_config, "is_prompt_learning", False):
        return "PEFT prompt learning"
    if model.training and any(getattr(m, "gradient_checkpointing", False) for m in base.modules()):
        return "activation checkpointing in train mode"
    return None
