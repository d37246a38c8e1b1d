"""TL;DR (`trl-lib/tldr`) for the cooperative writing task ([`~trl_marl.envs.writing.CooperativeWritingEnv`])."""


from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .files import first_rows

if TYPE_CHECKING:
    import datasets


_TLDR_PROMPT = re.compile(
    r"^\s*SUBREDDIT:\s*(?P<subreddit>[^\n]*?)\s*\n\s*TITLE:\s*(?P<title>[^\n]*?)\s*\n\s*POST:\s*(?P<post>.*?)"
    r"\s*(?:TL;DR:\s*)?$",
    re.DOTALL,
)


def parse_tldr_prompt(prompt: str) -> dict[str, str]:
    """Split a `trl-lib/tldr` prompt into its parts.

    The prompts read `"SUBREDDIT: r/<name>\\n\\nTITLE: <title>\\n\\nPOST: <post>\\n\\nTL;DR:"` (TRL's
    `examples/datasets/tldr.py`). A prompt in another format is returned whole (without a trailing "TL;DR:") as the
    post, with empty subreddit and title.

    Returns:
        `dict[str, str]`: `subreddit`, `title` and `post`.
    """
    match = _TLDR_PROMPT.match(prompt)
    if match:
        return {k: match.group(k).strip() for k in ("subreddit", "title", "post")}
    post = re.sub(r"\s*TL;DR:\s*$", "", prompt).strip()
    return {"subreddit": "", "title": "", "post": post}


def _tldr_row(example: Mapping[str, Any], include_title: bool) -> dict[str, str]:
    parts = parse_tldr_prompt(example["prompt"])
    text = f"{parts['title']}\n\n{parts['post']}" if include_title and parts["title"] else parts["post"]
    return {"text": text, "reference": str(example["completion"]).strip()}


def load_tldr(
    split: str = "train",
    max_rows: int | None = None,
    dataset_name: str = "trl-lib/tldr",
    include_title: bool = False,
    data_files: str | Sequence[str] | None = None,
) -> datasets.Dataset:
    """Load TL;DR (Reddit posts and their authors' summaries) for [`CooperativeWritingEnv`].

    `trl-lib/tldr` has the columns `prompt` (`"SUBREDDIT: ...\\n\\nTITLE: ...\\n\\nPOST: ...\\n\\nTL;DR:"`) and
    `completion` (the TL;DR, with a leading space), splits `train` (116,722 rows), `validation` and `test`. It is
    downloaded from the Hugging Face Hub (or read from the local `datasets` cache).

    Args:
        split (`str`): The split to load.
        max_rows (`int`, *optional*): Keep only the first `max_rows` rows.
        dataset_name (`str`): The dataset to load (a Hub name or a local path with the same columns).
        include_title (`bool`): Put the post's title (and a blank line) before the post in `text`.
        data_files (`str` or `list[str]`, *optional*): Read these local files instead (`.jsonl`, `.json`, `.csv` or
            `.parquet`, see `trl_marl.data.files`); `dataset_name` and `split` are then not used. Their rows have
            TL;DR's `prompt` and `completion`, or are already in the env's schema: `text` (and `reference`, the
            ROUGE-L reference, when there is one), kept as they are.

    Returns:
        `datasets.Dataset`: The columns `text` (the post) and `reference` (the TL;DR, stripped).
    """
    import datasets

    if max_rows is not None and max_rows < 0:
        raise ValueError(f"`max_rows` must be >= 0 or None, got {max_rows}.")
    if data_files is not None:
        from .files import load_data_files

        dataset, name = load_data_files(data_files), str(data_files)
    else:
        dataset, name = datasets.load_dataset(dataset_name, split=split), f"{dataset_name!r} ({split})"
    dataset = first_rows(dataset, max_rows)
    if data_files is not None and "text" in dataset.column_names:  # already the env's schema
        return dataset
    missing = [c for c in ("prompt", "completion") if c not in dataset.column_names]
    if missing:
        local = " (or `text`, with an optional `reference`)" if data_files is not None else ""
        raise ValueError(
            f"load_tldr expects the columns 'prompt' and 'completion' of trl-lib/tldr{local}, but {name} lacks "
            f"{missing} (it has {dataset.column_names})."
        )
    return dataset.map(_tldr_row, fn_kwargs={"include_title": include_title}, remove_columns=dataset.column_names)
