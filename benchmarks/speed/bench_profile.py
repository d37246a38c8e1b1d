"""Where a MAGRPO step's time goes, how far each part is from its matmul floor, and the same for comlrl 1.4.3.

Run from the repository root with the development virtualenv (comlrl in ``$COMLRL_PYTHON``, else the cached virtualenv
of ``benchmarks/peers.py``; ``python -m benchmarks speed --only profile`` builds it), alone on the machine::

    PYTHONPATH=src python benchmarks/speed/bench_profile.py            # full run (~5 min quiet, + first model builds)
    PYTHONPATH=src python benchmarks/speed/bench_profile.py --quick    # smoke run (about a minute)

The task is the two-agent target sum of ``bench_magrpo.py``'s comlrl comparison (``bench_comlrl_peer.py``): both
agents see ``T=10:``, G=8 samples per agent per prompt, 4 new tokens at most, temperature 1, top_p 1, no top_k, lr
3e-4, group mean/std advantages, no KL; one model folder per size built by ``trl_marl.toy.make_toy_model`` (a
Qwen2 toy pretrained to output numbers) and loaded by both sides. Measured for two sizes (``small``: hidden 64, 2
layers, ~84k parameters; ``large``: hidden 256, 4 layers, ~2.6M, the sizes of ``bench_magrpo.py``), P = 1 and 4
dataset rows (prompts) per optimizer update, and three sides: our ``MAGRPOTrainer`` with ``team_mode="models"``
(one full model per agent), with ``team_mode="adapters"`` (one base model, one LoRA adapter per agent: r=8 on
``q_proj``/``v_proj``), and comlrl's ``MAGRPOTrainer`` (one full model per agent) in its own virtualenv through
``bench_comlrl_peer.py --profile`` (a child process). The sides take turns (``--rounds`` rounds, the order
rotating), one torch thread each (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``), the first ``warmup`` steps
of every round left out.

1. **Where a step's time goes.** ``profile_hooks.StepProfiler`` (the same code on both sides) splits every step
   (the time from one optimizer update to the next, so logging and data loading are in it) into exclusive wall
   and CPU time per part:

   - ``prefill`` / ``decode``: the model forwards inside generation (forward hooks on the decoder stack and
     ``lm_head``: a forward that feeds one token per row on top of a KV cache is a decode step);
   - ``gen other``: the rest of generation (tokenizing, sampling, logits processing, stopping, cutting at EOS);
   - ``reward``: the reward function; ``rollout other``: the rest of playing and batching the episodes (decoding
     texts, returns, advantages, padding, rollout logging);
   - ``logps fwd``: log-prob forwards without gradients (old / reference policy; none here: ``beta=0`` and one
     iteration per generation, on both sides);
   - ``train fwd``: the forwards of the loss; ``loss other``: the loss around them (log-softmax, entropy,
     surrogate, metrics); ``backward``; ``grad clip`` (ours: ``max_grad_norm=1``); ``optimizer`` (AdamW
     ``step``); ``update loop`` (comlrl: ``_update_from_samples`` around its loss, e.g. ``zero_grad``);
   - ``rest``: the step time outside all of these (the training loop: ``transformers.Trainer`` / accelerate,
     callbacks, logging, data loading for ours; comlrl's loop for comlrl).

2. **The floor.** Every forward's shape is recorded (rows, new tokens, cached tokens, ``lm_head`` positions,
   whether it builds a graph), and its matmuls are counted from the model config: per layer q/k/v/o and the
   gate/up/down projections (2 * rows*tokens * in * out FLOPs each), LoRA A/B where present, the attention score
   and value products over the causal pairs of the real sequence lengths (padding included: what was run), and
   ``lm_head`` over the positions kept; a forward that builds a graph also counts its backward (grad of the input
   where it needs one, grad of the weight where it is trained, 2x the attention products). The machine's own rate
   for each of those shapes is measured here (``F.linear`` / ``mm`` / ``bmm`` at exactly that shape, one thread,
   best of 5), and ``floor = sum(FLOPs / rate at its shape)``: the time to run just those matmuls back to back.
   Reported per part and per step as achieved / floor. Norms, activations, softmax, sampling, the optimizer and
   Python are not in the floor, so a part with no matmul has none.

3. **comlrl side.** comlrl generates one prompt at a time (G rows) per agent, then runs one forward and backward
   per completion (batch 1), over the prompt plus every generated position (post-EOS padding included), with
   logits at every position; its recorded shapes are counted the same way.

The script prints markdown tables and writes ``benchmarks/results/profile.json`` (``--json``): per size, P and
side the median step time, joint samples (scored joint actions) per second, the parts (mean wall and CPU ms per
step over the timed steps), FLOPs, floor and achieved/floor, plus ours/comlrl and adapters/models ratios. The
hooks cost a few microseconds per forward and per timed call (``instrumentation_ms_per_step`` estimates it).
"""

