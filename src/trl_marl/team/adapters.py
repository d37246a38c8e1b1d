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

[`AdapterControl`] is the part of `AgentTeam` that uses it (`team.adapter_control`, an object the team has): it
activates an agent's adapter before its forward, keeps the agents that are not trained (`frozen`), and enables
activation checkpointing so that the backward recomputes each layer with the adapter (or, for a forward over several
agents' rows, the adapters) that ran it.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from transformers import PreTrainedModel

from .compile import CompiledForward
from .mixed_adapters import sliced_adapter_rows

if TYPE_CHECKING:
    from peft.tuners.tuners_utils import BaseTunerLayer
    from peft.utils.other import AuxiliaryTrainingWrapper


def _tuner_layer_class() -> type[BaseTunerLayer] | None:
    try:
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:  # pragma: no cover - peft is a dependency
        return None
    return BaseTunerLayer


def _auxiliary_wrapper_class() -> type[AuxiliaryTrainingWrapper] | None:
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
                if container is None or not hasattr(container, "items"):
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


class AdapterControl:
    """The active adapter and activation checkpointing of an `AgentTeam` (`team.adapter_control`).

    It reads the team's models and adapters, and its log-probability forwards' `forward_call` and joint rows; it holds
    the agents whose weights are not trained (`frozen`, which `AgentTeam.freeze_agents` fills and `team.frozen` reads),
    one [`AdapterSwitch`] per PEFT model (made on its first switch) and the activation checkpointing arguments in use.

    Args:
        team: The `AgentTeam` it controls (a plain reference: the control is no submodule of the team).
    """

    def __init__(self, team: Any) -> None:
        self.team = team
        self.frozen: set[int] = set()  # agents whose weights are not trained (see `AgentTeam.freeze_agents`)
        self.switches: dict[int, AdapterSwitch] = {}  # per PEFT model (by `id`), made on the first switch
        self.checkpointing_kwargs: dict | None = None  # set by `activation_checkpointing_enable`
        # adapters beside the agents' on the team's PEFT models (PPO's adapter critics): name -> trained or not
        self.other_adapters: dict[str, bool] = {}

    def activate(self, agent_index: int) -> PreTrainedModel:
        """Make agent `agent_index`'s adapter the active one while keeping every adapter trainable; returns the
        model the agent runs."""
        team = self.team
        model = team.policy(agent_index)
        name = team.agent_adapter[agent_index]
        if name is not None:  # (a no-op when it is already the active one: always, for a model with one adapter)
            self.set_active_adapter(model, name)
        return model

    def trainable_adapters(self) -> list[str]:
        """The adapters the optimizer updates: every agent's but the frozen ones', and the trained ones of
        `other_adapters`."""
        agents = [a for i, a in enumerate(self.team.agent_adapter) if a is not None and i not in self.frozen]
        return agents + [name for name, trained in self.other_adapters.items() if trained]

    def add_adapter(self, model: Any, name: str, config: Any, trained: bool = True) -> None:
        """Add adapter `name` (a PEFT config) beside the agents' on `model`, one of the team's PEFT models; it is
        trained unless `trained=False`. Every other adapter keeps its trainable flag (`add_adapter` alone leaves only
        the active adapter trainable).

        Raises:
            ValueError: `model` already has an adapter `name`.
        """
        from ..utils.quiet import peft_quietly

        if name in model.peft_config:
            raise ValueError(f"The model already has an adapter named {name!r}: adapters {sorted(model.peft_config)}.")
        with peft_quietly():
            model.add_adapter(name, config)
        self.other_adapters[name] = trained
        self.switches.pop(id(model), None)  # a switch knows the adapters that existed when it was made
        self.reset_trainable_flags(model)

    def set_trained(self, name: str, trained: bool) -> None:
        """Train adapter `name` of `other_adapters` or not (a frozen agent's critic)."""
        self.other_adapters[name] = trained
        for model in self.team.models:
            if name in getattr(model, "peft_config", {}):
                self.reset_trainable_flags(model)

    def reset_trainable_flags(self, model: Any) -> None:
        """Make exactly `trainable_adapters()` of `model`'s adapters require gradients."""
        trainable = set(self.trainable_adapters())
        mine = list(model.peft_config)
        if any(name in trainable for name in mine):
            model.set_requires_grad([name for name in mine if name in trainable], requires_grad=True)
        if any(name not in trainable for name in mine):
            model.set_requires_grad([name for name in mine if name not in trainable], requires_grad=False)

    def set_active_adapter(self, model: torch.nn.Module, name: str) -> None:
        """Make `name` the active adapter of `model` (a PEFT model of the team); the adapters of every agent but the
        frozen ones stay trainable."""
        if model.active_adapter != name:
            switch = self.switches.get(id(model))
            if switch is None or switch.model is not model:
                switch = self.switches[id(model)] = AdapterSwitch(model)
            # every adapter but the frozen agents' stays trainable: the optimizer keeps updating all of them
            switch.activate(name, self.trainable_adapters())

    def checkpoint_contexts(self, user_context_fn: Any = None) -> tuple[Any, Any]:
        """`context_fn` of `torch.utils.checkpoint.checkpoint` for PEFT models with several adapters.

        The agents of one forward (and PPO's adapter critics) share the checkpointed layers but not the active
        adapter, and the backward recomputes every layer after the last forward: the recomputation must run with the
        adapter that was active when the layer first ran, or every agent but the last gets the gradients of the wrong
        policy. A joint forward over several agents' rows (`_joint_logps`) is recomputed with each row's adapter again.
        """
        model = self.team.models[0]
        active = [(m, m.active_adapter) for m in self._multi_adapter_models()]
        joint_rows = self.team.logprob_forwards._joint_rows  # a forward over several agents' rows (`_joint_logps`)
        forward_ctx, recompute_ctx = user_context_fn() if user_context_fn else (nullcontext(), nullcontext())

        @contextmanager
        def recompute() -> Any:
            if joint_rows is not None:  # each row through its agent's adapter again (the forward's plan)
                names, plan = joint_rows
                with sliced_adapter_rows(model, names, training=True, plan=plan), recompute_ctx:
                    yield
                return
            previous = [(m, m.active_adapter) for m, _ in active]
            for m, name in active:
                self.set_active_adapter(m, name)
            try:
                with recompute_ctx:
                    yield
            finally:
                for m, name in previous:
                    self.set_active_adapter(m, name)

        return forward_ctx, recompute()

    def _multi_adapter_models(self) -> list[Any]:
        """The team's PEFT models that hold more than one adapter (the active one changes between forwards)."""
        return [m for m in self.team.models if len(getattr(m, "peft_config", {})) > 1]

    def activation_checkpointing_enable(
        self,
        activation_checkpointing_kwargs: dict | None = None,
        every_n_layers: int = 1,
        offload: bool = False,
        gradient_checkpointing_kwargs: dict | None = None,
    ) -> None:
        """Enable activation (gradient) checkpointing in every model (called by `transformers.Trainer`).

        Every layer is checkpointed; checkpointing only every n-th layer and offloading activations are not
        supported for teams and raise an error rather than being ignored.
        """
        if every_n_layers != 1 or offload:
            raise ValueError(
                "AgentTeam checkpoints every layer: remove `every_n_layers`/`offload` from "
                "`activation_checkpointing_kwargs`."
            )
        kwargs = dict(activation_checkpointing_kwargs or gradient_checkpointing_kwargs or {"use_reentrant": False})
        self.checkpointing_kwargs = dict(kwargs)  # (`compile_forwards` enables it again)
        team = self.team
        if self._multi_adapter_models():
            if kwargs.setdefault("use_reentrant", False):
                raise ValueError(
                    "`adapters` mode needs non-reentrant activation checkpointing (`use_reentrant=False`): the "
                    "recomputation in the backward must switch to each agent's adapter."
                )
            # A compiled forward's backward recomputes from its graph, whose inputs are the adapter weights that the
            # forward used (and dynamo refuses a `context_fn` that is not a pair of dispatch modes).
            if not isinstance(team.logprob_forwards.forward_call, CompiledForward):
                kwargs["context_fn"] = partial(self.checkpoint_contexts, kwargs.get("context_fn"))
        for model in team.models:
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            if hasattr(base, "activation_checkpointing_enable"):  # transformers' current name (5.2x)
                base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if hasattr(model, "enable_input_require_grads"):
                model.enable_input_require_grads()
