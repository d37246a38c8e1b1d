"""What asynchronous rollouts (`MAGRPOConfig.max_staleness`) save per MAGRPO step on a CPU (issue 50, item 3).

It trains the same small job, a two-agent MAGRPO team on the target-sum task (T=10) with an untrained toy model
from `trl_marl.toy`, once synchronously (`max_staleness=0`) and once with a rollout worker generating one step ahead
(`max_staleness=1`; `--staleness 1 2` adds an arm at 2), each arm a fresh trainer with the same seed. The arms take
turns in one process, `--repeats` times (sync, async, sync, async, ...), so that a change in the machine's load
slows every arm alike. Every completion is exactly `--completion-length` tokens (`min_new_tokens` = `max_new_tokens`):
what the policy learns never changes the cost of a step.

Measured per optimizer step (a `TrainerCallback` marks the start of `train()` and the end of every step):

- `wall_s`: the step's wall time. The first `--warmup` steps of every run (2 by default) are left out: the first
  builds the optimizer and, with `max_staleness > 0`, deep-copies the team for the worker and waits for its first
  rollout with nothing to overlap; the second is the first in which the worker is ahead.
- `generation_s`: seconds in the rollout engine (`JointRollout.run`: generation, rewards, returns) of the step's
  rollout, in the trainer's thread (sync) or in the worker's (async, concurrently with training, so slowed by it).
- `behaviour_logps_s` (async): the worker's forward that scores its own samples for the importance-sampling
  correction, after the rollout.
- `wait_s` (async): seconds the trainer waited for the worker's rollout (`AsyncRollouts.take`).
- `trainer_busy_s`: the rest of the step in the trainer's thread (`wall_s` - `generation_s` in the trainer's thread -
  `wait_s`): batching, the log-probability forwards, forward and backward, the optimizer, logging.
- `logps_forward_s`: the part of `trainer_busy_s` spent in the trainer's log-probability forwards without gradient
  (`_inference_logps`). Neither arm has any with these settings (`beta=0`, one generation per step): since commit
  4390024 the importance-sampling correction takes the current policy's log-probabilities from the training forward
  (`trainers.engine_correction`). Before it, the async arm scored its rollout's samples there with a forward of its
  own, work the sync arm does not do (0.15 s of 0.64 s per step in `async_overlap_cpu_b9cbc55.json`).
- `staleness` (async): the step minus the oldest policy version that generated its rollout (at most the bound).

Reported: each arm's median wall time per step over every timed step of every repeat, and the ratio of each async
arm's median to the sync arm's (below 1: the overlap saves time), also per repeat; each arm's mean generation and
trainer seconds per step, so that a reader can check that generation and training cost about the same (the default
sizes were chosen for that; a larger `--hidden` or `--batch` tilts the step towards training, a smaller `--hidden`
towards generation, and `--completion-length` scales both about alike); and `overlap_bound`, the sync arm's
max(generation, trainer) / (generation + trainer): the ratio of a perfect overlap with no contention and no extra
work.

Threads: the trainer's thread and the worker's each run their matmuls on torch's intra-op threads, whose number
(`torch.set_num_threads`) is one setting for the whole process: with `--threads 1` (the default) each of the two
busy threads computes on one core, which on a 2-core machine is the whole machine and no oversubscription. The sync
arm then uses one core, as it does in a one-thread run; `--sync-threads 2` gives it both cores instead (the
comparison "the machine's cores used either way"). The setting in force is recorded, as read in each thread.
The two threads also share Python's GIL: only the time inside torch's kernels (which release it) can overlap, not
the Python around them (the decoding loop, batching, the trainer's bookkeeping). This is why the default model is
wide enough (hidden 256) for the matmuls to weigh in a step; on the smallest toy models the Python dominates and
there is little to overlap.

The measurement (a few minutes on a 2-core machine; run it with nothing else busy, since the async arm needs the
second core to itself; it writes `benchmarks/results/async_overlap_cpu.json`):

    PYTHONPATH=src python benchmarks/speed/bench_async_overlap.py

Options: `--repeats 3 --steps 20 --warmup 2 --completion-length 24 --batch 32 --num-generations 4 --hidden 256
--layers 2 --threads 1 [--sync-threads N] [--staleness 1 2] [--model-dir DIR] [--output PATH]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (REPO_ROOT, REPO_ROOT / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import torch  # noqa: E402
from benchmarks.provenance import git_state, machine_info  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from transformers.trainer_callback import PrinterCallback, ProgressCallback  # noqa: E402

from trl_marl import MAGRPOConfig, MAGRPOTrainer  # noqa: E402
from trl_marl.rollout import JointRollout, Rollout  # noqa: E402
from trl_marl.trainers.fields import field_value  # noqa: E402
from trl_marl.trainers.magrpo.async_rollout import AsyncRollouts, RolloutJob  # noqa: E402

DEFAULT_OUTPUT = REPO_ROOT / "benchmarks" / "results" / "async_overlap_cpu.json"
TARGET = 10


# ---------------------------------------------------------------------------------------------------------------
# What one run spends, per step
# ---------------------------------------------------------------------------------------------------------------
class RunTiming:
    """The clock marks and the seconds of one `train()` run, written from the trainer's and the worker's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.marks: list[float] = []  # the start of train(), then the end of every optimizer step
        self.trainer_thread: threading.Thread | None = None
        self.generation: dict[int, float] = {}  # step -> seconds in JointRollout.run for its rollout
        self.generation_thread: dict[int, str] = {}  # step -> "trainer" or "worker"
        self.worker_runs = 0  # rollouts the worker played (those read ahead past the last step included)
        self.behaviour_logps: dict[int, float] = {}  # step -> the worker's scoring forward
        self.wait: dict[int, float] = {}  # step -> seconds the trainer waited for its rollout
        self.logps_forward: dict[int, float] = {}  # step -> the trainer's log-probability forwards without gradient
        self.versions: dict[int, list[int]] = {}  # step -> the policy versions of its rollout
        self.threads: dict[str, int] = {}  # thread role -> torch.get_num_threads() read in it

    def in_trainer_thread(self) -> bool:
        return threading.current_thread() is self.trainer_thread

    def generated(self, step: int, seconds: float) -> None:
        role = "trainer" if self.in_trainer_thread() else "worker"
        with self.lock:
            self.generation[step] = self.generation.get(step, 0.0) + seconds
            self.generation_thread[step] = role
            self.worker_runs += role == "worker"
            self.threads.setdefault(role, torch.get_num_threads())

    def step_records(self) -> list[dict[str, Any]]:
        """One record per optimizer step trained (step t: from mark t to mark t + 1)."""
        records = []
        for step, (start, end) in enumerate(zip(self.marks, self.marks[1:])):
            wall = end - start
            generation = self.generation.get(step)
            in_trainer = generation if self.generation_thread.get(step) == "trainer" else 0.0
            wait = self.wait.get(step, 0.0)
            versions = self.versions.get(step)
            records.append({
                "step": step, "wall_s": wall, "generation_s": generation,
                "generation_thread": self.generation_thread.get(step),
                "behaviour_logps_s": self.behaviour_logps.get(step), "wait_s": wait,
                "logps_forward_s": self.logps_forward.get(step, 0.0),
                "trainer_busy_s": wall - (in_trainer or 0.0) - wait, "policy_versions": versions,
                "staleness": None if versions is None else step - min(versions),
            })
        return records


