"""A `models` team whose agents end at different tokens: each agent stops at its own EOS (issue 54, item 13).

Agent 0 is the toy tokenizer (EOS `</s>`, id 2); agent 1 the same with a special token `<|end|>` added as its EOS, so
id 2 is an ordinary token for agent 1. Each model's LM head is replaced by a constant distribution: agent 0 writes
`a` or its EOS, agent 1 writes id 2 or its own EOS, half and half. Agent 1 must write id 2 several times and stop at
`<|end|>`; before the fix every agent got agent 0's EOS and agent 1 stopped at its first id 2.
"""

from __future__ import annotations

import torch
from datasets import Dataset
from torch import nn

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.team import AgentTeam
from trl_marl.team.generation.base import agent_generation_config
from trl_marl.toy import build_toy_model, build_toy_tokenizer
from trl_marl.trainers.magrpo.sampling_config import generation_config

MAX_NEW = 24


def _constant_head(model: nn.Module, tokens: list[int]) -> nn.Module:
    """`model` with an LM head whose logits ignore the input: 0 at `tokens`, -1e4 elsewhere (uniform over them)."""
    vocab, hidden = model.lm_head.weight.shape
    head = nn.Linear(hidden, vocab, bias=True)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.fill_(-1e4)
        head.bias[tokens] = 0.0
    model.config.tie_word_embeddings = False
    model.lm_head = head
    return model


def _team() -> tuple[AgentTeam, list[int]]:
    tok0, tok1 = build_toy_tokenizer(), build_toy_tokenizer()
    tok1.add_special_tokens({"eos_token": "<|end|>"})
    eos0, eos1 = tok0.eos_token_id, tok1.eos_token_id
    assert eos0 == 2 and eos1 != eos0
    letter = tok0.convert_tokens_to_ids("a")
    models = [_constant_head(build_toy_model(tok0, seed=0), [letter, eos0]),
              _constant_head(build_toy_model(tok1, seed=1), [eos0, eos1])]
    return AgentTeam.build(models, num_agents=2, mode="models", processing_class=[tok0, tok1]), [eos0, eos1]


def _args(tmp_path, **overrides) -> MAGRPOConfig:
    kwargs = dict(output_dir=str(tmp_path / "out"), num_agents=2, num_generations=8, per_device_train_batch_size=8,
                  max_completion_length=MAX_NEW, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
                  max_steps=1, team_mode="models")
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def test_each_agent_samples_to_its_own_eos(tmp_path) -> None:
    team, (eos0, eos1) = _team()
    config = generation_config(_args(tmp_path), team)
    assert config.eos_token_id is None  # the agents' EOS differ: none for the whole team
    assert agent_generation_config(team, 0, config).eos_token_id == eos0
    assert agent_generation_config(team, 1, config).eos_token_id == eos1
    assert agent_generation_config(team, 1, config).pad_token_id == team.tokenizers[1].pad_token_id
    torch.manual_seed(0)
    prompts = [["1+2="] * 16, ["3+4="] * 16]
    out = team.generate(prompts, config)
    for ids in out.completion_ids[0]:
        assert eos0 in ids and ids[-1] == eos0 and ids.count(eos0) == 1
    # agent 1 writes id 2 (agent 0's EOS, an ordinary token for it) and goes on to its own EOS
    assert sum(ids.count(eos0) for ids in out.completion_ids[1]) > 8
    for ids in out.completion_ids[1]:
        assert ids[-1] == eos1 and ids.count(eos1) == 1, ids


def test_an_explicit_eos_applies_to_every_agent(tmp_path) -> None:
    team, (eos0, _) = _team()
    config = generation_config(_args(tmp_path, generation_kwargs={"eos_token_id": eos0}), team)
    assert agent_generation_config(team, 1, config).eos_token_id == eos0


def test_each_agents_loss_mask_ends_at_its_own_eos(tmp_path) -> None:
    team, (eos0, eos1) = _team()
    trainer = MAGRPOTrainer(model=team, reward_funcs=lambda completions, **kw: [float(len(c)) for c in completions],
                            env=TargetSumEnv(2), args=_args(tmp_path, mask_truncated_completions=True),
                            train_dataset=Dataset.from_dict({"target": [10] * 8}))
    torch.manual_seed(0)
    (batch,) = trainer._make_batches([[{"target": 10}]], "train")
    for a, eos in enumerate((eos0, eos1)):
        agent = batch["batches"][a]
        ids, mask = agent.completion_ids.cpu(), agent.loss_mask.cpu()
        for row, row_mask in zip(ids, mask):
            length = int(row_mask.sum())
            assert length > 0  # ended at its own EOS: not masked as truncated
            assert int(row[length - 1]) == eos and eos not in row[: length - 1].tolist()
            assert (row_mask[:length] == 1).all() and (row_mask[length:] == 0).all()
    assert int((batch["batches"][1].completion_ids == eos0).sum()) > 8  # agent 1 wrote id 2 and went on


def test_ppo_stops_each_agent_at_its_own_eos(tmp_path) -> None:
    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer

    team, (eos0, eos1) = _team()
    args = MultiAgentPPOConfig(output_dir=str(tmp_path / "ppo"), num_agents=2, total_episodes=8, report_to="none",
                               save_strategy="no", response_length=MAX_NEW, stop_token="eos", seed=0)
    trainer = MultiAgentPPOTrainer(args=args, model=team, reward_funcs=lambda completions, **kw: [0.0] * len(
        completions), env=TargetSumEnv(2), train_dataset=Dataset.from_dict({"target": [10] * 8}))
    assert trainer.agent_stop_token_ids == [eos0, eos1] and trainer.stop_token_id is None
    assert [trainer.team.base_model_of(a).generation_config.eos_token_id for a in range(2)] == [eos0, eos1]
    torch.manual_seed(0)
    rollouts = trainer.rollout([{"target": 10}] * 8)
    for a, eos in enumerate((eos0, eos1)):
        ro = rollouts[a]
        for row, length in zip(ro.postprocessed.cpu(), ro.sequence_lengths.cpu()):
            assert int(row[length]) == eos and eos not in row[:length].tolist()  # the last real token: its EOS
    assert int((rollouts[1].postprocessed == eos0).sum()) > 4  # agent 1 wrote id 2 and went on
