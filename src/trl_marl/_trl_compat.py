"""The one module of trl-marl that touches TRL's and transformers' internals.

TRL moves fast and most of its trainer machinery is private. Everything trl-marl borrows from it (and every
private `transformers.Trainer` hook it overrides) goes through this module, so a TRL upgrade is checked and fixed
in one place. Importing it outside the tested TRL range fails at once with a message that says what to install.
"""

from __future__ import annotations

import os
from typing import Any

from packaging.version import Version

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
    "TeamCheckpointMixin",
    "generate_model_card",
    "get_comet_experiment_url",
    "nanstd",
    "grpo_config_field_names",
]


def grpo_config_field_names() -> set[str]:
    """Names of the fields that `trl.GRPOConfig` adds on top of `transformers.TrainingArguments`."""
    from dataclasses import fields

    from transformers import TrainingArguments

    base = {f.name for f in fields(TrainingArguments)}
    return {f.name for f in fields(GRPOConfig)} - base


class TeamCheckpointMixin:
    """Overrides of `transformers.Trainer`'s private save/load hooks so that a checkpoint holds a whole team.

    `Trainer` saves a model that is not a `PreTrainedModel` as one flat state dict, and restores it the same way.
    An [`~trl_marl.AgentTeam`] is saved instead as `agent_<i>/` folders (a PEFT adapter or a full model each, with
    its tokenizer) plus `team_config.json`, so every agent of a checkpoint can be loaded on its own with
    `from_pretrained`, and `resume_from_checkpoint` reloads the agents in place.
    """

    def _save(self, output_dir: str | None = None, state_dict: dict[str, Any] | None = None) -> None:  # type: ignore[override]
        output_dir = output_dir if output_dir is not None else self.args.output_dir  # type: ignore[attr-defined]
        if not self.args.should_save:  # type: ignore[attr-defined]
            return
        os.makedirs(output_dir, exist_ok=True)
        team = _team_of(self.accelerator.unwrap_model(self.model))  # type: ignore[attr-defined]
        team.save_pretrained(output_dir)
        self.create_model_card(output_dir=output_dir)  # type: ignore[attr-defined]
        import torch
        from transformers.trainer import TRAINING_ARGS_NAME

        torch.save(self.args, os.path.join(output_dir, TRAINING_ARGS_NAME))  # type: ignore[attr-defined]

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:  # type: ignore[override]
        module = self.accelerator.unwrap_model(model if model is not None else self.model)  # type: ignore[attr-defined]
        _team_of(module).load_weights_(resume_from_checkpoint)


def _team_of(module: Any) -> Any:
    """The `AgentTeam` inside a trainer's model (the model itself, or a wrapper's `team` attribute)."""
    return getattr(module, "team", module)
