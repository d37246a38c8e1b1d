"""What a new user meets first: the torch threads of a CPU run, and errors that name the extra to install."""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch

from trl_marl.utils import threads
from trl_marl.utils.threads import SMALL_MODEL_PARAMS, apply_cpu_threads, choose_cpu_threads

INSTALL_REWARDS = 'pip install "trl-marl[rewards]"'


# ---------------------------------------------------------------------------------------------------- threads
def test_small_models_get_one_thread_and_large_ones_every_core():
    assert choose_cpu_threads(84_000, cores=8, environ={})[0] == 1  # the toy model
    assert choose_cpu_threads(SMALL_MODEL_PARAMS - 1, cores=8, environ={})[0] == 1
    assert choose_cpu_threads(135_000_000, cores=8, environ={})[0] == 8  # SmolLM2-135M: a matter of cores
    assert choose_cpu_threads(135_000_000, cores=0, environ={})[0] == 1
    threads_, reason = choose_cpu_threads(84_000, cores=2, environ={})
    assert "0.08M-parameter" in reason and "OMP_NUM_THREADS" in reason and "cpu_threads" in reason


def test_an_explicit_setting_wins():
    # OMP_NUM_THREADS set by the user: torch already follows it, nothing is changed
    threads_, reason = choose_cpu_threads(84_000, cores=8, environ={"OMP_NUM_THREADS": "4"})
    assert threads_ is None and "OMP_NUM_THREADS=4" in reason
    # the config's cpu_threads wins over both the rule and the environment
    assert choose_cpu_threads(84_000, cores=8, environ={"OMP_NUM_THREADS": "4"}, cpu_threads=3)[0] == 3
    with pytest.raises(ValueError, match="`cpu_threads` must be >= 1"):
        choose_cpu_threads(84_000, cores=8, environ={}, cpu_threads=0)


def test_apply_sets_and_announces_once(monkeypatch, caplog):
    model = torch.nn.Linear(10, 10)
    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "_announced", False)
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        torch.set_num_threads(2)
        assert apply_cpu_threads([model], on_cpu=True) == 2  # the environment wins: left alone
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(threads, "_announced", False)
        with caplog.at_level("INFO", logger="trl_marl.utils.threads"):
            assert apply_cpu_threads([model], on_cpu=True) == 1
            assert apply_cpu_threads([model], on_cpu=True) == 1
        said = [r.getMessage() for r in caplog.records if r.name == "trl_marl.utils.threads"]
        assert len(said) == 1 and "1 torch thread for a 0.00M-parameter model" in said[0], said
        assert apply_cpu_threads([model], cpu_threads=2, on_cpu=True) == 2
        torch.set_num_threads(2)
        assert apply_cpu_threads([model], on_cpu=False) == 2  # on an accelerator nothing changes
    finally:
        torch.set_num_threads(previous)


def test_the_configs_take_cpu_threads():
    from trl_marl import MAGRPOConfig, MultiAgentPPOConfig

    assert MAGRPOConfig("out", cpu_threads=3, report_to="none").cpu_threads == 3
    assert MultiAgentPPOConfig("out", report_to="none").cpu_threads is None


# ---------------------------------------------------------------------------------------------------- extras
def test_rouge_error_names_the_extra(monkeypatch):
    from trl_marl.rewards import RougeLReward
    from trl_marl.rewards.writing import WritingTeamReward

    monkeypatch.setitem(sys.modules, "rouge_score", None)  # `import rouge_score` now raises ImportError
    with pytest.raises(ImportError) as info:
        RougeLReward()
    assert INSTALL_REWARDS in str(info.value) and 'pip install -e ".[rewards]"' in str(info.value)
    with pytest.raises(ImportError, match=r"trl-marl\[rewards\]"):  # what `trl-marl magrpo` (writing) meets
        WritingTeamReward().reward_funcs()


def test_codebleu_error_names_the_extra(monkeypatch):
    from trl_marl.rewards.codebleu import _load_codebleu

    monkeypatch.setitem(sys.modules, "codebleu", None)
    with pytest.raises(ImportError) as info:
        _load_codebleu("python")
    assert INSTALL_REWARDS in str(info.value)


def test_qlora_without_bitsandbytes_names_the_extra(monkeypatch):
    from trl_marl.scripts.magrpo import require_bitsandbytes

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real(name))
    with pytest.raises(ImportError) as info:
        require_bitsandbytes()
    assert 'pip install "trl-marl[qlora]"' in str(info.value) and "--load_in_4bit false" in str(info.value)
