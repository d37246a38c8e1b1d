"""Equal runs of rows under adapters of one shape: every LoRA layer applies all of them with one batched matmul over
the stacked A and B matrices (`trl_marl.team.mixed_adapters._stacked_forward`), so the kernels per layer do not grow
with the number of agents; other layouts keep the run-by-run slices.

Compared with PEFT's own forwards (its mixed batch in eval mode; each agent's adapter alone on its rows in train mode)
and, with LoRA dropout on, with the run-by-run forward, which draws the same masks.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import PreTrainedTokenizerBase

from trl_marl.team import mixed_adapters
from trl_marl.team.mixed_adapters import _sliced_forward, _stacked_forward, sliced_adapter_rows
from trl_marl.toy import build_toy_model

TARGETS = ["q_proj", "v_proj", "up_proj"]


def lora_model(tokenizer: PreTrainedTokenizerBase, adapters: int = 4, dropout: float = 0.0,
               **other: Any) -> Any:
    """A toy Qwen2 with `adapters` LoRA adapters a0, a1, ... (non-zero B: they differ), in eval mode; `other` maps an
    adapter name to LoraConfig changes for it alone."""
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=dropout, init_lora_weights=False)
    model = get_peft_model(build_toy_model(tokenizer, hidden_size=32, num_layers=2), config, adapter_name="a0")
    for index in range(1, adapters):
        name = f"a{index}"
        own = copy.deepcopy(config)
        for key, value in other.get(name, {}).items():
            setattr(own, key, value)
        model.add_adapter(name, own)
    return model.eval()


def batch(rows: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(rows)
    ids = torch.randint(3, 20, (rows, 6), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def layer_forwards(model: Any, names: list[str], training: bool = False) -> set[Any]:
    """The functions the LoRA layers run for this layout."""
    with sliced_adapter_rows(model, names, training=training) as sliced:
        assert sliced
        return {m.forward.func for m in model.modules() if "forward" in vars(m)}


@pytest.mark.parametrize("agents", [1, 2, 4])
def test_equal_runs_take_one_batched_matmul_with_peft_values(tokenizer, agents) -> None:
    model = lora_model(tokenizer)
    names = [f"a{a}" for a in range(agents) for _ in range(12 // agents)]
    inputs = batch(12)
    assert layer_forwards(model, names) == {_stacked_forward}
    with torch.no_grad():
        expected = model(**inputs, adapter_names=names).logits
        with sliced_adapter_rows(model, names):
            logits = model(**inputs).logits
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("layout", "other"), [
    ("uneven runs", {}),
    ("base rows", {}),
    ("another rank", {"a1": {"r": 8}}),
    ("another dropout", {"a1": {"lora_dropout": 0.2}}),
    ("LoRA bias", {"a1": {"lora_bias": True}}),
])
def test_other_layouts_run_adapter_by_adapter(tokenizer, layout, other) -> None:
    model = lora_model(tokenizer, adapters=2, **other)
    names = {"uneven runs": ["a0"] * 2 + ["a1"] * 4, "base rows": ["a0"] * 3 + ["__base__"] * 3}.get(
        layout, ["a0"] * 3 + ["a1"] * 3)
    assert layer_forwards(model, names) == {_sliced_forward}
    with torch.no_grad():
        expected = model(**batch(6), adapter_names=names).logits
        with sliced_adapter_rows(model, names):
            logits = model(**batch(6)).logits
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)


def test_the_switch_turns_stacking_off(tokenizer, monkeypatch) -> None:
    model = lora_model(tokenizer, adapters=2)
    monkeypatch.setattr(mixed_adapters, "STACK_ADAPTERS", False)
    assert layer_forwards(model, ["a0"] * 3 + ["a1"] * 3) == {_sliced_forward}


def gradients(model: Any, names: list[str], inputs: dict[str, torch.Tensor], stack: bool,
              monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    monkeypatch.setattr(mixed_adapters, "STACK_ADAPTERS", stack)
    for name, param in model.named_parameters():  # every adapter trains (PEFT marks only the active one)
        param.requires_grad_("lora_" in name)
    model.zero_grad()
    torch.manual_seed(7)
    with sliced_adapter_rows(model, names, training=True):
        logits = model(**inputs).logits
    (logits.float().square().mean()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def test_training_with_dropout_equals_the_run_by_run_forward(tokenizer, monkeypatch) -> None:
    """In train mode with LoRA dropout, one dropout over all rows draws the masks the runs drew one after the other
    (one random stream on a CPU), so the logits and every adapter's gradients are the run-by-run forward's."""
    model = lora_model(tokenizer, adapters=2, dropout=0.1).train()
    names = ["a0"] * 4 + ["a1"] * 4
    inputs = batch(8)
    assert layer_forwards(model, names, training=True) == {_stacked_forward}
    stacked_logits, stacked = gradients(model, names, inputs, True, monkeypatch)
    sliced_logits, sliced = gradients(model, names, inputs, False, monkeypatch)
    torch.testing.assert_close(stacked_logits, sliced_logits)
    assert stacked.keys() == sliced.keys() and any("a1" in n for n in stacked)
    for name in stacked:
        torch.testing.assert_close(stacked[name], sliced[name])
    # dropout really drew masks: another seed gives other logits
    torch.manual_seed(8)
    with sliced_adapter_rows(model, names, training=True):
        assert not torch.allclose(model(**inputs).logits, stacked_logits)


def test_training_gradients_are_each_agents_own(tokenizer, monkeypatch) -> None:
    """Without dropout, the stacked training forward gives each adapter the gradient of PEFT's forward of that adapter
    alone on its own rows."""
    model = lora_model(tokenizer, adapters=2).train()
    names = ["a0"] * 4 + ["a1"] * 4
    inputs = batch(8)
    logits, ours = gradients(model, names, inputs, True, monkeypatch)
    for agent, rows in (("a0", slice(0, 4)), ("a1", slice(4, 8))):
        model.zero_grad()
        model.set_adapter(agent)
        own = model(**{k: v[rows] for k, v in inputs.items()}).logits
        torch.testing.assert_close(own.detach(), logits[rows], rtol=1e-6, atol=1e-6)
        # the same loss restricted to these rows (the mean over all rows scales it by 4/8)
        (own.float().square().sum() / logits.numel()).backward()
        for name, param in model.named_parameters():
            if f".{agent}." in name and param.grad is not None:
                torch.testing.assert_close(param.grad, ours[name], rtol=1e-5, atol=1e-7)
