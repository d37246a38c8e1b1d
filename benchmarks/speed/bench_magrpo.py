"""Speed and memory benchmarks of ``MAGRPOTrainer`` on CPU, against TRL's ``GRPOTrainer`` and comlrl 1.4.3.

Run from the repository root with the development virtualenv::

    PYTHONPATH=src python benchmarks/speed/bench_magrpo.py            # full run (a few minutes)
    PYTHONPATH=src python benchmarks/speed/bench_magrpo.py --quick    # smoke run (about a minute)

Three measurements, each side of a comparison run back to back (interleaved rounds) in one run of this script,
with one torch thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``) and medians over the steps that follow
a warmup in every round:

1. ``grpo``: seconds per generated completion token of ``MAGRPOTrainer(num_agents=1)`` vs TRL's ``GRPOTrainer`` on
   the same toy model (addition task), the same prompts in the same order and the same settings (G=8, 64
   completions per step, ``loss_type="dapo"``, ``beta=0``, ``scale_rewards="group"``). Both trainers live in this
   process and
   ``train()`` in two threads that take turns one step at a time (a baton: only one runs at any moment), so step k
   of one side and step k of the other are adjacent in time; 2 rounds, the side that starts alternating. A
   ``TrainerCallback`` times every step (``on_step_begin`` -> ``on_step_end``) and counts the completion tokens it
   generated (MAGRPO: ``trainer.last_rollout.generated_tokens``; GRPO: the logged ``completions/mean_length``
   times the batch). Also reported: the median of the paired per-step ratios, the training thread's CPU time per
   token (``time.thread_time``: blind to time spent waiting for a core when other processes load the machine)
   and a width-matched step-time ratio (a step decodes until its longest completion ends, so its cost follows that
   length more than its token count: steps are compared among those with the same longest completion).
2. ``comlrl``: joint samples (scored joint actions) per second of a two-agent MAGRPO team vs comlrl's
   ``MAGRPOTrainer`` on the target-sum task (T=10), same model folder, P prompts x G=8 joint samples per step,
   4 new tokens, temperature 1, top_p 1. comlrl runs in its own virtualenv through ``bench_comlrl_peer.py``
   (a subprocess, alternating with our rounds). Our step time here is the time between two ``on_step_end``
   events (so it includes logging and data loading, as comlrl's step does).
3. ``memory``: peak RSS (``VmHWM``; ``ru_maxrss`` is recorded too, but Linux carries it over from the parent
   across ``exec``) of a fresh process that builds a LoRA ``adapters`` team (r=8 on
   ``q_proj``/``v_proj``) and trains a few steps, for 1 and for 4 agents on the same base model, with the same
   batch per agent; plus a control with 1 agent and 4x the prompts (the 4-agent team's number of completions).

The script prints a markdown table and writes ``benchmarks/results/magrpo.json``.
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
import re  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from importlib.metadata import PackageNotFoundError, version  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
BENCH_ROOT = BENCH_DIR.parent
REPO_ROOT = BENCH_ROOT.parent
SRC_DIR = REPO_ROOT / "src"
if str(SRC_DIR) not in sys.path:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(SRC_DIR))
for _path in (BENCH_ROOT, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402

warnings.filterwarnings("ignore")

from peers import peer_python  # noqa: E402

COMLRL_PYTHON = peer_python("comlrl")
PEER_SCRIPT = BENCH_ROOT / "parity" / "bench_comlrl_peer.py"
DEFAULT_JSON = BENCH_ROOT / "results" / "magrpo.json"
ADDITION_PROMPT = re.compile(r"Q:(\d+)\+(\d+)=A:")


# ---------------------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for package in ("torch", "transformers", "trl", "peft", "accelerate", "datasets"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    import trl_marl

    out["trl_marl"] = trl_marl.__version__
    return out


def _source_state() -> dict[str, Any]:
    """The git commit, whether ``src/`` has uncommitted changes, and short hashes of the files measured."""
    import hashlib

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False).stdout
        except OSError:
            return ""

    files = ["trainers/magrpo/trainer.py", "team/policies.py", "team/forward.py", "team/sampling.py",
             "team/generation/transformers_backend.py", "rollout.py", "core/losses.py", "core/advantages.py"]
    hashes = {}
    for name in files:
        path = SRC_DIR / "trl_marl" / name
        if path.exists():
            hashes[name] = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return {"commit": git("rev-parse", "--short", "HEAD").strip(),
            "src_uncommitted_changes": bool(git("status", "--porcelain", "--", "src").strip()),
            "sha256_12": hashes}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def _quiet_trainer(trainer: Any) -> None:
    """Drop the callback that prints every log line (``disable_tqdm=True`` installs it)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)


def addition_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    """1 when the completion is the exact sum of the prompt's operands, else 0 (a TRL-style reward function)."""
    rewards = []
    for prompt, completion in zip(prompts, completions):
        match = ADDITION_PROMPT.search(str(prompt))
        text = str(completion).strip()
        ok = match is not None and text.isdigit() and int(text) == int(match.group(1)) + int(match.group(2))
        rewards.append(1.0 if ok else 0.0)
    return rewards


