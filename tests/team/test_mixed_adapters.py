"""`trl_marl.team.mixed_adapters.sliced_adapter_rows`: PEFT's mixed-adapter forward, on row slices.

Every comparison is with PEFT's own `adapter_names` forward (`model(..., adapter_names=...)`) on the same inputs;
the sliced path runs the same float operations on the same rows, so the logits agree bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear
from transformers import GenerationConfig, PreTrainedTokenizerBase

from trl_marl.team import AgentTeam, mixed_adapters
from trl_marl.team.mixed_adapters import adapter_runs, sliced_adapter_rows, sliced_adapter_rows_unsupported
from trl_marl.toy import build_toy_model

TARGETS = ["q_proj", "v_proj", "up_proj"]


def lora_model(tokenizer: PreTrainedTokenizerBase, names: tuple[str, ...] = ("a0", "a1", "a2"),
               dtype: torch.dtype = torch.float32, **lora: Any) -> Any:
    """A toy Qwen2 with one LoRA adapter per name, all with non-zero B (they really differ), in eval mode."""
    torch.manual_seed(0)
    settings = dict(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.1, init_lora_weights=False)
    config = LoraConfig(**{**settings, **lora})
    model = get_peft_model(build_toy_model(tokenizer, hidden_size=32, num_layers=2).to(dtype), config,
                           adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, copy.deepcopy(config))
    return model.eval()


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerBase) -> Any:
    return lora_model(tokenizer)


def inputs(rows: int) -> dict[str, torch.Tensor]:
    """`rows` left-padded rows of 7 token ids (row i has i % 3 padding tokens)."""
    generator = torch.Generator().manual_seed(rows)
    ids = torch.randint(3, 20, (rows, 7), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(rows):
        mask[row, : row % 3] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def peft_logits(model: Any, names: list[str], batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch, adapter_names=names).logits


@contextmanager
def spies(monkeypatch: pytest.MonkeyPatch, model: Any) -> Iterator[dict[str, list]]:
    """Records the calls of PEFT's mixed-batch forward and the `adapter_names` its hooks were set up with."""
    calls: dict[str, list] = {"mixed": [], "hooks": []}
    mixed, hooks = LoraLinear._mixed_batch_forward, model._enable_peft_forward_hooks

    def spy_mixed(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls["mixed"].append(kwargs.get("adapter_names"))
        return mixed(self, *args, **kwargs)

    @contextmanager
    def spy_hooks(*args: Any, **kwargs: Any) -> Iterator[None]:
        if kwargs.get("adapter_names") is not None:  # (every PeftModel forward enters them without names)
            calls["hooks"].append(kwargs["adapter_names"])
        with hooks(*args, **kwargs):
            yield

    with monkeypatch.context() as patch:
        patch.setattr(LoraLinear, "_mixed_batch_forward", spy_mixed)
        patch.setattr(model, "_enable_peft_forward_hooks", spy_hooks)
        yield calls


def sliced_logits(model: Any, names: list[Any], batch: dict[str, torch.Tensor],
                  monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, bool, dict[str, list]]:
    with spies(monkeypatch, model) as calls, torch.no_grad(), sliced_adapter_rows(model, names) as sliced:
        logits = model(**batch).logits
    return logits, sliced, calls


def test_adapter_runs() -> None:
    assert adapter_runs(["a", "a", "b", None, None]) == [("a", 0, 2), ("b", 2, 3), ("__base__", 3, 5)]
    assert adapter_runs(["a"]) == [("a", 0, 1)]
    assert adapter_runs([None, "__base__"]) == [("__base__", 0, 2)]  # None is the base model, as "__base__"
    assert adapter_runs(["a", "b", "a"]) is None
    assert adapter_runs(["a", None, "b", "__base__"]) is None
    assert adapter_runs([]) == []


CONTIGUOUS = {
    "2 adapters": ["a0"] * 3 + ["a1"] * 3,
    "3 adapters, uneven": ["a2"] * 2 + ["a0"] * 3 + ["a1"],
    "1 adapter": ["a1"] * 5,
    "base run": ["a0"] * 2 + ["__base__"] * 2 + ["a2"] * 2,
    "1 row each": ["a1", "a0", "a2"],
}


@pytest.mark.parametrize("names", list(CONTIGUOUS.values()), ids=list(CONTIGUOUS))
def test_sliced_forward_equals_peft_mixed_batch(model, names, monkeypatch) -> None:
    batch = inputs(len(names))
    expected = peft_logits(model, names, batch)
    logits, sliced, calls = sliced_logits(model, names, batch, monkeypatch)
    assert sliced and calls == {"mixed": [], "hooks": []}  # no PEFT index lists, no PEFT hooks
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    # the adapters matter: each run's rows differ from what the base model gives them
    base = peft_logits(model, ["__base__"] * len(names), batch)
    for row, name in enumerate(names):
        assert torch.equal(logits[row], base[row]) == (name == "__base__")
    assert all("forward" not in vars(m) for m in model.modules())  # restored


def test_none_rows_get_the_base_model(model, monkeypatch) -> None:
    names = ["a0", "a0", None, None, "a1"]
    batch = inputs(len(names))
    expected = peft_logits(model, ["a0", "a0", "__base__", "__base__", "a1"], batch)
    logits, sliced, _ = sliced_logits(model, names, batch, monkeypatch)
    assert sliced
    torch.testing.assert_close(logits, expected, rtol=0, atol=0)
    names = ["a0", None, "a1", None]  # not one run: PEFT's hooks, which get "__base__" (PEFT rejects None)
    logits, sliced, calls = sliced_logits(model, names, inputs(4), monkeypatch)
    assert not sliced and calls["hooks"] == [["a0", "__base__", "a1", "__base__"]]
    torch.testing.assert_close(logits, peft_logits(model, calls["hooks"][0], inputs(4)), rtol=0, atol=0)


def test_non_contiguous_rows_fall_back_to_peft(model, monkeypatch) -> None:
    names = ["a0", "a1", "a0", "a1"]
    assert sliced_adapter_rows_unsupported(model, names) == "an adapter's rows are not one contiguous run"
    batch = inputs(len(names))
    logits, sliced, calls = sliced_logits(model, names, batch, monkeypatch)
    assert not sliced and calls["hooks"] == [names]
    assert len(calls["mixed"]) == 2 * len(TARGETS) and all(c == names for c in calls["mixed"])  # every LoRA layer
    torch.testing.assert_close(logits, peft_logits(model, names, batch), rtol=0, atol=0)


def test_adapter_on_some_layers_only(tokenizer, monkeypatch) -> None:
    model = lora_model(tokenizer, names=("a0",))
    model.add_adapter("a1", LoraConfig(r=2, target_modules=["v_proj"], init_lora_weights=False))
    model.eval()
    names = ["a1", "a1", "a0", "a0", "a0"]
    batch = inputs(len(names))
    logits, sliced, _ = sliced_logits(model, names, batch, monkeypatch)
    assert sliced
    torch.testing.assert_close(logits, peft_logits(model, names, batch), rtol=0, atol=0)


def test_bfloat16_base_with_float32_adapters(tokenizer, monkeypatch) -> None:
    model = lora_model(tokenizer, dtype=torch.bfloat16)
    layer = next(m for m in model.modules() if isinstance(m, LoraLinear))
    assert layer.base_layer.weight.dtype == torch.bfloat16 and layer.lora_A["a0"].weight.dtype == torch.float32
    names = ["a0"] * 2 + ["a2"] * 3
    batch = inputs(len(names))
    logits, sliced, _ = sliced_logits(model, names, batch, monkeypatch)
    assert sliced and logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits, peft_logits(model, names, batch), rtol=0, atol=0)


