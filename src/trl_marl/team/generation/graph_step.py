"""The whole decode step in one compiled region: the forward, the logits processors, the draw and the bookkeeping.

The compiled backend's first loop (`CompiledDecoder` before this module) compiled only the one-token forward. Every
token then ran, outside the graph and so one launch (on a GPU) or one host round trip at a time: a float32 copy of the
logits, transformers' logits processors one by one, softmax and `multinomial`, a `torch.cat` of the whole sequence
so far, `torch.isin` for the EOS ids, a `torch.cat` of the padding rows' next input, and `unfinished.max() == 0`, a
host sync per token. Here one function, [`forward_and_sample`], does all of it on preallocated buffers
([`DecodeBuffers`]) that it updates in place:

1. `positions += 1`; the forward of `step_ids` (the previous tokens) into the static KV cache;
2. the last logits in float32 through the processors of `generate`'s order that can run in the graph
   ([`IN_GRAPH_PROCESSORS`]: repetition penalty, temperature, top-k, top-p, min-p);
3. one `torch.multinomial` draw per row from the softmax (or the argmax when not sampling): the same operator as
   `generate`'s, so the same random numbers give the same tokens;
4. a row that has ended gets the pad token; `unfinished` drops rows that drew an EOS id; `done_at` records the first
   step at which every real row had ended;
5. the tokens are written into column `index` of `tokens` and become the next `step_ids`; `index += 1`.

The loop around it ([`decode_in_graph`]) only calls the function: it reads `done_at` on the host once every
`sync_every` tokens (the one host sync of the loop) and once at the end, and cuts the output at `done_at`, so the
tokens are exactly those of a loop that stops as soon as every row has ended. At most `sync_every - 1` steps run past
the end (their tokens are the pad token and are dropped).

The repetition penalty is applied from a `[rows, vocab]` mask of the tokens each row has seen (its prompt without the
left padding, then each drawn token), the same values as transformers' `RepetitionPenaltyLogitsProcessor` computes
from the sequence so far (tests/team/test_graph_step.py compares them), without reading a growing sequence.

What is not in [`IN_GRAPH_PROCESSORS`] (no-repeat n-grams, bad words, minimum lengths, suppressed tokens, typical-p,
epsilon and eta cutoffs, ...) reads the sequence's length or content in ways a fixed-shape buffer does not give:
[`graph_sampling_unsupported`] names it, and the backend keeps the draw outside the graph for that call.

Random numbers: the batch is padded to a bucket (see `team.generation.compiled`) and every row, the padding rows too,
draws in the graph, and steps after the end draw too. So when the batch fills its bucket exactly the tokens are those
of the eager loop under the same random state; otherwise each real row's tokens come from the same distribution (the
processed scores are the eager loop's, checked value for value) but from other random numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.generation import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

__all__ = [
    "IN_GRAPH_PROCESSORS",
    "DecodeBuffers",
    "decode_in_graph",
    "forward_and_sample",
    "graph_sampling_unsupported",
    "processed_scores",
    "sample_into",
]

IN_GRAPH_PROCESSORS = (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper,
                       TopPLogitsWarper, MinPLogitsWarper)
"""The logits processors whose values the graph computes: the repetition penalty from the seen-token mask, the rest
by calling transformers' own warpers (they read only the scores)."""


def graph_sampling_unsupported(processors: Sequence[Any]) -> str | None:
    """Why these processors cannot all run inside the compiled step (None: they can)."""
    for processor in processors:
        if not isinstance(processor, IN_GRAPH_PROCESSORS):
            return f"{type(processor).__name__} reads the sequence so far"
    return None


