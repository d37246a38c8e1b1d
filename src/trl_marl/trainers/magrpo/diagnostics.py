"""MAGRPO's logging: the metrics of each rollout ([`log_rollout`]), sample joint actions ([`print_completions`]), and
the diagnostics a run gets when it has stopped learning ([`TrainingDiagnostics`], which owns its streaks; see
`MAGRPOConfig`'s `zero_std_warning_*` and `entropy_warning_*` fields)."""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any

import torch

from ...rollout import Rollout, finite_mean, reward_std_is_zero

__all__ = [
    "ENTROPY_MESSAGE",
    "ZERO_STD_MESSAGE",
    "TrainingDiagnosticWarning",
    "TrainingDiagnostics",
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


class TrainingDiagnostics:
    """The no-signal and entropy-collapse streaks of a MAGRPO run, and the warnings they raise once each.

    The trainer reports each step's fraction of flat groups ([`flat_fraction`]) and each agent's token entropies
    ([`add_entropy`]); after the last micro-step of an optimizer step, [`end_step`] updates the streaks (logged as
    `diagnostics/*`) and warns once ([`TrainingDiagnosticWarning`], on the main process) when one reaches its limit.

    Args:
        args: A `MAGRPOConfig` (`zero_std_warning_steps`, `zero_std_warning_fraction`, `entropy_warning_threshold`,
            `entropy_warning_steps`).
        is_main_process: Whether this process warns.
    """

    def __init__(self, args: Any, is_main_process: bool) -> None:
        self.args = args
        self.is_main_process = is_main_process
        self.zero_std_streak = 0
        self.entropy_streak = 0
        self.warned: set[str] = set()
        self.flat_fraction = 0.0
        """The fraction of turn-1 groups of the step's rollout whose samples all had the same return."""
        self.step_entropy: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])  # agent -> [sum, tokens]

    def add_entropy(self, agent: int, entropy: torch.Tensor, mask: torch.Tensor) -> None:
        """Count agent `agent`'s token entropies on the float `mask` towards the step's mean entropy."""
        self.step_entropy[agent][0] += float((entropy.detach() * mask).sum())
        self.step_entropy[agent][1] += float(mask.sum())

    def end_step(self, metrics: dict[str, list[float]]) -> None:
        """After the last micro-step of an optimizer step: update the streaks, record them in `metrics` (the
        trainer's training metrics) and warn once when one reaches its limit."""
        args = self.args
        if args.zero_std_warning_steps is not None:
            flat = self.flat_fraction >= args.zero_std_warning_fraction
            self.zero_std_streak = self.zero_std_streak + 1 if flat else 0
            metrics["diagnostics/zero_std_streak"].append(float(self.zero_std_streak))
            if self.zero_std_streak >= args.zero_std_warning_steps:
                self._warn_once("zero_std", ZERO_STD_MESSAGE.format(steps=self.zero_std_streak,
                                                                    fraction=args.zero_std_warning_fraction))
        if args.entropy_warning_threshold is not None:
            entropies = {a: total / count for a, (total, count) in self.step_entropy.items() if count > 0}
            low = sorted(a for a, h in entropies.items() if h < args.entropy_warning_threshold)
            self.entropy_streak = self.entropy_streak + 1 if low else 0
            metrics["diagnostics/entropy_collapse_streak"].append(float(self.entropy_streak))
            if self.entropy_streak >= args.entropy_warning_steps:
                self._warn_once("entropy", ENTROPY_MESSAGE.format(
                    agents=low, threshold=args.entropy_warning_threshold, steps=self.entropy_streak))
        self.step_entropy.clear()

    def _warn_once(self, key: str, message: str) -> None:
        if key in self.warned or not self.is_main_process:
            return
        self.warned.add(key)
        warnings.warn(message, TrainingDiagnosticWarning, stacklevel=3)


def log_rollout(metrics: dict[str, list[float]], rollout: Rollout, reward_names: list[str],
                lengths: list[torch.Tensor], advantages: list[torch.Tensor],
                turn_of_sample: list[torch.Tensor]) -> None:
    """Record a rollout's metrics in `metrics` (the trainer's metrics of the mode, logged by `log`).

    Args:
        metrics: name -> values.
        rollout: The rollout.
        reward_names: The reward functions' names (`rewards/<name>/mean`).
        lengths: Each agent's completion lengths.
        advantages: Each agent's advantages, in the order of `turn_of_sample`.
        turn_of_sample: Each agent's turn of every sample.
    """
    first = rollout.turns[0]
    metrics["reward"].append(finite_mean(first.rewards))
    metrics["reward_std"].append(float(first.rewards.nan_to_num(0).std()) if first.rewards.numel() > 1 else 0.0)
    metrics["frac_reward_zero_std"].append(reward_std_is_zero(first.rewards))
    for t in rollout.turns:
        metrics[f"turn_{t.turn}/reward"].append(finite_mean(t.rewards))
        metrics[f"turn_{t.turn}/num_nodes"].append(float(len(t.nodes)))
        for f_index, name in enumerate(reward_names):
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


def print_completions(rollout: Rollout, num_agents: int, num_generations: int, limit: int, step: int) -> None:
    """Print the first `limit` joint actions of turn 1 with their team rewards (`step`: the optimizer step)."""
    first = rollout.turns[0]
    lines = []
    for k in range(min(limit, len(first.nodes))):
        joint = " | ".join(repr(first.completions[a][k * num_generations]) for a in range(num_agents))
        lines.append(f"  episode {k}: {joint} -> reward {float(first.rewards[k, 0]):.3f}")
    print(f"[MAGRPO step {step}] sample joint actions:\n" + "\n".join(lines))