from __future__ import annotations

import os

# One thread and no network, before torch/transformers are imported (see DESIGN.md, "CPU timing pitfall").
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections import defaultdict  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
BENCH_ROOT = BENCH_DIR.parent
REPO_ROOT = BENCH_ROOT.parent
SRC_DIR = REPO_ROOT / "src"
for _path in (SRC_DIR, BENCH_ROOT, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from peers import peer_python  # noqa: E402
from profile_hooks import StepProfiler, instrumentation_cost  # noqa: E402

warnings.filterwarnings("ignore")

COMLRL_PYTHON = peer_python("comlrl")
PEER_SCRIPT = BENCH_ROOT / "parity" / "bench_comlrl_peer.py"
DEFAULT_JSON = BENCH_ROOT / "results" / "profile.json"
SIDES = ("ours_models", "ours_adapters", "comlrl")
SIZES = {  # the two sizes of bench_magrpo.py's comlrl comparison (pretraining steps as there)
    "small": dict(hidden=64, layers=2, pretrain_steps=300),
    "large": dict(hidden=256, layers=4, pretrain_steps=150),
}
LORA_R, LORA_TARGETS = 8, ("q_proj", "v_proj")
# display order; "generate", "rollout", "loss", "update" are the self time of those regions
PARTS = ("prefill", "decode", "generate", "reward", "rollout", "logps_fwd", "train_fwd", "loss", "backward",
         "grad_clip", "optimizer", "update", "other_fwd", "rest")
PART_LABELS = {"generate": "gen other", "rollout": "rollout other", "loss": "loss other", "update": "update loop",
               "logps_fwd": "logps fwd", "train_fwd": "train fwd", "other_fwd": "other fwd", "grad_clip": "grad clip"}
MATMUL_PARTS = ("prefill", "decode", "logps_fwd", "train_fwd", "backward", "other_fwd")


# ---------------------------------------------------------------------------------------------------------------
# FLOP counting
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a Qwen2-style decoder that set its matmul shapes."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        heads = int(config["num_attention_heads"])
        return cls(hidden=int(config["hidden_size"]), intermediate=int(config["intermediate_size"]),
                   layers=int(config["num_hidden_layers"]), heads=heads,
                   kv_heads=int(config.get("num_key_value_heads") or heads),
                   head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
                   vocab=int(config["vocab_size"]))

    def linears(self) -> list[tuple[str, int, int]]:
        """`(name, in_features, out_features)` of one decoder layer's projections."""
        H, mlp, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return [("q_proj", H, q), ("k_proj", H, kv), ("v_proj", H, kv), ("o_proj", q, H),
                ("gate_proj", H, mlp), ("up_proj", H, mlp), ("down_proj", mlp, H)]


# A matmul is (op, dims): ("linear", M, K, N) = x[M,K] @ W[N,K]^T (F.linear); ("dx", M, N, K) = g[M,N] @ W[N,K]
# (a linear's input grad); ("dw", M, N, K) = g[M,N]^T @ x[M,K] (its weight grad); ("bmm", b, m, k, n). Full FLOPs
# of one are 2 * the product of its dims; a causal attention product counts only the pairs a query may see.
Matmul = tuple[Any, ...]


def full_flops(key: Matmul) -> int:
    out = 2
    for d in key[1:]:
        out *= int(d)
    return out


def _add(acc: dict[Matmul, float], key: Matmul, flops: float) -> None:
    acc[key] = acc.get(key, 0.0) + flops


def _causal_pairs(new: int, cached: int) -> int:
    """Query-key pairs of `new` queries after `cached` tokens under a causal mask."""
    return new * cached + new * (new + 1) // 2


def forward_matmuls(shape: ModelShape, rows: int, new: int, cached: int, positions: int,
                    lora: tuple[int, Sequence[str]] | None = None) -> dict[Matmul, float]:
    """The matmuls of one forward (`rows` x `new` tokens after `cached` ones, `lm_head` on `positions` rows) and
    their useful FLOPs. `lora = (r, target module names)` adds the adapters' A and B products."""
    acc: dict[Matmul, float] = {}
    M = rows * new
    if M:
        S = cached + new
        for _ in range(shape.layers):
            for name, fan_in, fan_out in shape.linears():
                _add(acc, ("linear", M, fan_in, fan_out), 2.0 * M * fan_in * fan_out)
                if lora is not None and name in lora[1]:
                    r = lora[0]
                    _add(acc, ("linear", M, fan_in, r), 2.0 * M * fan_in * r)
                    _add(acc, ("linear", M, r, fan_out), 2.0 * M * r * fan_out)
            b, hd = rows * shape.heads, shape.head_dim
            useful = 2.0 * b * hd * _causal_pairs(new, cached)
            _add(acc, ("bmm", b, new, hd, S), useful)  # Q K^T
            _add(acc, ("bmm", b, new, S, hd), useful)  # P V
    if positions:
        _add(acc, ("linear", positions, shape.hidden, shape.vocab), 2.0 * positions * shape.hidden * shape.vocab)
    return acc


def backward_matmuls(shape: ModelShape, rows: int, new: int, cached: int, positions: int, mode: str,
                     lora: tuple[int, Sequence[str]] | None = None) -> dict[Matmul, float]:
    """The matmuls of the backward of one forward, for a `mode="models"` (every weight trained) or `"adapters"`
    (only the LoRA weights trained; the first layer's q/k/v inputs then need no grad) model."""
    if mode not in ("models", "adapters"):
        raise ValueError(f"mode must be 'models' or 'adapters', got {mode!r}")
    acc: dict[Matmul, float] = {}
    M = rows * new
    full = mode == "models"
    if M:
        S = cached + new
        for layer in range(shape.layers):
            for name, fan_in, fan_out in shape.linears():
                input_grad = full or layer > 0 or name not in ("q_proj", "k_proj", "v_proj")
                flops = 2.0 * M * fan_in * fan_out
                if input_grad:
                    _add(acc, ("dx", M, fan_out, fan_in), flops)
                if full:
                    _add(acc, ("dw", M, fan_out, fan_in), flops)
                if lora is not None and name in lora[1]:
                    r = lora[0]
                    _add(acc, ("dw", M, r, fan_in), 2.0 * M * fan_in * r)  # A's weight grad
                    if input_grad:
                        _add(acc, ("dx", M, r, fan_in), 2.0 * M * fan_in * r)
                    _add(acc, ("dw", M, fan_out, r), 2.0 * M * r * fan_out)  # B's weight and input grads
                    _add(acc, ("dx", M, fan_out, r), 2.0 * M * r * fan_out)
            b, hd = rows * shape.heads, shape.head_dim
            useful = 2.0 * b * hd * _causal_pairs(new, cached)
            _add(acc, ("bmm", b, new, hd, S), useful)  # dP = dO V^T
            _add(acc, ("bmm", b, new, S, hd), useful)  # dQ = dS K
            _add(acc, ("bmm", b, S, new, hd), 2.0 * useful)  # dV = P^T dO, dK = dS^T Q
    if positions:
        flops = 2.0 * positions * shape.hidden * shape.vocab
        _add(acc, ("dx", positions, shape.vocab, shape.hidden), flops)
        if full:
            _add(acc, ("dw", positions, shape.vocab, shape.hidden), flops)
    return acc


class RateTable:
    """The measured FLOP rate of each matmul shape on this machine (one thread, best of `repeats`)."""

    def __init__(self, repeats: int = 5, target_s: float = 2e-3) -> None:
        self.repeats = repeats
        self.target_s = target_s
        self.rates: dict[Matmul, float] = {}
        self.seconds = 0.0

    def _operation(self, key: Matmul) -> Callable[[], Any]:
        gen = torch.Generator().manual_seed(0)

        def rand(*size: int) -> torch.Tensor:
            return torch.randn(*size, generator=gen)

        op, *dims = key
        if op == "linear":
            M, K, N = dims
            x, w = rand(M, K), rand(N, K)
            return lambda: F.linear(x, w)
        if op == "dx":
            M, N, K = dims
            g, w = rand(M, N), rand(N, K)
            return lambda: torch.mm(g, w)
        if op == "dw":
            M, N, K = dims
            g, x = rand(M, N), rand(M, K)
            return lambda: torch.mm(g.t(), x)
        if op == "bmm":
            b, m, k, n = dims
            a, c = rand(b, m, k), rand(b, k, n)
            return lambda: torch.bmm(a, c)
        raise ValueError(f"unknown matmul {key}")

    def rate(self, key: Matmul) -> float:
        if key not in self.rates:
            start = time.perf_counter()
            self.rates[key] = full_flops(key) / self._best_seconds(self._operation(key))
            self.seconds += time.perf_counter() - start
        return self.rates[key]

    @torch.no_grad()
    def _best_seconds(self, fn: Callable[[], Any]) -> float:
        fn()
        calls, spent = 1, 0.0
        while True:  # calls per repeat so that a repeat lasts about target_s
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            spent = time.perf_counter() - start
            if spent >= self.target_s or calls >= 1 << 16:
                break
            calls = min(1 << 16, max(calls * 2, int(calls * self.target_s / max(spent, 1e-9))))
        best = spent / calls
        for _ in range(self.repeats - 1):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - start) / calls)
        return best

    def floor_seconds(self, matmuls: dict[Matmul, float]) -> float:
        return sum(flops / self.rate(key) for key, flops in matmuls.items())


