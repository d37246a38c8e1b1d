"""Multi-agent PPO's micro-step: one backward of the policy slots' summed loss, or one backward per policy slot.

A PPO micro-batch holds samples of every policy slot (an agent, or a (turn, agent) with `policy_sharing=
"agent_turn"`), and its loss is a sum over the slots, ``L = sum_s L_s`` with ``L_s = pg_loss_s + vf_coef *
vf_loss_s`` (`MultiAgentPPOTrainer.compute_agent_loss`). ``L_s`` reads slot ``s``'s samples, policy and value model
only: old log-probs, old values, advantages and returns are fixed by the rollout before the PPO epochs, and each
slot's advantages were whitened then. So ``grad L = sum_s grad L_s``. `MultiAgentPPOTrainer._ppo_micro_step` runs
every slot's forward and sums the losses for one backward; [`backward_per_slot`] runs slot ``s``'s forward (policy
log-probs and values), loss and backward, then slot ``s + 1``'s, so that one slot's graph (its `(B, L, vocab)`
logits among it) is alive at a time instead of every slot's. A value model that several slots share (the
centralized critic, `critic="centralized"`; the team's one critic with `policy_sharing="shared"`) gets each slot's
value-loss gradient added to its `.grad` in turn, as the summed backward adds them. The logged statistics are the
same either way: [`slot_loss`] computes a slot's loss and fills its column of the step's `stats`.

[`takes_backward_per_slot`] says which way a run goes: the loop needs `MultiAgentPPOConfig.backward_per_agent`, two
or more policy slots (with one there is one backward either way, and DDP's own reducer is kept), the trainer's own
`_ppo_micro_step` (a subclass that overrides it keeps the summed loss, so its override is honoured; the public hook
`compute_agent_loss` is called per slot both ways), and a setup that `agent_backward.backward_per_agent_supported`
accepts (not FSDP2, DeepSpeed or LOMO). Under DDP the slots' backwards run in `agent_backward.agent_backwards`:
under `no_sync`, and at the micro-step that ends an accumulation window the trainer averages the gradients over the
processes itself (every trained parameter's, the value models' included), the logic MAGRPO's `magrpo_backward` uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core import entropy_from_logits
from ..core.ppo import INVALID_LOGPROB
from .agent_backward import agent_backwards, backward_per_agent_supported
from .ppo_rollout import AgentRollout

__all__ = ["backward_per_slot", "micro_batches", "slot_loss", "takes_backward_per_slot"]

SlotBatch = tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, int]


def micro_batches(rollouts: Sequence[AgentRollout | None], indices: dict[int, torch.Tensor]) -> list[SlotBatch | None]:
    """Each slot's `(query_responses, context, responses, value_query_responses, value_context)` rows of the
    micro-batch `indices[slot]` (the input of `PolicyValueTeam.forward`); `None` for a slot without samples in it."""
    return [
        None
        if ro is None or slot not in indices
        else (
            ro.query_responses[indices[slot]],
            ro.context_length,
            ro.responses[indices[slot]],
            ro.value_query_responses[indices[slot]],
            ro.value_context_length,
        )
        for slot, ro in enumerate(rollouts)
    ]


def slot_loss(
    trainer: Any,
    slot: int,
    output: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    rollouts: Sequence[AgentRollout | None],
    indices: dict[int, torch.Tensor],
    stats: dict[str, torch.Tensor],
    where: tuple[int, int, int],
) -> torch.Tensor:
    """Slot `slot`'s PPO loss on its micro-batch (`trainer.compute_agent_loss` of its masked log-probs and values),
    not divided by the accumulation steps; fills the slot's column of `stats` at `where` (epoch, mini-batch,
    micro-batch): `approxkl`, the loss statistics and the mean entropy.

    Args:
        trainer: The `MultiAgentPPOTrainer`.
        slot: The policy slot.
        output: `(logits, new log-probs, values)` of the slot (`PolicyValueTeam.forward`).
        rollouts: Every slot's samples (`None` for a slot without any); a slot's stats column counts the slots
            with samples before it.
        indices: Each slot's sample indices in this micro-batch.
        stats: The update's statistics, `(epochs, mini-batches, micro-batches, slots with samples)` each.
        where: `(epoch, mini-batch, micro-batch)`.
    """
    ro, idx = rollouts[slot], indices[slot]
    column = [s for s, r in enumerate(rollouts) if r is not None].index(slot)
    logits, new_logprobs, vpred = output
    new_logprobs = torch.masked_fill(new_logprobs, ~ro.policy_mask[idx], INVALID_LOGPROB)
    vpred = torch.masked_fill(vpred, ~ro.value_mask[idx], 0)
    loss, loss_stats = trainer.compute_agent_loss(slot, new_logprobs, vpred, ro, idx)
    with torch.no_grad():
        e, m, k = where
        log_diff = new_logprobs - ro.logprobs[idx]
        stats["approxkl"][e, m, k, column] = 0.5 * (log_diff**2).mean()
        for key, value in loss_stats.items():
            stats[key][e, m, k, column] = value
        stats["entropy"][e, m, k, column] = entropy_from_logits(logits).mean()
    return loss


def takes_backward_per_slot(trainer: Any, model: torch.nn.Module, own_micro_step: bool) -> bool:
    """Whether the PPO loop takes a backward per policy slot (see the module docstring) or one of the summed loss.

    Args:
        trainer: The `MultiAgentPPOTrainer`.
        model: The module the loop trains: the trainer's `wrapper`, or the wrapper as accelerate prepared it.
        own_micro_step: Whether `trainer._ppo_micro_step` is `MultiAgentPPOTrainer`'s (not a subclass's override).
    """
    if not (trainer.args.backward_per_agent and own_micro_step) or trainer.team.num_agents < 2:
        return False
    return backward_per_agent_supported(trainer.args, model, trainer.wrapper)


def backward_per_slot(
    trainer: Any,
    model: torch.nn.Module,
    rollouts: Sequence[AgentRollout | None],
    indices: dict[int, torch.Tensor],
    pads: Sequence[int],
    stats: dict[str, torch.Tensor],
    where: tuple[int, int, int],
    synchronise: bool,
) -> None:
    """One PPO micro-step with a forward, loss and backward per policy slot: the gradient that
    `backward(_ppo_micro_step(...) / gradient_accumulation_steps)` accumulates, and the same `stats`.

    Args:
        trainer: The `MultiAgentPPOTrainer`.
        model: The module the loop trains (the wrapper, DDP-wrapped or not).
        rollouts, indices, stats, where: As for [`slot_loss`].
        pads: Each slot's pad token id.
        synchronise: Whether this micro-step ends an accumulation window (under DDP the gradients are then
            averaged over the processes once every slot's backward ran).
    """
    batches = micro_batches(rollouts, indices)
    ga = trainer.args.gradient_accumulation_steps
    with agent_backwards(model, trainer.accelerator.num_processes, synchronise):
        for slot, batch in enumerate(batches):
            if batch is None:
                continue
            alone = [batch if s == slot else None for s in range(len(batches))]
            output = model(alone, pads, trainer.args.temperature)[slot]
            loss = slot_loss(trainer, slot, output, rollouts, indices, stats, where)
            trainer.accelerator.backward(loss / ga)
            del output, loss  # slot s's logits and graph are gone before slot s + 1's forward
