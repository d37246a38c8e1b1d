"""The fields both trainers' configs declare are defined once (`trainers.fields` and the other field homes): the same
help text and default in `MAGRPOConfig` and `MultiAgentPPOConfig`, so that a fix to one reaches both."""

from __future__ import annotations

import dataclasses

from transformers import TrainingArguments
from trl import GRPOConfig

from trl_marl.trainers import MAGRPOConfig, MultiAgentPPOConfig

PER_TRAINER_DEFAULT = {"num_agents", "console_metrics", "advantage_mode"}  # one factory, each trainer's default
# (named in the help)


def _declared(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def test_fields_of_both_trainers_have_one_help_text_and_one_default() -> None:
    magrpo, ppo = _declared(MAGRPOConfig), _declared(MultiAgentPPOConfig)
    inherited = {f.name for cls in (GRPOConfig, TrainingArguments) for f in dataclasses.fields(cls)}
    shared = sorted((magrpo.keys() & ppo.keys()) - inherited)
    assert len(shared) >= 18, shared  # the team, generation, reward, tool and console fields
    for name in shared:
        if name == "console_metrics":  # its help lists each trainer's default metrics
            continue
        assert magrpo[name].metadata["help"] == ppo[name].metadata["help"], name
        if name not in PER_TRAINER_DEFAULT:
            assert (magrpo[name].default, magrpo[name].default_factory) == (ppo[name].default,
                                                                            ppo[name].default_factory), name


def test_a_shared_help_text_names_each_trainers_own_field() -> None:
    """Where the trainers name a thing differently, the one help text names both (e.g. the completion length)."""
    help_text = _declared(MAGRPOConfig)["prompt_length_check"].metadata["help"]
    assert "`max_completion_length`" in help_text and "`response_length`" in help_text