class FloorCounter:
    """FLOPs and floor seconds per part of a step from its recorded forward shapes (cached per shape)."""

    def __init__(self, shape: ModelShape, mode: str, lora: tuple[int, Sequence[str]] | None,
                 rates: RateTable) -> None:
        self.shape, self.mode, self.lora, self.rates = shape, mode, lora, rates
        self._cache: dict[tuple[Any, ...], list[tuple[str, float, float]]] = {}

    def of_forward(self, part: str, rows: int, new: int, cached: int, positions: int,
                   grad: bool) -> list[tuple[str, float, float]]:
        """`[(part, flops, floor_s), ...]` of one forward: its own part, plus `backward` when it builds a graph."""
        key = (part, rows, new, cached, positions, grad)
        if key not in self._cache:
            fwd = forward_matmuls(self.shape, rows, new, cached, positions, self.lora)
            out = [(part, sum(fwd.values()), self.rates.floor_seconds(fwd))]
            if grad:
                bwd = backward_matmuls(self.shape, rows, new, cached, positions, self.mode, self.lora)
                out.append(("backward", sum(bwd.values()), self.rates.floor_seconds(bwd)))
            self._cache[key] = out
        return self._cache[key]

    def of_step(self, shapes: list[list[Any]]) -> dict[str, list[float]]:
        """`{part: [flops, floor_s]}` of one step's `shapes` records (`StepProfiler.step`)."""
        acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for part, rows, new, cached, positions, grad, count in shapes:
            for name, flops, floor in self.of_forward(part, rows, new, cached, positions, grad):
                acc[name][0] += count * flops
                acc[name][1] += count * floor
        return dict(acc)


