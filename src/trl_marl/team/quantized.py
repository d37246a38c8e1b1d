"""bitsandbytes 4-bit layers that stay trainable on a CPU.

bitsandbytes 0.50, on a CPU with AVX512-BF16, repacks a `Linear4bit` layer's weight in place, into the layout of its
CPU inference kernel, the first time the layer runs in eval mode on an input without gradient: a generation, an
evaluation, a probe of the model's forward. From then on every forward of that layer, in train mode too, runs the
inference kernel, which has no backward: the gradient stops at the layer's input, and the LoRA adapters of every
layer below it train on wrong gradients, without an error or a warning.

[`keep_4bit_trainable`] turns that repacking off in each 4-bit layer of a model the team trains (the layers then run
bitsandbytes' dequantizing path in every mode, as on a CPU without AVX512-BF16) and undoes a repacking already done,
for instance by a `generate` call before the model was handed to the trainer. `AgentTeam` calls it on each of its
models.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from bitsandbytes.functional import QuantState

__all__ = ["keep_4bit_trainable", "repacked_4bit_layers"]

logger = logging.getLogger(__name__)

_REPACKING_FLAG = "support_avx512bf16_for_cpu"
"""The `Linear4bit` attribute that lets bitsandbytes repack the layer's weight for its CPU inference kernel."""


class _Weight4bit(Protocol):
    """The weight of a bitsandbytes `Linear4bit` layer (a `Params4bit`): its 4-bit codes and quantization state."""

    data: torch.Tensor
    quant_state: QuantState


def repacked_4bit_layers(model: nn.Module) -> list[str]:
    """The names of `model`'s 4-bit layers whose weight is in bitsandbytes' CPU inference layout (see the module
    docstring): their forward has no input gradient."""
    return [name for name, module in model.named_modules() if _is_repacked(getattr(module, "weight", None))]


def _is_repacked(weight: Any) -> bool:
    return bool(getattr(getattr(weight, "quant_state", None), "packing_format_for_cpu", False))


def keep_4bit_trainable(model: nn.Module) -> int:
    """Turn bitsandbytes' CPU repacking off in every 4-bit layer of `model`, and undo the repacking of layers that
    were already repacked (logged once, with their number). A model without 4-bit layers is left as it is.

    Returns:
        The number of layers whose weight was put back into the trainable layout.

    Example:

    ```python
    >>> from trl_marl.toy import build_toy_model, build_toy_tokenizer
    >>> keep_4bit_trainable(build_toy_model(build_toy_tokenizer()))  # no 4-bit layer: nothing to do
    0
    ```
    """
    restored = 0
    for module in model.modules():
        if not hasattr(module, _REPACKING_FLAG):
            continue
        setattr(module, _REPACKING_FLAG, False)
        weight = cast(_Weight4bit, module.weight)  # a `Linear4bit`'s (`nn.Module` types it `Tensor | Module`)
        if _is_repacked(weight):
            weight.data, weight.quant_state = _unpacked(weight.data, weight.quant_state)
            restored += 1
    if restored:
        logger.warning("%d 4-bit layers of %s had been repacked by bitsandbytes for CPU inference, which has no "
                       "gradient: they are back in the trainable layout.", restored, type(model).__name__)
    return restored


def _unpacked(data: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
    """A repacked layer's 4-bit codes and quantization state in the trainable layout.

    bitsandbytes' own inverse (0.50, which it runs before saving or moving a layer) restores the codes exactly, but
    for a layer without nested quantization it leaves the scales in the kernel's (blocks, rows) order: a layer with
    more than one block per row would then dequantize with the wrong scales. They are put back in row order here,
    from the bf16 copy the repacking kept (the values the repacked layer computed with).
    """
    from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse

    data, state = _convert_weight_packed_for_cpu_inverse(data, state)
    if state.absmax.dim() == 2:  # still (blocks of a row, rows)
        state.absmax = state.absmax.T.reshape(-1).float()
    return data, state
