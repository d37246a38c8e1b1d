"""The CoMLRL family side by side: each comlrl-named algorithm here and in comlrl 1.4.3, same task, same budget.

Algorithms (ours -> comlrl 1.4.3):

- MAGRPO: ``MAGRPOConfig(scale_rewards="group")`` -> ``MAGRPOTrainer`` (``advantage_normalization=True``, its
  default: both use ``(R - mean R) / std R`` over the G samples of a prompt);
- MAREINFORCE: ``MAREINFORCEConfig`` (``advantage_mode="raw"``, ``scale_rewards="none"``) -> ``MAREINFORCETrainer``
  with ``advantage_normalization=False``;
- MARLOO: ``MARLOOConfig`` (``"loo"``) -> ``MARLOOTrainer`` (``"rloo"``), normalization off;
- MAReMax: ``MAReMaxConfig`` (``"max"``) -> ``MAReMaxTrainer``, normalization off.

(comlrl's ``advantage_normalization=True`` re-centres and rescales every group after the advantage is computed,
which makes raw / rloo / max / mean identical; the three family members only differ with it off.)

Task: two agents both see ``T=10:``; the team reward of a joint action is 1 if the two answers are integers
summing to 10, -0.5 if either is not an integer, else 0. Both sides load the same model folder
(``trl_marl.toy.make_toy_model(task="target")``: a tiny Qwen2 pretrained to output numbers), one full model per
agent, and use the same
budget per step: ``P`` prompts x ``G`` samples (``P * G`` scored joint actions), one optimizer step per agent,
the same number of steps, learning rate (constant), max new tokens, temperature 1, top_p 1, no top_k, no KL.

Recorded per algorithm, side and seed: the team reward per step (mean over the step's joint actions), the final
reward (mean of the last 5 steps) and joint samples per second of the whole training loop (all scored joint
actions / wall time of ``train()``, first steps included). comlrl runs in its own virtualenv through
``bench_comlrl_peer.py --algorithm ...`` (a child process); ours in this process. Runs are sequential, never two
at once, and the order of the two sides alternates between seeds.

    PYTHONPATH=src python benchmarks/learning/bench_family.py --seeds 0 1 2 --steps 30
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

BENCH_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH_ROOT))
from peers import peer_python  # noqa: E402

COMLRL_PYTHON = peer_python("comlrl")
PEER_SCRIPT = BENCH_ROOT / "parity" / "bench_comlrl_peer.py"
AC_PEER_SCRIPT = BENCH_ROOT / "parity" / "bench_comlrl_ac_peer.py"
ALGORITHMS = ("magrpo", "mareinforce", "marloo", "maremax", "iac", "maac")
AC_ALGORITHMS = ("iac", "maac")
FINAL_WINDOW = 5


def run_comlrl(algorithm: str, model_dir: str, cfg: dict[str, Any], seed: int, json_path: Path) -> dict[str, Any]:
    """One comlrl run in its own virtualenv; returns the peer's JSON."""
    command = [
        COMLRL_PYTHON, str(AC_PEER_SCRIPT if algorithm in AC_ALGORITHMS else PEER_SCRIPT), "--algorithm", algorithm,
        "--model-dir", model_dir, "--steps", str(cfg["steps"]), "--num-generations", str(cfg["G"]),
        "--max-new-tokens", str(cfg["max_len"]), "--prompts-per-step", str(cfg["P"]), "--lr", str(cfg["lr"]),
        "--temperature", "1.0", "--top-p", "1.0", "--threads", "1", "--seed", str(seed), "--json", str(json_path),
    ]
    if algorithm in AC_ALGORITHMS:
        command += ["--critic-type", "v"]
    else:
        command += ["--warmup", "2", "--top-k", "0"]
    if algorithm not in AC_ALGORITHMS and algorithm != "magrpo":
        command.append("--no-advantage-normalization")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["OMP_NUM_THREADS"] = "1"
    completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"comlrl peer failed ({completed.returncode}):\n{completed.stderr[-4000:]}")
    with open(json_path) as f:
        peer = json.load(f)
    return {
        "rewards": peer["reward_mean_per_step"],
        "train_s": peer["train_wall_s"],
        "joint_samples": peer["joint_samples_total"],
        "settings": {"trainer": peer["algorithm"], "advantage_mode": peer.get("advantage_mode"),
                     "critic_type": peer.get("critic_type"),
                     "advantage_normalization": peer["advantage_normalization"]},
    }


