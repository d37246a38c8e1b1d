"""`generation_backend="compiled"`: the lean decode loop on a static KV cache, the whole decode step compiled.

The eager lean loop (`team.generation.lean`) grows a `DynamicCache` by one token per forward, so every decode step has
new shapes and nothing can be captured. This backend preallocates a `StaticCache` for the prompt and every new token,
runs the prompt's forward eager into it, and then runs each decode step through `torch.compile`: on a GPU with
`mode="reduce-overhead"` (CUDA graphs: one replay per token instead of hundreds of kernel launches from Python), on a
CPU in the default mode. The compiled step is the whole step (`team.generation.graph_step`): the one-token forward,
transformers' logits processors that can run in a graph (repetition penalty, temperature, top-k, top-p, min-p, in
`generate`'s order), the draw, the EOS bookkeeping and the write into a preallocated output buffer. The host checks
whether every row has ended once every `sync_every` tokens (default 8), not once per token; the output is cut where
the eager loop stops. Settings whose processors read the sequence so far (no-repeat n-grams, bad words, minimum
lengths, ...) compile the forward alone and draw on the host after it, with one logged reason
(`in_graph_sampling=False` does the same for every call). Mixed-adapter rows (an `adapters` team's agents in one
batch) run through the same per-row adapter slicing (`team.mixed_adapters.sliced_adapter_rows`), inside the graph.

Shapes are bucketed so that a training run compiles a few graphs, not one per step:

- the cache length is the prompt length plus `max_new_tokens`, rounded up to a multiple of `length_bucket` (64);
- the batch is padded to [`bucket_batch`] rows (a power of two up to 32, then a multiple of 32) with copies of its
  last row (under the last row's adapter, so each adapter's rows stay one run); in the graph the padding rows draw
  too (their tokens are dropped); when the draw runs on the host their logits are dropped before it;
- the attention mask covers the whole cache from the start (left padding 0, every later slot 1; the causal mask
  hides the slots not written yet), so the decode forward's inputs have one shape per bucket.

One compiled graph per (batch bucket, length bucket, adapter layout) then serves every later call; one `StaticCache`
per (model, batch bucket, length bucket) is kept and reset between calls (its tensors keep their addresses, which
CUDA graphs need).

Tokens: greedy decoding gives the eager loop's tokens. Sampled rows draw with the same operator from the same
processed scores (tests/team/test_graph_step.py compares the scores value for value), so when the batch fills its
bucket the tokens are the eager loop's under the same random state; with padding rows, which draw too, each row's
tokens come from the same distribution through other random numbers, and a call leaves the random state further on
(the graph also draws in the up to `sync_every - 1` steps past the end). With the draw on the host the tokens and the
random stream are the eager loop's (tests/team/test_generation_compiled.py checks both paths). The static cache
attends over the padded length: masked slots add exact zeros, but a kernel may sum in another order, so on real models
in low precision a near-tie can still resolve differently, as between any two attention kernels.

Where the static path cannot stand in, the call runs the eager lean loop (or `model.generate`, where the lean loop
sends it) and a warning says why, once per reason: every setting the lean loop itself sends to `generate` (beam
search, several sequences per prompt, stop strings, ...; see `team.generation.lean`), `AgentTeam.lean_decode=False`,
continuous batching, a cache passed in (a shared prompt prefill: this backend does not make one), a model class that
cannot take a static cache (transformers' `_can_compile_fullgraph`), a model in train mode (the team's backends
decode in eval mode; a subclass's decode may not), mixed-adapter rows that PEFT's slicing does not take, and any
error on the static path (compiling, building the cache: every later call then runs eager too). A compile failure
never stops training: the call is run again eager from the random state it started with (an error of the model itself
is raised again there).

GPU speed is the target: on an NVIDIA H100 (Qwen2.5-0.5B shapes, random weights, bf16, 32 rows of 128 new tokens
per agent) this backend generated 5.08x the transformers backend's tokens/s for one agent (2,582 vs 508), and two
agents' generation took 1.43x one agent's (2.16x with transformers): benchmarks/README.md, `gpu` row, and
`benchmarks/results/gpu_h100_backends_0.5b.json`. On a CPU, compiling a first graph takes tens of seconds and
decoding is not meant to be faster.
"""

