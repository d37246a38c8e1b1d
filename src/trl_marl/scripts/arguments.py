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

It also checks the run's output folder before any model loads ([`output_dir_problem`]): a run into an `output_dir`
that holds an earlier run's `checkpoint-<step>` folders must say whether it resumes them (`--resume_from_checkpoint`, a
path or `true`) or starts afresh (`--overwrite_output_dir true`, [`OutputDirArguments`]).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from trl import TrlParser

from ..utils.checkpoint_files import CHECKPOINT_RE, PARTIAL_RE, REPLACED_RE, finished_run_problem
from ..utils.quiet import say
from .option_names import OptionNames, record_option_names

if TYPE_CHECKING:
    from transformers.hf_argparser import DataClassType

_TRUE = ("true", "yes", "1")
_FALSE = ("", "false", "no", "0", "none")


@dataclass
class OutputDirArguments:
    """What a training script does with an `output_dir` that holds an earlier run's checkpoints (part of the script
    arguments of `trl-marl magrpo` and `trl-marl maporl`)."""

    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "Start afresh in an `output_dir` that holds an earlier run's `checkpoint-<step>` folders: "
                  "they are deleted when training starts. Without it (and without `--resume_from_checkpoint`) such a "
                  "run is refused, so that it neither mixes with nor rewrites the earlier run's checkpoints."},
    )


def resume_value(value: str | bool | None) -> str | bool | None:
    """`resume_from_checkpoint` as `Trainer.train` takes it: a checkpoint's path, `True` (the newest checkpoint of
    `output_dir`; written `true` on the command line or in YAML) or `None` (no resume: `false`, `none` or empty)."""
    if value is None or isinstance(value, bool):
        return value or None
    text = str(value).strip()
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return None
    return text


def _config_path(args: Sequence[str]) -> str | None:
    """The value of `--config` in `args` (`--config FILE` or `--config=FILE`), or None."""
    for index, arg in enumerate(args):
        if arg == "--config" and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def config_mapping(path: str) -> dict | None:
    """The mapping a `--config` YAML file holds, or None when the file cannot be opened or holds no mapping (the
    parser says why). A file YAML cannot read raises `yaml.YAMLError`."""
    import yaml

    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except OSError:
        return None
    return config if isinstance(config, dict) else None


def _missing_config_message(config: str) -> str:
    """The one line for a `--config` file that does not exist: the closest file of its folder, or an example."""
    folder = os.path.dirname(config) or "."
    near = difflib.get_close_matches(os.path.basename(config), sorted(os.listdir(folder)), n=1) \
        if os.path.isdir(folder) else []
    hint = (f"did you mean {os.path.join(folder, near[0])}?" if near
            else "pass a YAML file such as examples/configs/magrpo_writing.yaml.")
    return f"`--config {config}`: no such file; {hint}"


def checkpoint_folders(output_dir: str | None) -> list[str]:
    """The `checkpoint-<step>` folders of `output_dir`, oldest step first ([] when it does not exist)."""
    if not output_dir or not os.path.isdir(output_dir):
        return []
    steps = [(int(m.group(1)), name) for name in os.listdir(output_dir) if (m := CHECKPOINT_RE.match(name))
             and os.path.isdir(os.path.join(output_dir, name))]
    return [name for _, name in sorted(steps)]


def output_dir_problem(output_dir: str | None, resume: str | bool | None, overwrite: bool) -> str | None:
    """Why a run cannot start in `output_dir` as asked, as one sentence naming the fix; `None` when it can.

    Args:
        output_dir: The run's `output_dir`.
        resume: `resume_from_checkpoint`, as [`resume_value`] returns it.
        overwrite: `overwrite_output_dir`.
    """
    found = checkpoint_folders(output_dir)
    if resume is not None and overwrite:
        return ("`--resume_from_checkpoint` and `--overwrite_output_dir true` contradict each other (one continues "
                "the run in `output_dir`, the other deletes its checkpoints): pass one of them.")
    if resume is True and not found:
        return (f"`--resume_from_checkpoint true` resumes from the newest `checkpoint-<step>` folder of `output_dir` "
                f"({output_dir}), and it has none: pass a checkpoint's path, or the `--output_dir` of the run to "
                "resume.")
    if isinstance(resume, str) and not os.path.isdir(resume):
        return (f"`--resume_from_checkpoint {resume}` is not a folder: pass a `checkpoint-<step>` folder of an "
                "earlier run, or `true` for the newest one in `output_dir`.")
    if found and resume is None and not overwrite:
        shown = ", ".join(found if len(found) <= 3 else [found[0], "...", found[-1]])
        return (f"`output_dir` {output_dir} already holds an earlier run's checkpoints ({shown}): resume that run "
                "with `--resume_from_checkpoint true` (or a checkpoint's path), start afresh with "
                "`--overwrite_output_dir true` (deletes them), or choose another `--output_dir`.")
    return None


def run_start_problem(output_dir: str | None, resume: str | bool | None, overwrite: bool, max_steps: int,
                      config_name: str) -> str | None:
    """Why a run cannot start as asked ([`output_dir_problem`], or a resume from a checkpoint already at `max_steps`,
    `utils.checkpoint_files.finished_run_problem`), as one sentence naming the fix; `None` when it can."""
    problem = output_dir_problem(output_dir, resume, overwrite)
    if problem is None and resume is not None:
        found = checkpoint_folders(output_dir)
        folder = os.path.join(output_dir, found[-1]) if resume is True and output_dir else resume
        problem = finished_run_problem(str(folder), max_steps, config_name)
    return problem


