"""`trl_marl.legacy`: the classic PPO API (TRL <= 0.11) on a toy model.

The numerical comparison with TRL 0.11.4 itself needs its own virtualenv: `benchmarks/parity/bench_legacy_peer.py`.
"""

from __future__ import annotations

import os

import pytest
import torch

from trl_marl.legacy import (
    AdaptiveKLController,
    AutoModelForCausalLMWithValueHead,
    FixedKLController,
    LengthSampler,
    PPOConfig,
    PPOTrainer,
    create_reference_model,
)
from trl_marl.team import load_tokenizer

# Every key TRL 0.11.4's `PPOTrainer.step` returns (read from its `step`, `loss` and `record_step_stats`).
TRL_011_STATS_KEYS = {
    "objective/kl", "objective/kl_dist", "objective/logprobs", "objective/ref_logprobs", "objective/kl_coef",
    "objective/entropy", "ppo/mean_non_score_reward", "ppo/mean_scores", "ppo/std_scores",
    "tokens/queries_len_mean", "tokens/queries_len_std", "tokens/queries_dist", "tokens/responses_len_mean",
    "tokens/responses_len_std", "tokens/responses_dist", "ppo/loss/policy", "ppo/loss/value", "ppo/loss/total",
    "ppo/policy/entropy", "ppo/policy/approxkl", "ppo/policy/policykl", "ppo/policy/clipfrac",
    "ppo/policy/advantages", "ppo/policy/advantages_mean", "ppo/policy/ratio", "ppo/returns/mean",
    "ppo/returns/var", "ppo/val/vpred", "ppo/val/error", "ppo/val/clipfrac", "ppo/val/mean", "ppo/val/var",
    "ppo/val/var_explained", "ppo/learning_rate", "time/ppo/forward_pass", "time/ppo/compute_rewards",
    "time/ppo/compute_advantages", "time/ppo/optimize_step", "time/ppo/calc_stats", "time/ppo/total",
}


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture()
def tokenizer(addition_model_dir: str):  # noqa: ANN201 - a transformers tokenizer
    return load_tokenizer(addition_model_dir)


def queries_of(tokenizer, texts: list[str]) -> list[torch.Tensor]:  # noqa: ANN001
    return [torch.tensor(tokenizer(t)["input_ids"]) for t in texts]


GEN_KWARGS = {"min_length": -1, "top_k": 0.0, "top_p": 1.0, "do_sample": True, "max_new_tokens": 4}


# ---------------------------------------------------------------------------------------------------- KL control
def test_kl_controllers_by_hand() -> None:
    ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    ctl.update(current=9.0, n_steps=100)  # e = 9/6 - 1 = 0.5 -> clipped 0.2; 0.2 * (1 + 0.2 * 100 / 1e4) = 0.2004
    assert ctl.value == pytest.approx(0.2004)
    ctl.update(current=6.0, n_steps=100)  # on target: unchanged
    assert ctl.value == pytest.approx(0.2004)
    fixed = FixedKLController(0.05)
    fixed.update(current=100.0, n_steps=8)
    assert fixed.value == 0.05


def test_config_defaults_and_derived_fields() -> None:
    config = PPOConfig(batch_size=8, mini_batch_size=2, gradient_accumulation_steps=2)
    assert (config.learning_rate, config.init_kl_coef, config.target, config.horizon) == (1.41e-5, 0.2, 6.0, 1e4)
    assert (config.ppo_epochs, config.cliprange, config.vf_coef, config.lam, config.adap_kl_ctrl) == (
        4, 0.2, 0.1, 0.95, True)
    assert config.backward_batch_size == 4
    with pytest.raises(ValueError, match="multiple"):
        PPOConfig(batch_size=6, mini_batch_size=4)
    with pytest.raises(ValueError, match="kl_penalty"):
        PPOConfig(kl_penalty="k3")


