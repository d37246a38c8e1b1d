"""A float32 language-model head for a half-precision model (GRPO's `cast_lm_head_to_fp32`, the ScaleRL recipe).

The logits, and so the log-probabilities of the policy-gradient loss and the sampling distribution, are computed in
float32 from the (bf16/fp16) hidden states, against a head whose weights are kept and trained in float32 (ScaleRL,
arXiv 2510.13786: the mismatch between the sampler's and the learner's probabilities shrinks). The rest of the
model keeps its dtype.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["Float32Head", "cast_lm_head_to_fp32"]


class Float32Head(nn.Linear):
    """An `nn.Linear` LM head that computes in float32, whatever the dtype of its input and any autocast around it.

    Its parameters keep their names (`lm_head.weight`), so checkpoints load as before.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            bias = None if self.bias is None else self.bias.float()
            return F.linear(hidden_states.float(), self.weight.float(), bias)


def _cast_output(module: nn.Module, inputs: Any, output: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return output.to(dtype)


def cast_lm_head_to_fp32(model: nn.Module) -> None:
    """Keep `model`'s LM head in float32 and compute its logits in float32 (in place; idempotent).

    With tied input and output embeddings the shared matrix becomes float32 too, and the embedding lookup's output
    is cast back to the model's former dtype, so that the decoder layers run as before.

    Args:
        model: A causal LM (`PreTrainedModel`, or a `peft.PeftModel` around one).

    Raises:
        ValueError: The output embedding is not a plain `torch.nn.Linear` (e.g. it carries a LoRA adapter, or is
            quantized), so there is no float32 weight to compute with.

    Example:

    ```python
    >>> from trl_marl.toy import build_toy_model, build_toy_tokenizer
    >>> model = build_toy_model(build_toy_tokenizer(), hidden_size=16, num_layers=1).to(torch.bfloat16)
    >>> cast_lm_head_to_fp32(model)
    >>> model.lm_head.weight.dtype, model(torch.tensor([[1, 5, 6]])).logits.dtype
    (torch.float32, torch.float32)
    ```
    """
    lm = cast("PreTrainedModel", model)  # a transformers model (the team holds its models as `nn.Module`s)
    head = lm.get_output_embeddings()
    if isinstance(head, Float32Head):
        return
    if type(head) is not nn.Linear:
        raise ValueError(
            f"`cast_lm_head_to_fp32=True` needs the model's output embedding (lm_head) to be a plain torch.nn.Linear, "
            f"but it is a {type(head).__module__}.{type(head).__name__}: a LoRA adapter on `lm_head` (remove "
            "'lm_head' from the adapter's `target_modules`) or a quantized head has no float32 weight to compute "
            "with. Or set `cast_lm_head_to_fp32=False`."
        )
    dtype = head.weight.dtype
    embeddings = lm.get_input_embeddings()
    tied = embeddings is not None and getattr(embeddings, "weight", None) is head.weight
    head.float()
    head.__class__ = Float32Head
    if tied and dtype != torch.float32:
        embeddings.register_forward_hook(partial(_cast_output, dtype=dtype))