def test_dora_and_merged_adapters_fall_back(tokenizer, model, monkeypatch) -> None:
    dora = lora_model(tokenizer, names=("a0",))
    dora.add_adapter("d", LoraConfig(r=2, target_modules=["q_proj"], use_dora=True, init_lora_weights=False))
    dora.eval()
    names = ["a0", "a0", "d"]
    assert "DoRA" in sliced_adapter_rows_unsupported(dora, names)
    with spies(monkeypatch, dora) as calls, sliced_adapter_rows(dora, names) as sliced:
        assert not sliced and calls["hooks"] == [names]
        with pytest.raises(ValueError, match="DoRA"):  # PEFT's own refusal
            dora(**inputs(3))
    # a DoRA adapter that no row uses does not stop the others from being sliced
    assert sliced_adapter_rows_unsupported(dora, ["a0", "__base__"]) is None

    merged = copy.deepcopy(model)
    merged.base_model.merge_adapter(["a1"])
    names = ["a0", "a1"]
    assert sliced_adapter_rows_unsupported(merged, names) == "merged adapters"
    with spies(monkeypatch, merged) as calls, sliced_adapter_rows(merged, names) as sliced:
        assert not sliced and calls["hooks"] == [names]
        with pytest.raises(ValueError, match="merged adapters"):
            merged(**inputs(2))