from __future__ import annotations

import inspect
import logging
import types
import weakref
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig, StaticCache
from transformers.generation import RepetitionPenaltyLogitsProcessor

from ..mixed_adapters import BASE_ADAPTER, sliced_adapter_rows, sliced_adapter_rows_unsupported
from .graph_step import DecodeBuffers, decode_in_graph, forward_and_sample, graph_sampling_unsupported
from .lean import (
    BehaviourLogps,
    _base_model,
    _is_peft,
    _logits_processors,
    _Plan,
    _plan,
    decode,
    next_token_step,
)
from .settings import COMPILED_SYNC_EVERY
from .transformers_backend import TransformersBackend

if TYPE_CHECKING:
    from ..policies import AgentTeam

__all__ = ["CompiledBackend", "CompiledDecoder", "bucket_batch", "bucket_length"]

logger = logging.getLogger(__name__)

LENGTH_BUCKET = 64
_CACHES_KEPT = 4  # static caches kept per model (one per batch/length bucket in use)
_RECOMPILE_LIMIT = 64  # graphs per decoder: buckets x adapter layouts
SYNC_EVERY = COMPILED_SYNC_EVERY  # tokens between host checks of the rows' end (see `CompiledDecoder`)


def bucket_length(length: int, multiple: int = LENGTH_BUCKET) -> int:
    """`length` rounded up to a multiple of `multiple` (the static cache's length)."""
    return -(-length // multiple) * multiple


def bucket_batch(rows: int) -> int:
    """The batch the decode graph runs: `rows` rounded up to a power of two up to 32, then to a multiple of 32."""
    if rows <= 32:
        return 1 << max(rows - 1, 0).bit_length()
    return bucket_length(rows, 32)


def _cache_argument(model: torch.nn.Module) -> str:
    """The name of the forward's cache argument: `cache` (transformers >= 5.24), else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def decode_step(model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor,
                attention_mask: torch.Tensor, cache: Any, cache_argument: str = "past_key_values") -> torch.Tensor:
    """One forward of the rows' new tokens into the static cache: the last logits `(B, V)` (the compiled function;
    the prompt's forward runs it eager)."""
    outputs = model(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                    logits_to_keep=1, use_cache=True, return_dict=True, **{cache_argument: cache})
    return outputs.logits[:, -1]


class CompiledDecoder:
    """`lean.decode` on a static KV cache with the decode forward compiled (see the module docstring).

    Args:
        compile: False runs the static-cache loop with the eager forward (same tokens; for tests and debugging).
        backend: `torch.compile`'s backend (default "inductor"), or a backend callable.
        mode: `torch.compile`'s mode; default "reduce-overhead" (CUDA graphs) when the inputs are on a GPU, else
            torch's default.
        length_bucket: The static cache's length is a multiple of it.
        in_graph_sampling: True compiles the whole decode step, the draw and its bookkeeping included
            (`team.generation.graph_step`) where the settings allow; False compiles only the forward and draws on the
            host after each one (the eager loop's random stream, one host sync per token).
        sync_every: With `in_graph_sampling`, check on the host every this many tokens whether every row has ended
            (at most `sync_every - 1` steps run past the end; the output is the same).
    """

    def __init__(self, compile: bool = True, backend: Any = None, mode: str | None = None,
                 length_bucket: int = LENGTH_BUCKET, in_graph_sampling: bool = True,
                 sync_every: int = SYNC_EVERY) -> None:
        if length_bucket < 1:
            raise ValueError(f"`length_bucket` must be a positive number of tokens, got {length_bucket}.")
        if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
            raise ValueError(f"`sync_every` must be a positive number of tokens, got {sync_every!r}.")
        self.in_graph_sampling = in_graph_sampling
        self.sync_every = sync_every
        self.compile = compile
        self.backend = backend or "inductor"
        self.mode = mode
        self.length_bucket = length_bucket
        self.failure: str | None = None  # why the static path (compiling, the cache) failed; later calls run eager
        # what the static path ran, summed over calls: `calls`, decoded `tokens` (steps per row), `compiled_steps`
        # (calls of the compiled function: graph replays on a GPU) and `host_checks` (reads of the rows' end)
        self.stats: Counter[str] = Counter()
        self._warned: set[str] = set()
        self._compiled: dict[tuple[str | None, bool], Any] = {}  # by (mode, whole step)
        self._caches: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ support
    def unsupported(self, model: torch.nn.Module, generation_config: GenerationConfig | None, input_ids: torch.Tensor,
                    adapter_names: Sequence[str | None] | None = None, past_key_values: Any = None,
                    lean: bool = True) -> str | None:
        """Why this call would run the eager loop (None: the static, compiled path takes it)."""
        if self.failure is not None:  # (the reason already logged)
            return f"the static-cache path failed ({self.failure})"
        if not lean:
            return "`lean_decode=False` (model.generate)"
        if past_key_values is not None:
            return "a cache passed in (e.g. a shared prompt prefill)"
        plan = _plan(model, generation_config, input_ids.device, adapter_names)
        if isinstance(plan, str):
            return plan
        base = _base_model(model)
        if not getattr(base, "_can_compile_fullgraph", False):
            return f"{type(base).__name__} cannot take a static cache (`_can_compile_fullgraph` is False)"
        if base.training or (model is not base and model.training):
            return "a model in train mode"
        if adapter_names is not None:
            reason = sliced_adapter_rows_unsupported(model, list(adapter_names))
            if reason is not None:
                return f"mixed-adapter rows PEFT's slicing does not take ({reason})"
        return None

    def fallback(self, reason: str, runs: str = "the eager decode loop") -> None:
        """Warn once per `reason` that a call runs `runs` (by default the eager loop)."""
        if reason not in self._warned:
            self._warned.add(reason)
            logger.warning("The compiled generation backend runs %s: %s.", runs, reason)

    # ------------------------------------------------------------------ decoding
    def decode(self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               generation_config: GenerationConfig, adapter_names: Sequence[str | None] | None = None,
               past_key_values: Any = None, lean: bool = True) -> torch.Tensor:
        """The prompts followed by the generated tokens, as `team.generation.lean.decode` returns them."""
        reason = self.unsupported(model, generation_config, input_ids, adapter_names, past_key_values, lean)
        if reason is None:
            plan = _plan(model, generation_config, input_ids.device, adapter_names)
            assert not isinstance(plan, str)
            cpu_state = torch.get_rng_state()
            cuda_state = torch.cuda.get_rng_state(input_ids.device) if input_ids.device.type == "cuda" else None
            try:
                return self._run(model, plan, input_ids, attention_mask, adapter_names)
            except Exception as exc:  # noqa: BLE001 - an error of the model itself surfaces again from the eager loop
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]
                self.failure = f"{type(exc).__name__}: {' '.join(lines)}"
                reason = f"the static-cache path failed ({self.failure})"
                self._caches = weakref.WeakKeyDictionary()
                torch.set_rng_state(cpu_state)
                if cuda_state is not None:
                    torch.cuda.set_rng_state(cuda_state, input_ids.device)
        self.fallback(reason)
        return decode(model, input_ids, attention_mask, generation_config, adapter_names=adapter_names,
                      past_key_values=past_key_values, lean=lean)

    def _step_function(self, device: torch.device, fused: bool = False) -> Any:
        """The compiled one-token forward (`decode_step`), or with `fused` the whole step (`forward_and_sample`)."""
        function = forward_and_sample if fused else decode_step
        if not self.compile:
            return function
        mode = self.mode if self.mode is not None else ("reduce-overhead" if device.type == "cuda" else None)
        compiled = self._compiled.get((mode, fused))
        if compiled is None:
            import torch._dynamo.config as dynamo_config

            if dynamo_config.recompile_limit < _RECOMPILE_LIMIT:
                dynamo_config.recompile_limit = _RECOMPILE_LIMIT
            # a code object of its own: dynamo keeps (and counts) graphs per code object, so decoders never share
            code = function.__code__.replace(co_name=f"{function.__name__}_{id(self):x}")
            own = types.FunctionType(code, function.__globals__, code.co_name)
            compiled = self._compiled[(mode, fused)] = torch.compile(own, backend=self.backend, mode=mode,
                                                                     dynamic=False)
        return compiled

    def _cache(self, base: Any, batch: int, length: int, dtype: torch.dtype,
               device: torch.device) -> tuple[Any, DecodeBuffers]:
        """The static cache and the decode buffers of this (model, batch bucket, length bucket), reset."""
        caches = self._caches.setdefault(base, {})
        # a cache made under inference mode cannot be written outside it (and one made outside is kept apart too)
        key = (batch, length, dtype, device, torch.is_inference_mode_enabled())
        kept = caches.pop(key, None)
        if kept is None:
            if len(caches) >= _CACHES_KEPT:
                caches.pop(next(iter(caches)))
            cache = StaticCache(config=base.config.get_text_config(decoder=True), max_cache_len=length)
            kept = (cache, DecodeBuffers(batch, length, device))
        else:
            kept[0].reset()
        caches[key] = kept  # (most recently used last)
        return kept

    def _run(self, model: torch.nn.Module, plan: _Plan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             adapter_names: Sequence[str | None] | None) -> torch.Tensor:
        settings, device = plan.settings, input_ids.device
        base = _base_model(model)
        rows, prompt_length = input_ids.shape
        padded = bucket_batch(rows)
        length = bucket_length(prompt_length + plan.max_new_tokens, self.length_bucket)
        eos_ids = settings.get("eos_token_id")
        eos = None if eos_ids is None else torch.as_tensor(eos_ids, dtype=torch.long, device=device).reshape(-1)
        pad_id = settings.get("pad_token_id")
        pad = torch.as_tensor(pad_id, dtype=torch.long, device=device) if pad_id is not None else (
            eos[0] if eos is not None else None)
        position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
        # the processors see the mask the eager loop keeps (None without padding)
        mask = None if bool((attention_mask == 1).all()) else attention_mask
        processors = _logits_processors(settings, plan.do_sample, prompt_length, mask, eos, device)
        # the padding rows repeat the last row; the whole cache is visible from the start but the left padding
        extra = padded - rows
        ids_in = torch.cat([input_ids, input_ids[-1:].expand(extra, -1)]) if extra else input_ids
        positions = torch.cat([position_ids, position_ids[-1:].expand(extra, -1)]) if extra else position_ids
        full_mask = attention_mask.new_ones((padded, length))
        full_mask[:rows, :prompt_length] = attention_mask
        if extra:
            full_mask[rows:, :prompt_length] = attention_mask[-1:]
        names = None
        if adapter_names is not None:
            names = [BASE_ADAPTER if name is None else name for name in adapter_names]
            names += names[-1:] * extra
        argument = _cache_argument(base)
        cache, buffers = self._cache(base, padded, length, base.dtype, device)
        in_graph = self.samples_in_graph(processors)
        with torch.no_grad(), sliced_adapter_rows(model, names) if _is_peft(model) else nullcontext():
            logits = decode_step(base, ids_in, positions, full_mask, cache, argument)  # the prompt: eager
            if in_graph:
                return self._run_in_graph(base, cache, argument, buffers, logits, input_ids, ids_in, positions,
                                          full_mask, eos, pad, processors, plan)
            return self._run_host_sampling(base, cache, argument, logits, input_ids, positions, full_mask, eos, pad,
                                           processors, plan, extra)

    def samples_in_graph(self, processors: Sequence[Any]) -> bool:
        """Whether the draw runs inside the compiled step for these processors (False: it runs on the host after
        each compiled forward, as the first compiled loop did; the reason is logged once)."""
        if not self.in_graph_sampling:
            return False
        reason = graph_sampling_unsupported(processors)
        if reason is not None:
            self.fallback(f"sampling outside the compiled step ({reason})",
                          runs="the draw after each compiled forward")
            return False
        return True

    def _run_in_graph(self, base: Any, cache: Any, argument: str, buffers: DecodeBuffers, logits: torch.Tensor,
                      input_ids: torch.Tensor, ids_in: torch.Tensor, positions: torch.Tensor, full_mask: torch.Tensor,
                      eos: torch.Tensor | None, pad: torch.Tensor | None, processors: Sequence[Any],
                      plan: _Plan) -> torch.Tensor:
        """The whole step in the graph (`team.generation.graph_step`): no host round trip but one every
        `sync_every` tokens."""
        rows, device = input_ids.size(0), input_ids.device
        penalty = any(isinstance(p, RepetitionPenaltyLogitsProcessor) for p in processors)
        buffers.reset(rows, ids_in, positions, full_mask, eos, pad, logits.size(-1) if penalty else None)
        step = self._step_function(device, fused=True)
        cuda_graphs = self.compile and device.type == "cuda"

        def run_step() -> None:
            step(decode_step, base, cache, argument, buffers, processors, plan.do_sample)

        kept, steps, checks = decode_in_graph(run_step, logits, buffers, processors, plan.do_sample,
                                              plan.max_new_tokens, self.sync_every,
                                              torch.compiler.cudagraph_mark_step_begin if cuda_graphs else None)
        self.stats.update(calls=1, tokens=steps + 1, compiled_steps=steps, host_checks=checks)
        return torch.cat([input_ids, buffers.tokens[:rows, :kept]], dim=-1)

    def _run_host_sampling(self, base: Any, cache: Any, argument: str, logits: torch.Tensor, input_ids: torch.Tensor,
                           positions: torch.Tensor, full_mask: torch.Tensor, eos: torch.Tensor | None,
                           pad: torch.Tensor | None, processors: Sequence[Any], plan: _Plan,
                           extra: int) -> torch.Tensor:
        """The compiled forward alone, each token drawn on the host by the eager loop's `next_token_step` (the
        processors the graph cannot run; `in_graph_sampling=False`): the eager loop's tokens and random stream."""
        rows, device = input_ids.size(0), input_ids.device
        step = self._step_function(device)
        sequences = input_ids
        unfinished = torch.ones(rows, dtype=torch.long, device=device)
        step_positions = positions[:, -1:]
        for index in range(plan.max_new_tokens):
            scores = logits[:rows].to(copy=True, dtype=torch.float32, device=device)
            sequences, next_tokens, unfinished = next_token_step(scores, sequences, processors, plan.do_sample,
                                                                 eos, pad, unfinished)
            if eos is not None and unfinished.max() == 0:
                break
            if index + 1 == plan.max_new_tokens:
                break
            step_ids = next_tokens[:, None]
            if extra:
                step_ids = torch.cat([step_ids, step_ids[-1:].expand(extra, -1)])
            step_positions = step_positions + 1
            if self.compile and device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            logits = step(base, step_ids, step_positions, full_mask, cache, argument)
        tokens = sequences.size(1) - input_ids.size(1)
        self.stats.update(calls=1, tokens=tokens, compiled_steps=tokens - 1, host_checks=tokens)
        return sequences


