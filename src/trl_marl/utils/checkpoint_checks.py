"""What a checkpoint is judged by before a run resumes from it, and choosing the newest good one.

A checkpoint that was published whole can still be damaged afterwards: a disk that fills or fails, a copy cut short,
a file truncated, deleted, replaced or edited by hand, two folders swapped. Loading a damaged file fails deep inside
safetensors or `torch.load`, long after the checkpoint was chosen; worse, much damage does not fail at all:
transformers resumes without an optimizer or a scheduler it does not find, and at whatever `global_step` the state
file says. So [`checkpoint_problem`] judges a folder before it is used, in this order:

1. neither the folder nor anything inside it is a symbolic link or a special file (a device, a FIFO): a checkpoint
   holds regular files only (a linked `checkpoint-4/` or `agent_0/` brings in another run's or another checkpoint's
   weights, a link to `/dev/zero` never ends);
2. every entry of its manifest (`utils.checkpoint_files`) is a plain relative path inside the folder, to a regular
   file of the size it lists, and every file in the folder is listed (a file added later, e.g. a `scaler.pt`,
   would be loaded unchecked);
3. the files a resume needs are there ([`CheckpointSpec.required`]: the trainer state always, and what the trainer
   adds: the optimizer, the scheduler, the RNG state, its own state files), and so are the weights of every agent
   that `team_config.json` names;
4. every file has the SHA-256 its manifest lists (with `checksums`);
5. every file has the structure its kind needs (a structural check: no empty weight, state or JSON file, every
   `*.safetensors` file exactly as long as its header says, with tensors that follow each other and are as long as
   their shapes and dtypes say, every `*.pt`/`*.pth` zip with its directory, every
   `*.json` file parsed), which catches a file of the wrong kind behind a manifest rewritten to fit it;
6. `trainer_state.json` is a JSON object with the JSON types of transformers' `TrainerState` fields (and, with
   [`CheckpointSpec.state_keys`], no other key), no log entry after its `global_step`, and a `global_step` equal to
   the step in the folder's name (`checkpoint-<step>`): an edited step or swapped folders are refused.

A folder without a manifest is refused, after all the checks that need none. Every checkpoint trl-marl writes ends
with a manifest, so a folder without one lost it (deleted, left out of a copy) or was written by a development
version of trl-marl from before manifests (0.1.0.dev), and without one nothing tells a deleted, swapped or edited
file from a whole checkpoint. The refusal names the way to accept such a folder knowingly: `write_manifest` on it.

A check never raises: whatever goes wrong while reading a folder (an `OSError`, JSON of the wrong shape) is that
folder's problem, a sentence that names the file, so a damaged checkpoint is skipped for an older one instead of
crashing the search ([`last_complete_checkpoint`]).

Standard library only, so that it can run before anything heavy is imported.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import warnings
import zipfile
from collections.abc import Callable, Sequence
from typing import BinaryIO

from .checkpoint_files import (
    CHECKPOINT_PREFIX,
    CHECKPOINT_RE,
    CORRUPT_SUFFIX,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    PARTIAL_PREFIX,
    PARTIAL_RE,
    REPLACED_RE,
    TEAM_CONFIG_FILE,
    TRAINER_STATE_FILE,
    CheckpointDamage,
    CheckpointSpec,
    CorruptCheckpointWarning,
    IncompleteCheckpointWarning,
    file_kind,
    file_sha256,
    folder_step,
    open_regular,
    read_json,
    relative_path_problem,
    scan_folder,
)

_MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024  # the safetensors format's own limit on the JSON header
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


# ------------------------------------------------------------------------------------------------ checking a folder


def checkpoint_problem(
    folder: str | os.PathLike[str], checksums: bool = True, spec: CheckpointSpec | None = None
) -> str | None:
    """What is wrong with a checkpoint folder, naming the first bad file; `None` when nothing is.

    The checks of the module docstring, in its order. Never raises: a folder that cannot be read is a problem too.

    Args:
        folder: The checkpoint folder.
        checksums: Compare the SHA-256 of every file (reads the whole checkpoint); `False` compares sizes only.
        spec: What the trainer needs (default: a `trainer_state.json`).

    Returns:
        A sentence such as `"out/checkpoint-4/optimizer.pt has 1000 bytes, its manifest says 7400"`, or `None`.
    """
    folder = os.fspath(folder)
    try:
        _check_folder(folder, checksums, spec or CheckpointSpec())
    except CheckpointDamage as damage:
        return str(damage)
    except Exception as exc:  # noqa: BLE001 - a folder that cannot be checked is damaged; the search goes on
        return f"{folder} cannot be checked ({type(exc).__name__}: {exc})"
    return None


def checkpoint_damage(folder: str | os.PathLike[str], spec: CheckpointSpec | None = None) -> str | None:
    """[`checkpoint_problem`] with checksums: what resuming from `folder` would go wrong on; `None` when nothing."""
    return checkpoint_problem(folder, checksums=True, spec=spec)


def _check_folder(folder: str, checksums: bool, spec: CheckpointSpec) -> None:
    """Raise `CheckpointDamage` at the first problem of the folder (`checkpoint_problem`)."""
    if os.path.islink(folder):
        raise CheckpointDamage(
            f"{folder} is a symbolic link (to {os.readlink(folder)!r}): a checkpoint is a folder of its own run, "
            "not a link to another run's"
        )
    if not os.path.isdir(folder):
        raise CheckpointDamage(f"{folder} is not a folder")
    found = scan_folder(folder)
    manifest_path = os.path.join(folder, MANIFEST_FILE)
    if MANIFEST_FILE not in found and os.path.lexists(manifest_path):
        raise CheckpointDamage(f"{manifest_path} is {file_kind(os.lstat(manifest_path).st_mode)}, not a file")
    listed = _read_manifest(manifest_path) if MANIFEST_FILE in found else None
    if listed is not None:
        for name, (size, _) in sorted(listed.items()):
            path = os.path.join(folder, *name.split("/"))
            if name not in found:
                what = file_kind(os.lstat(path).st_mode) if os.path.lexists(path) else None
                raise CheckpointDamage(
                    f"{path} is {what}, not the file its manifest lists"
                    if what
                    else f"{path} is missing (the manifest lists it)"
                )
            if found[name] != size:
                raise CheckpointDamage(f"{path} has {found[name]} bytes, its manifest says {size}")
        unlisted = sorted(set(found) - set(listed) - {MANIFEST_FILE})
        if unlisted:
            raise CheckpointDamage(
                f"{os.path.join(folder, *unlisted[0].split('/'))} is not listed in {manifest_path}: it was added "
                "after the checkpoint was written (remove it, or rewrite the manifest if it belongs there)"
            )
    present = set(found if listed is None else listed)
    _check_required(folder, present, spec.required)
    if listed is not None and checksums:
        for name, (_, sha256) in sorted(listed.items()):
            path = os.path.join(folder, *name.split("/"))
            if file_sha256(path) != sha256:
                raise CheckpointDamage(f"{path} does not match the SHA-256 in its manifest (its content changed)")
    _check_structure(folder, found)  # with a manifest too: one rewritten to fit a file of the wrong kind
    _check_required(folder, present, _team_requirements(folder, present))
    _check_trainer_state(folder, spec.state_keys)
    if listed is None:
        raise CheckpointDamage(
            f"{folder} has no {MANIFEST_FILE}, so nothing tells a deleted, swapped or edited file from a whole "
            "checkpoint (every checkpoint trl-marl writes ends with one: it was removed or left out of a copy, or the "
            "folder was written by a development version of trl-marl from before manifests). If you know its files "
            'are the ones that were saved, accept it with `python -c "from trl_marl.utils.checkpoint_files import '
            f'write_manifest; write_manifest({folder!r})"`'
        )


def _read_manifest(path: str) -> dict[str, tuple[int, str]]:
    """A manifest's entries, relative path -> (size, SHA-256); `CheckpointDamage` unless it is well formed."""
    manifest = read_json(path)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not (
        isinstance(manifest, dict)
        and type(manifest.get("format")) is int
        and manifest["format"] == MANIFEST_FORMAT
        and isinstance(files, dict)
    ):
        raise CheckpointDamage(
            f'{path} is not a manifest of format {MANIFEST_FORMAT} (a JSON object with `"format": '
            f"{MANIFEST_FORMAT}` and a `files` object)"
        )
    entries = {}
    for name, entry in files.items():
        size = entry.get("size") if isinstance(entry, dict) else None
        sha256 = entry.get("sha256") if isinstance(entry, dict) else None
        if not (type(size) is int and size >= 0 and isinstance(sha256, str) and _SHA256_RE.match(sha256)):
            raise CheckpointDamage(
                f"{path} has an invalid entry for {name!r} (each file needs an integer `size` and a hex `sha256`)"
            )
        if (problem := relative_path_problem(name)) is not None:
            raise CheckpointDamage(f"{path} lists {name!r}, {problem}")
        entries[name] = (size, sha256)
    return entries


