"""Token-level policy-gradient losses for GRPO-style training (used by MAGRPO for each agent).

Pure tensor math, one small function per equation, no trainer state. The numerics follow TRL 1.16's
``GRPOTrainer._compute_loss`` so that MAGRPO with one agent and one turn equals ``GRPOTrainer``.

References:

- PPO clipped surrogate: Schulman et al., arXiv 1707.06347, Eq. 7.
- GRPO objective and its k3 KL estimator: Shao et al. (DeepSeekMath), arXiv 2402.03300, Eqs. 3 and 4;
  Schulman, "Approximating KL Divergence" (2020), estimators k1 and k3.
- Asymmetric clip (``epsilon_high``, "clip-higher") and token-level aggregation: Yu et al. (DAPO),
  arXiv 2503.14476, Eq. 8.
- Constant normalizer: Liu et al. (Dr. GRPO), arXiv 2503.20783, Eq. 3.
- Sequence-level importance ratio: Zheng et al. (GSPO), arXiv 2507.18071, Eq. 7.
- Two-sided clip ``delta``: INTELLECT-2 report, arXiv 2505.07291.
- Off-policy sequence mask: DeepSeek-V3.2 report, arXiv 2512.02556, Eq. 9.
- Entropy bonus with an adaptive coefficient: Skywork-OR1 report, arXiv 2505.22312 (adaptive entropy control).
- Truncated importance sampling of the engine/trainer mismatch: Yao et al. (2025), "Your Efficient RL Framework
  Secretly Brings You Off-Policy RL Training" (TRL's ``vllm_importance_sampling_*`` settings).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "IMPORTANCE_SAMPLING_LEVELS",
    "SUPPORTED_LOSS_TYPES",
    "VLLM_IMPORTANCE_SAMPLING_MODES",
    "adaptive_entropy_coef",
    "aggregate_token_loss",
    "clipped_surrogate",
    "entropy_bonus",
    "off_policy_sequence_mask",
    "high_entropy_mask",
    "log_importance_weights",
    "completion_mask_from_eos",
    "entropy_from_logits",
    "k1_kl",
    "k3_kl",
    "selective_log_softmax",
    "engine_importance_sampling_ratio",
]

SUPPORTED_LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo")
"""Token-loss aggregations implemented by :func:`aggregate_token_loss` (TRL ``GRPOConfig.loss_type`` names)."""

IMPORTANCE_SAMPLING_LEVELS: tuple[str, ...] = ("token", "sequence")
"""Valid ``importance_sampling_level`` values of :func:`clipped_surrogate`."""

VLLM_IMPORTANCE_SAMPLING_MODES: tuple[str, ...] = (
    "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""Valid ``vllm_importance_sampling_mode`` values of :func:`engine_importance_sampling_ratio` (TRL's names)."""


# ----------------------------------------------------------------------------------------------------------------
# Masks and log-probabilities
# ----------------------------------------------------------------------------------------------------------------
def completion_mask_from_eos(completion_ids: Tensor, eos_token_id: int | list[int]) -> Tensor:
    """Mask of the tokens that belong to each completion: 1 up to and including the first EOS, 0 after.

    A completion with no EOS (truncated at the length limit) is all ones. Pad tokens after EOS never count.

    Args:
        completion_ids: Generated token ids, shape ``(B, T)``.
        eos_token_id: One EOS id or a list of ids that all end a completion.

    Returns:
        Int32 tensor of shape ``(B, T)`` (the same dtype TRL uses).
    """
    eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    # tokens strictly after the first EOS are those preceded by at least one EOS
    eos_seen_before = torch.cumsum(is_eos.int(), dim=-1) - is_eos.int()
    return (eos_seen_before == 0).int()


def selective_log_softmax(logits: Tensor, index: Tensor) -> Tensor:
    """``log softmax(logits)[index]`` without materializing the full log-softmax for the whole batch.

    ``log pi(y_t | ...) = z_{y_t} - logsumexp_v z_v``. Works one row of the leading dimension at a time to
    bound peak memory. In half precision the subtraction ``z - logsumexp(z)`` loses accuracy, so those
    dtypes go through ``log_softmax`` per row instead.

    Args:
        logits: Shape ``(..., V)``.
        index: Token ids, shape ``logits.shape[:-1]`` (one per position) or ``(..., K)`` (K per position).

    Returns:
        Log-probabilities with the shape of ``index``.
    """
    squeeze = index.dim() == logits.dim() - 1
    if squeeze:
        index = index.unsqueeze(-1)
    if logits.dim() == 1:
        rows = [(logits, index)]
    else:
        rows = list(zip(logits, index))
    out = []
    for row_logits, row_index in rows:
        if row_logits.dtype in (torch.float32, torch.float64):
            picked = row_logits.gather(-1, row_index)
            out.append(picked - torch.logsumexp(row_logits, dim=-1, keepdim=True))
        else:
            out.append(F.log_softmax(row_logits, dim=-1).gather(-1, row_index))
    logps = out[0] if logits.dim() == 1 else torch.stack(out)
    return logps.squeeze(-1) if squeeze else logps


