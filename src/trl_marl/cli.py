"""The `trl-marl` command.

`trl-marl demo` trains a two-agent team offline on a CPU with MAGRPO and prints the team reward before and
after training. The agents share a tiny language model pretrained (and cached) by `trl_marl.toy` to answer
`T=10:` with a random number between 0 and 10; each agent sees only the target, never its partner, and the team
is rewarded when the two numbers add up to 10. They can only succeed by agreeing on a convention.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any


def _demo(args: argparse.Namespace) -> int:
    import torch

    warnings.filterwarnings("ignore")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    torch.set_num_threads(1)  # tiny models: more threads only add overhead (see DESIGN.md)
    from datasets import Dataset
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    from .envs import TargetSumEnv, TargetSumReward
    from .toy import make_toy_model
    from .trainers import MAGRPOConfig, MAGRPOTrainer

    steps = {"quick": 80, "default": 150, "full": 400}[args.preset]
    target = 10
    out_dir = os.path.abspath(args.output_dir)
    os.makedirs(out_dir, exist_ok=True)
    start = time.perf_counter()
    print(f"[1/3] Tiny language model (cached after the first run): target task T={target}", flush=True)
    model_dir = make_toy_model(task="target", hidden_size=32, num_layers=1, pretrain_steps=100, seed=args.seed,
                               targets=(target,))
    config = MAGRPOConfig(
        output_dir=os.path.join(out_dir, "team"), num_agents=2, num_generations=8, per_device_train_batch_size=64,
        max_completion_length=4, learning_rate=3e-3, lr_scheduler_type="constant", max_steps=steps,
        logging_steps=max(1, steps // 10), report_to="none", save_strategy="no", gradient_checkpointing=False,
        temperature=1.0, seed=args.seed, per_device_eval_batch_size=64, disable_tqdm=False,
    )
    dataset = Dataset.from_dict({"target": [target] * 1024})
    eval_dataset = Dataset.from_dict({"target": [target] * 64})
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(invalid_penalty=0.5),
                            env=TargetSumEnv(num_agents=2), args=config, train_dataset=dataset,
                            eval_dataset=eval_dataset)

    def success_rate() -> float:
        """Fraction of sampled joint actions whose numbers sum to the target."""
        rewards = []
        for i in range(0, len(eval_dataset), 8):
            rollout = trainer.rollout.run([eval_dataset[j] for j in range(i, min(i + 8, len(eval_dataset)))])
            rewards.append((rollout.turns[0].rewards == 1.0).float().mean().item())
        return sum(rewards) / len(rewards)

    from transformers.trainer_callback import ProgressCallback

    class RewardProgress(ProgressCallback):
        """The usual progress bar, showing the team reward instead of printing every log dict."""

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            if state.is_world_process_zero and self.training_bar is not None and logs and "reward" in logs:
                self.training_bar.set_postfix(team_reward=f"{logs['reward']:.2f}")

    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(RewardProgress)
    torch.manual_seed(args.seed)
    before = success_rate()
    print(f"[2/3] MAGRPO: 2 agents, {steps} steps, 8 episodes x 8 joint actions per step", flush=True)
    trainer.train()
    after = success_rate()
    print("[3/3] Team success rate (the two numbers add up to the target), 512 sampled joint actions:")
    print(f"      before training: {before:.3f}")
    print(f"      after training:  {after:.3f}")
    examples = trainer.rollout.run([eval_dataset[0]]).turns[0].completions
    pairs = ", ".join(f"{a.strip()}+{b.strip()}" for a, b in list(zip(examples[0], examples[1]))[:6])
    print(f"      sample answers after training: {pairs}")
    result = {"task": f"two agents, numbers summing to {target}", "steps": steps, "seed": args.seed,
              "success_before": before, "success_after": after, "seconds": time.perf_counter() - start,
              "log_history": trainer.state.log_history}
    with open(os.path.join(out_dir, "demo_metrics.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"Done in {result['seconds']:.0f} s. Metrics: {os.path.join(out_dir, 'demo_metrics.json')}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trl-marl", description="Multi-agent RL for LLM teams, built on TRL.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("magrpo", help="Train with MAGRPO on a built-in task: `trl-marl magrpo --config FILE`.")
    demo = sub.add_parser("demo", help="Train a toy two-agent team offline on CPU and show that it learns.")
    size = demo.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick", help="A ~15 s run.")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="A longer run.")
    demo.set_defaults(preset="default")
    demo.add_argument("--seed", type=int, default=0, help="Random seed.")
    demo.add_argument("--output-dir", default="trl-marl-demo", help="Where metrics are written.")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `trl-marl` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "magrpo":  # TrlParser owns the rest of the command line (YAML config + overrides)
        from .scripts.magrpo import main as magrpo_main
        from .scripts.magrpo import parse

        magrpo_main(*parse(argv[1:]))
        return 0
    parser = build_parser()
    args: Any = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
