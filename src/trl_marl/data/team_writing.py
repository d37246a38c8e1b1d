"""Cooperative writing texts that ship with trl-marl: docstrings of the Python standard library.

MAGRPO's writing task ([`~trl_marl.envs.writing.CooperativeWritingEnv`]) gives two agents the same source text; agent
0 writes a short summary, agent 1 a detailed one. The paper's sources (Reddit TL;DR posts, arXiv abstracts) come from
the Hugging Face Hub; these come with the package, offline, and each has a summary written by its own author.

**The texts.** `team_writing.jsonl` (package data, one JSON object a line) holds 174 docstrings of CPython 3.11.7's
standard library that open with a one-line summary followed by 40-150 words of prose explanation, extracted by
`scripts/extract_team_writing.py` (which says exactly what it keeps and drops: no doctest lines, reST markup, code
blocks or argument lists). Each row has

- `text`: the explanation (40-150 words, mean 61), the source the agents read;
- `reference`: the docstring's summary line (3-13 words, mean 8), written by the author as the short version of the
  same text: the reference of ROUGE-L for agent 0's short summary (the column `WritingTeamReward` and
  `RougeLReward` read by default). There is no reference for the detailed summary: the nearest one is `text`
  itself, so ROUGE-L of the detailed summary against `text` measures how much of the source it keeps, not quality;
- `source`: where it comes from (`module.qualname`, e.g. `"asyncio.tasks.wait_for"`);
- `module`: the top-level module (`"asyncio"`), the unit of the split.

**Held-out split by module.** [`HELDOUT_MODULES`] (12 top-level modules, 44 texts) holds the held-out texts; the
other 43 modules' 130 texts are for training. The list was fixed once, before any model was run on the texts: the
sorted module names shuffled by `random.Random(40)`, taken in that order until a quarter of the texts was held out,
skipping the three modules with more than 12 texts (`asyncio`, `email`, `xml`, which stay in training). No held-out
text shares a module with a training text, so a team that does well on the held-out texts writes about code it
never trained on.

**Licence.** The texts are the Python Software Foundation's, from CPython's source, under the PSF License Agreement
(version 2), which permits redistribution of derived works that keep its notice ([`PSF_NOTICE`], "Copyright (c)
2001, 2002, ..., 2023 Python Software Foundation; All Rights Reserved") and say what was changed. The agreement is in
`LICENSES/PSF-2.0.txt` of trl-marl's source tree and wheel; the changes (docstrings cut to their summary line and
leading prose paragraphs, whitespace normalised, `*emphasis*` marks removed) are listed in the extraction script.

Example:

```python
>>> from trl_marl.data.team_writing import load_team_writing, team_writing_rows
>>> len(team_writing_rows("train")), len(team_writing_rows("heldout"))
(130, 44)
>>> load_team_writing("heldout")[0]["source"]
'abc.abstractmethod'
```
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets


DATA_FILE = "team_writing.jsonl"
"""The package data file holding the rows (in `trl_marl.data`)."""

PSF_NOTICE = ("Copyright (c) " + ", ".join(str(year) for year in range(2001, 2024))
              + " Python Software Foundation; All Rights Reserved")
"""The PSF's copyright notice of CPython 3.11.7, which the PSF License asks derived works to keep."""

PYTHON_VERSION = "3.11.7"
"""The CPython version whose standard library the texts were extracted from."""

HELDOUT_MODULES: tuple[str, ...] = ("abc", "cmd", "http", "logging", "lzma", "pathlib", "symtable", "textwrap",
                                    "turtle", "unittest", "weakref", "wsgiref")
"""The top-level modules whose texts are held out (never trained on)."""

COLUMNS = ("text", "reference", "source", "module")
"""The columns of every row."""


@lru_cache(maxsize=1)
def _all_rows() -> tuple[dict[str, str], ...]:
    with resources.files(__package__).joinpath(DATA_FILE).open(encoding="utf-8") as f:
        rows = tuple(json.loads(line) for line in f if line.strip())
    for i, row in enumerate(rows):
        if set(row) != set(COLUMNS):
            raise ValueError(f"{DATA_FILE} line {i + 1} has the columns {sorted(row)}, not {sorted(COLUMNS)}: "
                             "regenerate it with scripts/extract_team_writing.py.")
    return rows


def team_writing_rows(split: str = "train") -> list[dict[str, Any]]:
    """The texts of `split` (`"train"`, `"heldout"` or `"all"`) as rows (`text`, `reference`, `source`, `module`),
    in the file's order (sorted by module path); each call returns fresh dicts."""
    if split not in ("train", "heldout", "all"):
        raise ValueError(f"split must be 'train', 'heldout' or 'all', got {split!r}.")
    rows = _all_rows()
    if split != "all":
        held = split == "heldout"
        rows = tuple(r for r in rows if (r["module"] in HELDOUT_MODULES) == held)
    return [dict(r) for r in rows]


def load_team_writing(split: str = "train") -> datasets.Dataset:
    """The texts of `split` as a `datasets.Dataset` for [`~trl_marl.envs.writing.CooperativeWritingEnv`] and
    [`~trl_marl.rewards.writing.WritingTeamReward`] (see the module docstring).

    Args:
        split (`str`): `"train"`, `"heldout"` or `"all"`.

    Returns:
        `datasets.Dataset` with the columns `text`, `reference`, `source` and `module`.
    """
    import datasets

    return datasets.Dataset.from_list(team_writing_rows(split))
