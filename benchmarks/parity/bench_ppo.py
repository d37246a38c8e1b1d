"""``trl_marl.PPOTrainer`` (drop-in) against TRL 1.12's ``trl.experimental.ppo.PPOTrainer`` on CPU.

Run from the repository root with the development virtualenv (TRL 1.16); the TRL 1.12 side runs in its own
virtualenv (``$TRL112_PYTHON``, else the cached one of ``benchmarks/peers.py``) through ``bench_ppo_trl112_peer.py``
(a subprocess)::

    PYTHONPATH=src python benchmarks/parity/bench_ppo.py              # (a), (b), (c): about 5 minutes
    PYTHONPATH=src python benchmarks/parity/bench_ppo.py --profile    # + one cProfile run per side (+1 min)

Every side runs in its own process, one process at a time, with ``torch.set_num_threads(1)`` and
``OMP_NUM_THREADS=1`` (DESIGN.md, "CPU timing pitfall"). Before each timed process the script waits (up to
``--max-wait`` s) for other processes to go quiet, and it reports how many cores other processes used meanwhile.

(a) ``equivalence``: the first update of both trainers on *identical rollouts*. Responses are sampled once from the
    toy policy and saved (``<workdir>/fixture.json``: prompt and completion token ids). Our side replaces
    ``trainer.team.generate`` with a function returning the recorded completions; the TRL 1.12 side replaces
    ``trl.experimental.ppo.ppo_trainer.batch_generation`` with a function returning the recorded query + response
    tokens (as wide as ``generate`` makes them: the longest completion of the batch) and, as generation-time scores,
    the logits of a full forward of the policy divided by the temperature. Both dataloaders yield the recorded
    prompts in order (the dataset holds them twice, so the replayed batch is not the dataloader's last one:
    accelerate syncs gradients at every micro-batch of a dataloader's last batch in TRL 1.12's loop);
    ``np.random.seed`` is set right before ``train()`` on both sides and every ``np.random.permutation`` is recorded
    and compared. The reference policy is a perturbed copy of the policy, so the KL terms are not zero. The cases
    exercise k1/k3, reward whitening, one or two mini-batches, gradient accumulation, the missing-EOS penalty, both
    score positions, and a batch whose responses all stop before ``response_length``.
(b) ``learning``: ``--updates`` (30) updates with normal sampling on both sides (same seed, models, prompts and
    settings): objective/scores.
(c) ``speed``: seconds per update (between two ``on_step_end`` events, so generation, scoring, PPO epochs and
    logging are all in), wall and CPU time, medians over the updates after ``--warmup``; rounds rotate the order of
    the sides. A third side, TRL 1.12 with its per-update ``gc.collect()`` calls made no-ops, is a diagnostic.

Models (built once under ``--workdir``, default ``/tmp/bench_ppo``): the policy is
``trl_marl.toy.make_toy_model(task="addition", hidden_size=64, num_layers=2, pretrain_steps=200)``; the reward model
is a sequence classifier on that backbone trained here (a few seconds) to score an answer as about answer / 100,
saved once and loaded by both sides; the value model is loaded from the same folder (as in TRL's PPO example). The
tokenizer is loaded with ``PreTrainedTokenizerFast.from_pretrained`` on both sides.

The script prints markdown tables and writes ``<workdir>/results_ppo.json``. This module imports nothing from
``trl``/``trl_marl`` at import time: the peer imports its settings and helpers from it.
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
import cProfile  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

warnings.filterwarnings("ignore")

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parents[1]
SRC_DIR = REPO_ROOT / "src"
PEER_SCRIPT = BENCH_DIR / "bench_ppo_trl112_peer.py"
sys.path.insert(0, str(BENCH_DIR.parent))
from peers import peer_python  # noqa: E402

TRL112_PYTHON = peer_python("trl112")
DEFAULT_WORKDIR = Path(os.environ.get("BENCH_PPO_WORKDIR", "/tmp/bench_ppo"))

SEED = 0
TOY_KWARGS: dict[str, Any] = {"task": "addition", "hidden_size": 64, "num_layers": 2, "pretrain_steps": 200, "seed": 0}

# The metrics of acceptance criterion (a), in TRL's order.
METRICS: tuple[str, ...] = (
    "objective/kl",
    "objective/entropy",
    "objective/non_score_reward",
    "objective/rlhf_reward",
    "objective/scores",
    "policy/approxkl_avg",
    "policy/clipfrac_avg",
    "loss/policy_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/entropy_avg",
    "val/ratio",
    "val/ratio_var",
    "val/num_eos_tokens",
)
# Metrics that are means of TRL's `(num_ppo_epochs, num_mini_batches, gradient_accumulation_steps)` stats arrays
# (val/ratio_var is their variance).
STATS_METRICS: tuple[str, ...] = (
    "policy/approxkl_avg",
    "policy/clipfrac_avg",
    "loss/policy_avg",
    "loss/value_avg",
    "val/clipfrac_avg",
    "policy/entropy_avg",
    "val/ratio",
)

# PPOConfig fields shared by every run of both sides (the rest comes from the case).
COMMON_PPO: dict[str, Any] = {
    "stop_token": "eos",
    "missing_eos_penalty": 1.0,
    "kl_coef": 0.05,
    "num_ppo_epochs": 2,
    "temperature": 0.7,
    "learning_rate": 1e-3,
    "seed": SEED,
    "report_to": "none",
    "num_sample_generations": 0,
    "save_strategy": "no",
    "logging_steps": 1,
    "bf16": False,
    "gradient_checkpointing": False,
    "disable_tqdm": True,
    "local_rollout_forward_batch_size": 64,
}

# (a) Replayed first updates. `rows`: "mixed" = the first local_batch_size recorded rows (some end with EOS before
# the last position, some run to `response_length` without EOS); "eos" = recorded rows that all end with EOS, with
# a `response_length` larger than any of them (generation stops early on the TRL side).
EQUIV_CASES: tuple[dict[str, Any], ...] = (
    {
        "name": "k1",
        "kl_estimator": "k1",
        "whiten_rewards": False,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "num_mini_batches": 2,
        "response_length": 4,
        "rows": "mixed",
    },
    {
        "name": "k3",
        "kl_estimator": "k3",
        "whiten_rewards": False,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "num_mini_batches": 2,
        "response_length": 4,
        "rows": "mixed",
    },
    # whiten_rewards needs >= 8 episodes per mini-batch (both trainers check it): ga=4 gives 16 episodes, 2 x 8.
    {
        "name": "k1 whiten",
        "kl_estimator": "k1",
        "whiten_rewards": True,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 4,
        "num_mini_batches": 2,
        "response_length": 4,
        "rows": "mixed",
    },
    {
        "name": "k3 whiten",
        "kl_estimator": "k3",
        "whiten_rewards": True,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 4,
        "num_mini_batches": 2,
        "response_length": 4,
        "rows": "mixed",
    },
    {
        "name": "k1 nmb=1",
        "kl_estimator": "k1",
        "whiten_rewards": False,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "num_mini_batches": 1,
        "response_length": 4,
        "rows": "mixed",
    },
    {
        "name": "k1 early stop",
        "kl_estimator": "k1",
        "whiten_rewards": False,
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "num_mini_batches": 2,
        "response_length": 6,
        "rows": "eos",
    },
)



def _grid_cases() -> tuple[dict[str, Any], ...]:
    """Issue 12's grid: every (num_mini_batches, gradient_accumulation_steps, num_ppo_epochs) in {1,2,4} x {1,2} x
    {1,4} at `per_device_train_batch_size=8`, each twice: (a) whitened rewards where TRL 1.12 accepts them (>= 8
    episodes per mini-batch), the missing-EOS penalty, a full policy with a perturbed reference; (b) the same
    whitening, no missing-EOS penalty, a LoRA policy (random A and B, so that the KL is not zero) whose reference is
    the policy with its adapter disabled. Mini-batches smaller than a micro-batch (e.g. 8 episodes in 4 mini-batches)
    are the configurations issue 12 found refused."""
    cases = []
    for nmb in (1, 2, 4):
        for ga in (1, 2):
            for epochs in (1, 4):
                whiten = 8 * ga // nmb >= 8
                for lora in (False, True):
                    cases.append({
                        "name": f"nmb={nmb} ga={ga} ep={epochs}{' whiten' if whiten else ''}"
                                f"{' lora' if lora else ' eos-penalty'}",
                        "kl_estimator": "k1",
                        "whiten_rewards": whiten,
                        "per_device_train_batch_size": 8,
                        "gradient_accumulation_steps": ga,
                        "num_mini_batches": nmb,
                        "num_ppo_epochs": epochs,
                        "missing_eos_penalty": None if lora else 1.0,
                        "lora": lora,
                        "response_length": 4,
                        "rows": "mixed",
                    })
    # a mini-batch that is not a multiple of the micro-batch: 12 episodes -> micro-batches of 8 and 4 (as TRL 1.12)
    cases.append({"name": "nmb=2 ga=3 ep=2 whiten eos-penalty", "kl_estimator": "k3", "whiten_rewards": True,
                  "per_device_train_batch_size": 8, "gradient_accumulation_steps": 3, "num_mini_batches": 2,
                  "num_ppo_epochs": 2, "missing_eos_penalty": 1.0, "lora": False, "response_length": 4,
                  "rows": "mixed"})
    return tuple(cases)


GRID_CASES: tuple[dict[str, Any], ...] = _grid_cases()
CASE_SETS: dict[str, tuple[dict[str, Any], ...]] = {"default": EQUIV_CASES, "grid": GRID_CASES}

# (b) + (c): normal sampling.
TRAIN_CASE: dict[str, Any] = {
    "name": "train",
    "kl_estimator": "k1",
    "whiten_rewards": False,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "num_mini_batches": 2,
    "response_length": 6,
}
NUM_RECORDED = 32  # recorded (prompt, completion) rows for (a)
RECORD_LENGTH = 4  # max_new_tokens when recording (= response_length of the "mixed" cases)
NUM_TRAIN_PROMPTS = 512


# ---------------------------------------------------------------------------------------------------------------
# Helpers shared with the peer (transformers / datasets / torch only)
# ---------------------------------------------------------------------------------------------------------------


def ppo_config_kwargs(case: dict[str, Any], output_dir: str, total_episodes: int) -> dict[str, Any]:
    """PPOConfig keyword arguments of a case (the same dict is given to both trainers)."""
    keys = (
        "kl_estimator",
        "whiten_rewards",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_mini_batches",
        "response_length",
        "num_ppo_epochs",
        "missing_eos_penalty",
    )
    return {**COMMON_PPO, **{k: case[k] for k in keys if k in case}, "output_dir": output_dir,
            "total_episodes": total_episodes}


def lora_config(case: dict[str, Any]) -> Any:
    """The LoRA config of a case (None without LoRA): r=4 on q/v, random A and B (non-zero KL from the start)."""
    if not case.get("lora"):
        return None
    from peft import LoraConfig

    return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"],
                      init_lora_weights=False, task_type="CAUSAL_LM")


def local_batch_size(case: dict[str, Any]) -> int:
    return int(case["per_device_train_batch_size"] * case["gradient_accumulation_steps"])


def load_tokenizer(path: str | Path) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(path))


def load_models(workdir: Path, perturbed_ref: bool) -> tuple[Any, Any, Any, Any, Any]:
    """`(tokenizer, policy, ref_policy, reward_model, value_model)`, fresh from disk.

    With `perturbed_ref` the reference policy is the saved perturbed copy of the policy (so the KL terms are not
    zero in the first update), otherwise a second copy of the policy (the usual setup).
    """
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    policy_dir, reward_dir = workdir / "policy", workdir / "reward"
    tokenizer = load_tokenizer(policy_dir)
    policy = AutoModelForCausalLM.from_pretrained(str(policy_dir))
    ref_policy = AutoModelForCausalLM.from_pretrained(str(workdir / "ref" if perturbed_ref else policy_dir))
    reward_model = AutoModelForSequenceClassification.from_pretrained(str(reward_dir), num_labels=1)
    value_model = AutoModelForSequenceClassification.from_pretrained(str(reward_dir), num_labels=1)
    return tokenizer, policy, ref_policy, reward_model, value_model


def read_fixture(workdir: Path) -> dict[str, Any]:
    with open(workdir / "fixture.json") as f:
        return json.load(f)


def case_rows(fixture: dict[str, Any], case: dict[str, Any]) -> list[dict[str, list[int]]]:
    """The recorded rows replayed in a case, in dataloader order."""
    n = local_batch_size(case)
    rows = fixture["rows"]
    if case["rows"] == "eos":
        rows = [r for r in rows if r["completion_ids"] and r["completion_ids"][-1] == fixture["eos_token_id"]]
    if len(rows) < n:
        raise RuntimeError(f"Case {case['name']!r} needs {n} recorded rows, the fixture has {len(rows)}.")
    return rows[:n]


def replay_dataset(rows: Sequence[dict[str, list[int]]]) -> Any:
    """The recorded prompts twice: the replayed update reads the first copy (never the dataloader's last batch)."""
    from datasets import Dataset

    prompts = [list(r["prompt_ids"]) for r in rows]
    return Dataset.from_dict({"input_ids": prompts + prompts})


def train_dataset(fixture: dict[str, Any]) -> Any:
    from datasets import Dataset

    return Dataset.from_dict({"input_ids": fixture["train_prompt_ids"]})


@contextmanager
def recorded_permutations() -> Iterator[list[list[int]]]:
    """Seed numpy with `SEED` and record every `np.random.permutation` call made inside the block."""
    calls: list[list[int]] = []
    original = np.random.permutation

    def permutation(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        calls.append([int(i) for i in out])
        return out

    np.random.seed(SEED)
    np.random.permutation = permutation
    try:
        yield calls
    finally:
        np.random.permutation = original


def first_log(trainer: Any) -> dict[str, float]:
    logs = [h for h in trainer.state.log_history if "objective/scores" in h]
    return {k: float(v) for k, v in logs[0].items() if isinstance(v, (int, float))}


class StepTimer(TrainerCallback):
    """Records wall time (`perf_counter`) and CPU time of this process (`process_time`) at `on_train_begin` and at
    every `on_step_end` (one PPO update). CPU time is much less sensitive than wall time to other processes
    competing for the cores (one torch thread, so CPU time ~ the work done)."""

    def __init__(self) -> None:
        self.begin = (0.0, 0.0)
        self.ends: list[tuple[float, float]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.begin = (time.perf_counter(), time.process_time())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append((time.perf_counter(), time.process_time()))

    def update_seconds(self, clock: int = 0) -> list[float]:
        """Per-update seconds: `clock=0` wall time, `clock=1` CPU time."""
        starts = [self.begin, *self.ends[:-1]]
        return [end[clock] - start[clock] for start, end in zip(starts, self.ends)]


def quiet(trainer: Any) -> None:
    """Drop the callbacks that print every log line or a progress bar (the same on both sides)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)


def train_result(trainer: Any, timer: StepTimer, wall: float, profile: dict[str, float]) -> dict[str, Any]:
    logs = [h for h in trainer.state.log_history if "objective/scores" in h]
    return {
        "scores": [float(h["objective/scores"]) for h in logs],
        "kl": [float(h["objective/kl"]) for h in logs],
        "update_seconds": timer.update_seconds(0),
        "update_cpu_seconds": timer.update_seconds(1),
        "train_wall_seconds": wall,
        "profile": profile,
    }


# Functions whose cumulative time the profile summary reports: label -> (file suffix, function name).
PROFILE_LABELS: dict[str, tuple[str, str]] = {
    "train (total)": ("ppo_trainer.py", "train"),
    "gc.collect": ("~", "<built-in method gc.collect>"),
    "HF generate": ("generation/utils.py", "generate"),
    "backward": ("torch/_tensor.py", "backward"),
    "optimizer step": ("accelerate/optimizer.py", "step"),
    "ours: rollout": ("trainers/ppo/trainer.py", "rollout"),
    "ours: old/ref logprobs, values, GAE": ("trainers/ppo/trainer.py", "_prepare_ppo_targets"),
    "ours: reward model": ("trainers/ppo/trainer.py", "_score"),
    "ours: PPO micro-steps (forward)": ("trainers/ppo/trainer.py", "_ppo_micro_step"),
    "TRL: reward/value forward (get_reward)": ("experimental/utils.py", "get_reward"),
    "TRL: forward() (ref + PPO micro-steps)": ("experimental/ppo/ppo_trainer.py", "forward"),
}


def profiled(fn: Callable[[], Any], out_path: Path | None, top: int = 40) -> tuple[Any, dict[str, float]]:
    """Run `fn`, under cProfile when `out_path` is given: the top functions go to the file, and the cumulative
    seconds of the `PROFILE_LABELS` functions are returned with the result."""
    if out_path is None:
        return fn(), {}
    profiler = cProfile.Profile()
    result = profiler.runcall(fn)
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(25)
    out_path.write_text(stream.getvalue())
    summary: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for label, (suffix, name) in PROFILE_LABELS.items():
        seconds = [v[3] for (file, _, func), v in raw.items() if file.endswith(suffix) and func == name]
        if seconds:
            summary[label] = max(seconds)  # recursive entries repeat the outermost cumulative time
    return result, summary


def source_fingerprint() -> dict[str, str]:
    """The git commit of the checkout and short hashes of the PPO source files (the working tree may differ)."""
    import hashlib

    out: dict[str, str] = {}
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=REPO_ROOT, capture_output=True, text=True)
        out["git_head"] = head.stdout.strip() + (" (src/ modified)" if dirty.stdout.strip() else "")
    except OSError:
        out["git_head"] = "unknown"
    for rel in ("trainers/ppo/trainer.py", "trainers/ppo/config.py", "core/ppo.py", "team/policies.py",
                "team/forward.py", "team/sampling.py", "team/generation/transformers_backend.py"):
        path = SRC_DIR / "trl_marl" / rel
        if path.exists():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return out


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("torch", "transformers", "trl", "accelerate", "datasets", "numpy"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def setup_child() -> None:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")


# ---------------------------------------------------------------------------------------------------------------
# Setup (our venv): toy policy, reward model, recorded rollouts
# ---------------------------------------------------------------------------------------------------------------


def _left_pad(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
    return ids, (ids != pad).long()


def _scored_example(rng: random.Random) -> tuple[str, str, float]:
    """An addition prompt with a random answer (0-198) and the reward model's target: the answer / 100."""
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    answer = a + b if rng.random() < 0.3 else rng.randint(0, 198)
    return f"Q:{a}+{b}=A:", str(answer), answer / 100


def train_reward_model(policy_dir: Path, out_dir: Path, steps: int = 200, batch: int = 64) -> dict[str, float]:
    """A sequence classifier on the toy backbone that scores `prompt + answer (+ EOS)` as about `answer / 100`.

    A deterministic, learnable preference (larger answers score higher) that PPO can improve within a few dozen
    updates, saved once and loaded by both sides. The score is read exactly as both trainers read it: the score
    head on the last hidden state at the last non-pad token of the response (an answer without EOS is scored
    too, a little lower).
    """
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(SEED + 1)
    rng = random.Random(SEED + 1)
    tokenizer = load_tokenizer(policy_dir)
    model = AutoModelForSequenceClassification.from_pretrained(str(policy_dir), num_labels=1)
    backbone = getattr(model, model.base_model_prefix)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    def batch_of(n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows, targets = [], []
        for _ in range(n):
            prompt, answer, target = _scored_example(rng)
            ids = tokenizer(prompt + answer)["input_ids"]
            if rng.random() < 0.8:
                ids = [*ids, tokenizer.eos_token_id]
            else:
                target -= 0.5
            rows.append(ids)
            targets.append(target)
        ids, mask = _left_pad(rows, tokenizer.pad_token_id)
        return ids, mask, torch.tensor(targets)

    def scores(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        out = backbone(
            input_ids=ids,
            attention_mask=mask,
            position_ids=mask.cumsum(1) - mask,
            output_hidden_states=True,
            use_cache=False,
        )
        return model.score(out.hidden_states[-1][:, -1]).squeeze(-1)

    model.train()
    for _ in range(steps):
        ids, mask, targets = batch_of(batch)
        loss = torch.nn.functional.mse_loss(scores(ids, mask), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        ids, mask, targets = batch_of(1024)
        s = scores(ids, mask)
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    return {
        "reward_model_mse": float(torch.nn.functional.mse_loss(s, targets)),
        "reward_model_target_var": float(targets.var()),
    }


def record_rollouts(policy_dir: Path) -> dict[str, Any]:
    """Sample responses from the toy policy (token ids) for (a), and the training prompts of (b)/(c).

    Prompts are unique. Sampling uses temperature 1 and `RECORD_LENGTH` new tokens; the seed is moved on until
    the first 8 and the first 16 rows both hold a response cut without EOS and one ending with EOS before the last
    position (so the missing-EOS penalty and both score positions are exercised).
    """
    from transformers import AutoModelForCausalLM

    from trl_marl.toy import AdditionTask

    tokenizer = load_tokenizer(policy_dir)
    policy = AutoModelForCausalLM.from_pretrained(str(policy_dir)).eval()
    rng = random.Random(SEED)
    task = AdditionTask()
    prompts: list[str] = []
    while len(prompts) < NUM_RECORDED:
        prompt = task.sample(rng)[0]
        if prompt not in prompts:
            prompts.append(prompt)
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    ids, mask = _left_pad(prompt_ids, tokenizer.pad_token_id)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id

    def good(completions: list[list[int]], n: int) -> bool:
        head = completions[:n]
        return any(eos not in c for c in head) and any(eos in c and len(c) < RECORD_LENGTH for c in head)

    for seed in range(SEED, SEED + 100):
        torch.manual_seed(seed)
        with torch.no_grad():
            out = policy.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=RECORD_LENGTH,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        completions = []
        for row in out[:, ids.size(1) :].tolist():
            cut = row[: row.index(eos) + 1] if eos in row else row
            completions.append(cut)
        n_eos = sum(1 for c in completions if c and c[-1] == eos)
        if good(completions, 8) and good(completions, 16) and n_eos >= 8:
            break
    else:
        raise RuntimeError("could not record a batch with and without EOS")
    train_rng = random.Random(SEED + 2)
    train_prompts = [task.sample(train_rng)[0] for _ in range(NUM_TRAIN_PROMPTS)]
    return {
        "record_seed": seed,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "rows": [{"prompt_ids": p, "completion_ids": c} for p, c in zip(prompt_ids, completions)],
        "train_prompt_ids": [tokenizer(p)["input_ids"] for p in train_prompts],
    }


def save_perturbed_reference(policy_dir: Path, out_dir: Path, scale: float = 0.05) -> None:
    """The policy plus seeded Gaussian noise on every weight: a reference policy that differs from the policy."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(policy_dir))
    generator = torch.Generator().manual_seed(SEED + 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator))
    model.save_pretrained(str(out_dir))
    load_tokenizer(policy_dir).save_pretrained(str(out_dir))


def setup(workdir: Path) -> dict[str, Any]:
    """Build (once) the toy policy, the reward model and the fixture under `workdir`."""
    from trl_marl.toy import make_toy_model

    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    make_toy_model(str(workdir / "policy"), **TOY_KWARGS)
    info_path = workdir / "setup.json"
    if info_path.exists() and all((workdir / f).exists() for f in ("reward/config.json", "ref", "fixture.json")):
        info = json.loads(info_path.read_text())
    else:
        info = train_reward_model(workdir / "policy", workdir / "reward")
        save_perturbed_reference(workdir / "policy", workdir / "ref")
        fixture = record_rollouts(workdir / "policy")
        (workdir / "fixture.json").write_text(json.dumps(fixture))
        info["record_seed"] = fixture["record_seed"]
        info_path.write_text(json.dumps(info, indent=2))
    info["setup_seconds"] = time.perf_counter() - t0
    return info


# ---------------------------------------------------------------------------------------------------------------
# Our side (child processes of this script)
# ---------------------------------------------------------------------------------------------------------------


def ours_equivalence(workdir: Path, case_set: str = "default") -> dict[str, Any]:
    """(a) on our side: the first update of every case of `CASE_SETS[case_set]` on the recorded rollouts."""
    from torch.utils.data import DataLoader

    from trl_marl import PPOConfig, PPOTrainer
    from trl_marl.team import Generation

    fixture = read_fixture(workdir)
    results: dict[str, Any] = {}
    for case in CASE_SETS[case_set]:
        rows = case_rows(fixture, case)
        by_prompt = {tuple(r["prompt_ids"]): list(r["completion_ids"]) for r in rows}
        dataset = replay_dataset(rows)
        tokenizer, policy, ref_policy, reward_model, value_model = load_models(workdir, perturbed_ref=True)
        args = PPOConfig(**ppo_config_kwargs(case, str(workdir / "out-ours"), local_batch_size(case)))
        peft_config = lora_config(case)
        torch.manual_seed(args.seed)  # LoRA weights: the same draw on both sides
        trainer = PPOTrainer(
            args=args,
            processing_class=tokenizer,
            model=policy,
            ref_model=None if peft_config is not None else ref_policy,
            reward_model=reward_model,
            train_dataset=dataset,
            value_model=value_model,
            eval_dataset=dataset,
            peft_config=peft_config,
        )
        quiet(trainer)
        generated: list[list[list[int]]] = []

        def replay_generate(
            prompts: Sequence[Sequence[Any]],
            generation_config: Any,
            chat_template_kwargs: dict | None = None,
            stop_token_ids: set[int] | None = None,
            _by_prompt: dict = by_prompt,
            _log: list = generated,
        ) -> Generation:
            prompt_ids = [[int(t) for t in p] for p in prompts[0]]
            completions = [list(_by_prompt[tuple(p)]) for p in prompt_ids]
            _log.append(completions)
            return Generation(prompt_ids=[prompt_ids], completion_ids=[completions])

        def ordered_loader(_dataset: Any = dataset, _n: int = local_batch_size(case)) -> DataLoader:
            return DataLoader(_dataset, batch_size=_n, shuffle=False, drop_last=True, collate_fn=list)

        widths: list[int] = []

        def rollout_recording_width(
            rows: list[dict[str, Any]],
            temperature: float | None = None,
            played: Any = None,
            _rollout: Any = trainer.rollout,
            _widths: list[int] = widths,
        ) -> Any:
            rollouts = _rollout(rows, temperature, played=played)
            _widths.append(int(rollouts[0].responses.size(1)))
            return rollouts

        trainer.team.generate = replay_generate
        trainer.get_train_dataloader = ordered_loader
        trainer.rollout = rollout_recording_width
        with recorded_permutations() as permutations:
            trainer.train()
        if generated[0] != [r["completion_ids"] for r in rows]:
            raise RuntimeError(f"{case['name']}: the replayed batch is not the recorded rows in order")
        results[case["name"]] = {
            "metrics": first_log(trainer),
            "permutations": permutations,
            "response_width": widths[0],
        }
    return results


def ours_train(workdir: Path, updates: int, profile_path: Path | None, seed: int = SEED) -> dict[str, Any]:
    """(b)/(c) on our side: `updates` PPO updates with normal sampling, timed per update."""
    from trl_marl import PPOConfig, PPOTrainer

    fixture = read_fixture(workdir)
    dataset = train_dataset(fixture)
    tokenizer, policy, ref_policy, reward_model, value_model = load_models(workdir, perturbed_ref=False)
    total = updates * local_batch_size(TRAIN_CASE)
    args = PPOConfig(**{**ppo_config_kwargs(TRAIN_CASE, str(workdir / "out-ours"), total), "seed": seed})
    timer = StepTimer()
    trainer = PPOTrainer(
        args=args,
        processing_class=tokenizer,
        model=policy,
        ref_model=ref_policy,
        reward_model=reward_model,
        train_dataset=dataset,
        value_model=value_model,
        eval_dataset=dataset,
        callbacks=[timer],
    )
    quiet(trainer)
    np.random.seed(seed)
    start = time.perf_counter()
    _, profile = profiled(trainer.train, profile_path)
    return train_result(trainer, timer, time.perf_counter() - start, profile)


# ---------------------------------------------------------------------------------------------------------------
# Orchestration
# ---------------------------------------------------------------------------------------------------------------


def _busy_cpu_seconds() -> float:
    """CPU seconds spent busy by the whole machine (all cores, all processes) since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [float(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    t = os.times()
    return t.children_user + t.children_system


def wait_until_quiet(max_wait: float, threshold: float = 0.3) -> float:
    """Wait (up to `max_wait` s) until the other processes of the machine use less than `threshold` cores over a
    1 s window; returns the cores they used in the last window."""
    deadline = time.monotonic() + max_wait
    while True:
        busy, start = _busy_cpu_seconds(), time.monotonic()
        time.sleep(1.0)
        others = (_busy_cpu_seconds() - busy) / (time.monotonic() - start)
        if others < threshold or time.monotonic() > deadline:
            return others


def _child(command: list[str], env: dict[str, str], out: Path, label: str) -> dict[str, Any]:
    """Run one side in a fresh process; also measure how many cores *other* processes used meanwhile."""
    busy, children, start = _busy_cpu_seconds(), _children_cpu_seconds(), time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr)[-4000:]
        raise RuntimeError(f"{label} failed (exit {done.returncode}):\n{tail}")
    result = json.loads(out.read_text())
    result["process_seconds"] = wall
    own = _children_cpu_seconds() - children
    result["other_processes_cores"] = max(0.0, (_busy_cpu_seconds() - busy - own) / wall)
    return result


def run_ours(role: str, workdir: Path, out: Path, extra: Sequence[str] = ()) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    out.unlink(missing_ok=True)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--role",
        role,
        "--workdir",
        str(workdir),
        "--out",
        str(out),
        *extra,
    ]
    return _child(command, env, out, f"ours ({role})")


def run_peer(role: str, workdir: Path, out: Path, extra: Sequence[str] = ()) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # never our src/ on the TRL 1.12 side
    if os.environ.get("TRL112_PYTHONPATH"):  # trl 1.12 installed into a folder (`pip install --target`), first
        env["PYTHONPATH"] = os.environ["TRL112_PYTHONPATH"]
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    out.unlink(missing_ok=True)
    command = [TRL112_PYTHON, str(PEER_SCRIPT), "--role", role, "--workdir", str(workdir), "--out", str(out), *extra]
    return _child(command, env, out, f"TRL 1.12 peer ({role})")


def run_equivalence(workdir: Path, case_set: str = "default") -> tuple[dict[str, Any], Any]:
    """(a): both sides' first updates of every case of `case_set`, each side in its own process, compared."""
    ours = run_ours("ours-equiv", workdir, workdir / "equiv-ours.json", ["--cases", case_set])
    trl = run_peer("equiv", workdir, workdir / "equiv-trl.json", ["--cases", case_set])
    versions_trl = trl.pop("versions", None)
    for side in (ours, trl):
        side.pop("process_seconds", None)
        side.pop("other_processes_cores", None)
    return compare_equivalence(ours, trl, case_set), versions_trl


def undiluted(trl_metrics: dict[str, float], case: dict[str, Any]) -> dict[str, float]:
    """TRL 1.12's stats metrics over the stats slots it actually writes.

    TRL 1.12 allocates its per-micro-batch stats as `(num_ppo_epochs, num_mini_batches, gradient_accumulation_steps)`
    zeros (trl/experimental/ppo/ppo_trainer.py, `stats_shape`), but a mini-batch has only
    `gradient_accumulation_steps / num_mini_batches` micro-batches, so with `num_mini_batches > 1` the means (and the
    variance of val/ratio) include never-written zeros. This undoes it: the mean over the k written of N slots is
    mean * N / k, and the variance follows from the sum of squares.
    """
    n = case["num_ppo_epochs"] * case["num_mini_batches"] * case["gradient_accumulation_steps"]
    # micro-batches written per mini-batch: ceil(local_mini_batch_size / per_device_train_batch_size), where
    # local_mini_batch_size = per_device_train_batch_size * gradient_accumulation_steps / num_mini_batches
    per_mini = -(-case["gradient_accumulation_steps"] // case["num_mini_batches"])
    k = case["num_ppo_epochs"] * case["num_mini_batches"] * per_mini
    out = dict(trl_metrics)
    if k == n:
        return out
    for name in STATS_METRICS:
        out[name] = trl_metrics[name] * n / k
    mean, var = trl_metrics["val/ratio"], trl_metrics["val/ratio_var"]
    total, squares = mean * n, var * (n - 1) + n * mean**2
    out["val/ratio_var"] = (squares - total**2 / k) / (k - 1) if k > 1 else float("nan")
    return out


def compare_equivalence(ours: dict[str, Any], trl: dict[str, Any], case_set: str = "default") -> dict[str, Any]:
    table: dict[str, Any] = {}
    for case in CASE_SETS[case_set]:
        name = case["name"]
        o, t = ours[name]["metrics"], trl[name]["metrics"]
        t_fixed = undiluted(t, {**COMMON_PPO, **case})
        table[name] = {
            "ours": {m: o[m] for m in METRICS},
            "trl": {m: t[m] for m in METRICS},
            "trl_undiluted": {m: t_fixed[m] for m in METRICS},
            "abs_diff": {m: abs(o[m] - t[m]) for m in METRICS},
            "abs_diff_undiluted": {m: abs(o[m] - t_fixed[m]) for m in METRICS},
            "permutations_equal": ours[name]["permutations"] == trl[name]["permutations"],
            "permutation_calls": [len(ours[name]["permutations"]), len(trl[name]["permutations"])],
            "response_width": [ours[name]["response_width"], trl[name]["response_width"]],
        }
    return table


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e4:
        return f"{x:.1e}"
    return f"{x:.4f}"


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


SIDES: dict[str, str] = {"trl": "TRL 1.12", "trl_nogc": "TRL 1.12, gc.collect() no-op", "ours": "trl_marl"}


def worst(eq_case: dict[str, Any], key: str) -> tuple[float, str]:
    """The largest |ours - TRL| over `METRICS` in one case (NaN where both sides are NaN counts as equal)."""
    diffs = {m: eq_case[key][m] for m in METRICS if not (math.isnan(eq_case[key][m]) and
                                                         math.isnan(eq_case["ours"][m]))}
    name = max(diffs, key=lambda m: -1.0 if math.isnan(diffs[m]) else diffs[m]) if diffs else ""
    return (diffs[name] if name else 0.0), name


def grid_markdown(eq: dict[str, Any], names: Sequence[str]) -> list[str]:
    lines = ["#### (a) Issue 12 grid: first update on identical rollouts, largest |ours - TRL 1.12| over the "
             f"{len(METRICS)} metrics", "",
             "| case | as logged (metric) | TRL's never-written zero slots removed (metric) | permutations equal |",
             "|---|---|---|---|"]
    for n in names:
        raw, raw_m = worst(eq[n], "abs_diff")
        fixed, fixed_m = worst(eq[n], "abs_diff_undiluted")
        lines.append(f"| {n} | {_fmt(raw)} ({raw_m}) | {_fmt(fixed)} ({fixed_m}) | "
                     f"{'yes' if eq[n]['permutations_equal'] else 'NO'} |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines: list[str] = []
    eq = results.get("equivalence")
    if eq:
        names = [c["name"] for c in CASE_SETS[results.get("case_set", "default")]]
        if results.get("case_set") == "grid":
            return "\n".join(lines + grid_markdown(eq, names))
        lines += ["#### (a) First update on identical rollouts: |ours - TRL 1.12|", ""]
        lines += ["Cells: `as logged` / `TRL's never-written zero stats slots removed` where the two differ.", ""]
        lines.append("| metric | " + " | ".join(names) + " |")
        lines.append("|---" * (len(names) + 1) + "|")
        for m in METRICS:
            cells = []
            for n in names:
                raw, fixed = eq[n]["abs_diff"][m], eq[n]["abs_diff_undiluted"][m]
                cells.append(_fmt(raw) if raw == fixed else f"{_fmt(raw)} / {_fmt(fixed)}")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append(
            "| permutations identical (calls ours, TRL) | "
            + " | ".join(
                f"{'yes' if eq[n]['permutations_equal'] else 'NO'} ({eq[n]['permutation_calls'][0]}, "
                f"{eq[n]['permutation_calls'][1]})"
                for n in names
            )
            + " |"
        )
        lines.append(
            "| response width ours / TRL | "
            + " | ".join(f"{eq[n]['response_width'][0]} / {eq[n]['response_width'][1]}" for n in names)
            + " |"
        )
        lines.append("")
        lines += ["Values, case `k1`:", ""]
        lines += ["| metric | ours | TRL 1.12 as logged | TRL 1.12 undiluted |", "|---|---|---|---|"]
        k1 = eq["k1"]
        for m in METRICS:
            lines.append(f"| {m} | {k1['ours'][m]:.6g} | {k1['trl'][m]:.6g} | {k1['trl_undiluted'][m]:.6g} |")
        lines.append("")
    runs = results.get("training")
    if runs:
        lines += ["#### (b) Learning and (c) speed: normal sampling, same settings and seed", ""]
        lines += [
            "| side | round | objective/scores: mean of first 5 -> last 5 updates | first / last update | "
            "s/update wall (median) | CPU s/update (median) | other processes (cores) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in runs["rounds"]:
            for side in r["order"]:
                d = r[side]
                sc = d["scores"]
                lines.append(
                    f"| {SIDES[side]} | {r['round']} | {statistics.mean(sc[:5]):.3f} -> {statistics.mean(sc[-5:]):.3f}"
                    f" | {sc[0]:.3f} / {sc[-1]:.3f} | {d['median_wall']:.4f} | {d['median_cpu']:.4f} | "
                    f"{d['other_processes_cores']:.2f} |"
                )
        lines.append("")
        lines += [
            "| over all rounds (updates after warmup) | wall s/update | CPU s/update | ours / side (wall) | "
            "ours / side (CPU) |",
            "|---|---|---|---|---|",
        ]
        for side in SIDES:
            a = runs["summary"][side]
            lines.append(
                f"| {SIDES[side]} | {a['median_wall']:.4f} | {a['median_cpu']:.4f} | "
                f"{a['ours_ratio_wall']:.3f} | {a['ours_ratio_cpu']:.3f} |"
            )
        lines.append("")
    seeds = results.get("learning_seeds")
    if runs and seeds:
        first = runs["rounds"][0]
        rows = {str(SEED): {"trl": first["trl"]["scores"], "ours": first["ours"]["scores"]}, **seeds}
        lines += [
            "| seed | TRL 1.12: first 5 -> last 5 updates (mean objective/scores) | trl_marl: first 5 -> last 5 |",
            "|---|---|---|",
        ]
        gains: dict[str, list[float]] = {"trl": [], "ours": []}
        for seed, d in rows.items():
            cells = []
            for side in ("trl", "ours"):
                a, b = statistics.mean(d[side][:5]), statistics.mean(d[side][-5:])
                gains[side].append(b - a)
                cells.append(f"{a:.3f} -> {b:.3f} ({b - a:+.3f})")
            lines.append(f"| {seed} | " + " | ".join(cells) + " |")
        lines.append(f"| mean gain | {statistics.mean(gains['trl']):+.3f} | {statistics.mean(gains['ours']):+.3f} |")
        lines.append("")
    prof = results.get("profiles")
    if prof:
        labels = [k for k in PROFILE_LABELS if any(k in p["summary"] for p in prof.values())]
        lines += ["#### cProfile (one 30-update run per side; cumulative seconds)", ""]
        lines.append("| function | " + " | ".join(SIDES[s] for s in prof) + " |")
        lines.append("|---" * (len(prof) + 1) + "|")
        for label in labels:
            cells = [_fmt(p["summary"][label]) if label in p["summary"] else "-" for p in prof.values()]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def run_training(workdir: Path, updates: int, rounds: int, warmup: int, max_wait: float) -> dict[str, Any]:
    """Rounds of one run per side, the order rotating between rounds; each run waits for a quiet machine."""
    out: dict[str, Any] = {"rounds": [], "updates": updates, "warmup": warmup}
    wall: dict[str, list[float]] = {s: [] for s in SIDES}
    cpu: dict[str, list[float]] = {s: [] for s in SIDES}
    sides = list(SIDES)
    for r in range(rounds):
        order = sides[r % len(sides) :] + sides[: r % len(sides)]
        pair: dict[str, Any] = {"round": r + 1, "order": order}
        for side in order:
            extra = ["--updates", str(updates)]
            pair[f"{side}_quiet_before"] = wait_until_quiet(max_wait)
            path = workdir / f"train-{side}-{r}.json"
            if side == "ours":
                d = run_ours("ours-train", workdir, path, extra)
            else:
                d = run_peer("train", workdir, path, extra + (["--no-gc-collect"] if side == "trl_nogc" else []))
            d["median_wall"] = _median(d["update_seconds"][warmup:])
            d["median_cpu"] = _median(d["update_cpu_seconds"][warmup:])
            wall[side] += d["update_seconds"][warmup:]
            cpu[side] += d["update_cpu_seconds"][warmup:]
            pair[side] = d
        out["rounds"].append(pair)
    summary: dict[str, Any] = {}
    for side in SIDES:
        summary[side] = {"median_wall": _median(wall[side]), "median_cpu": _median(cpu[side])}
    for side in SIDES:
        summary[side]["ours_ratio_wall"] = summary["ours"]["median_wall"] / summary[side]["median_wall"]
        summary[side]["ours_ratio_cpu"] = summary["ours"]["median_cpu"] / summary[side]["median_cpu"]
    out["summary"] = summary
    return out


def run_learning_seeds(workdir: Path, updates: int, seeds: Sequence[int]) -> dict[str, Any]:
    """(b) over more seeds: objective/scores of one run per side and seed (untimed)."""
    out: dict[str, Any] = {}
    for seed in seeds:
        extra = ["--updates", str(updates), "--seed", str(seed)]
        trl = run_peer("train", workdir, workdir / f"seed-trl-{seed}.json", [*extra, "--no-gc-collect"])
        ours = run_ours("ours-train", workdir, workdir / f"seed-ours-{seed}.json", extra)
        out[str(seed)] = {"trl": trl["scores"], "ours": ours["scores"]}
    return out


def run_profiles(workdir: Path, updates: int, max_wait: float) -> dict[str, Any]:
    profiles: dict[str, Any] = {}
    for side in SIDES:
        extra = ["--updates", str(updates), "--profile-out", str(workdir / f"profile-{side}.txt")]
        wait_until_quiet(max_wait)
        if side == "ours":
            d = run_ours("ours-train", workdir, workdir / f"profile-{side}.json", extra)
        else:
            d = run_peer(
                "train",
                workdir,
                workdir / f"profile-{side}.json",
                extra + (["--no-gc-collect"] if side == "trl_nogc" else []),
            )
        profiles[side] = {"summary": d["profile"], "file": str(workdir / f"profile-{side}.txt")}
    return profiles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--updates", type=int, default=30, help="updates per training run, (b) and (c)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of training runs (one per side each), (c)")
    parser.add_argument("--warmup", type=int, default=5, help="updates left out of the timing medians")
    parser.add_argument(
        "--max-wait",
        type=float,
        default=10.0,
        help="seconds to wait for other processes to go quiet before each timed run",
    )
    parser.add_argument("--skip-equivalence", action="store_true")
    parser.add_argument("--cases", choices=sorted(CASE_SETS), default="default",
                        help="equivalence cases (a): the default set, or issue 12's grid (25 configurations)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--profile", action="store_true", help="also run one cProfile'd training run per side")
    parser.add_argument("--role", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--learning-seeds",
        type=int,
        nargs="*",
        default=[1, 2],
        help="extra seeds for (b), run with ours and with TRL 1.12 (gc.collect() no-op: same results, faster)",
    )
    parser.add_argument("--seed", type=int, default=SEED, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.role is not None:  # a child process: one side, one job, result as JSON in --out
        setup_child()
        if args.role == "ours-equiv":
            result = ours_equivalence(args.workdir, args.cases)
        elif args.role == "ours-train":
            result = ours_train(args.workdir, args.updates, args.profile_out, args.seed)
        else:
            raise SystemExit(f"unknown role {args.role!r}")
        args.out.write_text(json.dumps(result))
        return

    start = time.perf_counter()
    workdir: Path = args.workdir
    results: dict[str, Any] = {"versions_ours": versions(), "loadavg_before": list(os.getloadavg())}
    results["source"] = source_fingerprint()
    results["setup"] = setup(workdir)
    print(f"setup: {json.dumps(results['setup'])}", flush=True)
    if not args.skip_equivalence:
        results["case_set"] = args.cases
        results["equivalence"], results["versions_trl"] = run_equivalence(workdir, args.cases)
    if not args.skip_training:
        results["training"] = run_training(workdir, args.updates, args.rounds, args.warmup, args.max_wait)
    if not args.skip_training and args.learning_seeds:
        results["learning_seeds"] = run_learning_seeds(workdir, args.updates, args.learning_seeds)
    if args.profile:
        results["profiles"] = run_profiles(workdir, args.updates, args.max_wait)
    results["total_seconds"] = time.perf_counter() - start
    if source_fingerprint() != results["source"]:
        print("WARNING: the PPO source files changed while the benchmark ran; rerun it.")
        results["source_changed_during_run"] = True
    (workdir / "results_ppo.json").write_text(json.dumps(results, indent=1))
    print(f"source: {json.dumps(results['source'])}")
    print(markdown(results))
    print(f"total {results['total_seconds']:.0f} s; results in {workdir / 'results_ppo.json'}")


if __name__ == "__main__":
    main()
