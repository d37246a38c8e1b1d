"""No warning that a user cannot act on: PEFT's use of a deprecated transformers alias, bitsandbytes' kernel hub."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
from peft import LoraConfig

from trl_marl import AgentTeam

ALIAS = "`is_gradient_checkpointing` is deprecated and will be removed in v6. Use `is_activation_checkpointing`."


def alias_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)]


def test_building_and_loading_a_lora_team_warns_no_deprecated_alias(target_model_dir: str, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        team = AgentTeam.build(target_model_dir, 2, peft_config=LoraConfig(r=2, target_modules=["q_proj"]))
        team.save_pretrained(tmp_path)
        AgentTeam.from_pretrained(tmp_path)
        AgentTeam.build(target_model_dir, 2, mode="models", peft_config=LoraConfig(r=2, target_modules=["q_proj"]))
    assert alias_warnings(caught) == []


def test_the_silencing_is_exact_other_future_warnings_pass() -> None:
    from trl_marl.utils.quiet import peft_quietly

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with peft_quietly():
            warnings.warn(ALIAS, FutureWarning, stacklevel=1)
            warnings.warn("something else is deprecated", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something else is deprecated"]
    with warnings.catch_warnings(record=True) as caught:  # outside the context the alias warning shows again
        warnings.simplefilter("always")
        warnings.warn(ALIAS, FutureWarning, stacklevel=1)
    assert len(caught) == 1


def test_bitsandbytes_kernel_hub_record_is_dropped_and_others_pass(caplog: pytest.LogCaptureFixture) -> None:
    import trl_marl  # noqa: F401 - its import installs the filter

    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    # the level on this logger itself: the demo (run in-process by other tests) sets its parent `bitsandbytes` to ERROR
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please make sure you "
                       "already `pip install kernels` and the kernels >= 0.11.1", "No module named 'kernels'")
        logger.warning("another bitsandbytes warning")
    assert [r.getMessage() for r in caplog.records] == ["another bitsandbytes warning"]
