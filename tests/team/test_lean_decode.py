"""The lean decoding loop (`trl_marl.team.generation.lean`): the tokens of `model.generate` under the same random
state, for every setting it supports; `generate` itself for the others; the same completions from
`AgentTeam.generate`."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from peft import IA3Config, LoraConfig, get_peft_model
from peft.tuners.lora.layer import Linear as LoraLinear
from transformers import DynamicCache, GenerationConfig, PreTrainedTokenizerBase

from trl_marl.team import AgentTeam, mixed_adapters, pad_left
from trl_marl.team.generation.lean import decode, lean_decode_unsupported, lean_generate
from trl_marl.team.generation.prefill import shared_prefill_cache
from trl_marl.toy import build_toy_model

PROMPTS = ["Q:12+3=A:", "T:5?", "Q:45+67=A: go"]
EOS = [9, 19]  # two frequent tokens of the random toy model ('5', 'T'): sampled rows stop at different steps

SUPPORTED = {
    "greedy": dict(do_sample=False),
    "sample (transformers' default top_k=50)": dict(do_sample=True),
    "temperature": dict(do_sample=True, temperature=0.7, top_k=0),
    "top_k": dict(do_sample=True, top_k=5),
    "top_p": dict(do_sample=True, top_k=0, top_p=0.8),
    "min_p": dict(do_sample=True, top_k=0, min_p=0.3),
    "typical_p": dict(do_sample=True, top_k=0, typical_p=0.7),
    "epsilon_cutoff": dict(do_sample=True, top_k=0, epsilon_cutoff=0.045),
    "eta_cutoff": dict(do_sample=True, top_k=0, eta_cutoff=0.3),
    "top_h": dict(do_sample=True, top_k=0, top_h=0.6),
    "repetition_penalty": dict(do_sample=True, top_k=0, repetition_penalty=3.0),
    "greedy repetition_penalty": dict(do_sample=False, repetition_penalty=3.0),
    "no_repeat_ngram_size": dict(do_sample=True, top_k=0, no_repeat_ngram_size=2),
    "bad_words_ids": dict(do_sample=True, top_k=0, bad_words_ids=[[5], [12, 13]]),
    "min_new_tokens": dict(do_sample=True, top_k=0, min_new_tokens=6),
    "min_length": dict(do_sample=True, top_k=0, min_length=18),
    "suppress_tokens": dict(do_sample=True, top_k=0, suppress_tokens=[4, 5, 6],
                            begin_suppress_tokens=[3, 11, 17, 18, 21]),
    "invalid values, renormalize": dict(do_sample=True, top_k=0, remove_invalid_values=True, renormalize_logits=True),
    "GRPO-like": dict(do_sample=True, temperature=1.3, top_k=20, top_p=0.95, min_p=0.1, repetition_penalty=1.3),
}


def toy_model(tokenizer: PreTrainedTokenizerBase) -> Any:
    """The random toy model with 4x sharper logits (final norm scaled): far from uniform, so that every processor
    changes some sampled token."""
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2)
    with torch.no_grad():
        model.model.norm.weight.mul_(4.0)
    return model


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerBase) -> Any:
    return toy_model(tokenizer)


def two_adapters(tokenizer: PreTrainedTokenizerBase, task_type: str | None = None) -> Any:
    """Two LoRA adapters with non-zero B (they really differ), in eval mode: a `PeftModel`, or with
    `task_type="CAUSAL_LM"` a `PeftModelForCausalLM`."""
    torch.manual_seed(0)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False,
                        task_type=task_type)
    peft_model = get_peft_model(toy_model(tokenizer), config, adapter_name="a0")
    peft_model.add_adapter("a1", copy.deepcopy(config))
    return peft_model.eval()


@pytest.fixture(scope="module")
def lora_model(tokenizer: PreTrainedTokenizerBase) -> Any:
    return two_adapters(tokenizer)


def batch(tokenizer: PreTrainedTokenizerBase, prompts: list[str] = PROMPTS, repeat: int = 2) -> tuple:
    ids, mask = pad_left([tokenizer(p)["input_ids"] for p in prompts for _ in range(repeat)], tokenizer.pad_token_id)
    return ids, mask


def config(max_new_tokens: int = 10, **settings: Any) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, eos_token_id=EOS, pad_token_id=0, **settings)


@contextmanager
def model_settings(model: Any, **settings: Any) -> Iterator[None]:
    """Sets fields of `model.generation_config` (what `generate` falls back on) for the duration."""
    generation_config = model.generation_config
    saved = {name: vars(generation_config)[name] for name in settings if name in vars(generation_config)}
    for name, value in settings.items():
        setattr(generation_config, name, value)
    try:
        yield
    finally:
        for name in settings:
            if name in saved:
                setattr(generation_config, name, saved[name])
            else:
                delattr(generation_config, name)


def both_ways(model: Any, ids: torch.Tensor, mask: torch.Tensor, generation_config: GenerationConfig,
              adapter_names: list[str] | None = None, prefill: bool = False, seed: int = 1) -> list[torch.Tensor]:
    """`model.generate` and the lean loop from the same seed: their sequences, then one draw from the RNG after."""
    results = []
    for run in ("generate", "lean"):
        torch.manual_seed(seed)
        kwargs: dict[str, Any] = {}
        if adapter_names is not None:
            kwargs["adapter_names"] = adapter_names
        if prefill:
            kwargs["past_key_values"] = shared_prefill_cache(model, ids, mask, generation_config, adapter_names)
            assert kwargs["past_key_values"] is not None
        with torch.inference_mode():
            if run == "generate":
                out = model.generate(input_ids=ids, attention_mask=mask, generation_config=generation_config, **kwargs)
            else:
                out = lean_generate(model, ids, mask, generation_config, **kwargs)
        results.append((out, torch.rand(3)))
    (expected, expected_draw), (lean, lean_draw) = results
    assert torch.equal(lean, expected), f"generate:\n{expected}\nlean:\n{lean}"
    assert torch.equal(lean_draw, expected_draw)  # the same number of random draws
    return [expected, lean]


# ------------------------------------------------------------------------------------------ token-identical
@pytest.mark.parametrize("settings", list(SUPPORTED.values()), ids=list(SUPPORTED))
def test_every_supported_setting_gives_generates_tokens(model, tokenizer, settings) -> None:
    ids, mask = batch(tokenizer)
    generation_config = config(**settings)
    assert lean_decode_unsupported(model, generation_config) is None
    for prefill in (False, True):
        both_ways(model, ids, mask, generation_config, prefill=prefill)


def test_rows_stop_at_different_steps_and_at_max_new_tokens(model, tokenizer) -> None:
    ids, mask = batch(tokenizer, repeat=3)
    out, _ = both_ways(model, ids, mask, config(do_sample=True, top_k=0))
    completions = out[:, ids.size(1):]
    assert completions.size(1) == 10  # some row ran to max_new_tokens ...
    stop_steps = [row.index(9) if 9 in row else row.index(19) if 19 in row else None for row in completions.tolist()]
    early = [step for step in stop_steps if step is not None and step < 9]
    assert len(set(early)) >= 2 and None in stop_steps, stop_steps  # ... others stopped early, at different steps
    for row, step in zip(completions.tolist(), stop_steps, strict=True):
        if step is not None:
            assert row[step + 1:] == [0] * (9 - step)  # the pad token after a row's EOS


def test_loop_ends_when_every_row_has_finished(model, tokenizer) -> None:
    ids, mask = batch(tokenizer)
    out, _ = both_ways(model, ids, mask, config(max_new_tokens=40, do_sample=True, top_k=0))
    assert out.size(1) < ids.size(1) + 40  # every row stopped before max_new_tokens: no further step


def test_without_padding_and_with_pad_from_eos(model, tokenizer) -> None:
    ids, mask = batch(tokenizer, prompts=["Q:1+2=A:", "Q:3+4=A:"])
    assert bool((mask == 1).all())  # generate drops an all-ones mask: so does the loop
    both_ways(model, ids, mask, config(do_sample=True, top_k=0, repetition_penalty=2.0))
    with model_settings(model, pad_token_id=None):  # no pad id anywhere: finished rows get the first EOS id
        generation_config = GenerationConfig(max_new_tokens=10, do_sample=True, top_k=0, eos_token_id=EOS)
        out, _ = both_ways(model, *batch(tokenizer), generation_config)
    assert any(row[-2:] == [9, 9] for row in out.tolist())


def test_settings_left_unset_come_from_the_model_generation_config(model, tokenizer) -> None:
    ids, mask = batch(tokenizer)
    with model_settings(model, do_sample=True, top_k=3, temperature=0.5, eos_token_id=[9, 19, 12]):
        generation_config = GenerationConfig(max_new_tokens=10)
        assert lean_decode_unsupported(model, generation_config) is None
        out, _ = both_ways(model, ids, mask, generation_config)
    rows = out[:, ids.size(1):].tolist()
    assert any(12 in row and set(row[row.index(12) + 1:]) == {0} for row in rows)  # the model's third EOS id counted


def test_no_eos_runs_every_row_to_max_new_tokens(model, tokenizer) -> None:
    ids, mask = batch(tokenizer)
    with model_settings(model, eos_token_id=None):
        out, _ = both_ways(model, ids, mask, GenerationConfig(max_new_tokens=6, do_sample=True, top_k=0,
                                                              pad_token_id=0))
    assert out.size(1) == ids.size(1) + 6


# ------------------------------------------------------------------------------------------ PEFT
@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("task_type", [None, "CAUSAL_LM"])
def test_mixed_adapter_batch(lora_model, tokenizer, prefill, task_type) -> None:
    lora_model = lora_model if task_type is None else two_adapters(tokenizer, task_type)
    assert type(lora_model).__name__ == ("PeftModel" if task_type is None else "PeftModelForCausalLM")
    ids, mask = batch(tokenizer)
    adapter_names = ["a0", "a0", "a1", "a1", "__base__", "__base__"]  # (prompt, adapter) pairs repeat: shared
    for settings in (SUPPORTED["GRPO-like"], SUPPORTED["greedy"]):
        both_ways(lora_model, ids, mask, config(**settings), adapter_names=adapter_names, prefill=prefill)


def lean_with_logits(model: Any, ids: torch.Tensor, mask: torch.Tensor, generation_config: GenerationConfig,
                     names: list[str], prefill: bool, monkeypatch: pytest.MonkeyPatch,
                     force_peft: bool) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """The lean loop's sequences, the logits of every step, and how many PEFT mixed-batch forwards ran."""
    logits: list[torch.Tensor] = []
    mixed: list[int] = []
    original = LoraLinear._mixed_batch_forward
    with monkeypatch.context() as patch:
        if force_peft:
            patch.setattr(mixed_adapters, "_plan", lambda *_: "forced")
        patch.setattr(LoraLinear, "_mixed_batch_forward",
                      lambda self, *a, **k: mixed.append(1) or original(self, *a, **k))
        handle = model.get_base_model().lm_head.register_forward_hook(lambda _m, _i, out: logits.append(out.clone()))
        try:
            torch.manual_seed(2)
            cache = shared_prefill_cache(model, ids, mask, generation_config, names) if prefill else None
            with torch.inference_mode():
                out = lean_generate(model, ids, mask, generation_config, adapter_names=names, past_key_values=cache)
        finally:
            handle.remove()
    return out, logits, len(mixed)


