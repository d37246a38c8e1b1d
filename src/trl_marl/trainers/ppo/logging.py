"""The metrics PPO logs after each update.

TRL 1.12's names for the drop-in (`objective/kl`, `objective/entropy`, `objective/non_score_reward`,
`objective/rlhf_reward`, `objective/scores`, `policy/approxkl_avg`, `policy/clipfrac_avg`, `loss/policy_avg`,
`loss/value_avg`, `val/clipfrac_avg`, `policy/entropy_avg`, `val/ratio`, `val/ratio_var`, `val/num_eos_tokens`,
`lr`, `episode`, `eps`) and, with several agents or turns, the names MAGRPO uses for the same quantities:
`turn_{t}/reward`, `agent_{a}/reward`, `agent_{a}/turn_{t}/reward` (mean score of the responses),
`agent_{a}/kl`, and per policy slot `agent_{a}/loss/policy_avg`, `agent_{a}/loss/value_avg` (prefixed
`agent_{a}/turn_{t}/` with per-turn policies; none for a frozen agent, `frozen_agents`, whose rewards and KL are
logged). Means are over the scorable responses. With vLLM's importance-sampling
correction, TRL's `sampling/sampling_logp_difference/mean|max` and `sampling/importance_sampling_ratio/min|mean|max`.

[`ScoreSignalCheck`] warns, as MAGRPO does, when an update's scores give the policies nothing to learn.
"""

from __future__ import annotations

import time
import warnings
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import torch

from ...reward_contract.errors import user_stacklevel
from ..engine_correction import correction_metrics, mismatch_values
from ..magrpo.diagnostics import NoLearningSignalWarning
from .samples import AgentRollout, filled

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .config import MultiAgentPPOConfig

__all__ = ["STAT_NAMES", "ScoreSignalCheck", "completions_table", "print_completions_table", "update_metrics"]

STAT_NAMES = ("approxkl", "pg_clipfrac", "pg_loss", "vf_loss", "vf_clipfrac", "entropy", "ratio")
"""The per-micro-batch statistics of an update (`compute_agent_loss` fills `pg_*`, `vf_*` and `ratio`)."""

_LOGGED = {
    "approxkl": "policy/approxkl_avg",
    "pg_clipfrac": "policy/clipfrac_avg",
    "pg_loss": "loss/policy_avg",
    "vf_loss": "loss/value_avg",
    "vf_clipfrac": "val/clipfrac_avg",
    "entropy": "policy/entropy_avg",
}


def _mean(values: torch.Tensor, keep: torch.Tensor) -> float:
    """Mean over the kept entries (all of them when every entry is kept: the same sum as `values.mean()`)."""
    return float(values.mean() if bool(keep.all()) else values[keep].mean())


