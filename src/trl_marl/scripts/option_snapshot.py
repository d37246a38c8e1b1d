"""Write the option names shipped with the package (`scripts/option_names.json`, read by
[`~trl_marl.scripts.option_names.shipped_option_names`]).

Run it after changing a field of a training config or script arguments, or the pinned versions of trl, transformers,
peft or accelerate (`tests/cli/test_option_names.py` fails until the file is current):

```bash
python -m trl_marl.scripts.option_snapshot
```

For each training command it records the parser's option names, the field names a `--config` file may set, and the
SHA-256 of every trl_marl source file that defines one of the parser's classes (its dataclasses and their bases, and
the parser's own class): an install whose files differ is checked by its parser instead.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any

from .option_names import SHIPPED, installed_versions, source_digest

_PACKAGE = Path(__file__).resolve().parents[1]


def training_parsers() -> list[Any]:
    """The parsers of `trl-marl magrpo` and of `trl-marl maporl <task>` for every debate task."""
    from .help import MAPORL_TASKS
    from .magrpo import build_parser as magrpo_parser
    from .maporl import build_parser as maporl_parser

    return [magrpo_parser(prog="trl-marl magrpo")] + [maporl_parser(task, prog=f"trl-marl maporl {task}")
                                                      for task in MAPORL_TASKS]


def parser_sources(parser: Any) -> list[str]:
    """The trl_marl source files (relative to the package) that define `parser`'s fields: the modules of its
    dataclasses and of their bases, and of the parser's class and its bases."""
    classes = [base for cls in [*parser.dataclass_types, type(parser)] for base in cls.__mro__]
    files = set()
    for cls in classes:
        if not cls.__module__.startswith("trl_marl."):
            continue
        source = inspect.getsourcefile(cls)
        if source is not None:
            files.add(Path(source).resolve().relative_to(_PACKAGE).as_posix())
    return sorted(files)


def snapshot() -> dict[str, Any]:
    """The content of the shipped file for what is installed now."""
    commands = {}
    for parser in training_parsers():
        names = parser.option_names()
        commands[parser.prog] = {
            "options": sorted(names.options),
            "fields": sorted(names.fields),
            "allow_abbrev": names.allow_abbrev,
            "sources": {relative: source_digest(relative) for relative in parser_sources(parser)},
        }
    return {"written_by": "python -m trl_marl.scripts.option_snapshot", "versions": installed_versions(),
            "commands": commands}


def write_snapshot(path: Path = SHIPPED) -> dict[str, Any]:
    """Write [`snapshot`] to `path` (the shipped file by default) and return it."""
    data = snapshot()
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return data


def main(argv: list[str] | None = None) -> int:
    data = write_snapshot(Path(argv[0]) if argv else SHIPPED)
    versions = ", ".join(f"{name} {version}" for name, version in data["versions"].items())
    print(f"Wrote the option names of {len(data['commands'])} commands under {versions}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