# ---------------------------------------------------------------------------------------------------------------
# Analysis of one side's steps
# ---------------------------------------------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def summarize_side(rounds: list[list[dict[str, Any]]], warmup: int, joint_per_step: int, floors: FloorCounter,
                   region_cost_s: float) -> dict[str, Any]:
    """Step time, throughput, parts, FLOPs and floors over the steps after `warmup` in every round."""
    steps = [s for r in rounds for s in r[warmup:]]
    if not steps:
        raise RuntimeError("no timed steps: raise --steps above the warmup")
    n = len(steps)
    walls = [s["wall"] for s in steps]
    cpus = [s["cpu"] for s in steps]
    parts: dict[str, dict[str, float]] = {}
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])  # wall, cpu, flops, floor
    tokens: dict[str, float] = defaultdict(float)  # decoder tokens (rows x new) and lm_head positions per part
    lm_positions: dict[str, float] = defaultdict(float)
    for s in steps:
        for name, (wall, cpu) in s["parts"].items():
            totals[name][0] += wall
            totals[name][1] += cpu
        for name, (flops, floor) in floors.of_step(s["shapes"]).items():
            totals[name][2] += flops
            totals[name][3] += floor
        for part, rows, new, _cached, positions, _grad, count in s["shapes"]:
            tokens[part] += rows * new * count
            lm_positions[part] += positions * count
    rest_wall = sum(walls) - sum(t[0] for t in totals.values())
    rest_cpu = sum(cpus) - sum(t[1] for t in totals.values())
    totals["rest"][0] += rest_wall
    totals["rest"][1] += rest_cpu
    for name, (wall, cpu, flops, floor) in totals.items():
        entry = {"wall_ms": 1e3 * wall / n, "cpu_ms": 1e3 * cpu / n, "share_of_step": wall / sum(walls)}
        if flops:
            entry.update(gflop=flops / n / 1e9, floor_ms=1e3 * floor / n, achieved_over_floor=wall / floor,
                         achieved_over_floor_cpu=cpu / floor)
        parts[name] = entry
    floor_total = sum(t[3] for t in totals.values())
    flops_total = sum(t[2] for t in totals.values())
    median_step = _median(walls)
    events = sum(s["events"] for s in steps) / n
    return {
        "timed_steps": n,
        "median_step_s": median_step,
        "mean_step_s": sum(walls) / n,
        "joint_samples_per_s": joint_per_step / median_step,
        "joint_samples_per_s_mean": joint_per_step * n / sum(walls),
        "median_cpu_s": _median(cpus),
        "cpu_over_wall": sum(cpus) / sum(walls),
        "matmul_gflop_per_step": flops_total / n / 1e9,
        "floor_ms_per_step": 1e3 * floor_total / n,
        "achieved_over_floor": sum(walls) / floor_total if floor_total else float("nan"),
        "achieved_over_floor_cpu": sum(cpus) / floor_total if floor_total else float("nan"),
        "parts": {name: parts[name] for name in sorted(parts, key=lambda k: PARTS.index(k) if k in PARTS else 99)},
        "decoder_tokens_per_step": {k: v / n for k, v in tokens.items()},
        "lm_head_positions_per_step": {k: v / n for k, v in lm_positions.items()},
        "generated_tokens_per_step_median": _median([s.get("tokens", float("nan")) for s in steps]),
        "timed_regions_per_step": events,
        "instrumentation_ms_per_step": 1e3 * events * region_cost_s,
        "step_times_s": walls,
    }


