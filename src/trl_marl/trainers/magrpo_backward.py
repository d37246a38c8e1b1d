"""MAGRPO's training step with one backward per agent, so that only one agent's activations are alive at a time.

The team loss is a sum over the trained agents, ``L = sum_a L_a``, and each ``L_a`` depends on agent ``a``'s
micro-batch and policy only: its advantages, reference and old log-probs are fixed before the step, the
`loss_type="dapo"` normaliser counts tokens of the whole step in advance, and the `top_entropy_quantile` token mask
and the entropy bonus of agent ``a`` read agent ``a``'s entropies only. So ``grad L = sum_a grad L_a``: taking agent
``a``'s forward, loss and backward, then agent ``a + 1``'s, accumulates the same gradient (up to the order of
floating-point sums) as the summed loss with one backward, which `transformers.Trainer.training_step` takes. The
difference is memory: one backward of the sum keeps every agent's forward graph (its `(B, L, vocab)` logits among
it) until the end, the loop frees agent ``a``'s before agent ``a + 1``'s forward.

[`agent_loss`] is agent ``a``'s term with its metrics, shared by both ways (`MAGRPOTrainer.compute_loss` sums it).
[`takes_backward_per_agent`] says which way a step goes: the loop needs `MAGRPOConfig.backward_per_agent`, the
trainer's own `compute_loss` (a subclass that overrides it keeps the summed loss, so its override is honoured), and
a setup that `agent_backward.backward_per_agent_supported` accepts (the team run as is or wrapped by
DistributedDataParallel; not FSDP2, DeepSpeed or LOMO). Under DDP the backwards run in
`agent_backward.agent_backwards` (`no_sync`, then the trainer's own gradient averaging at a synchronising micro-step),
which multi-agent PPO's backward per policy slot (`ppo_backward`) shares.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core import masked_mean
from .agent_backward import agent_backwards, backward_per_agent_supported
from .magrpo_steps import agent_high_entropy_mask

__all__ = ["agent_loss", "backward_per_agent", "takes_backward_per_agent", "zero_loss"]


def agent_loss(trainer: Any, agent: int, logps: torch.Tensor, entropy: torch.Tensor, inputs: dict[str, Any],
               mode: str) -> torch.Tensor | None:
    """Agent `agent`'s term of the MAGRPO loss, its metrics logged: `trainer.compute_agent_loss`, divided by the
    accumulation steps in training (except for `dapo`), minus the entropy bonus; `None` (counted under
    `nonfinite/loss`) when it is not finite.

    `inputs["entropy"][agent]` and `inputs["entropy_mask"][agent]` must be set.
    """
    args = trainer.args
    bonus = trainer.entropy_control
    metrics = trainer._metrics[mode]
    mask = inputs["batches"][agent].completion_mask
    loss, kl, clipped = trainer.compute_agent_loss(agent, logps, inputs)
    if mode == "train" and args.loss_type != "dapo":
        loss = loss / trainer.current_gradient_accumulation_steps
    prefix = f"agent_{agent}/"
    if bonus.enabled:  # over the tokens the policy loss acts on, scaled for accumulation only (as TRL)
        metrics[prefix + "policy_loss"].append(float(loss.detach()))
        tokens = mask if inputs["entropy_mask"][agent] is None else mask * inputs["entropy_mask"][agent]
        scale = trainer.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = loss - bonus.bonus(agent, entropy, tokens, scale, train=mode == "train")
    if not torch.isfinite(loss):
        trainer._count_nonfinite(1, "loss")
        return None
    fmask = mask.float()
    metrics[prefix + "entropy"].append(float(masked_mean(entropy.detach(), fmask)) if fmask.sum() else 0.0)
    if mode == "train":
        trainer._step_entropy[agent][0] += float((entropy.detach() * fmask).sum())
        trainer._step_entropy[agent][1] += float(fmask.sum())
    if kl is not None:
        metrics[prefix + "kl"].append(float(masked_mean(kl.detach(), fmask)) if fmask.sum() else 0.0)
    clip_mask = clipped.expand_as(fmask).float() if clipped.dim() == 2 else clipped.float()
    metrics[prefix + "clip_ratio"].append(float(masked_mean(clip_mask, fmask)) if fmask.sum() else 0.0)
    metrics[prefix + "loss"].append(float(loss.detach()))
    return loss


def zero_loss(model: torch.nn.Module) -> torch.Tensor:
    """A zero loss that touches every trained parameter (when every agent's loss was non-finite)."""
    return sum((p.sum() * 0.0 for p in model.parameters() if p.requires_grad), torch.zeros(()))


def takes_backward_per_agent(trainer: Any, model: torch.nn.Module, own_compute_loss: bool) -> bool:
    """Whether `trainer.training_step` takes a backward per agent (see the module docstring) or one of the sum.

    Args:
        trainer: The `MAGRPOTrainer`.
        model: The module `training_step` received: the team, or the team wrapped by accelerate.
        own_compute_loss: Whether `trainer.compute_loss` is `MAGRPOTrainer`'s (not a subclass's override).
    """
    if not (trainer.args.backward_per_agent and own_compute_loss):
        return False
    return backward_per_agent_supported(trainer.args, model, trainer.team)


def backward_per_agent(trainer: Any, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
    """One training micro-step of `trainer` on `inputs` (a micro-batch of `_make_batches`) with a forward, loss and
    backward per trained agent; returns the detached sum of the agents' losses, as `compute_loss` would."""
    model.train()
    if callable(getattr(trainer.optimizer, "train", None)):  # schedule-free optimizers, as `Trainer.training_step`
        trainer.optimizer.train()
    frozen = trainer.team.frozen
    batches = inputs["batches"]
    n = len(batches)
    inputs["entropy"] = [None] * n
    inputs["entropy_mask"] = [None] * n
    entropy_grad = trainer.entropy_control.enabled  # entropies with gradients only for a bonus
    total: torch.Tensor | None = None
    # under DDP: `no_sync`, then the gradients averaged when DDP would (not under the trainer's own `no_sync`)
    with agent_backwards(model, trainer.accelerator.num_processes):
        for a, batch in enumerate(batches):
            if a in frozen or batch is None or len(batch) == 0:
                continue
            with trainer.compute_loss_context_manager():
                logps, entropy = model([batch if b == a else None for b in range(n)], compute_entropy=True,
                                       entropy_grad=entropy_grad)[a]
                inputs["entropy"][a] = entropy
                inputs["entropy_mask"][a] = agent_high_entropy_mask(
                    trainer.accelerator, entropy, batch.completion_mask, trainer.args.top_entropy_quantile)
                loss = agent_loss(trainer, a, logps, entropy, inputs, "train")
            if loss is not None:
                trainer.accelerator.backward(loss)
                total = loss.detach() if total is None else total + loss.detach()
            inputs["entropy"][a] = entropy.detach()
            del logps, entropy, loss  # agent a's graph is gone before agent a + 1's forward
        if total is None:  # no agent, or every agent's loss non-finite: zero gradients, as `compute_loss` gives
            with trainer.compute_loss_context_manager():
                loss = zero_loss(model)
            trainer.accelerator.backward(loss)
            total = loss.detach()
    steps = trainer.args.torch_empty_cache_steps
    if steps is not None and trainer.state.global_step % steps == 0:
        from accelerate.utils.memory import clear_device_cache

        clear_device_cache()
    return total
