"""The argument parser of the training scripts: TRL's `TrlParser` (a YAML `--config` plus command-line overrides) that
answers an unknown field with the closest known ones instead of a traceback.

TRL refuses an unknown YAML key with "Unknown arguments from config file: [...]. Please remove them, add them to the
dataclass, or set `fail_with_unknown_args=False`", and transformers an unknown command-line option with "Some specified
arguments are not used by the HfArgumentParser", both as a `ValueError` and without naming the field meant.
[`SuggestingParser`] checks both first and exits with one line per unknown name (status 2, as argparse's usage
errors), e.g.:

```
trl-marl magrpo: run.yaml sets `num_generation`, which is not an option: did you mean `num_generations`?
trl-marl magrpo: unknown option `--learning_rat`: did you mean `--learning_rate`?
```
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from trl import TrlParser


def closest(name: str, known: Iterable[str], count: int = 2) -> list[str]:
    """The known names closest to `name` (at most `count`, best first): spelling neighbours, then the names it begins
    (`num_gen` -> `num_generations`), then the longest name it begins with (`beta_kl` -> `beta`)."""
    known = sorted(set(known))
    near = difflib.get_close_matches(name, known, n=count, cutoff=0.75)
    longer = [k for k in known if k.startswith(name) and k not in near]
    shorter = sorted((k for k in known if len(k) >= 3 and name.startswith(k) and k not in near), key=len)[-1:]
    return (near + longer + shorter)[:count]


class _DescriptionAndDefaults(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help with the description as written (an example's docstring keeps its command lines) and every default."""


def described(description: str | None) -> dict[str, Any]:
    """`ArgumentParser` keyword arguments that head `--help` with `description` kept as written (an example script's
    docstring, with its command lines), or {} without one."""
    if not description:
        return {}
    return {"description": description, "formatter_class": _DescriptionAndDefaults}


def _suggestion(names: list[str], prefix: str = "") -> str:
    if not names:
        return ""
    return ": did you mean " + " or ".join(f"`{prefix}{n}`" for n in names) + "?"


class SuggestingParser(TrlParser):
    """`TrlParser` whose unknown YAML keys and command-line options end the program with the closest known names."""

    def _fields(self) -> set[str]:
        return {action.dest for action in self._actions if action.option_strings} - {"help"}

    def unknown_names(self, args: Sequence[str]) -> list[str]:
        """One message per unknown name in `args` (a command line with an optional `--config FILE`), else []."""
        args = list(args)
        messages: list[str] = []
        fields = self._fields()
        if "--config" in args:
            index = args.index("--config")
            if index + 1 < len(args):
                path = args[index + 1]
                del args[index: index + 2]
                messages += self._unknown_config_keys(path, fields)
        options = set(self._option_string_actions)
        for token in args:
            if not token.startswith("--") or token == "--":
                continue
            option = token.split("=", 1)[0]
            if option in options or (self.allow_abbrev and any(o.startswith(option) for o in options)):
                continue  # known, or an abbreviation argparse resolves (or calls ambiguous itself)
            messages.append(f"unknown option `{option}`"
                            + _suggestion(closest(option[2:], fields), prefix="--"))
        return messages

    @staticmethod
    def _unknown_config_keys(path: str, fields: set[str]) -> list[str]:
        import yaml

        try:
            with open(path) as f:
                config = yaml.safe_load(f)
        except OSError:
            return []  # TrlParser says that the file cannot be opened
        if not isinstance(config, dict):
            return []  # TrlParser says that it must be a mapping
        return [f"{path} sets `{key}`, which is not an option" + _suggestion(closest(str(key), fields))
                for key in config if key != "env" and key not in fields]

    def parse_args_and_config(self, args: Iterable[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        """`TrlParser.parse_args_and_config`, after refusing unknown names with the closest known ones."""
        args = list(args) if args is not None else sys.argv[1:]
        messages = self.unknown_names(args)
        if messages:
            for message in messages:
                print(f"{self.prog}: {message}", file=sys.stderr)
            every = "--help-all" if self.prog.startswith("trl-marl ") else "--help"
            print(f"{self.prog}: `{self.prog} {every}` lists every option.", file=sys.stderr)
            raise SystemExit(2)
        return super().parse_args_and_config(args, *rest, **kwargs)
