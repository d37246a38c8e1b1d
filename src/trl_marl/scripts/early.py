"""The mistakes of a `trl-marl magrpo|maporl` command line that are told before anything heavy loads.

A training script parses its command line with its config classes, which import torch, transformers, TRL and PEFT
(several seconds on a CPU machine) before the first value is read. `trl_marl.cli` first reads what the command line
gives (the `--config` YAML file, then the `--name value` options over it) and refuses, in one line and within about a
second, what the script would refuse after those imports:

- a `--config` file that does not exist (with the closest file of its folder);
- a learning rate that is negative or not finite ([`~trl_marl.utils.values.learning_rate_problem`]);
- a data file that does not exist, or a `trl-marl/` dataset name that nothing ships
  ([`~trl_marl.scripts.data_sources.resolve_source`]);
- an `output_dir` that holds another run's checkpoints, a resume with no checkpoint to resume, or from a finished run
  ([`~trl_marl.scripts.arguments.run_start_problem`]);
- a model name that is no folder, no offline name and not downloadable ([`~trl_marl.utils.model_names`]).

- an unknown option or YAML key, once an earlier command of the same kind has recorded the parser's option names for
  the installed versions and sources ([`~trl_marl.scripts.option_names`]; the first command after an install or an
  edit leaves them to the parser).

Every check is the function the script applies again once its arguments are parsed, so a command refused here is one
the script refuses too, with the same lines. What cannot be read for certain without the parser (a value the parser
would convert differently) is left to the script.

Example:

```python
from trl_marl.scripts.early import early_problem

print(early_problem(["--config", "run.yaml", "--learning_rate", "-1"], "MAGRPOConfig"))
```
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from ..utils.model_names import UnknownModelNameError, check_model_name
from ..utils.values import learning_rate_problem
from .arguments import (
    _FALSE,
    _TRUE,
    _config_path,
    _missing_config_message,
    config_mapping,
    exit_on_unknown_names,
    resume_value,
    run_start_problem,
    unknown_name_messages,
)
from .data_sources import DataFileNotFoundError, UsageError, resolve_source
from .option_names import known_option_names


def given_values(args: Sequence[str]) -> dict[str, Any]:
    """The values a command line gives: the keys of its `--config` YAML file (typed as YAML reads them), then its
    `--name value` and `--name=value` options as strings (a `--name` followed by another option or nothing: `True`).

    A config file that cannot be read or is not a mapping gives no values (the script's parser says why)."""
    values: dict[str, Any] = {}
    config = _config_path(args)
    if config is not None:
        import yaml

        try:
            loaded = config_mapping(config)
        except yaml.YAMLError:
            loaded = None
        values.update((str(key), value) for key, value in (loaded or {}).items())
    args = list(args)
    for index, token in enumerate(args):
        if not token.startswith("--") or token == "--":
            continue
        name, equals, given = token[2:].partition("=")
        value: str | bool = given
        if not equals:
            following = args[index + 1] if index + 1 < len(args) else None
            value = following if following is not None and not following.startswith("--") else True
        values[name] = value
    values.pop("config", None)
    return values


def _as_number(value: Any) -> Any:
    """A command-line string as the float the parser makes of it; YAML values and other strings unchanged."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _as_flag(value: Any) -> bool | None:
    """A boolean option as the parser reads it, or None when it is not certain."""
    if isinstance(value, bool) or value is None:
        return bool(value)
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _as_steps(value: Any) -> int | None:
    """`max_steps` as the parser reads it (-1, transformers' default, when it is not given); None when not certain."""
    if value is None:
        return -1
    try:
        return int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _data_problem(values: dict[str, Any]) -> str | None:
    try:
        for name, files, option in ((values.get("dataset_name"), values.get("data_files"), "`--data_files`"),
                                    (None, values.get("eval_data_files"), "`--eval_data_files`")):
            if isinstance(name, (str, type(None))) and isinstance(files, (str, type(None))):
                resolve_source(name, files, files_option=option)
    except (DataFileNotFoundError, UsageError) as error:
        return str(error)
    return None


def _run_start_problem(values: dict[str, Any], config_name: str) -> str | None:
    output_dir = values.get("output_dir")
    resume = values.get("resume_from_checkpoint")
    overwrite, max_steps = _as_flag(values.get("overwrite_output_dir")), _as_steps(values.get("max_steps"))
    if not isinstance(output_dir, str) or overwrite is None or max_steps is None:
        return None
    if resume is not None and not isinstance(resume, (str, bool)):
        return None  # a YAML number: the parser's to read
    return run_start_problem(output_dir, resume_value(resume), overwrite, max_steps, config_name)


def _model_problem(values: dict[str, Any]) -> str | None:
    name = values.get("model_name_or_path")
    if not isinstance(name, str) or not name or os.path.exists(os.path.expanduser(name)):
        return None
    from ..offline_models import is_offline_model_name  # imports torch: only for a name that is no folder

    if is_offline_model_name(name):
        return None
    try:
        check_model_name(name)
    except UnknownModelNameError as error:
        return str(error)
    return None


def early_problem(args: Sequence[str], config_name: str) -> str | None:
    """The first mistake of a training command line that shows without its parser, as one sentence naming the fix;
    `None` when none shows (the script's parser then checks everything).

    Args:
        args: The command line after the subcommand (and after `maporl`'s task).
        config_name: The script's config class, as its messages name it (e.g. `"MAGRPOConfig"`).
    """
    config = _config_path(args)
    if config is not None and not os.path.isfile(config):
        return _missing_config_message(config)
    values = given_values(args)
    if "learning_rate" in values:
        problem = learning_rate_problem(_as_number(values["learning_rate"]), f"{config_name}.learning_rate")
        if problem is not None:
            return problem
    return (_data_problem(values) or _run_start_problem(values, config_name)
            or _model_problem(values))


def unknown_names_early(args: Sequence[str], prog: str) -> list[str]:
    """The parser's messages for the unknown options and YAML keys of `args`, from the option names an earlier `prog`
    command recorded ([`~trl_marl.scripts.option_names`]); [] when none are recorded for the installed versions and
    sources (the parser checks after the imports) or the YAML file cannot be read (the parser says why)."""
    import yaml

    names = known_option_names(prog)
    if names is None:
        return []
    try:
        return unknown_name_messages(args, names)
    except yaml.YAMLError:
        return []


def exit_on_early_problem(args: Sequence[str], prog: str, config_name: str) -> None:
    """Exit with status 2 when `args` holds an unknown name (the parser's lines, [`unknown_names_early`]) or when
    [`early_problem`] finds a mistake (one line, `prog: ...`)."""
    exit_on_unknown_names(prog, unknown_names_early(args, prog))
    problem = early_problem(args, config_name)
    if problem is not None:
        print(f"{prog}: {problem}".replace("\n", " "), file=sys.stderr)
        raise SystemExit(2)
