"""NaN-aware and masked statistics, and whitening: the helpers of the advantage and PPO math.

No equation of a paper of their own (see `trl_marl.core`); split out of `core.advantages`, which re-exports every name
here, so `from trl_marl.core.advantages import nan_std` keeps working.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["masked_mean", "masked_var", "nan_std", "valid_count", "whiten", "whiten_jointly"]


# ----------------------------------------------------------------------------------------------------------------
# NaN-aware statistics
# ----------------------------------------------------------------------------------------------------------------
def valid_count(values: Tensor, dim: int | None, keepdim: bool) -> Tensor:
    """Number of non-NaN entries of ``values`` along ``dim`` (all entries when ``dim`` is None)."""
    valid = (~torch.isnan(values)).to(values.dtype)
    if dim is None:
        return valid.sum()
    return valid.sum(dim=dim, keepdim=keepdim)


def nan_std(values: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Unbiased (Bessel-corrected) standard deviation that ignores NaN entries.

    ``std = sqrt( sum_valid (x - mean_valid)^2 / (k - 1) )`` with ``k`` the number of non-NaN entries;
    NaN where ``k < 2``. Numerically the same as ``trl.trainer.utils.nanstd``.

    Args:
        values: Input tensor.
        dim: Dimension to reduce; ``None`` reduces over every entry.
        keepdim: Keep the reduced dimension (ignored when ``dim`` is None).

    Returns:
        The standard deviation, NaN where fewer than two entries are valid.
    """
    if dim is None:
        mean = torch.nanmean(values)
        sq_dev = torch.nansum((values - mean) ** 2)
    else:
        mean = torch.nanmean(values, dim=dim, keepdim=True)
        sq_dev = torch.nansum((values - mean) ** 2, dim=dim, keepdim=keepdim)
    count = valid_count(values, dim, keepdim)
    var = torch.where(count > 1, sq_dev / (count - 1).clamp(min=1), torch.full_like(sq_dev, float("nan")))
    return var.sqrt()


# ----------------------------------------------------------------------------------------------------------------
# Masked statistics and whitening (shared with the PPO trainer)
# ----------------------------------------------------------------------------------------------------------------
def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over the entries where ``mask`` is nonzero: ``sum(m * x) / sum(m)``.

    Args:
        values: Input tensor.
        mask: Tensor broadcastable to ``values`` (bool or 0/1).
        dim: Dimension to reduce; ``None`` reduces over everything.

    Returns:
        The masked mean (NaN where the mask is empty, as in the original TRL PPO helper).
    """
    mask = mask.to(values.dtype).expand_as(values)
    masked = torch.where(mask != 0, values * mask, torch.zeros_like(values))
    if dim is None:
        return masked.sum() / mask.sum()
    return masked.sum(dim=dim) / mask.sum(dim=dim)


def masked_var(values: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance of ``values`` over the entries where ``mask`` is nonzero (all entries reduced).

    ``var = sum(m * (x - mu)^2) / sum(m)``, times ``k / (k - 1)`` (Bessel) when ``unbiased``, ``k = sum(m)``.

    Args:
        values: Input tensor.
        mask: Tensor broadcastable to ``values``.
        unbiased: Apply Bessel's correction.

    Returns:
        Scalar variance.

    Raises:
        ValueError: When the mask is empty, or holds a single entry and ``unbiased`` is set.
    """
    count = mask.to(values.dtype).expand_as(values).sum()
    min_count = 2 if unbiased else 1
    if count.item() < min_count:
        raise ValueError(
            f"masked_var needs at least {min_count} unmasked entries (unbiased={unbiased}), got {count.item():g}; "
            "this happens e.g. with a mini-batch of a single token."
        )
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        variance = variance * count / (count - 1)
    return variance


def whiten(values: Tensor, mask: Tensor | None = None, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Whitening used by PPO for advantages (and optionally rewards): ``(x - mu) / sqrt(var + eps)``.

    Statistics are the (masked) mean and unbiased variance over all entries. With ``shift_mean=False`` the
    mean is added back, i.e. only the scale is normalized (as TRL's PPO does for rewards).

    Args:
        values: Input tensor.
        mask: Optional mask; when given only masked-in entries enter the statistics (all entries are
            transformed; callers zero the padding themselves if they need to).
        shift_mean: Subtract the mean (``True``) or keep it.
        eps: Variance floor inside the square root.

    Returns:
        Whitened tensor, same shape as ``values``.
    """
    if mask is None:
        mask = torch.ones_like(values)
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def whiten_jointly(
    values: list[Tensor], masks: list[Tensor], shift_mean: bool = True, eps: float = 1e-8
) -> list[Tensor]:
    """:func:`whiten` of several tensors with one mean and one variance: those of all their masked entries.

    ``mu = sum_i sum(m_i * x_i) / sum_i sum(m_i)``, ``var`` the unbiased variance of the same entries, and
    ``x_i <- (x_i - mu) / sqrt(var + eps)`` (``+ mu`` again when ``shift_mean=False``). It is :func:`whiten` of the
    tensors' masked entries concatenated, for tensors of different widths, e.g. the samples of several agents that
    share one policy and one value model (one whitening group for the team).

    Args:
        values: Tensors to whiten (any shapes).
        masks: One mask per tensor, broadcastable to it; only masked-in entries enter the statistics.
        shift_mean: Subtract the mean (``True``) or keep it.
        eps: Variance floor inside the square root.

    Returns:
        The whitened tensors, in order, shaped like ``values``.

    Raises:
        ValueError: ``values`` and ``masks`` differ in length, or fewer than two entries are masked in.
    """
    if len(values) != len(masks):
        raise ValueError(f"Got {len(values)} tensors and {len(masks)} masks.")
    entries = torch.cat([v[m.to(torch.bool).expand_as(v)].reshape(-1) for v, m in zip(values, masks)])
    if entries.numel() < 2:
        raise ValueError(f"whiten_jointly needs at least 2 unmasked entries, got {entries.numel()}.")
    mean = entries.mean()
    var = entries.var(unbiased=True)
    scale = torch.rsqrt(var + eps)
    return [(v - mean) * scale + (0.0 if shift_mean else mean) for v in values]
