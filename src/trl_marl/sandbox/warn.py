"""Sandbox warnings: sanitized (what a program can make the caller log is bounded) and logged once each."""

from __future__ import annotations

import logging
import re

logger = logging.getLogger("trl_marl.sandbox")

_WARNED: set[str] = set()
_MAX_WARNINGS = 32  # distinct sandbox warnings logged per process; then one last line says the rest are dropped
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean_text(text: str, limit: int = 300) -> str:
    """`text` with control characters (terminal escapes, newlines) escaped and cut to `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def warn_once(message: str) -> None:
    """Log a sandbox warning once per process: sanitized, at most 300 characters, at most `_MAX_WARNINGS` kinds."""
    message = clean_text(message)
    if message in _WARNED or len(_WARNED) > _MAX_WARNINGS:
        return
    _WARNED.add(message)
    if len(_WARNED) > _MAX_WARNINGS:
        logger.warning("trl_marl sandbox: further distinct warnings are not logged")
    else:
        logger.warning(message)
