"""Checkpoint folders on disk: their names, their manifests, and reading their files without following links.

A checkpoint folder gets a manifest, [`MANIFEST_FILE`] (every file's size and SHA-256), written after every other
file, atomically (a temporary file, fsync, rename): [`write_manifest`]. What a checkpoint is judged by before a run
resumes from it, and how the newest good one is chosen, is `utils.checkpoint_checks`.

Files of a checkpoint are read through [`CheckpointDamage`]-raising helpers that open regular files only: a symbolic
link is never followed and a FIFO or a device is never read (a manifest entry linked to `/dev/zero` would otherwise
hash forever).

Standard library only, so that it can run before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass

MANIFEST_FILE = "checkpoint_manifest.json"
"""The manifest of a checkpoint folder: `{"format": 1, "files": {relative path: {"size": n, "sha256": hex}}}`."""

MANIFEST_FORMAT = 1

TRAINER_STATE_FILE = "trainer_state.json"
"""The file transformers writes last into a checkpoint (before the manifest), and what resuming needs first."""

TEAM_CONFIG_FILE = "team_config.json"
"""A saved team's layout (`team.saving.TEAM_CONFIG_NAME`): the agents whose weights a checkpoint must hold."""

CHECKPOINT_PREFIX = "checkpoint"
"""Checkpoint folders are `checkpoint-<global step>` (transformers' `PREFIX_CHECKPOINT_DIR`)."""

PARTIAL_PREFIX = "tmp-"
"""A checkpoint is written into `tmp-checkpoint-<step>` and renamed when complete. Neither transformers'
`get_last_checkpoint` (`^checkpoint-\\d+$`) nor its rotation (`checkpoint-*`) sees such a folder."""

REPLACED_SUFFIX = "-replaced"
"""`tmp-checkpoint-<step>-replaced`: a complete checkpoint moved aside while a new save of the same step takes its
name (deleted once the new one is in place; a resume uses it if a crash came between the two renames)."""

CORRUPT_SUFFIX = "-corrupt"
"""`checkpoint-<step>-corrupt`: a damaged checkpoint moved aside (never deleted) when its step is saved again."""

CHECKPOINT_RE = re.compile(rf"^{CHECKPOINT_PREFIX}-([0-9]+)$")
PARTIAL_RE = re.compile(rf"^{PARTIAL_PREFIX}{CHECKPOINT_PREFIX}-([0-9]+)$")
REPLACED_RE = re.compile(rf"^{PARTIAL_PREFIX}{CHECKPOINT_PREFIX}-([0-9]+){REPLACED_SUFFIX}$")

MANIFEST_TEMPORARY = f".{MANIFEST_FILE}.tmp"
"""Where [`write_manifest`] writes before it renames."""
_CHUNK = 8 * 1024 * 1024
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


class IncompleteCheckpointWarning(UserWarning):
    """An incomplete checkpoint folder (an interrupted save) was skipped when looking for one to resume from."""


class CorruptCheckpointWarning(IncompleteCheckpointWarning):
    """A checkpoint that fails [`checkpoint_problem`] (a file damaged, missing, added or linked, no manifest, a state
    that disagrees with its folder) was skipped; it is kept."""


@dataclass(frozen=True)
class CheckpointSpec:
    """What a trainer needs of a checkpoint to resume from it, beyond what the checkpoint's own manifest lists.

    A manifest says which files a checkpoint had when it was written; it cannot say which files it should have had
    (a manifest rewritten after a deletion lists what is left). The trainer says that
    (`TeamCheckpointMixin.checkpoint_spec`).

    Args:
        required: The files that must be in the folder (and in its manifest), each as a tuple of alternatives of
            which one suffices (e.g. `("rng_state.pth", "rng_state_0.pth")`), `/`-joined relative paths.
        state_keys: The keys `trainer_state.json` may have (the fields of transformers' `TrainerState`: any other key
            makes `TrainerState.load_from_json` fail); `None` does not check them.
    """

    required: tuple[tuple[str, ...], ...] = ((TRAINER_STATE_FILE,),)
    state_keys: frozenset[str] | None = None


class CheckpointDamage(Exception):
    """A problem of a checkpoint folder, as the sentence that names the file. Raised by this module's readers and
    `utils.checkpoint_checks`' checks; the public checks return the sentence instead."""


def folder_step(folder: str | os.PathLike[str]) -> int | None:
    """The step in a checkpoint folder's name (`checkpoint-<step>` or `tmp-checkpoint-<step>-replaced`); `None`
    for any other name (a checkpoint copied elsewhere under a name of its own)."""
    name = os.path.basename(os.path.normpath(os.fspath(folder)))
    match = CHECKPOINT_RE.match(name) or REPLACED_RE.match(name)
    return int(match.group(1)) if match else None


