"""How the trl-marl trainers run on several processes: DDP, FSDP2 (`torch.distributed.fsdp.fully_shard`), DeepSpeed.

Both trainers are `transformers.Trainer`s, so `accelerate launch` (or `torchrun`) and accelerate's plugins decide the
strategy. A team differs from the single model that accelerate's sharding support has in mind; handled here:

* **The root is the team.** FSDP2 shards every decoder layer of every agent (the team names them through
  `_no_split_modules`) and leaves the rest (embeddings, final norms, heads) to the root unit, the team, which
  all-gathers them in *its* forward. Agents generate, and the rollout takes old, reference and value forwards, by
  calling their own models, outside that forward. [`rollout_phase`] wraps the rollout methods: it runs one forward
  of the root over no batch first (FSDP2 makes the first module that runs forward its root; without it an agent's
  model would claim the role and the next training step fails), gathers the root's parameters for the whole
  rollout, and frees them afterwards. Under DeepSpeed ZeRO-3 it gathers every parameter instead and lifts the
  engine's partitioning hooks meanwhile, as TRL does for `generate` ([`gathered_zero3`]).
* **Forwards are collectives.** With sharded weights every forward all-gathers, so every process must run the same
  forwards: `generate` keeps every process stepping until all are done (transformers' `synced_gpus`, on for FSDP-
  and ZeRO-3-managed modules), the rollout plays turns in lockstep (`AgentTeam.lockstep`: a process whose episodes
  ended generates a discarded turn, with its random state restored, while others play on), PPO's old/reference/value
  forwards run as many chunks on every process, and evaluation plays as many chunks on every process.
* **CPU processes.** accelerate (1.15) runs FSDP only on GPUs and other accelerators: on CPU processes it ignores an
  FSDP config and falls back to DDP without a word, although FSDP2 itself runs there (gloo has the all-gather and
  reduce-scatter it needs). [`setup_strategy`] turns FSDP on for such a run, so that the same code path can be
  tested on a CPU machine (`tests/test_accelerate.py`).

Refused before training, each with what to use instead: FSDP version 1 (its flat parameters cannot be gathered for
generation outside the root's forward), FSDP's own activation checkpointing (use the trainer's
`gradient_checkpointing`, which in `adapters` mode recomputes every layer with the right agent's adapter), sharded
state dicts (a checkpoint holds every agent as a loadable model: `FULL_STATE_DICT` gathers them), and processes that
the launcher started but accelerate runs alone (no GPU and `use_cpu=False`: each process would train a model of its
own on all the data).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar

import torch
from torch import nn

from .._trl_compat import add_zero3_hooks, enable_fsdp_on_cpu_processes, remove_zero3_hooks

if TYPE_CHECKING:
    from accelerate import Accelerator
    from torch.distributed.fsdp import FSDPModule
    from transformers import TrainingArguments
    from typing_extensions import TypeIs

__all__ = [
    "check_fsdp_plugin",
    "any_process",
    "check_fsdp_request",
    "full_tensor",
    "gather_objects",
    "gathered_root",
    "gathered_rows",
    "gathered_zero3",
    "is_fsdp2_module",
    "missing_chunks",
    "rollout_phase",
    "setup_strategy",
    "zero3_engine",
]

S = TypeVar("S", bound="_RollsOut")
P = ParamSpec("P")
R = TypeVar("R")

FSDP1_MESSAGE = (
    "trl-marl's trainers shard with FSDP2 only: FSDP version 1 keeps each unit's parameters in one flat sharded "
    "tensor that the agents' models cannot use when they generate outside the team's forward. Set `fsdp_version: 2` "
    "in the accelerate config (or `fsdp_config={'version': 2}` in the trainer's config)."
)


def is_fsdp2_module(module: object) -> TypeIs[FSDPModule]:
    """Whether `module` was sharded by FSDP2's `fully_shard` (in place: it is then an `FSDPModule`)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return False
    return isinstance(module, FSDPModule)


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a (possibly FSDP2-sharded) parameter: a `DTensor` is all-gathered (a collective: every
    process must call this for the same parameters in the same order)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


# ---------------------------------------------------------------------------------------------- setup
def requested_fsdp_version(args: TrainingArguments) -> int | None:
    """The FSDP version a run asks for (the trainer config's `fsdp_config`, else `accelerate launch`'s FSDP config),
    or None when it asks for no FSDP."""
    plugin_args = getattr(args, "fsdp_plugin_args", None)
    if plugin_args is not None:
        return int(plugin_args.get("fsdp_version", 2))
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return int(os.environ.get("FSDP_VERSION", "1") or 1)
    return None


def check_fsdp_request(args: TrainingArguments) -> None:
    """Refuse FSDP version 1 before accelerate builds its plugin (which, on a machine without GPU, fails with a
    message about missing devices)."""
    version = requested_fsdp_version(args)
    if version is not None and version != 2:
        raise ValueError(FSDP1_MESSAGE)