@pytest.mark.parametrize("prefill", [False, True])
def test_sliced_adapter_rows_give_pefts_logits_at_every_step(lora_model, tokenizer, monkeypatch, prefill) -> None:
    # rows in one run per adapter (as AgentTeam orders them): the loop slices the rows (`team.mixed_adapters`);
    # forcing PEFT's hooks instead must give the same logits, bit for bit, at every step
    ids, mask = batch(tokenizer, repeat=3)
    names = ["a1"] * 3 + ["a0"] * 4 + ["__base__"] * 2
    generation_config = config(**SUPPORTED["GRPO-like"])
    sliced, sliced_logits, sliced_mixed = lean_with_logits(lora_model, ids, mask, generation_config, names, prefill,
                                                           monkeypatch, force_peft=False)
    peft, peft_logits, peft_mixed = lean_with_logits(lora_model, ids, mask, generation_config, names, prefill,
                                                     monkeypatch, force_peft=True)
    assert sliced_mixed == 0 and peft_mixed > 0
    assert torch.equal(sliced, peft) and len(sliced_logits) == len(peft_logits) > 1
    for step, (a, b) in enumerate(zip(sliced_logits, peft_logits, strict=True)):
        assert torch.equal(a, b), step


def test_single_adapter_and_hooks_registered_once(lora_model, tokenizer, monkeypatch) -> None:
    ids, mask = batch(tokenizer)
    generation_config = config(do_sample=True, top_k=0)
    for adapter in ("a1", "a0"):
        lora_model.set_adapter(adapter)
        both_ways(lora_model, ids, mask, generation_config)
    entered: list[dict] = []
    original = lora_model._enable_peft_forward_hooks

    @contextmanager
    def counting(*args: Any, **kwargs: Any) -> Iterator[None]:
        entered.append(kwargs)
        with original(*args, **kwargs):
            yield

    monkeypatch.setattr(lora_model, "_enable_peft_forward_hooks", counting)
    forwards: list[int] = []
    handle = lora_model.get_base_model().register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        with torch.inference_mode():
            lean_generate(lora_model, ids, mask, generation_config, adapter_names=["a0", "a1"] * 3)
    finally:
        handle.remove()
    assert len(forwards) > 1 and entered == [{"adapter_names": ["a0", "a1"] * 3}]  # one hook set-up for the loop