def fresh_output_dir(output_dir: str, overwrite: bool) -> list[str]:
    """Delete the checkpoints of an earlier run in `output_dir` when `overwrite` (`--overwrite_output_dir true`), on
    the first process of each machine; returns the folders deleted (none on the other processes).

    `checkpoint-<step>` folders and the interrupted saves (`tmp-checkpoint-<step>`) go; damaged checkpoints moved
    aside (`checkpoint-<step>-corrupt`) and every other file are kept.
    """
    if not overwrite or os.environ.get("LOCAL_RANK", "0") != "0" or not os.path.isdir(output_dir):
        return []
    names = sorted(name for name in os.listdir(output_dir)
                   if CHECKPOINT_RE.match(name) or PARTIAL_RE.match(name) or REPLACED_RE.match(name))
    for name in names:
        shutil.rmtree(os.path.join(output_dir, name), ignore_errors=True)
    if names:
        say(f"[trl-marl] --overwrite_output_dir: deleted the earlier run's {', '.join(names)} in {output_dir}")
    return names


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


def unknown_name_messages(args: Sequence[str], names: OptionNames) -> list[str]:
    """One message per unknown name in `args` (a command line with an optional `--config FILE`) for a parser that
    accepts `names`, each with the closest known names; [] when every name is known. An abbreviation argparse
    resolves (or calls ambiguous itself) is not unknown."""
    args = list(args)
    messages: list[str] = []
    if "--config" in args:
        index = args.index("--config")
        if index + 1 < len(args):
            path = args[index + 1]
            del args[index: index + 2]
            config = config_mapping(path)  # None: TrlParser says that it cannot be opened or is not a mapping
            messages += [f"{path} sets `{key}`, which is not an option" + _suggestion(closest(str(key), names.fields))
                         for key in config or {} if key != "env" and key not in names.fields]
    for token in args:
        if not token.startswith("--") or token == "--":
            continue
        option = token.split("=", 1)[0]
        if option in names.options or (names.allow_abbrev and any(o.startswith(option) for o in names.options)):
            continue
        messages.append(f"unknown option `{option}`" + _suggestion(closest(option[2:], names.fields), prefix="--"))
    return messages


def exit_on_unknown_names(prog: str, messages: Sequence[str]) -> None:
    """Exit with status 2 after one line per message and one naming the help that lists every option (nothing when
    `messages` is empty)."""
    if not messages:
        return
    for message in messages:
        print(f"{prog}: {message}", file=sys.stderr)
    every = "--help-all" if prog.startswith("trl-marl ") else "--help"
    print(f"{prog}: `{prog} {every}` lists every option.", file=sys.stderr)
    raise SystemExit(2)


class SuggestingParser(TrlParser):
    """`TrlParser` whose unknown YAML keys and command-line options end the program with the closest known names,
    and that refuses, before anything loads, a run whose `output_dir` would mix with an earlier run's checkpoints
    ([`output_dir_problem`]).

    Args:
        dataclass_types: As `TrlParser`'s.
        **kwargs: `argparse.ArgumentParser`'s.
    """

    def __init__(self, dataclass_types: Iterable[type] | None = None, **kwargs: object) -> None:
        # (transformers types the dataclasses as `NewType("DataClassType", Any)`, which no class is)
        super().__init__(cast("Iterable[DataClassType] | None", dataclass_types), **kwargs)

    def option_names(self) -> OptionNames:
        """The option strings, the field names a `--config` file may set, and the abbreviation rule of this parser."""
        fields = {action.dest for action in self._actions if action.option_strings} - {"help"}
        return OptionNames(frozenset(self._option_string_actions), frozenset(fields), bool(self.allow_abbrev))

    def unknown_names(self, args: Sequence[str]) -> list[str]:
        """One message per unknown name in `args` (a command line with an optional `--config FILE`), else []."""
        return unknown_name_messages(args, self.option_names())

    def parse_args_and_config(self, args: Iterable[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        """`TrlParser.parse_args_and_config`, after refusing unknown names with the closest known ones."""
        args = list(args) if args is not None else sys.argv[1:]
        names = self.option_names()
        if self.prog.startswith("trl-marl "):
            record_option_names(self.prog, names)  # for the early check of the next command (`option_names`)
        exit_on_unknown_names(self.prog, unknown_name_messages(args, names))
        config = _config_path(args)
        if config is not None and not os.path.isfile(config):
            print(f"{self.prog}: {_missing_config_message(config)}", file=sys.stderr)
            raise SystemExit(2)
        try:
            parsed = super().parse_args_and_config(args, *rest, **kwargs)
        except ValueError as error:  # a config field's own check (`__post_init__`): its message names the field
            print(f"{self.prog}: {error}".replace("\n", " "), file=sys.stderr)
            raise SystemExit(2) from None
        self._check_output_dir(parsed)
        return parsed

    def _check_output_dir(self, parsed: Sequence[Any]) -> None:
        """Exit with one line when the parsed run cannot start in its `output_dir` (scripts whose arguments include
        [`OutputDirArguments`] only: the others have no `--overwrite_output_dir` to offer)."""
        training = next((a for a in parsed if hasattr(a, "resume_from_checkpoint") and hasattr(a, "output_dir")), None)
        script = next((a for a in parsed if hasattr(a, "overwrite_output_dir")), None)
        if training is None or script is None:
            return
        problem = run_start_problem(training.output_dir, resume_value(training.resume_from_checkpoint),
                                    bool(script.overwrite_output_dir), training.max_steps,
                                    type(training).__name__)
        if problem is not None:
            print(f"{self.prog}: {problem}", file=sys.stderr)
            raise SystemExit(2)
