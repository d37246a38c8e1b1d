"""Every field a config adds to its TRL base is documented in its docstring, as TRL documents its configs (issue 52:
the PPO config's docstring covered 7 of its 72 fields)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from trl import GRPOConfig

from trl_marl._trl_compat import TRLBaseConfig
from trl_marl.trainers import MAGRPOConfig, MultiAgentPPOConfig


@pytest.mark.parametrize(("config", "base"), [(MAGRPOConfig, GRPOConfig), (MultiAgentPPOConfig, TRLBaseConfig)])
def test_every_added_field_is_in_the_docstring(config: type, base: type) -> None:
    inherited = {f.name for f in dataclasses.fields(base)}
    added = [f.name for f in dataclasses.fields(config) if f.name not in inherited]
    assert len(added) > 25
    missing = [name for name in added if not re.search(rf"(^\s+|, ){name} \(`", config.__doc__ or "", re.MULTILINE)]
    assert missing == []


def test_the_ppo_docstring_says_what_help_says() -> None:
    doc = " ".join((MultiAgentPPOConfig.__doc__ or "").split())
    critic = next(f for f in dataclasses.fields(MultiAgentPPOConfig) if f.name == "critic")
    assert " ".join(critic.metadata["help"].split()) in doc and "critic (`str`, defaults to `'per_agent'`)" in doc