def _check_required(folder: str, present: set[str], required: Sequence[tuple[str, ...]]) -> None:
    """`CheckpointDamage` naming the first required file (or set of alternatives) of which the folder holds none."""
    for alternatives in required:
        if not any(name in present for name in alternatives):
            first = os.path.join(folder, *alternatives[0].split("/"))
            others = "".join(f" or {name}" for name in alternatives[1:])
            raise CheckpointDamage(
                f"{first}{others} is missing: resuming needs it (without it the run would resume silently "
                "in another state)"
            )


def _team_requirements(folder: str, present: set[str]) -> list[tuple[str, ...]]:
    """The weights of every agent that the folder's `team_config.json` names (none without that file)."""
    if TEAM_CONFIG_FILE not in present:
        return []
    path = os.path.join(folder, TEAM_CONFIG_FILE)
    config = read_json(path)
    count = config.get("num_agents") if isinstance(config, dict) else None
    adapters = config.get("agent_adapter") if isinstance(config, dict) else None
    models = config.get("agent_model") if isinstance(config, dict) else None
    bases = config.get("base_models") if isinstance(config, dict) else None
    if not (
        type(count) is int
        and count >= 1
        and isinstance(adapters, list)
        and len(adapters) == count
        and all(a is None or isinstance(a, str) for a in adapters)
        and isinstance(bases, list)
        and isinstance(models, list)
        and len(models) == count
        and all(type(m) is int and 0 <= m < len(bases) for m in models)
    ):
        raise CheckpointDamage(
            f"{path} is not a team layout (`num_agents` a positive integer; `agent_adapter` and "
            "`agent_model` lists of that length, of adapter names or nulls and of indices into "
            "`base_models`)"
        )
    return [agent_weight_files(agent, adapters[agent] is not None) for agent in range(count)]