def test_train_mode_with_lora_dropout_draws_in_generates_order(tokenizer) -> None:
    # a 4-bit team generates in train mode: LoRA dropout draws masks in every forward, between the sampling draws
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.3, init_lora_weights=False)
    torch.manual_seed(0)
    peft_model = get_peft_model(toy_model(tokenizer), lora).train()
    ids, mask = batch(tokenizer)
    generation_config = config(max_new_tokens=6, do_sample=True, top_k=0)
    out, _ = both_ways(peft_model, ids, mask, generation_config)
    with torch.no_grad():  # the dropout masks did change the samples: eval mode gives others
        torch.manual_seed(1)
        assert not torch.equal(lean_generate(peft_model.eval(), ids, mask, generation_config), out)


# ------------------------------------------------------------------------------------------ fallback
UNSUPPORTED = {
    "beam search": dict(num_beams=2),
    "several sequences": dict(do_sample=True, num_return_sequences=2),
    "prompt lookup": dict(prompt_lookup_num_tokens=3),
    "contrastive search": dict(penalty_alpha=0.6, top_k=4),
    "stop strings": dict(stop_strings=["9"]),
    "max_time": dict(max_time=5.0),
    "static cache": dict(cache_implementation="static"),
    "no cache": dict(use_cache=False),
    "sequence bias": dict(sequence_bias=[[[5], 1.0]]),
    "forced eos": dict(forced_eos_token_id=2),
    "guidance": dict(guidance_scale=1.5),
    "dict output": dict(return_dict_in_generate=True, output_scores=True),
    "no max_new_tokens": dict(max_new_tokens=None, max_length=30),
}