class TimedJointRollout(JointRollout):
    """The trainer's rollout engine, timing every `run` (the worker plays a shallow copy: same class, same timing)."""

    timing: RunTiming
    trainer: TimedTrainer

    def run(self, rows: Any, trainer_state: Any = None, generation_config: Any = None, score: bool = True) -> Rollout:
        start = time.perf_counter()
        try:
            return super().run(rows, trainer_state=trainer_state, generation_config=generation_config, score=score)
        finally:
            self.timing.generated(self.trainer.step_of_rollout(), time.perf_counter() - start)


class TimedAsyncRollouts(AsyncRollouts):
    """The rollout worker, timing the trainer's waits and the worker's scoring forward, and recording versions."""

    def __init__(self, *args: Any, timing: RunTiming, **kwargs: Any) -> None:
        self.timing = timing  # before the worker thread starts
        super().__init__(*args, **kwargs)

    def take(self, job: RolloutJob, step: int) -> Rollout:
        start = time.perf_counter()
        try:
            return super().take(job, step)
        finally:
            with self.timing.lock:
                self.timing.wait[step] = time.perf_counter() - start
                if job.versions is not None:
                    self.timing.versions[step] = list(job.versions)

    def _add_behaviour_logps(self, rollout: Rollout, versions: tuple[int, ...]) -> None:
        start = time.perf_counter()
        super()._add_behaviour_logps(rollout, versions)
        job = self.running
        if job is not None:
            with self.timing.lock:
                self.timing.behaviour_logps[job.step] = time.perf_counter() - start