def agent_weight_files(agent: int, adapter: bool) -> tuple[str, ...]:
    """The weight file of agent `agent` in a saved team (alternatives): its LoRA adapter, or its full model (one file
    or a sharded index)."""
    if adapter:
        return (f"agent_{agent}/adapter_model.safetensors",)
    return (f"agent_{agent}/model.safetensors", f"agent_{agent}/model.safetensors.index.json")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_callback_states(value: object) -> bool:
    """`stateful_callbacks`: callback name -> `{"args": {...}, "attributes": {...}}` (or a list of those)."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    for states in value.values():
        for one in states if isinstance(states, list) else [states]:
            if not (
                isinstance(one, dict)
                and isinstance(one.get("args", {}), dict)
                and isinstance(one.get("attributes", {}), dict)
            ):
                return False
    return True


_STATE_TYPES: dict[str, tuple[Callable[[object], bool], str]] = {
    "global_step": (lambda v: type(v) is int and v >= 0, "a non-negative integer"),
    "max_steps": (lambda v: type(v) is int, "an integer"),
    "epoch": (lambda v: v is None or _is_number(v), "a number"),
    "logging_steps": (lambda v: v is None or _is_number(v), "a number"),
    "eval_steps": (lambda v: v is None or _is_number(v), "a number"),
    "save_steps": (lambda v: v is None or _is_number(v), "a number"),
    "train_batch_size": (lambda v: v is None or type(v) is int, "an integer or null"),
    "num_train_epochs": (lambda v: v is None or _is_number(v), "a number"),
    "num_input_tokens_seen": (_is_number, "a number"),
    "total_flos": (_is_number, "a number"),
    "log_history": (lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v), "a list of objects"),
    "best_metric": (lambda v: v is None or _is_number(v), "a number or null"),
    "best_global_step": (lambda v: v is None or type(v) is int, "an integer or null"),
    "best_model_checkpoint": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "is_local_process_zero": (lambda v: isinstance(v, bool), "true or false"),
    "is_world_process_zero": (lambda v: isinstance(v, bool), "true or false"),
    "is_hyper_param_search": (lambda v: isinstance(v, bool), "true or false"),
    "trial_name": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "trial_params": (lambda v: v is None or isinstance(v, dict), "an object or null"),
    "stateful_callbacks": (_is_callback_states, 'an object of {"args": {...}, "attributes": {...}} per callback'),
}
"""The JSON type of every `TrainerState` field that transformers 5 reads back (a wrong one crashes the resume)."""


def _check_trainer_state(folder: str, state_keys: frozenset[str] | None) -> None:
    """`CheckpointDamage` unless `trainer_state.json` is a state transformers can resume from, of the folder's step."""
    path = os.path.join(folder, TRAINER_STATE_FILE)
    state = read_json(path)
    if not isinstance(state, dict):
        raise CheckpointDamage(f"{path} is not a JSON object")
    if "global_step" not in state:
        raise CheckpointDamage(f"{path} has no `global_step`")
    for key, (valid, expected) in _STATE_TYPES.items():
        if key in state and not valid(state[key]):
            raise CheckpointDamage(f"{path} has `{key}` = {_short(state[key])}, which is not {expected}")
    if state_keys is not None and (unknown := sorted(set(state) - state_keys)):
        raise CheckpointDamage(
            f"{path} has `{unknown[0]}`, which transformers' TrainerState does not have (loading the state would fail)"
        )
    step = state["global_step"]
    logged = [e["step"] for e in state.get("log_history", []) if type(e.get("step")) is int and e["step"] > step]
    if logged:
        raise CheckpointDamage(
            f"{path} has `global_step` {step} but a log entry for step {max(logged)}: the state was "
            "edited or is not this checkpoint's"
        )
    named = folder_step(folder)
    if named is not None and step != named:
        raise CheckpointDamage(
            f"{path} has `global_step` {step}, but its folder is named for step {named}: the state was "
            "edited, or checkpoint folders were renamed or swapped (a resume would continue step "
            f"{step}'s state as step {named}, or the reverse)"
        )


