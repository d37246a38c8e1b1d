"""Checkpoint manifests: every file's size and SHA-256, written last, checked before a checkpoint is resumed from.

A checkpoint that was published whole can still be damaged afterwards: a disk that fills or fails, a copy cut
short, a file truncated by hand. Loading such a file fails deep inside safetensors or `torch.load` (a
`SafetensorError`, a zip-reader error, `OSError: [Errno 22]` without a path), long after the checkpoint was chosen.
So a checkpoint folder gets a manifest, [`MANIFEST_FILE`], written after every other file (atomically: a temporary
file, fsync, rename), and [`checkpoint_problem`] compares the folder with it before the folder is used.

Folders without a manifest (written by trl-marl before manifests existed, or by other code) get a structural check
instead: no empty weight, state or JSON file; every `*.safetensors` file holds its header and exactly the bytes the
header describes; every `*.pt`/`*.pth` file (`torch.save`'s zip format) has a readable zip directory (a truncated
zip loses its directory, which sits at the end); every `*.json` file parses. That catches truncation and emptying,
not a flipped bit inside the data, which only a manifest's checksums catch.

Standard library only, so that it can run before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import warnings
import zipfile

MANIFEST_FILE = "checkpoint_manifest.json"
"""The manifest of a checkpoint folder: `{"format": 1, "files": {relative path: {"size": n, "sha256": hex}}}`."""

MANIFEST_FORMAT = 1

TRAINER_STATE_FILE = "trainer_state.json"
"""The file transformers writes last into a checkpoint (before the manifest), and what resuming needs first."""

CORRUPT_SUFFIX = "-corrupt"
"""`checkpoint-<step>-corrupt`: a damaged checkpoint moved aside (never deleted) when its step is saved again."""

_CHUNK = 8 * 1024 * 1024
_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on the JSON header


class IncompleteCheckpointWarning(UserWarning):
    """An incomplete checkpoint folder (an interrupted save) was skipped when looking for one to resume from."""


class CorruptCheckpointWarning(IncompleteCheckpointWarning):
    """A checkpoint whose files do not match its manifest (or are structurally damaged) was skipped; it is kept."""


def file_sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, as hex (read in 8 MiB chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files_of(folder: str) -> list[str]:
    """Every regular file under `folder` but the manifest (and its temporary copy), as sorted `/`-joined paths."""
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if relative not in (MANIFEST_FILE, f".{MANIFEST_FILE}.tmp") and os.path.isfile(os.path.join(root, name)):
                found.append(relative)
    return sorted(found)


def write_manifest(folder: str) -> str:
    """Write the manifest of every file now in `folder` (sizes and SHA-256), atomically; returns its path.

    Call it once everything else of the checkpoint is written: a file written later is not covered.
    """
    files = {}
    for relative in _files_of(folder):
        path = os.path.join(folder, relative)
        files[relative] = {"size": os.path.getsize(path), "sha256": file_sha256(path)}
    path = os.path.join(folder, MANIFEST_FILE)
    temporary = os.path.join(folder, f".{MANIFEST_FILE}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"format": MANIFEST_FORMAT, "files": files}, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path


def checkpoint_problem(folder: str, checksums: bool = True) -> str | None:
    """What is wrong with a checkpoint folder's files, naming the first bad file; `None` when nothing is.

    With a manifest, every file it lists must exist with its size and (with `checksums`) its SHA-256; files it does
    not list are not judged. Without one, the structural check of the module docstring.

    Args:
        folder: The checkpoint folder.
        checksums: Compare the SHA-256 of every file (reads the whole checkpoint); `False` compares sizes only.

    Returns:
        A sentence such as `"out/checkpoint-4/optimizer.pt has 1000 bytes, its manifest says 7400"`, or `None`.
    """
    manifest_path = os.path.join(folder, MANIFEST_FILE)
    if not os.path.exists(manifest_path):
        return _structure_problem(folder)
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
        files = manifest["files"]
        entries = [(str(name), int(entry["size"]), str(entry["sha256"])) for name, entry in files.items()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{os.path.join(folder, MANIFEST_FILE)} is unreadable ({type(exc).__name__}: {exc})"
    for name, size, sha256 in entries:
        if os.path.isabs(name) or ".." in name.split("/"):
            return f"{manifest_path} lists a path outside the checkpoint ({name!r})"
        path = os.path.join(folder, *name.split("/"))
        try:
            actual = os.path.getsize(path)
        except OSError:
            return f"{path} is missing (the manifest lists it)"
        if actual != size:
            return f"{path} has {actual} bytes, its manifest says {size}"
        if checksums:
            try:
                if file_sha256(path) != sha256:
                    return f"{path} does not match the SHA-256 in its manifest (its content changed)"
            except OSError as exc:
                return f"{path} cannot be read ({exc})"
    return None


def checkpoint_damage(folder: str) -> str | None:
    """[`checkpoint_problem`] with checksums, then whether `trainer_state.json` is a JSON object (a manifest does not
    say that); `None` when the checkpoint is whole."""
    problem = checkpoint_problem(folder)
    if problem is None:
        try:
            with open(os.path.join(folder, TRAINER_STATE_FILE), encoding="utf-8") as handle:
                whole = isinstance(json.load(handle), dict)
        except (OSError, ValueError):
            whole = False
        if not whole:
            problem = f"{os.path.join(folder, TRAINER_STATE_FILE)} is missing or not a JSON object"
    return problem


def finished_run_problem(checkpoint: str, max_steps: int, config_name: str) -> str | None:
    """Why a run must not resume from `checkpoint`: it is at `max_steps` already (transformers would train one step
    past it, and save that step); `None` otherwise (also with `max_steps <= 0`: epochs decide, and a finished run
    then trains nothing)."""
    try:
        with open(os.path.join(checkpoint, TRAINER_STATE_FILE), encoding="utf-8") as handle:
            step = json.load(handle).get("global_step", 0)
    except (OSError, ValueError, AttributeError):
        return None  # the completeness checks report an unreadable state
    if not (isinstance(max_steps, int) and 0 < max_steps <= step):
        return None
    return (
        f"Cannot resume from {checkpoint}: it is at step {step} and `{config_name}.max_steps={max_steps}`, so this "
        f"run is finished (resuming would train a step past `max_steps`). To train further, raise `max_steps` above "
        f'{step}; to use the trained team, load it with `AgentTeam.from_pretrained("{checkpoint}")`.'
    )


def _structure_problem(folder: str) -> str | None:
    """The structural check of a checkpoint without a manifest (module docstring)."""
    for relative in _files_of(folder):
        path = os.path.join(folder, *relative.split("/"))
        suffix = os.path.splitext(relative)[1]
        if suffix not in (".safetensors", ".pt", ".pth", ".bin", ".json"):
            continue
        try:
            size = os.path.getsize(path)
            if size == 0:
                return f"{path} is empty"
            if suffix == ".safetensors":
                problem = _safetensors_problem(path, size)
            elif suffix in (".pt", ".pth"):
                with zipfile.ZipFile(path) as archive:
                    archive.namelist()
                problem = None
            elif suffix == ".json":
                with open(path, encoding="utf-8") as handle:
                    json.load(handle)
                problem = None
            else:  # `.bin`: torch.save's zip or a legacy pickle, nothing to check but its size
                problem = None
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            return f"{path} is damaged ({type(exc).__name__}: {exc})"
        if problem is not None:
            return f"{path} {problem}"
    return None


def _safetensors_problem(path: str, size: int) -> str | None:
    """Whether a safetensors file holds its whole header and exactly the data bytes that the header describes."""
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            return f"is truncated ({size} bytes, shorter than the 8-byte header length)"
        (length,) = struct.unpack("<Q", prefix)
        if length > min(size - 8, _MAX_SAFETENSORS_HEADER):
            return f"is truncated ({size} bytes; its header alone says {length + 8})"
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        return "has a header that is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            return f"has no valid data_offsets for tensor {name!r}"
        end = max(end, offsets[1])
    expected = 8 + length + end
    if size != expected:
        return f"has {size} bytes, its header describes {expected} (truncated or padded)"
    return None


def keep_damaged(path: str) -> str:
    """Move a damaged checkpoint aside to `<path>-corrupt` (or `-corrupt-2`, ...), with a warning; returns the new
    path. Used where a checkpoint folder of the same step is about to be written: the damaged one is never deleted."""
    target, count = f"{path}{CORRUPT_SUFFIX}", 1
    while os.path.exists(target):
        count += 1
        target = f"{path}{CORRUPT_SUFFIX}-{count}"
    os.rename(path, target)
    warnings.warn(f"{path} is damaged ({checkpoint_problem(target, checksums=False)}); it is kept as {target} and "
                  "its step is saved again.", CorruptCheckpointWarning, stacklevel=3)
    return target


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