def reward_logger(key: str, sink: list[float]) -> Any:
    """A `TrainerCallback` that appends the logged `key` of every step to `sink`."""
    from transformers import TrainerCallback

    class RewardLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if logs and key in logs:
                sink.append(float(logs[key]))

    return RewardLog()


def run_ours(algorithm: str, model_dir: str, cfg: dict[str, Any], seed: int, out_dir: Path) -> dict[str, Any]:
    """One trl_marl run in this process; rewards read from the per-step logs."""
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    torch.set_num_threads(1)
    config_cls = {"magrpo": MAGRPOConfig, "mareinforce": MAREINFORCEConfig, "marloo": MARLOOConfig,
                  "maremax": MAReMaxConfig}[algorithm]
    extra = {"scale_rewards": "group"} if algorithm == "magrpo" else {}
    P, G = cfg["P"], cfg["G"]
    args = config_cls(
        output_dir=str(out_dir), num_agents=2, num_generations=G, per_device_train_batch_size=P * G,
        max_completion_length=cfg["max_len"], learning_rate=cfg["lr"], lr_scheduler_type="constant", beta=0.0,
        temperature=1.0, top_p=1.0, top_k=0, bf16=False, gradient_checkpointing=False, report_to="none",
        save_strategy="no", logging_steps=1, disable_tqdm=True, seed=seed, max_steps=cfg["steps"],
        max_grad_norm=cfg["max_grad_norm"], loss_type=cfg["loss_type"], weight_decay=cfg["weight_decay"], **extra,
    )
    rewards: list[float] = []
    reward_log = reward_logger("reward", rewards)

    emulate = cfg.get("emulate_comlrl_last_token") or cfg.get("emulate_comlrl_padding")
    trainer_cls = LastTokenSkippingMAGRPO(bool(cfg.get("emulate_comlrl_padding"))) if emulate else MAGRPOTrainer
    trainer = trainer_cls(
        model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
        processing_class=load_tokenizer(model_dir), args=args,
        train_dataset=Dataset.from_dict({"target": [10] * (P * cfg["steps"] * 2)}),
    )
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    trainer.add_callback(reward_log)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    if len(rewards) != cfg["steps"]:
        raise RuntimeError(f"expected {cfg['steps']} logged rewards, got {len(rewards)}")
    return {
        "rewards": rewards, "train_s": train_s, "joint_samples": P * G * cfg["steps"],
        "settings": {"config": config_cls.__name__, "advantage_mode": args.advantage_mode,
                     "scale_rewards": args.scale_rewards, "loss_type": args.loss_type,
                     "max_grad_norm": args.max_grad_norm, "weight_decay": args.weight_decay,
                     "emulate_comlrl_last_token": bool(cfg.get("emulate_comlrl_last_token")),
                     "emulate_comlrl_padding": bool(cfg.get("emulate_comlrl_padding"))},
    }


def LastTokenSkippingMAGRPO(train_padding: bool = False) -> type:  # noqa: N802 - a class, built lazily
    """A diagnostic MAGRPOTrainer whose loss skips the tokens comlrl 1.4.3's REINFORCE-family loss never trains.

    comlrl's `_compute_loss_with_gradients` feeds `prompt + completion[:-1]` of each prompt's G completions (padded to
    the group's longest) and drops the last logit too, so the last position of that padded width is never trained:
    the EOS of every completion of the group's maximal length (or its last token when it was cut at
    `max_new_tokens`). This subclass masks exactly those tokens out of our loss (the groups are the G consecutive
    samples of a prompt), to measure how much of the learning-speed gap on the target-sum task that skip explains.
    With `train_padding` it also emulates the other half of that off-by-one: comlrl trains every position of the
    group's padded width but the last, so a shorter completion's padding after its EOS is trained (as the pad
    token, with that completion's advantage); here those positions join the loss too (our forward does not attend to
    them, comlrl's does). Benchmark code, not a library option.
    """
    import torch

    from trl_marl import MAGRPOTrainer

    class _Trainer(MAGRPOTrainer):
        def compute_agent_loss(self, agent_index: int, logps: torch.Tensor, inputs: dict[str, Any]) -> Any:
            batches = inputs["batches"]
            batch = batches[agent_index]
            mask = batch.completion_mask.clone()
            lengths = mask.sum(dim=1)
            G = self.args.num_generations
            for start in range(0, mask.size(0), G):
                block = lengths[start:start + G]
                longest = int(block.max())
                if longest > 0 and train_padding:  # positions 0 .. longest - 2 of every row, padding included
                    mask[start:start + G, :longest - 1] = 1
                    mask[start:start + G, longest - 1:] = 0
                elif longest > 0:
                    rows = start + torch.nonzero(block == longest).flatten()
                    mask[rows, longest - 1] = 0
            patched = list(batches)
            patched[agent_index] = type(batch)(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, mask)
            return super().compute_agent_loss(agent_index, logps, {**inputs, "batches": patched})

    return _Trainer