def penalize(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """CTRL's repetition penalty (Keskar et al., 2019) as transformers applies it: the score s of every token the row
    has seen becomes s * penalty when s < 0, else s / penalty; other scores are unchanged."""
    return torch.where(seen, torch.where(scores < 0, scores * penalty, scores / penalty), scores)


def processed_scores(scores: torch.Tensor, seen: torch.Tensor | None, processors: Sequence[Any]) -> torch.Tensor:
    """The scores after `processors` (all in [`IN_GRAPH_PROCESSORS`], in `generate`'s order); `seen` is the
    `[rows, vocab]` mask of the tokens each row has seen (needed only with a repetition penalty)."""
    for processor in processors:
        if isinstance(processor, RepetitionPenaltyLogitsProcessor):
            if seen is None:
                raise ValueError("A repetition penalty needs the seen-token mask (`DecodeBuffers.seen`).")
            scores = penalize(scores, seen, processor.penalty)
        else:
            scores = processor(None, scores)  # the warpers read only the scores
    return scores


class DecodeBuffers:
    """The decode loop's state in preallocated tensors, updated in place by [`sample_into`] (one set per model, batch
    bucket and cache length, kept and reset between calls: their addresses stay fixed, as CUDA graphs need).

    Attributes:
        step_ids (`[B, 1]`): The tokens the next forward reads (the last drawn).
        positions (`[B, 1]`): Their positions (incremented before each forward).
        mask (`[B, L]`): The attention mask over the whole static cache.
        tokens (`[B, L]`): The generated tokens; column i holds token i.
        unfinished (`[B]`): 1 for rows that have not drawn an EOS id yet.
        real (`[B]`): True for the batch's rows, False for the bucket's padding rows.
        index (`[1]`): How many tokens were written.
        done_at (`[1]`): The index of the token at which every real row had ended, -1 before.
        seen (`[B, V]` or None): Which tokens each row has seen (with a repetition penalty).
        eos (`[E]` or None), pad (`[]` or None): The EOS ids and the token of ended rows.
    """

    def __init__(self, batch: int, length: int, device: torch.device) -> None:
        self.step_ids = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.mask = torch.ones(batch, length, dtype=torch.long, device=device)
        self.tokens = torch.zeros(batch, length, dtype=torch.long, device=device)
        self.unfinished = torch.ones(batch, dtype=torch.long, device=device)
        self.real = torch.ones(batch, dtype=torch.bool, device=device)
        self.index = torch.zeros(1, dtype=torch.long, device=device)
        self.done_at = torch.full((1,), -1, dtype=torch.long, device=device)
        self.seen: torch.Tensor | None = None
        self.eos: torch.Tensor | None = None
        self.pad: torch.Tensor | None = None
        for tensor in (self.step_ids, self.positions, self.mask, self.tokens, self.unfinished, self.real, self.index,
                       self.done_at):
            _mark_static(tensor)  # (`seen`, `eos` and `pad` are marked when `reset` makes them)

    def reset(self, rows: int, prompt_ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
              eos: torch.Tensor | None, pad: torch.Tensor | None, vocab_size: int | None) -> None:
        """Start a call: the bucket's padded prompts `prompt_ids` `[B, P]` (their left padding 0 in `mask`), their last
        positions, the full-cache mask, the first `rows` rows real; `vocab_size` allocates the seen-token mask (None:
        no repetition penalty)."""
        self.positions.copy_(positions[:, -1:])
        self.mask.copy_(mask)
        self.tokens.zero_()
        self.unfinished.fill_(1)
        self.real.copy_(torch.arange(self.real.numel(), device=self.real.device) < rows)
        self.index.zero_()
        self.done_at.fill_(-1)
        self.eos = _kept(self.eos, eos)
        self.pad = _kept(self.pad, pad)
        if vocab_size is None:
            self.seen = None
            return
        if self.seen is None or self.seen.size(1) != vocab_size:
            self.seen = torch.zeros(self.tokens.size(0), vocab_size, dtype=torch.bool, device=self.tokens.device)
            _mark_static(self.seen)
        # the prompt's tokens, its left padding left out (as `prompt_ignore_length` does in the eager processor)
        prompt_length = prompt_ids.size(1)
        padding = mask[:, :prompt_length] == 0
        ids = prompt_ids.masked_fill(padding, vocab_size)
        seen = torch.zeros(self.seen.size(0), vocab_size + 1, dtype=torch.bool, device=self.seen.device)
        seen.scatter_(1, ids, True)
        self.seen.copy_(seen[:, :vocab_size])


def _kept(buffer: torch.Tensor | None, value: torch.Tensor | None) -> torch.Tensor | None:
    """`value` in `buffer` when the shapes agree (the address stays), else a new static tensor."""
    if value is None:
        return None
    if buffer is not None and buffer.shape == value.shape and buffer.device == value.device:
        buffer.copy_(value)
        return buffer
    kept = value.clone()
    _mark_static(kept)
    return kept


def _mark_static(tensor: torch.Tensor) -> None:
    """Tell dynamo (and its CUDA graphs) that this tensor keeps its address across calls."""
    mark = getattr(torch._dynamo, "mark_static_address", None)
    if mark is not None:
        mark(tensor)


def sample_into(logits: torch.Tensor, buffers: DecodeBuffers, processors: Sequence[Any], do_sample: bool) -> None:
    """Steps 2-5 of the module docstring: draw each row's next token from `logits` `[B, V]` and record it."""
    scores = logits.to(dtype=torch.float32, copy=True)
    scores = processed_scores(scores, buffers.seen, processors)
    if do_sample:
        tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    else:
        tokens = torch.argmax(scores, dim=-1)
    if buffers.eos is not None and buffers.pad is not None:
        tokens = tokens * buffers.unfinished + buffers.pad * (1 - buffers.unfinished)
        buffers.unfinished.mul_(~torch.isin(tokens, buffers.eos))
        ended = (buffers.unfinished * buffers.real).sum() == 0
        buffers.done_at.copy_(torch.where((buffers.done_at < 0) & ended, buffers.index, buffers.done_at))
    buffers.tokens.index_copy_(1, buffers.index, tokens[:, None])
    if buffers.seen is not None:
        buffers.seen.scatter_(1, tokens[:, None], True)
    buffers.step_ids.copy_(tokens[:, None])
    buffers.index.add_(1)


def forward_and_sample(step: Any, model: torch.nn.Module, cache: Any, cache_argument: str, buffers: DecodeBuffers,
                       processors: Sequence[Any], do_sample: bool) -> None:
    """One whole decode step (the module docstring's 1-5): the function the backend compiles. `step` is the
    one-token forward (`team.generation.compiled.decode_step`)."""
    buffers.positions.add_(1)
    logits = step(model, buffers.step_ids, buffers.positions, buffers.mask, cache, cache_argument)
    sample_into(logits, buffers, processors, do_sample)


def decode_in_graph(run_step: Any, first_logits: torch.Tensor, buffers: DecodeBuffers, processors: Sequence[Any],
                    do_sample: bool, max_new_tokens: int, sync_every: int,
                    before_step: Any = None) -> tuple[int, int, int]:
    """The loop: the first token from the prompt's `first_logits` (eager), then `run_step()` (the compiled
    [`forward_and_sample`]) per token, with a host check of `done_at` every `sync_every` tokens.

    Returns:
        How many tokens the output keeps (up to and including the one at which every real row had ended), how many
        compiled steps ran, and how many times the host read `done_at`.
    """
    sample_into(first_logits, buffers, processors, do_sample)
    tracks_end = buffers.eos is not None and buffers.pad is not None
    steps = checks = 0
    for index in range(1, max_new_tokens):
        if tracks_end and index % sync_every == 0:
            checks += 1
            if int(buffers.done_at.item()) >= 0:
                break
        if before_step is not None:
            before_step()
        run_step()
        steps += 1
    done_at = int(buffers.done_at.item()) if tracks_end else -1
    checks += int(tracks_end)
    return (done_at + 1 if done_at >= 0 else max_new_tokens), steps, checks