@pytest.mark.parametrize("settings", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_unsupported_settings_call_generate(model, tokenizer, monkeypatch, settings) -> None:
    ids, mask = batch(tokenizer)
    generation_config = config(**{"max_new_tokens": 4, **settings})
    assert lean_decode_unsupported(model, generation_config) is not None
    with pytest.raises(ValueError, match="lean decoding loop does not support"):
        lean_generate(model, ids, mask, generation_config)
    calls: list[dict] = []
    monkeypatch.setattr(model, "generate", lambda **kwargs: calls.append(kwargs) or "from generate")
    assert decode(model, ids, mask, generation_config) == "from generate"
    assert calls[0]["generation_config"] is generation_config and calls[0]["input_ids"] is ids


def test_unsupported_models_call_generate(model, lora_model, tokenizer, monkeypatch) -> None:
    generation_config = config(do_sample=True)
    assert lean_decode_unsupported(model, generation_config, adapter_names=["a0"]) == (
        "`adapter_names` for a model without PEFT adapters")
    with model_settings(model, my_custom_flag=3):  # a custom entry of the model's config: not known to be inert
        assert "my_custom_flag" in lean_decode_unsupported(model, generation_config)

    custom = copy.deepcopy(model)
    custom.__class__ = type("Custom", (type(model),), {
        "prepare_inputs_for_generation": lambda self, *args, **kwargs: super(type(self), self)
        .prepare_inputs_for_generation(*args, **kwargs)})
    assert "prepare_inputs_for_generation" in lean_decode_unsupported(custom, generation_config)

    ia3 = get_peft_model(copy.deepcopy(model), IA3Config(target_modules=["k_proj", "down_proj"],
                                                         feedforward_modules=["down_proj"]))
    assert "not LoRA" in lean_decode_unsupported(ia3, generation_config)

    ids, mask = batch(tokenizer)
    whole_prompt = DynamicCache(config=model.config)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, past_key_values=whole_prompt, use_cache=True)
    with pytest.raises(ValueError, match="DynamicCache holding part of the prompt"):
        lean_generate(model, ids, mask, generation_config, past_key_values=whole_prompt)

    calls: list[dict] = []
    monkeypatch.setattr(lora_model, "generate", lambda **kwargs: calls.append(kwargs) or "from generate")
    assert decode(lora_model, ids, mask, generation_config, adapter_names=["a0"] * 6, lean=False) == "from generate"
    assert calls[0]["adapter_names"] == ["a0"] * 6


# ------------------------------------------------------------------------------------------ AgentTeam
@pytest.mark.parametrize("mode", ["adapters", "models"])
def test_team_generates_the_same_completions_as_with_generate(tokenizer, monkeypatch, mode) -> None:
    torch.manual_seed(0)
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                             init_lora_weights=False) if mode == "adapters" else None
    team = AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=2), 2, mode=mode,
                           peft_config=peft_config, processing_class=tokenizer)
    team.train()  # as in training: generation switches to eval mode and back
    prompts = [[p for p in PROMPTS for _ in range(3)], [p for p in PROMPTS[::-1] for _ in range(3)]]
    generation_config = config(**SUPPORTED["GRPO-like"])
    for share in (False, True):
        team.share_prompt_prefill = share
        results = []
        for lean in (False, True):
            team.lean_decode = lean
            torch.manual_seed(5)
            with monkeypatch.context() as patch:
                if lean:  # the lean loop must not fall back
                    for m in team.models:
                        patch.setattr(m, "generate", lambda **_: pytest.fail("lean decoding called generate"))
                results.append(team.generate(prompts, generation_config))
        assert results[0] == results[1]
        assert len({len(ids) for _, completions in results[0] for ids in completions}) > 1  # cut after EOS
    assert team.training
