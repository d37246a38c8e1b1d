"""MAGRPO's logging: the metrics of each rollout ([`log_rollout`]), sample joint actions ([`print_completions`]), and
the diagnostics a run gets when it has stopped learning ([`TrainingDiagnostics`], which owns its streaks; see
`MAGRPOConfig`'s `zero_std_warning_*` and `entropy_warning_*` fields)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...reward_contract.errors import user_stacklevel
from ...rollout import Rollout, finite_mean, flat_group_fraction, no_signal_fraction, reward_std_is_zero
from ..logbook import log_tool_use

if TYPE_CHECKING:
    from .config import MAGRPOConfig

__all__ = [
    "ENTROPY_MESSAGE",
    "NO_SIGNAL_CAUSES",
    "ZERO_STD_MESSAGE",
    "NoLearningSignalWarning",
    "DiagnosticSettings",
    "TrainingDiagnosticWarning",
    "TrainingDiagnostics",
    "log_rollout",
    "print_completions",
]


class TrainingDiagnosticWarning(UserWarning):
    """A run has stopped learning (no reward spread, or an agent's entropy collapsed): see the message."""


class NoLearningSignalWarning(TrainingDiagnosticWarning):
    """An optimizer step had no learning signal at all: the advantage estimator gave every sample advantage 0 (see
    `MAGRPOConfig.no_signal_warning_interval`); in multi-agent PPO, every response of an update got the same score
    (`trainers.ppo.logging.ScoreSignalCheck`). Flat groups alone are no such sign: `"raw"` advantages are the
    returns, and `"agent_norm"` compares an agent's samples across the nodes and turns of an episode.

    The loss value is no such sign: on-policy (ratio 1) a group's mean-centred advantages sum to 0, so the surrogate
    loss reads 0 (up to rounding) at steps whose gradient is not 0."""


NO_SIGNAL_CAUSES = (
    "Likely causes: the reward is constant for these prompts (every sample scores the same, whatever it writes); the "
    "answer format the reward parses is never met (a parser that finds no answer returns its fixed score: look at the "
    "samples with `log_completions=True` and compare them with the format the reward expects, the prompt and the "
    "chat template); `max_completion_length` too short for an answer, so every completion is cut before it; or the "
    "task is already solved (every sample at the maximum reward)."
)
"""The causes that the no-signal warning names, after what it measured."""


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


@dataclass(frozen=True)
class DiagnosticSettings:
    """What [`TrainingDiagnostics`] reads of a `MAGRPOConfig`: the fields of the same names (their help says what
    each does; their defaults live there only).

    Example:

    ```python
    from trl_marl import MAGRPOConfig

    settings = DiagnosticSettings.of(MAGRPOConfig(output_dir="team", no_signal_warning_interval=5))
    diagnostics = TrainingDiagnostics(settings, is_main_process=True)
    ```
    """

    advantage_mode: str | None
    team_reward_weight: float
    max_completion_length: int | None
    no_signal_warning_interval: int | None
    zero_std_warning_steps: int | None
    zero_std_warning_fraction: float
    entropy_warning_threshold: float | None
    entropy_warning_steps: int

    @classmethod
    def of(cls, args: MAGRPOConfig) -> DiagnosticSettings:
        """The settings of a `MAGRPOConfig`, read once."""
        return cls(args.advantage_mode, args.team_reward_weight, args.max_completion_length,
                   args.no_signal_warning_interval, args.zero_std_warning_steps, args.zero_std_warning_fraction,
                   args.entropy_warning_threshold, args.entropy_warning_steps)


class TrainingDiagnostics:
    """The no-signal and entropy-collapse streaks of a MAGRPO run, and the warnings they raise once each.

    The trainer reports each step's fraction of groups without a learning signal ([`flat_fraction`], as the advantage
    estimator says: [`see_rollout`]) and each agent's token entropies
    ([`add_entropy`]); after the last micro-step of an optimizer step, [`end_step`] updates the streaks (logged as
    `diagnostics/*`) and warns once ([`TrainingDiagnosticWarning`], on the main process) when one reaches its limit.

    Args:
        settings: What it reads of the trainer's config ([`DiagnosticSettings.of`]).
        is_main_process: Whether this process warns.
    """

    def __init__(self, settings: DiagnosticSettings, is_main_process: bool) -> None:
        self.settings = settings
        self.is_main_process = is_main_process
        self.zero_std_streak = 0
        self.entropy_streak = 0
        self.warned: set[str] = set()
        self.flat_fraction = 0.0
        """The fraction of the groups (nodes) of the step's rollout where the estimator gave every advantage 0."""
        self.returns_flat_fraction = 0.0  # the fraction of them whose samples all had the same return
        self.no_signal_streak = 0
        self.steps = 0  # optimizer steps seen by `end_step`
        self.no_signal_warned_at: int | None = None  # the step of the last no-signal warning
        self.zero_advantages = False  # every advantage of the step's rollout is exactly 0
        self.rollout_facts: dict[str, Any] = {}  # what `see_rollout` measured, for the no-signal warning
        # agent -> its step's [entropy sum, tokens], on the device until `end_step` reads all agents' at once
        self.step_entropy: dict[int, torch.Tensor] = {}

    def see_rollout(self, rollout: Rollout, eos_ids: set[int], estimator: str | None = None) -> None:
        """Measure a training rollout, advantages assigned: its fraction of groups without a learning signal, its
        distinct rewards and its completions cut at `max_completion_length` (no token of `eos_ids` at the end).

        Args:
            rollout: The rollout.
            eos_ids: The token ids generation stops at.
            estimator: The registered estimator the advantages came from (`advantage_mode`): asked which groups
                give every sample advantage 0 (`trl_marl.rollout.no_signal_fraction`). None: the advantages came
                from elsewhere (a `compute_advantages` override) and are read as they are.
        """
        self.flat_fraction = no_signal_fraction(rollout.turns, estimator, self.settings.team_reward_weight)
        self.returns_flat_fraction = flat_group_fraction(rollout.turns)
        self.zero_advantages = all(t.advantages is not None and not bool(t.advantages.nan_to_num(0.0).any())
                                   for t in rollout.turns)
        rewards = torch.cat([t.rewards.reshape(-1) for t in rollout.turns]) if rollout.turns else torch.zeros(0)
        finite = rewards[torch.isfinite(rewards)]
        completions = [ids for t in rollout.turns for agent in t.completion_ids for ids in agent]
        limit = self.settings.max_completion_length
        cut = sum(1 for ids in completions
                  if limit is not None and len(ids) >= limit and not (ids and ids[-1] in eos_ids))
        self.rollout_facts = {
            "distinct_rewards": sorted({round(float(v), 6) for v in finite.tolist()}),
            "completions": len(completions),
            "cut": cut,
            "max_completion_length": limit,
        }

    def add_entropy(self, agent: int, entropy: torch.Tensor, mask: torch.Tensor) -> None:
        """Count agent `agent`'s token entropies on the float `mask` towards the step's mean entropy."""
        update = torch.stack([(entropy.detach() * mask).sum(), mask.sum()]).double()
        previous = self.step_entropy.get(agent)
        self.step_entropy[agent] = update if previous is None else previous + update

    def end_step(self, metrics: dict[str, list[float]]) -> None:
        """After the last micro-step of an optimizer step: update the streaks, record them in `metrics` (the
        trainer's training metrics) and warn once when one reaches its limit."""
        args = self.settings
        self._check_signal()
        if args.zero_std_warning_steps is not None:
            flat = self.flat_fraction >= args.zero_std_warning_fraction
            self.zero_std_streak = self.zero_std_streak + 1 if flat else 0
            metrics["diagnostics/zero_std_streak"].append(float(self.zero_std_streak))
            if self.zero_std_streak >= args.zero_std_warning_steps:
                self._warn_once("zero_std", ZERO_STD_MESSAGE.format(steps=self.zero_std_streak,
                                                                    fraction=args.zero_std_warning_fraction))
        if args.entropy_warning_threshold is not None:
            agents = sorted(self.step_entropy)
            read = torch.stack([self.step_entropy[a] for a in agents]).tolist() if agents else []  # one host sync
            entropies = {a: total / count for a, (total, count) in zip(agents, read) if count > 0}
            low = sorted(a for a, h in entropies.items() if h < args.entropy_warning_threshold)
            self.entropy_streak = self.entropy_streak + 1 if low else 0
            metrics["diagnostics/entropy_collapse_streak"].append(float(self.entropy_streak))
            if self.entropy_streak >= args.entropy_warning_steps:
                self._warn_once("entropy", ENTROPY_MESSAGE.format(
                    agents=low, threshold=args.entropy_warning_threshold, steps=self.entropy_streak))
        self.step_entropy.clear()

    def _check_signal(self) -> None:
        """Warn when the step had no learning signal: at the first such step, then at most once every
        `no_signal_warning_interval` steps while such steps go on (a step with a signal in between does not make it
        warn sooner)."""
        interval = self.settings.no_signal_warning_interval
        all_flat, zero_advantages = self.flat_fraction >= 1.0, self.zero_advantages
        self.steps += 1
        if not (all_flat or zero_advantages):
            self.no_signal_streak = 0
            return
        self.no_signal_streak += 1
        last = self.no_signal_warned_at
        if interval is None or not self.is_main_process or (last is not None and self.steps - last < interval):
            return
        self.no_signal_warned_at = self.steps
        warnings.warn(self.no_signal_message(all_flat), NoLearningSignalWarning, stacklevel=user_stacklevel())

    def no_signal_message(self, all_flat: bool) -> str:
        """The no-signal warning: what was measured (flat groups or zero advantages, the rewards, cut completions),
        then the likely causes."""
        mode = self.settings.advantage_mode
        if all_flat and self.returns_flat_fraction >= 1.0:
            what = "every group gave all its samples the same return (`frac_reward_zero_std` = 1)"
        elif all_flat:
            what = f"the `{mode}` advantage estimator gave every sample advantage 0"
        else:
            what = "every advantage was exactly 0"
        steps = self.no_signal_streak
        lines = [f"MAGRPO: no learning signal for {steps} optimizer step{'s' if steps > 1 else ''} in a row: {what}, "
                 "so no sample is preferred to another and the policy gradient gives the weights nothing to learn."]
        facts = self.rollout_facts
        distinct = facts.get("distinct_rewards", [])
        if len(distinct) == 1:
            lines.append(f"Every reward of the last rollout was {distinct[0]:g}.")
        elif distinct:
            lines.append(f"The last rollout's rewards took {len(distinct)} values, but never within one group.")
        if facts.get("completions") and facts.get("cut", 0) * 2 >= facts["completions"]:
            lines.append(f"{facts['cut']} of {facts['completions']} completions stopped at `max_completion_length` "
                         f"({facts['max_completion_length']} tokens) without an end-of-sequence token: raise it if "
                         "the answer comes after that.")
        lines.append(NO_SIGNAL_CAUSES)
        interval = self.settings.no_signal_warning_interval
        lines.append(f"(This warning repeats at most every {interval} steps while it lasts; "
                     "`no_signal_warning_interval=None` silences it.)")
        return " ".join(lines)

    def _warn_once(self, key: str, message: str) -> None:
        if key in self.warned or not self.is_main_process:
            return
        self.warned.add(key)
        warnings.warn(message, TrainingDiagnosticWarning, stacklevel=user_stacklevel())


def log_rollout(metrics: dict[str, list[float | torch.Tensor]], rollout: Rollout, reward_names: list[str],
                lengths: list[torch.Tensor], advantages: list[torch.Tensor],
                turn_of_sample: list[torch.Tensor], local_reward_names: list[list[str]] | None = None) -> None:
    """Record a rollout's metrics in `metrics` (the trainer's metrics of the mode, logged by `log`).

    Args:
        metrics: name -> values.
        rollout: The rollout.
        reward_names: The reward functions' names (`rewards/<name>/mean`).
        lengths: Each agent's completion lengths.
        advantages: Each agent's advantages, in the order of `turn_of_sample`.
        turn_of_sample: Each agent's turn of every sample.
        local_reward_names: Each agent's local reward functions' names, with local rewards: then each such agent's
            `agent_<a>/local_reward` (turn 1's mean over the joint actions, as `reward`), `agent_<a>/turn_<t>/
            local_reward` and `agent_<a>/local_rewards/<name>/{mean,std}` (turn 1) are recorded too.
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
        # tensors, read by the metrics book at the next log with the rest (no host sync per agent here)
        metrics[f"agent_{a}/completion_length"].append(agent_lengths.float().mean())
        adv = advantages[a].float()
        turns = turn_of_sample[a].to(adv.device)
        for t in rollout.turns:
            sel = (turns == t.turn).float()
            metrics[f"agent_{a}/turn_{t.turn}/advantage_abs_mean"].append((adv.abs() * sel).sum() / sel.sum())
        metrics[f"agent_{a}/advantage_std"].append(adv.std() if adv.numel() > 1 else 0.0)
    if local_reward_names is not None:
        _log_local_rewards(metrics, rollout, local_reward_names)
    log_tool_use(metrics, rollout)
    metrics["num_tokens_generated"].append(float(rollout.generated_tokens))
    if rollout.generation_time > 0:
        metrics["tokens_per_second"].append(rollout.generated_tokens / rollout.generation_time)


def _log_local_rewards(metrics: dict[str, list[float | torch.Tensor]], rollout: Rollout,
                       names: list[list[str]]) -> None:
    """Each agent's local reward per turn and per function (see [`log_rollout`])."""
    for t in rollout.turns:
        if t.local_rewards is None:
            continue
        for a, agent_names in enumerate(names):
            if not agent_names:  # an agent without local reward functions
                continue
            if t.turn == 1:
                metrics[f"agent_{a}/local_reward"].append(finite_mean(t.local_rewards[:, :, a]))
            metrics[f"agent_{a}/turn_{t.turn}/local_reward"].append(finite_mean(t.local_rewards[:, :, a]))
            scores = t.local_rewards_per_func[a] if t.turn == 1 and t.local_rewards_per_func else None
            if scores is None:
                continue
            for f_index, name in enumerate(agent_names):
                finite = scores[:, f_index][torch.isfinite(scores[:, f_index])]
                metrics[f"agent_{a}/local_rewards/{name}/mean"].append(finite_mean(scores[:, f_index]))
                metrics[f"agent_{a}/local_rewards/{name}/std"].append(float(finite.std()) if finite.numel() > 1
                                                                       else 0.0)


def print_completions(rollout: Rollout, num_agents: int, num_generations: int, limit: int, step: int) -> None:
    """Print the first `limit` joint actions of turn 1 with their team rewards (`step`: the optimizer step)."""
    first = rollout.turns[0]
    lines = []
    for k in range(min(limit, len(first.nodes))):
        joint = " | ".join(repr(first.completions[a][k * num_generations]) for a in range(num_agents))
        lines.append(f"  episode {k}: {joint} -> reward {float(first.rewards[k, 0]):.3f}")
    print(f"[MAGRPO step {step}] sample joint actions:\n" + "\n".join(lines))