def update_metrics(accelerator: Accelerator, args: MultiAgentPPOConfig, env: Any, tokenizers: list[Any], lr: float,
                   rollouts: list[AgentRollout | None], stats: dict[str, torch.Tensor], episode: int,
                   start: float, columns: list[int] | None = None) -> dict[str, float]:
    """The metrics of one PPO update (module docstring).

    Args:
        accelerator: The trainer's `Accelerator` (the objective metrics are gathered over every process).
        args: The trainer's `MultiAgentPPOConfig`.
        env: The environment (its numbers of agents and turns).
        tokenizers: Each policy slot's tokenizer (its EOS token is counted).
        lr: The learning rate of the update.
        rollouts: Each policy slot's samples (`None` for a slot without any).
        stats: The update's per-micro-batch statistics (`STAT_NAMES`).
        episode: Episodes played so far.
        start: When training started (`time.time()`), for `eps`.
        columns: The trained policy slot of each column of `stats`. Default: every slot with samples (a frozen
            agent's slots, `frozen_agents`, have samples, hence rewards and KL, but no losses).
    """
    gather = accelerator.gather_for_metrics
    trained = [ro for ro in rollouts if ro is not None]
    kl = torch.cat([filled(ro.kl).sum(1) for ro in trained])
    entropy = torch.cat([((-filled(ro.logprobs)) * filled(ro.policy_mask).float()).sum(1) for ro in trained])
    non_score = torch.cat([filled(ro.non_score_rewards).sum(1) for ro in trained])
    scores = torch.cat([filled(ro.scores) for ro in trained])
    scorable = torch.cat([filled(ro.scorable) for ro in trained]).to(scores.device)
    score_mean = scores.mean() if bool(scorable.all()) else scores[scorable].mean()
    metrics: dict[str, float] = {"eps": int(episode / max(time.time() - start, 1e-9))}
    metrics["objective/kl"] = gather(kl.mean()).mean().item()
    metrics["objective/entropy"] = gather(entropy.mean()).mean().item()
    metrics["objective/non_score_reward"] = gather(non_score.mean()).mean().item()
    metrics["objective/rlhf_reward"] = gather(non_score.mean() + score_mean).mean().item()
    metrics["objective/scores"] = gather(score_mean).mean().item()
    device = accelerator.device
    for key, name in _LOGGED.items():
        metrics[name] = gather(stats[key].to(device)).mean().item()
    metrics["val/ratio"] = gather(stats["ratio"].to(device)).mean().item()
    metrics["val/ratio_var"] = gather(stats["ratio"].to(device)).var().item()
    metrics["val/num_eos_tokens"] = sum(
        int((ro.responses == tokenizers[s].eos_token_id).sum())
        for s, ro in enumerate(rollouts)
        if ro is not None
    )
    corrected = [mismatch_values(filled(ro.logprobs), filled(ro.sampling_logprobs), ro.importance_sampling_ratio,
                                 filled(ro.policy_mask), args.vllm_importance_sampling_mode)
                 for ro in trained if ro.importance_sampling_ratio is not None]
    metrics.update(correction_metrics(accelerator, corrected))  # TRL's `sampling/*` (vLLM's mismatch)
    metrics["lr"] = lr
    metrics["episode"] = episode
    if env.num_agents > 1 or env.num_turns > 1:
        agents = torch.cat([filled(ro.agents) for ro in trained])
        turns = torch.cat([ro.turns for ro in trained])
        cpu_scores, cpu_scorable, sample_kl = scores.cpu(), scorable.cpu(), kl.cpu()
        for a in range(env.num_agents):
            mine = agents == a
            if not mine.any():
                continue
            metrics[f"agent_{a}/reward"] = _mean(cpu_scores[mine], cpu_scorable[mine])
            metrics[f"agent_{a}/kl"] = float(sample_kl[mine].mean())
            for t in turns[mine].unique().tolist():
                cell = mine & (turns == t)
                metrics[f"agent_{a}/turn_{t}/reward"] = _mean(cpu_scores[cell], cpu_scorable[cell])
        for t in turns.unique().tolist():
            metrics[f"turn_{t}/reward"] = _mean(cpu_scores[turns == t], cpu_scorable[turns == t])
        active = [slot for slot, ro in enumerate(rollouts) if ro is not None] if columns is None else columns
        A = env.num_agents
        for column, slot in enumerate(active):
            prefix = (
                f"agent_{slot % A}/turn_{slot // A + 1}/"
                if args.policy_sharing == "agent_turn"
                else (f"agent_{slot}/")
            )
            metrics[prefix + "loss/policy_avg"] = float(stats["pg_loss"][..., column].mean())
            metrics[prefix + "loss/value_avg"] = float(stats["vf_loss"][..., column].mean())
    return metrics


