"""Shared prompt prefill: one forward over each distinct prompt, its KV cache copied to every row that repeats it.

GRPO-style training samples G completions of every prompt, so a generation batch holds each prompt G times, and a
plain `generate` call runs the prompt's forward (the *prefill*) G times over the same tokens. Here the distinct rows
(same token ids, same left padding, same LoRA adapter) run the prefill once: the prompt minus its last token goes
through the model, the resulting KV cache is expanded to every row (`Cache.batch_select_indices`), and `generate`
gets the full `input_ids` and `attention_mask` with that cache, so it only runs the last prompt token and then decodes
as usual. Sampling (temperature, top-k/top-p/min-p, repetition penalty: they all act on the logits and the full
`input_ids`), EOS stopping, `max_new_tokens`, attention masks and position ids are those of the plain call; the
random draws are the same ones in the same order. The logits agree up to floating-point reordering (the attention
of the last prompt token runs as one query against the cache instead of inside the prompt's forward), so greedy
decoding and seeded samples are the same in practice but not guaranteed bit for bit.

The price is one more forward call (the last prompt token runs as its own step): it pays off when the prefill saved,
(B - U) x (L - 1) token positions for B rows of U distinct prompts of width L, outweighs a forward's fixed cost. For
an 11k-parameter toy model with 6-token prompts (the demo's MAGRPO run) it does not: generation took 6% longer
there, and half as long for 256-token prompts on a 2.6M-parameter model (benchmarks/speed/bench_prefill.py).

What can be shared, and what cannot: rows share a prefill only when the same weights produce it. The G samples of a
node share it; so do two agents that see the same prompt through the same weights (`shared` mode, or one adapter).
Two agents with *different* LoRA adapters over one base model (`adapters` mode) see the same prompt through
different weights: their keys and values differ in every layer from the first adapted module on (LoRA changes that
projection, and through it the hidden states of every later layer), so their prefills are not shared (sharing the
layers below the first adapted module would be exact but is not done), and in `models` mode the models differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from transformers import DynamicCache, GenerationConfig

from ..batch import group_identical_rows
from ..cache_names import cache_kwarg, cache_unsupported, output_cache
from ..forward import takes_logits_to_keep
from ..mixed_adapters import sliced_adapter_rows


def _base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def prefill_sharing_unsupported(model: torch.nn.Module, generation_config: GenerationConfig) -> str | None:
    """Why `model.generate` with `generation_config` cannot start from a shared prefill (None: it can).

    A setting left unset (None) in `generation_config` is read from `model.generation_config`, as `generate` does.

    Refused: beam search and several sequences per prompt (`generate` expands the batch itself), a cache other than
    the default `DynamicCache` (`cache_implementation`, or a model that does not use one), `use_cache=False`, prompt
    lookup decoding, encoder-decoder models, a model whose forward takes no `logits_to_keep`, PEFT prompt learning
    (virtual tokens go in front of the cache), and a model in train mode with activation checkpointing (its layers
    drop the cache).
    """
    base = _base_model(model)

    def setting(name: str) -> Any:  # as `generate` resolves it: unset (None) fields come from the model's config
        value = getattr(generation_config, name, None)
        return value if value is not None else getattr(getattr(base, "generation_config", None), name, None)

    if (setting("num_beams") or 1) != 1 or (setting("num_return_sequences") or 1) != 1:
        return "beam search or several sequences per prompt"
    if setting("use_cache") is False:
        return "use_cache=False"
    if setting("cache_implementation") not in (None, "hybrid"):  # `generate` turns "hybrid" into the default cache
        return f"cache_implementation={setting('cache_implementation')!r}"
    if setting("prompt_lookup_num_tokens") is not None:
        return "prompt lookup decoding"
    if not takes_logits_to_keep(base):
        return f"{type(base).__name__}.forward takes no `logits_to_keep`"
    return cache_unsupported(model)


@torch.no_grad()
def shared_prefill_cache(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    generation_config: GenerationConfig,
    adapter_names: Sequence[str | None] | None = None,
) -> DynamicCache | None:
    """The KV cache of every row's prompt minus its last token, computed once per distinct row.

    Pass the returned cache as `past_key_values` to `model.generate(input_ids=input_ids,
    attention_mask=attention_mask, generation_config=generation_config, ...)`, with the same `adapter_names`:
    `generate` then runs only the last prompt token of each row before decoding.

    Args:
        model: A causal LM or a PEFT model wrapping one, in the mode (eval/train) it will generate in.
        input_ids: `(B, L)` left-padded prompt ids.
        attention_mask: `(B, L)` their mask.
        generation_config: The settings `generate` will run with (some rule sharing out, see
            [`prefill_sharing_unsupported`]).
        adapter_names: PEFT's per-row adapter names for a mixed-adapter batch (rows with different adapters never
            share a prefill; each adapter runs on its slice of rows when its rows form one run, see
            `team.mixed_adapters`), or None when every row runs the active adapter.

    Returns:
        The expanded cache, or None when nothing is shared: no two rows are identical, prompts of one token, or a
        setting that rules sharing out. Then generate as usual.

    Example:

    ```python
    ids, mask = pad_left(rows, tokenizer.pad_token_id)
    cache = shared_prefill_cache(model, ids, mask, generation_config)
    extra = {"past_key_values": cache} if cache is not None else {}
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config, **extra)
    ```
    """
    if input_ids.size(1) < 2:
        return None
    groups = group_identical_rows(input_ids, adapter_names)
    if groups.num_groups == input_ids.size(0) or prefill_sharing_unsupported(model, generation_config) is not None:
        return None
    first = groups.first_rows.to(input_ids.device)
    ids, mask = input_ids[first, :-1], attention_mask[first, :-1]
    # `generate`'s position ids for left-padded rows: count the real tokens, padding at 0
    position_ids = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    cache = DynamicCache(config=_base_model(model).config.get_text_config(decoder=True))
    # the distinct rows keep the batch's order, so each adapter's rows stay one run when they were one
    names = None if adapter_names is None else [adapter_names[i] for i in groups.first_rows.tolist()]
    with nullcontext() if names is None else sliced_adapter_rows(model, names):
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=True, logits_to_keep=1,
                    **{cache_kwarg(): cache})
    cache = output_cache(out)
    if cache is None or cache.get_seq_length() != ids.size(1):  # a model that did not fill the cache: do not share
        return None
    cache.batch_select_indices(groups.row_to_group.to(input_ids.device))
    return cache
