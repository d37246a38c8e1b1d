"""The chunked LM head with a per-adapter head (`modules_to_save=["lm_head"]`, trainable tokens) in `adapters` mode.

The chunked head recomputes each chunk's logits in the backward. When several agents run their forwards and then
share one backward (MAGRPO's summed loss, `backward_per_agent=False`; PPO's summed micro-step), the recomputation
runs after the last agent's forward, when that agent's adapter is the active one: every chunk must still go through
the head copy that its own forward used (`team.head.bound_head`). These tests compare the gradients of every
trainable parameter with those of the full-logits path for each backward layout, and check that the probe of
`team.head` runs once per adapter layout of the head.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from peft import LoraConfig

from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.head import head_path_checked
from trl_marl.utils.tokens import pad_left, pad_right

warnings.filterwarnings("ignore")

HEADS = {
    "modules-to-save": {"modules_to_save": ["lm_head"]},
    "trainable-tokens": {"trainable_token_indices": {"lm_head": [4, 5, 6, 7, 8, 9, 10, 11]}},
}


def make_team(target_model_dir: str, head: str) -> AgentTeam:
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, **HEADS[head])
    team = AgentTeam.build(target_model_dir, 2, mode="adapters", peft_config=config)
    team.train()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # each agent's head differs a lot from the other's
        for name, param in team.named_parameters():
            if param.requires_grad and ("modules_to_save" in name or "trainable_tokens_delta" in name):
                param.add_(torch.randn(param.shape, generator=generator) * 3.0)
    return team


def a_batch(seed: int) -> AgentBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (5, 3, 4)]
    completions = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (4, 6, 2)]
    return AgentBatch(*pad_left(prompts, 0), *pad_right(completions, 0))


def query_responses(seed: int) -> torch.Tensor:
    return torch.randint(4, 20, (3, 9), generator=torch.Generator().manual_seed(seed))


def gradients(team: AgentTeam, layout: str, chunk_elements: int) -> tuple[list[torch.Tensor], dict]:
    """Each agent's log-probs and every parameter's gradient of `sum_a (a + 1) * sum(logps_a)`."""
    team.logprob_chunk_elements = chunk_elements
    team.zero_grad(set_to_none=True)
    batches = [a_batch(1), a_batch(2)]
    if layout == "per-agent":  # a forward and a backward per agent
        logps = []
        for a in range(2):
            out = team([b if i == a else None for i, b in enumerate(batches)])[a][0]
            ((a + 1) * out.sum()).backward()
            logps.append(out.detach())
    elif layout == "one-backward":  # MAGRPO with backward_per_agent=False: every forward, then one backward
        out = [o[0] for o in team(batches)]
        sum((a + 1) * o.sum() for a, o in enumerate(out)).backward()
        logps = [o.detach() for o in out]
    else:  # PPO's summed micro-step: each agent's response log-probs, then one backward
        out = [
            team.response_logprobs(a, query_responses(a + 3), 5, 0, query_responses(a + 3)[:, 5:], 0.7)[0]
            for a in range(2)
        ]
        sum((a + 1) * o.sum() for a, o in enumerate(out)).backward()
        logps = [o.detach() for o in out]
    return logps, {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("layout", ["per-agent", "one-backward", "ppo-summed"])
@pytest.mark.parametrize("head", list(HEADS))
def test_gradients_equal_the_full_logits_path(target_model_dir, head, layout):
    team = make_team(target_model_dir, head)
    assert not isinstance(head_path_checked(team.policy(0)), str)  # the chunked path is taken
    vocab = team.policy(0).config.vocab_size
    chunked, chunked_grads = gradients(team, layout, chunk_elements=2 * vocab)
    full, full_grads = gradients(team, layout, chunk_elements=0)
    for mine, theirs in zip(chunked, full, strict=True):
        torch.testing.assert_close(mine, theirs.float(), rtol=1e-5, atol=1e-5)
    assert chunked_grads.keys() == full_grads.keys()
    heads = [n for n in full_grads if "modules_to_save" in n or "trainable_tokens_delta" in n]
    assert len(heads) == 2 and len(full_grads) == 10  # both agents' head copies, q/v LoRA A/B of both adapters
    for name, grad in full_grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(chunked_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_the_probe_runs_once_per_adapter_layout_of_the_head(target_model_dir):
    team = make_team(target_model_dir, "modules-to-save")
    model = team.policy(0)
    calls: list[str] = []
    model.get_base_model().model.register_forward_pre_hook(lambda module, args: calls.append(model.active_adapter))
    batches = [a_batch(1), a_batch(2)]
    for _ in range(2):
        team(batches)
        team.inference_logps_all(batches, reference=True)  # the adapters disabled: a layout of its own
    # the probe (two backbone calls) once per layout of the head: agent 0's copy, agent 1's copy, the original
    # head (adapters disabled); then one backbone call per agent and forward: two rounds of policy and reference
    assert len(calls) == 3 * 2 + 2 * (2 + 2)
    assert calls[:2] == ["agent_0", "agent_0"]
    team(batches)
    assert len(calls) == 3 * 2 + 2 * (2 + 2) + 2  # no probe any more