# ------------------------------------------------------------------------------------------------ reading safely


def file_kind(mode: int) -> str:
    """What a file of this `st_mode` is, with its article."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str) -> int:
    """A read descriptor of `path` if it is a regular file: a symbolic link is not followed and a FIFO or a device is
    never read (it could block or never end)."""
    try:
        descriptor = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise CheckpointDamage(f"{path} is missing") from None
    except OSError as exc:  # ELOOP: a symbolic link; EACCES, ...
        try:
            kind = file_kind(os.lstat(path).st_mode)
        except OSError:
            kind = "unreadable"
        raise CheckpointDamage(f"{path} cannot be opened ({kind}: {exc.strerror})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise CheckpointDamage(f"{path} is {file_kind(mode)}, not a regular file")
    return descriptor


def read_json(path: str) -> object:
    """The JSON value in a regular file; `CheckpointDamage` naming the file when it is not one or does not parse."""
    with os.fdopen(open_regular(path), "rb") as handle:
        data = handle.read()
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointDamage(f"{path} is not valid JSON ({type(exc).__name__}: {exc})") from None


def file_sha256(path: str) -> str:
    """The SHA-256 of a regular file's bytes, as hex (read in 8 MiB chunks; a link, FIFO or device is refused with
    `ValueError`)."""
    try:
        descriptor = open_regular(path)
    except CheckpointDamage as damage:
        raise ValueError(str(damage)) from None
    digest = hashlib.sha256()
    with os.fdopen(descriptor, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def scan_folder(folder: str) -> dict[str, int]:
    """Every regular file under `folder` but the manifest's temporary copy, as `/`-joined relative path -> size;
    `CheckpointDamage` at the first symbolic link or special file (nothing is followed)."""
    found: dict[str, int] = {}
    pending = [(folder, "")]
    while pending:
        directory, prefix = pending.pop()
        with os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                relative = prefix + entry.name
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    pending.append((entry.path, relative + "/"))
                elif stat.S_ISREG(mode):
                    if relative != MANIFEST_TEMPORARY:
                        found[relative] = entry.stat(follow_symlinks=False).st_size
                elif stat.S_ISLNK(mode):
                    raise CheckpointDamage(
                        f"{entry.path} is a symbolic link (to {os.readlink(entry.path)!r}): a checkpoint holds "
                        "regular files only (a link brings in files that are not the checkpoint's)"
                    )
                else:
                    raise CheckpointDamage(f"{entry.path} is {file_kind(mode)}, not a regular file")
    return found


def relative_path_problem(name: str) -> str | None:
    """Why a manifest entry is not a plain relative path inside the folder (`a/b.json`); `None` when it is one."""
    parts = name.split("/")
    if not name or "\\" in name or "\0" in name or os.path.isabs(name) or re.match(r"^[A-Za-z]:", name):
        return "which is not a relative path"
    if any(part in ("", ".", "..") for part in parts):
        return "which is not a plain path inside the checkpoint (no `..`, `.` or empty parts)"
    if name in (MANIFEST_FILE, MANIFEST_TEMPORARY):
        return "which is the manifest itself"
    return None


# ------------------------------------------------------------------------------------------------ writing manifests


def write_manifest(folder: str) -> str:
    """Write the manifest of every file now in `folder` (sizes and SHA-256), atomically; returns its path.

    Call it once everything else of the checkpoint is written: a file written later is flagged as not listed. By hand,
    it accepts a checkpoint without a manifest (one of a development version from before manifests) once you know
    that its files are the ones that were saved.

    Raises:
        ValueError: The folder holds a symbolic link or a special file (a checkpoint holds regular files only).
    """
    try:
        found = scan_folder(folder)
    except CheckpointDamage as damage:
        raise ValueError(f"Cannot write a manifest for {folder}: {damage}.") from None
    files = {}
    for relative in sorted(found):
        if relative == MANIFEST_FILE:
            continue
        path = os.path.join(folder, *relative.split("/"))
        files[relative] = {"size": os.path.getsize(path), "sha256": file_sha256(path)}
    path = os.path.join(folder, MANIFEST_FILE)
    temporary = os.path.join(folder, MANIFEST_TEMPORARY)
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"format": MANIFEST_FORMAT, "files": files}, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path


# ------------------------------------------------------------------------------------------------ reading a state


def is_complete_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether a folder is a complete checkpoint: it holds a readable `trainer_state.json` (a regular file).

    trl-marl writes that file last (then only the manifest of every file), into a temporary folder that is renamed
    only when everything is on disk, so a `checkpoint-<step>` folder of trl-marl is complete by construction; the
    check catches folders left half-written by other code (or copied partially). Whether the files are still intact
    is [`checkpoint_problem`]'s question.

    Args:
        path: The folder.

    Returns:
        `True` when `path/trainer_state.json` is a regular file holding a JSON object.
    """
    try:
        return isinstance(read_json(os.path.join(os.fspath(path), TRAINER_STATE_FILE)), dict)
    except (CheckpointDamage, OSError):
        return False