# ---------------------------------------------------------------------------------------------------------------
# Step timing
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Round:
    """Timings of one ``train()`` call."""

    durations: list[float] = field(default_factory=list)  # on_step_begin -> on_step_end
    ends: list[float] = field(default_factory=list)  # perf_counter at on_step_end
    tokens: list[int] = field(default_factory=list)  # completion tokens generated in each step
    widths: list[int] = field(default_factory=list)  # longest completion of each step (= decoding iterations)
    cpu: list[float] = field(default_factory=list)  # CPU time of the training thread in each step
    begin: float = 0.0  # perf_counter at on_train_begin


class Baton:
    """Lets several trainers, each ``train()``-ing in its own thread, take turns one optimizer step at a time.

    Only the holder of the baton runs; the others wait on a condition variable (no CPU). A trainer hands the baton
    on at the start of every step (before its timer starts), so consecutive steps of the two sides are adjacent in
    time and a burst of load from another process hits both sides of a pair alike.
    """

    def __init__(self, size: int) -> None:
        self._cond = threading.Condition()
        self._turn = 0
        self._active = [True] * size

    def wait_for(self, index: int) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._turn == index)

    def _advance(self, index: int) -> None:
        size = len(self._active)
        for k in range(1, size + 1):
            j = (index + k) % size
            if self._active[j]:
                self._turn = j
                break
        self._cond.notify_all()

    def pass_on(self, index: int) -> None:
        with self._cond:
            self._advance(index)
        self.wait_for(index)

    def finish(self, index: int) -> None:
        with self._cond:
            self._active[index] = False
            if self._turn == index:
                self._advance(index)


