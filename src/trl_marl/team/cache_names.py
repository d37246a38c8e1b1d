"""The name transformers gives the key/value cache: `cache` from 5.2x on, `past_key_values` before.

transformers renamed the forward and `generate` keyword `past_key_values` (and the outputs' attribute) to `cache`;
the old name still works but warns on every run (a `FutureWarning` and a logged deprecation). trl-marl supports
both sides of the rename, so it asks the installed version which name is current.
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