def entropy_from_logits(logits: Tensor, chunk_size: int = 128) -> Tensor:
    """Per-position Shannon entropy (nats) of the softmax policy: ``H = -sum_v p_v log p_v``.

    Args:
        logits: Shape ``(..., V)``.
        chunk_size: Rows (after flattening the leading dims) processed at once, to bound memory.

    Returns:
        Entropy of shape ``logits.shape[:-1]``.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    pieces = []
    for chunk in flat.split(chunk_size, dim=0):
        logp = F.log_softmax(chunk, dim=-1)
        pieces.append(-(logp.exp() * logp).sum(dim=-1))
    entropy = torch.cat(pieces) if pieces else flat.new_zeros(0)
    return entropy.reshape(logits.shape[:-1])


# ----------------------------------------------------------------------------------------------------------------
# KL estimators
# ----------------------------------------------------------------------------------------------------------------
def k3_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Per-token k3 estimator of ``KL(pi || pi_ref)`` (DeepSeekMath Eq. 4; Schulman 2020).

    ``k3 = exp(log pi_ref - log pi) - (log pi_ref - log pi) - 1``, which is >= 0 and unbiased under samples
    from ``pi``.

    Args:
        logps: Policy log-probabilities of the sampled tokens, ``log pi``.
        ref_logps: Reference log-probabilities of the same tokens, ``log pi_ref``.

    Returns:
        Per-token KL estimate, same shape as the inputs.
    """
    log_ratio = ref_logps - logps
    return torch.exp(log_ratio) - log_ratio - 1