class StepClock(TrainerCallback):
    """Marks the start of `train()` and the end of every optimizer step."""

    def __init__(self, timing: RunTiming) -> None:
        self.timing = timing

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timing.trainer_thread = threading.current_thread()
        self.timing.threads["trainer"] = torch.get_num_threads()
        self.timing.marks.append(time.perf_counter())

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.timing.marks.append(time.perf_counter())


class TimedTrainer(MAGRPOTrainer):
    """`MAGRPOTrainer` with its rollout engine and rollout worker timed (`RunTiming`); training is unchanged."""

    def __init__(self, *args: Any, timing: RunTiming, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.timing = timing
        self.joint_rollout.__class__ = TimedJointRollout
        self.joint_rollout.timing = timing  # type: ignore[attr-defined]
        self.joint_rollout.trainer = self  # type: ignore[attr-defined]
        for callback in (PrinterCallback, ProgressCallback):  # no log line per step
            self.remove_callback(callback)
        self.add_callback(StepClock(timing))

    def step_of_rollout(self) -> int:
        """The optimizer step whose rollout the calling thread is playing."""
        if self.timing.in_trainer_thread():
            return self.state.global_step
        job = None if self.async_rollouts is None else self.async_rollouts.running
        return -1 if job is None else job.step

    def _inference_logps(self, batches: list[Any], reference: bool = False) -> list[Any]:
        start = time.perf_counter()
        try:
            return super()._inference_logps(batches, reference=reference)
        finally:
            if self.timing.in_trainer_thread():
                step = self.state.global_step
                with self.timing.lock:
                    self.timing.logps_forward[step] = self.timing.logps_forward.get(step, 0.0) + (
                        time.perf_counter() - start)

    def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> tuple[list[Any], None]:
        staleness = self.args.max_staleness
        if staleness > 0 and (self.async_rollouts is None or self.async_rollouts.closed):
            # the worker `MAGRPOTrainer.get_batch_samples` builds, with the same arguments, timed
            self.async_rollouts = TimedAsyncRollouts(
                self.team, self.joint_rollout, staleness, self.state.global_step, lambda: self.state,
                self.accelerator.autocast, field_value(self.args.steps_per_generation, "steps_per_generation"),
                timing=self.timing)
        return super().get_batch_samples(epoch_iterator, num_batches, device)


# ---------------------------------------------------------------------------------------------------------------
# One run of one arm
# ---------------------------------------------------------------------------------------------------------------
def trainer_settings(cli: argparse.Namespace, staleness: int, output_dir: str) -> dict[str, Any]:
    """The `MAGRPOConfig` of every arm; only `max_staleness` differs."""
    return dict(
        output_dir=output_dir, num_agents=2, team_mode="models", num_generations=cli.num_generations,
        per_device_train_batch_size=cli.batch, max_completion_length=cli.completion_length,
        generation_kwargs={"min_new_tokens": cli.completion_length},  # every completion has the same length
        learning_rate=1e-3, lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, top_k=0,
        max_steps=cli.steps, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        gradient_checkpointing=False, bf16=False, seed=cli.seed, max_staleness=staleness,
    )


def run_arm(cli: argparse.Namespace, model_dir: str, staleness: int, threads: int, work_dir: Path,
            label: str) -> dict[str, Any]:
    """Train one arm for `--steps` steps from a fresh trainer; its per-step record."""
    from datasets import Dataset

    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    torch.set_num_threads(threads)
    episodes = cli.batch // cli.num_generations
    rows = episodes * (cli.steps + 3)  # one epoch holds every step and the rows a worker reads ahead
    timing = RunTiming()
    args = MAGRPOConfig(**trainer_settings(cli, staleness, str(work_dir / label)))
    trainer = TimedTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                           train_dataset=Dataset.from_dict({"target": [TARGET] * rows}), timing=timing)
    trainer.train()
    logged = [h["async/staleness"] for h in trainer.state.log_history if "async/staleness" in h]
    steps = timing.step_records()
    record = {
        "max_staleness": staleness, "torch_threads": dict(timing.threads), "global_step": trainer.state.global_step,
        "steps_trained": len(steps), "steps": steps, "logged_staleness": logged,
        "worker_rollouts": timing.worker_runs,  # >= the steps: the worker plays up to s steps past the last one
    }
    del trainer
    gc.collect()
    return record


