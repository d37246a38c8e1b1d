"""`trl_marl.legacy.PPOTrainer` against TRL 0.11.4's `PPOTrainer`, side by side on identical inputs.

TRL 0.11.4 needs transformers 4.4x, so it runs in its own virtualenv: `--peer-python`, else `$TRL011_PYTHON`, else
the cached one of `benchmarks/peers.py` (torch==2.13.0, then trl==0.11.4 transformers==4.46.3 rich), built when
missing.

What it does (GPT-2 built from config, 2 layers x 64, on the toy character tokenizer):

1. builds the value-head model with `trl_marl.legacy` and saves it (TRL 0.11 loads that folder: cross-load 1);
2. fixes a batch of queries and responses of different lengths and their scores;
3. runs the first `step()` on both sides (same weights, inputs, seed) and compares every stats key: max abs
   difference, and the keys missing on either side;
4. TRL saves its model; `trl_marl.legacy` loads it and checks the value head and the logits (cross-load 2);
5. times `--steps` further `step()` calls on each side (one torch thread each, same inputs).

Usage: `OMP_NUM_THREADS=1 python benchmarks/parity/bench_legacy_peer.py [--peer-python PATH] [--steps 10]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# The TRL 0.11.4 side: written to a file and run with the other virtualenv's python.
PEER_SCRIPT = r'''
import json, sys, time, warnings
import numpy as np, torch
warnings.simplefilter("ignore")
torch.set_num_threads(1)
from transformers import PreTrainedTokenizerFast
from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

model_dir, inputs_file, out_file, save_dir, steps = sys.argv[1:6]
spec = json.load(open(inputs_file))
tok = PreTrainedTokenizerFast(tokenizer_file=model_dir + "/tokenizer.json", pad_token="<pad>", eos_token="</s>",
                              bos_token="<s>", unk_token="<unk>")
tok.padding_side = "right"
model = AutoModelForCausalLMWithValueHead.from_pretrained(model_dir)
config = PPOConfig(**spec["config"])
trainer = PPOTrainer(config, model, None, tok)
queries = [torch.tensor(q) for q in spec["queries"]]
responses = [torch.tensor(r) for r in spec["responses"]]
scores = [torch.tensor(s) for s in spec["scores"]]
stats = trainer.step(queries, responses, scores)
arrays = {k: np.asarray(v, dtype=np.float64) for k, v in stats.items()}
model.save_pretrained(save_dir)
times = []
for _ in range(int(steps)):
    t = time.perf_counter(); trainer.step(queries, responses, scores); times.append(time.perf_counter() - t)
arrays["__times__"] = np.asarray(times)
np.savez(out_file, **{k.replace("/", "|"): v for k, v in arrays.items()})
'''


def peer_interpreter(explicit: str | None) -> str:
    """TRL 0.11.4's python: `--peer-python`, else `$TRL011_PYTHON`, else the cached virtualenv (built if missing)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from peers import ensure_peer, peer_python

    python = explicit or peer_python("trl011")
    if Path(python).exists():
        return python
    return ensure_peer("trl011")


def build_model(directory: str, vocab_size: int) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from trl_marl.legacy import AutoModelForCausalLMWithValueHead
    from trl_marl.toy import build_toy_tokenizer

    tok = build_toy_tokenizer()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=max(vocab_size, len(tok)),
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    lm = GPT2LMHeadModel(config)
    model = AutoModelForCausalLMWithValueHead(lm, v_head_init_strategy="normal")
    model.save_pretrained(directory)
    tok.save_pretrained(directory)