class CompiledBackend(TransformersBackend):
    """The team's own decoding with [`CompiledDecoder`] in place of the eager lean loop (see the module docstring).

    A [`TransformersBackend`]: the same batches (agents over one model in one batch, mixed-adapter rows in `adapters`
    mode, continuous batching where the team asks for it, EOS cuts), each decoded by [`CompiledBackend.decode`]
    instead of `team.generation.lean.decode`, without a shared prompt prefill.
    """

    name = "compiled"
    shares_prefill = False  # a static cache is filled from the prompt: no shared prefill cache is passed in

    def __init__(self, team: AgentTeam | None = None, compile: bool = True, backend: Any = None,
                 mode: str | None = None, length_bucket: int = LENGTH_BUCKET, in_graph_sampling: bool = True,
                 sync_every: int = SYNC_EVERY) -> None:
        self.decoder = CompiledDecoder(compile=compile, backend=backend, mode=mode, length_bucket=length_bucket,
                                       in_graph_sampling=in_graph_sampling, sync_every=sync_every)
        settings = getattr(team, "settings", None)  # the team's `TeamSettings`
        if settings is not None and settings.continuous_batching_config is not None:
            self.decoder.fallback("continuous batching (`continuous_batching_config`) decodes through transformers")

    def decode(self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               generation_config: GenerationConfig, adapter_names: Sequence[str | None] | None = None,
               past_key_values: Any = None, lean: bool = True,
               behaviour: BehaviourLogps | None = None) -> torch.Tensor:
        """`lean.decode`'s call, through the static-cache loop where it can (see the module docstring); it records
        no behaviour log-probabilities (`behaviour` is left not `available`)."""
        if behaviour is not None:
            behaviour.available = False
        return self.decoder.decode(model, input_ids, attention_mask, generation_config, adapter_names,
                                   past_key_values, lean)
