"""`TransformersBackend.behaviour_logprobs`: the decoding loop's own log-probability of each token it draws equals
the trainers' log-probability forward of the same completion (log-softmax of the raw logits / `team.temperature`),
whatever processors shaped the draw; a batch that `model.generate` decodes returns none (the rollout worker of
asynchronous rollouts then runs the forward)."""

from __future__ import annotations

import torch
from peft import LoraConfig
from transformers import GenerationConfig

from trl_marl.team import AgentBatch, AgentTeam, pad_left, pad_right, tokenize_prompts
from trl_marl.team.generation import TransformersBackend
from trl_marl.toy import build_toy_model, build_toy_tokenizer

PROMPTS = ["Q:12+3=A:", "T:5?", "Q:45+67=A:"]


def team_and_prompts() -> tuple[AgentTeam, list[list[list[int]]]]:
    torch.manual_seed(0)
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, num_heads=2, seed=0)
    team = AgentTeam.build(model, 2, processing_class=tokenizer,
                           peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():  # two different policies
        for name, param in team.models[0].named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    prompt_ids = [tokenize_prompts(tokenizer, PROMPTS) * 2, tokenize_prompts(tokenizer, PROMPTS[:2]) * 2]
    return team, prompt_ids


def sampled(team: AgentTeam) -> GenerationConfig:
    tokenizer = team.tokenizers[0]
    return GenerationConfig(do_sample=True, temperature=0.7, top_k=5, repetition_penalty=1.3, max_new_tokens=8,
                            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)


def test_decoding_logps_are_the_trainers_forward() -> None:
    team, prompt_ids = team_and_prompts()
    team.temperature = 0.7
    backend = TransformersBackend()
    backend.behaviour_logprobs = True
    generation = backend.generate(team, prompt_ids, sampled(team))  # one mixed-adapter batch, shared prefills
    assert generation.sampling_logps is not None
    pad = team.tokenizers[0].pad_token_id
    checked = 0
    for a in range(team.num_agents):
        completions = generation.completion_ids[a]
        assert [len(row) for row in generation.sampling_logps[a]] == [len(row) for row in completions]
        p_ids, p_mask = pad_left(prompt_ids[a], pad)
        c_ids, c_mask = pad_right(completions, pad)
        forward = team.policy_logps(a, AgentBatch(p_ids, p_mask, c_ids, c_mask))
        for i, row in enumerate(generation.sampling_logps[a]):
            torch.testing.assert_close(torch.tensor(row), forward[i, : len(row)], rtol=0, atol=1e-5)
            checked += len(row)
    # the draw was truncated (top-k 5) and penalised, yet these are the untruncated policy's log-probabilities
    assert checked > 20


def test_generate_itself_returns_no_behaviour_logps() -> None:
    team, prompt_ids = team_and_prompts()
    team.lean_decode = False  # every batch through `model.generate`
    backend = TransformersBackend()
    backend.behaviour_logprobs = True
    generation = backend.generate(team, prompt_ids, sampled(team))
    assert generation.sampling_logps is None and all(generation.completion_ids)
    backend.behaviour_logprobs = False  # the default: none either, with the lean loop
    team.lean_decode = True
    assert backend.generate(team, prompt_ids, sampled(team)).sampling_logps is None