# ---------------------------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------------------------
def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def timed_steps(run: dict[str, Any], warmup: int) -> list[dict[str, Any]]:
    """The steps of a run after its first `warmup`."""
    return run["steps"][warmup:]


def summarize_arm(runs: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Medians and means of an arm's timed steps over all its runs."""
    steps = [s for run in runs for s in timed_steps(run, warmup)]
    walls = [s["wall_s"] for s in steps]
    stale = [s["staleness"] for run in runs for s in run["steps"] if s["staleness"] is not None]
    return {
        "runs": len(runs), "timed_steps": len(steps),
        "median_step_s": _median(walls), "mean_step_s": _mean(walls), "min_step_s": min(walls, default=None),
        "mean_generation_s": _mean([s["generation_s"] for s in steps if s["generation_s"] is not None]),
        "mean_behaviour_logps_s": _mean([s["behaviour_logps_s"] for s in steps if s["behaviour_logps_s"] is not None]),
        "mean_trainer_busy_s": _mean([s["trainer_busy_s"] for s in steps]),
        "median_trainer_busy_s": _median([s["trainer_busy_s"] for s in steps]),
        "median_generation_s": _median([s["generation_s"] for s in steps if s["generation_s"] is not None]),
        "mean_wait_s": _mean([s["wait_s"] for s in steps]),
        "mean_logps_forward_s": _mean([s["logps_forward_s"] for s in steps]),
        "max_staleness_seen": max(stale, default=None),
    }


def summarize(runs: list[dict[str, Any]], arms: list[str], warmup: int) -> dict[str, Any]:
    """Per arm, its summary; per async arm, the ratio of its median step to the sync arm's (overall and per repeat)."""
    by_arm = {arm: [r for r in runs if r["arm"] == arm] for arm in arms}
    summary = {arm: summarize_arm(by_arm[arm], warmup) for arm in arms}
    sync = summary["sync"]
    ratios: dict[str, Any] = {}
    for arm in arms[1:]:
        per_repeat = []
        for sync_run, run in zip(by_arm["sync"], by_arm[arm]):
            a = _median([s["wall_s"] for s in timed_steps(run, warmup)])
            b = _median([s["wall_s"] for s in timed_steps(sync_run, warmup)])
            per_repeat.append(None if a is None or not b else a / b)
        ratio = (None if summary[arm]["median_step_s"] is None or not sync["median_step_s"]
                 else summary[arm]["median_step_s"] / sync["median_step_s"])
        ratios[arm] = {"median_step_ratio": ratio, "per_repeat": per_repeat}
    g, t = sync["median_generation_s"], sync["median_trainer_busy_s"]
    bound = None if g is None or t is None or g + t <= 0 else max(g, t) / (g + t)
    return {"arms": summary, "ratio_vs_sync": ratios, "overlap_bound": bound}


def table(summary: dict[str, Any]) -> str:
    """A markdown table of the arms."""
    def cell(value: float | None, digits: int = 3) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    lines = ["| arm | timed steps | median s/step | gen s/step | trainer s/step | wait s/step | staleness max "
             "| ratio vs sync |", "|---|---|---|---|---|---|---|---|"]
    for arm, s in summary["arms"].items():
        ratio = 1.0 if arm == "sync" else summary["ratio_vs_sync"][arm]["median_step_ratio"]
        lines.append(f"| {arm} | {s['timed_steps']} | {cell(s['median_step_s'])} | {cell(s['mean_generation_s'])} "
                     f"| {cell(s['mean_trainer_busy_s'])} | {cell(s['mean_wait_s'])} | "
                     f"{'-' if s['max_staleness_seen'] is None else s['max_staleness_seen']} | {cell(ratio)} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of (sync, async, ...), interleaved")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of every run left out of the timing")
    parser.add_argument("--staleness", type=int, nargs="+", default=[1], help="the async arms' max_staleness")
    parser.add_argument("--completion-length", type=int, default=24, help="tokens of every completion")
    parser.add_argument("--batch", type=int, default=32, help="completions per agent per step (rows x G)")
    parser.add_argument("--num-generations", type=int, default=4, help="G, completions per agent per prompt")
    parser.add_argument("--hidden", type=int, default=256, help="toy model width")
    parser.add_argument("--layers", type=int, default=2, help="toy model decoder layers")
    parser.add_argument("--pretrain-steps", type=int, default=0, help="toy model pretraining (cost: none)")
    parser.add_argument("--model-dir", default=None, help="an existing model folder instead of the toy model")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (async arms)")
    parser.add_argument("--sync-threads", type=int, default=None, help="for the sync arm (default: --threads)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work-dir", default=None, help="the trainers' output_dir parent (default: a temp dir)")
    parser.add_argument("--output", default=str(DEFAULT_OUTPUT), help="the JSON record")
    cli = parser.parse_args(argv)
    if any(s < 1 for s in cli.staleness):
        parser.error("--staleness takes values >= 1 (0 is the sync arm, always run)")
    if cli.batch % cli.num_generations:
        parser.error("--batch must be a multiple of --num-generations")
    if not 0 <= cli.warmup < cli.steps:
        parser.error("--warmup must leave at least one timed step")
    if cli.sync_threads is None:
        cli.sync_threads = cli.threads
    return cli


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the arms interleaved, print the table, write the record to `--output`; return the record."""
    cli = parse_args(argv)
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    from trl_marl.toy import make_toy_model

    hf_logging.set_verbosity_error()
    git = git_state()  # at the start: the code that ran
    threads_before = torch.get_num_threads()
    model_dir = cli.model_dir or make_toy_model(
        task="target", targets=(TARGET,), hidden_size=cli.hidden, num_layers=cli.layers,
        pretrain_steps=cli.pretrain_steps, seed=0, max_position_embeddings=max(128, cli.completion_length + 32))
    arms = ["sync", *(f"async_s{s}" for s in cli.staleness)]
    staleness = {"sync": 0, **{f"async_s{s}": s for s in cli.staleness}}
    load_start = [round(x, 2) for x in os.getloadavg()]
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="async_overlap_") as tmp:
            work_dir = Path(cli.work_dir or tmp)
            for repeat in range(cli.repeats):
                for arm in arms:  # interleaved: every repeat runs every arm once, in the same order
                    threads = cli.sync_threads if arm == "sync" else cli.threads
                    load = round(os.getloadavg()[0], 2)  # other processes on the cores slow the async arm most
                    print(f"[async_overlap] repeat {repeat + 1}/{cli.repeats}: {arm} ({threads} torch threads, "
                          f"load {load:.2f})", flush=True)
                    run = run_arm(cli, model_dir, staleness[arm], threads, work_dir, f"{arm}_r{repeat}")
                    runs.append({"arm": arm, "repeat": repeat, "load_1min_at_start": load, **run})
    finally:
        torch.set_num_threads(threads_before)
    summary = summarize(runs, arms, cli.warmup)
    record = {
        "benchmark": "async_overlap",
        "command": shlex.join(["python", *sys.argv]) if argv is None else shlex.join(
            ["python", "benchmarks/speed/bench_async_overlap.py", *argv]),
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git, "machine": machine_info(),
        "load_at_start": load_start, "load_at_end": [round(x, 2) for x in os.getloadavg()],
        "settings": {
            **{k: v for k, v in vars(cli).items() if k not in ("output", "work_dir")}, "model_dir": model_dir,
            "arms": {arm: staleness[arm] for arm in arms}, "order": "per repeat: " + ", ".join(arms),
            "torch_threads": {"sync": cli.sync_threads, "async": cli.threads,
                              "interop": torch.get_num_interop_threads()},
            "trainer": {k: v for k, v in trainer_settings(cli, 0, "").items()
                        if k not in ("output_dir", "max_staleness")},
            "warmup_note": f"the first {cli.warmup} steps of every run are left out of every median and mean (the "
                           "optimizer's creation; with max_staleness > 0 the worker's copy of the team and its first "
                           "rollout, with nothing to overlap)",
        },
        **summary,
        "table_markdown": "",
        "runs": runs,
    }
    record["table_markdown"] = table(summary)
    print(record["table_markdown"])
    if summary["overlap_bound"] is not None:
        print(f"overlap bound (sync arm: max(gen, trainer) / (gen + trainer)): {summary['overlap_bound']:.3f}")
    output = Path(cli.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(record, indent=1))
    print(f"[async_overlap] wrote {output}")
    return record


if __name__ == "__main__":
    main()
