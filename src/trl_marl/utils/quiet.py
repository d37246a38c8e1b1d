"""Warnings of our dependencies that a trl-marl user cannot act on, silenced each by its exact message, nothing more.

- PEFT (0.21) asks every model it wraps for `is_gradient_checkpointing`, an alias that transformers 5 deprecates with a
  `FutureWarning` on each call (the new name is `is_activation_checkpointing`): [`peft_quietly`] hides that one
  warning around our calls into PEFT (`get_peft_model`, `PeftModel.from_pretrained`, `load_adapter`). trl-marl itself
  never reads the alias (its checks look at the layers' `gradient_checkpointing` flags, which both names read).
- bitsandbytes (0.49+, on CPUs with AVX512-BF16) tries at import to fetch an optional CPU kernel for 4-bit matmuls from
  the Hub through the `kernels` package, and logs "Failed to load CPU gemm_4bit_forward ..." when that package is
  missing, on every run that imports PEFT or transformers' quantizers. Its own CPU kernel is used instead (same
  results); [`quiet_bitsandbytes_import`] drops that one record (`import trl_marl` installs it).
- Under `accelerate launch` or `torchrun` every process would print every warning, log line and progress bar again:
  [`quiet_other_ranks`] (called by `import trl_marl`) leaves them to the main process, unless
  `TRL_MARL_LOG_ALL_RANKS=1`.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

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


LOG_ALL_RANKS_ENV = "TRL_MARL_LOG_ALL_RANKS"
"""Set to 1 to let every process of a multi-process run (`accelerate launch`, `torchrun`) log, warn and show progress
bars; by default only the main process (global rank 0) does ([`quiet_other_ranks`])."""

_other_rank_quieted = False


def process_rank(environ: Mapping[str, str] | None = None) -> int:
    """This process's global rank as the launcher set it (`RANK`, else `LOCAL_RANK`; 0 when neither is set)."""
    environ = os.environ if environ is None else environ
    for key in ("RANK", "LOCAL_RANK"):
        value = environ.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def say(message: str, environ: Mapping[str, str] | None = None) -> None:
    """Print a script's `[trl-marl] ...` line on stdout in the main process only (every process with
    [`LOG_ALL_RANKS_ENV`] set): under `accelerate launch` each line shows once, not once per process."""
    environ = os.environ if environ is None else environ
    if process_rank(environ) == 0 or environ.get(LOG_ALL_RANKS_ENV, "").strip() not in ("", "0"):
        print(message, flush=True)


def quiet_other_ranks(environ: MutableMapping[str, str] | None = None) -> bool:
    """In a process of a multi-process run other than the main one, silence what every process would print again:
    warnings, log records below ERROR of trl-marl, transformers, datasets and accelerate, and their progress bars (a
    model's "Loading weights", a dataset's map). Errors and tracebacks still show. Nothing changes in the main
    process, in a single-process run, or with [`LOG_ALL_RANKS_ENV`] set. `import trl_marl` calls it; idempotent.

    Returns:
        Whether this process was quieted.
    """
    global _other_rank_quieted
    environ = os.environ if environ is None else environ
    if process_rank(environ) == 0 or environ.get(LOG_ALL_RANKS_ENV, "") not in ("", "0"):
        return False
    # read by transformers, datasets and huggingface_hub when they are imported; a value the user set is kept
    environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    environ.setdefault("DATASETS_VERBOSITY", "error")
    environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    for name in ("trl_marl", "transformers", "datasets", "accelerate", "trl", "peft", "torch.distributed"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    import sys

    if "transformers" in sys.modules:  # already imported: its own switches (the environment was read then)
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    _other_rank_quieted = True
    return True


def other_rank_quieted() -> bool:
    """Whether [`quiet_other_ranks`] quieted this process (a code path that sets its own log level checks it)."""
    return _other_rank_quieted


class _CurrentStderr(logging.StreamHandler):
    """A handler that writes to whatever `sys.stderr` is at each record (a redirected or captured stream too)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> Any:
        import sys

        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def announcer(name: str) -> logging.Logger:
    """The logger `name` (under `trl_marl`), set up to print its INFO records on stderr as `[trl-marl] message` once
    each, without a root handler repeating them: for lines that every run shows (a checkpoint's size). In a process
    that [`quiet_other_ranks`] quieted it says nothing below ERROR."""
    logger = logging.getLogger(name)
    if not any(isinstance(handler, _CurrentStderr) for handler in logger.handlers):
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("[trl-marl] %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.ERROR if _other_rank_quieted else logging.INFO)
    return logger
