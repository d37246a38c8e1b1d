"""Which models may take their log-probabilities through the LM head a chunk at a time, and that head as it ran.

The team's log-probability forwards call a causal LM's backbone and then its LM head over a chunk of positions at a
time (`core.head_logprobs`), never holding the `[batch, length, vocab]` logits. That is right only for a model whose
logits are exactly `lm_head(backbone(...).last_hidden_state)`. Reading the config for known transforms misses any
family that does something else: RecurrentGemma's `logits_soft_cap`, the dense + activation + norm before the decoder
of Roberta, XLM-Roberta, Bert, Electra and ModernBertDecoder (whose `get_output_embeddings()` is only the last Linear),
Inkling's width multiplier and vocabulary slice, a soft cap of 1.0.

[`head_path`] asks the model instead: once per model and adapter layout of its head, it runs the model's own forward
on a 2 x 4-token probe in eval mode and checks that

1. the model calls its backbone once, with the hidden states that the direct backbone call gives, and
2. with the backbone's output replaced by random hidden states scaled so that the head's logits reach +-64 (where any
   soft cap, logit scale, normalization or slice shows), the model's logits equal the head's on those states,

within a few units of rounding of the logits' dtype, and 3. the least-squares scale between the two is 1 within half
a unit of rounding (a logit scale of 1.02, Granite's `logits_scaling`, is 2% off in every logit: inside the rounding
of bf16 logits of magnitude 64, but not of their fitted scale). The probe runs with autocast off, so that its
verdict is about the model's own dtype, and is cached per adapter layout, parameter dtype and autocast state. A
model that fails falls back to the full logits, with the reason logged once. The probe draws from a generator of its
own (the global random state does not move) and puts every module back in the train/eval mode it was in.

[`bound_head`] is the head as the forward ran it. A PEFT `modules_to_save` or trainable-token wrapper on the LM head
runs the active adapter's copy at call time, and the chunked head recomputes each chunk's logits in the backward:
after the forwards of several agents (one backward over all of them), every chunk would be recomputed with the last
agent's head. The bound head calls the head with the adapter state of its forward, also in the recomputation.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = ["HeadPath", "bound_head", "head_path", "head_path_checked"]

logger = logging.getLogger(__name__)

# the probe's logits reach this magnitude: a soft cap at c < 64 (Gemma's 30, a cap of 1.0) cuts them visibly, and a
# cap far above it is a change of less than 64**3 / (3 c**2)
_PROBE_LOGIT = 64.0
# tolerated difference, in units of the compared dtype's epsilon times the largest magnitude
_ROUNDING_UNITS = 8

_PROBES: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, ...], HeadPath | str]] = weakref.WeakKeyDictionary()
_LOGGED: weakref.WeakKeyDictionary[nn.Module, set[str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class HeadPath:
    """A model whose logits are `head(backbone(...).last_hidden_state)`: its backbone, its LM head and the head's
    number of logits per position."""

    backbone: nn.Module
    head: nn.Module
    vocab_size: int


def _adapter_modules(head: nn.Module) -> list[nn.Module]:
    """The PEFT layers and wrappers inside `head` (anything with an active-adapter state)."""
    return [m for m in head.modules() if "_active_adapter" in m.__dict__]


def _adapter_state(modules: list[nn.Module]) -> tuple[tuple[Any, bool], ...]:
    """The active adapter(s) and disabled flag of each of `modules`, hashable."""
    state = []
    for module in modules:
        active = module.__dict__["_active_adapter"]
        state.append(
            (
                tuple(active) if isinstance(active, list) else active,
                bool(module.__dict__.get("_disable_adapters", False)),
            )
        )
    return tuple(state)


@contextmanager
def _adapter_state_set(modules: list[nn.Module], state: tuple[tuple[Any, bool], ...]) -> Iterator[None]:
    """Give `modules` the adapter state `state` (from `_adapter_state`) for the context, then restore theirs.

    The attributes are set directly: PEFT's `set_adapter` would also reset which adapters require gradients.
    """
    previous = [(m.__dict__["_active_adapter"], m.__dict__.get("_disable_adapters", False)) for m in modules]
    try:
        for module, (active, disabled) in zip(modules, state, strict=True):
            module.__dict__["_active_adapter"] = list(active) if isinstance(active, tuple) else active
            if "_disable_adapters" in module.__dict__:
                module.__dict__["_disable_adapters"] = disabled
        yield
    finally:
        for module, (active, disabled) in zip(modules, previous, strict=True):
            module.__dict__["_active_adapter"] = active
            if "_disable_adapters" in module.__dict__:
                module.__dict__["_disable_adapters"] = disabled


class _BoundHead:
    """`head` called with the adapter state it had when this was made (see `bound_head`)."""

    def __init__(self, head: nn.Module, modules: list[nn.Module]) -> None:
        self.head, self.modules, self.state = head, modules, _adapter_state(modules)

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        with _adapter_state_set(self.modules, self.state):
            return self.head(hidden)


def bound_head(head: nn.Module) -> nn.Module | _BoundHead:
    """`head` (the LM head of a [`HeadPath`]) as it runs now, for `core.head_logprobs`: the head itself when it
    carries no PEFT adapter state, else a callable that runs it with the adapter(s) active now, whichever adapter is
    active when it is called (the backward recomputes each chunk's logits after later agents' forwards).

    Example:

    ```python
    team.adapter_control.activate(0)
    head = bound_head(path.head)  # agent 0's `modules_to_save` copy of the LM head
    team.adapter_control.activate(1)
    head(hidden)  # still agent 0's copy
    ```
    """
    modules = _adapter_modules(head)
    return _BoundHead(head, modules) if modules else head


def _structure(model: Any) -> tuple[nn.Module, nn.Module] | str:
    """`(backbone, lm_head)` by the transformers layout, or why the model has none that the chunked path can use."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    peft_config = getattr(model, "active_peft_config", None)
    if getattr(peft_config, "is_prompt_learning", False):
        return "prompt-learning PEFT adds virtual tokens in its forward"
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    backbone = getattr(base, getattr(base, "base_model_prefix", ""), None)
    if not isinstance(head, nn.Module) or not isinstance(backbone, nn.Module) or backbone is base:
        return "no transformers backbone and LM head (`base_model_prefix`, `get_output_embeddings`)"
    if hasattr(head, "lora_A") or hasattr(head, "base_layer"):
        return "the LM head carries an adapter"
    return backbone, head


