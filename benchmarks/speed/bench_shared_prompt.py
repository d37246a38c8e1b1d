"""One agent's training forward and backward with and without the shared prompt forward (`share_prompt_forward`).

Each case builds a 2-agent `adapters` team, one agent's batch of U distinct prompts x G rows with completions of
random tokens and random lengths, and times `team.forward` + `backward` of that agent, alternating the two layouts
(A B B A ...) so that a busy neighbour slows both alike; it reports the median wall time per layout, their ratio, the
tokens each layout runs through the model (counted: `U * P + B * (C - 1)` against `B * (P + C - 1)`) and the largest
difference of the completion tokens' log-probabilities. Cases:

- `toy`: a random toy model (`trl_marl.toy`) of hidden 256, 4 layers, LoRA r=8 on q/v of every layer; 2 prompts of
  256 random tokens x G=8, completions of 16-32 tokens.
- `random-<size>` (`random-0.5b`, `random-1.5b`, `random-tiny`): a Qwen2.5-shaped model of that size with random
  weights (`benchmarks/gpu/bench_gpu.py`'s `build_model`), bf16 on a GPU (`--device cuda`), LoRA r=16 on q/v of
  every layer; 4 prompts of `--prompt-tokens` (512) x G=8, completions of half to all of `--completion-tokens`
  (256). `random-tiny` checks the case on a CPU.
- `smollm2`: SmolLM2-135M-Instruct (offline copy, `trl_marl.offline_models`) with the learning runs' LoRA (r=8 on
  q/v of layers 22-29): the coding rule division's shapes, 2 prompts of its training rows (193 tokens) x G=8,
  completions of 20-40 tokens. Skipped when the model is not available.

Run (1 thread; a few minutes on a 2-core CPU)::

    python benchmarks/speed/bench_shared_prompt.py --reps 3 --out benchmarks/results/shared_prompt_cpu.json

On a GPU (random weights at real shapes)::

    python benchmarks/speed/bench_shared_prompt.py --cases random-0.5b,random-1.5b --device cuda --reps 5 \
        --out benchmarks/results/shared_prompt_gpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (REPO_ROOT, REPO_ROOT / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402
from benchmarks.provenance import git_state, machine_info  # noqa: E402


def _batch(prompts: list[list[int]], pad: int, low: int, high: int, seed: int, vocab: int = 5000) -> Any:
    from trl_marl.team import AgentBatch, pad_left, pad_right

    generator = torch.Generator().manual_seed(seed)
    completions = [torch.randint(3, vocab, (int(torch.randint(low, high + 1, (1,), generator=generator)),),
                                 generator=generator).tolist() for _ in prompts]
    prompt_ids, prompt_mask = pad_left(prompts, pad)
    completion_ids, completion_mask = pad_right(completions, pad)
    return AgentBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)


def _time_case(team: Any, batch: Any, reps: int) -> dict[str, Any]:
    """Median wall seconds of agent 0's forward + backward per layout, alternated, and what each computed."""
    team.train()
    mask = batch.completion_mask.float()
    cuda = batch.prompt_ids.is_cuda

    def run(share: bool) -> torch.Tensor:
        team.configure(share_prompt_forward=share)
        team.zero_grad()
        (logps, _), _ = team.forward([batch, None])
        (logps * mask).sum().backward()
        if cuda:  # the time of the work, not of its launch
            torch.cuda.synchronize()
        return logps.detach().float()

    out = {share: run(share) for share in (False, True)}  # warm-up, and the two layouts' values
    times: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps):
        for share in ((False, True) if rep % 2 == 0 else (True, False)):
            start = time.perf_counter()
            run(share)
            times[share].append(time.perf_counter() - start)
    rows, prompt = batch.prompt_ids.shape
    width = batch.completion_ids.size(1)
    distinct = torch.unique(torch.cat([batch.prompt_ids, batch.prompt_mask], dim=1), dim=0).size(0)
    usual, shared = statistics.median(times[False]), statistics.median(times[True])
    return {"rows": rows, "distinct_prompts": distinct, "prompt_tokens": prompt, "completion_tokens": width,
            "tokens_usual": rows * (prompt + width - 1), "tokens_shared": distinct * prompt + rows * (width - 1),
            "usual_s": usual, "shared_s": shared, "speedup": usual / shared,
            "max_abs_logp_diff": (out[True] - out[False])[batch.completion_mask.bool()].abs().max().item()}


