"""`AgentTeam.generate` samples each agent's own policy: sampled completions against their exact probabilities.

The other generation tests compare our decoding with `model.generate` token by token (same random numbers, same
tokens). This one checks against an independent oracle instead: the probability of every completion, computed
exactly by teacher forcing (the product of the softmax of each position's logits). Thousands of completions are drawn
through the team's real path (shared prompt prefill, the lean decoding loop, mixed-adapter batches on row slices)
and a chi-square goodness-of-fit test compares their frequencies with those probabilities, per agent and prompt.
A sampler that mixed up agents or adapters, misplaced a position or a cache entry, or leaked one row's random numbers
into another would shift the frequencies; the negative control (an agent's samples against another agent's
probabilities) shows that the test has the power to see such a shift. Seeds are fixed, so the outcome is too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, PreTrainedTokenizerBase

from trl_marl.team import AgentTeam
from trl_marl.toy import build_toy_model

PROMPTS = ("T=10:", "T=07:")
ROWS_PER_PROMPT = 24  # per agent and call
CALLS = 60  # 1440 completions per (agent, prompt)


def completion_probability(logits_model: Any, prompt_ids: list[int], completion: tuple[int, ...],
                           temperature: float) -> float:
    """P(completion | prompt) under `logits_model` (a callable: input ids -> logits), by teacher forcing."""
    ids = torch.tensor([prompt_ids + list(completion)])
    with torch.no_grad():
        logits = logits_model(ids)[0, len(prompt_ids) - 1: -1].double() / temperature
    return float(torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion).unsqueeze(1)).sum().exp())


def chi_square_p(observed: Counter, probability: dict[tuple[int, ...], float]) -> float:
    """p-value of a chi-square goodness-of-fit test; completions expected fewer than 5 times (and the mass of the
    completions never drawn) are pooled into one cell."""
    n = sum(observed.values())
    statistic, cells, pooled_observed, pooled_expected = 0.0, 0, 0, n * (1.0 - sum(probability.values()))
    for completion, count in observed.items():
        expected = n * probability[completion]
        if expected >= 5:
            statistic += (count - expected) ** 2 / expected
            cells += 1
        else:
            pooled_observed += count
            pooled_expected += expected
    if pooled_expected > 0:
        statistic += (pooled_observed - pooled_expected) ** 2 / pooled_expected
        cells += 1
    assert cells >= 3, "too few cells for a chi-square test"
    return float(torch.special.gammaincc(torch.tensor((cells - 1) / 2.0, dtype=torch.float64),
                                         torch.tensor(statistic / 2.0, dtype=torch.float64)))


def draw(team: AgentTeam, generation_config: GenerationConfig) -> list[dict[str, Counter]]:
    """Per agent and prompt, how often each completion (token ids, up to and including EOS) was sampled."""
    counts: list[dict[str, Counter]] = [{p: Counter() for p in PROMPTS} for _ in range(team.num_agents)]
    prompts = [p for p in PROMPTS for _ in range(ROWS_PER_PROMPT)]
    torch.manual_seed(1234)
    for _ in range(CALLS):
        for agent, (_, completions) in enumerate(team.generate([prompts] * team.num_agents, generation_config)):
            for prompt, completion in zip(prompts, completions):
                counts[agent][prompt][tuple(completion)] += 1
    return counts


def check_team(team: AgentTeam, tokenizer: PreTrainedTokenizerBase, logits_of: Any, temperature: float) -> None:
    """Each agent's samples fit its own exact distribution (p > 1e-5: a correct sampler fails a check once in 10^5
    random streams); agent 0's samples do not fit agent 1's (p < 1e-8; observed: 1e-13 and below)."""
    generation_config = GenerationConfig(max_new_tokens=3, do_sample=True, temperature=temperature, top_k=0,
                                         top_p=1.0, pad_token_id=tokenizer.pad_token_id,
                                         eos_token_id=tokenizer.eos_token_id)
    counts = draw(team, generation_config)
    for prompt in PROMPTS:
        prompt_ids = tokenizer(prompt)["input_ids"]
        exact = [{c: completion_probability(logits_of(a), prompt_ids, c, temperature) for c in counts[a][prompt]}
                 for a in range(team.num_agents)]
        for agent in range(team.num_agents):
            p = chi_square_p(counts[agent][prompt], exact[agent])
            assert p > 1e-5, f"agent {agent}, prompt {prompt!r}: samples do not fit its policy (p = {p:.2e})"
        swapped = {c: completion_probability(logits_of(1), prompt_ids, c, temperature) for c in counts[0][prompt]}
        assert chi_square_p(counts[0][prompt], swapped) < 1e-8, "the test cannot tell the two agents apart"


def sharpened_toy(tokenizer: PreTrainedTokenizerBase, seed: int) -> Any:
    """A random toy Qwen2 whose next-token distributions are far from uniform (larger output weights), so that a
    few thousand samples cover its likely completions and a wrong sampler shows."""
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=seed)
    with torch.no_grad():
        model.model.norm.weight.mul_(6.0)
    return model.eval()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.slow
def test_models_team_samples_each_agents_distribution(tokenizer, temperature) -> None:
    models = [sharpened_toy(tokenizer, seed) for seed in (0, 1)]
    team = AgentTeam.build(models, 2, mode="models", processing_class=tokenizer)

    def logits_of(agent: int) -> Any:
        return lambda ids: models[agent](ids).logits

    check_team(team, tokenizer, logits_of, temperature)


@pytest.mark.slow
def test_adapters_team_samples_each_adapters_distribution(tokenizer) -> None:
    """Two LoRA adapters of one base model, generated in one mixed-adapter batch (row slices)."""
    base = sharpened_toy(tokenizer, 0)
    torch.manual_seed(2)
    peft_config = LoraConfig(r=4, lora_alpha=128, target_modules=["q_proj", "v_proj", "up_proj"], lora_dropout=0.0,
                             init_lora_weights=False)
    team = AgentTeam.build(base, 2, mode="adapters", peft_config=peft_config, processing_class=tokenizer)
    peft_model = team.models[0]
    names = list(team.agent_adapter)
    assert len(set(names)) == 2

    def logits_of(agent: int) -> Any:
        peft_model.eval()  # PEFT takes per-row adapter names in eval mode only
        return lambda ids: peft_model(input_ids=ids, adapter_names=[names[agent]] * ids.size(0)).logits

    check_team(team, tokenizer, logits_of, 1.0)