def k1_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Per-token k1 estimator of ``KL(pi || pi_ref)``: ``log pi - log pi_ref`` (Schulman 2020).

    Args:
        logps: Policy log-probabilities ``log pi``.
        ref_logps: Reference log-probabilities ``log pi_ref``.

    Returns:
        Per-token KL estimate, same shape as the inputs.
    """
    return logps - ref_logps


# ----------------------------------------------------------------------------------------------------------------
# Clipped surrogate
# ----------------------------------------------------------------------------------------------------------------
def high_entropy_mask(entropies: Tensor, mask: Tensor, top_quantile: float, pool: Tensor | None = None) -> Tensor:
    """Tokens among the ``top_quantile`` fraction of highest entropy (Wang et al., "Beyond the 80/20 rule",
    arXiv 2506.01939; TRL's ``top_entropy_quantile``): the policy gradient is kept only on them.

    ``tau = quantile(pool, 1 - top_quantile)`` (linear interpolation, ``torch.quantile``) over the entropies of the
    completion tokens ``pool`` (default: those of ``entropies`` where ``mask`` is set); a token is kept when
    ``H_t >= tau`` and it is a completion token. With entropies ``[0.1, 0.5, 0.9, 0.3]`` and ``top_quantile=0.5``,
    ``tau = 0.4`` and the mask is ``[F, T, T, F]``.

    Args:
        entropies: Per-token entropies ``(B, T)``.
        mask: Completion mask ``(B, T)``.
        top_quantile: Fraction of tokens kept, in ``(0, 1]``.
        pool: The entropies the threshold is taken over (e.g. gathered from every process); default the masked
            entries of ``entropies``.

    Returns:
        Bool mask ``(B, T)``; all ``False`` when the pool is empty.
    """
    mask = mask.to(torch.bool)
    pool = entropies[mask] if pool is None else pool
    if pool.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(pool.float(), 1.0 - top_quantile)
    return (entropies * mask >= threshold) & mask


def log_importance_weights(
    logps: Tensor, old_logps: Tensor, importance_sampling_level: str = "token", mask: Tensor | None = None
) -> Tensor:
    """Log of the importance ratio ``rho = pi / pi_old`` of GRPO (per token) or GSPO (per sequence).

    - ``"token"``: ``log rho_t = log pi_t - log pi_old_t``, shape ``(B, T)``.
    - ``"sequence"`` (GSPO Eq. 7): ``log rho = mean_t over mask of (log pi_t - log pi_old_t)``, shape ``(B, 1)``.

    With ``old_logps = logps.detach()`` (one update per rollout) the value is 0 and the gradient that of ``log pi``.

    Args:
        logps: Current log-probabilities ``log pi``, shape ``(B, T)``.
        old_logps: Log-probabilities of the sampling policy ``log pi_old`` (no gradient), shape ``(B, T)``.
        importance_sampling_level: ``"token"`` or ``"sequence"``.
        mask: Completion mask ``(B, T)`` for the sequence mean (``None``: every token counts).

    Returns:
        ``log rho``, ``(B, T)`` or ``(B, 1)``.

    Raises:
        ValueError: Unknown ``importance_sampling_level``.
    """
    log_ratio = logps - old_logps
    if importance_sampling_level == "token":
        return log_ratio
    if importance_sampling_level == "sequence":
        seq_mask = torch.ones_like(log_ratio) if mask is None else mask.to(log_ratio.dtype)
        return (log_ratio * seq_mask).sum(-1, keepdim=True) / seq_mask.sum(-1, keepdim=True).clamp(min=1.0)
    raise ValueError(
        f"Unknown importance_sampling_level {importance_sampling_level!r}; "
        f"valid values are {IMPORTANCE_SAMPLING_LEVELS}."
    )


def clipped_surrogate(
    logps: Tensor,
    old_logps: Tensor,
    advantages: Tensor,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    importance_sampling_level: str = "token",
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO / GRPO clipped surrogate loss per token (PPO Eq. 7, GRPO Eq. 3, DAPO clip-higher, GSPO Eq. 7).

    ``rho = pi / pi_old``; ``loss = -min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``.

    - ``importance_sampling_level="token"``: ``rho_t = exp(log pi_t - log pi_old_t)`` per token.
    - ``"sequence"`` (GSPO): ``rho = exp(mean_t over mask of (log pi_t - log pi_old_t))``, one ratio per
      sequence; the returned tensors then have shape ``(B, 1)`` and broadcast against the token mask.
    - ``delta`` (INTELLECT-2 two-sided clipping): the unclipped ratio is also capped, ``rho <- min(rho, delta)``,
      so a negative advantage cannot be amplified without bound.

    Args:
        logps: Current log-probabilities ``log pi``, shape ``(B, T)``.
        old_logps: Log-probabilities of the sampling policy ``log pi_old`` (no gradient), shape ``(B, T)``.
        advantages: Shape ``(B,)`` (one per sequence) or ``(B, T)`` (one per token).
        epsilon_low: Lower clip ``eps_low``.
        epsilon_high: Upper clip ``eps_high``; ``None`` uses ``epsilon_low`` (TRL's default).
        delta: Optional cap on the unclipped ratio.
        importance_sampling_level: ``"token"`` or ``"sequence"``.
        mask: Completion mask ``(B, T)``; only used to average the log-ratio at sequence level
            (``None`` there means every token counts).

    Returns:
        ``(per_token_loss, is_clipped)``: the loss of shape ``(B, T)`` (``(B, 1)`` at sequence level) and a
        bool tensor of the same shape marking where the clip is active, i.e. ``rho < 1 - eps_low`` with
        ``A < 0`` or ``rho > 1 + eps_high`` with ``A > 0`` (TRL's ``clip_ratio/region_mean``).

    Raises:
        ValueError: Unknown ``importance_sampling_level``.
    """
    if epsilon_high is None:
        epsilon_high = epsilon_low
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)

    ratio = torch.exp(log_importance_weights(logps, old_logps, importance_sampling_level, mask))
    clipped_ratio = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)

    is_clipped = ((ratio < 1 - epsilon_low) & (advantages < 0)) | ((ratio > 1 + epsilon_high) & (advantages > 0))
    return per_token_loss, is_clipped