def _toy_case(reps: int) -> dict[str, Any]:
    from peft import LoraConfig

    from trl_marl.team import AgentTeam
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=256, num_layers=4, seed=0)
    team = AgentTeam.build(model, 2, mode="adapters", processing_class=tokenizer,
                           peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    generator = torch.Generator().manual_seed(1)
    vocab = len(tokenizer)
    prompts = [torch.randint(3, vocab, (256,), generator=generator).tolist() for _ in range(2)]
    return _time_case(team, _batch([p for p in prompts for _ in range(8)], tokenizer.pad_token_id, 16, 32, seed=2,
                                   vocab=vocab), reps)


def _random_case(size: str, reps: int, device: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    from benchmarks.gpu.bench_gpu import SIZES, build_model, build_tokenizer
    from peft import LoraConfig

    from trl_marl.team import AgentBatch, AgentTeam

    vocab = SIZES[size]["vocab_size"]
    model = build_model(size, torch.bfloat16 if device == "cuda" else torch.float32, device)
    team = AgentTeam.build(model, 2, mode="adapters", processing_class=build_tokenizer(vocab),
                           peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, vocab, (prompt_tokens,), generator=generator).tolist() for _ in range(4)]
    batch = _batch([p for p in prompts for _ in range(8)], 0, completion_tokens // 2, completion_tokens, seed=2,
                   vocab=vocab)
    batch = AgentBatch(*(t.to(device) for t in (batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                                 batch.completion_mask)))
    out = _time_case(team, batch, reps)
    if device == "cuda":
        out["device"] = torch.cuda.get_device_name()
    return out


def _smollm2_case(reps: int) -> dict[str, Any] | None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_marl.data.team_coding import rule_pair_rows
    from trl_marl.envs.coding_rule_division import RULE_DIVISION_DECIDE_2OR1_NAMED_TEMPLATE, RuleDivisionCodingEnv
    from trl_marl.offline_models import resolve_real_model_name
    from trl_marl.scripts.demo_real import real_lora_config
    from trl_marl.team import AgentTeam

    try:
        name = resolve_real_model_name("smollm2-135m-instruct")
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name)
    except Exception as error:  # noqa: BLE001 - any failure to load means: not on this machine
        print(f"smollm2: skipped ({type(error).__name__}: {error})")
        return None
    team = AgentTeam.build(model, 2, mode="adapters", peft_config=real_lora_config(), processing_class=tokenizer)
    with torch.no_grad():  # a trained adapter (LoRA B starts at zero)
        generator = torch.Generator().manual_seed(1)
        for param_name, param in team.named_parameters():
            if "lora_B" in param_name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.01)
    env = RuleDivisionCodingEnv(chat=True, template=RULE_DIVISION_DECIDE_2OR1_NAMED_TEMPLATE)
    prompts = [tokenizer.apply_chat_template(env.agent_prompt(row, 0, None), continue_final_message=True,
                                             tokenize=True, return_dict=True)["input_ids"]
               for row in rule_pair_rows("train")[:2]]
    return _time_case(team, _batch([p for p in prompts for _ in range(8)], tokenizer.pad_token_id, 20, 40, seed=0),
                      reps)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="timed calls per layout")
    parser.add_argument("--cases", default="toy,smollm2",
                        help="comma-separated: toy, smollm2, random-<size> (tiny, 0.5b, 1.5b)")
    parser.add_argument("--device", default="cpu", help="the random-<size> cases' device (cuda on a GPU)")
    parser.add_argument("--prompt-tokens", type=int, default=512, help="random-<size>: tokens per prompt")
    parser.add_argument("--completion-tokens", type=int, default=256, help="random-<size>: longest completion")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    cli = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    given = sys.argv[1:] if argv is None else argv
    results: dict[str, Any] = {"command": " ".join(["python benchmarks/speed/bench_shared_prompt.py", *given]),
                               "git": git_state(), "machine": machine_info(), "threads": 1, "reps": cli.reps}
    cases = cli.cases.split(",")
    if "toy" in cases:
        results["toy"] = _toy_case(cli.reps)
    if "smollm2" in cases:
        results["smollm2"] = _smollm2_case(cli.reps)
    for case in cases:
        if case.startswith("random-"):
            results[case] = _random_case(case.removeprefix("random-"), cli.reps, cli.device, cli.prompt_tokens,
                                         cli.completion_tokens)
    print(json.dumps({k: v for k, v in results.items() if k not in ("git", "machine")}, indent=2))
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
