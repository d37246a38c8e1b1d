"""The option names of a `trl-marl` training command, known before torch, transformers and TRL load, so that a
mistyped option is refused in a fraction of a second.

The names come from the script's config classes (`MAGRPOConfig` with transformers' `TrainingArguments`, TRL's
`ModelConfig`, the script's own arguments), which take seconds to import. They are found in two places:

- **Shipped with the package** (`option_names.json` beside this module, written by
  `python -m trl_marl.scripts.option_snapshot`): the names of `trl-marl magrpo` and of every `trl-marl maporl` task
  under the versions of trl, transformers, peft and accelerate the release was built with, with a SHA-256 of each
  trl_marl source file that defines the parsers' fields. They are used only while the installed versions and those
  files are exactly the ones recorded, so the first command after an install is checked early too.
- **Recorded by the commands themselves**: each time a command builds its parser, it records the names in a small
  JSON file keyed by a fingerprint of the installed versions and of the size and modification time of every source
  file of trl_marl (another version of TRL, an edited config). The next command of the same kind reads it.

[`~trl_marl.scripts.early`] refuses an unknown option or YAML key with the parser's own lines from either. Without
names for what is installed, nothing is checked early and the parser checks after the imports.

The recorded files live in `$TRL_MARL_CACHE/options`, else `$XDG_CACHE_HOME/trl_marl/options`
(`~/.cache/trl_marl/options` by default); an unwritable cache is skipped silently.

Example:

```python
from trl_marl.scripts.option_names import known_option_names

names = known_option_names("trl-marl magrpo")  # None when neither the shipped nor a recorded file matches
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
    for package, version in installed_versions().items():
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
    """The names recorded for `command` under the current [`fingerprint`], else the [`shipped_option_names`], else
    None."""
    return _read(_path(command, fingerprint())) or shipped_option_names(command)


SHIPPED = Path(__file__).with_name("option_names.json")
"""The names shipped with the package (see the module docstring)."""


def installed_versions() -> dict[str, str]:
    """The installed version of each of [`FINGERPRINT_PACKAGES`] ("-" when it is not installed)."""
    versions = {}
    for package in FINGERPRINT_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "-"
    return versions


def source_digest(relative: str) -> str | None:
    """The SHA-256 of trl_marl's source file `relative` (a path below the package, like `scripts/magrpo.py`), or None
    when it cannot be read."""
    try:
        return hashlib.sha256((Path(__file__).resolve().parents[1] / relative).read_bytes()).hexdigest()
    except OSError:
        return None


def shipped_option_names(command: str, path: Path | None = None) -> OptionNames | None:
    """The names of `command` in the shipped file `path` (default [`SHIPPED`]), or None when the file does not hold
    them, the installed versions of [`FINGERPRINT_PACKAGES`] are not the ones they were written under, or a source
    file that defines their fields differs from the one they were read from (an edited install: its parser decides)."""
    try:
        data = json.loads((path or SHIPPED).read_text())
        entry = data["commands"][command]
        if data["versions"] != installed_versions():
            return None
        current = {relative: source_digest(relative) for relative in entry["sources"]}
        if None in current.values() or current != entry["sources"]:
            return None
        return OptionNames(frozenset(map(str, entry["options"])), frozenset(map(str, entry["fields"])),
                           bool(entry["allow_abbrev"]))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _read(path: Path) -> OptionNames | None:
    try:
        data = json.loads(path.read_text())
        return OptionNames(frozenset(map(str, data["options"])), frozenset(map(str, data["fields"])),
                           bool(data["allow_abbrev"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
