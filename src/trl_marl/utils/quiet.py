"""Warnings of our dependencies that a trl-marl user cannot act on, silenced each by its exact message, nothing more.

- PEFT (0.21) asks every model it wraps for `is_gradient_checkpointing`, an alias that transformers 5 deprecates with a
  `FutureWarning` on each call (the new name is `is_activation_checkpointing`): [`peft_quietly`] hides that one
  warning around our calls into PEFT (`get_peft_model`, `PeftModel.from_pretrained`, `load_adapter`). trl-marl itself
  never reads the alias (its checks look at the layers' `gradient_checkpointing` flags, which both names read).
- bitsandbytes (0.49+, on CPUs with AVX512-BF16) tries at import to fetch an optional CPU kernel for 4-bit matmuls from
  the Hub through the `kernels` package, and logs "Failed to load CPU gemm_4bit_forward ..." when that package is
  missing, on every run that imports PEFT or transformers' quantizers. Its own CPU kernel is used instead (same
  results); [`quiet_bitsandbytes_import`] drops that one record (`import trl_marl` installs it).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

CHECKPOINTING_ALIAS_WARNING = r"`is_gradient_checkpointing` is deprecated"
BITSANDBYTES_KERNEL_LOG = "Failed to load CPU gemm_4bit_forward"
_BITSANDBYTES_CPU_LOGGER = "bitsandbytes.backends.cpu.ops"


@contextmanager
def peft_quietly() -> Iterator[None]:
    """Run PEFT calls without transformers' `is_gradient_checkpointing` deprecation warning (other warnings pass)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CHECKPOINTING_ALIAS_WARNING, category=FutureWarning)
        yield


class _DropKernelHubWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(BITSANDBYTES_KERNEL_LOG)


def quiet_bitsandbytes_import() -> None:
    """Drop bitsandbytes' "Failed to load CPU gemm_4bit_forward" log record (its other records pass); idempotent."""
    logger = logging.getLogger(_BITSANDBYTES_CPU_LOGGER)
    if not any(isinstance(f, _DropKernelHubWarning) for f in logger.filters):
        logger.addFilter(_DropKernelHubWarning())
