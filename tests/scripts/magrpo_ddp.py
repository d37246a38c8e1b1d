"""A short multi-process MAGRPO run, launched by `tests/test_accelerate.py` with `accelerate launch`.

Every process trains the same 2-agent team on `TargetSumEnv` for a few steps, then writes
`<out-dir>/rank<process_index>.pt` holding its trainable parameters before and after training, the number of
processes it saw, the dataset rows (`row_id` column) it played and the joint actions it sampled. The test then
checks that the processes got different shards of the data and sampled different completions, yet ended with
identical weights (DistributedDataParallel averaged their gradients).

Training runs on the CPU (`use_cpu=True`), so the script works under any multi-process launcher
(`accelerate launch --multi_gpu`, `torchrun`, `mpirun`) with the gloo backend.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

try:
    import trl_marl  # noqa: F401
except ImportError:  # running from a source checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from datasets import Dataset  # noqa: E402
from transformers import set_seed  # noqa: E402

from trl_marl import MAGRPOConfig, MAGRPOTrainer, TargetSumEnv  # noqa: E402
from trl_marl.rewards.arithmetic import TargetSumReward  # noqa: E402

NUM_AGENTS = 2
NUM_GENERATIONS = 4
EPISODES_PER_STEP = 4
NUM_ROWS = 128


class RecordingReward(TargetSumReward):
    """`TargetSumReward` that also remembers the `row_id` of every episode it scored and the joint actions."""

    name = "target_sum"

    def __init__(self) -> None:
        super().__init__(invalid_penalty=0.5)
        self.row_ids: set[int] = set()
        self.joint_actions: list[list[str]] = []

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        self.row_ids.update(int(i) for i in kwargs["row_id"])
        team = kwargs.get("agent_completions") or [completions]
        self.joint_actions.extend([str(agent[j]) for agent in team] for j in range(len(completions)))
        return super().__call__(prompts, completions, **kwargs)


def parameters(module: torch.nn.Module, trainable_only: bool) -> dict[str, torch.Tensor]:
    """A detached CPU copy of the (trainable) parameters, by name."""
    return {name: p.detach().cpu().clone() for name, p in module.named_parameters()
            if p.requires_grad or not trainable_only}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", required=True, help="A toy model directory (trl_marl.toy.make_toy_model).")
    parser.add_argument("--out-dir", required=True, help="Where each process writes rank<i>.pt.")
    parser.add_argument("--team-mode", choices=("models", "adapters"), default="models")
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--adaptive-entropy", action="store_true",
                        help="An entropy bonus with adaptive control (its entropy is measured over every process).")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    set_seed(0)  # same LoRA initialisation on every process
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    dataset = Dataset.from_dict({"target": [10] * NUM_ROWS, "row_id": list(range(NUM_ROWS))})
    peft_config = None
    if args.team_mode == "adapters":
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    config = MAGRPOConfig(
        output_dir=str(out_dir / "trainer"),
        num_agents=NUM_AGENTS,
        team_mode=args.team_mode,
        num_generations=NUM_GENERATIONS,
        per_device_train_batch_size=NUM_GENERATIONS * EPISODES_PER_STEP,
        max_completion_length=4,
        learning_rate=args.learning_rate,
        max_steps=args.max_steps,
        logging_steps=1,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        disable_tqdm=True,
        temperature=1.0,
        seed=0,
        **(dict(use_adaptive_entropy=True, entropy_coef=0.01, entropy_coef_delta=0.01, entropy_target=50.0)
           if args.adaptive_entropy else {}),
    )
    reward = RecordingReward()
    trainer = MAGRPOTrainer(
        model=args.model_dir,
        reward_funcs=reward,
        env=TargetSumEnv(NUM_AGENTS),
        args=config,
        train_dataset=dataset,
        peft_config=peft_config,
    )
    initial = parameters(trainer.team, trainable_only=False)
    trainer.train()
    # every parameter the team trains (in `adapters` mode each agent's adapter), as it is after training
    final = parameters(trainer.accelerator.unwrap_model(trainer.model), trainable_only=True)

    accelerator = trainer.accelerator
    result = {
        "process_index": accelerator.process_index,
        "num_processes": accelerator.num_processes,
        "global_step": trainer.state.global_step,
        "row_ids": sorted(reward.row_ids),
        "joint_actions": reward.joint_actions,
        "initial": {name: initial[name] for name in final},
        "final": final,
        "entropy_coefs": trainer.entropy_control.coefs,
        "last_entropy": trainer.entropy_control.last_entropy,
    }
    path = out_dir / f"rank{accelerator.process_index}.pt"
    torch.save(result, path)
    print(f"[rank {accelerator.process_index}/{accelerator.num_processes}] wrote {path} "
          f"({len(final)} trainable tensors, {len(reward.row_ids)} rows, pid {os.getpid()})")
    accelerator.wait_for_everyone()


if __name__ == "__main__":
    main()
