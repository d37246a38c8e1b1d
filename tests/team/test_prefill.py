"""Shared prompt prefill (`trl_marl.team.generation.prefill`, `AgentTeam.share_prompt_prefill`): one prefill per
distinct (prompt, weights), the same completions as one prefill per row."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, PreTrainedTokenizerBase

from trl_marl import MAGRPOConfig
from trl_marl.team import AgentTeam, pad_left, tokenize_prompts
from trl_marl.team.generation.prefill import group_identical_rows, prefill_sharing_unsupported, shared_prefill_cache
from trl_marl.team.quantized import repacked_4bit_layers
from trl_marl.toy import build_toy_model, make_toy_model

G = 3
# Prompts of different lengths (left padding), each sampled G times; agent 1 sees one of agent 0's prompts.
AGENT_PROMPTS = [["Q:12+3=A:", "T:5?"], ["Q:12+3=A:", "Q:45+67=A: go"]]
GREEDY = GenerationConfig(do_sample=False, max_new_tokens=12)
# every sampling setting that acts on the logits or on the ids so far
SAMPLED = GenerationConfig(do_sample=True, max_new_tokens=12, temperature=1.3, top_k=20, top_p=0.95, min_p=0.02,
                           repetition_penalty=1.3)


def make_team(mode: str, tokenizer: PreTrainedTokenizerBase, model=None) -> AgentTeam:
    torch.manual_seed(0)
    # non-zero LoRA B: the two agents' adapters (and so their keys and values) really differ
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj"], lora_dropout=0.0,
                             init_lora_weights=False) if mode == "adapters" else None
    model = model if model is not None else build_toy_model(tokenizer, hidden_size=32, num_layers=2)
    return AgentTeam.build(model, 2, mode=mode, peft_config=peft_config, processing_class=tokenizer)


def prompts() -> list[list[str]]:
    return [[p for p in agent for _ in range(G)] for agent in AGENT_PROMPTS]


class RowCounter:
    """Records the (rows, tokens) of every forward of a model (at its embedding layer)."""

    def __init__(self, model: torch.nn.Module) -> None:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.shapes: list[tuple[int, int]] = []
        self.handle = base.get_input_embeddings().register_forward_pre_hook(
            lambda _module, args: self.shapes.append(tuple(args[0].shape)))

    def prompt_forwards(self) -> list[tuple[int, int]]:
        return [s for s in self.shapes if s[1] > 1]


def generate_both_ways(team: AgentTeam, config: GenerationConfig, seed: int = 1) -> list:
    results = []
    for share in (False, True):
        team.share_prompt_prefill = share
        torch.manual_seed(seed)
        results.append(team.generate(prompts(), config))
    team.share_prompt_prefill = True
    return results


# ---------------------------------------------------------------------------------------------------- grouping
def test_group_identical_rows_by_ids_and_tag() -> None:
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [0, 5, 6], [1, 5, 6]])
    groups = group_identical_rows(ids)
    assert groups.first_rows.tolist() == [0, 2, 4]
    assert groups.row_to_group.tolist() == [0, 0, 1, 0, 2]
    tagged = group_identical_rows(ids, tags=["a", "b", "a", "a", "a"])
    assert tagged.first_rows.tolist() == [0, 1, 2, 4]
    assert tagged.row_to_group.tolist() == [0, 1, 2, 0, 3]
    with pytest.raises(ValueError, match="2 tags for 5 rows"):
        group_identical_rows(ids, tags=["a", "b"])


# ---------------------------------------------------------------------------------------------------- equivalence
@pytest.mark.parametrize("mode", ["adapters", "models", "shared"])
def test_sharing_gives_the_same_completions(mode: str, tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team(mode, tokenizer)
    for config in (GREEDY, SAMPLED):
        plain, shared = generate_both_ways(team, config)
        assert shared == plain, config.do_sample
    # the samples are not all alike, some stop at EOS before max_new_tokens and some run to it
    completions = [c for _, agent in plain for c in agent]
    assert len({tuple(c) for c in completions}) > 4
    lengths = {len(c) for c in completions}
    assert min(lengths) < SAMPLED.max_new_tokens and max(lengths) == SAMPLED.max_new_tokens


@pytest.mark.parametrize("mode, prefill_rows", [("adapters", [4]), ("models", [2, 2]), ("shared", [3])])
def test_one_prefill_per_distinct_prompt_and_weights(mode: str, prefill_rows: list[int],
                                                     tokenizer: PreTrainedTokenizerBase) -> None:
    """12 rows (2 agents x 2 prompts x G=3), 3 distinct prompts (one seen by both agents). `adapters`: one model, 4
    distinct (prompt, adapter); `models`: 2 distinct prompts per agent's model; `shared`: 3, one of them for both."""
    team = make_team(mode, tokenizer)
    rows_per_model = 12 // len(team.models)
    widths = [max(len(ids) for a in range(2) if team.agent_model[a] == m
                  for ids in tokenize_prompts(tokenizer, AGENT_PROMPTS[a])) for m in range(len(team.models))]
    counters = [RowCounter(m) for m in team.models]
    team.generate(prompts(), GREEDY)
    for counter, rows, width in zip(counters, prefill_rows, widths):
        # one prefill over the distinct rows without their last token, then every row from the expanded cache
        assert counter.prompt_forwards() == [(rows, width - 1)]
        assert counter.shapes[1] == (rows_per_model, 1)
        counter.handle.remove()
    team.share_prompt_prefill = False
    counters = [RowCounter(m) for m in team.models]
    team.generate(prompts(), GREEDY)
    assert [c.prompt_forwards() for c in counters] == [[(rows_per_model, w)] for w in widths]


