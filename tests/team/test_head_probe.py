"""Which models take their log-probabilities through the LM head in chunks: a probe of each model's own forward
(`trl_marl.team.head`), not a list of config attributes.

Each family below computes its logits as something other than `get_output_embeddings()(last_hidden_state)` (a soft
cap, a dense + activation + norm before the decoder, a slice of the vocabulary): a tiny random model of each must
keep the full logits, and the team's log-probabilities must equal the log-softmax of the model's own logits. The
probe runs once per model and adapter layout, leaves the random state and every module's train/eval mode as it found
them, and logs its reason once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import pytest
import torch
import transformers
from transformers import PreTrainedModel

from trl_marl.core import selective_log_softmax
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.head import head_path_checked
from trl_marl.toy import build_toy_model
from trl_marl.utils.tokens import pad_left, pad_right

warnings.filterwarnings("ignore")

SMALL = {
    "vocab_size": 40,
    "hidden_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "intermediate_size": 32,
}
BERT_LIKE = {**SMALL, "is_decoder": True, "max_position_embeddings": 32, "pad_token_id": 0}


def recurrent_gemma() -> PreTrainedModel:
    config = transformers.RecurrentGemmaConfig(
        **{**SMALL, "num_hidden_layers": 2},
        lru_width=16,
        head_dim=8,
        num_key_value_heads=1,
        attention_window_size=8,
        block_types=["recurrent", "attention"],
        logits_soft_cap=30.0,
    )
    model = transformers.RecurrentGemmaForCausalLM(config)
    with torch.no_grad():  # large head weights: logits well past the cap of 30
        model.lm_head.weight.mul_(300.0)
    return model


def gemma2_cap_one() -> PreTrainedModel:
    config = transformers.Gemma2Config(**SMALL, head_dim=8, num_key_value_heads=1, final_logit_softcapping=1.0)
    return transformers.Gemma2ForCausalLM(config)


def inkling() -> PreTrainedModel:
    from transformers.models.inkling.configuration_inkling import InklingTextConfig

    config = InklingTextConfig(
        vocab_size=48,
        unpadded_vocab_size=40,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        swa_num_attention_heads=2,
        swa_num_key_value_heads=1,
        swa_head_dim=8,
        intermediate_size=32,
        dense_mlp_idx=1,
        logits_mup_width_multiplier=1.0,
        d_rel=4,
        rel_extent=16,
        max_position_embeddings=64,
        sliding_window_size=8,
    )
    return transformers.InklingForCausalLM(config)


def modernbert_decoder() -> PreTrainedModel:
    config = transformers.ModernBertDecoderConfig(
        **SMALL,
        max_position_embeddings=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    return transformers.ModernBertDecoderForCausalLM(config)


def class_available(name: str) -> bool:
    return hasattr(transformers, name)


# family -> (builder, the transformers class it needs, the words of the reason)
FAMILIES: dict[str, tuple[Callable[[], PreTrainedModel], str, str]] = {
    "recurrent-gemma-soft-cap": (recurrent_gemma, "RecurrentGemmaForCausalLM", "not `lm_head(last_hidden_state)`"),
    "roberta": (
        lambda: transformers.RobertaForCausalLM(transformers.RobertaConfig(**BERT_LIKE)),
        "RobertaForCausalLM",
        "not `lm_head(last_hidden_state)`",
    ),
    "xlm-roberta": (
        lambda: transformers.XLMRobertaForCausalLM(transformers.XLMRobertaConfig(**BERT_LIKE)),
        "XLMRobertaForCausalLM",
        "not `lm_head(last_hidden_state)`",
    ),
    "bert": (
        lambda: transformers.BertLMHeadModel(transformers.BertConfig(**BERT_LIKE)),
        "BertLMHeadModel",
        "not `lm_head(last_hidden_state)`",
    ),
    "electra": (
        lambda: transformers.ElectraForCausalLM(transformers.ElectraConfig(**BERT_LIKE, embedding_size=16)),
        "ElectraForCausalLM",
        "not `lm_head(last_hidden_state)`",
    ),
    "modernbert-decoder": (modernbert_decoder, "ModernBertDecoderForCausalLM", "not `lm_head(last_hidden_state)`"),
    "inkling-unpadded-vocab": (inkling, "InklingForCausalLM", "its logits have shape (2, 4, 40) where"),
    "cohere-logit-scale": (
        lambda: transformers.CohereForCausalLM(
            transformers.CohereConfig(**SMALL, num_key_value_heads=1, logit_scale=0.0625)
        ),
        "CohereForCausalLM",
        "not `lm_head(last_hidden_state)`",
    ),
    "granite-logits-scaling": (
        lambda: transformers.GraniteForCausalLM(
            transformers.GraniteConfig(**SMALL, num_key_value_heads=1, logits_scaling=8.0)
        ),
        "GraniteForCausalLM",
        "not `lm_head(last_hidden_state)`",
    ),
    "gemma2-soft-cap-1": (gemma2_cap_one, "Gemma2ForCausalLM", "not `lm_head(last_hidden_state)`"),
}


def a_batch() -> AgentBatch:
    prompts = [[4, 9, 12, 7], [15, 6]]
    completions = [[8, 11, 5], [13, 10, 14]]
    return AgentBatch(*pad_left(prompts, 0), *pad_right(completions, 0))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_family_whose_logits_are_not_the_head_keeps_the_full_logits(family, tokenizer, caplog):
    build, class_name, reason = FAMILIES[family]
    if not class_available(class_name):
        pytest.skip(f"transformers {transformers.__version__} has no {class_name}")
    torch.manual_seed(0)
    model = build().eval()
    team = AgentTeam.build(model, 1, mode="models", processing_class=tokenizer)
    assert team.logprob_chunk_elements > 0  # the chunked path is on: the model must refuse it
    batch = a_batch()
    with caplog.at_level(logging.WARNING, logger="trl_marl.team.head"):
        logps = team([batch])[0][0]
        old = team.inference_logps_all([batch])[0]
    found = head_path_checked(team.policy(0))
    assert isinstance(found, str) and reason in found
    logged = [r for r in caplog.records if r.name == "trl_marl.team.head"]
    assert len(logged) == 1 and reason in logged[0].getMessage()  # one reason, logged once
    # the team's log-probabilities are the log-softmax of the model's own logits (TRL's layout)
    width = batch.completion_ids.size(1)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -width - 1 : -1]
    expected = selective_log_softmax(logits.float(), batch.completion_ids)
    torch.testing.assert_close(logps.detach(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(old, expected, rtol=1e-5, atol=1e-5)


# families whose logits are `lm_head(last_hidden_state)`: the chunked path
PLAIN: dict[str, Callable[[], PreTrainedModel]] = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, num_key_value_heads=1)),
    "gpt2": lambda: transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=40, n_embd=16, n_layer=1, n_head=2)
    ),
}


@pytest.mark.parametrize("family", list(PLAIN))
def test_a_family_whose_logits_are_the_head_takes_the_chunked_path(family, tokenizer):
    torch.manual_seed(0)
    model = PLAIN[family]().eval()
    team = AgentTeam.build(model, 1, mode="models", processing_class=tokenizer)
    found = head_path_checked(team.policy(0))
    assert not isinstance(found, str), found
    assert found.head is model.get_output_embeddings() and found.vocab_size == 40
    batch = a_batch()
    logps = team([batch])[0][0]
    width = batch.completion_ids.size(1)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, -width - 1 : -1]
    torch.testing.assert_close(
        logps.detach(), selective_log_softmax(logits, batch.completion_ids), rtol=1e-5, atol=1e-5
    )


def test_the_probe_runs_once_in_eval_mode_and_leaves_the_random_state_and_modes(tokenizer):
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=16, num_layers=1, seed=0).train()
    model.model.layers[0].self_attn.attention_dropout = 0.5  # draws dropout masks in train mode
    model.model.norm.eval()  # one module in eval mode inside a train-mode model
    modes = {name: m.training for name, m in model.named_modules()}
    calls: list[bool] = []
    model.model.register_forward_pre_hook(lambda module, args: calls.append(module.training))
    state = torch.get_rng_state()
    found = head_path_checked(model)
    # in train mode the two forwards would draw different dropout masks and disagree
    assert not isinstance(found, str), found
    assert found.head is model.lm_head and found.backbone is model.model and found.vocab_size == 23
    assert calls == [False, False]  # the direct backbone call and the model's own forward, both in eval mode
    assert torch.equal(torch.get_rng_state(), state)
    assert {name: m.training for name, m in model.named_modules()} == modes
    assert head_path_checked(model) is found and len(calls) == 2  # cached: no second probe


def granite(logits_scaling: float) -> PreTrainedModel:
    """A tiny Granite model: its logits are `lm_head(h) / logits_scaling`."""
    config = transformers.GraniteConfig(**SMALL, num_key_value_heads=1, logits_scaling=logits_scaling)
    return transformers.GraniteForCausalLM(config)


@pytest.mark.parametrize("scaling", [1.02, 1.05, 1 / 1.02])
def test_a_small_logit_scale_in_bf16_keeps_the_full_logits(scaling):
    """A 2-5% logit scale is inside the max-difference rounding of bf16 logits of magnitude 64 (8 units of 2**-7),
    but not inside the fitted scale's: the probe must refuse it (on the chunked path it would be off by nats)."""
    torch.manual_seed(0)
    model = granite(scaling).to(torch.bfloat16).eval()
    found = head_path_checked(model)
    assert isinstance(found, str) and "times the head's" in found, found


