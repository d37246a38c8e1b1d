"""TRL's truncated importance-sampling correction of the generation engine's mismatch with the training model.

With `generation_backend="vllm"` the completions are sampled by vLLM, whose log-probabilities differ numerically from
the training model's (other kernels and precision): training on them is slightly off-policy. As TRL 1.16's
`GRPOTrainer` does with `use_vllm=True` and `vllm_importance_sampling_correction=True` (its default), the trainer then
always scores the completions with the training model at sampling time (`old_logps`, even with `num_iterations=1`),
and multiplies each trained agent's per-token policy loss by the bounded ratio of the two
(`trl_marl.core.engine_importance_sampling_ratio`: Yao et al., 2025; `vllm_importance_sampling_mode`, `_clip_min`,
`_clip_max`). The KL term is not weighted. A backend that gives no log-probabilities (the team's own decoding) gets no
correction: nothing is computed, and training is exactly what it was.

Logged as TRL does, pooled over the trained agents (and per agent with an `agent_<i>/` prefix):
`sampling/sampling_logp_difference/mean|max` (|log pi_old - log pi_engine| over the completion tokens) and
`sampling/importance_sampling_ratio/min|mean|max` (over the tokens, or over the sequences in the sequence modes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..core import engine_importance_sampling_ratio
from ..rollout import TurnResult
from ..team import AgentBatch

__all__ = ["corrects_engine_mismatch", "engine_correction", "engine_logps", "padded_logps"]


def corrects_engine_mismatch(args: Any, mode: str = "train") -> bool:
    """Whether a training batch (`mode="train"`) gets the correction: the vLLM backend with
    `vllm_importance_sampling_correction`."""
    return mode == "train" and getattr(args, "generation_backend", "transformers") == "vllm" and bool(
        getattr(args, "vllm_importance_sampling_correction", False))


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
    if not turns or any(t.sampling_logps is None for t in turns):
        return None
    return [padded_logps([t.sampling_logps[a][i] for t, pick in zip(turns, picks) for i in pick],
                         batch.completion_ids) for a, batch in enumerate(batches)]


def engine_correction(trainer: Any, old_logps: Sequence[torch.Tensor | None] | None,
                      sampling: Sequence[torch.Tensor] | None,
                      batches: Sequence[AgentBatch | None]) -> dict[str, Any]:
    """The micro-batch entries of the correction: `sampling_logps[a]` and `importance_sampling_ratio[a]` (None for
    a frozen agent); empty without engine log-probabilities. Logs the metrics (see the module docstring)."""
    if sampling is None or old_logps is None:
        return {}
    args = trainer.args
    ratios: list[torch.Tensor | None] = []
    pooled: dict[str, list[torch.Tensor]] = {"delta": [], "ratio": []}
    for a, batch in enumerate(batches):
        old = old_logps[a]
        if batch is None or old is None:
            ratios.append(None)
            continue
        mask = batch.completion_mask
        ratio = engine_importance_sampling_ratio(
            old.float(), sampling[a], mask, args.vllm_importance_sampling_mode,
            args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max)
        ratios.append(ratio)
        delta = (old.float() - sampling[a]).abs()
        tokens = mask.bool()
        delta = delta[tokens & ~torch.isnan(delta)]
        per_ratio = ratio.flatten() if args.vllm_importance_sampling_mode.startswith("sequence") else ratio[tokens]
        _log(trainer, f"agent_{a}/", delta, per_ratio)
        pooled["delta"].append(delta)
        pooled["ratio"].append(per_ratio)
    if pooled["delta"]:
        _log(trainer, "", torch.cat(pooled["delta"]), torch.cat(pooled["ratio"]))
    return {"sampling_logps": list(sampling), "importance_sampling_ratio": ratios}


def _log(trainer: Any, prefix: str, delta: torch.Tensor, ratio: torch.Tensor) -> None:
    """TRL's five metrics of the correction, each reduced over every process."""
    gather = trainer.accelerator.gather
    metrics = trainer._metrics["train"]
    device = trainer.accelerator.device

    def stat(values: torch.Tensor, reduce: str) -> torch.Tensor:
        if values.numel() == 0:
            return torch.tensor(float("nan"), device=device)
        return getattr(values.float(), reduce)().reshape(()).to(device)

    for name, values, reductions in (("sampling/sampling_logp_difference", delta, ("mean", "max")),
                                     ("sampling/importance_sampling_ratio", ratio, ("min", "mean", "max"))):
        for reduce in reductions:
            every = gather(stat(values, reduce).reshape(1))
            every = every[~torch.isnan(every)]
            if every.numel():
                metrics[f"{prefix}{name}/{reduce}"].append(getattr(every, reduce)().item())
