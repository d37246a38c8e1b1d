"""Local data files, the one reader every loader of `trl_marl.data` uses for its `data_files` argument.

A file is read with the `datasets` builder of its suffix: `.jsonl` and `.json` (JSON Lines, or one JSON list of
rows), `.csv`, `.parquet`; JSON and CSV may be compressed (`.gz`, `.bz2`, `.xz`, `.zst`). Several files must share
one format and are concatenated in the order given.

Example:

```python
from trl_marl.data.files import load_data_files

rows = load_data_files("my_gsm8k.jsonl")  # one split, the rows of the file
```
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import datasets

DATA_FILE_BUILDERS: dict[str, str] = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
"""The `datasets` builder of each data-file suffix."""

COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst")
"""Compression suffixes `datasets` reads through (JSON and CSV files)."""

DATA_FILE_KINDS = ".jsonl, .json, .csv or .parquet"
"""The suffixes of a data file, as messages and help texts list them."""


def first_rows(dataset: datasets.Dataset, max_rows: int | None) -> datasets.Dataset:
    """The first `max_rows` rows of `dataset` (all of them when `max_rows` is None or at least its length): the row
    cap of every loader's `max_rows` and every script's `max_train_samples` / `max_eval_samples`.

    Example: `first_rows(Dataset.from_dict({"x": [1, 2, 3]}), 2)["x"]` is `[1, 2]`."""
    return dataset if max_rows is None else dataset.select(range(min(max_rows, len(dataset))))


def data_file_builder(path: str) -> str | None:
    """The `datasets` builder that reads `path` (`"json"`, `"csv"`, `"parquet"`), from its suffix; None when the
    suffix is not a data file's.

    Example: `data_file_builder("rows.jsonl.gz") == "json"`, `data_file_builder("openai/gsm8k") is None`.
    """
    name = os.path.basename(str(path)).lower()
    for compression in COMPRESSION_SUFFIXES:
        if name.endswith(compression):
            name = name[: -len(compression)]
            break
    builder = DATA_FILE_BUILDERS.get(os.path.splitext(name)[1])
    if builder == "parquet" and name != os.path.basename(str(path)).lower():
        return None  # Parquet compresses itself: a `.parquet.gz` is no file `datasets` reads
    return builder


def as_file_list(data_files: str | Sequence[str]) -> list[str]:
    """`data_files` as a list of paths: one path, a list, or a comma-separated string (`"a.jsonl,b.jsonl"`)."""
    if isinstance(data_files, str):
        return [part.strip() for part in data_files.split(",") if part.strip()]
    return [str(part) for part in data_files]


def load_data_files(data_files: str | Sequence[str], field: str = "`data_files`") -> datasets.Dataset:
    """The rows of local data files, read with the `datasets` builder of their suffix (see the module docstring).

    Args:
        data_files (`str` or `Sequence[str]`): A path, a list of paths, or comma-separated paths of one format.
        field (`str`): The argument that named the files, for the messages.

    Returns:
        `datasets.Dataset`: The rows of the files, in order (one split).

    Raises:
        FileNotFoundError: A file does not exist (the message names `field` and the absolute path).
        ValueError: No file is given, a suffix is not a data file's, or the files mix formats.
    """
    import datasets

    files = as_file_list(data_files)
    if not files:
        raise ValueError(f"{field} names no file; pass a local {DATA_FILE_KINDS} file.")
    builders = set()
    for path in files:
        builder = data_file_builder(path)
        if builder is None:
            raise ValueError(f"{field} {path!r} is not a data file: its name must end in {DATA_FILE_KINDS} (JSON and "
                             f"CSV may be compressed: {', '.join(COMPRESSION_SUFFIXES)}).")
        if not os.path.isfile(os.path.expanduser(path)):
            raise FileNotFoundError(f"{field} {path!r}: no such file ({os.path.abspath(os.path.expanduser(path))}).")
        builders.add(builder)
    if len(builders) > 1:
        raise ValueError(f"{field} mixes formats ({', '.join(sorted(builders))}): pass files of one format.")
    paths = [os.path.abspath(os.path.expanduser(path)) for path in files]
    return datasets.load_dataset(builders.pop(), data_files=paths, split="train")
