"""Switching the active LoRA adapter of a PEFT model at the cost of its adapter layers, not of its module tree.

An `adapters` team runs every agent on one base model with one LoRA adapter per agent, and a training step switches
the active adapter before each agent's forward (and back, in the recomputation of activation checkpointing). PEFT's
`PeftModel.set_adapter` walks every module of the model twice (auxiliary wrappers, then adapter layers), and resets
the trainable flags of every adapter but the active one, which the team must then set back (`set_requires_grad`
walks the tree again). On a 4-layer model with two adapters that is about 1.2 ms a switch on one CPU thread, several
times a step; on a 24-layer model with LoRA on every projection it grows with the module count.

[`AdapterSwitch`] finds the adapter layers once and switches with each layer's own `set_adapter` (the public
per-layer API), then sets the trainable flags from a cached parameter list. The result is the state
`model.set_adapter(name)` followed by `model.set_requires_grad(trainable, True)` leaves, except that an adapter
outside `trainable` (a frozen agent) stays frozen when it becomes the active one. Models it cannot switch this way
(auxiliary modules such as `modules_to_save`, merged adapters, prompt-learning methods, variants that
declare some of their weights frozen) take PEFT's own path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


def _tuner_layer_class() -> type | None:
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:  # pragma: no cover - peft is a dependency
        return None
    return BaseTunerLayer


def _auxiliary_wrapper_class() -> type | None:
    try:
        from peft.utils.other import AuxiliaryTrainingWrapper
    except ImportError:  # older PEFT: no auxiliary wrappers to care about
        return None
    return AuxiliaryTrainingWrapper


class AdapterSwitch:
    """Switch between the adapters of one PEFT model without walking its module tree.

    Args:
        model: A `peft.PeftModel` whose adapters are all loaded (adding or deleting adapters afterwards needs a new
            `AdapterSwitch`).

    Example:
        ```python
        switch = AdapterSwitch(peft_model)
        switch.activate("agent_1", trainable=["agent_0", "agent_1"])
        assert peft_model.active_adapter == "agent_1"
        ```
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        layer_cls, aux_cls = _tuner_layer_class(), _auxiliary_wrapper_class()
        modules = list(model.modules())
        self.layers = [m for m in modules if layer_cls is not None and isinstance(m, layer_cls)]
        has_auxiliary = aux_cls is not None and any(isinstance(m, aux_cls) for m in modules)
        configs = getattr(model, "peft_config", {})
        prompt_learning = any(getattr(c, "is_prompt_learning", False) for c in configs.values())
        declared_frozen = any(getattr(layer, "frozen_peft_weight_names", None) for layer in self.layers)
        self.fast = bool(self.layers) and not (has_auxiliary or prompt_learning or declared_frozen)
        self._params: dict[str, list[torch.nn.Parameter]] = {}
        for layer in self.layers:
            for attribute in getattr(layer, "adapter_layer_names", ()):
                container = getattr(layer, attribute, None)
                if not hasattr(container, "items"):
                    continue
                for name, sub in container.items():
                    params = [sub] if isinstance(sub, torch.nn.Parameter) else list(sub.parameters())
                    self._params.setdefault(name, []).extend(params)

    def activate(self, name: str, trainable: Sequence[str]) -> None:
        """Make `name` the active adapter; afterwards exactly the adapters in `trainable` require gradients.

        Raises:
            ValueError: If the model has no adapter `name`.
        """
        model = self.model
        if name not in getattr(model, "peft_config", {}):
            raise ValueError(f"Adapter {name!r} not found; the model has {sorted(model.peft_config)}.")
        if not self.fast or any(getattr(layer, "merged", False) for layer in self.layers):
            model.set_adapter(name)
            if trainable:
                model.set_requires_grad(list(trainable), requires_grad=True)
            if name not in trainable:
                model.set_requires_grad([name], requires_grad=False)
            return
        for layer in self.layers:
            layer.set_adapter(name)
        model.active_adapter = name
        model.base_model.active_adapter = name
        keep = set(trainable)
        for adapter, params in self._params.items():
            flag = adapter in keep
            for param in params:
                if param.requires_grad != flag:
                    param.requires_grad_(flag)
