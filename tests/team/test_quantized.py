"""A 4-bit team stays trainable on a CPU after eval-mode forwards (`trl_marl.team.quantized`).

bitsandbytes 0.50 repacks a 4-bit layer for its CPU inference kernel (no backward) on the first eval-mode forward
without gradient, on CPUs with AVX512-BF16. These tests need such a CPU: elsewhere nothing is repacked and they skip.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import GenerationConfig

from trl_marl.team import AgentTeam
from trl_marl.team.quantized import keep_4bit_trainable, repacked_4bit_layers
from trl_marl.toy import build_toy_tokenizer, make_toy_model

LORA = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)  # non-zero B: A has grads


@pytest.fixture(scope="module")
def path_4bit(tmp_path_factory: pytest.TempPathFactory) -> str:
    pytest.importorskip("bitsandbytes")
    from bitsandbytes.nn import Linear4bit

    if not getattr(Linear4bit(64, 64), "support_avx512bf16_for_cpu", False):
        pytest.skip("bitsandbytes does not repack 4-bit weights for CPU inference on this CPU (no AVX512-BF16)")
    # hidden 64: the CPU kernel repacks in blocks of 64 input features
    return make_toy_model(tmp_path_factory.mktemp("q4"), task="addition", hidden_size=64, num_layers=1,
                          pretrain_steps=20)


def load_4bit(path: str) -> Any:
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    return AutoModelForCausalLM.from_pretrained(path, quantization_config=BitsAndBytesConfig(load_in_4bit=True),
                                                device_map="cpu")


IDS = torch.tensor([build_toy_tokenizer()("Q:12+3=A:15")["input_ids"]])


def lora_grads(model: Any) -> dict[str, torch.Tensor]:
    model.train()
    model.zero_grad()
    model(input_ids=IDS, labels=IDS).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def eval_forward(model: Any) -> None:
    """What generation, an evaluation or a probe of the forward does: eval mode, no gradient."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(input_ids=IDS)
    model.train(was_training)


def dequantize_4bit(data: torch.Tensor, state: Any) -> torch.Tensor:
    from bitsandbytes.functional import dequantize_4bit as dequantize

    return dequantize(data, state).float()


def relative_change(after: dict[str, torch.Tensor], before: dict[str, torch.Tensor]) -> dict[str, float]:
    return {n: float((after[n] - g).norm() / g.norm()) for n, g in before.items()}


def test_without_the_fix_an_eval_forward_breaks_the_gradients(path_4bit: str) -> None:
    """The failure the team guards against, on a plain PEFT model: one eval forward and the gradients of the LoRA
    layers below are another vector (this test shows the next one can fail)."""
    model = get_peft_model(load_4bit(path_4bit), LORA)
    before = lora_grads(model)
    eval_forward(model)
    assert repacked_4bit_layers(model)
    changes = relative_change(lora_grads(model), before)
    assert max(changes.values()) > 0.5, changes


def test_a_team_model_keeps_its_gradients_after_eval_forwards(path_4bit: str) -> None:
    team = AgentTeam.build(load_4bit(path_4bit), 2, mode="adapters", peft_config=LORA,
                           processing_class=build_toy_tokenizer())
    model = team.models[0]
    before = lora_grads(model)
    eval_forward(model)
    team.generate([["Q:1+2=A:"], ["Q:3+4=A:"]], GenerationConfig(do_sample=False, max_new_tokens=3))
    assert repacked_4bit_layers(model) == []
    after = lora_grads(model)
    for name, grad in before.items():
        torch.testing.assert_close(after[name], grad, msg=name)


def test_a_model_repacked_before_the_team_is_put_back(path_4bit: str, caplog: pytest.LogCaptureFixture) -> None:
    """A model that ran an eval forward before it was handed over (a `generate` call to look at it) is put back into
    the trainable layout; its gradients are those of a fresh model up to the bf16 scales the repacking kept."""
    torch.manual_seed(0)
    fresh = get_peft_model(load_4bit(path_4bit), LORA)
    reference = lora_grads(fresh)

    repacked = load_4bit(path_4bit)
    eval_forward(repacked)
    assert len(repacked_4bit_layers(repacked)) == 7  # q, k, v, o, gate, up, down of the one layer
    torch.manual_seed(0)
    model = get_peft_model(repacked, LORA)
    with caplog.at_level(logging.WARNING, logger="trl_marl.team.quantized"):
        assert keep_4bit_trainable(model) == 7
    assert "7 4-bit layers" in caplog.text and "back in the trainable layout" in caplog.text
    assert repacked_4bit_layers(model) == [] and keep_4bit_trainable(model) == 0
    # the same 4-bit codes, the scales in row order again (bitsandbytes' own inverse leaves them in the kernel's
    # order: 22% off on down_proj, whose rows hold two blocks), up to the bf16 rounding the repacking kept
    for (name, layer), (_, kept) in zip(fresh.named_modules(), model.named_modules()):
        if hasattr(layer, "support_avx512bf16_for_cpu"):
            assert torch.equal(layer.weight.data, kept.weight.data), name
            weight = dequantize_4bit(layer.weight.data, layer.weight.quant_state)
            restored = dequantize_4bit(kept.weight.data, kept.weight.quant_state)
            assert float((restored - weight).norm() / weight.norm()) < 4e-3, name
    changes = relative_change(lora_grads(model), reference)
    assert max(changes.values()) < 0.05, changes
