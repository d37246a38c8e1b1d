"""Log-probabilities of given tokens through a language model's output head, a chunk of positions at a time.

A policy-gradient loss needs, per completion token y_t, only ``log pi(y_t | ...)`` (and, for logging or an entropy
bonus, the entropy of pi at t). The usual way computes the ``[batch, length, vocab]`` logits of every position at
once, keeps them (and their log-softmax) alive for the backward, and reads one entry per position: at a 152k-token
vocabulary and 32 x 128 completion tokens that is 1.2 GB per bf16 copy. Here the head runs over a chunk of positions
at a time:

    z_t = head(h_t) / T                                      (one chunk's logits, float32)
    log pi(y_t) = z_t[y_t] - logsumexp_v z_t[v]
    H_t = -sum_v p_t[v] log p_t[v],   p_t = softmax(z_t)

and, when gradients are on, each chunk runs under activation checkpointing: its logits are freed after the forward
and recomputed in the backward, so at most one chunk's logits (and their gradient) exist at a time. The values are
those of the full computation in float32 (each position's softmax involves that position alone); the head's weights
get their gradient as usual.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

__all__ = ["DEFAULT_CHUNK_ELEMENTS", "chunk_positions", "head_logprobs"]

# logits elements per chunk: 16M (64 MiB in float32); 110 positions at a 152k-token vocabulary
DEFAULT_CHUNK_ELEMENTS = 2**24


def chunk_positions(vocab_size: int, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> int:
    """Positions per chunk so that a chunk's logits hold at most `chunk_elements` entries (at least one position).

    >>> chunk_positions(151936)
    110
    >>> chunk_positions(32, chunk_elements=100)
    3
    """
    return max(1, chunk_elements // max(1, vocab_size))


def _chunk_logprobs(hidden: Tensor, labels: Tensor, head: Callable[[Tensor], Tensor], temperature: float,
                    compute_entropy: bool, entropy_grad: bool) -> tuple[Tensor, Tensor]:
    logits = head(hidden).float() / temperature
    log_norm = torch.logsumexp(logits, dim=-1)
    logps = logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - log_norm
    if not compute_entropy:
        return logps, logps.new_zeros(0)
    if entropy_grad:
        log_p = logits - log_norm.unsqueeze(-1)
    else:
        log_p = logits.detach() - log_norm.detach().unsqueeze(-1)
    return logps, -(log_p.exp() * log_p).sum(dim=-1)


def head_logprobs(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    labels: Tensor,
    temperature: float = 1.0,
    chunk_size: int = 128,
    compute_entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """``log softmax(head(hidden) / T)[labels]`` per position, and optionally the entropies, without the full logits.

    Args:
        hidden: The last hidden states (after the final norm) that predict `labels`, shape ``(..., D)``.
        head: The output head, ``(n, D) -> (n, V)`` (e.g. the model's `lm_head` module).
        labels: Token ids, shape ``hidden.shape[:-1]``.
        temperature: The logits are divided by it before the softmax (the sampling temperature, as in TRL's GRPO).
        chunk_size: Positions per chunk (`chunk_positions` picks one from a memory budget).
        compute_entropy: Also return the entropy of each position's distribution.
        entropy_grad: Let gradients flow through the entropy (an entropy bonus); otherwise it is detached.

    Returns:
        ``(logps, entropy)``: float32 tensors of the shape of `labels` (`entropy` is None unless asked for).

    Example:

    ```python
    head = torch.nn.Linear(8, 50, bias=False)
    hidden, labels = torch.randn(2, 5, 8), torch.randint(50, (2, 5))
    logps, _ = head_logprobs(hidden, head, labels, chunk_size=3)
    full = torch.log_softmax(head(hidden), -1).gather(-1, labels[..., None])[..., 0]  # the same, within 1e-6
    ```
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}.")
    shape = labels.shape
    flat_hidden = hidden.reshape(-1, hidden.size(-1))
    flat_labels = labels.reshape(-1)
    logps, entropies = [], []
    for h, y in zip(flat_hidden.split(chunk_size), flat_labels.split(chunk_size), strict=True):
        if torch.is_grad_enabled():  # the chunk's logits are recomputed in the backward instead of kept
            lp, ent = checkpoint(_chunk_logprobs, h, y, head, temperature, compute_entropy, entropy_grad,
                                 use_reentrant=False)
        else:
            lp, ent = _chunk_logprobs(h, y, head, temperature, compute_entropy, entropy_grad)
        logps.append(lp)
        entropies.append(ent)
    if not logps:  # no positions
        empty = flat_hidden.new_zeros(shape, dtype=torch.float32)
        return empty, (empty.clone() if compute_entropy else None)
    out = torch.cat(logps).reshape(shape)
    return out, (torch.cat(entropies).reshape(shape) if compute_entropy else None)
