"""TRL's truncated importance-sampling correction of the generation engine's mismatch with the training model.

With `generation_backend="vllm"` the completions are sampled by vLLM, whose log-probabilities differ from the
training model's: training on them is off-policy. The correction applies to every training batch whose rows carry the
engine's log-probabilities: a backend returns them when it samples with an engine of its own (`sampling_logprobs`,
vLLM's backends or a registered one) and the config's `vllm_importance_sampling_correction` is on; the trainers ask
the rows, never the backend's name. As TRL 1.16's `GRPOTrainer` does with `use_vllm=True` and
`vllm_importance_sampling_correction=True` (its default), the trainer then multiplies each trained agent's per-token
policy loss by the bounded ratio of the training model's log-probabilities at sampling time over the engine's
(`trl_marl.core.engine_importance_sampling_ratio`: Yao et al., 2025; `vllm_importance_sampling_mode`, default
`"sequence_mask"`, which drops a sequence whose ratio leaves the bounds rather than capping it; `_clip_min`,
`_clip_max`; TRL's older `vllm_importance_sampling_cap` is deprecated and sets `_clip_max`). The KL term is not
weighted. A backend that gives no log-probabilities (the team's own decoding) gets no correction: nothing is
computed, and training is exactly what it was.

Where MAGRPO's numerator comes from differs from TRL, not its value (PPO scores its rollouts at sampling time
anyway, for its own ratio). When the micro-batches of a generation are reused
over several optimizer steps (`num_iterations > 1`, or more generation than accumulation steps), the policy moves
between them and the training model at sampling time takes a forward of its own (`old_logps`, as TRL). Otherwise
(one update per generation, the default, and always with asynchronous rollouts) it is the training forward's own
log-probabilities, detached: the ratio is taken in the loss ([`agent_correction`], the metrics recorded once every
agent's loss is, by [`record_correction_metrics`]), and the extra forward TRL takes even with `num_iterations=1` is
saved (up to float noise the same ratio; with dropout on, the training forward's dropout draw).

What the ratio measures depends on the engine's log-probabilities (`vllm_logprobs_mode`). TRL's and the default,
`"processed_logprobs"`, are taken after the repetition penalty, temperature and top-k/top-p/min-p truncation: with
any of these, a sampled token's engine probability is renormalized over the kept tokens and is at least the training
model's, so every token's log-ratio is <= 0 and a sequence's ratio shrinks with its length. That is a systematic
bias against long completions (the sequence modes drop them first), not a numerical mismatch; the backend warns
once (`team.generation.vllm.LogprobSettingsCheck`). `"raw_logprobs"` (temperature 1 only) compares the model's
untruncated log-softmax on both sides, and the ratio is then the engine's numerical mismatch alone. See
docs/scaling.md.

Logged as TRL does, pooled over the trained agents (and per agent with an `agent_<i>/` prefix):
`sampling/sampling_logp_difference/mean|max` (|log pi_old - log pi_engine| over the completion tokens) and
`sampling/importance_sampling_ratio/min|mean|max` (over the tokens, or over the sequences in the sequence modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..core import engine_importance_sampling_ratio
from ..rollout import TurnResult
from ..team import AgentBatch

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .magrpo.config import MAGRPOConfig
    from .ppo.config import MultiAgentPPOConfig

__all__ = [
    "agent_correction", "correction_metrics", "corrects_engine_mismatch", "engine_correction", "engine_logps",
    "mismatch_values", "padded_logps", "record_correction_metrics",
]


def corrects_engine_mismatch(args: MAGRPOConfig | MultiAgentPPOConfig, mode: str = "train") -> bool:
    """Whether a training batch (`mode="train"`) gets the correction when its rows carry the engine's
    log-probabilities: `vllm_importance_sampling_correction` (whatever the backend's name)."""
    return mode == "train" and bool(args.vllm_importance_sampling_correction)


def padded_logps(rows: Sequence[Sequence[float]], like: torch.Tensor) -> torch.Tensor:
    """Per-token log-probability lists as a float32 tensor of `like`'s shape and device (0 after each row's end)."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out.to(like.device)


def engine_logps(turns: Sequence[TurnResult], picks: Sequence[Sequence[int]],
                 batches: Sequence[AgentBatch]) -> list[torch.Tensor] | None:
    """The engine's log-probabilities of the completions of one micro-batch, per agent, padded like its
    `completion_ids` (the samples `picks[t]` of every turn `t`, in order); None when a turn has none."""
    sampled = [t.sampling_logps for t in turns if t.sampling_logps is not None]
    if not turns or len(sampled) < len(turns):
        return None
    return [padded_logps([logps[a][i] for logps, pick in zip(sampled, picks) for i in pick],
                         batch.completion_ids) for a, batch in enumerate(batches)]


def engine_correction(args: MAGRPOConfig | MultiAgentPPOConfig, accelerator: Accelerator,
                      metrics: dict[str, list[float]], old_logps: Sequence[torch.Tensor | None] | None,
                      sampling: Sequence[torch.Tensor] | None, batches: Sequence[AgentBatch | None]) -> dict[str, Any]:
    """The micro-batch entries of the correction: `sampling_logps[a]` and `importance_sampling_ratio[a]` (None for
    a frozen agent); empty without engine log-probabilities. Records the metrics in `metrics` (the trainer's
    training metrics; see the module docstring).

    Args:
        args: The trainer's config (`vllm_importance_sampling_mode`, `..._clip_min`, `..._clip_max`).
        accelerator: The trainer's `Accelerator` (the metrics are reduced over every process).
        metrics: Where the metrics go: name -> values.
        old_logps: Each agent's old-policy log-probs of the micro-batch (None for a frozen agent).
        sampling: Each agent's engine log-probs ([`engine_logps`]).
        batches: Each agent's batch (None for a frozen agent).
    """
    if sampling is None or old_logps is None:
        return {}
    ratios: list[torch.Tensor | None] = []
    pairs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for a, batch in enumerate(batches):
        old = old_logps[a]
        if batch is None or old is None:
            ratios.append(None)
            continue
        ratio, pairs[a] = agent_correction(args, old, sampling[a], batch.loss_mask)
        ratios.append(ratio)
    record_correction_metrics(accelerator, metrics, sorted(pairs), pairs)
    return {"sampling_logps": list(sampling), "importance_sampling_ratio": ratios}


def agent_correction(args: MAGRPOConfig | MultiAgentPPOConfig, old: torch.Tensor, sampling: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One agent's bounded ratio of `old` (its log-probs at sampling time under the training model, detached) over
    the engine's `sampling`, and the values its metrics reduce ([`mismatch_values`]). No collective: the metrics are
    recorded by [`record_correction_metrics`]."""
    old = old.detach()
    ratio = engine_importance_sampling_ratio(
        old.float(), sampling, mask, args.vllm_importance_sampling_mode,
        args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max)
    return ratio, mismatch_values(old, sampling, ratio, mask, args.vllm_importance_sampling_mode)


def record_correction_metrics(accelerator: Accelerator, metrics: dict[str, list[float]], agents: Sequence[int],
                              pairs: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Record the correction's metrics of one micro-batch, per agent (`agent_<a>/` prefix) and pooled, from each
    agent's [`mismatch_values`] in `pairs`. `agents` (every trained agent, in order) must be the same on every
    process, since each metric is reduced over the processes: an agent missing from this process's `pairs` adds
    no values here but takes part in the reductions."""
    empty = (torch.empty(0, device=accelerator.device), torch.empty(0, device=accelerator.device))
    for a in agents:
        for name, value in correction_metrics(accelerator, [pairs.get(a, empty)]).items():
            metrics[f"agent_{a}/{name}"].append(value)
    for name, value in correction_metrics(accelerator, [pairs.get(a, empty) for a in agents]).items():
        metrics[name].append(value)


def mismatch_values(old: torch.Tensor, sampling: torch.Tensor, ratio: torch.Tensor, mask: torch.Tensor,
                    mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The values TRL's metrics reduce: |log pi_old - log pi_engine| on the completion tokens (NaN left out), and the
    ratios on those tokens (token modes) or of every sequence (sequence modes: `ratio` is `(B, 1)`)."""
    tokens = mask.bool()
    delta = (old.float() - sampling.float()).abs()
    delta = delta[tokens & ~torch.isnan(delta)]
    return delta, (ratio.flatten() if mode.startswith("sequence") else ratio[tokens])


def correction_metrics(accelerator: Accelerator,
                       values: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """TRL's five metrics over `values` (pairs from [`mismatch_values`], pooled), each reduced over every process."""
    if not values:
        return {}
    out: dict[str, float] = {}
    pooled = {"sampling/sampling_logp_difference": (torch.cat([d for d, _ in values]), ("mean", "max")),
              "sampling/importance_sampling_ratio": (torch.cat([r for _, r in values]), ("min", "mean", "max"))}
    for name, (tensor, reductions) in pooled.items():
        for reduce in reductions:
            local = (getattr(tensor.float(), reduce)() if tensor.numel() else torch.tensor(float("nan"))).reshape(1)
            every = accelerator.gather(local.to(accelerator.device))
            every = every[~torch.isnan(every)]
            if every.numel():
                out[f"{name}/{reduce}"] = getattr(every, reduce)().item()
    return out
