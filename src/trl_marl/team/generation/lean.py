"""A lean decoding loop: the tokens of `model.generate` for plain sampling and greedy decoding, without its setup.

`model.generate` spends a fixed cost on every call before and around its forwards: it copies and validates the
generation config, merges it with the model's, turns special tokens into tensors, builds its cache, logits processors
and stopping criteria, and runs `prepare_inputs_for_generation` and `_update_model_kwargs_for_generation` at every step
(and a PEFT model re-points the base model's input preparation for the call). On a small model that is a visible
share of a short generation: for 16 rows of a 6-token prompt and 4 new tokens on the 2.6M-parameter toy Qwen2 (one
CPU thread), `generate` took 20.1 ms, this loop 18.0 ms and a bare loop of the same forwards 17.3 ms (fastest of 150
interleaved calls on a shared machine; about 0.3 ms more per further token for `generate`). [`decode`] runs the same
forwards itself when the settings are ones it supports, and calls `model.generate` otherwise.

What it does, step for step as `generate`'s sampling loop (transformers 5.x `GenerationMixin._sample`):

- settings left unset (None) in the generation config come from `model.generation_config`, then from transformers'
  global defaults (`top_k=50` among them), as `generate` merges them (`generation.base.resolve_generation_settings`,
  the resolution every backend samples with);
- position ids count each row's real tokens (left padding at 0); an attention mask of all ones is dropped;
- the first forward runs the prompt (or, after a shared prefill (`team.generation.prefill`), the prompt tokens its
  cache does not hold yet) into a `DynamicCache`, then one token per step, with `logits_to_keep=1`;
- the last logits, copied to float32, go through transformers' own logits processors in `generate`'s order
  (repetition penalty, no-repeat n-grams, bad words, minimum lengths, invalid-value removal, suppressed tokens, then,
  when sampling, temperature, top-h, top-k, top-p, min-p, typical-p, epsilon and eta cutoffs, and renormalization);
- one `torch.multinomial` draw over the whole batch per step (rows that already finished draw too, so the random
  stream is the one `generate` consumes), or an argmax for greedy decoding;
- a finished row gets the pad token (the first EOS id when no pad id is set); a row finishes at any of the EOS ids;
  the loop stops when every row has finished or after `max_new_tokens` tokens.

A PEFT model's per-row adapters (`adapter_names`) are set up once for the whole loop: when each adapter's rows form
one contiguous run (as `AgentTeam` orders them), every LoRA layer applies each adapter to its slice of rows
(`team.mixed_adapters.sliced_adapter_rows`: the same arithmetic, without PEFT's per-layer index lists); otherwise
through the forward pre-hooks that `PeftModel.generate` registers for its call.

Anything else goes to `model.generate` ([`lean_decode_unsupported`] says why): beam search, several sequences per
prompt, assisted, prompt-lookup, contrastive and DoLa decoding, stop strings, `max_time`, a cache other than the
default dynamic one, `use_cache=False`, no `max_new_tokens`, sequence bias, forced BOS/EOS tokens, guidance,
watermarking, returning a dict (scores, logits, attentions), any other setting away from its default (a custom entry
of the model's generation config included), encoder-decoder and remote-code models, models that customize
`generate` or its input preparation, PEFT methods other than LoRA, aLoRA adapters, MPS devices (whose `generate` defers
its stop check by a step), MoE models off CPU (whose `generate` switches expert kernels), and ZeRO-3/FSDP runs on
several processes (whose `generate` keeps every process stepping until all finish). Custom logits processors,
stopping criteria and streamers cannot be passed to [`decode`] at all. `AgentTeam.lean_decode = False` sends a
team's generation back to `generate`.

The tokens are those of `model.generate` under the same random state (tests/test_lean_decode.py checks every
supported setting against it): the forwards get the same inputs, the processors are transformers' own classes
built with the same arguments, and the draws happen in the same order.

With a [`BehaviourLogps`] the loop also keeps, at each step, every row's log-probability of the token it drew under
the policy the trainers compute (log-softmax of the raw logits / the team's temperature, before any processor): the
*behaviour* log-probabilities that asynchronous rollouts' importance-sampling correction needs, taken from the
decoding's own logits instead of a second forward. Nothing else changes (the draws are the same).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import DynamicCache, GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.generation import (
    EpsilonLogitsWarper,
    EtaLogitsWarper,
    InfNanRemoveLogitsProcessor,
    LogitNormalization,
    LogitsProcessor,
    MinLengthLogitsProcessor,
    MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper,
    NoBadWordsLogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SuppressTokensAtBeginLogitsProcessor,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopHLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
    TypicalLogitsWarper,
)

from ..cache_names import cache_kwarg, output_cache
from ..forward import takes_logits_to_keep
from ..mixed_adapters import sliced_adapter_rows
from .base import INERT_SETTINGS, global_generation_defaults, is_default_setting, resolve_generation_settings

__all__ = ["BehaviourLogps", "decode", "lean_decode_unsupported", "lean_generate"]

logger = logging.getLogger(__name__)

# Settings the loop implements (read in `_logits_processors` and `_plan`).
_HANDLED = frozenset({
    "do_sample", "max_new_tokens", "min_length", "min_new_tokens", "eos_token_id", "pad_token_id", "temperature",
    "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "repetition_penalty",
    "no_repeat_ngram_size", "bad_words_ids", "suppress_tokens", "begin_suppress_tokens", "remove_invalid_values",
    "renormalize_logits", "num_beams", "num_return_sequences", "use_cache", "cache_implementation",
})


def _base_model(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "get_base_model") and hasattr(model, "peft_config")


def _same_method(cls: type, reference: type, name: str) -> bool:
    return getattr(cls, name, None) is getattr(reference, name, None)


def _model_unsupported(model: Any, device: torch.device, adapter_names: Sequence[str | None] | None) -> str | None:
    base: PreTrainedModel = _base_model(model)
    if not isinstance(base, GenerationMixin):
        return f"{type(base).__name__} is not a transformers generation model"
    for name in ("generate", "_sample", "_prefill", "prepare_inputs_for_generation",
                 "_update_model_kwargs_for_generation"):
        if not _same_method(type(base), GenerationMixin, name):
            return f"{type(base).__name__} overrides `{name}`"
    if getattr(base.config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    if callable(getattr(base, "is_remote_code", None)) and base.is_remote_code():
        return "a remote-code model"
    supports_dynamic = getattr(type(base), "_supports_default_dynamic_cache", None)
    if supports_dynamic is None or not supports_dynamic():
        return f"{type(base).__name__} does not generate with a DynamicCache"
    if not takes_logits_to_keep(base):
        return f"{type(base).__name__}.forward takes no `logits_to_keep`"
    if device != base.device:
        return f"inputs on {device}, model on {base.device}"
    if device.type == "mps":
        return "an MPS device"
    experts = base.get_experts_implementation() if callable(getattr(base, "get_experts_implementation", None)) else {}
    if device.type != "cpu" and "grouped_mm" in experts.values():
        return "an MoE model with grouped_mm experts off CPU"
    if model.training and any(getattr(m, "gradient_checkpointing", False) for m in base.modules()):
        return "activation checkpointing in train mode"
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    if distributed and torch.distributed.get_world_size() > 1:
        try:  # where transformers 5.23 keeps them
            from transformers.distributed.fsdp import is_fsdp_managed_module
            from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
        except ImportError:
            return "several processes, and no way to tell whether `generate` would synchronize them"
        if is_deepspeed_zero3_enabled() or is_fsdp_managed_module(base):
            return "ZeRO-3 or FSDP on several processes (synced generation)"
    if not _is_peft(model):
        return "`adapter_names` for a model without PEFT adapters" if adapter_names is not None else None
    from peft import PeftModel, PeftModelForCausalLM

    # `PeftModel.generate` (no task type) and `PeftModelForCausalLM.generate` both run the base model's `generate`
    # inside the adapters' forward hooks (the latter also routes input preparation through its own, which only drops
    # `cache_position` outside prompt learning)
    reference = PeftModelForCausalLM if isinstance(model, PeftModelForCausalLM) else PeftModel
    for name in ("generate", "prepare_inputs_for_generation", "_enable_peft_forward_hooks"):
        if not _same_method(type(model), reference, name):
            return f"{type(model).__name__} customizes `{name}`"
    for adapter, config in model.peft_config.items():
        if getattr(config, "peft_type", None) != "LORA":  # PeftType is a str enum
            return f"adapter {adapter!r} is {getattr(config, 'peft_type', None)}, not LoRA"
        if getattr(config, "alora_invocation_tokens", None) is not None:
            return f"adapter {adapter!r} is an aLoRA"
    return None


@dataclass
class _Plan:
    settings: dict[str, Any]
    do_sample: bool
    max_new_tokens: int


def _plan(model: torch.nn.Module, generation_config: GenerationConfig | None, device: torch.device,
          adapter_names: Sequence[str | None] | None, past_key_values: Any = None,
          prompt_length: int | None = None) -> _Plan | str:
    """The resolved settings, or why the lean loop cannot stand in for `model.generate`."""
    if generation_config is None:
        return "no generation config"
    if past_key_values is not None and (type(past_key_values) is not DynamicCache or prompt_length is None
                                        or past_key_values.get_seq_length() >= prompt_length):
        return "a cache other than a DynamicCache holding part of the prompt"
    defaults = global_generation_defaults()
    if defaults is None:
        return "transformers exposes no default generation settings"
    reason = _model_unsupported(model, device, adapter_names)
    if reason is not None:
        return reason
    settings = resolve_generation_settings(generation_config, model)
    for name, value in settings.items():
        if name not in _HANDLED and name not in INERT_SETTINGS and not is_default_setting(name, value, defaults):
            return f"`{name}={value!r}`"
    max_new_tokens = settings.get("max_new_tokens")
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 1:
        return f"`max_new_tokens={max_new_tokens!r}` (the loop needs a positive int)"
    if settings.get("num_beams") != 1 or settings.get("num_return_sequences") != 1:
        return "beam search or several sequences per prompt"
    if settings.get("use_cache") is not True or settings.get("cache_implementation") is not None:
        return (f"use_cache={settings.get('use_cache')!r}, "
                f"cache_implementation={settings.get('cache_implementation')!r}")
    return _Plan(settings, settings.get("do_sample") is True, max_new_tokens)


def lean_decode_unsupported(model: torch.nn.Module, generation_config: GenerationConfig | None,
                            adapter_names: Sequence[str | None] | None = None,
                            device: torch.device | str | None = None) -> str | None:
    """Why [`decode`] would call `model.generate` for these settings (None: it runs the lean loop).

    Args:
        model: A causal LM, or a PEFT model wrapping one.
        generation_config: The settings of the call; unset (None) fields are read from `model.generation_config`
            and transformers' defaults, as `generate` does.
        adapter_names: PEFT's per-row adapter names, if any.
        device: Where the inputs are (default: the model's device).

    Example:

    ```python
    lean_decode_unsupported(model, GenerationConfig(max_new_tokens=8, do_sample=True, top_p=0.9))  # None
    lean_decode_unsupported(model, GenerationConfig(max_new_tokens=8, num_beams=4))  # '`num_beams=4`' or similar
    ```
    """
    device = torch.device(device) if device is not None else _base_model(model).device
    plan = _plan(model, generation_config, device, adapter_names)
    return plan if isinstance(plan, str) else None


def _logits_processors(settings: dict[str, Any], do_sample: bool, prompt_length: int,
                       attention_mask: torch.Tensor | None, eos: torch.Tensor | None,
                       device: torch.device) -> list[LogitsProcessor]:
    """transformers' logits processors for `settings`, with the arguments and in the order `generate` uses."""
    s = settings
    processors: list[LogitsProcessor] = []
    # transformers annotates these processors' `device: str`; they pass it to torch, which takes a `torch.device`
    device_arg = cast(str, device)
    if s.get("repetition_penalty") is not None and s["repetition_penalty"] != 1.0:
        # the penalty skips each row's left padding (read from the mask `generate` keeps: None when all ones)
        padding = (attention_mask != 0).int().argmax(dim=1) if attention_mask is not None else None
        processors.append(RepetitionPenaltyLogitsProcessor(s["repetition_penalty"], prompt_ignore_length=padding))
    if s.get("no_repeat_ngram_size") is not None and s["no_repeat_ngram_size"] > 0:
        processors.append(NoRepeatNGramLogitsProcessor(s["no_repeat_ngram_size"]))
    if s.get("bad_words_ids") is not None:
        processors.append(NoBadWordsLogitsProcessor(s["bad_words_ids"], eos))
    min_new_tokens = s.get("min_new_tokens")
    # `generate` turns min_new_tokens into a min_length over the prompt too, and then keeps both processors
    min_length = min_new_tokens + prompt_length if min_new_tokens is not None else s.get("min_length")
    if min_length is not None and eos is not None and min_length > 0:
        processors.append(MinLengthLogitsProcessor(min_length, eos, device=device_arg))
    if min_new_tokens is not None and eos is not None and min_new_tokens > 0:
        processors.append(MinNewTokensLengthLogitsProcessor(prompt_length, min_new_tokens, eos, device=device_arg))
    if s.get("remove_invalid_values") is True:
        processors.append(InfNanRemoveLogitsProcessor())
    if s.get("suppress_tokens") is not None:
        processors.append(SuppressTokensLogitsProcessor(s["suppress_tokens"], device=device_arg))
    if s.get("begin_suppress_tokens") is not None:  # no forced BOS token: the first new token is at the prompt end
        processors.append(SuppressTokensAtBeginLogitsProcessor(s["begin_suppress_tokens"], prompt_length,
                                                               device=device_arg))
    if do_sample:
        if s.get("temperature") is not None and s["temperature"] != 1.0:
            processors.append(TemperatureLogitsWarper(s["temperature"]))
        if s.get("top_h") is not None:
            processors.append(TopHLogitsWarper(top_h=s["top_h"]))
        if s.get("top_k") is not None and s["top_k"] != 0:
            processors.append(TopKLogitsWarper(top_k=s["top_k"], min_tokens_to_keep=1))
        if s.get("top_p") is not None and s["top_p"] < 1.0:
            processors.append(TopPLogitsWarper(top_p=s["top_p"], min_tokens_to_keep=1))
        if s.get("min_p") is not None:
            processors.append(MinPLogitsWarper(min_p=s["min_p"], min_tokens_to_keep=1))
        if s.get("typical_p") is not None and s["typical_p"] < 1.0:
            processors.append(TypicalLogitsWarper(mass=s["typical_p"], min_tokens_to_keep=1))
        if s.get("epsilon_cutoff") is not None and 0.0 < s["epsilon_cutoff"] < 1.0:
            processors.append(EpsilonLogitsWarper(epsilon=s["epsilon_cutoff"], min_tokens_to_keep=1))
        if s.get("eta_cutoff") is not None and 0.0 < s["eta_cutoff"] < 1.0:
            processors.append(EtaLogitsWarper(epsilon=s["eta_cutoff"], min_tokens_to_keep=1, device=device_arg))
    if s.get("renormalize_logits") is True:
        processors.append(LogitNormalization())
    return processors


def _peft_hooks(model: torch.nn.Module, adapter_names: Sequence[str | None] | None) -> AbstractContextManager[Any]:
    """The context `PeftModel.generate` runs its whole call in: LoRA layers read `adapter_names` (one per row), on
    row slices when each adapter's rows form one run (`team.mixed_adapters`), else through PEFT's hooks."""
    if not _is_peft(model):
        return nullcontext()
    return sliced_adapter_rows(model, list(adapter_names) if adapter_names else None)


def next_token_step(scores: torch.Tensor, sequences: torch.Tensor, processors: Sequence[Any], do_sample: bool,
                    eos: torch.Tensor | None, pad: torch.Tensor | None,
                    unfinished: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One token of every row after the forward, as `generate` picks it (shared by the eager loop and the compiled
    backend, so both draw the same tokens from the same random state).

    The logits processors see the sequences so far; the token is sampled from the softmax (`do_sample`) or the
    argmax; a row that already ended gets `pad`. Returns the sequences with the new column, the new tokens, and the
    rows still unfinished (a row ends at any `eos` token).
    """
    for processor in processors:
        scores = processor(sequences, scores)
    if do_sample:
        next_tokens = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
    else:
        next_tokens = torch.argmax(scores, dim=-1)
    if eos is not None:
        if pad is None:
            raise ValueError("`next_token_step` needs a `pad` token with `eos`: rows that ended get it.")
        next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
    sequences = torch.cat([sequences, next_tokens[:, None]], dim=-1)
    if eos is not None:
        unfinished = unfinished & ~torch.isin(next_tokens, eos)
    return sequences, next_tokens, unfinished


class BehaviourLogps:
    """What [`decode`] records, when given one, of each token the lean loop draws: its log-probability under
    log-softmax(raw logits / `temperature`), the distribution the trainers' log-probability forward computes (no
    penalty, no truncation). `model.generate` records nothing: `available` is then False and the caller computes
    them with a forward.

    Args:
        temperature: The trainers' temperature (`team.temperature`).
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = float(temperature)
        self.available = True
        self._steps: list[torch.Tensor] = []

    def policy(self, logits: torch.Tensor) -> torch.Tensor:
        """The `(B, V)` log-probabilities of one step's raw float32 logits (a new tensor: taken before the logits
        processors, which may edit the logits)."""
        return torch.log_softmax(logits / self.temperature, dim=-1)

    def record(self, policy: torch.Tensor, tokens: torch.Tensor) -> None:
        """One step: the step's [`policy`] and the `(B,)` tokens drawn."""
        self._steps.append(policy.gather(1, tokens[:, None])[:, 0])

    def rows(self, lengths: Sequence[int]) -> list[list[float]] | None:
        """Each row's log-probabilities of its first `lengths[i]` generated tokens (None when not `available`)."""
        if not self.available:
            return None
        table = torch.stack(self._steps, dim=1).tolist() if self._steps else [[] for _ in lengths]
        return [row[:n] for row, n in zip(table, lengths)]


def _run(model: torch.nn.Module, plan: _Plan, input_ids: torch.Tensor, attention_mask: torch.Tensor,
         adapter_names: Sequence[str | None] | None, past_key_values: Any,
         behaviour: BehaviourLogps | None = None) -> torch.Tensor:
    settings, device = plan.settings, input_ids.device
    base = _base_model(model)
    batch, prompt_length = input_ids.shape
    eos_ids = settings.get("eos_token_id")
    eos = None if eos_ids is None else torch.as_tensor(eos_ids, dtype=torch.long, device=device).reshape(-1)
    pad_id = settings.get("pad_token_id")
    pad = torch.as_tensor(pad_id, dtype=torch.long, device=device) if pad_id is not None else (
        eos[0] if eos is not None else None)
    # left padding: positions count the real tokens, padding sits at 0; a mask without padding is not passed
    position_ids = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)
    mask = None if bool((attention_mask == 1).all()) else attention_mask
    processors = _logits_processors(settings, plan.do_sample, prompt_length, mask, eos, device)
    cache = past_key_values if past_key_values is not None else DynamicCache(
        config=base.config.get_text_config(decoder=True))
    cached = cache.get_seq_length()  # a shared prefill holds all prompt tokens but the last
    step_ids, step_positions = input_ids[:, cached:], position_ids[:, cached:]
    sequences = input_ids
    unfinished = torch.ones(batch, dtype=torch.long, device=device)
    with torch.no_grad(), _peft_hooks(model, adapter_names):
        for _ in range(plan.max_new_tokens):
            inputs = {"input_ids": step_ids, "position_ids": step_positions, cache_kwarg(): cache,
                      "logits_to_keep": 1, "use_cache": True, "return_dict": True}
            if mask is not None:
                inputs["attention_mask"] = mask
            outputs = base(**inputs)
            cache = output_cache(outputs)
            scores = outputs.logits[:, -1].to(copy=True, dtype=torch.float32, device=device)
            del outputs
            policy = behaviour.policy(scores) if behaviour is not None else None  # before any processor
            sequences, next_tokens, unfinished = next_token_step(scores, sequences, processors, plan.do_sample, eos,
                                                                 pad, unfinished)
            if behaviour is not None and policy is not None:
                behaviour.record(policy, next_tokens)
            if eos is not None and unfinished.max() == 0:
                break
            step_ids, step_positions = next_tokens[:, None], step_positions[:, -1:] + 1
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=-1)
    return sequences


