"""One backward per agent: the loop that MAGRPO and multi-agent PPO share ([`backward_per_agent`]).

This docstring is the one place that argues why the loop is exact, for both trainers, and when it runs; the trainers,
their `backward_per_agent` config fields and docs/*.md link here.

A team's loss is a sum of per-agent terms, ``L = sum_a L_a``, where ``L_a`` reads agent ``a``'s micro-batch and
weights only:

* MAGRPO (one term per trained agent, `MAGRPOConfig.backward_per_agent`): agent ``a``'s advantages, reference and old
  log-probs are fixed before the step, the `loss_type="dapo"` normaliser counts the tokens of the whole step in
  advance, and agent ``a``'s `top_entropy_quantile` token mask and entropy bonus read agent ``a``'s entropies only;
* multi-agent PPO (one term per policy slot, ``L_s = pg_loss_s + vf_coef * vf_loss_s``,
  `MultiAgentPPOConfig.backward_per_agent`): old log-probs, values, advantages and returns are fixed by the rollout
  (each slot's advantages whitened then); a term may also reach a value model that several slots share (the
  centralized critic).

Then ``grad L = sum_a grad L_a``, and taking agent ``a``'s forward, loss and backward before agent ``a + 1``'s gives
the gradient of one backward of the sum (up to the order of floating-point sums) while only one agent's forward
graph (its `(B, L, vocab)` logits among it) is alive at a time. A weight that several terms reach (PPO's centralized
critic, the one policy of a `shared` team) gets each term's gradient added to its `.grad` by the backwards in turn,
as one backward of the sum adds them.

[`backward_per_agent`] is that loop: for each agent in turn, the trainer's closure runs the agent's forward and
loss, the loop takes its backward and frees its graph before the next agent's forward. MAGRPO calls it with one
closure per trained agent (`MAGRPOTrainer.training_step`), multi-agent PPO with one per trained policy slot
(`MultiAgentPPOTrainer`'s micro-steps); neither passes a frozen agent (`frozen_agents`), whose weights get no
gradient.

When a trainer takes it: its config's `backward_per_agent` (default True), its own loss step (MAGRPO's
`compute_loss`; PPO's `_ppo_micro_step`, with two or more policy slots): a subclass that overrides that step gets the
summed loss and one backward, as `transformers.Trainer.training_step` takes it (what each hook then sees:
docs/extending.md), and a setup that [`backward_per_agent_supported`] accepts: the trainer's module run as is or
wrapped by DistributedDataParallel. Sharded weights (FSDP2, DeepSpeed) and optimizers that update inside the
backward (LOMO) take one backward of the summed loss: their engines count or hook backwards per step.
`backward_per_agent=False` takes the summed loss everywhere; then an `adapters` team runs every agent's rows as one
forward through the shared base model (fewer, larger forwards, every agent's activations in memory: docs/magrpo.md).

Under DDP ([`agent_backwards`]) the agents' forwards and backwards run under `no_sync` (DDP's reducer expects one
backward per forward, each touching every trained parameter), and at a micro-step that synchronises (the last of an
accumulation window, where DDP would all-reduce) [`average_gradients`] averages every trained parameter's gradient
over the processes as DDP's reducer does (each process's gradient divided by the number of processes, then summed).
DDP's own communication hooks (`ddp_kwargs` `comm_hook`) and its broadcast of module buffers before a synchronising
forward are then not used: a language model's buffers (e.g. rotary frequencies) are constants; the trainers'
`backward_per_agent=False` keeps DDP's reducer for a setup that needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, overload

import torch
from torch.nn.parallel import DistributedDataParallel

from .distributed import is_fsdp2_module

if TYPE_CHECKING:
    from .magrpo.config import MAGRPOConfig
    from .ppo.config import MultiAgentPPOConfig

__all__ = ["agent_backwards", "average_gradients", "backward_per_agent", "backward_per_agent_supported"]

BUCKET_BYTES = 25 * 2**20  # gradients all-reduced per call, as DDP's default bucket


def backward_per_agent_supported(args: MAGRPOConfig | MultiAgentPPOConfig, model: torch.nn.Module,
                                  root: torch.nn.Module) -> bool:
    """Whether a training step may take one backward per agent (see the module docstring).

    Args:
        args: The trainer's config (its `optim` is read).
        model: The module the step runs: the trainer's own module, or that module wrapped by accelerate.
        root: The trainer's own module (`MAGRPOTrainer.team`, `MultiAgentPPOTrainer.wrapper`).

    Example:

    ```python
    >>> from types import SimpleNamespace
    >>> import torch
    >>> root = torch.nn.Linear(2, 2)
    >>> backward_per_agent_supported(SimpleNamespace(optim="adamw_torch"), root, root)
    True
    >>> backward_per_agent_supported(SimpleNamespace(optim="lomo"), root, root)
    False
    ```
    """
    from transformers.training_args import OptimizerNames

    if args.optim in (OptimizerNames.LOMO, OptimizerNames.ADALOMO):  # they update inside the backward
        return False
    inner = model.module if isinstance(model, DistributedDataParallel) else model
    return inner is root and not is_fsdp2_module(inner)  # a DeepSpeed engine is not `root`


@contextmanager
def agent_backwards(model: torch.nn.Module, num_processes: int, synchronise: bool | None = None) -> Iterator[None]:
    """The context of one micro-step's per-agent forwards and backwards: under DDP they run under `no_sync`, and
    when the micro-step synchronises the gradients are averaged over the processes on leaving (not when an error
    leaves it). Outside DDP it does nothing.

    Args:
        model: The module the step runs (DDP-wrapped or not).
        num_processes: The number of processes.
        synchronise: Whether this micro-step ends an accumulation window. Default: what DDP would do, i.e. not under
            an enclosing `no_sync` (`model.require_backward_grad_sync`, read before this context's own `no_sync`).
    """
    ddp = model if isinstance(model, DistributedDataParallel) else None
    if synchronise is None:
        synchronise = ddp is not None and ddp.require_backward_grad_sync
    with ddp.no_sync() if ddp is not None else nullcontext():
        yield
    if ddp is not None and synchronise:
        average_gradients(ddp.module, num_processes)


@overload
def backward_per_agent(model: torch.nn.Module, num_processes: int, agents: Iterable[int],
                       agent_loss: Callable[[int], torch.Tensor | None], backward: Callable[[torch.Tensor], None],
                       synchronise: bool | None = None, *, fallback: Callable[[], torch.Tensor]) -> torch.Tensor: ...


@overload
def backward_per_agent(model: torch.nn.Module, num_processes: int, agents: Iterable[int],
                       agent_loss: Callable[[int], torch.Tensor | None], backward: Callable[[torch.Tensor], None],
                       synchronise: bool | None = None, fallback: None = None) -> torch.Tensor | None: ...


def backward_per_agent(
    model: torch.nn.Module,
    num_processes: int,
    agents: Iterable[int],
    agent_loss: Callable[[int], torch.Tensor | None],
    backward: Callable[[torch.Tensor], None],
    synchronise: bool | None = None,
    fallback: Callable[[], torch.Tensor] | None = None,
) -> torch.Tensor | None:
    """One micro-step with a forward, loss and backward per agent, in [`agent_backwards`]; returns the detached sum
    of the agents' losses (`None` when no agent had one and there is no `fallback`).

    Args:
        model: The module the step runs (DDP-wrapped or not).
        num_processes: The number of processes.
        agents: The agents (or policy slots) to take, in order.
        agent_loss: `agent_loss(a)` runs agent `a`'s forward and returns its loss (`None`: nothing to backpropagate,
            e.g. a non-finite loss). Its graph is freed once its backward ran, before the next agent's forward.
        backward: Backpropagates one agent's loss (e.g. `accelerator.backward`, with any scaling it applies).
        synchronise: As for [`agent_backwards`].
        fallback: When no agent gave a loss, a loss to backpropagate instead (e.g. a zero loss that touches every
            trained parameter), inside the same context.
    """
    total: torch.Tensor | None = None
    with agent_backwards(model, num_processes, synchronise):
        for agent in agents:
            loss = agent_loss(agent)
            if loss is not None:
                backward(loss)
                total = loss.detach() if total is None else total + loss.detach()
            del loss  # agent a's graph is gone before agent a + 1's forward
        if total is None and fallback is not None:
            loss = fallback()
            backward(loss)
            total = loss.detach()
    return total


@torch.no_grad()
def average_gradients(module: torch.nn.Module, num_processes: int) -> None:
    """Average the gradient of every trained parameter of `module` over the processes, as DDP's reducer does at a
    synchronising backward: each gradient is divided by `num_processes`, then summed over the processes (in buckets
    of about 25 MiB). A parameter that has no gradient on some process counts zeros there; one that has none on any
    process keeps none (as DDP leaves a parameter no process used)."""
    import torch.distributed as dist

    params = [p for p in module.parameters() if p.requires_grad]
    if not params or num_processes == 1:
        return
    device = params[0].device
    has_grad = torch.tensor([float(p.grad is not None) for p in params], device=device)
    dist.all_reduce(has_grad)
    params = [p for p, count in zip(params, has_grad.tolist()) if count > 0]
    bucket: list[torch.nn.Parameter] = []
    size = 0
    for i, param in enumerate(params):
        bucket.append(param)
        size += param.numel() * param.element_size()
        following = params[i + 1] if i + 1 < len(params) else None
        if (following is None or size >= BUCKET_BYTES or following.dtype != param.dtype
                or following.device != param.device):
            _all_reduce_bucket(bucket, num_processes)
            bucket, size = [], 0


def _all_reduce_bucket(params: list[torch.nn.Parameter], num_processes: int) -> None:
    import torch.distributed as dist

    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    flat.div_(num_processes)
    dist.all_reduce(flat)
    for param, chunk in zip(params, flat.split([p.numel() for p in params])):
        if param.grad is None:
            param.grad = chunk.view_as(param).clone()
        else:
            param.grad.copy_(chunk.view_as(param.grad))
