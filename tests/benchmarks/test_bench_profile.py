"""The profile benchmark's FLOP counter (against hand counts) and step profiler (on a fake causal LM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import load_script

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "speed"


def _load(name: str):
    return load_script(BENCH_DIR / f"{name}.py")


@pytest.fixture(scope="module")
def bench():
    return _load("bench_profile")


# hidden 8, MLP 16, 2 heads of 4, vocabulary 10, one layer
CONFIG = {"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
          "num_key_value_heads": 2, "vocab_size": 10}


def test_forward_flops_of_a_one_layer_model(bench) -> None:
    shape = bench.ModelShape.from_config(CONFIG)
    # one row, 3 new tokens, no cache, logits at 1 position
    fwd = bench.forward_matmuls(shape, rows=1, new=3, cached=0, positions=1)
    # projections: q, k, v, o 8x8 (4 x 64) + gate, up 8x16 (2 x 128) + down 16x8 (128) = 640 weights, 3 tokens
    assert fwd[("linear", 3, 8, 8)] == 4 * 2 * 3 * 64
    assert fwd[("linear", 3, 8, 16)] == 2 * 2 * 3 * 128
    assert fwd[("linear", 3, 16, 8)] == 2 * 3 * 128
    # lm_head: 1 position x 8 x 10
    assert fwd[("linear", 1, 8, 10)] == 160
    # attention: 6 causal pairs (1 + 2 + 3) x 2 heads x head_dim 4 x 2 FLOPs, for Q K^T and for P V
    assert fwd[("bmm", 2, 3, 4, 3)] == 96 and fwd[("bmm", 2, 3, 3, 4)] == 96
    assert sum(fwd.values()) == 2 * 3 * 640 + 160 + 192 == 4192
    # a decode step of 2 rows: 1 token after 2 cached ones sees 3 keys (2 rows x 2 heads = 4 products)
    dec = bench.forward_matmuls(shape, rows=2, new=1, cached=2, positions=2)
    assert dec[("bmm", 4, 1, 4, 3)] == dec[("bmm", 4, 1, 3, 4)] == 2 * 4 * 4 * 3
    assert sum(dec.values()) == 2 * 2 * 640 + 2 * 2 * 80 + 2 * 96 == 3072


def test_backward_flops_models_and_adapters(bench) -> None:
    shape = bench.ModelShape.from_config(CONFIG)
    # every weight trained: input and weight grads of every projection and of lm_head, 2x the attention products
    full = bench.backward_matmuls(shape, 1, 3, 0, 1, mode="models")
    assert sum(full.values()) == 2 * (2 * 3 * 640 + 160) + 2 * 192 == 8384
    # LoRA r=2 on q and v: the base weights get no grad; the first layer's q/k/v inputs need none either
    lora = (2, ("q_proj", "v_proj"))
    fwd = bench.forward_matmuls(shape, 1, 3, 0, 1, lora)
    assert sum(fwd.values()) == 4192 + 2 * (2 * 3 * 8 * 2 + 2 * 3 * 2 * 8) == 4576
    bwd = bench.backward_matmuls(shape, 1, 3, 0, 1, mode="adapters", lora=lora)
    base = 2 * 3 * (64 + 128 + 128 + 128)  # input grads of o, gate, up, down
    lora_a = 2 * (2 * 3 * 8 * 2)  # weight grads of A (q and v); A's input needs none in layer 0
    lora_b = 2 * 2 * (2 * 3 * 2 * 8)  # weight and input grads of B (q and v)
    assert sum(bwd.values()) == base + lora_a + lora_b + 160 + 384 == 3808
    with pytest.raises(ValueError, match="mode"):
        bench.backward_matmuls(shape, 1, 3, 0, 1, mode="shared")


class _FakeCache:
    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self) -> int:
        return self.length


class _Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)

    def forward(self, input_ids=None, past_key_values=None):
        return self.embed(input_ids)


class _FakeLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.model = _Decoder()
        self.lm_head = nn.Linear(4, 10, bias=False)

    def forward(self, input_ids, past_key_values=None, logits_to_keep=0):
        hidden = self.model(input_ids=input_ids, past_key_values=past_key_values)
        return self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)


def test_step_profiler_names_and_counts_forwards() -> None:
    hooks = _load("profile_hooks")
    profiler = hooks.StepProfiler()
    model = _FakeLM()
    profiler.hook_causal_lm(model)
    profiler.mark()
    with torch.no_grad(), profiler.region("generate"):
        model(torch.zeros(2, 5, dtype=torch.long), past_key_values=_FakeCache(0), logits_to_keep=1)  # prefill
        for cached in (5, 6):
            model(torch.zeros(2, 1, dtype=torch.long), past_key_values=_FakeCache(cached), logits_to_keep=1)
    with profiler.region("loss"):
        model(torch.zeros(2, 7, dtype=torch.long), logits_to_keep=3).sum().backward()
    model(torch.zeros(1, 2, dtype=torch.long))  # outside every phase
    first = profiler.step()
    assert first["shapes"] == [
        ["decode", 2, 1, 5, 2, False, 1],
        ["decode", 2, 1, 6, 2, False, 1],
        ["other_fwd", 1, 2, 0, 2, True, 1],
        ["prefill", 2, 5, 0, 2, False, 1],
        ["train_fwd", 2, 7, 0, 6, True, 1],
    ]
    assert set(first["parts"]) == {"generate", "prefill", "decode", "loss", "train_fwd", "other_fwd"}
    # exclusive times: the parts never add up to more than the step
    assert sum(wall for wall, _ in first["parts"].values()) <= first["wall"] + 1e-9
    assert first["events"] == 2 + 2 * 5  # two phase regions, five forwards (decoder + lm_head each)
    second = profiler.step()
    assert second["shapes"] == [] and second["events"] == 0  # a step holds only what happened since the last one
    profiler.remove()
    model(torch.zeros(1, 2, dtype=torch.long))
    assert profiler.step()["shapes"] == []  # hooks removed


def test_step_profiler_splits_an_open_region_at_the_step_end() -> None:
    hooks = _load("profile_hooks")
    ticks = iter(range(100))
    clock = lambda: float(next(ticks))  # noqa: E731 - a fake clock: every read advances by 1
    profiler = hooks.StepProfiler(clock=clock, cpu_clock=lambda: 0.0)
    profiler.mark()  # reads the clock at 0 (flush) and 1
    profiler.enter("rollout")  # 2
    profiler.enter("update")  # 3
    profiler.exit()  # 4: update spent 1
    first = profiler.step()  # flush at 5: rollout spent 5 - 2 - 1 = 2 so far; the step ends at 6
    profiler.exit()  # 7: rollout spent 7 - 5 (since the flush) more
    second = profiler.step()  # flush at 8, ends at 9
    assert first["parts"] == {"rollout": [2.0, 0.0], "update": [1.0, 0.0]}
    assert first["wall"] == 5.0
    assert second["parts"] == {"rollout": [2.0, 0.0]}
    assert second["wall"] == 3.0
