"""One generation-backend interface: every backend, the team's own decoding included, is an object whose `generate`
returns a `Generation`; the team keeps nothing of a call on the side; a backend written to the old interface is
refused with the fix."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, PreTrainedTokenizerBase

from trl_marl.team import AgentTeam, Generation
from trl_marl.team.generation import EngineBackend, GenerationBackend, TransformersBackend, build_generation_backend
from trl_marl.team.generation.compiled import CompiledBackend
from trl_marl.team.generation.settings import GenerationSettings
from trl_marl.toy import build_toy_model

PROMPTS = [["T:5?", "Q:1+1=A:"], ["T:7?"]]
GREEDY = GenerationConfig(max_new_tokens=4, do_sample=False)


def lora_team(tokenizer: PreTrainedTokenizerBase) -> AgentTeam:
    torch.manual_seed(0)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    return AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=1), 2, peft_config=config,
                           processing_class=tokenizer)


class FakeEngine(EngineBackend):
    """An engine that returns fixed uncut rows and, per token, the log-probability -(t + 1) / 10 (token t)."""

    name = "fake-engine"

    def __init__(self, rows: list[list[list[int]]]) -> None:
        self.rows = rows
        self.sampling_logprobs = True

    def generate_with_logprobs(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: Any,
                               logprobs: bool | None = None) -> tuple[list, list | None]:
        scores = [[[-(t + 1) / 10 for t in range(len(row))] for row in agent] for agent in self.rows]
        return self.rows, scores if (self.sampling_logprobs if logprobs is None else logprobs) else None


def test_a_team_samples_through_a_transformers_backend_object_by_default(tokenizer: PreTrainedTokenizerBase) -> None:
    team = lora_team(tokenizer)
    assert type(team.generation_backend) is TransformersBackend
    team.generation_backend = CompiledBackend(team, compile=False)
    team.generation_backend = None  # None restores the team's own decoding: the attribute is never None
    assert type(team.generation_backend) is TransformersBackend
    built = build_generation_backend(GenerationSettings(generation_backend="transformers"), team)
    assert type(built) is TransformersBackend
    with pytest.raises(TypeError, match=r"`generation_backend` must be a `trl_marl.team.generation.GenerationBackend`"
                                        r", got SimpleNamespace: subclass `GenerationBackend`"):
        from types import SimpleNamespace

        team.generation_backend = SimpleNamespace(generate=lambda *args: [])


def test_every_backend_returns_a_generation_and_the_team_keeps_none_of_it(tokenizer: PreTrainedTokenizerBase) -> None:
    team = lora_team(tokenizer)
    eos = tokenizer.eos_token_id
    own = team.generate(PROMPTS, GREEDY)
    assert type(own) is Generation and own.sampling_logps is None
    assert [len(rows) for rows in own.completion_ids] == [2, 1]
    assert own.prompt_ids[0][1] == tokenizer("Q:1+1=A:")["input_ids"]
    # the same rows, given to a backend directly: the same value
    direct = TransformersBackend().generate(team, own.prompt_ids, GREEDY)
    assert type(direct) is Generation and direct == own
    # the compiled backend (its static-cache loop run eager) decodes the same tokens behind the same `generate`
    team.share_prompt_prefill = False
    compiled = CompiledBackend(team, compile=False)
    assert type(compiled.generate(team, own.prompt_ids, GREEDY)) is Generation
    team.generation_backend = compiled
    assert team.generate(PROMPTS, GREEDY) == own
    # an engine: rows cut after the first stop token, its log-probabilities cut with them
    team.generation_backend = FakeEngine([[[5, eos, 6, 7], [8]], [[eos, 4]]])
    engine = team.generate(PROMPTS, GREEDY)
    assert type(engine) is Generation
    assert engine.completion_ids == [[[5, eos], [8]], [[eos]]]
    assert engine.sampling_logps == [[[-0.1, -0.2], [-0.1]], [[-0.1]]]
    assert engine.prompt_ids == own.prompt_ids
    assert not hasattr(team, "sampling_logps")  # nothing of the call is left on the team
    without = team.generate(PROMPTS, GREEDY, stop_token_ids=set())  # an empty stop set keeps every token
    assert without.completion_ids == [[[5, eos, 6, 7], [8]], [[eos, 4]]]
    assert without.sampling_logps == [[[-0.1, -0.2, -0.3, -0.4], [-0.1]], [[-0.1, -0.2]]]
    team.generation_backend.sampling_logprobs = False
    assert team.generate(PROMPTS, GREEDY).sampling_logps is None


def test_a_generation_reads_as_the_list_of_pairs_generate_returned_before() -> None:
    out = Generation(prompt_ids=[[[1, 2], [3]], [[4]]], completion_ids=[[[7, 0], [8]], [[9, 9, 0]]],
                     sampling_logps=[[[-1.0, -2.0], [-0.5]], [[-1.0, -1.0, -3.0]]])
    assert len(out) == 2
    prompts, completions = out[1]
    assert (prompts, completions) == ([[4]], [[9, 9, 0]])
    assert [c for _, c in out] == [[[7, 0], [8]], [[9, 9, 0]]]
    assert out[-1] == out[1] and out[:1] == [([[1, 2], [3]], [[7, 0], [8]])]
    assert out == [([[1, 2], [3]], [[7, 0], [8]]), ([[4]], [[9, 9, 0]])]
    assert out != [([[1, 2], [3]], [[7, 0], [8]]), ([[4]], [[9, 9]])]
    assert out != Generation(out.prompt_ids, out.completion_ids)  # the log-probabilities count between values
    with pytest.raises(IndexError):
        out[2]


def test_a_backend_written_to_the_old_interface_is_refused_with_the_fix(tokenizer: PreTrainedTokenizerBase) -> None:
    """A `generate(team, prompt_ids, generation_config)` without `stop_token_ids` (the interface before `Generation`)
    is refused when it is set, naming the interface to define (it was adapted with a FutureWarning before; it failed
    with `int(list)` when the adaptation missed it, issue 52)."""
    eos = tokenizer.eos_token_id

    class OldRows(GenerationBackend):
        def generate(self, team: Any, prompt_ids: list, generation_config: Any) -> list:  # type: ignore[override]
            return [[[5, eos, 6]] * len(rows) for rows in prompt_ids]

    team = lora_team(tokenizer)
    with pytest.raises(TypeError, match=r"OldRows.generate takes no `stop_token_ids`: a backend defines "
                                        r"`generate\(team, prompt_ids, generation_config, stop_token_ids=None\)` "
                                        r"and returns a "
                                        r"`trl_marl.team.generation.Generation`"):
        team.generation_backend = OldRows()
    assert type(team.generation_backend) is TransformersBackend  # unchanged


def test_a_backend_that_returns_no_generation_is_refused_with_the_fix(tokenizer: PreTrainedTokenizerBase) -> None:
    class Lists(GenerationBackend):  # the new signature (it takes `stop_token_ids`), but the old return value
        def generate(self, team: Any, prompt_ids: list, generation_config: Any, **kwargs: Any) -> Any:
            return [[[1]] * len(rows) for rows in prompt_ids]

    team = lora_team(tokenizer)
    team.generation_backend = Lists()
    with pytest.raises(TypeError, match=r"Lists.generate returned list, not a `trl_marl.team.generation.Generation`: "
                                        r"return `Generation.from_rows"):
        team.generate(PROMPTS, GREEDY)