def test_other_cases_take_peft_path(tokenizer, model, monkeypatch) -> None:
    names = ["a0", "a1"]
    assert sliced_adapter_rows_unsupported(model, ["a0", "nope"]) == "unknown adapter(s) ['nope']"
    assert sliced_adapter_rows_unsupported(model, None) == "no adapter_names"
    with model.disable_adapter():
        assert sliced_adapter_rows_unsupported(model, names) == "adapters disabled"
        batch = inputs(2)
        with torch.no_grad(), sliced_adapter_rows(model, names) as sliced:
            disabled = model(**batch).logits
        assert not sliced
        torch.testing.assert_close(disabled, model.get_base_model()(**batch).logits)  # PEFT: the base model
    model.train()
    try:
        assert sliced_adapter_rows_unsupported(model, names) == "train mode"
        with pytest.raises(ValueError, match="training mode"), sliced_adapter_rows(model, names):
            pass  # PEFT refuses on entering its hooks
    finally:
        model.eval()
    embedding = lora_model(tokenizer, names=("a0",), target_modules=["q_proj", "embed_tokens"])
    assert "Embedding" in sliced_adapter_rows_unsupported(embedding, ["a0"])
    to_save = lora_model(tokenizer, names=("a0",), modules_to_save=["lm_head"])
    assert "auxiliary" in sliced_adapter_rows_unsupported(to_save, ["a0"])
    plain = build_toy_model(tokenizer, hidden_size=32, num_layers=2)
    with pytest.raises(ValueError, match="no PEFT adapters"), sliced_adapter_rows(plain, ["a0"]):
        pass
    with sliced_adapter_rows(plain, None) as sliced:  # nothing to do
        assert not sliced


def test_restored_after_an_exception_and_on_mismatched_batches(model, monkeypatch) -> None:
    names = ["a0", "a0", "a1"]
    batch = inputs(3)
    before = {m: vars(m).get("forward") for m in model.modules()}
    with pytest.raises(RuntimeError, match="boom"), sliced_adapter_rows(model, names) as sliced:
        assert sliced
        assert sum("forward" in vars(m) for m in model.modules()) == 2 * len(TARGETS)
        raise RuntimeError("boom")
    assert {m: vars(m).get("forward") for m in model.modules()} == before
    with torch.no_grad():  # the active adapter's plain forward again, no per-row adapters left behind
        active = model(**batch).logits
        assert torch.equal(active, peft_logits(model, ["a0"] * 3, batch))
    with sliced_adapter_rows(model, names), pytest.raises(ValueError, match="Length of `adapter_names`"):
        model(**inputs(4))  # PEFT's error for a batch of another size


def test_team_batches_are_sliced(tokenizer, monkeypatch) -> None:
    torch.manual_seed(0)
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    team = AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=2), 3, mode="adapters",
                           peft_config=peft_config, processing_class=tokenizer)
    prompts = [["Q:1+2=A:"] * 3, ["T:5?", "Q:9+9=A:"], ["Q:4+4=A:"] * 2]
    generation_config = GenerationConfig(max_new_tokens=5, do_sample=True, pad_token_id=0)
    results = []
    for path in ("sliced", "peft"):
        with monkeypatch.context() as patch:
            if path == "peft":  # force PEFT's hooks
                patch.setattr(mixed_adapters, "_plan", lambda *_: "forced")
            with spies(patch, team.models[0]) as calls:
                torch.manual_seed(3)
                results.append(team.generate(prompts, generation_config))
        assert bool(calls["mixed"]) == (path == "peft")
    assert results[0] == results[1]
