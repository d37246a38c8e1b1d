"""One primitive for every log-probability forward of the team (`AgentTeam.token_logps`, `team.forward`).

MAGRPO's layout (prompt + completion, one batch or several agents' rows at once) and PPO's (`query_responses` with a
context length) are layouts (`TokenWindow`) of the same primitive; the choice between the LM head in chunks and the
full logits is made once, by `_logprob_head`, for both. The values are checked by hand against a log-softmax of the
model's own full logits, gathered at the labels.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import LoraConfig
from transformers import PreTrainedTokenizerBase

import trl_marl.team.forward as forward_module
from trl_marl.team import AgentBatch, AgentTeam, pad_left, pad_right, sequence_model_inputs
from trl_marl.team.forward import TokenWindow, completion_window, joint_completion_window, response_window
from trl_marl.team.head import head_path_checked
from trl_marl.toy import build_toy_model

TEMPERATURE = 0.7


def make_team(tokenizer: PreTrainedTokenizerBase) -> AgentTeam:
    """Two agents, each with its own random LoRA adapter on one toy model (the reference: adapters disabled)."""
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    team = AgentTeam.build(model, 2, mode="adapters", peft_config=lora, processing_class=tokenizer)
    team.temperature = TEMPERATURE
    head_path_checked(team.policy(0))  # the one-time probe, before anything is counted
    return team


def make_batch(prompts: list[list[int]], completions: list[list[int]]) -> AgentBatch:
    return AgentBatch(*pad_left(prompts, 0), *pad_right(completions, 0))


BATCHES = [
    make_batch([[5, 6, 7], [8, 9]], [[10, 11, 12, 13], [14, 2]]),  # 3-wide prompts, 4-wide completions
    make_batch([[4], [5, 6, 7, 8, 9], [10, 11]], [[12, 2], [13], [14, 15]]),  # 5-wide prompts, 2-wide completions
]


def ppo_rows() -> tuple[torch.Tensor, int, torch.Tensor]:
    """`(query_responses, context_length, responses)`: left-padded queries (pad 0), responses (one ends early)."""
    query_responses = torch.tensor([[0, 0, 5, 6, 7, 20, 21, 22], [4, 5, 6, 7, 8, 19, 18, 0]])
    return query_responses, 5, query_responses[:, 5:]


def by_hand(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits / T) at the labels: the full logits, no chunking, no helper of the package."""
    return torch.log_softmax(logits / TEMPERATURE, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def magrpo_by_hand(model: Any, batch: AgentBatch) -> torch.Tensor:
    """TRL's layout: the whole sequence, each completion token scored by the logits one position before it."""
    width = batch.completion_ids.size(1)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    return by_hand(logits[:, -width - 1 : -1], batch.completion_ids)


def ppo_by_hand(model: Any, query_responses: torch.Tensor, context: int, responses: torch.Tensor) -> torch.Tensor:
    logits = model(**sequence_model_inputs(query_responses, 0)).logits
    return by_hand(logits[:, context - 1 : -1], responses)


@pytest.mark.parametrize("chunk_elements", [0, 64], ids=["full-logits", "chunked-head"])
def test_every_layout_scores_what_the_full_logits_give(tokenizer: PreTrainedTokenizerBase,
                                                       chunk_elements: int) -> None:
    team = make_team(tokenizer)
    team.logprob_chunk_elements = chunk_elements  # 64 logits per chunk: 2 positions of the 23-token vocabulary
    query_responses, context, responses = ppo_rows()
    with torch.no_grad():
        model = team.adapter_control.activate(0)
        expected = [magrpo_by_hand(model, b) for b in BATCHES]
        for dropout in (False, True):  # (eval mode: the whole-sequence layout of dropout gives the same values)
            for batch, hand in zip(BATCHES, expected, strict=True):
                (logps, entropy), = team.token_logps(model, completion_window(batch, dropout), [batch.completion_ids])
                assert entropy is None
                torch.testing.assert_close(logps, hand, rtol=1e-5, atol=1e-6)
            (logps, _), = team.token_logps(model, response_window(query_responses, context, 0, dropout), [responses],
                                           temperature=TEMPERATURE)
            torch.testing.assert_close(logps, ppo_by_hand(model, query_responses, context, responses),
                                       rtol=1e-5, atol=1e-6)
        # one forward over both batches' rows: each run of rows scored at its own width, as in its own forward
        joint = team.token_logps(model, joint_completion_window(BATCHES), [b.completion_ids for b in BATCHES],
                                 compute_entropy=True)
        for (logps, entropy), batch, hand in zip(joint, BATCHES, expected, strict=True):
            assert logps.shape == entropy.shape == batch.completion_ids.shape
            torch.testing.assert_close(logps, hand, rtol=1e-5, atol=1e-6)
            width = batch.completion_ids.size(1)
            full = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -width - 1 : -1]
            log_p = torch.log_softmax(full / TEMPERATURE, dim=-1)
            torch.testing.assert_close(entropy, -(log_p.exp() * log_p).sum(-1), rtol=1e-5, atol=1e-6)