# ---------------------------------------------------------------------------------------------------- the classic loop
def test_classic_sentiment_style_loop(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    """The gpt2-sentiment notebook's loop, with only the import changed (and a toy reward)."""
    from datasets import Dataset

    config = PPOConfig(model_name=addition_model_dir, learning_rate=1e-3, batch_size=8, mini_batch_size=4,
                       log_with=None)
    texts = [f"{a}+{b}=" for a, b in zip(range(10, 26), range(30, 46))]
    dataset = Dataset.from_dict({"query": texts, "review": texts})
    dataset = dataset.map(lambda row: {"input_ids": tokenizer(row["query"])["input_ids"]})
    dataset.set_format(type="torch")

    def collator(data: list[dict]) -> dict:
        return {key: [d[key] for d in data] for key in data[0]}

    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    ref_model = create_reference_model(model)
    trainer = PPOTrainer(config, model, ref_model, tokenizer, dataset=dataset, data_collator=collator)
    sampler = LengthSampler(2, 5)
    assert "review" not in next(iter(trainer.dataloader))  # unused columns removed, as TRL 0.11 does
    for _, batch in zip(range(2), trainer.dataloader):
        query_tensors = batch["input_ids"]
        response_tensors = [trainer.generate(q, length_sampler=sampler, return_prompt=False,
                                             pad_token_id=tokenizer.pad_token_id, **GEN_KWARGS).squeeze(0)
                            for q in query_tensors]
        batch["response"] = [tokenizer.decode(r) for r in response_tensors]
        rewards = [torch.tensor(float(r.count("1"))) for r in batch["response"]]
        stats = trainer.step(query_tensors, response_tensors, rewards)
        trainer.log_stats(stats, batch, rewards)
    assert TRL_011_STATS_KEYS <= set(stats)
    assert isinstance(stats["objective/kl"], float) and isinstance(stats["ppo/loss/total"], float)
    assert stats["objective/logprobs"].shape[0] == 8
    assert stats["objective/kl_coef"] == pytest.approx(trainer.kl_ctl.value / (1 + min(max(
        stats["objective/kl"] / 6.0 - 1, -0.2), 0.2) * 8 / 1e4))


def test_batched_generate_returns_prompt_and_cuts_at_eos(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=4), model, None, tokenizer)
    queries = queries_of(tokenizer, ["1+2=", "10+20=", "3+4=", "50+5="])
    with_prompt = trainer.generate(queries, batch_size=3, pad_token_id=tokenizer.pad_token_id, **GEN_KWARGS)
    for q, out in zip(queries, with_prompt):
        assert torch.equal(out[: len(q)], q)
        response = out[len(q):].tolist()
        assert tokenizer.eos_token_id not in response[:-1]


# ---------------------------------------------------------------------------------------------------- step()
def test_step_with_queries_and_responses_of_different_lengths(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    """A sample's log-probs do not depend on what it is batched with (padding never leaks in)."""
    queries = queries_of(tokenizer, ["1+2=", "10+20="])
    short, long = torch.tensor([5, 2]), torch.tensor([6, 7, 8, 9, 2])

    def first_logprobs(responses: list[torch.Tensor]) -> torch.Tensor:
        torch.manual_seed(0)
        model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
        trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=1, ppo_epochs=1), model, None, tokenizer)
        stats = trainer.step(queries, responses, [torch.tensor(1.0), torch.tensor(0.0)])
        assert stats["tokens/responses_dist"].tolist() == [len(r) for r in responses]
        return torch.as_tensor(stats["objective/logprobs"])

    mixed = first_logprobs([short, long])
    alone = first_logprobs([short, short])
    torch.testing.assert_close(mixed[0, :2], alone[0, :2])
    assert mixed.shape == (2, 5)


def test_step_rejects_wrong_batch_size(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2), model, None, tokenizer)
    q = queries_of(tokenizer, ["1+2="])
    with pytest.raises(ValueError, match="Batch size"):
        trainer.step(q, [torch.tensor([5])], [torch.tensor(1.0)])


def test_response_masks_exclude_tokens(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1), model, None, tokenizer)
    q = queries_of(tokenizer, ["1+2=", "3+4="])
    responses = [torch.tensor([5, 6, 2]), torch.tensor([7, 2])]
    stats = trainer.step(q, responses, [torch.tensor(1.0), torch.tensor(0.0)],
                         response_masks=[torch.tensor([1, 0, 1]), torch.tensor([1, 1])])
    assert len(stats["ppo/policy/ratio"]) == 4  # 2 + 2 counted tokens, one epoch, one mini-batch


