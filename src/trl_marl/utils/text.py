"""The text of a completion, whatever its form (a plain string or chat messages), the words of a text, and text that
any encoder takes ([`encodable`])."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["completion_text", "encodable", "words"]


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


_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    r"""`text` with every lone surrogate (U+D800-U+DFFF) replaced by U+FFFD, so that it encodes to UTF-8.

    A Python string may hold surrogates that no UTF-8 encoder takes: a JSON escape such as `"\ud800"` in a model's
    tool call decodes to one, and a tokenizer, a parser or a log file then raises on it. Everything else (NUL bytes
    and other control characters included) is kept; a text that already encodes is returned as it is. Linear in the
    length of `text`.

    Example:

    ```python
    >>> encodable("caf\udce9") == "caf\ufffd", encodable("caf\u00e9") == "caf\u00e9"
    (True, True)
    ```
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text
