"""Does MAGRPO still learn with asynchronous rollouts? The demo's task at `max_staleness` 0, 1 and 2 (issue 50).

The job is the offline demo's first part (`trl-marl demo`, `scripts/demo.py`): two toy agents that each see only the
target T=10 and write a number, with team reward 1 when the numbers add up to T; the demo's model, trainer and
settings (`_magrpo_trainer`), changed only by `max_staleness`. For each seed the three arms train from the same
weights with the same seed, one after the other (`--staleness 0 1 2`); asynchronous runs are not reproducible call
for call (the worker samples from torch's global generator while training runs), so each seed is one draw.

Recorded per run, never the peak: the team's success at the end of training (the fraction of 8 sampled joint actions
per episode that add up to T, over `--episodes` episodes, with the demo's evaluation and sampling seed), the mean
training reward of the last 10 steps, the take-off step (the first step at which the mean reward of the last 10 steps
reaches 0.9; `None` if never), the staleness the trainer logged (mean and maximum) and the wall seconds (a loaded
machine's, for orientation only). The summary gives each arm's mean, minimum and maximum over the seeds, and whether
each asynchronous arm's mean final success lies within the synchronous arm's seed range.

    python benchmarks/learning/learning_async.py --seeds 0 1 2 3 4
    python benchmarks/learning/learning_async.py --job debate --seeds 0 1 2 3 4

`--job debate` trains the demo's second part instead, the MAPoRL debate (`run_maporl_part`: three toy agents of
different strengths, three turns, multi-agent PPO with the influence-aware reward, 80 updates): its `final_success`
is the majority accuracy of the last turn on the demo's held-out questions after training (the run records every
turn's, before and after), its curve the mean score per update; no take-off step.

Options: `--steps` (250 MAGRPO steps or 80 PPO updates, the demo's default preset), `--episodes 128`,
`--staleness 0 1 2`, `--output PATH` (default `benchmarks/results/learning_async_<demo|debate>.json`), `--work-dir DIR`
(trainer folders; a temporary one by default).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
for _path in (REPO_ROOT, REPO_ROOT / "src"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchmarks.provenance import git_state, machine_info  # noqa: E402

TAKEOFF = 0.9
WINDOW = 10


def takeoff_step(curve: list[float]) -> int | None:
    """The first step (1-based) at which the mean of the last `WINDOW` rewards reaches `TAKEOFF`."""
    for end in range(WINDOW, len(curve) + 1):
        if statistics.fmean(curve[end - WINDOW:end]) >= TAKEOFF:
            return end
    return None


def run_record(seed: int, staleness: int, global_step: int, final_success: float, curve: list[float],
               logged: list[float], seconds: float, takeoff: int | None, **extra: Any) -> dict[str, Any]:
    """One run's record: its final success, the curve's last-10 mean, the staleness the trainer logged."""
    return {
        "seed": seed, "max_staleness": staleness, "global_step": global_step, "final_success": final_success,
        **extra,
        "last10_reward": statistics.fmean(curve[-WINDOW:]) if curve else None,
        "takeoff_step": takeoff,
        "staleness_mean": statistics.fmean(logged) if logged else None,
        "staleness_max": max(logged) if logged else None,
        "seconds": seconds, "curve": curve,
    }


def one_debate_run(updates: int, seed: int, staleness: int, episodes: int, work_dir: str) -> dict[str, Any]:
    """Train the demo's MAPoRL debate (multi-agent PPO) at `staleness`; its final-turn majority accuracy on the
    demo's held-out questions is the run's `final_success`."""
    from trl_marl.scripts import demo

    start = time.perf_counter()
    result = demo.run_maporl_part(updates, seed, episodes, str(Path(work_dir) / f"debate_seed{seed}_s{staleness}"),
                                  False, cpu_threads=1, overrides={"max_staleness": staleness})
    curve = result["score_curve"]
    return run_record(seed, staleness, len(curve), result["after"]["majority_accuracy"][-1], curve,
                      result["staleness"], time.perf_counter() - start, None,
                      before_majority_accuracy=result["before"]["majority_accuracy"],
                      after_majority_accuracy=result["after"]["majority_accuracy"])


def one_run(model_dir: str, steps: int, seed: int, staleness: int, episodes: int, work_dir: str) -> dict[str, Any]:
    """Train the demo's MAGRPO team at `staleness` and evaluate it as the demo does."""
    from trl_marl.scripts import demo

    trainer = demo._magrpo_trainer(model_dir, steps, seed, str(Path(work_dir) / f"seed{seed}_s{staleness}"), [],
                                   f"seed {seed}, max_staleness {staleness}", False, cpu_threads=1,
                                   overrides={"max_staleness": staleness})
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    curve = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    logged = [h["async/staleness"] for h in trainer.state.log_history if "async/staleness" in h]
    return run_record(seed, staleness, trainer.state.global_step,
                      demo._team_success(trainer.team, episodes, seed + 1), curve, logged, seconds,
                      takeoff_step(curve))