def test_every_log_prob_path_calls_the_one_primitive_once(tokenizer: PreTrainedTokenizerBase,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    team = make_team(tokenizer)
    team.train()
    calls: list[tuple[int, bool]] = []  # per `token_logps` call: its runs of rows, whether adapters were per row
    decisions: list[Any] = []
    model_calls: list[torch.nn.Module] = []
    forwards = team.logprob_forwards  # the team's log-probability part: every forward goes through its `token_logps`
    token_logps, logprob_head, forward_call = forwards.token_logps, forwards._logprob_head, team.forward_call

    def counted_token_logps(model: Any, window: TokenWindow, labels: Any, **kwargs: Any) -> Any:
        calls.append((len(labels), kwargs.get("adapter_rows") is not None))
        return token_logps(model, window, labels, **kwargs)

    def counted_logprob_head(model: Any) -> Any:
        decisions.append(model)
        return logprob_head(model)

    def counted_forward_call(module: torch.nn.Module, **inputs: Any) -> Any:
        model_calls.append(module)
        return forward_call(module, **inputs)

    monkeypatch.setattr(forwards, "token_logps", counted_token_logps)
    monkeypatch.setattr(forwards, "_logprob_head", counted_logprob_head)
    team.forward_call = counted_forward_call
    query_responses, context, responses = ppo_rows()
    paths = {
        "forward, one per agent": lambda: team(BATCHES, compute_entropy=True),
        "forward, joint": lambda: team(BATCHES),
        "policy_logps": lambda: team.policy_logps(0, BATCHES[0]),
        "reference_logps": lambda: team.reference_logps(1, BATCHES[1]),
        "inference_logps_all": lambda: team.inference_logps_all(BATCHES),
        "inference_logps_all, reference": lambda: team.inference_logps_all(BATCHES, reference=True),
        "response_logprobs": lambda: team.response_logprobs(1, query_responses, context, 0, responses, 0.7),
        "response_logprobs, reference": lambda: team.response_logprobs(0, query_responses, context, 0, responses,
                                                                       0.7, reference=True),
    }
    seen = {}
    for name, path in paths.items():
        team.joint_adapter_forward = name != "forward, one per agent"
        calls.clear()
        decisions.clear()
        model_calls.clear()
        path()
        seen[name] = list(calls)
        assert len(decisions) == len(calls), name  # the head / logits choice: once per scoring call, in one place
        assert len(model_calls) == len(calls), name  # and one model call per scoring call
    assert seen == {
        "forward, one per agent": [(1, False), (1, False)],
        "forward, joint": [(2, True)],  # both agents' rows, each through its own adapter
        "policy_logps": [(1, False)],
        "reference_logps": [(1, False)],
        "inference_logps_all": [(2, True)],
        "inference_logps_all, reference": [(2, False)],  # adapters disabled: every row through the base model
        "response_logprobs": [(1, False)],
        "response_logprobs, reference": [(1, False)],
    }
    # the logits that PPO asks for go through the same model call, and make no head / logits choice
    decisions.clear()
    model_calls.clear()
    team.response_logits(0, query_responses, context, 0)
    team.sequence_logits(0, query_responses, 0)
    assert decisions == [] and len(model_calls) == 2


def test_one_choice_of_the_head_path_serves_both_layouts(tokenizer: PreTrainedTokenizerBase,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    team = make_team(tokenizer)
    team.train()
    team.joint_adapter_forward = False
    team.logprob_chunk_elements = 64
    query_responses, context, responses = ppo_rows()
    head_calls: list[int] = []
    head_logprobs = forward_module.head_logprobs

    def counted_head_logprobs(hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        head_calls.append(hidden.size(0))
        return head_logprobs(hidden, *args, **kwargs)

    monkeypatch.setattr(forward_module, "head_logprobs", counted_head_logprobs)

    def both_layouts() -> tuple[list[torch.Tensor], torch.Tensor]:
        magrpo = [r[0].detach() for r in team(BATCHES)]
        ppo = team.response_logprobs(1, query_responses, context, 0, responses, TEMPERATURE)[0].detach()
        return magrpo, ppo

    chunked = both_layouts()
    assert head_calls == [2, 3, 2]  # MAGRPO's two agents and PPO's rows, all through the LM head in chunks
    head_calls.clear()
    # the one choice, turned to the full logits
    monkeypatch.setattr(team.logprob_forwards, "_logprob_head", lambda model: None)
    full = both_layouts()
    assert head_calls == []  # neither layout takes the chunked head any more
    monkeypatch.undo()
    team.logprob_chunk_elements = 0  # the team's own switch to the full logits: bit for bit the same
    assert all(torch.equal(a, b) for a, b in zip(full[0], both_layouts()[0], strict=True))
    assert torch.equal(full[1], both_layouts()[1])
    with torch.no_grad():
        for agent, batch in enumerate(BATCHES):
            hand = magrpo_by_hand(team.adapter_control.activate(agent), batch)
            torch.testing.assert_close(chunked[0][agent], hand, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(full[0][agent], hand, rtol=1e-5, atol=1e-6)
        hand = ppo_by_hand(team.adapter_control.activate(1), query_responses, context, responses)
        torch.testing.assert_close(chunked[1], hand, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(full[1], hand, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("labels", [
    [torch.zeros(2, 5, dtype=torch.long)],  # wider than the 4 scored positions
    [torch.zeros(1, 4, dtype=torch.long)],  # fewer rows than the window
    [torch.zeros(2, 4, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long)],  # more rows than the window
], ids=["too-wide", "too-few-rows", "too-many-rows"])
def test_labels_that_do_not_fit_the_window_are_refused(tokenizer: PreTrainedTokenizerBase,
                                                       labels: list[torch.Tensor]) -> None:
    team = make_team(tokenizer)
    window = completion_window(BATCHES[0], dropout=False)
    with pytest.raises(ValueError, match=r"`labels` must split the window's 2 rows in runs at most 4 tokens wide"):
        team.token_logps(team.policy(0), window, labels)
    if len(labels) == 1:  # one tensor where a sequence of them is expected
        with pytest.raises(TypeError, match=r"pass `\[labels\]` for one batch"):
            team.token_logps(team.policy(0), window, labels[0])
