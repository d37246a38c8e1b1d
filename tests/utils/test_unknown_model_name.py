"""A model name that cannot load offline fails at once, without a Hub request, listing the offline names (issue 39:
`"smollm2-135m"` cost 47 s of Hub retries and ended in a generic `OSError`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers

from trl_marl import AgentTeam
from trl_marl.utils import model_names
from trl_marl.utils.inputs import check_model_path
from trl_marl.utils.model_names import UnknownModelNameError, check_model_name
from trl_marl.utils.tokens import load_tokenizer


@pytest.fixture
def no_hub_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers' loaders fail the test when reached: the name check must come first."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"transformers was asked to load {args[:1]}: the Hub would have been retried")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub switched on but not reachable: its endpoint is a closed local port."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    model_names.hub_reachable.cache_clear()
    yield
    model_names.hub_reachable.cache_clear()


def test_a_misspelled_offline_name_says_which_names_exist(offline, no_hub_call) -> None:
    with pytest.raises(UnknownModelNameError) as error:
        AgentTeam.build("smollm2-135m", num_agents=2)
    message = str(error.value)
    assert "`model` (`model_name_or_path`) 'smollm2-135m' is not a local folder" in message
    assert "HF_HUB_OFFLINE=1" in message and "Did you mean 'smollm2-135m-instruct'?" in message
    for name in ("'toy'", "'toy:addition'", "'toy:debate'", "'smollm2-135m-instruct'"):
        assert name in message
    assert isinstance(error.value, OSError)  # as transformers' own "not found"


@pytest.mark.parametrize("name, suggestion", [("smolm2-135m-instruct", "smollm2-135m-instruct"), ("toi", "toy"),
                                              ("org/no-such-model", None)])
def test_the_closest_name_or_none(offline, name: str, suggestion: str | None) -> None:
    with pytest.raises(UnknownModelNameError) as error:
        check_model_name(name)
    if suggestion is None:
        assert "Did you mean" not in str(error.value)
    else:
        assert f"Did you mean {suggestion!r}?" in str(error.value)


def test_an_unreachable_hub_is_said_without_retries(unreachable, no_hub_call) -> None:
    with pytest.raises(UnknownModelNameError, match=r"the Hub is unreachable from this machine \(http://127.0.0.1:1\)"):
        load_tokenizer("smollm2-135m")
    with pytest.raises(UnknownModelNameError, match="`model_name_or_path` 'Qwen/Qwen2.5-0.5B-Instruct'"):
        check_model_path("Qwen/Qwen2.5-0.5B-Instruct", "`model_name_or_path`")


def test_a_reachable_hub_answers_for_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(model_names, "hub_reachable", lambda *a, **k: True)
    assert check_model_name("org/maybe-on-the-hub") is None


def test_what_loads_offline_passes(offline, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    check_model_name("toy")  # a registered name
    check_model_name(str(tmp_path))  # a folder
    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--org--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--cached" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    check_model_name("org/cached")  # in the Hugging Face cache: transformers loads it offline
    with pytest.raises(UnknownModelNameError):
        check_model_name("org/not-cached")