def test_per_step_logits_match_with_mixed_adapters(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    model = team.models[0].eval()
    rows = [ids for agent in prompts() for ids in tokenize_prompts(tokenizer, agent)]
    names = [team.agent_adapter[a] for a in range(2) for _ in range(len(prompts()[a]))]
    ids, mask = pad_left(rows, tokenizer.pad_token_id)
    config = GenerationConfig(do_sample=False, max_new_tokens=8, output_logits=True, return_dict_in_generate=True)
    plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, adapter_names=names)
    cache = shared_prefill_cache(model, ids, mask, config, names)
    assert cache is not None and cache.get_seq_length() == ids.size(1) - 1
    shared = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, adapter_names=names,
                            past_key_values=cache)
    assert torch.equal(shared.sequences, plain.sequences)
    assert len(shared.logits) == len(plain.logits) == 8
    for step_shared, step_plain in zip(shared.logits, plain.logits):
        torch.testing.assert_close(step_shared, step_plain, atol=1e-5, rtol=1e-5)
    # the adapters differ: a prompt both agents see gets different logits from each
    assert (plain.logits[0][0] - plain.logits[0][G * 2]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------------- when not
def test_nothing_to_share_or_settings_that_rule_it_out(tokenizer: PreTrainedTokenizerBase) -> None:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    ids, mask = pad_left([[5, 6, 7], [5, 6, 7]], tokenizer.pad_token_id)
    assert shared_prefill_cache(model, ids, mask, GREEDY) is not None
    distinct, distinct_mask = pad_left([[5, 6, 7], [5, 6, 8]], tokenizer.pad_token_id)
    assert shared_prefill_cache(model, distinct, distinct_mask, GREEDY) is None
    assert shared_prefill_cache(model, ids[:, -1:], mask[:, -1:], GREEDY) is None  # one-token prompts
    assert prefill_sharing_unsupported(model, GREEDY) is None
    for settings, reason in [({"num_beams": 2}, "beam search"),
                             ({"num_return_sequences": 2, "do_sample": True}, "several sequences"),
                             ({"use_cache": False}, "use_cache=False"),
                             ({"cache_implementation": "static"}, "cache_implementation='static'")]:
        config = GenerationConfig(max_new_tokens=4, **settings)
        assert reason in prefill_sharing_unsupported(model, config)
        assert shared_prefill_cache(model, ids, mask, config) is None
    # an unset field takes the model's own generation config, as in `generate`
    model.generation_config.num_beams = 2
    assert "beam search" in prefill_sharing_unsupported(model, GREEDY)
    model.generation_config.num_beams = 1
    model.generation_config.cache_implementation = "static"
    assert prefill_sharing_unsupported(model, GREEDY) == "cache_implementation='static'"
    assert prefill_sharing_unsupported(model, GenerationConfig(max_new_tokens=4, cache_implementation="dynamic"))
    model.generation_config.cache_implementation = None
    model.gradient_checkpointing_enable()
    assert prefill_sharing_unsupported(model, GREEDY) is None  # eval mode: the cache is kept
    model.train()
    assert prefill_sharing_unsupported(model, GREEDY) == "activation checkpointing in train mode"


def test_4bit_team_shares_prefill_in_one_batch(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    """A 4-bit model on CPU decodes like any other: in eval mode, both agents' rows in one mixed-adapter batch with
    one shared prefill, and the team keeps bitsandbytes from repacking its layers (`team.quantized`)."""
    pytest.importorskip("bitsandbytes")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    # hidden 64: bitsandbytes' CPU kernel repacks 4-bit weights in blocks of 64 input features
    path = make_toy_model(tmp_path / "toy", task="addition", hidden_size=64, num_layers=1, pretrain_steps=0)
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=BitsAndBytesConfig(load_in_4bit=True),
                                                 device_map="cpu")
    team = make_team("adapters", tokenizer, model=model)
    team.train()
    counter = RowCounter(team.models[0])
    for config in (GREEDY, SAMPLED):
        plain, shared = generate_both_ways(team, config)
        assert shared == plain
    assert counter.prompt_forwards()[-1:] == [(4, 13)]  # the shared run: the 4 distinct (prompt, adapter) at once
    assert team.models[0].training and repacked_4bit_layers(team.models[0]) == []

    # checkpointed layers keep the KV cache in eval mode: the samples are the same with checkpointing on
    samples = {}
    for checkpointing in (False, True):
        if checkpointing:
            team.activation_checkpointing_enable()
        torch.manual_seed(5)
        samples[checkpointing] = team.generate(prompts(), SAMPLED)
    assert samples[True] == samples[False]
    assert any(getattr(m, "gradient_checkpointing", False) for m in team.models[0].modules())


@pytest.mark.parametrize("share", [True, False])
def test_magrpo_config_switch_and_rollouts(share: bool, tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    """`MAGRPOConfig.share_prompt_prefill` reaches the team, and a rollout (G=4 samples per node) is the same either
    way."""
    from datasets import Dataset

    from trl_marl import MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_generations=4, per_device_train_batch_size=8,
                        max_completion_length=6, report_to="none", save_strategy="no", disable_tqdm=True,
                        share_prompt_prefill=share)
    trainer = MAGRPOTrainer(model=build_toy_model(tokenizer, hidden_size=32, num_layers=1),
                            processing_class=tokenizer, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=args, train_dataset=Dataset.from_dict({"target": [10, 12] * 4}))
    assert trainer.team.share_prompt_prefill is share
    counter = RowCounter(trainer.team.models[0])
    rows = [{"target": 10}, {"target": 12}]
    torch.manual_seed(0)
    rollout = trainer.joint_rollout.run(rows)
    # a team of 2 models: agent 0's model gets 2 nodes x G=4 rows, one prefill row per node when shared
    assert counter.prompt_forwards()[0][0] == (2 if share else 8)
    trainer.team.share_prompt_prefill = not share
    torch.manual_seed(0)
    other = trainer.joint_rollout.run(rows)
    assert [t.completion_ids for t in rollout.turns] == [t.completion_ids for t in other.turns]
    assert torch.equal(rollout.turns[0].rewards, other.turns[0].rewards)