def make_inputs(batch_size: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    queries = [rng.integers(4, 20, size=int(rng.integers(3, 9))).tolist() for _ in range(batch_size)]
    responses = [rng.integers(4, 20, size=int(rng.integers(1, 8))).tolist() + [2] for _ in range(batch_size)]
    scores = rng.normal(size=batch_size).round(3).tolist()
    config = {"batch_size": batch_size, "mini_batch_size": batch_size // 2, "ppo_epochs": 4, "learning_rate": 1e-3,
              "seed": 0, "init_kl_coef": 0.2, "adap_kl_ctrl": True}
    return {"queries": queries, "responses": responses, "scores": scores, "config": config}


def run_ours(model_dir: str, spec: dict, steps: int) -> tuple[dict, list[float]]:
    import torch
    from transformers import PreTrainedTokenizerFast

    from trl_marl.legacy import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

    torch.set_num_threads(1)
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(model_dir)
    trainer = PPOTrainer(PPOConfig(**spec["config"]), model, None, tok)
    queries = [torch.tensor(q) for q in spec["queries"]]
    responses = [torch.tensor(r) for r in spec["responses"]]
    scores = [torch.tensor(s) for s in spec["scores"]]
    stats = trainer.step(queries, responses, scores)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        trainer.step(queries, responses, scores)
        times.append(time.perf_counter() - t)
    return stats, times


def response_window(full: np.ndarray, spec: dict) -> np.ndarray:
    """TRL's `(B, L-1)` per-position array cut to the response tokens, as `(B, R)` (NaN past a response)."""
    width = max(len(r) for r in spec["responses"])
    out = np.full((len(spec["queries"]), width), np.nan)
    for i, (q, r) in enumerate(zip(spec["queries"], spec["responses"])):
        out[i, : len(r)] = full[i, len(q) - 1: len(q) - 1 + len(r)]
    return out


def compare(ours: dict, theirs: dict, spec: dict) -> list[tuple[str, str]]:
    rows = []
    lengths = [len(r) for r in spec["responses"]]
    for key in sorted(set(ours) | set(theirs)):
        if key not in theirs:
            rows.append((key, "only trl_marl"))
            continue
        if key not in ours:
            rows.append((key, "MISSING in trl_marl"))
            continue
        if key.startswith("time/"):
            rows.append((key, "timing"))
            continue
        a, b = np.asarray(ours[key], dtype=np.float64), np.asarray(theirs[key], dtype=np.float64)
        if key in ("objective/logprobs", "objective/ref_logprobs"):
            b = response_window(b, spec)
            a = np.where(np.arange(a.shape[1])[None, :] < np.asarray(lengths)[:, None], a, np.nan)
        if key in ("ppo/policy/advantages", "ppo/policy/ratio"):
            rows.append((key, f"layout differs (documented): {a.size} response tokens vs {b.size} padded positions"))
            continue
        if a.shape != b.shape:
            rows.append((key, f"shape {a.shape} vs {b.shape}"))
            continue
        rows.append((key, f"{np.nanmax(np.abs(a - b)):.2e}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default=None,
                        help="a python with trl==0.11.4 and transformers==4.46.3 (default: $TRL011_PYTHON, else the "
                        "cached virtualenv of benchmarks/peers.py, built when missing)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=50257, help="GPT-2's by default (the toy ids use 23)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    python = peer_interpreter(args.peer_python)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, trl_dir = os.path.join(tmp, "model"), os.path.join(tmp, "trl_saved")
        build_model(model_dir, args.vocab_size)
        spec = make_inputs(args.batch_size)
        inputs_file, out_file, script = (os.path.join(tmp, n) for n in ("inputs.json", "trl.npz", "peer.py"))
        Path(inputs_file).write_text(json.dumps(spec))
        Path(script).write_text(PEER_SCRIPT)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}
        subprocess.run([str(python), script, model_dir, inputs_file, out_file, trl_dir, str(args.steps)], check=True,
                       env=env)
        loaded = np.load(out_file)
        theirs = {k.replace("|", "/"): loaded[k] for k in loaded.files}
        trl_times = theirs.pop("__times__").tolist()
        ours, our_times = run_ours(model_dir, spec, args.steps)

        # cross-load 2: TRL 0.11's saved folder into trl_marl.legacy
        import torch
        from transformers import GPT2LMHeadModel

        from trl_marl.legacy import AutoModelForCausalLMWithValueHead

        mine = AutoModelForCausalLMWithValueHead.from_pretrained(trl_dir).eval()
        lm = GPT2LMHeadModel.from_pretrained(trl_dir).eval()
        ids = torch.tensor([spec["queries"][0] + spec["responses"][0]])
        logits_ok = torch.allclose(mine(input_ids=ids)[0], lm(input_ids=ids).logits, atol=1e-6)

    print(f"## first step(): trl_marl.legacy vs trl 0.11.4 (batch {args.batch_size}, mini-batch "
          f"{args.batch_size // 2}, 4 epochs, GPT-2 2x64, vocab {args.vocab_size})\n")
    print("| key | max abs diff |\n|---|---|")
    for key, value in compare(ours, theirs, spec):
        print(f"| `{key}` | {value} |")
    print(f"\ncross-load: trl_marl.legacy -> TRL 0.11 ok (TRL stepped on it); TRL 0.11 -> trl_marl.legacy logits "
          f"equal: {logits_ok}, v_head non-zero: {bool(mine.v_head.summary.weight.abs().sum() > 0)}")
    print(f"\n| per step() (s, median of {args.steps}) | trl_marl.legacy | trl 0.11.4 |\n|---|---|---|")
    print(f"| time | {np.median(our_times):.4f} | {np.median(trl_times):.4f} |")


if __name__ == "__main__":
    main()
