"""Shared prompt forward: MAGRPO's log-probability forward runs each distinct prompt once per batch.

The G completions of a group follow one prompt. The usual layout ([`~trl_marl.team.forward.completion_window`]) runs
prompt + completion for every row, so a prompt of P tokens runs G times. On a causal model the prompt's hidden
states, and its keys and values in every layer, do not depend on what follows it; rows with the same prompt tokens
(padding included) under the same weights get the same ones. So here each distinct prompt runs once, with
gradients (a LoRA adapter acts on the prompt's keys and values, which the completion attends to), its KV cache is
gathered to the batch's rows (the gather's backward sums the rows' gradients into the one prompt forward), and the
completions run after it, C - 1 tokens a row. The first completion token is scored from the prompt's last position.

A forward then takes `U * P + B * (C - 1)` tokens instead of `B * (P + C - 1)` (U distinct prompts, B rows): for G = 8
samples of 64 tokens after a 200-token prompt, 3.2 times fewer, and the attention over the prompt shrinks alike. The
log-probabilities and their gradients are those of the usual layout up to floating-point reordering (the attention
runs over a cache instead of one sequence): `tests/team/test_shared_prompt_forward.py` compares them.

Positions follow the usual layout (neither passes position ids: a row's positions count from the start of its left
padding, and rotary embeddings see the same relative positions either way). Where sharing cannot give the same
computation, [`shared_prompt_unsupported`] says why and the usual layout runs: dropout (its masks would be drawn
over other shapes), activation checkpointing in train mode (transformers' layers drop the cache), a compiled forward,
PEFT prompt learning, encoder-decoder models, a model without a dynamic KV cache. A batch in which no prompt repeats
runs the usual layout too.

Turn it on with `MAGRPOConfig(share_prompt_forward=True)` or `team.configure(share_prompt_forward=True)`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

from .batch import AgentBatch, group_identical_rows
from .cache_names import cache_kwarg, cache_unsupported, output_cache
from .compile import call_model


def shared_prompt_unsupported(model: nn.Module, forward_call: Any, dropout: bool) -> str | None:
    """Why `model`'s log-probability forward cannot share its prompts now (None: it can).

    Args:
        model: The causal LM (or PEFT model) the forward runs.
        forward_call: The team's model call (`LogProbForwards.forward_call`): sharing runs with the eager one only.
        dropout: Whether the forward draws dropout masks (`team.forward.dropout_active`).
    """
    if dropout:
        return "dropout is active (the masks would be drawn over other shapes than the usual layout's)"
    if forward_call is not call_model:
        return "the forwards are compiled (`torch_compile`)"
    return cache_unsupported(model)


def shared_prompt_output(model: nn.Module, batch: AgentBatch, backbone: nn.Module | None,
                         logits_to_keep: bool = True) -> torch.Tensor | None:
    """The outputs at the positions that score `batch`'s completion tokens, with each distinct prompt run once: the
    backbone's last hidden states (`(B, C, hidden)`, for the chunked LM head) when `backbone` is given, else the
    logits (`(B, C, vocab)`). None when no two rows share a prompt, or the model filled no cache: run the usual layout.

    Args:
        model: The causal LM (or PEFT model), with the adapter of `batch`'s agent active.
        batch: One agent's rows: left-padded prompts, right-padded completions.
        backbone: The model's backbone (`team.head`), or None to call `model` for logits.
        logits_to_keep: Whether `model` takes `logits_to_keep` (`team.forward.takes_logits_to_keep`): its prompt
            forward then computes the last position's logits alone.
    """
    prompt_ids, prompt_mask = batch.prompt_ids, batch.prompt_mask
    rows, width = batch.completion_ids.shape
    if prompt_ids.size(1) == 0 or width == 0:
        return None
    groups = group_identical_rows(torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1))
    if groups.num_groups == rows:
        return None
    first, to_rows = groups.first_rows.to(prompt_ids.device), groups.row_to_group.to(prompt_ids.device)
    target = backbone if backbone is not None else model
    wrapped: Any = model  # a PEFT model or the causal LM itself
    base = wrapped.get_base_model() if hasattr(wrapped, "get_base_model") else wrapped
    config = base.config.get_text_config(decoder=True)
    head_only = {"logits_to_keep": 1} if backbone is None and logits_to_keep else {}
    out = call_model(target, input_ids=prompt_ids[first], attention_mask=prompt_mask[first], use_cache=True,
                     **head_only, **{cache_kwarg(): DynamicCache(config=config)})
    cache = output_cache(out)
    if cache is None or cache.get_seq_length() != prompt_ids.size(1):
        return None
    last = (out.last_hidden_state if backbone is not None else out.logits)[:, -1:]
    first_token = last[to_rows]  # scores completion token 0 of every row
    if width == 1:
        return first_token
    cache.batch_select_indices(to_rows)  # an index (a gather) of every layer's keys and values: differentiable
    mask = torch.cat([prompt_mask, batch.completion_mask[:, :-1]], dim=1)
    rest = call_model(target, input_ids=batch.completion_ids[:, :-1], attention_mask=mask, use_cache=True,
                      **{cache_kwarg(): cache})
    return torch.cat([first_token, rest.last_hidden_state if backbone is not None else rest.logits], dim=1)