def lean_generate(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  generation_config: GenerationConfig, adapter_names: Sequence[str | None] | None = None,
                  past_key_values: Any = None) -> torch.Tensor:
    """Sample (or greedily decode) with the lean loop; raises `ValueError` for settings it does not support.

    Args and return value as [`decode`].
    """
    plan = _plan(model, generation_config, input_ids.device, adapter_names, past_key_values, input_ids.size(1))
    if isinstance(plan, str):
        raise ValueError(f"The lean decoding loop does not support {plan}; use `model.generate` (or `decode`).")
    return _run(model, plan, input_ids, attention_mask, adapter_names, past_key_values)


def decode(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: GenerationConfig,
           adapter_names: Sequence[str | None] | None = None, past_key_values: Any = None,
           lean: bool = True, behaviour: BehaviourLogps | None = None) -> torch.Tensor:
    """`model.generate(input_ids=..., attention_mask=..., generation_config=..., ...)`, through the lean loop when it
    supports the settings (see the module docstring), else through `generate` itself.

    Args:
        model: A causal LM, or a PEFT model wrapping one, in the mode (eval/train) it generates in.
        input_ids: `(B, L)` left-padded prompt ids, on the model's device.
        attention_mask: `(B, L)` their mask.
        generation_config: The sampling settings (`max_new_tokens`, `do_sample`, `temperature`, ...).
        adapter_names: PEFT's per-row adapter names for a mixed-adapter batch, or None.
        past_key_values: A cache that already holds a prefix of every row
            (`team.generation.prefill.shared_prefill_cache`), or None.
        lean: False always calls `model.generate`.
        behaviour: Records each drawn token's behaviour log-probability ([`BehaviourLogps`]; the lean loop only:
            through `model.generate` it is marked not `available`).

    Returns:
        `(B, L + T)` the prompts followed by the T generated tokens (rows that finished early padded with the pad
        token), as `generate` returns them.

    Example:

    ```python
    ids, mask = pad_left(rows, tokenizer.pad_token_id)
    config = GenerationConfig(max_new_tokens=16, do_sample=True, temperature=0.8, top_p=0.95)
    completions = decode(model, ids, mask, config)[:, ids.size(1):]
    ```
    """
    plan = (_plan(model, generation_config, input_ids.device, adapter_names, past_key_values, input_ids.size(1))
            if lean else "lean=False")
    if isinstance(plan, str):
        logger.debug("Decoding with model.generate: %s.", plan)
        kwargs: dict[str, Any] = {}
        if adapter_names is not None:
            kwargs["adapter_names"] = list(adapter_names)
        if past_key_values is not None:
            kwargs[cache_kwarg()] = past_key_values
        if behaviour is not None:
            behaviour.available = False
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config,
                              **kwargs)
    return _run(model, plan, input_ids, attention_mask, adapter_names, past_key_values, behaviour)
