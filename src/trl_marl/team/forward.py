"""Log-probability forwards that skip the one position whose logits are never used.

The log-probability of token t of a sequence is read from the logits at position t - 1, so a forward over a prompt
plus its completion scores the completion from the logits of the last prompt token up to the *second to last*
completion token. The logits at the last position predict a token that is not there; TRL's `GRPOTrainer` computes
them and throws them away. On a causal model the logits at every earlier position do not depend on the last input
token, so the forward can stop one token earlier: the same logits up to floating-point reordering in shape-dependent
kernels (bit for bit in most shapes, within 1e-6 otherwise). For G samples of 4 completion tokens after a 6-token
prompt that is a tenth of the training tokens.

The one thing the last token does change is the random numbers of dropout: a model that draws dropout masks draws
them over one position fewer, so its masks (and every random draw after them) differ from TRL's layout. Callers
keep the full layout for such a model ([`dropout_active`]), so that training with dropout stays draw for draw what
it was.

Forwards without gradients (generation, old and reference log-probs) run under [`no_autograd`]: inference mode
where it is safe.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from torch import nn

__all__ = ["dropout_active", "no_autograd", "takes_logits_to_keep"]


# float attributes through which transformers' modules pass a dropout probability to a kernel or `F.dropout`
_DROPOUT_ATTRIBUTES = ("attention_dropout", "dropout", "activation_dropout", "hidden_dropout")
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_CANDIDATES: weakref.WeakKeyDictionary[nn.Module, tuple[nn.Module, ...]] = weakref.WeakKeyDictionary()


def _dropout_candidates(model: nn.Module) -> tuple[nn.Module, ...]:
    """The submodules of `model` that can draw dropout masks, found once per model (walking every module of a large
    PEFT model takes milliseconds: too long for every forward)."""
    found = _CANDIDATES.get(model)
    if found is None:
        found = tuple(m for m in model.modules() if isinstance(m, _DROPOUT_MODULES)
                      or any(isinstance(m.__dict__.get(name), float) for name in _DROPOUT_ATTRIBUTES))
        _CANDIDATES[model] = found
    return found


def dropout_active(model: nn.Module) -> bool:
    """Whether a forward of `model` now draws dropout masks.

    True when a submodule in train mode is a dropout module (`nn.Dropout`, ...) with `p > 0`, or has a float
    `attention_dropout` (or `dropout`, `activation_dropout`, `hidden_dropout`) attribute `> 0`: transformers'
    attention classes pass that probability to the attention kernel in train mode, without a dropout module.
    `disable_dropout` (which zeroes every `nn.Dropout`) and eval mode make it False. Train/eval modes and
    probabilities are read at every call; which submodules can draw masks is found at the first call on `model`
    (a dropout module added to it later is not seen).

    Example:

    ```python
    model = build_toy_model(tokenizer).train()  # no dropout in its config
    dropout_active(model)  # False
    model.model.layers[0].self_attn.attention_dropout = 0.1
    dropout_active(model)  # True; False again after model.eval()
    ```
    """
    for module in _dropout_candidates(model):
        if not module.training:
            continue
        if isinstance(module, _DROPOUT_MODULES):
            if module.p > 0:
                return True
            continue
        for name in _DROPOUT_ATTRIBUTES:
            probability = module.__dict__.get(name)
            if isinstance(probability, float) and probability > 0:
                return True
    return False


@functools.lru_cache
def _forward_takes_logits_to_keep(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def takes_logits_to_keep(model: Any) -> bool:
    """Whether the forward of `model` (of the base model under a PEFT wrapper) takes transformers' `logits_to_keep`
    (compute the LM head over the last k positions only)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_takes_logits_to_keep(type(base))


def no_autograd() -> AbstractContextManager[Any]:
    """A context for forwards whose outputs never enter a backward: `torch.inference_mode()`, or `torch.no_grad()`
    when `torch.distributed` is initialized.

    Inference mode also skips autograd's bookkeeping (version counters, view tracking) in every op: 8-10% less CPU
    time for a decoding step of a small model. But FSDP and DeepSpeed ZeRO-3 gather and swap parameters in place
    under version-counter guards, which inference tensors do not have (`RuntimeError: Inference tensors do not track
    version counter`), so any distributed run keeps `no_grad`. A tensor made under inference mode cannot be saved for
    a backward or changed in place outside it: callers return plain Python values or clones.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.no_grad()
    return torch.inference_mode()


@contextmanager
def checkpointing_paused(model: nn.Module) -> Iterator[None]:
    """Turn gradient checkpointing off in every layer of `model` for the duration of the context, then restore it.

    transformers' checkpointed layers drop the KV cache (`past_key_values=None`) in *train mode*, whatever the grad
    mode: a model that has to decode in train mode (a 4-bit model on CPU, see `trl_marl.team`) would then feed each
    new token without the cache of the tokens before it and sample from the wrong distribution. Generation computes
    no gradient, so checkpointing has nothing to save there.

    Example:

    ```python
    model.gradient_checkpointing_enable()
    with checkpointing_paused(model), torch.no_grad():
        out = model.generate(ids, max_new_tokens=8)  # decodes with its KV cache, even in train mode
    ```
    """
    paused = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for module in paused:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in paused:
            module.gradient_checkpointing = True
