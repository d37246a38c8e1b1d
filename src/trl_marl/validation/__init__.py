"""Input checks shared by every trl-marl trainer: bad input fails before the first step, naming the field and the fix.

Two modules, one per kind of input:

- [`~trl_marl.validation.config`]: the configs' fields (mixed precision, choices, timeouts, positive integers, the
  learning rate, whole groups of `num_generations` per batch);
- [`~trl_marl.validation.data`]: the environment, the dataset's prompts and their lengths against each agent's
  context window.

Every name of both is importable from `trl_marl.validation`. The reward contract (its errors, timeouts and the call
of a reward function) lives in `trl_marl.reward_contract`.
"""

from __future__ import annotations

from .config import (
    check_choice,
    check_importance_sampling,
    check_learning_rate,
    check_mixed_precision,
    check_positive,
    check_timeout,
    generation_batch_error,
    has_accelerator,
    use_activation_checkpointing_name,
    use_cpu_for_cpu_processes,
)
from .data import (
    CONTEXT_OVERRUN_LIMIT,
    MIN_OVERRUN_TOKENS,
    PROMPT_LENGTH_CHECKS,
    ROWS_CHECKED,
    ROWS_PER_CHUNK,
    SPECIAL_TOKENS_SLACK,
    ContextLengthWarning,
    check_dataset_prompts,
    check_env_protocol,
    check_prompt_lengths,
    context_window,
    overrun_limit,
)

__all__ = [
    "CONTEXT_OVERRUN_LIMIT",
    "MIN_OVERRUN_TOKENS",
    "PROMPT_LENGTH_CHECKS",
    "ROWS_CHECKED",
    "ROWS_PER_CHUNK",
    "SPECIAL_TOKENS_SLACK",
    "ContextLengthWarning",
    "check_choice",
    "check_importance_sampling",
    "check_dataset_prompts",
    "check_env_protocol",
    "check_learning_rate",
    "check_mixed_precision",
    "check_positive",
    "check_prompt_lengths",
    "check_timeout",
    "context_window",
    "generation_batch_error",
    "has_accelerator",
    "overrun_limit",
    "use_activation_checkpointing_name",
    "use_cpu_for_cpu_processes",
]
