"""Where the training scripts' data comes from: a local file, a dataset shipped with trl-marl, or the Hugging Face Hub.

Every script (`trl-marl magrpo`, `trl-marl maporl`, `examples/*.py`) reads its data options the same way
([`resolve_source`]):

1. `--data_files PATH` (one or more comma-separated local `.jsonl`/`.json`/`.csv`/`.parquet` files) is the data,
   whatever `--dataset_name` says (the example configs name a Hub dataset);
2. else a `--dataset_name` that ends in one of those suffixes is a local file (it must exist: a missing one is an
   error, never a Hub request);
3. else a name of [`SHIPPED_DATASETS`] (e.g. `trl-marl/team_coding`) is read from the installed package;
4. else the name is a Hub dataset (or an existing local folder that `datasets.load_dataset` reads; a path that does
   not exist is an error), loaded inside
   [`hub_dataset`]: when the Hub is switched off (`HF_HUB_OFFLINE=1`) or unreachable, `datasets` only looks in its
   local cache (no retries), and any failure to fetch the dataset becomes one [`DatasetUnavailableError`] that names
   the dataset, the option and the offline route (a local file, the offline model `smollm2-135m-instruct`).

The model's side of the same question is `trl_marl.utils.model_names.check_model_name` (an `UnknownModelNameError`
that lists the offline model names); both ask `hub_unavailable_reason` whether the Hub can be used.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..data.files import DATA_FILE_KINDS, as_file_list, data_file_builder
from ..offline_models import REAL_MODEL_NAME
from ..utils.model_names import hub_unavailable_reason

SHIPPED_DATASETS: dict[str, str] = {
    "trl-marl/team_coding": "the cooperative coding problems that ship with trl-marl "
                            "(`trl_marl.data.load_team_coding`; splits train, heldout, all; `--dataset_config` "
                            "picks the levels: 1, 2 or 1,2)",
    "trl-marl/team_writing": "the writing texts that ship with trl-marl: Python standard-library docstrings, PSF "
                             "License (`trl_marl.data.load_team_writing`; splits train, heldout, all)",
}
"""Dataset names that resolve to data installed with the package (no Hub, no file), and what each is."""


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
                   default: str | None = None) -> DataSource | None:
    """The data a script was asked for: `data_files`, else `dataset_name`, else `default` (None: no data named).

    Raises:
        FileNotFoundError: `data_files`, or a `dataset_name` with a data file's suffix, names a file that does not
            exist (a local file is never looked up on the Hub).
    """
    import os

    if data_files:
        names = as_file_list(data_files)
        missing = [path for path in names if not os.path.isfile(os.path.expanduser(path))]
        if missing:
            raise FileNotFoundError(f"`--data_files` {missing[0]!r}: no such file "
                                    f"({os.path.abspath(os.path.expanduser(missing[0]))}).")
        return DataSource("local", ",".join(names), "`--data_files`")
    name = dataset_name or default
    if not name:
        return None
    option = "`--dataset_name`" if dataset_name else "the default of `--dataset_name`"
    if all(data_file_builder(part) is not None for part in as_file_list(name)):
        missing = [path for path in as_file_list(name) if not os.path.isfile(os.path.expanduser(path))]
        if missing:
            raise FileNotFoundError(
                f"`--dataset_name` {missing[0]!r} names a local data file, but there is no such file "
                f"({os.path.abspath(os.path.expanduser(missing[0]))}). Pass an existing {DATA_FILE_KINDS} file, or "
                "a Hub dataset name."
            )
        return DataSource("local", name, "`--dataset_name`")
    if name in SHIPPED_DATASETS:
        return DataSource("shipped", name, option)
    from ..utils.inputs import looks_like_path

    if looks_like_path(name) and not os.path.exists(os.path.expanduser(name)):
        raise FileNotFoundError(
            f"`--dataset_name` {name!r} looks like a local path, but {os.path.abspath(os.path.expanduser(name))} does "
            f"not exist. Pass an existing {DATA_FILE_KINDS} file, a folder `datasets` reads, or a Hub dataset name."
        )
    return DataSource("hub", name, option)


def offline_route(columns: str, shipped: str | None = None) -> str:
    """The sentence that tells a user how to run without the Hub: a local file with `columns` (and the shipped
    dataset `shipped`, when the task has one), and the offline real model."""
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
        raise DatasetUnavailableError(
            f"The dataset {source.name!r} ({source.option}) could not be fetched from the Hugging Face Hub: {why}. "
            f"{route}"
        ) from error


def exit_on_unavailable(run: Callable[[], Any], prog: str) -> Any:
    """`run()`, except that a dataset or model the Hub cannot give ([`DatasetUnavailableError`],
    `utils.model_names.UnknownModelNameError`) ends the program with its message, `prog: ...`, and status 1 instead
    of two chained tracebacks: what the commands and the example scripts call."""
    from ..utils.model_names import UnknownModelNameError

    try:
        return run()
    except (DatasetUnavailableError, UnknownModelNameError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