def _hidden_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, tuple):
        return output[0]
    return output.last_hidden_state


def _with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    if isinstance(output, torch.Tensor):
        return hidden
    if isinstance(output, tuple):
        return (hidden, *output[1:])
    output.last_hidden_state = hidden  # (a transformers `ModelOutput`: `output[0]` follows)
    return output


def _tolerance(reference: torch.Tensor, *dtypes: torch.dtype) -> float:
    eps = max(torch.finfo(d).eps if d.is_floating_point else 0.0 for d in dtypes)
    return _ROUNDING_UNITS * eps * max(1.0, float(reference.abs().max()))


def _autocast_off(device: torch.device) -> Any:
    """Autocast disabled on `device`'s type (a no-op context where that type has no autocast)."""
    try:
        return torch.autocast(device.type, enabled=False)
    except RuntimeError:
        return nullcontext()


def _autocast_state(device: torch.device) -> tuple[bool, Any]:
    """Whether autocast is on for `device`'s type, and its dtype: part of the probe cache's key."""
    try:
        on = torch.is_autocast_enabled(device.type)
    except (RuntimeError, TypeError):
        return False, None
    return on, torch.get_autocast_dtype(device.type) if on else None


def _fitted_scale(logits: torch.Tensor, expected: torch.Tensor) -> float:
    """The least-squares `s` of `logits ~ s * expected`, in float64."""
    a, b = logits.double().flatten(), expected.double().flatten()
    denominator = float(b @ b)
    return float(a @ b) / denominator if denominator > 0 else 1.0


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _probe(model: nn.Module, backbone: nn.Module, head: nn.Module) -> HeadPath | str:
    """Run the probe of the module docstring: a [`HeadPath`] when the model passes it, else the reason."""
    device = next((p.device for p in backbone.parameters()), torch.device("cpu"))
    input_ids = torch.tensor([[2, 3, 4, 5], [2, 5, 4, 3]], device=device)
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]], device=device)  # one left-padded row
    generator = torch.Generator().manual_seed(0)  # not the global random state
    seen: list[torch.Tensor] = []
    try:
        with _eval_mode(model), torch.no_grad(), _autocast_off(device):
            direct = _hidden_of(backbone(input_ids=input_ids, attention_mask=attention_mask))
            probe = torch.randn(direct.shape, generator=generator).to(device)
            scale = float(head(probe.to(direct.dtype)).float().abs().max())
            probe = (probe * (_PROBE_LOGIT / scale if scale > 0 else 1.0)).to(direct.dtype)
            expected = head(probe)

            def replace(module: nn.Module, args: Any, output: Any) -> Any:
                seen.append(_hidden_of(output))
                return _with_hidden(output, probe)

            handle = backbone.register_forward_hook(replace)
            try:
                output = model(input_ids=input_ids, attention_mask=attention_mask)
            finally:
                handle.remove()
            logits = output[0] if isinstance(output, tuple) else output.logits
    except Exception as error:  # noqa: BLE001 - any failure means: keep the model's own forward
        return f"the probe of its forward failed ({type(error).__name__}: {error})"
    if len(seen) != 1:
        return f"its forward runs its backbone {len(seen)} times, not once"
    attended = attention_mask.bool()
    if seen[0].shape != direct.shape or (
        (seen[0][attended].float() - direct[attended].float()).abs().max()
        > _tolerance(direct[attended].float(), direct.dtype)
    ):
        return "its forward runs its backbone with other inputs than the chunked path does"
    if logits.shape != expected.shape:
        return (
            f"its logits have shape {tuple(logits.shape)} where `lm_head(last_hidden_state)` has "
            f"{tuple(expected.shape)}"
        )
    difference = float((logits.float() - expected.float()).abs().max())
    if not difference <= _tolerance(expected.float(), logits.dtype, expected.dtype):
        return (
            f"its logits are not `lm_head(last_hidden_state)`: a probe whose head logits reach "
            f"{_PROBE_LOGIT:g} gave logits {difference:.3g} away from them (a soft cap, a logit scale, "
            "a transform between the backbone and the head, ...)"
        )
    scale = _fitted_scale(logits, expected)
    if not abs(scale - 1.0) <= 0.5 * max(torch.finfo(d).eps for d in (logits.dtype, expected.dtype)):
        return (
            f"its logits are not `lm_head(last_hidden_state)`: they are {scale:.4g} times the head's on the probe "
            "(a logit scale)"
        )
    return HeadPath(backbone, head, int(expected.size(-1)))


