"""`benchmarks/speed/bench_shared_prompt.py`: its token counts (by hand) and a run of its toy case."""

from __future__ import annotations

from pathlib import Path

import pytest
from peft import LoraConfig

from helpers import load_script
from trl_marl.team import AgentTeam
from trl_marl.toy import build_toy_model

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "speed" / "bench_shared_prompt.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH)


def test_counts_the_tokens_of_each_layout_and_compares_the_values(bench, tokenizer) -> None:
    team = AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=0), 2, mode="adapters",
                           processing_class=tokenizer,
                           peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]  # the second left-padded to 5
    batch = bench._batch([p for p in prompts for _ in range(3)], tokenizer.pad_token_id, 2, 4, seed=0,
                         vocab=len(tokenizer))
    result = bench._time_case(team, batch, reps=1)
    width = batch.completion_ids.size(1)
    assert (result["rows"], result["distinct_prompts"], result["prompt_tokens"]) == (6, 2, 5)
    assert result["tokens_usual"] == 6 * (5 + width - 1)  # every row's prompt and completion but its last token
    assert result["tokens_shared"] == 2 * 5 + 6 * (width - 1)  # each prompt once, then the completions
    assert result["speedup"] == pytest.approx(result["usual_s"] / result["shared_s"])
    assert result["max_abs_logp_diff"] < 1e-5


def test_the_random_shape_case_runs_and_writes_its_record(bench, tmp_path) -> None:
    """`random-tiny` is the CPU check of the GPU case (`random-0.5b --device cuda`)."""
    out = tmp_path / "shared.json"
    results = bench.main(["--cases", "random-tiny", "--reps", "1", "--prompt-tokens", "16", "--completion-tokens", "4",
                          "--out", str(out)])
    case = results["random-tiny"]
    assert (case["rows"], case["distinct_prompts"], case["prompt_tokens"]) == (32, 4, 16)
    assert case["tokens_shared"] == 4 * 16 + 32 * (case["completion_tokens"] - 1)
    assert out.exists() and "random-tiny" in out.read_text()
