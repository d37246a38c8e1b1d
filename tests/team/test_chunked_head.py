"""Log-probabilities through the LM head a chunk of positions at a time (`core.head_logprobs`, `team.forward`).

The team's log-probability forwards run the model's backbone and take each completion token's log-probability
through the LM head in chunks, so the `[batch, length, vocab]` logits never exist at once (the GPU benchmark found
our training peak 2.3x TRL GRPOTrainer's, whose fused LM head does the same). These tests check the math against
the full log-softmax by hand and on a toy team (values, entropies, gradients of hidden states, head and adapters; the
per-agent, joint, dropout and no-grad paths), that no op of the chunked path makes a tensor of more logits than one
chunk while the full path makes all of them (the memory claim, counted op by op), and which models keep the full
logits.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from peft import LoraConfig
from torch.utils._python_dispatch import TorchDispatchMode

from trl_marl.core import chunk_positions, head_logprobs
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.forward import head_path
from trl_marl.utils.tokens import pad_left, pad_right

warnings.filterwarnings("ignore")


def full_logprobs(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor,
                  temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(head(hidden).float() / temperature, dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


def test_chunk_positions_by_hand():
    assert chunk_positions(151936) == 110  # 2**24 // 151936
    assert chunk_positions(32, chunk_elements=100) == 3
    assert chunk_positions(1000, chunk_elements=10) == 1  # never less than one position


def test_two_positions_by_hand():
    # head = identity on 2-d hidden states: the logits are the hidden states themselves
    head = torch.nn.Identity()
    hidden = torch.tensor([[0.0, 0.0], [torch.log(torch.tensor(3.0)), 0.0]])
    logps, entropy = head_logprobs(hidden, head, torch.tensor([0, 0]), chunk_size=1, compute_entropy=True)
    # position 0: p = (1/2, 1/2); position 1: p = (3/4, 1/4)
    expected_entropy = [torch.log(torch.tensor(2.0)), -(0.75 * torch.log(torch.tensor(0.75)) +
                                                         0.25 * torch.log(torch.tensor(0.25)))]
    torch.testing.assert_close(logps, torch.log(torch.tensor([0.5, 0.75])))
    torch.testing.assert_close(entropy, torch.stack(expected_entropy))
    # temperature 2 halves the logits: position 1 becomes p = (sqrt3 / (sqrt3 + 1), ...)
    logps, _ = head_logprobs(hidden, head, torch.tensor([0, 0]), temperature=2.0, chunk_size=5)
    root = torch.sqrt(torch.tensor(3.0))
    torch.testing.assert_close(logps, torch.log(torch.stack([torch.tensor(0.5), root / (root + 1)])))


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 100])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_values_and_gradients_equal_the_full_log_softmax(chunk_size, entropy_grad):
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50)
    hidden = torch.randn(2, 7, 8, requires_grad=True)
    labels = torch.randint(50, (2, 7))
    logps, entropy = head_logprobs(hidden, head, labels, temperature=0.7, chunk_size=chunk_size,
                                   compute_entropy=True, entropy_grad=entropy_grad)
    assert logps.dtype == torch.float32 and logps.shape == labels.shape and entropy.shape == labels.shape
    assert entropy.requires_grad == entropy_grad
    (logps.sum() * 2 + (entropy.sum() if entropy_grad else 0)).backward()
    ours = [hidden.grad.clone(), head.weight.grad.clone(), head.bias.grad.clone()]
    hidden.grad = head.weight.grad = head.bias.grad = None
    theirs_logps, theirs_entropy = full_logprobs(hidden, head, labels, temperature=0.7)
    (theirs_logps.sum() * 2 + (theirs_entropy.sum() if entropy_grad else 0)).backward()
    torch.testing.assert_close(logps, theirs_logps, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(entropy, theirs_entropy.detach(), rtol=1e-6, atol=1e-6)
    for mine, full in zip(ours, [hidden.grad, head.weight.grad, head.bias.grad], strict=True):
        torch.testing.assert_close(mine, full, rtol=1e-5, atol=1e-6)


def test_no_positions_and_a_bad_chunk_size():
    logps, entropy = head_logprobs(torch.zeros(2, 0, 4), torch.nn.Linear(4, 9), torch.zeros(2, 0, dtype=torch.long),
                                   compute_entropy=True)
    assert logps.shape == (2, 0) and entropy.shape == (2, 0)
    with pytest.raises(ValueError, match="chunk_size must be at least 1"):
        head_logprobs(torch.zeros(1, 4), torch.nn.Linear(4, 9), torch.zeros(1, dtype=torch.long), chunk_size=0)


class LargestLogits(TorchDispatchMode):
    """Records the most elements of any op output whose last dimension is the vocabulary, except views of the
    transposed `(D, V)` head weight (and its gradient), whose last two dimensions are `(D, V)`."""

    def __init__(self, vocab: int, hidden_size: int) -> None:
        super().__init__()
        self.vocab, self.hidden_size, self.largest = vocab, hidden_size, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if (isinstance(t, torch.Tensor) and t.dim() >= 1 and t.size(-1) == self.vocab
                    and tuple(t.shape[-2:]) != (self.hidden_size, self.vocab)):
                self.largest = max(self.largest, t.numel())
        return out


def test_no_op_holds_more_logits_than_a_chunk():
    torch.manual_seed(0)
    head = torch.nn.Linear(12, 300, bias=False)
    hidden = torch.randn(4, 30, 12, requires_grad=True)
    labels = torch.randint(300, (4, 30))
    chunk = chunk_positions(300, chunk_elements=3000)  # 10 positions of 120
    with LargestLogits(300, 12) as counted:
        logps, entropy = head_logprobs(hidden, head, labels, chunk_size=chunk, compute_entropy=True)
        logps.sum().backward()
    assert counted.largest == chunk * 300
    with LargestLogits(300, 12) as counted:  # the full computation: every position's logits at once
        full_logprobs(hidden, head, labels)[0].sum().backward()
    assert counted.largest == 4 * 30 * 300


def lora(dropout: float = 0.0) -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=dropout,
                      init_lora_weights=False)  # random B: every adapter changes the logits


def batch(rows: int, prompt: int, completion: int, seed: int) -> AgentBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(4, 20, (int(torch.randint(1, prompt + 1, (), generator=g)),), generator=g).tolist()
               for _ in range(rows)]
    completions = [torch.randint(4, 20, (int(torch.randint(1, completion + 1, (), generator=g)),),
                                 generator=g).tolist() for _ in range(rows)]
    prompts[0] += [5] * (prompt - len(prompts[0]))
    completions[0] += [6] * (completion - len(completions[0]))
    return AgentBatch(*pad_left(prompts, 0), *pad_right(completions, 0))


def team_outputs(team: AgentTeam, batches: list[AgentBatch], chunk_elements: int, seed: int = 0) -> tuple:
    team.logprob_chunk_elements = chunk_elements
    team.zero_grad(set_to_none=True)
    torch.manual_seed(seed)  # the same dropout masks on both paths
    out = team(batches, compute_entropy=True)
    sum((a + 1) * o[0].sum() for a, o in enumerate(out)).backward()
    grads = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
    return [(o[0].detach(), o[1]) for o in out], grads


@pytest.mark.parametrize("layout", ["per-agent", "joint", "dropout", "checkpointing"])
def test_team_forward_matches_the_full_logits(target_model_dir, layout):
    torch.manual_seed(0)
    team = AgentTeam.build(target_model_dir, 2, mode="adapters", peft_config=lora(0.3 if layout == "dropout" else 0))
    team.train()
    team.temperature = 0.8
    team.joint_adapter_forward = layout == "joint"
    if layout == "checkpointing":
        team.activation_checkpointing_enable()
    batches = [batch(3, 5, 4, seed=1), batch(2, 3, 6, seed=2)]
    assert not isinstance(head_path(team.policy(0)), str)
    chunked, chunked_grads = team_outputs(team, batches, chunk_elements=2 * team.policy(0).config.vocab_size)
    full, full_grads = team_outputs(team, batches, chunk_elements=0)
    for (logps, entropy), (their_logps, their_entropy), b in zip(chunked, full, batches, strict=True):
        assert logps.shape == b.completion_ids.shape
        torch.testing.assert_close(logps, their_logps.float(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy, their_entropy.float(), rtol=1e-5, atol=1e-5)
    assert chunked_grads.keys() == full_grads.keys() and len(full_grads) == 8  # q/v, A/B, two adapters
    for name, grad in full_grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-4, atol=1e-6)
    # the no-grad forwards (old-policy and reference log-probabilities) go the same way
    team.logprob_chunk_elements = 64
    torch.manual_seed(1)
    chunked_old = team.inference_logps_all(batches)
    team.logprob_chunk_elements = 0
    torch.manual_seed(1)
    full_old = team.inference_logps_all(batches)
    for mine, theirs in zip(chunked_old, full_old, strict=True):
        torch.testing.assert_close(mine, theirs.float(), rtol=1e-5, atol=1e-5)


def test_which_models_keep_the_full_logits(target_model_dir):
    torch.manual_seed(0)
    team = AgentTeam.build(target_model_dir, 1, mode="adapters", peft_config=lora())
    model = team.policy(0)
    backbone, head = head_path(model)
    assert head is model.get_base_model().lm_head and backbone is model.get_base_model().model
    on_head = AgentTeam.build(target_model_dir, 1, mode="adapters",
                              peft_config=LoraConfig(r=4, target_modules=["q_proj", "lm_head"]))
    assert head_path(on_head.policy(0)) == "the LM head carries an adapter"
    assert "backbone" in head_path(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("dropout", [False, True], ids=["plain", "dropout"])
def test_ppo_response_logprobs_match_the_response_logits(target_model_dir, dropout):
    from trl_marl.core import entropy_from_logits, selective_log_softmax

    torch.manual_seed(0)
    team = AgentTeam.build(target_model_dir, 2, mode="adapters", peft_config=lora(0.3 if dropout else 0))
    team.train()
    g = torch.Generator().manual_seed(3)
    context, width = 5, 4
    query_responses = torch.randint(4, 20, (3, context + width), generator=g)
    query_responses[1, :2] = 0  # a left-padded query (pad id 0)
    query_responses[2, -1] = 0  # a response that ends early
    responses = query_responses[:, context:]
    temperature = 0.7 + 1e-7
    for reference in (False, True):
        team.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        logps, entropy = team.response_logprobs(1, query_responses, context, 0, responses, temperature,
                                                reference=reference, compute_entropy=True)
        assert logps.shape == entropy.shape == responses.shape and not entropy.requires_grad
        if not reference:
            logps.sum().backward()
            ours = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
            team.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        logits = team.response_logits(1, query_responses, context, 0, reference=reference) / temperature
        full = selective_log_softmax(logits, responses)
        torch.testing.assert_close(logps, full, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy, entropy_from_logits(logits.detach()), rtol=1e-5, atol=1e-5)
        if not reference:
            full.sum().backward()
            theirs = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
            assert ours.keys() == theirs.keys() and len(ours) == 4  # agent 1's adapter: q/v, A/B
            for name, grad in theirs.items():
                torch.testing.assert_close(ours[name], grad, rtol=1e-4, atol=1e-6)
    team.logprob_chunk_elements = 0  # the full-logits path gives the same
    torch.manual_seed(5)
    again, _ = team.response_logprobs(1, query_responses, context, 0, responses, temperature)
    torch.manual_seed(5)
    torch.testing.assert_close(again, selective_log_softmax(
        team.response_logits(1, query_responses, context, 0) / temperature, responses))


def test_ppo_response_logprobs_hold_one_chunk_of_logits(target_model_dir):
    torch.manual_seed(0)
    team = AgentTeam.build(target_model_dir, 1, mode="adapters", peft_config=lora())
    team.train()
    model = team.policy(0)
    vocab, hidden_size = model.config.vocab_size, model.config.hidden_size
    query_responses = torch.randint(4, 20, (3, 9), generator=torch.Generator().manual_seed(4))
    responses = query_responses[:, 5:]
    head_path(model)  # the one-time probe of the model's forward (`team.head`) runs before the count
    team.logprob_chunk_elements = 2 * vocab  # two positions per chunk
    with LargestLogits(vocab, hidden_size) as counted:
        logps, _ = team.response_logprobs(0, query_responses, 5, 0, responses, 1.0, compute_entropy=True)
        logps.sum().backward()
    assert counted.largest == 2 * vocab
    team.logprob_chunk_elements = 0
    with LargestLogits(vocab, hidden_size) as counted:
        logps, _ = team.response_logprobs(0, query_responses, 5, 0, responses, 1.0, compute_entropy=True)
        logps.sum().backward()
    assert counted.largest == 3 * 4 * vocab  # every response position's logits at once