def run_ours_ac(algorithm: str, model_dir: str, cfg: dict[str, Any], seed: int, out_dir: Path) -> dict[str, Any]:
    """One trl_marl IAC (per-agent critics) or MAAC (one centralized V critic) run: `MultiAgentPPOTrainer`."""
    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    torch.set_num_threads(1)
    P, G, steps = cfg["P"], cfg["G"], cfg["steps"]
    critic = {"critic": "per_agent"} if algorithm == "iac" else {"critic": "centralized", "critic_type": "V"}
    args = MultiAgentPPOConfig(
        output_dir=str(out_dir), num_agents=2, per_device_train_batch_size=P * G, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=1, total_episodes=P * G * steps, response_length=cfg["max_len"],
        stop_token="eos", learning_rate=cfg["lr"], lr_scheduler_type="constant", kl_coef=0.0, vf_coef=0.6,
        gamma=1.0, lam=1.0, temperature=1.0, report_to="none", save_strategy="no", logging_steps=1,
        num_sample_generations=0, disable_tqdm=True, seed=seed, bf16=False, max_grad_norm=cfg["max_grad_norm"],
        advantage_mode={"token": "gae", "turn": "turn"}[cfg["advantage_level"]], weight_decay=cfg["weight_decay"],
        **critic,
    )
    rewards: list[float] = []
    reward_log = reward_logger("objective/scores", rewards)

    trainer = MultiAgentPPOTrainer(
        args=args, model=model_dir, env=TargetSumEnv(2), reward_funcs=TargetSumReward(0.5),
        train_dataset=Dataset.from_dict({"target": [10] * (P * G * steps)}),
    )
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    trainer.add_callback(reward_log)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    if len(rewards) != steps:
        raise RuntimeError(f"expected {steps} logged rewards, got {len(rewards)}")
    return {
        "rewards": rewards, "train_s": train_s, "joint_samples": P * G * steps,
        "settings": {"config": "MultiAgentPPOConfig", "critic": args.critic, "critic_type": args.critic_type,
                     "num_ppo_epochs": 1, "vf_coef": 0.6, "gamma": 1.0, "lam": 1.0, "advantages": "whitened",
                     "advantage_level": args.advantage_level, "max_grad_norm": args.max_grad_norm,
                     "weight_decay": args.weight_decay},
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over seeds of the curve, the final reward (last FINAL_WINDOW steps) and joint samples per second."""
    finals = [statistics.fmean(r["rewards"][-FINAL_WINDOW:]) for r in runs]
    rates = [r["joint_samples"] / r["train_s"] for r in runs]
    curve = [statistics.fmean(values) for values in zip(*(r["rewards"] for r in runs))]
    return {
        "final_reward": statistics.fmean(finals), "final_reward_per_seed": finals,
        "first_reward": statistics.fmean(statistics.fmean(r["rewards"][:FINAL_WINDOW]) for r in runs),
        "joint_samples_per_s": statistics.fmean(rates), "joint_samples_per_s_per_seed": rates,
        "reward_curve": curve, "settings": runs[0]["settings"],
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| algorithm | final reward ours | final reward comlrl | first-5 reward (both) | joint samples/s ours "
        "| joint samples/s comlrl | speed ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in result["algorithms"].items():
        if "ours" not in row or "comlrl" not in row:
            side = "ours" if "ours" in row else "comlrl"
            lines.append(f"| {name} ({side} only) | {row[side]['final_reward']:+.3f} | | "
                         f"{row[side]['first_reward']:+.3f} | {row[side]['joint_samples_per_s']:.0f} | | |")
            continue
        o, c = row["ours"], row["comlrl"]
        lines.append(
            f"| {name} | {o['final_reward']:+.3f} | {c['final_reward']:+.3f} | "
            f"{o['first_reward']:+.3f} / {c['first_reward']:+.3f} | {o['joint_samples_per_s']:.0f} | "
            f"{c['joint_samples_per_s']:.0f} | {o['joint_samples_per_s'] / c['joint_samples_per_s']:.2f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--prompts", type=int, default=4, help="P: prompts per step")
    parser.add_argument("--num-generations", type=int, default=8, help="G: samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--pretrain-steps", type=int, default=300)
    parser.add_argument("--max-grad-norm", type=float, default=1.0,
                        help="ours: gradient clipping (TRL's default 1.0; comlrl clips nothing; 0 = off)")
    parser.add_argument("--loss-type", default="dapo", help="ours, MAGRPO family: loss_type (TRL's default dapo)")
    parser.add_argument("--advantage-level", default="turn", choices=["turn", "token"],
                        help="ours, IAC/MAAC: 'turn' (CoMLRL's actor-critic: R - V(s) for the whole response) or "
                        "'token' (TRL's PPO: per-token GAE)")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="ours: AdamW weight decay (comlrl: 0.01)")
    parser.add_argument("--emulate-comlrl-last-token", action="store_true",
                        help="ours, MAGRPO family (diagnostic): skip in the loss the tokens comlrl's REINFORCE-family "
                        "loss never trains (the last position of each prompt group's padded width)")
    parser.add_argument("--emulate-comlrl-padding", action="store_true",
                        help="with the last-token skip, also train (as comlrl does) the padding after a shorter "
                        "completion's EOS, up to the group's padded width minus one (diagnostic)")
    parser.add_argument("--sides", nargs="+", default=["ours", "comlrl"], choices=["ours", "comlrl"])
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--json", default=str(BENCH_ROOT / "results" / "family.json"))
    args = parser.parse_args()

    from trl_marl.toy import make_toy_model

    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-family-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    model_dir = str(work_dir / f"target10-h{args.hidden}-l{args.layers}")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=args.hidden, num_layers=args.layers, seed=0,
                   pretrain_steps=args.pretrain_steps)
    builder = {"builder": "trl_marl.toy.make_toy_model", "task": "target", "targets": [10], "hidden_size": args.hidden,
               "num_layers": args.layers, "seed": 0, "pretrain_steps": args.pretrain_steps}
    cfg = {"steps": args.steps, "P": args.prompts, "G": args.num_generations, "max_len": args.max_new_tokens,
           "lr": args.lr, "max_grad_norm": args.max_grad_norm, "loss_type": args.loss_type,
           "advantage_level": args.advantage_level, "weight_decay": args.weight_decay,
           "emulate_comlrl_last_token": args.emulate_comlrl_last_token,
           "emulate_comlrl_padding": args.emulate_comlrl_padding}
    result: dict[str, Any] = {"config": cfg, "seeds": args.seeds, "model": builder, "argv": sys.argv[1:],
                              "final_window": FINAL_WINDOW, "algorithms": {}}
    for algorithm in args.algorithms:
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in args.sides}
        for i, seed in enumerate(args.seeds):
            sides = ["ours", "comlrl"] if i % 2 == 0 else ["comlrl", "ours"]
            for side in [s for s in sides if s in args.sides]:
                if side == "ours" and algorithm in AC_ALGORITHMS:
                    run = run_ours_ac(algorithm, model_dir, cfg, seed, work_dir / f"out-{algorithm}-{seed}")
                elif side == "ours":
                    run = run_ours(algorithm, model_dir, cfg, seed, work_dir / f"out-{algorithm}-{seed}")
                else:
                    run = run_comlrl(algorithm, model_dir, cfg, seed, work_dir / f"comlrl-{algorithm}-{seed}.json")
                runs[side].append(run)
                final = statistics.fmean(run["rewards"][-FINAL_WINDOW:])
                rate = run["joint_samples"] / run["train_s"]
                print(f"{algorithm} seed {seed} {side}: final {final:+.3f}, {rate:.0f} joint samples/s", flush=True)
        result["algorithms"][algorithm] = {side: summarize(side_runs) for side, side_runs in runs.items()}
        result["algorithms"][algorithm]["runs"] = runs
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(markdown(result))


if __name__ == "__main__":
    main()
