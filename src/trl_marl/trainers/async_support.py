"""What asynchronous rollouts (`max_staleness > 0`) support so far, checked for both trainers before any step.

Both `MAGRPOConfig` and `MultiAgentPPOConfig` call [`check_async_common`] from `__post_init__` (with one process) and
their trainers again with the accelerator's processes and the sharding they found; each error names the
field and the fix. MAGRPO adds the checks of its generation schedule (`trainers.magrpo.config.check_async_support`).
The worker itself: `trainers.magrpo.async_rollout.AsyncRollouts`.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["ASYNC_BACKENDS", "async_names", "check_async_common"]

# what the rollout worker generates with: its own copy of the team, or the one vLLM engine (colocated or a server),
# which it drives alone while the trainer trains
ASYNC_BACKENDS = ("transformers", "vllm")


def async_names(args: Any) -> tuple[str, str]:
    """The subject and the way back of every error: "`max_staleness=s` (asynchronous rollouts)" and
    "or `max_staleness=0` (synchronous)"."""
    return f"`max_staleness={args.max_staleness}` (asynchronous rollouts)", "or `max_staleness=0` (synchronous)"


def check_async_common(args: Any, num_processes: int = 1, sharded: bool = False) -> None:
    """Refuse what neither trainer's asynchronous rollouts support yet; warn without the correction.

    Args:
        args: A `MAGRPOConfig` or a `MultiAgentPPOConfig` (`max_staleness`, `generation_backend`, `use_vllm`,
            `vllm_importance_sampling_correction`).
        num_processes: The accelerator's processes.
        sharded: Whether the weights are sharded (FSDP, DeepSpeed ZeRO-3).

    Warns:
        UserWarning: asynchronous rollouts without the importance-sampling correction (from `__post_init__`).

    Raises:
        ValueError: another generation backend than the team's own decoding or vLLM, or sharded weights.
    """
    if args.max_staleness == 0:
        return
    name, sync = async_names(args)
    if args.generation_backend not in ASYNC_BACKENDS:
        raise ValueError(f"{name} supports `generation_backend` 'transformers' (the team's own decoding) or 'vllm' "
                         f"only so far, got {args.generation_backend!r}: set one of them, {sync}.")
    if sharded:
        raise ValueError(f"{name} does not run with sharded weights (FSDP, DeepSpeed ZeRO-3) yet: every forward is "
                         f"then a collective, which the rollout worker cannot join; use DDP (or one process), {sync}.")
    if num_processes == 1 and not args.vllm_importance_sampling_correction:  # once, from `__post_init__`
        warnings.warn(f"{name} with `vllm_importance_sampling_correction=False`: rollouts sampled by older policies "
                      "are trained as if the current policy had sampled them (biased). Set "
                      "`vllm_importance_sampling_correction=True` to weigh them by the truncated importance ratio.",
                      UserWarning, stacklevel=4)
