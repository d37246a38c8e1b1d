"""The GPU benchmark runs end to end at a tiny size on CPU (a smoke test; the real numbers come from a GPU)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "bench_gpu.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def test_gpu_benchmark_smoke_on_cpu(tmp_path: Path) -> None:
    bench = _load_bench()
    out = tmp_path / "results.json"
    report = bench.main(["--sizes", "tiny", "--prompts", "2", "--generations", "2", "--prompt-tokens", "8",
                         "--new-tokens", "4", "--steps", "2", "--runs", "grpo", "magrpo-1", "magrpo-2",
                         "magrpo-2-qlora", "magrpo-2-summed", "mixed", "--out", str(out)])
    saved = json.loads(out.read_text())
    names = [run["name"] for run in saved["runs"]]
    assert names == [run["name"] for run in report["runs"]]
    assert names == ["grpo", "magrpo-1", "magrpo-2", "magrpo-2-summed"]  # QLoRA is skipped without CUDA
    assert any("one training forward" in note for note in saved["runs"][-1]["notes"])
    for run in saved["runs"]:
        assert run["steps_timed"] == 1
        assert run["gen_tokens_per_s"] > 0 and math.isfinite(run["train_tokens_per_s"])
    # every sample of a step decodes exactly `new_tokens` positions per agent (the timer counts the decoded positions)
    mixed = saved["mixed_generation"][0]
    assert mixed["agents"] == 4 and mixed["rows_per_agent"] == 4
    assert mixed["batched_s"] > 0 and mixed["per_agent_s"] > 0


def test_word_tokenizer_round_trips_prompts() -> None:
    bench = _load_bench()
    tokenizer = bench.build_tokenizer(64)
    prompt = bench.word_prompts(1, 5, 64, seed=0)[0]
    ids = tokenizer(prompt)["input_ids"]
    assert len(ids) == 5 and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == prompt
    assert bench.even_word_reward([prompt], ["w2 w3 w4 w5"]) == [0.5]


@pytest.mark.parametrize("size", ["0.5b", "1.5b"])
def test_sizes_follow_the_qwen25_shapes(size: str) -> None:
    bench = _load_bench()
    shape = bench.SIZES[size]
    assert shape["vocab_size"] == 151936 and shape["num_key_value_heads"] == 2
    assert shape["hidden_size"] % shape["num_attention_heads"] == 0
