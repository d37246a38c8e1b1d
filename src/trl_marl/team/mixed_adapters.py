"""Mixed-adapter batches whose rows come in one run per adapter: LoRA on row slices instead of gathered rows.

An `adapters` team generates every agent's rows in one batch over one base model, one LoRA adapter per agent, by
giving PEFT one adapter name per row (`adapter_names`). PEFT then registers a forward pre-hook on every LoRA layer
that hands the names to the layer, and the layer's mixed-batch forward, at every call, builds a Python list of row
indices for each adapter and gathers those rows (`x[indices]`), runs the adapter on them, and scatters the result
back (`result[indices] += ...`). On a GPU every such list is copied from the host to the device: a few per LoRA layer,
hundreds per decoded token on a 24-layer model.

`AgentTeam` orders its rows agent by agent (agent 0's rows, then agent 1's, ...), so the rows of each adapter form
one contiguous run `[start, stop)`. [`sliced_adapter_rows`] uses that: while it is active, each LoRA layer computes
its base layer's output for the whole batch and then, for each run, adds `lora_B(lora_A(dropout(x[start:stop]))) *
scaling` into `result[start:stop]`. Slices of the first dimension are views: no index lists, no gathers, nothing
copied to the device. The arithmetic is PEFT's (its dtype casts included), on the same rows.

It takes this path only where that is exactly PEFT's computation: a PEFT model with LoRA adapters
(`peft.tuners.lora.LoraModel`), in eval mode, with adapters enabled, every adapter layer a plain LoRA `Linear`
(no embedding, convolution or quantized layers, no auxiliary `modules_to_save`/trainable-token wrappers), no merged
adapters, no LoRA variant (DoRA, aLoRA, ...) among the adapters in the batch, every adapter name known, and each
adapter's rows in one run. Otherwise it enters PEFT's own hooks with the same names
(`model._enable_peft_forward_hooks(adapter_names=...)`), so callers can use it unconditionally and get PEFT's
results, or PEFT's errors. [`sliced_adapter_rows_unsupported`] says why a batch would not be sliced.

Rows named `"__base__"` (PEFT's name for the base model) or None get the base model's output. PEFT itself rejects
None in `adapter_names`; both paths here pass it on as `"__base__"`.

In train mode PEFT refuses mixed-adapter batches; so does the fallback. `training=True` slices a model in train mode
too (an `adapters` team's training forward over several agents' rows, `AgentTeam.forward`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from peft.tuners.lora.layer import Linear
    from peft.tuners.lora.model import LoraModel
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper

__all__ = ["BASE_ADAPTER", "adapter_runs", "sliced_adapter_rows", "sliced_adapter_rows_plan",
           "sliced_adapter_rows_unsupported"]

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" in `adapter_names`
STACK_ADAPTERS = True  # apply equal runs of adapters of one shape as one batched matmul (False: always run by run)


def adapter_runs(adapter_names: Sequence[str | None]) -> list[tuple[str, int, int]] | None:
    """The runs `(adapter, start, stop)` of consecutive rows with the same adapter, or None when an adapter's rows do
    not form one run. None is read as `"__base__"`.

    Example:

    ```python
    adapter_runs(["a", "a", "b", None])  # [('a', 0, 2), ('b', 2, 3), ('__base__', 3, 4)]
    adapter_runs(["a", "b", "a"])  # None
    ```
    """
    runs: list[tuple[str, int, int]] = []
    for row, name in enumerate(adapter_names):
        name = BASE_ADAPTER if name is None else name
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1], row + 1)
        elif any(run[0] == name for run in runs):
            return None
        else:
            runs.append((name, row, row + 1))
    return runs


def _peft_classes() -> tuple[type[Linear], type[BaseTunerLayer], type[LoraModel],
                             type[AuxiliaryTrainingWrapper] | None]:
    from peft.tuners.lora.layer import Linear
    from peft.tuners.lora.model import LoraModel
    from peft.tuners.tuners_utils import BaseTunerLayer

    try:
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:  # older PEFT: no auxiliary wrappers
        return Linear, BaseTunerLayer, LoraModel, None
    return Linear, BaseTunerLayer, LoraModel, AuxiliaryTrainingWrapper


def _plan(model: torch.nn.Module, adapter_names: Sequence[str | None],
          training: bool = False) -> tuple[list[Any], list[tuple[str, int, int]]] | str:
    """The LoRA layers to slice and the runs of rows, or why the batch takes PEFT's path."""
    if not hasattr(model, "_enable_peft_forward_hooks") or not hasattr(model, "base_model"):
        return "not a PEFT model"
    from peft import PeftModel

    if not isinstance(model, PeftModel) or (
            type(model)._enable_peft_forward_hooks is not PeftModel._enable_peft_forward_hooks):
        return f"{type(model).__name__} is not a PeftModel with PEFT's forward hooks"
    linear_cls, tuner_layer_cls, lora_model_cls, aux_cls = _peft_classes()
    tuner = model.base_model
    if not isinstance(tuner, lora_model_cls) or (
            type(tuner)._enable_peft_forward_hooks is not lora_model_cls._enable_peft_forward_hooks):
        return f"{type(tuner).__name__} is not PEFT's LoraModel"
    if tuner.training and not training:  # where PEFT refuses `adapter_names`
        return "train mode"
    if not getattr(model, "has_active_enabled_adapter", False):
        return "adapters disabled"
    if not adapter_names:
        return "no rows"
    runs = adapter_runs(adapter_names)
    if runs is None:
        return "an adapter's rows are not one contiguous run"
    in_use = {name for name, _, _ in runs if name != BASE_ADAPTER}
    layers: list[Linear] = []
    known: set[str] = set()
    for module in model.modules():
        if aux_cls is not None and isinstance(module, aux_cls):
            return f"an auxiliary {type(module).__name__} (modules_to_save or trainable tokens)"
        if not isinstance(module, tuner_layer_cls):
            continue
        if type(module) is not linear_cls:
            return f"a {type(module).__module__}.{type(module).__name__} adapter layer"
        if module.merged:
            return "merged adapters"
        if module.disable_adapters:
            return "adapters disabled"
        if "forward" in vars(module):
            return "a LoRA layer whose forward is already replaced"
        variants = in_use & (set(module.lora_variant) | {n for n, dora in module.use_dora.items() if dora})
        if variants:
            return f"LoRA variant (e.g. DoRA) in adapter(s) {sorted(variants)}"
        known |= set(module.lora_A)
        layers.append(module)
    if not layers:
        return "no LoRA layers"
    if in_use - known:
        return f"unknown adapter(s) {sorted(in_use - known)}"
    return layers, runs