def setup_strategy(accelerator: Accelerator, args: TrainingArguments) -> bool:
    """Check the launch and the distributed strategy right after the trainer's `Accelerator` is created.

    Turns FSDP2 on for CPU processes that asked for it (see the module docstring), and raises an error that names
    the fix for everything the trainers cannot run.

    Args:
        accelerator: The trainer's `Accelerator`.
        args: The trainer's config.

    Returns:
        Whether FSDP was turned on here (for CPU processes): the trainer then sets its `is_fsdp_enabled`.
    """
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 and accelerator.num_processes == 1:
        raise RuntimeError(
            f"This script runs as one of {world} processes (WORLD_SIZE={world}), but accelerate trains each of them "
            "alone, so each would train its own copy of the team on all the data: without a GPU, processes need "
            "`use_cpu=True` in the trainer's config (MAGRPOConfig and MultiAgentPPOConfig set it themselves when "
            "they see several processes and no GPU; a config built before the processes started, or another "
            "TrainingArguments, does not). Set `use_cpu=True`, or launch one process."
        )
    enabled = False
    if requested_fsdp_version(args) is not None:
        enabled = enable_fsdp_on_cpu_processes(accelerator.state, args)
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None:
        check_fsdp_plugin(plugin)
    deepspeed = getattr(accelerator.state, "deepspeed_plugin", None)
    if deepspeed is not None and deepspeed.zero_stage == 3 and not deepspeed.zero3_save_16bit_model:
        raise ValueError(
            "Under DeepSpeed ZeRO-3 trl-marl saves every agent as a loadable folder from the weights that DeepSpeed "
            "gathers at save time: set `zero3_save_16bit_model: true` in the accelerate config "
            "(`stage3_gather_16bit_weights_on_model_save: true` in a DeepSpeed JSON config)."
        )
    return enabled


def check_fsdp_plugin(plugin: Any) -> None:
    """Refuse the FSDP settings that a team cannot train or save with (accelerate FSDP plugin)."""
    if getattr(plugin, "fsdp_version", 1) != 2:
        raise ValueError(FSDP1_MESSAGE)
    if getattr(plugin, "activation_checkpointing", False):
        raise ValueError(
            "FSDP's own activation checkpointing (`fsdp_activation_checkpointing: true`) would recompute every "
            "layer with whichever LoRA adapter is active at the time, which in `adapters` mode is the wrong agent's. "
            "Set it to false and use the trainer's `gradient_checkpointing=True` instead (it checkpoints every "
            "agent's layers and recomputes each with its own adapter)."
        )
    if "SHARDED" in str(getattr(plugin, "state_dict_type", "")):
        raise ValueError(
            "trl-marl saves every agent of a team as a model (or adapter) folder that loads on its own, which needs "
            "the full weights: set `fsdp_state_dict_type: FULL_STATE_DICT` (SHARDED_STATE_DICT would leave "
            "checkpoints without the agents' weights)."
        )


# ---------------------------------------------------------------------------------------------- rollouts
@contextmanager
def gathered_root(root: nn.Module) -> Any:
    """The root unit's parameters gathered for a rollout (nothing to do unless `root` is FSDP2-sharded)."""
    if not is_fsdp2_module(root):
        yield
        return
    with torch.no_grad():
        root([])  # a forward over no batch: FSDP2 takes the first module to run forward as its root
    root.unshard()
    try:
        yield
    finally:
        root.reshard()


def zero3_engine(engine: Any, state: Any) -> Any:
    """`engine` (a trainer's `deepspeed`, or None) when the accelerator `state` partitions the weights (ZeRO-3), else
    None."""
    plugin = getattr(state, "deepspeed_plugin", None)
    return engine if engine is not None and plugin is not None and plugin.zero_stage == 3 else None


@contextmanager
def gathered_zero3(engine: Any) -> Any:
    """Every parameter of a DeepSpeed ZeRO-3 `engine` gathered and its partitioning hooks removed (as TRL gathers a
    policy for `generate`), so that the agents' models run outside the engine's forward; nothing when `engine` is
    None ([`zero3_engine`])."""
    if engine is None:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
        remove_zero3_hooks(engine)
        try:
            yield
        finally:
            add_zero3_hooks(engine)


def gather_objects(accelerator: Accelerator, items: list[Any]) -> list[Any]:
    """All processes' items (in process order); the items themselves on a single process."""
    if accelerator.num_processes == 1:
        return items
    from accelerate.utils import gather_object

    return gather_object(items)


def missing_chunks(accelerator: Accelerator, count: int) -> int:
    """How many chunks fewer than the busiest process this one has to play (under sharded weights)."""
    counts = gather_objects(accelerator, [count])
    return max(counts) - count


def any_process(accelerator: Accelerator, active: bool) -> bool:
    """Whether `active` holds on any process (a collective: every process calls it)."""
    flag = torch.tensor([int(active)], device=accelerator.device)
    return bool(accelerator.reduce(flag, reduction="sum").item())


class _RollsOut(Protocol):
    def rollout_context(self) -> AbstractContextManager[None]: ...


def rollout_phase(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Decorate a trainer method that generates or scores without gradients (a rollout, an evaluation episode): it
    runs in the trainer's `rollout_context()` (`TeamTrainer.rollout_context`)."""

    @functools.wraps(method)
    def wrapper(self: S, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.rollout_context():
            return method(self, *args, **kwargs)

    return wrapper


def gathered_rows(accelerator: Accelerator, rows: torch.Tensor) -> torch.Tensor:
    """The rows of a float `(N, C)` tensor of every process, concatenated in process order (a collective).

    N may differ between processes: each pads its rows to the longest with NaN rows, and the rows whose first column
    is NaN are dropped after the gather, so the first column must hold no NaN (the rollout sends the turn there).
    This is the `gather` of the MAGRPO trainer's rollout (`trl_marl.rollout.JointRollout`), through which
    `advantage_mode="batch"` takes the std of every process's returns, as TRL's `GRPOTrainer` does.

    Example: with two processes holding rows `[[1, 0.5]]` and `[[1, 2.0], [2, 3.0]]`, both get
    `[[1, 0.5], [1, 2.0], [2, 3.0]]`.
    """
    if accelerator.num_processes == 1:
        return rows
    local = rows.to(accelerator.device)
    padded = accelerator.pad_across_processes(local, dim=0, pad_index=float("nan"))
    pooled = accelerator.gather(padded).to(rows.device)
    return pooled[~torch.isnan(pooled[:, 0])]
