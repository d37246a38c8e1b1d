"""Deprecated: the real model moved to `trl_marl.offline_models.smollm2` (it is no toy).

Every name of this module (`make_real_model`, `REAL_MODEL_NAME`, ...) still works, with a `FutureWarning` that
names its new home, and is the same object as there. The shim imports only `offline_models`, a package of its own
layer (docs/architecture.md).
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import offline_models as _offline_models
from ..offline_models import smollm2 as _smollm2

NEW_HOME = "trl_marl.offline_models"


def moved(name: str, old: str) -> Any:
    """The object `name` of `trl_marl.offline_models.smollm2`, after a `FutureWarning` that `old.name` moved there.

    Args:
        name: A public name of `trl_marl.offline_models.smollm2`.
        old: The module it was imported from (`"trl_marl.toy"` or `"trl_marl.toy.real"`).

    Raises:
        AttributeError: If the module has no such name.
    """
    if name.startswith("__") or not hasattr(_smollm2, name):
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    home = NEW_HOME if name in _offline_models.__all__ else f"{NEW_HOME}.smollm2"
    warnings.warn(f"`{old}.{name}` is deprecated: the offline models moved to `{NEW_HOME}`; import `{home}.{name}` "
                  "(the same object).", FutureWarning, stacklevel=3)
    return getattr(_smollm2, name)


def __getattr__(name: str) -> Any:
    return moved(name, __name__)


def __dir__() -> list[str]:
    return sorted(name for name in vars(_smollm2) if not name.startswith("__"))