# ---------------------------------------------------------------------------------------------------- value head
def test_value_head_save_load_round_trip(addition_model_dir: str, tmp_path) -> None:  # noqa: ANN001
    from safetensors import safe_open

    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir, v_head_init_strategy="normal")
    model.save_pretrained(tmp_path)
    with safe_open(os.path.join(tmp_path, "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    assert {"v_head.summary.weight", "v_head.summary.bias"} <= keys  # TRL 0.11's layout
    loaded = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    torch.testing.assert_close(loaded.v_head.summary.weight, model.v_head.summary.weight)
    ids = torch.tensor([[1, 5, 6, 7]])
    for a, b in zip(model.eval()(input_ids=ids), loaded.eval()(input_ids=ids)):
        if a is not None:
            torch.testing.assert_close(a, b)


def test_lora_policy_reference_is_adapters_disabled(addition_model_dir: str, tokenizer, tmp_path) -> None:  # noqa: ANN001
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir, peft_config=lora)
    base_before = {n: p.clone() for n, p in model.pretrained_model.get_base_model().named_parameters()
                   if "lora" not in n}
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2), model, None, tokenizer)
    assert trainer.ref_model is None
    q = queries_of(tokenizer, ["1+2=", "3+4=", "5+6=", "7+8="])
    responses = [torch.tensor([5, 2]), torch.tensor([6, 7, 2]), torch.tensor([8, 2]), torch.tensor([9, 9, 2])]
    scores = [torch.tensor(s) for s in (1.0, 0.0, 1.0, 0.0)]
    first = trainer.step(q, responses, scores)
    assert first["objective/kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA B = 0 at init: policy == reference
    second = trainer.step(q, responses, scores)
    assert abs(second["objective/kl"]) > 1e-6
    for n, p in model.pretrained_model.get_base_model().named_parameters():
        if n in base_before:
            torch.testing.assert_close(p, base_before[n])  # the base (the reference) never moves
    trainer.save_pretrained(tmp_path)
    assert os.path.isfile(tmp_path / "adapter_config.json")
    head = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    assert set(head) == {"v_head.summary.weight", "v_head.summary.bias"}  # TRL 0.11's PEFT layout
    loaded = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    assert loaded.is_peft_model
    torch.testing.assert_close(loaded.v_head.summary.bias, model.v_head.summary.bias)


def test_create_reference_model_shares_first_layers(addition_model_dir: str) -> None:
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    ref = create_reference_model(model, num_shared_layers=0)  # share the embeddings only
    assert all(not p.requires_grad for p in ref.parameters())
    emb = "pretrained_model.model.embed_tokens.weight"
    assert ref.get_parameter(emb) is model.get_parameter(emb) and not model.get_parameter(emb).requires_grad
    layer = "pretrained_model.model.layers.0.self_attn.q_proj.weight"
    assert ref.get_parameter(layer) is not model.get_parameter(layer) and model.get_parameter(layer).requires_grad


# ---------------------------------------------------------------------------------------------------- multi-agent
def test_two_agents_one_call_per_agent_or_lists(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    models = [AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir) for _ in range(2)]
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2, learning_rate=1e-2), models, None, tokenizer)
    q = queries_of(tokenizer, ["1+2=", "3+4="])
    r = [torch.tensor([5, 2]), torch.tensor([6, 2])]
    s = [torch.tensor(1.0), torch.tensor(0.0)]
    w1 = models[1].v_head.summary.weight.clone()
    trainer.step(q, r, s, agent_index=0)
    torch.testing.assert_close(models[1].v_head.summary.weight, w1)  # agent 1 untouched
    both = trainer.step([q, q], [r, r], [s, s])
    assert len(both) == 2 and TRL_011_STATS_KEYS <= set(both[1])
    assert not torch.equal(models[1].v_head.summary.weight, w1)
    responses = trainer.generate(q, agent_index=1, return_prompt=False, pad_token_id=0, **GEN_KWARGS)
    assert len(responses) == 2


# ---------------------------------------------------------------------------------------------------- learning
def test_mean_score_goes_up_on_a_toy_reward(addition_model_dir: str, tokenizer) -> None:  # noqa: ANN001
    """Reward: 1 when the response's first token is the digit '1'. The mean score must rise within 20 steps."""
    torch.manual_seed(0)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(addition_model_dir)
    config = PPOConfig(batch_size=16, mini_batch_size=8, learning_rate=3e-3, init_kl_coef=0.01, seed=0)
    trainer = PPOTrainer(config, model, None, tokenizer)
    target = tokenizer.convert_tokens_to_ids("1")
    queries = queries_of(tokenizer, [f"{a}+{a + 3}=" for a in range(10, 26)])
    means = []
    for _ in range(20):
        responses = trainer.generate(queries, batch_size=16, return_prompt=False,
                                     pad_token_id=tokenizer.pad_token_id, **GEN_KWARGS)
        scores = [torch.tensor(float(r[0].item() == target)) for r in responses]
        stats = trainer.step(queries, responses, scores)
        means.append(stats["ppo/mean_scores"])
    assert sum(means[-4:]) / 4 > sum(means[:4]) / 4 + 0.3, means
