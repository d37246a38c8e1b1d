"""The one module of trl-marl that touches TRL's and transformers' internals.

TRL moves fast and most of its trainer machinery is private. Everything trl-marl borrows from it (and every
private `transformers.Trainer` hook it overrides) goes through this module, so a TRL upgrade is checked and fixed
in one place. Importing it outside the tested TRL range fails at once with a message that says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from typing import TYPE_CHECKING, Any, cast

from packaging.version import Version

from .utils.checkpoint_checks import (
    agent_weight_files,
    checkpoint_damage,
    checkpoint_problem,
    choose_checkpoint,
    keep_damaged,
    last_complete_checkpoint,
)
from .utils.checkpoint_files import (
    CHECKPOINT_PREFIX,
    PARTIAL_PREFIX,
    REPLACED_SUFFIX,
    TEAM_CONFIG_FILE,
    TRAINER_STATE_FILE,
    CheckpointSpec,
    CorruptCheckpointWarning,
    IncompleteCheckpointWarning,
    checkpoint_size_line,
    finished_run_problem,
    is_complete_checkpoint,
    write_manifest,
)
from .utils.checkpoint_files import CHECKPOINT_RE as _CHECKPOINT_RE
from .utils.checkpoint_files import PARTIAL_RE as _PARTIAL_RE
from .utils.checkpoint_files import REPLACED_RE as _REPLACED_RE
from .utils.checkpoint_files import fsync_dir as _fsync_dir
from .utils.checkpoint_files import fsync_tree as _fsync_tree
from .utils.quiet import announcer

TESTED_TRL_RANGE = (Version("1.16.0"), Version("1.17.0"))
"""trl-marl is tested against TRL versions in [low, high)."""


def _check_trl_version() -> str:
    try:
        import trl
    except ImportError as exc:  # pragma: no cover - trl is a hard dependency
        raise ImportError("trl-marl needs TRL: `pip install 'trl>=1.16,<1.17'`.") from exc
    version = Version(trl.__version__.split("+")[0])
    low, high = TESTED_TRL_RANGE
    if not (low <= version < high) and os.environ.get("TRL_MARL_SKIP_VERSION_CHECK") != "1":
        raise ImportError(
            f"trl-marl {_own_version()} is tested with TRL >={low},<{high} but TRL {trl.__version__} is installed. "
            f"Install a tested version with `pip install 'trl>={low},<{high}'`, or set "
            "TRL_MARL_SKIP_VERSION_CHECK=1 to try this one at your own risk."
        )
    return trl.__version__


def _own_version() -> str:
    try:
        from importlib.metadata import version

        return version("trl-marl")
    except Exception:  # noqa: BLE001 - not installed (running from a source tree)
        return "(source)"


TRL_VERSION = _check_trl_version()

# Public TRL API re-exported for the rest of the package (kept here so one file lists what we rely on).
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser  # noqa: E402
from trl.models.utils import add_hooks as add_zero3_hooks  # noqa: E402
from trl.models.utils import remove_hooks as remove_zero3_hooks  # noqa: E402
from trl.trainer.base_config import _BaseConfig as TRLBaseConfig  # noqa: E402
from trl.trainer.base_trainer import _BaseTrainer as TRLBaseTrainer  # noqa: E402
from trl.trainer.utils import generate_model_card, get_comet_experiment_url, nanstd  # noqa: E402

__all__ = [
    "TRL_VERSION",
    "GRPOConfig",
    "GRPOTrainer",
    "ModelConfig",
    "TrlParser",
    "TRLBaseConfig",
    "TRLBaseTrainer",
    "CheckpointSpec",
    "CorruptCheckpointWarning",
    "IncompleteCheckpointWarning",
    "TeamCheckpointMixin",
    "checkpoint_problem",
    "is_complete_checkpoint",
    "last_complete_checkpoint",
    "generate_model_card",
    "get_comet_experiment_url",
    "nanstd",
    "grpo_config_field_names",
    "add_zero3_hooks",
    "remove_zero3_hooks",
]


def grpo_config_field_names() -> set[str]:
    """Names of the fields that `trl.GRPOConfig` adds on top of `transformers.TrainingArguments`."""
    from dataclasses import fields

    from transformers import TrainingArguments

    base = {f.name for f in fields(TrainingArguments)}
    return {f.name for f in fields(GRPOConfig)} - base


# ---------------------------------------------------------------------------------------------------------------
# Checkpoints: atomic saves, rotation that never loses the last complete checkpoint, resume from a complete one
# ---------------------------------------------------------------------------------------------------------------

# The names, manifests and checks of checkpoint folders are `utils.checkpoint_files` and `utils.checkpoint_checks`
# (standard library only); what follows hooks them into `transformers.Trainer`.


def _remove_tree(path: str) -> None:
    """Deletes a folder: first renamed to a `tmp-` name (atomic), so a crash mid-way leaves no half checkpoint."""
    parent, name = os.path.split(path)
    doomed = os.path.join(parent, f"{PARTIAL_PREFIX}{name}-deleted")
    try:
        os.rename(path, doomed)
    except OSError:
        doomed = path
    shutil.rmtree(doomed, ignore_errors=True)


def _publish_checkpoint(partial_dir: str, final_dir: str) -> None:
    """Makes a fully written checkpoint visible under its final name: fsync, then rename (atomic on POSIX).

    A complete checkpoint already under that name (a second save at the same step) is moved aside first and deleted
    after the rename; between the two renames it stays complete under `tmp-checkpoint-<step>-replaced`, which
    [`last_complete_checkpoint`] accepts.
    """
    write_manifest(partial_dir)  # last: every other file of every process is written
    _fsync_tree(partial_dir)
    run_dir = os.path.dirname(final_dir)
    replaced = None
    if os.path.exists(final_dir) and (problem := checkpoint_problem(final_dir, checksums=False)) is not None:
        keep_damaged(final_dir, problem)  # a damaged checkpoint is never deleted
    if os.path.exists(final_dir):
        replaced = f"{os.path.join(run_dir, PARTIAL_PREFIX + os.path.basename(final_dir))}{REPLACED_SUFFIX}"
        shutil.rmtree(replaced, ignore_errors=True)
        os.rename(final_dir, replaced)
    os.rename(partial_dir, final_dir)
    _fsync_dir(run_dir)
    if replaced is not None:
        shutil.rmtree(replaced, ignore_errors=True)


def _remove_interrupted_saves(run_dir: str) -> None:
    """Deletes the `tmp-checkpoint-<step>` folders of interrupted saves (never a `-replaced` one: it may be the only
    complete copy of its step until the next checkpoint is published)."""
    for name in os.listdir(run_dir):
        if _PARTIAL_RE.match(name) or (name.startswith(PARTIAL_PREFIX) and name.endswith("-deleted")):
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)


def _rotate_complete_checkpoints(run_dir: str, save_total_limit: int | None, keep: set[str]) -> None:
    """Deletes the oldest complete checkpoints beyond `save_total_limit` (transformers' rule, by step number).

    Runs only after the newest checkpoint is published, so the last complete checkpoint is never deleted before a
    newer complete one exists. Incomplete `checkpoint-<step>` folders, and damaged ones (a file whose size differs
    from the manifest's, or structurally broken: [`checkpoint_problem`] without checksums), are neither counted nor
    deleted, so a damaged checkpoint never takes the place of a good one.

    Args:
        run_dir: The folder holding the checkpoints.
        save_total_limit: Checkpoints to keep (`None` or <= 0: keep all).
        keep: Paths never deleted (the newest and the best checkpoint).
    """
    for name in os.listdir(run_dir):
        if _REPLACED_RE.match(name):  # a newer complete checkpoint exists now
            shutil.rmtree(os.path.join(run_dir, name), ignore_errors=True)
    if not save_total_limit or save_total_limit <= 0:
        return
    steps = sorted(
        (int(match.group(1)), os.path.join(run_dir, name))
        for name in os.listdir(run_dir)
        if (match := _CHECKPOINT_RE.match(name)) and is_complete_checkpoint(os.path.join(run_dir, name))
        and checkpoint_problem(os.path.join(run_dir, name), checksums=False) is None
    )
    keep = {os.path.normpath(path) for path in keep}
    removable = [path for _, path in steps if os.path.normpath(path) not in keep]
    excess = len(steps) - max(save_total_limit, len(steps) - len(removable))
    for path in removable[: max(excess, 0)]:
        _remove_tree(path)


if TYPE_CHECKING:  # the trainer the mixin is mixed into (`TeamTrainer`): what its methods read and call
    _MixedInto = TRLBaseTrainer
else:
    _MixedInto = object


class TeamCheckpointMixin(_MixedInto):
    """Overrides of `transformers.Trainer`'s private save/load hooks so that a checkpoint holds a whole team.

    `Trainer` saves a model that is not a `PreTrainedModel` as one flat state dict, and restores it the same way.
    An [`~trl_marl.AgentTeam`] is saved instead as `agent_<i>/` folders (a PEFT adapter or a full model each, with
    its tokenizer) plus `team_config.json`, so every agent of a checkpoint can be loaded on its own with
    `from_pretrained`, and `resume_from_checkpoint` reloads the agents in place.

    Checkpoints survive a crash or a kill at any moment (transformers 5.23's `_save_checkpoint` writes straight into
    `checkpoint-<step>` and rotates by deleting folders, so a kill during a save leaves a partial newest folder that
    `resume_from_checkpoint=True` then picks and fails on):

    - every process writes into `tmp-checkpoint-<step>`; when all of them are done, the main process fsyncs it and
      renames it to `checkpoint-<step>` (other processes wait for the rename);
    - `save_total_limit` deletes old checkpoints only after that rename, and counts complete checkpoints only;
    - the last file written is a manifest of every file's size and SHA-256 (`utils.checkpoint_files`);
    - `train(resume_from_checkpoint=True)` resumes from the newest *complete* checkpoint that passes every check of
      `utils.checkpoint_checks` for this trainer ([`checkpoint_spec`]: its manifest, its files, its state and its
      step), warning about every folder it skips and why (a damaged one is kept, never deleted); an explicit path to
      an incomplete or damaged checkpoint is a clear `ValueError` naming the bad file and the problem.
    """

    resumable = True
    """Whether `train(resume_from_checkpoint=...)` can resume this trainer: only then do its checkpoints hold the
    optimizer, scheduler and random states (a trainer that cannot resume saves its weights alone)."""

    def checkpoint_spec(self) -> CheckpointSpec:
        """What this trainer needs of a checkpoint to resume from it exactly, beyond its manifest.

        The trainer state (with the fields of transformers' `TrainerState` only), the team layout and every agent's
        weights; unless `save_only_model`, also the optimizer (`optimizer.pt`; `optimizer.bin` under FSDP; DeepSpeed
        keeps it in its own files, covered by the manifest only), the scheduler (not under DeepSpeed), the RNG state
        (`rng_state.pth`, or `rng_state_0.pth` of a run of several processes) and the trainer's own state files
        ([`extra_state_files`]). transformers resumes without an optimizer, a scheduler or an RNG state it does not
        find, silently: an empty optimizer and a learning rate back at its start.
        """
        from dataclasses import fields

        from transformers import TrainerState

        args = self.args
        team = _team_of(self.accelerator.unwrap_model(self.model))
        required: list[tuple[str, ...]] = [(TRAINER_STATE_FILE,), (TEAM_CONFIG_FILE,)]
        required += [agent_weight_files(a, team.agent_adapter[a] is not None) for a in range(team.num_agents)]
        if not args.save_only_model and self.resumable:
            if not getattr(self, "is_deepspeed_enabled", False):
                fsdp = getattr(self, "is_fsdp_enabled", False)
                required += [("optimizer.bin", "optimizer.pt") if fsdp else ("optimizer.pt",), ("scheduler.pt",)]
            required += [("rng_state.pth", "rng_state_0.pth"), *((name,) for name in self.extra_state_files())]
        return CheckpointSpec(tuple(required), frozenset(field.name for field in fields(TrainerState)))

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
        **kwargs: Any,
    ) -> Any:
        """`Trainer.train`, resuming from the newest good checkpoint when `resume_from_checkpoint=True`.

        Raises:
            ValueError: See [`resume_checkpoint`].
        """
        return super().train(
            resume_from_checkpoint=self.resume_checkpoint(resume_from_checkpoint), trial=trial,
            ignore_keys_for_eval=ignore_keys_for_eval, **kwargs,
        )

    def resume_checkpoint(self, resume_from_checkpoint: str | os.PathLike[str] | bool | None) -> str | None:
        """The checkpoint `train(resume_from_checkpoint=...)` resumes from, checked: the newest good checkpoint of
        `output_dir` for `True`, the given folder for a path, None for no resume (`None` or `False`).

        Raises:
            ValueError: `True` and `output_dir` holds no good checkpoint (the message lists why each was skipped), a
                given checkpoint path is incomplete (no `trainer_state.json`) or damaged (`utils.checkpoint_checks`:
                the message names the file and the problem), or the checkpoint is already at `max_steps` (the run is
                finished: transformers would train one step past it).
        """
        if not resume_from_checkpoint:
            return None
        if isinstance(resume_from_checkpoint, bool):
            output_dir = self.args.output_dir
            if output_dir is None:  # TrainingArguments defaults it ("trainer_output")
                raise ValueError("`resume_from_checkpoint=True` needs the `output_dir` that holds the checkpoints.")
            chosen, skipped = choose_checkpoint(output_dir, self.checkpoint_spec())
            if chosen is None:
                why = "".join(f"\n- {reason}" for reason in skipped)
                raise ValueError(f"No complete checkpoint to resume from in the output directory ({output_dir})."
                                 + (f" Skipped:{why}" if why else ""))
            folder = chosen
        else:
            folder = os.fspath(resume_from_checkpoint)
            state = os.path.join(folder, TRAINER_STATE_FILE)
            if not os.path.lexists(state) or os.path.isdir(state):
                problem = (f"it is not a complete checkpoint (no readable {TRAINER_STATE_FILE}; its save was "
                           "interrupted or it is not a checkpoint folder)")
            elif (damage := checkpoint_damage(folder, self.checkpoint_spec())) is not None:
                problem = f"it is damaged: {damage}"
            else:
                problem = None
            if problem is not None:
                with warnings.catch_warnings():  # only its name is wanted here
                    warnings.simplefilter("ignore", IncompleteCheckpointWarning)
                    newest = last_complete_checkpoint(os.path.dirname(os.path.normpath(folder)),
                                                      self.checkpoint_spec())
                raise ValueError(
                    f"Cannot resume from {resume_from_checkpoint}: {problem}. "
                    + (f"The newest complete checkpoint next to it is {newest}." if newest else "")
                )
        finished = finished_run_problem(folder, self.args.max_steps, type(self.args).__name__)
        if finished:
            raise ValueError(finished)
        return folder

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """Saves a checkpoint atomically (transformers 5.23's `_save_checkpoint`, written elsewhere then renamed)."""
        from transformers.trainer import TRAINER_STATE_NAME, ExportableState, SaveStrategy

        args = self.args
        state = self.state
        accelerator = self.accelerator
        name = f"{CHECKPOINT_PREFIX}-{state.global_step}"
        if self.hp_search_backend is None and trial is None:
            self.store_flos()
        run_dir = self._get_output_dir(trial=trial)
        final_dir = os.path.join(run_dir, name)
        partial_dir = os.path.join(run_dir, PARTIAL_PREFIX + name)
        if args.should_save:
            os.makedirs(run_dir, exist_ok=True)
            _remove_interrupted_saves(run_dir)
            os.makedirs(partial_dir)
        accelerator.wait_for_everyone()  # nobody writes into the folder before it is fresh

        self.save_model(partial_dir, _internal_call=True)
        if (
            args.save_strategy in (SaveStrategy.STEPS, SaveStrategy.EPOCH, SaveStrategy.BEST)
            and state.best_global_step
        ):
            best_dir = os.path.join(run_dir, f"{CHECKPOINT_PREFIX}-{state.best_global_step}")
            if state.best_global_step == state.global_step or os.path.exists(best_dir):
                state.best_model_checkpoint = best_dir
        if not args.save_only_model and self.resumable:  # what a resume needs; nothing for a trainer that cannot
            self._save_optimizer_and_scheduler(partial_dir)
            self._save_scaler(partial_dir)
            self._save_rng_state(partial_dir)
            if args.should_save:
                self.save_extra_state(partial_dir)
        if args.should_save:
            callbacks = self.callback_handler.callbacks + [self.control]
            # (a dict by callback name once `TrainerState.__post_init__` has run; transformers types the field as
            # the list of callbacks it is built from)
            stateful = cast("dict[str, Any]", state.stateful_callbacks)
            for callback in [c for c in callbacks if isinstance(c, ExportableState)]:
                callback_name = callback.__class__.__name__
                if isinstance(stateful[callback_name], list):
                    stateful[callback_name].append(callback.state())
                else:
                    stateful[callback_name] = callback.state()
            state.save_to_json(os.path.join(partial_dir, TRAINER_STATE_NAME))  # last: it marks completeness

        accelerator.wait_for_everyone()  # every process has written its part
        if args.should_save:
            _publish_checkpoint(partial_dir, final_dir)
        accelerator.wait_for_everyone()  # nobody goes on before the checkpoint has its final name

        if args.push_to_hub:
            self._push_from_checkpoint(final_dir)
        if args.should_save:
            keep = {final_dir} | ({state.best_model_checkpoint} if state.best_model_checkpoint else set())
            _rotate_complete_checkpoints(run_dir, args.save_total_limit, keep)
            announcer("trl_marl.checkpoints").info("%s", checkpoint_size_line(final_dir, args.save_total_limit))

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        if output_dir is None:  # TrainingArguments defaults it ("trainer_output")
            raise ValueError("No `output_dir` to save the team in.")
        os.makedirs(output_dir, exist_ok=True)
        root = self.accelerator.unwrap_model(self.model)
        team = _team_of(root)
        from .team import is_partitioned

        if not state_dict and is_partitioned(team):  # a ZeRO-3 engine that did not gather the weights for saving
            raise RuntimeError("DeepSpeed ZeRO-3 did not gather the team's weights for saving: set "
                               "`zero3_save_16bit_model: true` in the accelerate config.")
        # under FSDP `Trainer.save_model` passes the full weights that it gathered from the shards (keys of the root)
        team.save_pretrained(output_dir, state_dict=_team_state_dict(root, state_dict) if state_dict else None)
        # a checkpoint is written under `tmp-checkpoint-<step>`: its card is titled (and loads) `checkpoint-<step>`
        folder = os.path.basename(os.path.normpath(output_dir))
        published = folder[len(PARTIAL_PREFIX):] if _PARTIAL_RE.match(folder) else None
        # (the trainers' own `create_model_card` takes the folder; TRL's base class does not)
        self.create_model_card(output_dir=output_dir, model_name=published)  # type: ignore[call-arg]
        import torch
        from transformers.trainer import TRAINING_ARGS_NAME

        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        module = self.accelerator.unwrap_model(model if model is not None else self.model)
        team = _team_of(module)
        if getattr(self, "is_fsdp_enabled", False):  # sharded: every process loads the full team, keeps its shards
            saved = type(team).from_pretrained(resume_from_checkpoint).state_dict()
            prefix = "team." if team is not module else ""
            _load_full_state_dict(module, {prefix + key: value for key, value in saved.items()})
        else:
            team.load_weights_(resume_from_checkpoint)
        self.load_extra_state(resume_from_checkpoint)

    def save_extra_state(self, checkpoint_dir: str) -> None:
        """Write a trainer's own training state into a checkpoint, beside the optimizer's (main process; not with
        `save_only_model`). Default: nothing."""

    def load_extra_state(self, checkpoint_dir: str) -> None:
        """Restore what `save_extra_state` wrote, when resuming from `checkpoint_dir`. Default: nothing."""

    def extra_state_files(self) -> list[str]:
        """The files `save_extra_state` writes with this trainer's settings (relative to the checkpoint): a resume
        requires them ([`checkpoint_spec`]). Default: none."""
        return []


def _team_of(module: Any) -> Any:
    """The `AgentTeam` inside a trainer's model (the model itself, or a wrapper's `team` attribute)."""
    return getattr(module, "team", module)


def _load_full_state_dict(root: Any, state_dict: dict[str, Any]) -> None:
    """Load a full (unsharded) state dict, keyed as `root.state_dict()`, into an FSDP2-sharded `root`: every process
    passes the same full tensors and keeps its own shards."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    result = set_model_state_dict(root, state_dict, options=StateDictOptions(full_state_dict=True, strict=False))
    missing = [key for key in result.missing_keys if key in state_dict]
    if result.unexpected_keys or missing:
        raise KeyError(f"The checkpoint does not fit the sharded team: unexpected {sorted(result.unexpected_keys)}, "
                       f"not loaded {missing}.")


def _team_state_dict(root: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
    """The team's entries of a state dict of the trainer's model (the team itself, or a wrapper with `team.`)."""
    if _team_of(root) is root:
        return state_dict
    return {key[len("team."):]: value for key, value in state_dict.items() if key.startswith("team.")}


class LaunchWarning(UserWarning):
    """`accelerate launch` started fewer processes than its command line asked for."""


def processes_dropped_by_launcher(parent_pid: int | None = None) -> int | None:
    """The process count `accelerate launch` was asked for, when it started this script as a single process instead.

    On a machine without several GPUs, `accelerate launch --num_processes 2 script.py` runs *one* process unless
    `--multi_gpu` is given (then the CPU processes talk over gloo), and it passes the requested count on to nobody;
    so does a config file with `use_cpu: true` (the count is then read from the file).
    This reads the launcher's command line (Linux `/proc/<parent>/cmdline`) when this process is alone
    (`WORLD_SIZE` unset) and was started by accelerate's simple launcher (`ACCELERATE_USE_CPU` set). Returns None
    when nothing was dropped or nothing can be told.
    """
    if os.environ.get("WORLD_SIZE") or "ACCELERATE_USE_CPU" not in os.environ:
        return None
    try:
        with open(f"/proc/{parent_pid or os.getppid()}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not any(a == "launch" or a.endswith((".launch", "/launch", "-launch")) for a in argv):
        return None
    if any(a in ("--multi_gpu", "--multi-gpu", "--use_fsdp", "--use-fsdp", "--use_deepspeed", "--use-deepspeed")
           for a in argv):
        return None
    requested = _flag_value(argv, "num_processes")
    config_file = _flag_value(argv, "config_file")
    if requested is None and (config_file is not None or "--cpu" not in argv):
        # the config file's count (`--config_file`, else accelerate's default config, which `--cpu` ignores)
        requested = _config_file_num_processes(config_file)
    try:
        count = int(requested) if requested is not None else 1
    except ValueError:
        return None
    return count if count > 1 else None


def _flag_value(argv: list[str], name: str) -> str | None:
    """The value of `--name` (or `--name-with-dashes`) on a command line, the last one given."""
    value = None
    for i, a in enumerate(argv):
        for flag in (f"--{name}", f"--{name.replace('_', '-')}"):
            if a == flag and i + 1 < len(argv):
                value = argv[i + 1]
            elif a.startswith(flag + "="):
                value = a.split("=", 1)[1]
    return value


def _config_file_num_processes(path: str | None) -> Any:
    """`num_processes` of an accelerate config file (default: accelerate's default config, when there is one)."""
    try:
        if path is None:
            from accelerate.commands.config import default_config_file

            path = default_config_file
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            if path.endswith(".json"):
                return json.load(f).get("num_processes")
            import yaml

            return (yaml.safe_load(f) or {}).get("num_processes")
    except Exception:  # noqa: BLE001 - an unreadable config says nothing about dropped processes
        return None


def warn_if_launcher_dropped_processes() -> None:
    """Say so when `accelerate launch --num_processes N` started this script alone (see the function above)."""
    requested = processes_dropped_by_launcher()
    if requested:
        warnings.warn(
            f"`accelerate launch` was asked for {requested} processes but started this script as a single process: "
            "without several GPUs accelerate runs one process unless `--multi_gpu` is given. This run trains on one "
            f"process, with 1/{requested} of the intended global batch. For {requested} CPU processes (gloo), run "
            f"`accelerate launch --multi_gpu --num_processes {requested} ...` (with a config file: `use_cpu: false`, "
            "as in examples/accelerate_configs/ddp.yaml); for one, drop `--num_processes`.",
            LaunchWarning,
            stacklevel=3,
        )


def enable_fsdp_on_cpu_processes(state: Any, args: Any) -> bool:
    """Turn FSDP on for CPU processes (gloo) that asked for it; returns whether it did (the trainer then sets its
    `is_fsdp_enabled`).

    accelerate (1.15) enables FSDP only for processes on GPUs and other accelerators: for CPU processes
    (`DistributedType.MULTI_CPU`) its `AcceleratorState` drops the FSDP plugin and trains with DDP, without a word.
    FSDP2 itself runs on CPU processes (gloo has all-gather and reduce-scatter), and the rest of accelerate's FSDP2
    path (`fsdp2_prepare_model`, gradient clipping, full state dicts) works there unchanged, so this sets the shared
    state that accelerate would have set on a GPU: the distributed type, the plugin (built from the trainer config's
    `fsdp_config`, else from `accelerate launch`'s environment) and its mixed precision. Must run right after the
    trainer's `Accelerator` is created, before anything is prepared.

    Args:
        state: The trainer accelerator's `AcceleratorState`.
        args: The trainer's config (its `fsdp_plugin_args`).
    """
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

    if state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin_args = getattr(args, "fsdp_plugin_args", None)
    plugin = FullyShardedDataParallelPlugin(**plugin_args) if plugin_args is not None else (
        FullyShardedDataParallelPlugin())
    if state.mixed_precision != "no":
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return True