def off_policy_sequence_mask(
    advantages: Tensor, logps: Tensor, old_logps: Tensor, mask: Tensor, threshold: float
) -> Tensor:
    """Off-policy sequence mask of DeepSeek-V3.2 (arXiv 2512.02556, Eq. 9; TRL's ``off_policy_mask_threshold``).

    A sequence is dropped from the policy loss when its advantage is negative *and* the policy has drifted from the
    one that sampled it by more than ``delta = threshold``, measured as the mean over its tokens of
    ``log pi_old - log pi_theta`` (a sample estimate of ``KL(pi_old || pi_theta)``)::

        M_i = 0  if  A_i < 0  and  (1 / |o_i|) sum_t (log pi_old(o_t) - log pi_theta(o_t)) > delta,  else 1.

    Learning from one's own bad samples is what hurts most once they are off-policy; good samples are always kept.
    With ``old_logps == logps`` (on-policy) the estimate is 0 and every sequence is kept for ``delta >= 0``. With
    advantages ``[-1, -1, 2]``, per-sequence KL ``[0.3, 0.1, 0.9]`` and ``delta = 0.2`` the mask is ``[0, 1, 1]``.

    Args:
        advantages: ``(B,)`` or ``(B, 1)`` per-sequence advantages.
        logps: Current log-probabilities ``log pi_theta``, ``(B, T)`` (detached here: the mask has no gradient).
        old_logps: Log-probabilities of the sampling policy ``log pi_old``, ``(B, T)``.
        mask: Completion mask ``(B, T)``.
        threshold: ``delta``.

    Returns:
        ``(B, 1)`` float mask: 1 keeps the sequence, 0 drops it.
    """
    mask = mask.to(logps.dtype)
    drift = ((old_logps - logps.detach()) * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
    advantages = advantages.reshape(-1, 1)
    return ((advantages >= 0) | (drift <= threshold)).to(logps.dtype)


def engine_importance_sampling_ratio(
    old_logps: Tensor,
    sampling_logps: Tensor,
    mask: Tensor,
    mode: str = "sequence_mask",
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> Tensor:
    """Truncated (or masked) importance weight of the sampling engine's mismatch with the training model.

    Yao et al. (2025), "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training": an inference engine
    (vLLM) samples from ``pi_engine``, which differs numerically from the training model's ``pi_old`` (other kernels,
    precision, batching), so the policy gradient is off-policy. Reweighting each token's loss by
    ``rho = pi_old / pi_engine``, bounded by ``C_max`` (and optionally ``C_min``), corrects it (TIS). With
    ``d_t = (log pi_old(o_t) - log pi_engine(o_t)) * m_t`` (``m`` the completion mask; a NaN engine log-prob counts as
    ``d_t = 0``):

    - ``"token_truncate"``: ``w_t = clamp(exp(d_t), C_min, C_max)``, one weight per token;
    - ``"token_mask"``: ``w_t = exp(d_t)`` where ``C_min <= exp(d_t) <= C_max``, else 0;
    - ``"sequence_truncate"``: ``w = clamp(exp(sum_t d_t), C_min, C_max)``, one weight per sequence;
    - ``"sequence_mask"`` (TRL's default): ``w = exp(sum_t d_t)`` inside the bounds, else 0 (the sequence is dropped).

    A missing bound is no bound. The weight multiplies the per-token policy loss (not the KL term), as in TRL 1.16's
    ``GRPOTrainer``. Example: ``d = [ln 2, ln 2]`` with ``C_max = 3``: token modes give ``[2, 2]``; the sequence
    ratio is 4, so ``"sequence_truncate"`` gives 3 and ``"sequence_mask"`` gives 0.

    Args:
        old_logps: ``(B, T)`` log-probabilities of the sampled tokens under the training model at sampling time.
        sampling_logps: ``(B, T)`` the engine's log-probabilities of the same tokens (vLLM's processed log-probs).
        mask: ``(B, T)`` completion mask.
        mode: One of :data:`VLLM_IMPORTANCE_SAMPLING_MODES`.
        clip_min: ``C_min`` (None: no lower bound).
        clip_max: ``C_max`` (None: no upper bound).

    Returns:
        ``(B, T)`` weights for the token modes, ``(B, 1)`` for the sequence modes; no gradient.

    Raises:
        ValueError: Unknown ``mode``.
    """
    if mode not in VLLM_IMPORTANCE_SAMPLING_MODES:
        raise ValueError(
            f"Unknown vllm_importance_sampling_mode {mode!r}; choose one of {VLLM_IMPORTANCE_SAMPLING_MODES}.")
    diff = torch.nan_to_num((old_logps.detach() - sampling_logps) * mask.to(old_logps.dtype), nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    low = float("-inf") if clip_min is None else clip_min
    high = float("inf") if clip_max is None else clip_max
    return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)


def entropy_bonus(entropies: Tensor, mask: Tensor) -> Tensor:
    """Mean per-token entropy ``H = sum_t m_t H_t / max(sum_t m_t, 1)`` over the tokens of ``mask``.

    The objective with an entropy bonus is ``L = L_policy - c * H`` (c: TRL's ``entropy_coef``). As in TRL, ``H`` is
    a plain token mean whatever ``loss_type`` normalises the policy term by, so ``c`` means the same for every
    loss type. Gradients flow through ``entropies`` when they carry them.

    Args:
        entropies: Per-token entropies ``(B, T)``.
        mask: The tokens the bonus acts on ``(B, T)`` (the completion tokens, or those the policy loss keeps).

    Returns:
        Scalar ``H``.
    """
    mask = mask.to(entropies.dtype)
    return (entropies * mask).sum() / mask.sum().clamp(min=1.0)


def adaptive_entropy_coef(
    coef: float, entropy: float, target: float, delta: float, coef_min: float, coef_max: float
) -> float:
    """One step of Skywork-OR1's adaptive entropy control (arXiv 2505.22312; TRL's ``use_adaptive_entropy``).

    ``c <- min(c + delta, c_max)`` when the measured entropy is at or below the target, else
    ``c <- max(c - delta, c_min)``. (The bonus itself is applied only while the entropy is at or below the target.)

    Example: ``adaptive_entropy_coef(0.01, entropy=0.1, target=0.2, delta=0.005, coef_min=0.0, coef_max=1.0)`` is
    ``0.015``; with ``entropy=0.5`` it is ``0.005``.

    Args:
        coef: The current coefficient ``c``.
        entropy: The mean token entropy measured over the last optimizer step.
        target: The target entropy.
        delta: The step size.
        coef_min: Lower bound of ``c``.
        coef_max: Upper bound of ``c``.

    Returns:
        The next coefficient.
    """
    if entropy <= target:
        return min(coef + delta, coef_max)
    return max(coef - delta, coef_min)


# ----------------------------------------------------------------------------------------------------------------
# Token aggregation
# ----------------------------------------------------------------------------------------------------------------
def aggregate_token_loss(
    per_token_loss: Tensor,
    mask: Tensor,
    loss_type: str,
    max_completion_length: int | None = None,
    num_items_in_batch: int | float | Tensor | None = None,
) -> Tensor:
    """Reduce per-token losses to one scalar, as TRL 1.16's ``GRPOTrainer`` does for each ``loss_type``.

    With ``l_{i,t}`` the per-token loss, ``m_{i,t}`` the mask and ``B`` sequences:

    - ``"grpo"`` (GRPO Eq. 3): ``mean_i [ sum_t m l / max(sum_t m, 1) ]``.
    - ``"bnpo"``: ``sum m l / max(sum m, 1)`` over the local batch.
    - ``"dr_grpo"`` (Dr. GRPO Eq. 3): ``sum m l / (B * max_completion_length)``.
    - ``"dapo"`` (DAPO Eq. 8): ``sum m l / max(num_items_in_batch, 1)``, where ``num_items_in_batch`` is the
      number of completion tokens of the whole generation batch across processes (``sum m`` when None).

    Gradient-accumulation scaling is left to the caller. Note TRL's own convention: it divides
    ``"grpo"``/``"bnpo"``/``"dr_grpo"`` by the accumulation steps, while for ``"dapo"`` it uses the normalizer
    ``num_items_in_batch / num_processes * gradient_accumulation_steps / steps_per_generation`` and no further
    division. To reproduce TRL's per-micro-batch loss exactly, divide every loss type by the accumulation steps
    and pass ``num_items_in_batch = N_tokens / (num_processes * steps_per_generation)`` for ``"dapo"``.

    Args:
        per_token_loss: Shape ``(B, T)`` or ``(B, 1)`` (sequence-level losses broadcast against the mask).
        mask: Completion mask, shape ``(B, T)``.
        loss_type: One of :data:`SUPPORTED_LOSS_TYPES`.
        max_completion_length: Required for ``"dr_grpo"``.
        num_items_in_batch: Token count for ``"dapo"``.

    Returns:
        Scalar loss.

    Raises:
        ValueError: Unknown ``loss_type`` or missing ``max_completion_length`` for ``"dr_grpo"``.
    """
    mask = mask.to(per_token_loss.dtype)
    masked_loss = per_token_loss * mask
    if loss_type == "grpo":
        return (masked_loss.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked_loss.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length (the constant normalizer).")
        return masked_loss.sum() / max(per_token_loss.shape[0] * max_completion_length, 1)
    if loss_type == "dapo":
        if num_items_in_batch is None:
            normalizer = mask.sum()
        else:
            normalizer = torch.as_tensor(num_items_in_batch, dtype=masked_loss.dtype, device=masked_loss.device)
        return masked_loss.sum() / normalizer.clamp(min=1.0)
    raise ValueError(f"Unknown loss_type {loss_type!r}; supported loss types are {SUPPORTED_LOSS_TYPES}.")