def summarize(runs: list[dict[str, Any]], arms: list[int]) -> dict[str, Any]:
    """Each arm's mean, minimum and maximum over the seeds; async means against the sync arm's seed range."""
    out: dict[str, Any] = {}
    for s in arms:
        mine = [r for r in runs if r["max_staleness"] == s]
        finals = [r["final_success"] for r in mine]
        takeoffs = [r["takeoff_step"] for r in mine]
        out[f"staleness_{s}"] = {
            "seeds": [r["seed"] for r in mine], "final_success": finals,
            "final_success_mean": statistics.fmean(finals), "final_success_min": min(finals),
            "final_success_max": max(finals),
            "last10_reward_mean": statistics.fmean(r["last10_reward"] for r in mine),
            "takeoff_steps": takeoffs, "never_took_off": sum(t is None for t in takeoffs),
        }
    if 0 in arms:
        sync = out["staleness_0"]
        for s in arms:
            if s != 0:
                mean = out[f"staleness_{s}"]["final_success_mean"]
                out[f"staleness_{s}"]["mean_within_sync_seed_range"] = bool(
                    sync["final_success_min"] <= mean <= sync["final_success_max"])
    return out


def table(summary: dict[str, Any]) -> str:
    lines = ["| max_staleness | seeds | final success, mean [min, max] | last-10 reward | take-off steps |",
             "|---|---|---|---|---|"]
    for name, arm in summary.items():
        lines.append(f"| {name.split('_')[1]} | {len(arm['seeds'])} | {arm['final_success_mean']:.3f} "
                     f"[{arm['final_success_min']:.3f}, {arm['final_success_max']:.3f}] | "
                     f"{arm['last10_reward_mean']:.3f} | {arm['takeoff_steps']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--job", choices=("magrpo", "debate"), default="magrpo")
    parser.add_argument("--steps", type=int, default=None, help="MAGRPO steps (250) or PPO updates (80)")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--output", default=None, help="default benchmarks/results/learning_async_<demo|debate>.json")
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    if any(s < 0 for s in args.staleness):
        parser.error("--staleness: each value must be >= 0 (0 is the synchronous trainer).")
    steps = args.steps if args.steps is not None else (250 if args.job == "magrpo" else 80)

    from trl_marl.scripts import demo
    from trl_marl.toy import make_toy_model

    demo._quiet(1)
    model_dir = make_toy_model(demo.demo_model_dir("target"), task="target", hidden_size=32, num_layers=1,
                               pretrain_steps=100, seed=0, targets=(demo.TARGET,))
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="trl-marl-learning-async-") as tmp:
        work = args.work_dir or tmp
        for seed in args.seeds:
            for s in args.staleness:
                run = (one_run(model_dir, steps, seed, s, args.episodes, work) if args.job == "magrpo"
                       else one_debate_run(steps, seed, s, args.episodes, work))
                print(f"[learning_async] {args.job} seed {seed} max_staleness {s}: final success "
                      f"{run['final_success']:.3f}, last-10 reward {run['last10_reward']:.3f}, take-off "
                      f"{run['takeoff_step']}", flush=True)
                runs.append(run)
    summary = summarize(runs, args.staleness)
    record = {
        "benchmark": "learning_async_demo" if args.job == "magrpo" else "learning_async_debate",
        "command": "python benchmarks/learning/learning_async.py " + shlex.join(argv if argv is not None
                                                                               else sys.argv[1:]),
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(), "machine": machine_info(),
        "settings": {"job": args.job, "steps": steps, "episodes": args.episodes, "seeds": args.seeds,
                     "staleness": args.staleness, "takeoff": TAKEOFF, "window": WINDOW, "torch_threads": 1},
        "summary": summary, "table_markdown": table(summary), "runs": runs,
    }
    out = Path(args.output or REPO_ROOT / "benchmarks" / "results" /
               f"learning_async_{'demo' if args.job == 'magrpo' else 'debate'}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(record["table_markdown"])
    print(f"[learning_async] wrote {out}")
    return record


if __name__ == "__main__":
    main()