def _short(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_structure(folder: str, found: dict[str, int]) -> None:
    """The structural check of the module docstring (point 5); `CheckpointDamage` at the first bad file."""
    for relative, size in sorted(found.items()):
        path = os.path.join(folder, *relative.split("/"))
        suffix = os.path.splitext(relative)[1]
        if suffix not in (".safetensors", ".pt", ".pth", ".bin", ".json"):
            continue
        if size == 0:
            raise CheckpointDamage(f"{path} is empty")
        try:
            with os.fdopen(open_regular(path), "rb") as handle:
                if suffix == ".safetensors":
                    problem = _safetensors_problem(handle, size)
                elif suffix in (".pt", ".pth"):
                    with zipfile.ZipFile(handle) as archive:
                        archive.namelist()
                    problem = None
                elif suffix == ".json":
                    json.loads(handle.read().decode("utf-8"))
                    problem = None
                else:  # `.bin`: torch.save's zip or a legacy pickle, nothing to check but its size
                    problem = None
        except (OSError, ValueError, zipfile.BadZipFile, RecursionError) as exc:
            raise CheckpointDamage(f"{path} is damaged ({type(exc).__name__}: {exc})") from None
        if problem is not None:
            raise CheckpointDamage(f"{path} {problem}")


# bytes per element of safetensors' dtypes (sub-byte and unknown dtypes: no size check, only the offsets)
_SAFETENSORS_ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}


def _safetensors_problem(handle: BinaryIO, size: int) -> str | None:
    """Whether a safetensors file (open, at its start) holds its whole header and exactly the data bytes that the
    header describes, as safetensors itself reads them: the tensors' byte ranges follow each other from 0 with no
    hole or overlap, and each is as long as its shape and dtype say (a header rewritten with an entry removed or a
    shape changed, behind a manifest rewritten to fit, fails here instead of inside the load)."""
    prefix = handle.read(8)
    if len(prefix) < 8:
        return f"is truncated ({size} bytes, shorter than the 8-byte header length)"
    (length,) = struct.unpack("<Q", prefix)
    if length > min(size - 8, _MAX_SAFETENSORS_HEADER):
        return f"is truncated ({size} bytes; its header alone says {length + 8})"
    header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        return "has a header that is not a JSON object"
    ranges: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
            return f"has no valid data_offsets for tensor {name!r}"
        shape = entry.get("shape")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            return f"has no valid shape for tensor {name!r}"
        itemsize = _SAFETENSORS_ITEMSIZE.get(entry.get("dtype"))
        if itemsize is not None:
            count = math.prod(shape)
            if offsets[1] - offsets[0] != count * itemsize:
                return (f"has tensor {name!r} of {offsets[1] - offsets[0]} bytes where its shape {shape} and dtype "
                        f"{entry.get('dtype')} need {count * itemsize}")
        ranges.append((offsets[0], offsets[1], name))
    end = 0
    for start, stop, name in sorted(ranges):
        if start != end or stop < start:
            return (f"has tensor {name!r} at bytes {start}..{stop} where the previous one ends at {end} (a hole or "
                    "an overlap in its data)")
        end = stop
    expected = 8 + length + end
    if size != expected:
        return f"has {size} bytes, its header describes {expected} (truncated or padded)"
    return None


# ------------------------------------------------------------------------------------------------ choosing one