def finished_run_problem(checkpoint: str, max_steps: int, config_name: str) -> str | None:
    """Why a run must not resume from `checkpoint`: it is at `max_steps` already (transformers would train one step
    past it, and save that step); `None` otherwise (also with `max_steps <= 0`: epochs decide, and a finished run
    then trains nothing)."""
    try:
        state = read_json(os.path.join(checkpoint, TRAINER_STATE_FILE))
    except (CheckpointDamage, OSError):
        return None  # the completeness checks report an unreadable state
    step = state.get("global_step") if isinstance(state, dict) else None
    if not (type(step) is int and type(max_steps) is int and 0 < max_steps <= step):
        return None
    return (
        f"Cannot resume from {checkpoint}: it is at step {step} and `{config_name}.max_steps={max_steps}`, so this "
        f"run is finished (resuming would train a step past `max_steps`). To train further, raise `max_steps` above "
        f'{step}; to use the trained team, load it with `AgentTeam.from_pretrained("{checkpoint}")`.'
    )


def fsync_tree(root: str) -> None:
    """Flushes every file and folder under `root` to disk (where the platform allows fsync on folders)."""
    for folder, _, files in os.walk(root):
        for name in files:
            descriptor = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        fsync_dir(folder)


def fsync_dir(folder: str) -> None:
    """Flushes a folder's entries (new names, renames) to disk; a no-op where folders cannot be opened."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(descriptor)
    except OSError:  # pragma: no cover - some file systems refuse fsync on folders
        pass
    finally:
        os.close(descriptor)


# ------------------------------------------------------------------------------------------------ disk use


def folder_bytes(folder: str) -> dict[str, int]:
    """The bytes of every regular file under `folder` (links not followed), by `/`-joined relative path."""
    sizes: dict[str, int] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                sizes[os.path.relpath(path, folder).replace(os.sep, "/")] = info.st_size
    return sizes


def _part(relative: str) -> str:
    top = relative.split("/", 1)[0]
    for prefix, part in (("agent_", "agents"), ("value_model", "value models"), ("optimizer", "optimizer"),
                         ("base_model", "base model"), ("scheduler", "other"), ("rng_state", "other")):
        if top.startswith(prefix):
            return part
    return "other"


def human_bytes(count: float) -> str:
    """`count` bytes as B, kB, MB or GB (powers of 1000), e.g. `human_bytes(1_234_567) == "1.2 MB"`."""
    for unit in ("B", "kB", "MB"):
        if count < 1000:
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.2f} GB"


def checkpoint_size_line(checkpoint: str, save_total_limit: int | None = None) -> str:
    """The line logged after a checkpoint is saved: its size, by part (agents, value models, optimizer, base model,
    other), and what all the complete checkpoints next to it take, with whether `save_total_limit` bounds them.

    Example: `checkpoint-4: 12.3 MB (agents 10.1 MB, optimizer 2.0 MB, other 0.2 MB); 3 checkpoints take 36.9 MB in
    out/ (save_total_limit=None keeps every one: set it to bound the disk use)`.
    """
    sizes = folder_bytes(checkpoint)
    parts: dict[str, int] = {}
    for relative, size in sizes.items():
        parts[_part(relative)] = parts.get(_part(relative), 0) + size
    order = ("agents", "value models", "optimizer", "base model", "other")
    detail = ", ".join(f"{part} {human_bytes(parts[part])}" for part in order if part in parts)
    run_dir = os.path.dirname(os.path.normpath(checkpoint))
    complete = [name for name in os.listdir(run_dir) if CHECKPOINT_RE.match(name)
                and os.path.isdir(os.path.join(run_dir, name))]
    total = sum(sum(folder_bytes(os.path.join(run_dir, name)).values()) for name in complete)
    bound = (f"save_total_limit={save_total_limit} keeps the newest {save_total_limit}" if save_total_limit
             else "save_total_limit=None keeps every one: set it to bound the disk use")
    count = f"{len(complete)} checkpoint{'s take' if len(complete) != 1 else ' takes'}"
    return (f"{os.path.basename(os.path.normpath(checkpoint))}: {human_bytes(sum(sizes.values()))} ({detail}); "
            f"{count} {human_bytes(total)} in {run_dir} ({bound})")