def run_interleaved(trainers: Sequence[Any], baton: Baton) -> None:
    """``train()`` every trainer, one step each in turn (each trainer's timer callback must hold ``baton``)."""
    errors: list[BaseException] = []

    def target(index: int, trainer: Any) -> None:
        baton.wait_for(index)
        try:
            trainer.train()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)
        finally:
            baton.finish(index)

    threads = [threading.Thread(target=target, args=(i, t), daemon=True) for i, t in enumerate(trainers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _step_timer_class() -> type:
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        """Times every optimizer step and counts the completion tokens it generated.

        Args:
            tokens_of_step: Returns the completion tokens generated in the step that just ended and the length of
                its longest completion (read at ``on_step_end``), or ``None`` to read both from the logged
                ``completions/mean_length`` and ``completions/max_length`` (TRL's GRPO; needs ``logging_steps=1``).
            completions_per_step: Completions per step, to turn a logged mean length into a token count.
            baton: ``(baton, index)`` to take turns step by step with other trainers (see [`run_interleaved`]).
        """

        def __init__(self, tokens_of_step: Callable[[], tuple[int, int]] | None, completions_per_step: int,
                     baton: tuple[Baton, int] | None = None) -> None:
            self.tokens_of_step = tokens_of_step
            self.completions_per_step = completions_per_step
            self.baton = baton
            self.rounds: list[Round] = []
            self._start = 0.0
            self._cpu_start = 0.0

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.rounds.append(Round(begin=time.perf_counter()))

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.baton is not None:  # let the other side take its step first, then time ours
                self.baton[0].pass_on(self.baton[1])
            self._start = time.perf_counter()
            self._cpu_start = time.thread_time()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.perf_counter()
            current = self.rounds[-1]
            current.cpu.append(time.thread_time() - self._cpu_start)
            current.durations.append(now - self._start)
            current.ends.append(now)
            if self.tokens_of_step is not None:
                tokens, width = self.tokens_of_step()
                current.tokens.append(int(tokens))
                current.widths.append(int(width))

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if self.tokens_of_step is None and logs and "completions/mean_length" in logs:
                self.rounds[-1].tokens.append(round(logs["completions/mean_length"] * self.completions_per_step))
                self.rounds[-1].widths.append(round(logs["completions/max_length"]))

    return StepTimer


def _rollout_tokens(trainer: Any) -> tuple[int, int]:
    """Completion tokens generated in a MAGRPO trainer's last step, and its longest completion."""
    rollout = trainer.last_rollout
    width = max(len(ids) for turn in rollout.turns for agent in turn.completion_ids for ids in agent)
    return rollout.generated_tokens, width


def _timed(rounds: Sequence[Round], warmup: int, interval: bool = False) -> tuple[list[float], list[int]]:
    """Step times and token counts after ``warmup`` steps of every round.

    With ``interval=True`` a step's time is the time since the previous step ended (the first step of a round is
    measured from ``on_train_begin``), which includes what the loop does between steps (logging, data loading).
    """
    times: list[float] = []
    tokens: list[int] = []
    for r in rounds:
        if interval:
            starts = [r.begin, *r.ends[:-1]]
            step_times = [end - start for start, end in zip(starts, r.ends)]
        else:
            step_times = list(r.durations)
        times += step_times[warmup:]
        tokens += r.tokens[warmup:] if r.tokens else []
    return times, tokens


# ---------------------------------------------------------------------------------------------------------------
# 1. MAGRPO (one agent) vs TRL GRPOTrainer: seconds per generated token
# ---------------------------------------------------------------------------------------------------------------


def bench_vs_grpo(cfg: dict[str, Any], work_dir: Path, profile_path: Path | None,
                  fixed_length: bool = False) -> dict[str, Any]:
    """Benchmark 1. With ``fixed_length`` every completion is exactly ``max_len`` tokens (``min_new_tokens``), so
    both sides do identical work in every step and the ratio shows the trainers' own overhead only."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.toy import AdditionTask, make_toy_model

    start = time.perf_counter()
    model_dir = make_toy_model(work_dir / f"addition-h{cfg['hidden']}-l{cfg['layers']}", task="addition",
                               hidden_size=cfg["hidden"], num_layers=cfg["layers"],
                               pretrain_steps=cfg["pretrain_steps"], seed=0, noise_prob=0.5)
    build_s = time.perf_counter() - start
    rng = random.Random(0)
    prompts = AdditionTask().sample_prompts(4096, rng)
    dataset = Dataset.from_dict({"prompt": prompts})
    G, batch = cfg["num_generations"], cfg["batch"]
    common: dict[str, Any] = dict(
        num_generations=G, per_device_train_batch_size=batch, max_completion_length=cfg["max_len"],
        learning_rate=cfg["lr"], lr_scheduler_type="constant", loss_type="dapo", beta=0.0, scale_rewards="group",
        temperature=1.0, top_p=1.0, bf16=False, gradient_checkpointing=False, report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0, max_steps=cfg["steps"],
        # in dataset order on both sides (MAGRPO's RandomSampler and GRPO's RepeatSampler shuffle differently): step k
        # of both sides sees the same 8 prompts
        shuffle_dataset=False,
    )
    tag = ""
    if fixed_length:
        common.update(generation_kwargs={"min_new_tokens": cfg["max_len"]}, max_steps=cfg["fixed_length_steps"])
        tag = "-fixed"
    StepTimer = _step_timer_class()
    tokenizer = load_tokenizer(model_dir)
    grpo = GRPOTrainer(model=model_dir, reward_funcs=addition_reward, processing_class=tokenizer,
                       args=GRPOConfig(output_dir=str(work_dir / f"out-grpo{tag}"), **common), train_dataset=dataset)
    grpo_timer = StepTimer(None, batch)
    grpo.add_callback(grpo_timer)
    magrpo = MAGRPOTrainer(model=model_dir, reward_funcs=addition_reward, processing_class=load_tokenizer(model_dir),
                           args=MAGRPOConfig(output_dir=str(work_dir / f"out-magrpo{tag}"), num_agents=1, **common),
                           train_dataset=dataset)
    magrpo_timer = StepTimer(lambda: _rollout_tokens(magrpo), batch)
    magrpo.add_callback(magrpo_timer)
    for trainer in (grpo, magrpo):
        _quiet_trainer(trainer)
    n_params = sum(p.numel() for p in magrpo.team.parameters())

    load_before = _load()
    sides = {"magrpo": magrpo, "grpo": grpo}
    timers = {"magrpo": magrpo_timer, "grpo": grpo_timer}
    for r in range(cfg["rounds"]):  # each round: both train() in step-by-step turns; who starts alternates
        order = ["magrpo", "grpo"] if r % 2 == 0 else ["grpo", "magrpo"]
        baton = Baton(len(order))
        for index, name in enumerate(order):
            timers[name].baton = (baton, index)
        run_interleaved([sides[name] for name in order], baton)
    for timer in timers.values():
        timer.baton = None
    load_after = _load()

    result: dict[str, Any] = {
        "model": {"dir": model_dir, "task": "addition", "hidden_size": cfg["hidden"], "num_layers": cfg["layers"],
                  "params": n_params, "pretrain_steps": cfg["pretrain_steps"], "build_or_cache_s": build_s},
        "settings": {k: v for k, v in common.items() if k not in ("report_to", "disable_tqdm")},
        "rounds": cfg["rounds"], "warmup_steps_per_round": cfg["warmup"], "load_before": load_before,
        "load_after": load_after,
    }
    per_round: dict[str, list[float]] = {}
    for name, timer in (("magrpo", magrpo_timer), ("grpo", grpo_timer)):
        times, tokens = _timed(timer.rounds, cfg["warmup"])
        if len(times) != len(tokens):
            raise RuntimeError(f"{name}: {len(times)} timed steps but {len(tokens)} token counts")
        s_per_token = [t / max(n, 1) for t, n in zip(times, tokens)]
        per_round[name] = [
            sum(r.durations[cfg["warmup"]:]) / max(1, sum(r.tokens[cfg["warmup"]:])) for r in timer.rounds
        ]
        result[name] = {
            "timed_steps": len(times),
            "median_step_s": _median(times),
            "median_tokens_per_step": _median(tokens),
            "median_s_per_token": _median(s_per_token),
            "pooled_s_per_token": sum(times) / max(1, sum(tokens)),
            "per_round_s_per_token": per_round[name],
            "step_times_s": times,
            "tokens_per_step": tokens,
        }
    result["ratio_median_s_per_token"] = result["magrpo"]["median_s_per_token"] / result["grpo"]["median_s_per_token"]
    result["ratio_per_round"] = [m / g for m, g in zip(per_round["magrpo"], per_round["grpo"])]
    # The decoding loop runs until the longest of the 64 completions ends, and the loss runs on padded completions:
    # a step's cost follows its longest completion (random: 4 to 8 tokens here) more than its token count, so a side
    # that happens to draw more long steps looks slower per token. Width-matched: compare the median step time of
    # the two sides among steps with the same longest completion, then take the geometric mean of those ratios
    # weighted by min(count of steps on either side).
    by_width: dict[str, dict[int, list[float]]] = {}
    for name, timer in (("magrpo", magrpo_timer), ("grpo", grpo_timer)):
        times, _ = _timed(timer.rounds, cfg["warmup"])
        widths = [w for r in timer.rounds for w in r.widths[cfg["warmup"]:]]
        result[name]["longest_completion_per_step"] = widths
        by_width[name] = {}
        for t, w in zip(times, widths):
            by_width[name].setdefault(w, []).append(t)
        result[name]["median_step_s_by_longest_completion"] = {
            str(w): _median(v) for w, v in sorted(by_width[name].items())
        }
    log_sum, weight_sum = 0.0, 0
    for w in sorted(set(by_width["magrpo"]) & set(by_width["grpo"])):
        weight = min(len(by_width["magrpo"][w]), len(by_width["grpo"][w]))
        log_sum += weight * math.log(_median(by_width["magrpo"][w]) / _median(by_width["grpo"][w]))
        weight_sum += weight
    result["ratio_width_matched_step_time"] = math.exp(log_sum / weight_sum) if weight_sum else float("nan")
    # CPU time of each side's thread (one torch thread runs every kernel inline): blind to waiting for a core
    for name, timer in (("magrpo", magrpo_timer), ("grpo", grpo_timer)):
        cpu = [c for r in timer.rounds for c in r.cpu[cfg["warmup"]:]]
        tokens = [n for r in timer.rounds for n in r.tokens[cfg["warmup"]:]]
        result[name]["median_cpu_s_per_token"] = _median([c / max(1, n) for c, n in zip(cpu, tokens)])
        result[name]["cpu_over_wall"] = sum(cpu) / sum(result[name]["step_times_s"])
    result["ratio_median_cpu_s_per_token"] = (
        result["magrpo"]["median_cpu_s_per_token"] / result["grpo"]["median_cpu_s_per_token"]
    )
    pairs = []  # step k of MAGRPO vs step k of GRPO: adjacent in time
    for m_round, g_round in zip(magrpo_timer.rounds, grpo_timer.rounds):
        for k in range(cfg["warmup"], min(len(m_round.durations), len(g_round.durations))):
            m_cost = m_round.durations[k] / max(1, m_round.tokens[k])
            g_cost = g_round.durations[k] / max(1, g_round.tokens[k])
            pairs.append(m_cost / g_cost)
    result["ratio_paired_steps_median"] = _median(pairs)
    result["ratio_paired_steps"] = pairs
    result["ratio_per_round_median"] = _median(result["ratio_per_round"])

    if profile_path is not None:
        result["profile"] = _profile_pair(sides, cfg, profile_path)
    return result


def _profile_pair(sides: dict[str, Any], cfg: dict[str, Any], path: Path) -> dict[str, str]:
    """cProfile one more ``train()`` round of each side; write the top functions to ``path``."""
    texts: dict[str, str] = {}
    for name, trainer in sides.items():
        profiler = cProfile.Profile()
        profiler.enable()
        trainer.train()
        profiler.disable()
        for sort in ("tottime", "cumulative"):
            buffer = io.StringIO()
            pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(sort).print_stats(35)
            texts[f"{name}/{sort}"] = buffer.getvalue()
    with open(path, "w") as f:
        for key, text in texts.items():
            f.write(f"===== {key} ({cfg['steps']} steps) =====\n{text}\n")
    return {"written_to": str(path)}


# ---------------------------------------------------------------------------------------------------------------
# 2. Two-agent MAGRPO vs comlrl 1.4.3: joint samples per second
# ---------------------------------------------------------------------------------------------------------------


def _run_comlrl(model_dir: str, cfg: dict[str, Any], json_path: Path) -> dict[str, Any]:
    command = [
        COMLRL_PYTHON, str(PEER_SCRIPT), "--model-dir", model_dir, "--steps", str(cfg["comlrl_steps"]),
        "--warmup", str(cfg["warmup"]), "--num-generations", str(cfg["num_generations"]),
        "--max-new-tokens", str(cfg["max_len"]), "--prompts-per-step", str(cfg["prompts"]), "--lr", str(cfg["lr"]),
        "--temperature", "1.0", "--top-p", "1.0", "--top-k", "0", "--threads", "1", "--seed", "0",
        "--json", str(json_path),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"comlrl peer failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    with open(json_path) as f:
        return json.load(f)


def bench_vs_comlrl(cfg: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.toy import make_toy_model

    model_dir = str(work_dir / f"target10-h{cfg['hidden']}-l{cfg['layers']}")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=cfg["hidden"], num_layers=cfg["layers"],
                   seed=0, pretrain_steps=cfg["pretrain_steps"])
    builder = {"builder": "trl_marl.toy.make_toy_model", "task": "target", "targets": [10],
               "hidden_size": cfg["hidden"], "num_layers": cfg["layers"], "seed": 0,
               "pretrain_steps": cfg["pretrain_steps"]}
    P, G = cfg["prompts"], cfg["num_generations"]
    dataset = Dataset.from_dict({"target": [10] * (P * cfg["steps"] * 4)})
    common: dict[str, Any] = dict(
        num_agents=2, num_generations=G, per_device_train_batch_size=P * G, max_completion_length=cfg["max_len"],
        learning_rate=cfg["lr"], lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, top_k=0,
        scale_rewards="group",  # = comlrl's default advantage_normalization=True (divide by the group std)
        bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, seed=0, max_steps=cfg["steps"],
    )
    StepTimer = _step_timer_class()
    ours: dict[str, tuple[Any, Any]] = {}
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    for mode in ("models", "adapters"):
        trainer = MAGRPOTrainer(
            model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
            processing_class=load_tokenizer(model_dir), peft_config=lora if mode == "adapters" else None,
            args=MAGRPOConfig(output_dir=str(work_dir / f"out-team-{mode}"), team_mode=mode, **common),
            train_dataset=dataset,
        )
        timer = StepTimer(lambda t=trainer: _rollout_tokens(t), P * G)
        trainer.add_callback(timer)
        _quiet_trainer(trainer)
        ours[mode] = (trainer, timer)

    load_before = _load()
    peer_runs: list[dict[str, Any]] = []
    for r in range(cfg["rounds"]):
        ours_first = r % 2 == 1
        if ours_first:
            for trainer, _ in ours.values():
                trainer.train()
        peer_runs.append(_run_comlrl(model_dir, cfg, work_dir / f"comlrl-round{r}.json"))
        if not ours_first:
            for trainer, _ in ours.values():
                trainer.train()
    load_after = _load()

    peer_times = [t for run in peer_runs for t in run["step_times_s"][cfg["warmup"]:]]
    peer_tokens = [run["tokens_generated_per_step_median"] for run in peer_runs]
    joint_per_step = P * G
    result: dict[str, Any] = {
        "model": {"dir": model_dir, **builder, "params_per_agent": peer_runs[0]["model_params_per_agent"]},
        "prompts_per_step": P, "num_generations": G, "joint_samples_per_step": joint_per_step,
        "max_new_tokens": cfg["max_len"], "lr": cfg["lr"], "rounds": cfg["rounds"],
        "warmup_steps_per_round": cfg["warmup"],
        "advantage": "group mean and std (comlrl default advantage_normalization=True; ours scale_rewards='group')",
        "sampling": "temperature 1.0, top_p 1.0, no top_k (vocabulary of 23 tokens < any top_k default)",
        "load_before": load_before, "load_after": load_after,
        "comlrl": {
            "version": peer_runs[0]["comlrl_version"],
            "timed_steps": len(peer_times),
            "median_step_s": _median(peer_times),
            "joint_samples_per_s": joint_per_step / _median(peer_times),
            "per_round_median_step_s": [run["median_step_s"] for run in peer_runs],
            "median_generate_s_per_step": _median([run["median_generate_s_per_step"] for run in peer_runs]),
            "median_update_s_per_step": _median([run["median_update_s_per_step"] for run in peer_runs]),
            "tokens_generated_per_step_median": _median(peer_tokens),
            "peak_rss_mb": max(run["peak_rss_mb"] for run in peer_runs),
            "step_times_s": peer_times,
        },
    }
    for mode, (_, timer) in ours.items():
        times, tokens = _timed(timer.rounds, cfg["warmup"], interval=True)
        inner, _ = _timed(timer.rounds, cfg["warmup"])
        result[f"ours_{mode}"] = {
            "timed_steps": len(times),
            "median_step_s": _median(times),
            "joint_samples_per_s": joint_per_step / _median(times),
            "median_step_s_begin_to_end": _median(inner),
            "per_round_median_step_s": [_median(_timed([r], cfg["warmup"], interval=True)[0]) for r in timer.rounds],
            "tokens_generated_per_step_median": _median(tokens),
            "step_times_s": times,
        }
    comlrl_rate = result["comlrl"]["joint_samples_per_s"]
    result["ratio_models_vs_comlrl"] = result["ours_models"]["joint_samples_per_s"] / comlrl_rate
    result["ratio_adapters_vs_comlrl"] = result["ours_adapters"]["joint_samples_per_s"] / comlrl_rate
    return result


# ---------------------------------------------------------------------------------------------------------------
# 3. Peak memory of a 4-agent adapters team vs one agent
# ---------------------------------------------------------------------------------------------------------------


def _memory_model_dir(cfg: dict[str, Any], work_dir: Path) -> str:
    """A randomly initialised toy model saved once (no pretraining: memory does not depend on the weights)."""
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    directory = work_dir / f"memory-h{cfg['hidden']}-l{cfg['layers']}"
    marker = directory / "bench_memory.json"
    if marker.exists():
        return str(directory)
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=cfg["hidden"], num_layers=cfg["layers"], num_heads=8)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory)
    marker.write_text(json.dumps({"hidden_size": cfg["hidden"], "num_layers": cfg["layers"]}))
    return str(directory)


def _status_mb(field_name: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith(field_name + ":"))
        return int(line.split()[1]) / 1024.0  # kB
    except (OSError, StopIteration):
        return None


def ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def peak_mb() -> float:
    """This process's peak RSS in MB. Linux carries a process's ru_maxrss across execve: a child started by
    `subprocess` (vfork + exec) begins with its parent's peak RSS. VmHWM is the high-water mark of this process's own
    address space since exec."""
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else ru_maxrss_mb()


def current_mb() -> float:
    """This process's current RSS in MB."""
    rss = _status_mb("VmRSS")
    return rss if rss is not None else float("nan")


def memory_team_kwargs(model_dir: str, num_agents: int) -> dict[str, Any]:
    """The trainer arguments of a memory benchmark's team (here and in ``bench_ppo_memory.py``): ``num_agents``
    LoRA adapters (r=8 on ``q_proj``/``v_proj``) on the model of ``model_dir``, on ``TargetSumEnv``."""
    from peft import LoraConfig

    from trl_marl import load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    return dict(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(num_agents),
                processing_class=load_tokenizer(model_dir),
                peft_config=LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))


def memory_child(model_dir: str, num_agents: int, steps: int, prompts: int, generations: int, max_len: int) -> None:
    """Runs in a fresh process: build an ``adapters`` team, train ``steps`` steps, print peak RSS as JSON."""
    torch.set_num_threads(1)

    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer

    after_import, rss_import = peak_mb(), current_mb()
    output_dir = tempfile.mkdtemp(prefix="bench-mem-")
    trainer = MAGRPOTrainer(
        **memory_team_kwargs(model_dir, num_agents),
        args=MAGRPOConfig(
            output_dir=output_dir, num_agents=num_agents, team_mode="adapters", num_generations=generations,
            per_device_train_batch_size=prompts * generations, max_completion_length=max_len, learning_rate=1e-4,
            beta=0.0, bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no",
            logging_steps=1, disable_tqdm=True, seed=0, max_steps=steps,
        ),
        train_dataset=Dataset.from_dict({"target": [10] * (prompts * steps)}),
    )
    _quiet_trainer(trainer)
    after_build, rss_build = peak_mb(), current_mb()
    start = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - start
    team = trainer.team
    base = team.base_model_of(0)
    base_bytes = sum(p.numel() * p.element_size() for n, p in base.named_parameters() if "lora_" not in n)
    lora_bytes = sum(p.numel() * p.element_size() for n, p in base.named_parameters() if "lora_" in n)
    print(json.dumps({
        "num_agents": num_agents, "peak_rss_mb": peak_mb(), "ru_maxrss_mb": ru_maxrss_mb(),
        "rss_after_import_mb": after_import,
        "rss_after_build_mb": after_build, "current_rss_after_import_mb": rss_import,
        "current_rss_after_build_mb": rss_build, "current_rss_after_train_mb": current_mb(),
        "base_param_bytes": base_bytes, "lora_param_bytes": lora_bytes,
        "train_s": train_s, "steps": trainer.state.global_step,
    }))
    shutil.rmtree(output_dir, ignore_errors=True)


def _memory_run(model_dir: str, num_agents: int, prompts: int, cfg: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC_DIR), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, str(Path(__file__).resolve()), "--memory-child", "--model-dir", model_dir,
               "--num-agents", str(num_agents), "--steps", str(cfg["steps"]), "--prompts", str(prompts),
               "--generations", str(cfg["num_generations"]), "--max-len", str(cfg["max_len"])]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"memory child (n={num_agents}, P={prompts}) failed:\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def bench_memory(cfg: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    """Peak RSS of n=1 and n=4 ``adapters`` teams with the same per-agent batch, plus a control with the same
    total number of completions per step (n=1 with 4x the prompts), each in a fresh process, interleaved."""
    model_dir = _memory_model_dir(cfg, work_dir)
    P = cfg["prompts"]
    variants = {"n1": (1, P), "n4": (4, P), "n1_same_total": (1, 4 * P)}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    load_before = _load()
    for _ in range(cfg["repeats"]):
        for name, (n, prompts) in variants.items():
            runs[name].append(_memory_run(model_dir, n, prompts, cfg))
    load_after = _load()
    summary: dict[str, Any] = {}
    for name, items in runs.items():
        n, prompts = variants[name]
        summary[name] = {
            "num_agents": n,
            "prompts_per_step": prompts,
            "completions_per_step_per_agent": prompts * cfg["num_generations"],
            "peak_rss_mb": _median([r["peak_rss_mb"] for r in items]),
            "rss_after_build_mb": _median([r["current_rss_after_build_mb"] for r in items]),
            "lora_param_bytes": items[0]["lora_param_bytes"],
            "train_s": _median([r["train_s"] for r in items]),
            "runs": items,
        }
    base_bytes = runs["n1"][0]["base_param_bytes"]
    import_mb = _median([r["current_rss_after_import_mb"] for items in runs.values() for r in items])
    n1, n4, same = summary["n1"], summary["n4"], summary["n1_same_total"]
    return {
        "model": {"dir": model_dir, "hidden_size": cfg["hidden"], "num_layers": cfg["layers"],
                  "base_params": base_bytes // 4, "base_param_mb": base_bytes / 2**20},
        "lora": "r=8, alpha=16, q_proj+v_proj, one adapter per agent",
        "steps": cfg["steps"], "num_generations": cfg["num_generations"], "max_len": cfg["max_len"],
        "repeats": cfg["repeats"], "load_before": load_before, "load_after": load_after,
        **summary,
        "import_baseline_mb": import_mb,
        "ratio_peak_rss": n4["peak_rss_mb"] / n1["peak_rss_mb"],
        "ratio_above_import": (n4["peak_rss_mb"] - import_mb) / (n1["peak_rss_mb"] - import_mb),
        "ratio_same_total_completions": n4["peak_rss_mb"] / same["peak_rss_mb"],
    }


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------


def markdown_table(results: dict[str, Any]) -> str:
    rows = ["| benchmark | ours | peer | ratio | target |", "|---|---|---|---|---|"]
    g = results.get("grpo")
    if g:
        rows.append(
            f"| s per generated token, 1 agent vs TRL GRPOTrainer ({g['model']['params'] / 1e6:.2f}M params) "
            f"| {g['magrpo']['median_s_per_token'] * 1e3:.3f} ms | {g['grpo']['median_s_per_token'] * 1e3:.3f} ms "
            f"| {g['ratio_median_s_per_token']:.3f}x (median of paired steps {g['ratio_paired_steps_median']:.3f}x) "
            "| <= 1.05x |"
        )
        rows.append(
            "| CPU s per generated token (thread CPU time: blind to waiting for a core; info) "
            f"| {g['magrpo']['median_cpu_s_per_token'] * 1e3:.3f} ms "
            f"| {g['grpo']['median_cpu_s_per_token'] * 1e3:.3f} ms "
            f"| {g['ratio_median_cpu_s_per_token']:.3f}x | - |"
        )
        rows.append(
            "| step time at equal longest completion (width-matched median step time; info) "
            f"| {g['magrpo']['median_step_s'] * 1e3:.0f} ms/step | {g['grpo']['median_step_s'] * 1e3:.0f} ms/step "
            f"| {g['ratio_width_matched_step_time']:.3f}x | - |"
        )
    f = results.get("grpo_fixed_length")
    if f:
        rows.append(
            "| s per generated token, every completion exactly "
            f"{f['settings']['max_completion_length']} tokens (identical work per step; info) "
            f"| {f['magrpo']['median_s_per_token'] * 1e3:.3f} ms | {f['grpo']['median_s_per_token'] * 1e3:.3f} ms "
            f"| {f['ratio_median_s_per_token']:.3f}x (paired {f['ratio_paired_steps_median']:.3f}x, "
            f"CPU time {f['ratio_median_cpu_s_per_token']:.3f}x) | - |"
        )
    for c in results.get("comlrl", []):
        size = f"{c['model']['params_per_agent'] / 1e3:.0f}k params/agent, P={c['prompts_per_step']}, " \
            f"G={c['num_generations']}"
        rows.append(
            f"| joint samples/s, 2 agents `models` vs comlrl {c['comlrl']['version']} ({size}) "
            f"| {c['ours_models']['joint_samples_per_s']:.0f} "
            f"| {c['comlrl']['joint_samples_per_s']:.0f} | {c['ratio_models_vs_comlrl']:.2f}x | >= 5x |"
        )
        rows.append(
            f"| joint samples/s, 2 agents `adapters` (LoRA r=8) vs comlrl ({size}; info) "
            f"| {c['ours_adapters']['joint_samples_per_s']:.0f} | {c['comlrl']['joint_samples_per_s']:.0f} "
            f"| {c['ratio_adapters_vs_comlrl']:.2f}x | - |"
        )
    m = results.get("memory")
    if m:
        model = f"{m['model']['base_params'] / 1e6:.0f}M params, {m['model']['base_param_mb']:.0f} MB fp32"
        rows.append(
            f"| peak RSS, 4-agent vs 1-agent `adapters` team, same per-agent batch ({model}) "
            f"| {m['n4']['peak_rss_mb']:.0f} MB | {m['n1']['peak_rss_mb']:.0f} MB | {m['ratio_peak_rss']:.3f}x "
            f"(above the {m['import_baseline_mb']:.0f} MB import baseline: {m['ratio_above_import']:.2f}x) "
            "| <= 1.15x |"
        )
        rows.append(
            f"| peak RSS, 4-agent team vs 1 agent with 4x the prompts (same completions per step; info) "
            f"| {m['n4']['peak_rss_mb']:.0f} MB | {m['n1_same_total']['peak_rss_mb']:.0f} MB "
            f"| {m['ratio_same_total_completions']:.3f}x | - |"
        )
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------


def configs(quick: bool) -> dict[str, Any]:
    """Settings of each benchmark (``--quick``: fewer rounds and steps, a smaller memory model)."""
    grpo = dict(hidden=256, layers=4, pretrain_steps=100, num_generations=8, batch=64, max_len=8, lr=1e-5,
                steps=40, fixed_length_steps=15, warmup=3, rounds=2)
    comlrl_common = dict(num_generations=8, prompts=8, max_len=4, lr=3e-4, steps=10, comlrl_steps=10, warmup=2)
    comlrl = [
        dict(hidden=64, layers=2, pretrain_steps=300, rounds=3, **comlrl_common),
        dict(hidden=256, layers=4, pretrain_steps=150, rounds=2, **comlrl_common),
    ]
    memory = dict(hidden=1024, layers=8, steps=3, prompts=2, num_generations=4, max_len=4, repeats=2)
    if quick:
        grpo.update(steps=6, fixed_length_steps=4, warmup=2, rounds=2)
        comlrl = [dict(comlrl[0], steps=4, comlrl_steps=4, warmup=1, rounds=1)]
        memory.update(hidden=512, steps=2, repeats=1)
    return {"grpo": grpo, "comlrl": comlrl, "memory": memory}


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmarks of MAGRPOTrainer vs TRL GRPOTrainer and comlrl (CPU).")
    parser.add_argument("--quick", action="store_true", help="fewer steps and a smaller memory model (smoke test)")
    parser.add_argument("--only", action="append", choices=["grpo", "comlrl", "memory"],
                        help="run only these benchmarks (repeatable); default: all")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "trl_marl_bench"),
                        help="cached toy models and trainer output (not in the repository)")
    parser.add_argument("--json", default=str(DEFAULT_JSON), help="where to write the results")
    parser.add_argument("--profile", action="store_true",
                        help="after benchmark 1, cProfile one more round of each trainer (written to the work dir)")
    # internal: the memory benchmark's child process
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--num-agents", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--prompts", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--generations", type=int, default=4, help=argparse.SUPPRESS)
    parser.add_argument("--max-len", type=int, default=4, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.memory_child:
        memory_child(args.model_dir, args.num_agents, args.steps, args.prompts, args.generations, args.max_len)
        return

    torch.set_num_threads(1)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    selected = args.only or ["grpo", "comlrl", "memory"]
    cfgs = configs(args.quick)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/speed/bench_magrpo.py", *sys.argv[1:]]),
        "machine": {"cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "versions": _versions(),
        "source": _source_state(),
        "quick": args.quick,
        "load_at_start": _load(),
        "configs": {k: cfgs[k] for k in selected},
    }
    for name in selected:
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        print(f"[bench_magrpo] {name} ... (load {_load()})", flush=True)
        if name == "grpo":
            profile_path = work_dir / "profile_grpo_vs_magrpo.txt" if args.profile else None
            results[name] = bench_vs_grpo(cfgs[name], work_dir, profile_path)
            results[f"{name}_fixed_length"] = bench_vs_grpo(cfgs[name], work_dir, None, fixed_length=True)
        elif name == "comlrl":
            results[name] = [bench_vs_comlrl(cfg, work_dir) for cfg in cfgs[name]]
        else:
            results[name] = bench_memory(cfgs[name], work_dir)
        results[f"{name}_wall_s"] = time.perf_counter() - t0
        # ~1.0 when this single-threaded benchmark (and its children) had a core to itself the whole time
        results[f"{name}_cpu_over_wall"] = (_cpu_seconds() - cpu0) / results[f"{name}_wall_s"]
        print(f"[bench_magrpo] {name} done in {results[f'{name}_wall_s']:.0f} s", flush=True)
    results["load_at_end"] = _load()
    results["total_wall_s"] = time.perf_counter() - started
    results["table_markdown"] = markdown_table(results)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print()
    print(results["table_markdown"])
    utilisation = ", ".join(f"{n} {results[f'{n}_cpu_over_wall']:.2f}" for n in selected)
    print(f"\nCPU time / wall time per benchmark (1.0 = never waited for a core): {utilisation}")
    print(f"load average at start {results['load_at_start']}, at end {results['load_at_end']}; "
          f"total {results['total_wall_s']:.0f} s; results in {args.json}")


if __name__ == "__main__":
    main()
