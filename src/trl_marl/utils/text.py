"""The text of a completion, whatever its form (a plain string or chat messages), and the words of a text."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["completion_text", "words"]


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


_WORD = re.compile(r"\w+(?:'\w+)*")


def words(text: str) -> list[str]:
    """The lower-cased words of `text`: runs of letters, digits and `_`, with apostrophes inside a word kept."""
    return _WORD.findall(text.lower())