def test_a_bf16_model_without_a_logit_scale_takes_the_chunked_path():
    torch.manual_seed(0)
    model = granite(1.0).to(torch.bfloat16).eval()
    found = head_path_checked(model)
    assert not isinstance(found, str), found


def test_a_float32_model_probed_first_under_bf16_autocast_is_judged_in_float32():
    """Autocast does not decide the verdict (the probe runs with it off), and the cache keeps one verdict per autocast
    state and dtype: a float32 model with a 2% logit scale is refused under autocast and without it."""
    torch.manual_seed(0)
    model = granite(1.02).eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = head_path_checked(model)
    assert isinstance(under_autocast, str) and "not `lm_head(last_hidden_state)`" in under_autocast
    plain = head_path_checked(model)
    assert isinstance(plain, str) and "not `lm_head(last_hidden_state)`" in plain
    from trl_marl.team.head import _PROBES

    assert len(_PROBES[model]) == 2  # one entry per autocast state
    model.to(torch.bfloat16)
    assert isinstance(head_path_checked(model), str) and len(_PROBES[model]) == 3  # and per dtype


def test_the_fitted_scale_by_hand():
    """`s = <logits, head> / <head, head>`: logits (2, 4, -6) against head logits (1, 2, -3) give 28 / 14 = 2; a zero
    head gives 1 (nothing to fit)."""
    from trl_marl.team.head import _fitted_scale

    assert _fitted_scale(torch.tensor([2.0, 4.0, -6.0]), torch.tensor([1.0, 2.0, -3.0])) == 2.0
    assert _fitted_scale(torch.tensor([[1.0, 3.0]]), torch.tensor([[1.0, 1.0]])) == 2.0  # (1 + 3) / (1 + 1)
    assert _fitted_scale(torch.tensor([1.0]), torch.tensor([0.0])) == 1.0