def sliced_adapter_rows_plan(model: torch.nn.Module, adapter_names: Sequence[str | None],
                             training: bool = False) -> tuple[list[Any], list[tuple[str, int, int]]] | str:
    """What [`sliced_adapter_rows`] (with the same `training`) would install for this batch: the LoRA layers and the
    runs of rows, or why it would enter PEFT's hooks instead. Pass it back as `plan` to skip walking the model again
    (the model's adapters must not have changed in between)."""
    return _plan(model, [BASE_ADAPTER if name is None else name for name in adapter_names], training)


def sliced_adapter_rows_unsupported(model: torch.nn.Module, adapter_names: Sequence[str | None] | None,
                                    training: bool = False) -> str | None:
    """Why [`sliced_adapter_rows`] (with the same `training`) would enter PEFT's hooks for this batch (None: it
    slices)."""
    if adapter_names is None:
        return "no adapter_names"
    plan = sliced_adapter_rows_plan(model, adapter_names, training)
    return plan if isinstance(plan, str) else None


def _sliced_forward(layer: Any, runs: list[tuple[str, int, int]], adapter_names: list[str], x: torch.Tensor,
                    *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward of a LoRA `Linear` for a batch in runs: base output, plus each run's adapter on its rows."""
    if args or kwargs or x.size(0) != len(adapter_names) or layer.disable_adapters or layer.merged_adapters:
        # anything else (a length mismatch, adapters disabled or merged since, extra arguments) as PEFT does it
        return type(layer).forward(layer, x, *args, **{"adapter_names": adapter_names, **kwargs})
    result = layer.base_layer(x)
    result_dtype = result.dtype
    for name, start, stop in runs:
        lora_A = layer.lora_A[name]
        rows = x[start:stop].to(lora_A.weight.dtype)
        out = layer.lora_B[name](lora_A(layer.lora_dropout[name](rows))) * layer.scaling[name]
        result[start:stop] += out.to(result_dtype)
    return result


def _stack_plan(layer: Any, runs: list[tuple[str, int, int]], rows: int) -> tuple[list[str], Any] | None:
    """The adapters of `runs` in row order and their scaling (one float, or a `[N, 1, 1]` tensor), when this layer can
    apply them all with one batched matmul: every row in a run of one of its adapters, runs of equal length, the
    adapters' A (and B) matrices of one shape and dtype, no LoRA bias, and the same dropout (none, or `nn.Dropout` of
    one probability). None: the layer slices run by run."""
    # the runs are disjoint and in row order (`adapter_runs`): equal lengths that add up to every row cover them all
    lengths = {stop - start for _, start, stop in runs}
    if len(lengths) != 1 or lengths.pop() * len(runs) != rows:
        return None
    adapters = [name for name, _, _ in runs]
    a_weights = [layer.lora_A[name].weight for name in adapters]
    b_layers = [layer.lora_B[name] for name in adapters]
    if len({(w.shape, w.dtype, w.device) for w in a_weights}) != 1 or any(b.bias is not None for b in b_layers):
        return None
    if len({(b.weight.shape, b.weight.dtype, b.weight.device) for b in b_layers}) != 1:
        return None
    dropouts = [layer.lora_dropout[name] for name in adapters]
    if not (all(isinstance(d, torch.nn.Identity) for d in dropouts) or (
            all(type(d) is torch.nn.Dropout for d in dropouts) and len({d.p for d in dropouts}) == 1)):
        return None
    scalings = [float(layer.scaling[name]) for name in adapters]
    if len(set(scalings)) == 1:
        return adapters, scalings[0]
    return adapters, torch.tensor(scalings, dtype=a_weights[0].dtype, device=a_weights[0].device).view(-1, 1, 1)


def _stacked_forward(layer: Any, adapters: list[str], scaling: Any, adapter_names: list[str], x: torch.Tensor,
                     *args: Any, **kwargs: Any) -> torch.Tensor:
    """The forward of a LoRA `Linear` for N equal runs of rows: base output, plus every adapter on its rows as one
    batched matmul over the stacked A and B matrices (rows viewed as `[N, rows per agent, features]`), so the kernels
    per layer do not grow with N."""
    if args or kwargs or x.size(0) != len(adapter_names) or layer.disable_adapters or layer.merged_adapters:
        return type(layer).forward(layer, x, *args, **{"adapter_names": adapter_names, **kwargs})
    result = layer.base_layer(x)
    lora_a = torch.stack([layer.lora_A[name].weight for name in adapters])  # [N, r, in]
    lora_b = torch.stack([layer.lora_B[name].weight for name in adapters])  # [N, out, r]
    rows = layer.lora_dropout[adapters[0]](x.to(lora_a.dtype)).reshape(len(adapters), -1, x.size(-1))
    out = torch.bmm(torch.bmm(rows, lora_a.transpose(1, 2)), lora_b.transpose(1, 2)) * scaling
    result += out.reshape(result.shape).to(result.dtype)
    return result


# A LoRA layer keeps its sliced forwards by batch layout in its `__dict__` under this name. The same layout gets the
# same forward object again: a compiled forward (`team.compile`) guards on the identity of every layer's `forward`,
# and would compile a new graph for every new object. A few layouts per layer are kept (a trainer's batches have one
# or two); the layer and its forwards reference each other, so they are freed together.
_FORWARDS_ATTRIBUTE = "_trl_marl_sliced_forwards"
_LAYOUTS_KEPT = 8


def _layer_forward(layer: Any, runs: list[tuple[str, int, int]], names: list[str]) -> functools.partial:
    """`layer`'s forward for this layout of rows (the same object as last time for the same layout): stacked when
    [`_stack_plan`] allows it, else run by run."""
    layer_runs = [(name, start, stop) for name, start, stop in runs if name != BASE_ADAPTER and name in layer.lora_A]
    key = (tuple(names), tuple(layer_runs), STACK_ADAPTERS)
    forwards = vars(layer).setdefault(_FORWARDS_ATTRIBUTE, {})
    forward = forwards.get(key)
    if forward is None:
        if len(forwards) >= _LAYOUTS_KEPT:
            forwards.clear()
        stack = _stack_plan(layer, layer_runs, len(names)) if STACK_ADAPTERS else None
        if stack is not None:
            forward = functools.partial(_stacked_forward, layer, stack[0], stack[1], list(names))
        else:
            forward = functools.partial(_sliced_forward, layer, layer_runs, list(names))
        forwards[key] = forward
    return forward


@contextmanager
def sliced_adapter_rows(model: Any, adapter_names: Sequence[str | None] | None, training: bool = False,
                        plan: tuple[list[Any], list[tuple[str, int, int]]] | str | None = None) -> Iterator[bool]:
    """Run `model`'s forwards inside it with one adapter per row, as PEFT's `adapter_names` do.

    When the rows of each adapter form one contiguous run and the model qualifies (see the module docstring), every
    LoRA layer gets a forward that applies each adapter to its slice of rows; else PEFT's forward hooks are entered
    with the same names. Everything is restored on exit, also after an exception. Do not also pass `adapter_names`
    to the forwards inside.

    Args:
        model: A PEFT model (or any model when `adapter_names` is None).
        adapter_names: One adapter name per row of every forward inside (`"__base__"` or None: the base model), or
            None for the active adapter(s) (then it enters PEFT's hooks without names, as `PeftModel.generate` does).
        training: Also slice a model in train mode (a training forward of several agents' rows: autograd gives each
            adapter the gradient of its own rows; LoRA dropout, if any, draws its masks per run). PEFT refuses
            `adapter_names` in train mode, so a batch that cannot be sliced then gets PEFT's error: check
            [`sliced_adapter_rows_unsupported`] first.
        plan: [`sliced_adapter_rows_plan`] of the same model, names and `training`, when the caller already has it.

    Yields:
        True when the layers run sliced, False when PEFT's hooks (or nothing) are in place.

    Raises:
        ValueError: If `adapter_names` is given for a model without PEFT adapters.

    Example:

    ```python
    names = ["agent_0"] * 8 + ["agent_1"] * 8  # rows of agent 0, then of agent 1
    with torch.no_grad(), sliced_adapter_rows(peft_model, names):
        logits = peft_model(input_ids=ids, attention_mask=mask).logits  # no `adapter_names` here
    ```
    """
    if adapter_names is None:
        with model._enable_peft_forward_hooks() if hasattr(model, "_enable_peft_forward_hooks") else nullcontext():
            yield False
        return
    if not hasattr(model, "_enable_peft_forward_hooks"):
        raise ValueError(f"`adapter_names` were given for a {type(model).__name__}, which has no PEFT adapters.")
    names = [BASE_ADAPTER if name is None else name for name in adapter_names]
    if plan is None:
        plan = _plan(model, names, training)
    if isinstance(plan, str):
        with model._enable_peft_forward_hooks(adapter_names=names):
            yield False
        return
    layers, runs = plan
    installed = []
    try:
        for layer in layers:
            forward = _layer_forward(layer, runs, names)
            layer.forward = forward
            installed.append((layer, forward))
        yield True
    finally:
        for layer, forward in installed:
            if vars(layer).get("forward") is forward:
                del layer.forward