def choose_checkpoint(
    output_dir: str | os.PathLike[str], spec: CheckpointSpec | None = None
) -> tuple[str | None, list[str]]:
    """[`last_complete_checkpoint`], also returning why each newer folder was skipped (one sentence each)."""
    output_dir = os.fspath(output_dir)
    try:
        names = os.listdir(output_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None, []
    candidates: list[tuple[int, str]] = []
    partial_steps: list[int] = []
    for name in names:
        if not os.path.isdir(os.path.join(output_dir, name)):
            continue
        if match := CHECKPOINT_RE.match(name):
            candidates.append((int(match.group(1)), name))
        elif (match := REPLACED_RE.match(name)) and f"{CHECKPOINT_PREFIX}-{match.group(1)}" not in names:
            candidates.append((int(match.group(1)), name))
        elif match := PARTIAL_RE.match(name):
            partial_steps.append(int(match.group(1)))
    found: tuple[int, str] | None = None
    skipped: list[str] = []
    for step, name in sorted(candidates, reverse=True):
        path = os.path.join(output_dir, name)
        state = os.path.join(path, TRAINER_STATE_FILE)
        if not os.path.lexists(state) or os.path.isdir(state):  # an interrupted save, or no checkpoint
            skipped.append(f"{path} is incomplete (no {TRAINER_STATE_FILE}: its save was interrupted)")
            warnings.warn(
                f"Skipping the incomplete checkpoint {path} (no readable {TRAINER_STATE_FILE}: its save was "
                "interrupted); looking for an older one.",
                IncompleteCheckpointWarning,
                stacklevel=3,
            )
            continue
        problem = checkpoint_damage(path, spec)
        if problem is None:
            found = (step, path)
            break
        skipped.append(problem)
        warnings.warn(
            f"Skipping the damaged checkpoint {path}: {problem}. Falling back to an older checkpoint; the damaged "
            "one is left in place (delete it yourself once you no longer need it).",
            CorruptCheckpointWarning,
            stacklevel=3,
        )
    for step in sorted(partial_steps):
        if found is None or step > found[0]:
            warnings.warn(
                f"Ignoring {os.path.join(output_dir, f'{PARTIAL_PREFIX}{CHECKPOINT_PREFIX}-{step}')}: the save of "
                f"step {step} was interrupted before it completed.",
                IncompleteCheckpointWarning,
                stacklevel=3,
            )
    return (None if found is None else found[1]), skipped


def last_complete_checkpoint(output_dir: str | os.PathLike[str], spec: CheckpointSpec | None = None) -> str | None:
    """The newest complete and intact checkpoint of a run folder; the newer ones are skipped with a warning each.

    Candidates are the `checkpoint-<step>` folders, newest step first, and a `tmp-checkpoint-<step>-replaced` folder
    whose `checkpoint-<step>` is missing (a crash between the two renames of a same-step re-save). Folders left by an
    interrupted save (`tmp-checkpoint-<step>`) are never used. A complete candidate is judged before it is chosen
    ([`checkpoint_problem`] with checksums and `spec`); a damaged one is skipped with a [`CorruptCheckpointWarning`]
    naming the bad file and the problem, and kept. Judging never raises, so damage of any kind falls back.

    Args:
        output_dir: The run's `output_dir`.
        spec: What the resuming trainer needs (default: a `trainer_state.json`).

    Returns:
        The path of the newest complete checkpoint, or `None` when there is none (or no such folder).

    Warns:
        IncompleteCheckpointWarning: For every newer checkpoint folder that is skipped because it is incomplete, and
            for every interrupted save newer than the checkpoint returned.
        CorruptCheckpointWarning: For every newer complete checkpoint skipped because [`checkpoint_problem`] found a
            problem.
    """
    return choose_checkpoint(output_dir, spec)[0]


def keep_damaged(path: str, problem: str | None = None) -> str:
    """Move a damaged checkpoint aside to `<path>-corrupt` (or `-corrupt-2`, ...), with a warning naming `problem`
    (default: [`checkpoint_problem`] without checksums); returns the new path. Used where a checkpoint folder of the
    same step is about to be written: the damaged one is never deleted."""
    problem = problem or checkpoint_problem(path, checksums=False)
    target, count = f"{path}{CORRUPT_SUFFIX}", 1
    while os.path.lexists(target):
        count += 1
        target = f"{path}{CORRUPT_SUFFIX}-{count}"
    os.rename(path, target)
    warnings.warn(
        f"{path} is damaged ({problem}); it is kept as {target} and its step is saved again.",
        CorruptCheckpointWarning,
        stacklevel=3,
    )
    return target