def head_path_checked(model: Any) -> HeadPath | str:
    """[`HeadPath`] of `model` when its logits are exactly `lm_head(backbone(...).last_hidden_state)`, or why not
    (see the module docstring): its transformers layout, then the probe, run once per model and adapter state of the
    LM head (each agent's `modules_to_save` copy, the disabled adapters of a reference forward), parameter dtype and
    autocast state, and cached. The first time a model falls back, the reason is logged
    (`logging.getLogger("trl_marl.team.head")`, warning).
    """
    structure = _structure(model)
    if isinstance(structure, str):
        return structure
    backbone, head = structure
    weight = next((p for p in head.parameters()), None)
    device = weight.device if weight is not None else torch.device("cpu")
    key = (_adapter_state(_adapter_modules(head)), None if weight is None else weight.dtype, _autocast_state(device))
    probes = _PROBES.setdefault(model, {})
    found = probes.get(key)
    if found is None:
        found = probes[key] = _probe(model, backbone, head)
        logged = _LOGGED.setdefault(model, set())
        if isinstance(found, str) and found not in logged:
            logged.add(found)
            logger.warning(
                "%s: log-probabilities from the full logits, not the LM head in chunks, because %s.",
                type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__,
                found,
            )
    return found


def head_path(model: nn.Module) -> tuple[nn.Module, nn.Module] | str:
    """`(backbone, lm_head)` of a causal LM whose logits are `lm_head(backbone(...).last_hidden_state)`, or why not.

    Then the log-probability forwards run the backbone and take each completion token's log-probability through the
    LM head a chunk of positions at a time (`core.head_logprobs`), never holding the `[batch, length, vocab]`
    logits (TRL's `GRPOTrainer` does the same with its fused LM head). Whether a model qualifies is asked of the
    model itself, by a probe of its forward ([`head_path_checked`], module docstring); prompt-learning PEFT (its
    forward adds virtual tokens), a LoRA adapter on the LM head itself and a model without the transformers layout
    (`base_model_prefix`, `get_output_embeddings`) are refused without one.

    Example: `head_path(RobertaForCausalLM(config))` is a reason ("its logits are not `lm_head(...)`..."),
    `head_path(qwen2)` is `(qwen2.model, qwen2.lm_head)`.
    """
    found = head_path_checked(model)
    return found if isinstance(found, str) else (found.backbone, found.head)
