"""The option names of a `trl-marl` training command, remembered between runs so that a mistyped option is refused
before torch, transformers and TRL load.

The names come from the script's config classes (`MAGRPOConfig` with transformers' `TrainingArguments`, TRL's
`ModelConfig`, the script's own arguments), which take seconds to import. Each time a command builds its parser, it
records the names in a small JSON file keyed by a fingerprint of what decides them: the installed versions of trl,
transformers, peft and accelerate, and the size and modification time of every source file of trl_marl. The next
command of the same kind reads the file (a few milliseconds) and [`~trl_marl.scripts.early`] refuses an unknown option
or YAML key with the parser's own lines. Without a file for the current fingerprint (the first command after an
install or an edit), nothing is checked early and the parser checks after the imports, as before.

The files live in `$TRL_MARL_CACHE/options`, else `$XDG_CACHE_HOME/trl_marl/options` (`~/.cache/trl_marl/options` by
default); an unwritable cache is skipped silently.

Example:

```python
from trl_marl.scripts.option_names import known_option_names

names = known_option_names("trl-marl magrpo")  # None until a `trl-marl magrpo` command has built its parser
```
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

FINGERPRINT_PACKAGES = ("trl", "transformers", "peft", "accelerate")
"""The distributions whose versions decide the option names, besides trl_marl's own sources."""


@dataclass(frozen=True)
class OptionNames:
    """What a command's parser accepts: its option strings (`--learning_rate`, ...), the field names a `--config` YAML
    file may set, and whether argparse resolves abbreviations (`--learning_rat`)."""

    options: frozenset[str]
    fields: frozenset[str]
    allow_abbrev: bool


def options_dir() -> Path:
    """The folder of the option-name files (see the module docstring)."""
    root = os.environ.get("TRL_MARL_CACHE")
    if root:
        return Path(root).expanduser() / "options"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "trl_marl" / "options"


def fingerprint() -> str:
    """A hash of the installed versions of [`FINGERPRINT_PACKAGES`] and of the path, size and modification time of
    every `.py` file of trl_marl: it changes whenever an option could have changed."""
    digest = hashlib.sha256()
    for package in FINGERPRINT_PACKAGES:
        try:
            version = metadata.version(package)
        except metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{package}={version}\n".encode())
    source = Path(__file__).resolve().parents[1]
    for path in sorted(source.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(source)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:24]


def _path(command: str, key: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", command).strip("-")
    return options_dir() / f"{slug}-{key}.json"


def record_option_names(command: str, names: OptionNames) -> None:
    """Remember `names` for `command` (e.g. `"trl-marl magrpo"`) under the current [`fingerprint`]; written whole or
    not at all, and skipped when the cache cannot be written."""
    path = _path(command, fingerprint())
    if _read(path) == names:
        return
    data = {"options": sorted(names.options), "fields": sorted(names.fields), "allow_abbrev": names.allow_abbrev}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
            json.dump(data, handle)
        os.replace(handle.name, path)
    except OSError:
        return


def known_option_names(command: str) -> OptionNames | None:
    """The names recorded for `command` under the current [`fingerprint`], or None (none recorded, or unreadable)."""
    return _read(_path(command, fingerprint()))


def _read(path: Path) -> OptionNames | None:
    try:
        data = json.loads(path.read_text())
        return OptionNames(frozenset(map(str, data["options"])), frozenset(map(str, data["fields"])),
                           bool(data["allow_abbrev"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
