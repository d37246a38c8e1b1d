"""Where the training scripts' data comes from: a local file, a dataset shipped with trl-marl, or the Hugging Face Hub.

Every script (`trl-marl magrpo`, `trl-marl maporl`, `examples/*.py`) reads its data options the same way
([`resolve_source`]):

1. `--data_files PATH` (one or more comma-separated local `.jsonl`/`.json`/`.csv`/`.parquet` files) is the data,
   whatever `--dataset_name` says (the example configs name a Hub dataset);
2. else a `--dataset_name` that ends in one of those suffixes is a local file (it must exist: a missing one is an
   error, never a Hub request);
3. else a name of [`SHIPPED_DATASETS`] (e.g. `trl-marl/team_coding`) is read from the installed package; another
   `trl-marl/` name is refused at once, with the closest shipped names ([`shipped_suggestions`]);
4. else the name is a Hub dataset (or an existing local folder that `datasets.load_dataset` reads; a path that does
   not exist is an error), loaded inside
   [`hub_dataset`]: when the Hub is switched off (`HF_HUB_OFFLINE=1`) or unreachable, `datasets` only looks in its
   local cache (no retries), and any failure to fetch the dataset becomes one [`DatasetUnavailableError`] that names
   the dataset, the option and the offline route (a local file, the offline model `smollm2-135m-instruct`).

A mistake in the data a run was given (a missing file, a file that is not valid JSON Lines, a missing column) is one
[`UsageError`] line that names the option and the fix: [`resolve_source`] raises it for missing files, and
[`local_rows`] turns the loaders' errors on a local file into it. [`exit_on_unavailable`] ends a script with that line
(status 2), as it does with the line of a dataset or model the Hub cannot give (status 1) and of a missing extra.

The model's side of the same question is `trl_marl.utils.model_names.check_model_name` (an `UnknownModelNameError`
that lists the offline model names); both ask `hub_unavailable_reason` whether the Hub can be used.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..data.files import COMPRESSION_SUFFIXES, DATA_FILE_KINDS, as_file_list, data_file_builder
from ..utils.model_names import hub_unavailable_reason

SHIPPED_DATASETS: dict[str, str] = {
    "trl-marl/team_coding": "the cooperative coding problems that ship with trl-marl "
                            "(`trl_marl.data.load_team_coding`; splits train, heldout, all; `--dataset_config` "
                            "picks the levels: 1, 2 or 1,2)",
    "trl-marl/team_writing": "the writing texts that ship with trl-marl: Python standard-library docstrings, PSF "
                             "License (`trl_marl.data.load_team_writing`; splits train, heldout, all)",
}
"""Dataset names that resolve to data installed with the package (no Hub, no file), and what each is."""


class UsageError(ValueError):
    """A mistake in what a run was given (an option's value, a data file), as one line that names the option and
    the fix: the scripts end with the line and status 2 ([`exit_on_unavailable`])."""


class DataFileNotFoundError(UsageError, FileNotFoundError):
    """A local data file a run was given does not exist (a [`UsageError`] and a `FileNotFoundError`)."""


def shipped_suggestions(name: str, count: int = 2) -> list[str]:
    """The names of [`SHIPPED_DATASETS`] closest to `name` (at most `count`, best first; [] when none is close).

    Names are compared without their namespace and case, so `team_writin`, `trl_marl/team_writing`,
    `trl-marl/writing` and `trl-marl/team_writin` all suggest `trl-marl/team_writing`.

    Example: `shipped_suggestions("trl-marl/team_codng") == ["trl-marl/team_coding"]`.
    """
    typed = name.strip().lower().rsplit("/", 1)[-1].replace("-", "_")
    scores: dict[str, float] = {}
    for shipped in SHIPPED_DATASETS:
        bare = shipped.split("/", 1)[1]
        score = difflib.SequenceMatcher(None, typed, bare).ratio()
        if len(typed) >= 4 and (typed in bare or bare in typed):
            score = max(score, 0.8)
        if score >= 0.75:
            scores[shipped] = score
    best = max(scores.values(), default=0.0)
    return sorted((n for n, score in scores.items() if score >= best - 0.05), key=lambda n: -scores[n])[:count]


def _did_you_mean(names: Sequence[str]) -> str:
    return " or ".join(f"`{name}`" for name in names)


class DatasetUnavailableError(ConnectionError):
    """A dataset a run needs could not be fetched from the Hugging Face Hub. The message names the dataset, the
    option that chose it and the offline route (a `ConnectionError`, as `datasets`' own "Couldn't reach" error)."""


@dataclass(frozen=True)
class DataSource:
    """Where a script's data comes from (see the module docstring).

    Attributes:
        kind (`str`): `"local"` (files), `"shipped"` (a name of [`SHIPPED_DATASETS`]) or `"hub"`.
        name (`str`): The file(s) as given, the shipped name, or the Hub name.
        option (`str`): The option that chose it, for messages: `` `--data_files` `` or `` `--dataset_name` ``.
    """

    kind: str
    name: str
    option: str

    @property
    def files(self) -> list[str]:
        """The local files of a `"local"` source."""
        return as_file_list(self.name)


def resolve_source(dataset_name: str | None, data_files: str | Sequence[str] | None = None,
                   default: str | None = None, files_option: str = "`--data_files`") -> DataSource | None:
    """The data a script was asked for: `data_files`, else `dataset_name`, else `default` (None: no data named).

    Args:
        dataset_name: `--dataset_name` (a Hub name, a shipped name or a local file).
        data_files: Local files, whatever `dataset_name` says.
        default: The task's dataset when neither is given.
        files_option: The option that gave `data_files`, for messages (e.g. `` `--eval_data_files` ``).

    Raises:
        DataFileNotFoundError: `data_files`, or a `dataset_name` with a data file's suffix, names a file that does not
            exist (a local file is never looked up on the Hub); a `FileNotFoundError`.
        UsageError: `dataset_name` is a `trl-marl/` name that no dataset shipped with trl-marl has (the message
            names the closest shipped ones).
    """
    if data_files:
        names = as_file_list(data_files)
        missing = [path for path in names if not os.path.isfile(os.path.expanduser(path))]
        if missing:
            raise DataFileNotFoundError(f"{files_option} {missing[0]!r}: no such file "
                                        f"({os.path.abspath(os.path.expanduser(missing[0]))}); pass an existing "
                                        f"{DATA_FILE_KINDS} file.")
        return DataSource("local", ",".join(names), files_option)
    name = dataset_name or default
    if not name:
        return None
    option = "`--dataset_name`" if dataset_name else "the default of `--dataset_name`"
    if all(data_file_builder(part) is not None for part in as_file_list(name)):
        missing = [path for path in as_file_list(name) if not os.path.isfile(os.path.expanduser(path))]
        if missing:
            raise DataFileNotFoundError(
                f"`--dataset_name` {missing[0]!r} names a local data file, but there is no such file "
                f"({os.path.abspath(os.path.expanduser(missing[0]))}). Pass an existing {DATA_FILE_KINDS} file, or "
                "a Hub dataset name."
            )
        return DataSource("local", name, "`--dataset_name`")
    if name in SHIPPED_DATASETS:
        return DataSource("shipped", name, option)
    if name.lower().startswith(("trl-marl/", "trl_marl/")):  # the project's own names: never a Hub request
        near = shipped_suggestions(name)
        hint = f"did you mean {_did_you_mean(near)}? " if near else ""
        raise UsageError(f"{option} {name!r} is not a dataset shipped with trl-marl: {hint}The shipped datasets are "
                         f"{', '.join(SHIPPED_DATASETS)}.")
    from ..utils.inputs import looks_like_path

    if looks_like_path(name) and not os.path.exists(os.path.expanduser(name)):
        raise DataFileNotFoundError(
            f"`--dataset_name` {name!r} looks like a local path, but {os.path.abspath(os.path.expanduser(name))} does "
            f"not exist. Pass an existing {DATA_FILE_KINDS} file, a folder `datasets` reads, or a Hub dataset name."
        )
    return DataSource("hub", name, option)


def offline_route(columns: str, shipped: str | None = None) -> str:
    """The sentence that tells a user how to run without the Hub: a local file with `columns` (and the shipped
    dataset `shipped`, when the task has one), and the offline real model."""
    from ..offline_models import REAL_MODEL_NAME  # here: the offline models' package imports torch

    data = f"`--dataset_name {shipped}` (shipped with trl-marl) or " if shipped else ""
    return (f"To run offline, pass {data}a local file: `--data_files PATH` ({DATA_FILE_KINDS}; {columns}), and "
            f"`--model_name_or_path {REAL_MODEL_NAME}` for a real model that needs no Hub (docs/real_model.md).")


_HUB_MODULES = ("huggingface_hub", "datasets", "httpx", "httpcore", "requests", "urllib3")


def _is_fetch_failure(error: BaseException) -> bool:
    """Whether `error` says that something could not be fetched from the Hub (not a bad file or a bad column)."""
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    module = type(error).__module__.split(".")[0]
    if module not in _HUB_MODULES:
        return False
    return isinstance(error, OSError) or type(error).__name__.endswith(("NotFoundError", "HTTPError", "Timeout"))


@contextlib.contextmanager
def _hub_switched_off(switch: bool) -> Iterator[None]:
    """Within the block, `datasets` and `huggingface_hub` act as with `HF_HUB_OFFLINE=1` (their local caches only, no
    request and no retry), when `switch` is true; their settings are put back afterwards."""
    if not switch:
        yield
        return
    import datasets.config
    import huggingface_hub.constants

    saved = (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


@contextlib.contextmanager
def hub_dataset(source: DataSource, route: str) -> Iterator[None]:
    """Run the block that loads the Hub dataset `source`; a failure to fetch it becomes one
    [`DatasetUnavailableError`] that names the dataset, its option and `route` (see [`offline_route`]).

    When the Hub is switched off or unreachable (`utils.model_names.hub_unavailable_reason`), `datasets` reads its
    local cache only, so a cached dataset still loads and an uncached one fails at once instead of after the Hub
    client's retries.
    """
    reason = hub_unavailable_reason()
    try:
        with _hub_switched_off(reason is not None):
            yield
    except Exception as error:
        if not _is_fetch_failure(error):
            raise
        if reason is not None:
            why = f"the Hub is {reason} and the dataset is not in the local `datasets` cache"
        else:
            why = f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
        near = shipped_suggestions(source.name)
        hint = f"Did you mean {_did_you_mean(near)} (shipped with trl-marl)? " if near else ""
        raise DatasetUnavailableError(
            f"The dataset {source.name!r} ({source.option}) could not be fetched from the Hugging Face Hub: {why}. "
            f"{hint}{route}"
        ) from error


_FILE_KINDS = {"json": "JSON Lines (or one JSON list of rows)", "csv": "CSV", "parquet": "Parquet"}
_READER_MODULES = ("datasets", "pyarrow", "pandas")
_READER_LOGGER = "datasets.packaged_modules.json.json"
"""The logger of `datasets`' JSON reader, which logs a file's parse error with its traceback before raising it."""


def _one_line(error: BaseException) -> str:
    """An error's message on one line (a `KeyError`'s without the quotes `str` adds)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args and isinstance(error.args[0], str) else error
    return " ".join(str(text).split())


def first_bad_json_line(path: str) -> str | None:
    """Where the local JSON file `path` first fails to read as rows, as `"line N: reason"`; None when every line is
    a JSON object, when the whole file is one JSON document, or when it is not an uncompressed JSON file.

    Example: a file whose second line is `{"text": "x"` gives `"line 2: Expecting ',' delimiter (column 12)"`.
    """
    if data_file_builder(path) != "json" or path.lower().endswith(COMPRESSION_SUFFIXES):
        return None
    try:
        with open(os.path.expanduser(path), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    try:
        json.loads(text)
        return None  # one JSON document: a list of rows
    except ValueError:
        pass
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            return f"line {number}: {error.msg} (column {error.colno})"
        if not isinstance(row, dict):
            return f"line {number}: a JSON {type(row).__name__}, not an object of columns"
    return None


def _read_failure(source: DataSource, error: BaseException, columns: str) -> str | None:
    """The one line for a local file of `source` that `datasets` could not parse; None when `error` is no such
    failure (a parser's error, or `datasets`' error around one)."""
    cause = error.__cause__ or error.__context__
    if type(error).__module__.split(".")[0] not in _READER_MODULES:
        return None
    for path in source.files:
        bad = first_bad_json_line(path)
        if bad is not None:
            return (f"{source.option} {path!r} is not valid {_FILE_KINDS['json']}: {bad}. Fix that line: each line "
                    f"one JSON object with {columns}.")
    kind = _FILE_KINDS.get(data_file_builder(source.files[0]) or "", "a data file")
    detail = _one_line(cause if cause is not None and str(cause) else error)[:200]
    return (f"{source.option} {source.name!r} cannot be read as {kind}: {detail}. Fix the file, or pass a "
            f"{DATA_FILE_KINDS} file with {columns}.")


@contextlib.contextmanager
def local_rows(source: DataSource, columns: str) -> Iterator[None]:
    """Run the block that reads the local files of `source` with a task's loader; a mistake in the files becomes one
    [`UsageError`] line that names the option, the file and the fix.

    The mistakes: a file that does not exist ([`DataFileNotFoundError`]), one that `datasets` cannot parse (for JSON
    files, the first line that is not a JSON object, with its line number), and one without the task's columns
    (`columns`, as a help text writes them: the loaders' own column check, with the fix added).
    """
    import logging

    reader_log = logging.getLogger(_READER_LOGGER)  # it logs the parser's traceback before raising: the line says it
    level = reader_log.level
    reader_log.setLevel(logging.CRITICAL)
    try:
        yield
    except UsageError:
        raise
    except FileNotFoundError as error:
        raise DataFileNotFoundError(f"{source.option}: {_one_line(error)} Pass an existing {DATA_FILE_KINDS} file."
                                    ) from error
    except Exception as error:
        message = _read_failure(source, error, columns)
        if message is not None:
            raise UsageError(message) from error
        if not isinstance(error, (ValueError, KeyError)):
            raise
        # the loaders' checks of a local file: its columns, its suffix, files of mixed formats
        message = _one_line(error)
        fix = f" The task reads {columns}." if "column" in message else ""
        raise UsageError(f"{source.option}: {message}{fix}") from error
    finally:
        reader_log.setLevel(level)


def _names_an_extra(error: ImportError) -> bool:
    """Whether `error` is trl-marl's own message for a missing optional extra (`pip install "trl-marl[...]"`)."""
    return 'pip install "trl-marl[' in str(error)


def exit_on_unavailable(run: Callable[[], Any], prog: str) -> Any:
    """`run()`, except that a user's mistake ends the program with its one line, `prog: ...`, instead of chained
    tracebacks: what the commands and the example scripts call.

    - a dataset or model the Hub cannot give ([`DatasetUnavailableError`], `utils.model_names.UnknownModelNameError`):
      status 1;
    - a missing optional extra (an `ImportError` whose message names `pip install "trl-marl[...]"`, e.g. the writing
      task's `rewards`): status 1;
    - a mistake in an option's value or in the data ([`UsageError`]: a missing data file, a file that cannot be
      parsed, a missing column, a `trl-marl/` name that is not shipped): status 2, as argparse's usage errors.
    """
    from ..utils.model_names import UnknownModelNameError

    try:
        return run()
    except UsageError as error:
        print(f"{prog}: {_one_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except (DatasetUnavailableError, UnknownModelNameError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    except ImportError as error:
        if not _names_an_extra(error):
            raise
        print(f"{prog}: {_one_line(error)}", file=sys.stderr)
        raise SystemExit(1) from None
