"""The text of a completion, whatever its form (a plain string or TRL's conversational chat messages)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["completion_text"]


def completion_text(completion: Any) -> str:
    """The text of one completion.

    Args:
        completion (`str` or `list[dict]`): A plain completion, or a conversational one (chat messages such as
            `[{"role": "assistant", "content": "..."}]`; the content of the last message is used).

    Returns:
        `str`: The text (`""` for an empty message list or a `None` content).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        if not completion:
            return ""
        return completion_text(completion[-1])
    if completion is None:
        return ""
    return str(completion)
