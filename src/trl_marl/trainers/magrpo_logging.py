"""MAGRPO's logging: the metrics of each rollout, sample joint actions, and the diagnostics a run gets when it has
stopped learning (see `MAGRPOConfig`'s `zero_std_warning_*` and `entropy_warning_*` fields)."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..rollout import Rollout, finite_mean, reward_std_is_zero

__all__ = [
    "ENTROPY_MESSAGE",
    "ZERO_STD_MESSAGE",
    "TrainingDiagnosticWarning",
    "diagnose_step",
    "log_rollout",
    "print_completions",
]


class TrainingDiagnosticWarning(UserWarning):
    """A run has stopped learning (no reward spread, or an agent's entropy collapsed): see the message."""


ZERO_STD_MESSAGE = (
    "MAGRPO diagnosis: for the last {steps} optimizer steps, at least {fraction:.0%} of the groups gave every sample "
    "of the team the same return, so every advantage and every gradient is (almost) exactly 0: the team is not "
    "learning any more (logged as `frac_reward_zero_std` and `diagnostics/zero_std_streak`; `grad_norm` reads 0). "
    "If the reward is at its maximum, the task is simply solved. Otherwise, typical causes: the agents collapsed "
    "onto one output, or onto an invalid output (e.g. a lost EOS or an empty completion) that every sample now "
    "repeats and the reward scores alike; a learning rate too high for a near-deterministic policy; a task too hard "
    "for every sample. Typical fixes: a lower `learning_rate` and a warmup (`warmup_steps`), a KL penalty to the "
    "reference (`beta` > 0), a higher `temperature`, and a reward that separates invalid outputs per agent (e.g. a "
    "penalty for each agent whose answer is invalid) so that a failing team still gets a gradient."
)

ENTROPY_MESSAGE = (
    "MAGRPO diagnosis: the mean token entropy of agent(s) {agents} has stayed below {threshold} nats for {steps} "
    "optimizer steps (logged as `agent_<i>/entropy` and `diagnostics/entropy_collapse_streak`): the policy is "
    "(nearly) deterministic, so its samples within a group coincide and their advantages vanish. If rewards are not "
    "yet where they should be, lower `learning_rate`, add a KL penalty (`beta` > 0) or raise `temperature`."
)


def diagnose_step(trainer: Any) -> None:
    """After the last micro-step of an optimizer step: update the trainer's no-signal and entropy streaks (logged as
    `diagnostics/*`) and warn once when one reaches its limit."""
    args = trainer.args
    metrics = trainer._metrics["train"]
    if args.zero_std_warning_steps is not None:
        flat = trainer._step_flat_fraction >= args.zero_std_warning_fraction
        trainer._zero_std_streak = trainer._zero_std_streak + 1 if flat else 0
        metrics["diagnostics/zero_std_streak"].append(float(trainer._zero_std_streak))
        if trainer._zero_std_streak >= args.zero_std_warning_steps:
            _warn_once(trainer, "zero_std", ZERO_STD_MESSAGE.format(steps=trainer._zero_std_streak,
                                                                    fraction=args.zero_std_warning_fraction))
    if args.entropy_warning_threshold is not None:
        entropies = {a: total / count for a, (total, count) in trainer._step_entropy.items() if count > 0}
        low = sorted(a for a, h in entropies.items() if h < args.entropy_warning_threshold)
        trainer._entropy_streak = trainer._entropy_streak + 1 if low else 0
        metrics["diagnostics/entropy_collapse_streak"].append(float(trainer._entropy_streak))
        if trainer._entropy_streak >= args.entropy_warning_steps:
            _warn_once(trainer, "entropy", ENTROPY_MESSAGE.format(
                agents=low, threshold=args.entropy_warning_threshold, steps=trainer._entropy_streak))
    trainer._step_entropy.clear()


def _warn_once(trainer: Any, key: str, message: str) -> None:
    if key in trainer._warned or not trainer.accelerator.is_main_process:
        return
    trainer._warned.add(key)
    warnings.warn(message, TrainingDiagnosticWarning, stacklevel=3)


def log_rollout(trainer: Any, rollout: Rollout, lengths: list[torch.Tensor], advantages: list[torch.Tensor],
                turn_of_sample: list[torch.Tensor], mode: str) -> None:
    """Record a rollout's metrics in `trainer._metrics[mode]` (averaged and logged by `MAGRPOTrainer.log`)."""
    metrics = trainer._metrics[mode]
    first = rollout.turns[0]
    metrics["reward"].append(finite_mean(first.rewards))
    metrics["reward_std"].append(float(first.rewards.nan_to_num(0).std()) if first.rewards.numel() > 1 else 0.0)
    metrics["frac_reward_zero_std"].append(reward_std_is_zero(first.rewards))
    for t in rollout.turns:
        metrics[f"turn_{t.turn}/reward"].append(finite_mean(t.rewards))
        metrics[f"turn_{t.turn}/num_nodes"].append(float(len(t.nodes)))
        for f_index, name in enumerate(trainer.team_reward.names):
            values = t.rewards_per_func[:, f_index]
            prefix = f"rewards/{name}" if t.turn == 1 else f"turn_{t.turn}/rewards/{name}"
            metrics[prefix + "/mean"].append(finite_mean(values))
            finite = values[torch.isfinite(values)]
            metrics[prefix + "/std"].append(float(finite.std()) if finite.numel() > 1 else 0.0)
    for a, agent_lengths in enumerate(lengths):
        metrics[f"agent_{a}/completion_length"].append(float(agent_lengths.mean()))
        adv = advantages[a].float().cpu()
        for t in rollout.turns:
            sel = turn_of_sample[a] == t.turn
            metrics[f"agent_{a}/turn_{t.turn}/advantage_abs_mean"].append(float(adv[sel].abs().mean()))
        metrics[f"agent_{a}/advantage_std"].append(float(adv.std()) if adv.numel() > 1 else 0.0)
    metrics["num_tokens_generated"].append(float(rollout.generated_tokens))
    if rollout.generation_time > 0:
        metrics["tokens_per_second"].append(rollout.generated_tokens / rollout.generation_time)
    if trainer.args.log_completions and trainer.accelerator.is_main_process and mode == "train":
        print_completions(trainer, rollout)

def print_completions(trainer: Any, rollout: Rollout) -> None:
    """Print a few joint actions of turn 1 with their team rewards."""
    first = rollout.turns[0]
    limit = trainer.args.num_completions_to_print or 4
    n = trainer.env.num_agents
    G = trainer.args.num_generations
    lines = []
    for k in range(min(limit, len(first.nodes))):
        joint = " | ".join(repr(first.completions[a][k * G]) for a in range(n))
        lines.append(f"  episode {k}: {joint} -> reward {float(first.rewards[k, 0]):.3f}")
    print(f"[MAGRPO step {trainer.state.global_step}] sample joint actions:\n" + "\n".join(lines))
