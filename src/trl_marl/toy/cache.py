"""Cached, ready-to-load toy models: `make_toy_model` builds, pretrains and saves one; toy names resolve to it.

A model folder appears whole or not at all: it is built in a temporary folder beside it and renamed into place
([`publish_folder`]), and the processes of one machine that want the same folder at once (the ranks of an
`accelerate launch` on an empty cache) take turns ([`build_lock`]): the first builds it, the others find it built.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .model import build_toy_model, build_toy_tokenizer
from .names import TOY_PRESETS, TOY_TASK_NAMES, toy_task_of
from .pretrain import isolated_rng, pretrain_toy_model
from .tasks import AdditionTask, DebateAdditionTask, SpecialistFactsTask, TargetNumberTask, ToyTask

if TYPE_CHECKING:
    from transformers import PreTrainedModel

_MARKER_FILE = "trl_marl_toy.json"
_FORMAT_VERSION = 3  # 3: pretraining runs on one torch thread whatever the caller set
_MAKE_KWARGS_DEFAULTS: dict[str, Any] = {
    "num_heads": 4,
    "max_position_embeddings": 128,
    "batch_size": 128,
    "lr": 3e-3,
    "max_operand": 99,
    "noise_prob": 0.0,
    "specialty": 0,
    "copy_prob": 0.5,
    "novice_known_prob": 0.4,
    "knowledge_seed": 0,
}


def toy_cache_dir() -> Path:
    """Returns the directory that holds cached toy models.

    It is ``$TRL_MARL_CACHE/toy`` if the ``TRL_MARL_CACHE`` environment variable is set, else
    ``$XDG_CACHE_HOME/trl_marl/toy`` (``~/.cache/trl_marl/toy`` by default).

    Returns:
        The directory (not necessarily existing yet).
    """
    root = os.environ.get("TRL_MARL_CACHE")
    if root:
        return Path(root).expanduser() / "toy"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trl_marl" / "toy"


def _read_marker(directory: Path) -> dict[str, Any] | None:
    """Reads the completion marker of a toy model directory.

    Args:
        directory: The directory.

    Returns:
        The stored arguments, or ``None`` if there is no readable marker.
    """
    try:
        return json.loads((directory / _MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


def make_toy_model(
    path: str | os.PathLike | None = None,
    *,
    task: str = "target",
    hidden_size: int = 64,
    num_layers: int = 2,
    pretrain_steps: int = 300,
    seed: int = 0,
    targets: Sequence[int] = (10,),
    progress: bool | str = False,
    **kw: Any,
) -> str:
    """Builds, pretrains and saves a toy model and its tokenizer; returns the directory (cached).

    The directory can be passed to ``AutoTokenizer.from_pretrained`` and ``AutoModelForCausalLM.from_pretrained``.
    A marker file with the arguments is written last; if ``path`` already holds a finished model built with the
    same arguments, nothing is rebuilt. The result is deterministic given the arguments.

    Args:
        path: Target directory. By default a directory named after a hash of the arguments under
            :func:`toy_cache_dir`.
        task: ``"target"`` (:class:`TargetNumberTask` over ``targets``), ``"addition"`` (:class:`AdditionTask`) or
            ``"debate"`` (:class:`DebateAdditionTask`, the toy debate format) or ``"facts_specialist"``
            (:class:`SpecialistFactsTask`, one member of a heterogeneous debate team; option ``specialty``).
        hidden_size: Model width.
        num_layers: Number of decoder layers.
        pretrain_steps: Number of supervised pretraining steps (0 leaves the model untrained).
        seed: Seed of the initialisation and of the pretraining.
        targets: Targets of the ``"target"`` task.
        progress: Show a progress bar while the model pretrains (a string: the bar's label); a cached model shows
            nothing. Not part of the cache key.
        **kw: Further options: ``num_heads`` (4), ``max_position_embeddings`` (128), ``batch_size`` (128),
            ``lr`` (3e-3), for the ``"addition"`` and ``"debate"`` tasks ``max_operand`` (99) and ``noise_prob``
            (0.0), and for ``"facts_specialist"`` ``specialty`` (0).

    Returns:
        The directory holding the saved model and tokenizer.

    Raises:
        ValueError: If ``task`` is unknown.
        TypeError: If an unknown keyword argument is given.
    """
    if task not in TOY_TASK_NAMES:
        raise ValueError(f"unknown toy task {task!r}; expected one of {TOY_TASK_NAMES}")
    unknown = sorted(set(kw) - set(_MAKE_KWARGS_DEFAULTS))
    if unknown:
        raise TypeError(f"make_toy_model() got unexpected keyword arguments: {unknown}")
    options = {**_MAKE_KWARGS_DEFAULTS, **kw}
    args: dict[str, Any] = {
        "format_version": _FORMAT_VERSION,
        "task": task,
        "hidden_size": int(hidden_size),
        "num_layers": int(num_layers),
        "pretrain_steps": int(pretrain_steps),
        "seed": int(seed),
        "num_heads": int(options["num_heads"]),
        "max_position_embeddings": int(options["max_position_embeddings"]),
        "batch_size": int(options["batch_size"]),
        "lr": float(options["lr"]),
    }
    if task == "target":
        args["targets"] = [int(t) for t in targets]
    else:
        args["max_operand"] = int(options["max_operand"])
        args["noise_prob"] = float(options["noise_prob"])
    if task == "facts_specialist":
        args["specialty"] = None if options["specialty"] is None else int(options["specialty"])
        args["copy_prob"] = float(options["copy_prob"])
        args["novice_known_prob"] = float(options["novice_known_prob"])
        args["knowledge_seed"] = int(options["knowledge_seed"])
        args["novice_knowledge"] = "fixed-subset"  # what a novice knows (part of the cache key)
    args = json.loads(json.dumps(args))  # normalise exactly as it will be read back

    if path is None:
        digest = hashlib.sha256(json.dumps(args, sort_keys=True).encode()).hexdigest()[:16]
        directory = toy_cache_dir() / f"{task}-h{hidden_size}-l{num_layers}-{digest}"
    else:
        directory = Path(path)
    if _read_marker(directory) == args:
        return str(directory)
    with build_lock(directory):
        if _read_marker(directory) != args:  # not built by another process while this one waited
            with isolated_rng():  # building draws nothing from the caller's generators (same run, cache or not)
                _build_toy_model(args, directory, progress)
    return str(directory)


def _save_model_files(model: PreTrainedModel, folder: Path) -> None:
    """Write `model`'s config, generation config and weights (`model.safetensors`, tied tensors once) to `folder`
    whatever the process's rank: `save_pretrained` writes them only on rank 0 once `torch.distributed` is started,
    and the rank that holds the build lock may be any."""
    from safetensors.torch import save_model

    model.config.save_pretrained(folder)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"), metadata={"format": "pt"})


@contextlib.contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold the lock of `directory`'s build, so that of the processes of one machine that want the folder at once
    one builds and the others wait, then find it built: an exclusive `flock` on a file named after the folder's
    absolute path in a folder of this user's in the temporary directory (nothing is added beside the model).

    Where `fcntl` is missing (Windows) nothing is locked: each process builds its own copy, and [`publish_folder`]
    still keeps every reader from a half-written folder.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    locks = Path(tempfile.gettempdir()) / f"trl_marl-locks-{os.getuid()}"
    locks.mkdir(mode=0o700, exist_ok=True)
    key = hashlib.sha256(os.path.abspath(directory).encode()).hexdigest()[:24]
    with open(locks / f"{key}.lock", "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def publish_folder(built: Path, directory: Path, is_done: Callable[[Path], bool]) -> None:
    """Move the finished folder `built` (a sibling of `directory`) to `directory` with one rename.

    A reader sees the whole folder or none. `is_done(directory)` tells whether `directory` already holds the same
    finished build (another process's, published first): then `built` is deleted. Anything else in `directory` (a
    half-written folder of an older version, a build of other arguments) is moved aside and deleted first.

    Raises:
        OSError: The rename failed for another reason than a folder in the way.
    """
    for _ in range(5):
        if is_done(directory):
            shutil.rmtree(built, ignore_errors=True)
            return
        try:
            os.replace(built, directory)  # atomic; replaces an absent or empty `directory`
            return
        except OSError as error:
            if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.EACCES, errno.EPERM):
                raise
        if is_done(directory):
            continue
        aside = Path(tempfile.mkdtemp(prefix=f".{directory.name}.replaced-", dir=directory.parent))
        try:
            os.replace(directory, aside / "old")
        except FileNotFoundError:
            pass
        shutil.rmtree(aside, ignore_errors=True)
    shutil.rmtree(built, ignore_errors=True)
    raise OSError(f"could not move the toy model built in {built} to {directory}: the folder kept changing")


def _build_toy_model(args: dict[str, Any], directory: Path, progress: bool | str = False) -> None:
    """Build, pretrain and save the toy model that `args` (as [`make_toy_model`] normalised them) describe."""
    task = args["task"]
    toy_task: ToyTask
    if task == "target":
        toy_task = TargetNumberTask(targets=args["targets"])
    elif task == "debate":
        toy_task = DebateAdditionTask(max_operand=args["max_operand"], noise_prob=args["noise_prob"])
    elif task == "facts_specialist":
        toy_task = SpecialistFactsTask(
            specialty=args["specialty"],
            copy_prob=args["copy_prob"],
            novice_known_prob=args["novice_known_prob"],
            knowledge_seed=args["knowledge_seed"],
        )
    else:
        toy_task = AdditionTask(max_operand=args["max_operand"], noise_prob=args["noise_prob"])
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(
        tokenizer,
        hidden_size=args["hidden_size"],
        num_layers=args["num_layers"],
        num_heads=args["num_heads"],
        seed=args["seed"],
        max_position_embeddings=args["max_position_embeddings"],
    )
    if args["pretrain_steps"] > 0:
        pretrain_toy_model(
            model,
            tokenizer,
            toy_task,
            steps=args["pretrain_steps"],
            batch_size=args["batch_size"],
            lr=args["lr"],
            seed=args["seed"],
            progress=progress,
        )
    model.eval()

    directory.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=f".{directory.name}.build-", dir=directory.parent))
    try:
        os.chmod(built, 0o755)  # as a folder made by `mkdir` (mkdtemp's is private to its user)
        tokenizer.save_pretrained(built)
        model.save_pretrained(built)
        if not (built / "config.json").exists():  # a rank other than 0 of a started process group (`accelerate
            _save_model_files(model, built)  # launch`): transformers writes nothing there, and this rank may build
        (built / _MARKER_FILE).write_text(json.dumps(args, indent=2, sort_keys=True))  # last: it marks completeness
        publish_folder(built, directory, lambda folder: _read_marker(folder) == args)
    finally:
        shutil.rmtree(built, ignore_errors=True)  # left only by a failure


def resolve_toy_name(name: str) -> str:
    """Resolves a toy model name to the directory of a (cached) toy model.

    ``"toy"`` and ``"trl-marl/toy"`` give the default :func:`make_toy_model` (the ``"target"`` task).
    A task may be named after the prefix: ``"toy:target"``, ``"toy:addition"``, ``"trl-marl/toy-addition"``.
    The ``"addition"`` task uses a larger preset (hidden 128, 2 layers, 600 steps at lr 1e-3, half the labels
    noisy): measured greedy accuracy ~.65 and sampled ~.2, so the model solves it partly and has room to improve.
    Building it takes about a minute on a CPU the first time; later calls hit the cache.
    The ``"debate"`` task (``"toy:debate"``, :class:`DebateAdditionTask`) uses hidden 64, 2 layers, 300 steps at lr
    3e-3, a fifth of the labels noisy: measured greedy accuracy ~.5 on first-turn prompts and ~.8 on revision prompts
    whose candidates are mostly right, so a debate can correct first answers (about 10-20 s to build).

    Args:
        name: A name for which :func:`is_toy_name` is true.

    Returns:
        The directory holding the toy model and tokenizer.

    Raises:
        ValueError: If the name is not a toy name or names an unknown task.
    """
    task = toy_task_of(name)
    return make_toy_model(task=task, **TOY_PRESETS[task])