# ---------------------------------------------------------------------------------------------------------------
# Our side
# ---------------------------------------------------------------------------------------------------------------


def _trainer_kwargs(P: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """The settings of bench_magrpo.py's comlrl comparison, with P prompts per step."""
    G = cfg["num_generations"]
    return dict(
        num_agents=2, num_generations=G, per_device_train_batch_size=P * G, max_completion_length=cfg["max_len"],
        learning_rate=cfg["lr"], lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, top_k=0,
        scale_rewards="group",  # = comlrl's default advantage_normalization=True (divide by the group std)
        bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, seed=0, max_steps=cfg["steps"],
    )


def build_ours(model_dir: str, mode: str, P: int, cfg: dict[str, Any], work_dir: Path,
               profiler: StepProfiler) -> tuple[Any, list[list[dict[str, Any]]]]:
    """A two-agent MAGRPOTrainer with every part of its step timed by `profiler`; returns it and its rounds."""
    from bench_magrpo import _quiet_trainer
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    lora = LoraConfig(r=LORA_R, lora_alpha=2 * LORA_R, target_modules=list(LORA_TARGETS), lora_dropout=0.0)
    trainer = MAGRPOTrainer(
        model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
        processing_class=load_tokenizer(model_dir), peft_config=lora if mode == "adapters" else None,
        args=MAGRPOConfig(output_dir=str(work_dir / f"out-profile-{mode}"), team_mode=mode,
                          **_trainer_kwargs(P, cfg)),
        train_dataset=Dataset.from_dict({"target": [10] * (P * cfg["steps"] * 4)}),
    )
    _quiet_trainer(trainer)
    team = trainer.team
    hooked: set[int] = set()
    for a in range(team.num_agents):
        model = team.base_model_of(a)
        if id(model) not in hooked:
            hooked.add(id(model))
            profiler.hook_causal_lm(model)
    for obj, method, part in ((team, "generate", "generate"), (team, "policy_logps", "logps"),
                              (team, "reference_logps", "logps"), (trainer, "compute_rewards", "reward"),
                              (trainer, "_make_batches", "rollout"), (trainer, "compute_loss", "loss"),
                              (trainer, "_clip_grad_norm", "grad_clip")):
        profiler.wrap_method(obj, method, part)
    # with `backward_per_agent` (the default) `training_step` runs each agent's forward, loss and backward in
    # `per_agent.backward_per_agent` (as `trainers.magrpo.trainer` calls it), not in `compute_loss`: time it as the
    # loss phase too (its backwards are nested regions of their own), so that its forwards count as training forwards
    from trl_marl.trainers.magrpo import trainer as magrpo_trainer

    if not hasattr(magrpo_trainer.backward_per_agent, "__wrapped__"):  # once for both teams
        profiler.wrap_method(magrpo_trainer, "backward_per_agent", "loss")
    rounds: list[list[dict[str, Any]]] = []

    class ProfileSteps(TrainerCallback):
        """A step runs from one `on_step_end` to the next (the first from `on_train_begin`)."""

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            rounds.append([])
            profiler.mark()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            record = profiler.step()
            record["tokens"] = trainer.last_rollout.generated_tokens
            rounds[-1].append(record)

    trainer.add_callback(ProfileSteps())
    return trainer, rounds


# ---------------------------------------------------------------------------------------------------------------
# comlrl side
# ---------------------------------------------------------------------------------------------------------------


def run_comlrl(model_dir: str, P: int, cfg: dict[str, Any], json_path: Path) -> dict[str, Any]:
    """One profiled comlrl run (a child process in comlrl's virtualenv); returns the peer's JSON."""
    command = [
        COMLRL_PYTHON, str(PEER_SCRIPT), "--model-dir", model_dir, "--steps", str(cfg["steps"]),
        "--warmup", str(cfg["warmup"]), "--num-generations", str(cfg["num_generations"]),
        "--max-new-tokens", str(cfg["max_len"]), "--prompts-per-step", str(P), "--lr", str(cfg["lr"]),
        "--temperature", "1.0", "--top-p", "1.0", "--top-k", "0", "--threads", "1", "--seed", "0",
        "--json", str(json_path), "--profile",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"comlrl peer failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    with open(json_path) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------------------------
# One (size, P) configuration: the three sides in turns
# ---------------------------------------------------------------------------------------------------------------


def bench_config(size: str, P: int, cfg: dict[str, Any], work_dir: Path, rates: RateTable,
                 region_cost_s: float) -> dict[str, Any]:
    from trl_marl.toy import make_toy_model

    spec = SIZES[size]
    model_dir = str(work_dir / f"target10-h{spec['hidden']}-l{spec['layers']}")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=spec["hidden"], num_layers=spec["layers"],
                   seed=0, pretrain_steps=spec["pretrain_steps"])
    builder = {"builder": "trl_marl.toy.make_toy_model", "task": "target", "targets": [10],
               "hidden_size": spec["hidden"], "num_layers": spec["layers"], "seed": 0,
               "pretrain_steps": spec["pretrain_steps"]}
    with open(os.path.join(model_dir, "config.json")) as f:
        shape = ModelShape.from_config(json.load(f))

    profiler = StepProfiler()
    profiler.install_global()
    ours = {mode: build_ours(model_dir, mode, P, cfg, work_dir, profiler) for mode in ("models", "adapters")}
    params = sum(p.numel() for p in ours["models"][0].team.models[0].parameters())
    lora_params = sum(p.numel() for n, p in ours["adapters"][0].team.named_parameters() if "lora_" in n)
    peer_runs: list[dict[str, Any]] = []
    order = list(SIDES)
    load_before = os.getloadavg()
    try:
        for r in range(cfg["rounds"]):
            for side in order[r % 3:] + order[: r % 3]:  # rotate who goes first
                print(f"  [{size} P={P}] round {r + 1}/{cfg['rounds']}: {side}", flush=True)
                if side == "comlrl":
                    peer_runs.append(run_comlrl(model_dir, P, cfg, work_dir / f"comlrl-{size}-P{P}-r{r}.json"))
                else:
                    ours[side.removeprefix("ours_")][0].train()
    finally:
        profiler.remove()
    load_after = os.getloadavg()

    joint = P * cfg["num_generations"]
    lora = (LORA_R, LORA_TARGETS)
    result: dict[str, Any] = {
        "size": size, "prompts_per_step": P, "num_generations": cfg["num_generations"],
        "joint_samples_per_step": joint, "max_new_tokens": cfg["max_len"], "rounds": cfg["rounds"],
        "steps_per_round": cfg["steps"], "warmup_steps_per_round": cfg["warmup"],
        "model": {"dir": model_dir, **builder, "params_per_agent": params, "lora_params_per_agent": lora_params // 2,
                  "shape": vars(shape)},
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
    }
    for mode in ("models", "adapters"):
        floors = FloorCounter(shape, mode, lora if mode == "adapters" else None, rates)
        result[f"ours_{mode}"] = summarize_side(ours[mode][1], cfg["warmup"], joint, floors, region_cost_s)
    peer_floors = FloorCounter(shape, "models", None, rates)
    result["comlrl"] = summarize_side([run["profile"]["steps"] for run in peer_runs], cfg["warmup"], joint,
                                      peer_floors, peer_runs[0]["profile"]["region_cost_s"])
    result["comlrl"]["version"] = peer_runs[0]["comlrl_version"]
    result["comlrl"]["peer_median_step_s_per_run"] = [run["median_step_s"] for run in peer_runs]
    rate = {side: result[side]["joint_samples_per_s"] for side in SIDES}
    result["ratio_models_vs_comlrl"] = rate["ours_models"] / rate["comlrl"]
    result["ratio_adapters_vs_comlrl"] = rate["ours_adapters"] / rate["comlrl"]
    result["ratio_adapters_vs_models"] = rate["ours_adapters"] / rate["ours_models"]
    for mode in ("models", "adapters"):
        del ours[mode]
    gc.collect()
    return result


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------


def _fmt_part(entry: dict[str, float] | None) -> str:
    if entry is None:
        return "-"
    text = f"{entry['wall_ms']:.1f}"
    if "achieved_over_floor" in entry:
        text += f" ({entry['achieved_over_floor']:.1f}x)"
    return text


def markdown_tables(results: dict[str, Any]) -> str:
    runs = results["runs"]
    lines = [
        "| model | P | side | step ms (median) | joint samples/s | vs comlrl | matmul MFLOP/step | floor ms/step "
        "| achieved/floor (wall) | achieved/floor (CPU) | CPU/wall |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        label = f"{run['size']} ({run['model']['params_per_agent'] / 1e3:.0f}k)"
        for side in SIDES:
            s = run[side]
            versus = {"ours_models": f"{run['ratio_models_vs_comlrl']:.2f}x",
                      "ours_adapters": f"{run['ratio_adapters_vs_comlrl']:.2f}x", "comlrl": "1"}[side]
            lines.append(
                f"| {label} | {run['prompts_per_step']} | {side} | {1e3 * s['median_step_s']:.1f} "
                f"| {s['joint_samples_per_s']:.0f} | {versus} | {1e3 * s['matmul_gflop_per_step']:.1f} "
                f"| {s['floor_ms_per_step']:.2f} | {s['achieved_over_floor']:.1f}x "
                f"| {s['achieved_over_floor_cpu']:.1f}x | {s['cpu_over_wall']:.2f} |"
            )
    shown = [p for p in PARTS if any(p in run[side]["parts"] for run in runs for side in SIDES)]
    lines += [
        "",
        "Wall ms per step by part (mean over the timed steps; in brackets achieved / floor for the matmul parts):",
        "",
        "| model | P | side | " + " | ".join(PART_LABELS.get(p, p) for p in shown) + " | step (mean) |",
        "|---|---|---|" + "---|" * (len(shown) + 1),
    ]
    for run in runs:
        for side in SIDES:
            s = run[side]
            cells = [_fmt_part(s["parts"].get(p)) for p in shown]
            lines.append(f"| {run['size']} | {run['prompts_per_step']} | {side} | " + " | ".join(cells)
                         + f" | {1e3 * s['mean_step_s']:.1f} ({s['achieved_over_floor']:.1f}x) |")
    lines += ["", "adapters / models joint samples/s (ours): " + ", ".join(
        f"{run['size']} P={run['prompts_per_step']}: {run['ratio_adapters_vs_models']:.2f}x" for run in runs)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------


def configs(quick: bool) -> dict[str, Any]:
    common = dict(num_generations=8, max_len=4, lr=3e-4)
    if quick:
        return dict(sizes=["small"], prompts=[1, 4], rounds=1, steps=5, warmup=2, **common)
    return dict(sizes=["small", "large"], prompts=[1, 4], rounds=3, steps=20, warmup=3, **common)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description="Profile of MAGRPOTrainer's step and its matmul floor, vs comlrl.")
    parser.add_argument("--quick", action="store_true", help="small model only, one round of a few steps (smoke)")
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), help="model sizes (default: both; quick: small)")
    parser.add_argument("--prompts", nargs="+", type=int, help="prompts per optimizer step (default: 1 4)")
    parser.add_argument("--rounds", type=int, help="rounds of the three sides (default 3; quick 1)")
    parser.add_argument("--steps", type=int, help="steps per side per round, warmup included (default 20; quick 5)")
    parser.add_argument("--warmup", type=int, help="leading steps of every round left out (default 3; quick 2)")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "trl_marl_bench"),
                        help="cached toy models and trainer output (not in the repository)")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    args = parser.parse_args(argv)
    cfg = configs(args.quick)
    for key in ("sizes", "prompts", "rounds", "steps", "warmup"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["steps"] <= cfg["warmup"]:
        parser.error(f"--steps ({cfg['steps']}) must be larger than --warmup ({cfg['warmup']})")
    if not os.path.exists(COMLRL_PYTHON):
        parser.error(f"no comlrl interpreter at {COMLRL_PYTHON}: point COMLRL_PYTHON at a python with comlrl 1.4.3, "
                     "or run `python -m benchmarks speed --only profile` (builds it)")

    torch.set_num_threads(1)
    from bench_magrpo import _cpu_seconds, _source_state, _versions
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    started, cpu_start = time.perf_counter(), _cpu_seconds()
    region_cost = instrumentation_cost()
    rates = RateTable()
    results: dict[str, Any] = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/speed/bench_profile.py",
                             *(sys.argv[1:] if argv is None else argv)]),
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "versions": _versions(),
        "source": _source_state(),
        "quick": args.quick,
        "config": cfg,
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "region_cost_us": 1e6 * region_cost,
        "runs": [],
    }
    for size in cfg["sizes"]:
        for P in cfg["prompts"]:
            print(f"[bench_profile] {size} P={P} (load {os.getloadavg()[0]:.2f})", flush=True)
            results["runs"].append(bench_config(size, P, cfg, work_dir, rates, region_cost))
    results["rates"] = {"shapes_measured": len(rates.rates), "measure_s": rates.seconds,
                        "gflops_min": min(rates.rates.values()) / 1e9, "gflops_max": max(rates.rates.values()) / 1e9,
                        "gflops_by_shape": [[*key, round(rate / 1e9, 3)] for key, rate in sorted(rates.rates.items())]}
    results["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["total_wall_s"] = time.perf_counter() - started
    # ~1.0 when this single-threaded benchmark (and its children) had a core to itself the whole time
    results["cpu_over_wall"] = (_cpu_seconds() - cpu_start) / results["total_wall_s"]
    results["table_markdown"] = markdown_tables(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print()
    print(results["table_markdown"])
    print(f"\nmatmul rates measured for {len(rates.rates)} shapes in {rates.seconds:.1f} s "
          f"({results['rates']['gflops_min']:.2f}-{results['rates']['gflops_max']:.1f} GFLOP/s); one timed region "
          f"costs {results['region_cost_us']:.2f} us; CPU/wall of the whole run {results['cpu_over_wall']:.2f}; load "
          f"{results['load_at_start']} -> {results['load_at_end']}; {results['total_wall_s']:.0f} s; "
          f"results in {args.json}")
    return results


if __name__ == "__main__":
    main()