def completions_table(rollouts: list[AgentRollout | None], tokenizers: list[Any]) -> dict[str, list[Any]]:
    """The columns of a table of completions: each trained response's agent, turn, query, text and score."""
    table: dict[str, list[Any]] = defaultdict(list)
    for slot, ro in enumerate(rollouts):
        if ro is None:
            continue
        queries = tokenizers[slot].batch_decode(ro.query_responses[:, : ro.context_length], skip_special_tokens=True)
        table["agent"] += filled(ro.agents).tolist()
        table["turn"] += ro.turns.tolist()
        table["query"] += queries
        table["model response"] += ro.texts
        table["score"] += [float(s) for s in filled(ro.scores)]
    return table


def print_completions_table(table: dict[str, list[Any]], report_to: str | list[str] | None) -> None:
    """Print the first rows of `table` (and report it to wandb when `report_to` names it and a run is open)."""
    lines = [" | ".join(str(table[c][i])[:60] for c in table) for i in range(min(5, len(table["query"])))]
    print("\n".join([" | ".join(table), *lines]))
    if "wandb" in (report_to or []):
        import wandb

        if wandb.run is not None:
            import pandas as pd

            wandb.log({"completions": wandb.Table(dataframe=pd.DataFrame(table))})


NO_SCORE_SIGNAL_MESSAGE = (
    "Multi-agent PPO: no learning signal from the rewards for {updates} update{s} in a row: every scored response of "
    "the update got the same score ({score:g}), so no response is preferred to another and the policies move only by "
    "the KL penalty and the value models' errors. Likely causes: a reward or verifier that returns the same score "
    "whatever the response (e.g. one that never finds the answer it parses: look at the samples with "
    "`num_sample_generations`, and compare them with the answer format, the prompt and the chat template); "
    "`response_length` too short for an answer, so every response is cut before it; or the task is already solved "
    "(every response at the maximum score). (This warning repeats at most every {interval} updates while it lasts; "
    "`warnings.filterwarnings('ignore', category=trl_marl.trainers.magrpo.NoLearningSignalWarning)` silences it.)"
)


class ScoreSignalCheck:
    """Multi-agent PPO's no-learning warning ([`NoLearningSignalWarning`], MAGRPO's class): every response of an
    update that got a score, on every process, got the same one (e.g. a verifier that always returns 0).

    It warns at the first such update, then at most once every `interval` updates while such updates go on.

    Args:
        interval: Updates between two warnings; `None` never warns.
        is_main_process: Whether this process warns (every process must call [`see_update`]: it gathers).
    """

    def __init__(self, interval: int | None, is_main_process: bool) -> None:
        self.interval = interval
        self.is_main_process = is_main_process
        self.streak = 0  # updates in a row without a score spread
        self.warned_at: int | None = None

    def see_update(self, update: int, rollouts: list[AgentRollout | None], accelerator: Accelerator) -> None:
        """Check the scores of update `update` (1-based), over every process."""
        kept = [(filled(ro.scores), filled(ro.scorable)) for ro in rollouts if ro is not None]
        scored = torch.cat([scores[scorable.to(scores.device)].float() for scores, scorable in kept]
                           or [torch.zeros(0)]).to(accelerator.device)
        inf = torch.tensor(float("inf"), device=scored.device)
        own_low, own_high = (scored.min(), scored.max()) if scored.numel() else (inf, -inf)
        bounds = accelerator.gather(torch.stack([own_low, -own_high]).reshape(1, 2)).reshape(-1, 2)  # one per process
        low, high = float(bounds[:, 0].min()), float(-bounds[:, 1].min())
        if low > high:  # nothing scored (refused earlier by the reward checks)
            return
        if high > low:
            self.streak = 0
            return
        self.streak += 1
        if self.interval is None or not self.is_main_process or (
                self.warned_at is not None and update - self.warned_at < self.interval):
            return
        self.warned_at = update
        message = NO_SCORE_SIGNAL_MESSAGE.format(updates=self.streak, s="s" if self.streak > 1 else "", score=low,
                                                 interval=self.interval)
        warnings.warn(message, NoLearningSignalWarning, stacklevel=user_stacklevel())
