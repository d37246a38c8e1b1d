"""Peak memory of multi-agent PPO: a 4-agent ``adapters`` team against one agent, with a backward per policy slot
(``MultiAgentPPOConfig.backward_per_agent=True``, the default) and with one backward of the slots' summed loss
(``False``: the training step as it was before the option).

Run from the repository root with the development virtualenv::

    PYTHONPATH=src python benchmarks/memory/bench_ppo_memory.py           # 84M-parameter model, 2 runs per variant
    PYTHONPATH=src python benchmarks/memory/bench_ppo_memory.py --quick   # smaller model, 1 run per variant

Measured as benchmark (3) of ``bench_magrpo.py`` (whose helpers this script imports): the peak RSS (``VmHWM``) of a
fresh process that builds a LoRA ``adapters`` team (r=8 on ``q_proj``/``v_proj``, one adapter per agent on one
randomly initialised toy base model) with its value model and trains a few PPO updates on ``TargetSumEnv``, for
1 and for 4 agents with the same episodes per update (so each agent has as many samples as the single agent). The
critic is centralized by default (``critic="centralized"``: one value model for the team, as big as the policy's
base model, so that both teams hold the same weights and the ratio shows activations); ``--critic per_agent`` gives
each agent a value model of its own (four copies of the base weights, with their gradients and AdamW moments).
Variants, each in its own process, interleaved over the repeats:

* ``n1``: one agent.
* ``n4_summed``: four agents, ``backward_per_agent=False``.
* ``n4_per_slot``: four agents, ``backward_per_agent=True``.
* ``n1_same_total``: one agent with 4x the episodes (the four-agent team's samples per update; information).

Memory is not disturbed by other processes' CPU load. The script prints the peaks and ratios and writes
``benchmarks/results/ppo_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "speed"))

from bench_magrpo import (  # noqa: E402  # also sets one thread and offline mode, and puts src/ on sys.path
    SRC_DIR,
    _load,
    _median,
    _memory_model_dir,
    _quiet_trainer,
    _source_state,
    _versions,
    current_mb,
    memory_team_kwargs,
    peak_mb,
)

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_JSON = BENCH_DIR.parent / "results" / "ppo_memory.json"
VARIANTS = {  # name -> (agents, episodes per update as a multiple of --episodes, backward_per_agent)
    "n1": (1, 1, True),
    "n4_summed": (4, 1, False),
    "n4_per_slot": (4, 1, True),
    "n1_same_total": (1, 4, True),
}


def child(model_dir: str, num_agents: int, episodes: int, updates: int, max_len: int, critic: str,
          backward_per_agent: bool) -> None:
    """Runs in a fresh process: build the team and its PPO trainer, train `updates` updates, print peaks as JSON."""
    import torch

    torch.set_num_threads(1)
    from datasets import Dataset

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer

    after_import = current_mb()
    output_dir = tempfile.mkdtemp(prefix="bench-ppo-mem-")
    trainer = MultiAgentPPOTrainer(
        **memory_team_kwargs(model_dir, num_agents),
        args=MultiAgentPPOConfig(
            output_dir=output_dir, num_agents=num_agents, team_mode="adapters", critic=critic,
            backward_per_agent=backward_per_agent, per_device_train_batch_size=episodes, num_mini_batches=1,
            num_ppo_epochs=1, total_episodes=episodes * updates, response_length=max_len, learning_rate=1e-4,
            bf16=False, gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1,
            num_sample_generations=0, disable_tqdm=True, seed=0, temperature=1.0,
        ),
        train_dataset=Dataset.from_dict({"target": [10] * (episodes * updates)}),
    )
    _quiet_trainer(trainer)
    after_build = current_mb()
    start = time.perf_counter()
    trainer.train()
    print(json.dumps({
        "num_agents": num_agents, "episodes_per_update": episodes, "backward_per_agent": backward_per_agent,
        "peak_rss_mb": peak_mb(), "current_rss_after_import_mb": after_import,
        "current_rss_after_build_mb": after_build, "current_rss_after_train_mb": current_mb(),
        "value_models": len(trainer.wrapper.value_models), "train_s": time.perf_counter() - start,
        "updates": trainer.state.global_step,
    }))
    shutil.rmtree(output_dir, ignore_errors=True)


def run_child(model_dir: str, name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    agents, scale, flag = VARIANTS[name]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC_DIR), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--model-dir", model_dir,
               "--num-agents", str(agents), "--child-episodes", str(cfg["episodes"] * scale),
               "--updates", str(cfg["updates"]), "--max-len", str(cfg["max_len"]), "--critic", cfg["critic"],
               "--backward-per-agent", str(int(flag))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {name} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench(cfg: dict[str, Any], work_dir: Path) -> dict[str, Any]:
    model_dir = _memory_model_dir(cfg, work_dir)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    for _ in range(cfg["repeats"]):
        for name in VARIANTS:
            runs[name].append(run_child(model_dir, name, cfg))
            print(f"[bench_ppo_memory] {name}: {runs[name][-1]['peak_rss_mb']:.0f} MB", flush=True)
    peaks = {name: _median([r["peak_rss_mb"] for r in items]) for name, items in runs.items()}
    import_mb = _median([r["current_rss_after_import_mb"] for items in runs.values() for r in items])

    def ratio(n4: str, n1: str = "n1") -> dict[str, float]:
        return {"peak": peaks[n4] / peaks[n1], "above_import": (peaks[n4] - import_mb) / (peaks[n1] - import_mb)}

    return {
        "model": {"dir": model_dir, "hidden_size": cfg["hidden"], "num_layers": cfg["layers"]},
        "settings": cfg, "peak_rss_mb": peaks, "import_baseline_mb": import_mb,
        "ratio_4_vs_1_summed": ratio("n4_summed"), "ratio_4_vs_1_per_slot": ratio("n4_per_slot"),
        "ratio_per_slot_vs_same_total": ratio("n4_per_slot", "n1_same_total"), "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller model and one run per variant")
    parser.add_argument("--critic", choices=["centralized", "per_agent"], default="centralized")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per update of each agent")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=4, help="response_length")
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "trl_marl_bench"))
    parser.add_argument("--json", default=str(DEFAULT_JSON))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--num-agents", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--child-episodes", type=int, default=8, help=argparse.SUPPRESS)
    parser.add_argument("--backward-per-agent", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model_dir, args.num_agents, args.child_episodes, args.updates, args.max_len, args.critic,
              bool(args.backward_per_agent))
        return
    cfg = dict(hidden=512 if args.quick else 1024, layers=8, repeats=1 if args.quick else 2, episodes=args.episodes,
               updates=args.updates, max_len=args.max_len, critic=args.critic)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", "benchmarks/memory/bench_ppo_memory.py", *sys.argv[1:]]),
        "versions": _versions(), "source": _source_state(), "load_at_start": _load(),
        **bench(cfg, work_dir),
    }
    results["total_wall_s"] = time.perf_counter() - started
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    peaks, base = results["peak_rss_mb"], results["import_baseline_mb"]
    print(f"\npeak RSS, 4-agent vs 1-agent `adapters` PPO team ({cfg['critic']} critic, hidden {cfg['hidden']}, "
          f"{cfg['layers']} layers; import baseline {base:.0f} MB):")
    for key, label in (("ratio_4_vs_1_summed", "one backward of the summed loss"),
                       ("ratio_4_vs_1_per_slot", "a backward per policy slot")):
        r = results[key]
        n4 = "n4_summed" if "summed" in key else "n4_per_slot"
        print(f"  {label}: {peaks[n4]:.0f} MB vs {peaks['n1']:.0f} MB = {r['peak']:.3f}x "
              f"(above import {r['above_import']:.2f}x)")
    print(f"  control, 1 agent with 4x the episodes: {peaks['n1_same_total']:.0f} MB; results in {args.json}")


if __name__ == "__main__":
    main()
