"""A short multi-process training run of a 2-agent team, launched by `tests/trainers/test_accelerate.py`.

Every process trains the same team on `TargetSumEnv` (MAGRPO, or multi-agent PPO with `--trainer ppo`) for a few
steps, optionally saves it (`trainer.save_model(<out-dir>/final)`), then writes `<out-dir>/rank<process_index>.pt`
holding its trainable parameters before and after training (whole tensors: FSDP2's shards are gathered), the
number of processes and the distributed type it saw, the dataset rows (`row_id` column) it played, the joint
actions it sampled and the logged losses. The test then checks that the processes got different shards of the data
and sampled different completions, yet ended with identical weights, and compares strategies (DDP, FSDP2).

Training runs on the CPU (`use_cpu=True`), so the script works under any multi-process launcher
(`accelerate launch --multi_gpu` or with an FSDP config, `torchrun`) with the gloo backend.
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

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, TargetSumEnv  # noqa: E402
from trl_marl.rewards.arithmetic import TargetSumReward  # noqa: E402
from trl_marl.trainers.distributed import full_tensor  # noqa: E402

NUM_AGENTS = 2
NUM_GENERATIONS = 4
EPISODES_PER_STEP = 4
NUM_ROWS = 128


class RecordingReward(TargetSumReward):
    """`TargetSumReward` that also remembers the `row_id` of every episode it scored and the joint actions."""

    name = "target_sum"
    __name__ = "target_sum"
    reward_isolation = "thread"  # the script reports what it saw: run in the trainer's process, not in a worker

    def __init__(self) -> None:
        super().__init__(invalid_penalty=0.5)
        self.row_ids: set[int] = set()
        self.joint_actions: list[list[str]] = []
        self.turns: set[int] = set()

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        self.row_ids.update(int(i) for i in kwargs["row_id"])
        self.turns.add(int(kwargs["turn"]))
        team = kwargs.get("agent_completions") or [completions]
        self.joint_actions.extend([str(agent[j]) for agent in team] for j in range(len(completions)))
        return super().__call__(prompts, completions, **kwargs)


class EndsFirstOnProcessZero(TargetSumEnv):
    """Two turns of `TargetSumEnv`, except that every episode of process 0 ends after turn 1: the processes then
    play different numbers of turns (what early stopping or an environment's end condition can do)."""

    def __init__(self, num_agents: int) -> None:
        super().__init__(num_agents, num_turns=2)

    def is_done(self, row: Any, transcript: Any) -> bool:
        return int(os.environ.get("RANK", "0")) == 0


def parameters(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached whole CPU copy of the trainable parameters, by name (on every process: gathering is collective;
    FSDP2 shards and DeepSpeed ZeRO-3 partitions are gathered)."""
    named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
    if any(hasattr(p, "ds_id") for _, p in named):
        import deepspeed

        with deepspeed.zero.GatheredParameters([p for _, p in named]):
            return {name: p.detach().cpu().clone() for name, p in named}
    return {name: full_tensor(p.detach()).cpu().clone() for name, p in named}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-dir", required=True, help="A toy model directory (trl_marl.toy.make_toy_model).")
    parser.add_argument("--out-dir", required=True, help="Where each run writes <run>/rank<i>.pt.")
    parser.add_argument("--runs", default="magrpo:models",
                        help="Comma-separated runs, one after the other in the same processes: trainer:team_mode "
                        "(trainer magrpo or ppo, team mode models or adapters), optionally :uneven (2 turns, "
                        "episodes of process 0 end after the first); also :ga2 (3 steps of 2 accumulated micro-steps; "
                        "PPO: with a centralized critic), :critics (PPO: adapter critics, `value_adapter=True`) and "
                        ":single (`backward_per_agent=False`: the summed loss and one backward); :async "
                        "(`max_staleness=1`).")
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=1e-2)
    parser.add_argument("--save", action="store_true", help="Save each team to <out-dir>/<run>/final.")
    parser.add_argument("--evaluate", action="store_true",
                        help="Evaluate each team after training on 5 rows, 2 per chunk (the processes then have "
                        "different numbers of chunks).")
    parser.add_argument("--resume-check", action="store_true",
                        help="MAGRPO runs also save a checkpoint one step before the end, and a second trainer "
                        "resumes from it and trains to the end (its result: <run>_resumed/rank<i>.pt).")
    return parser.parse_args(argv)


def build_trainer(args: argparse.Namespace, trainer: str, team_mode: str, reward: RecordingReward, out_dir: Path,
                  save_steps: int = 0, uneven: bool = False, variant: Sequence[str] = ()) -> Any:
    dataset = Dataset.from_dict({"target": [10] * NUM_ROWS, "row_id": list(range(NUM_ROWS))})
    peft_config = None
    if team_mode == "adapters":
        from peft import LoraConfig

        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    common = dict(output_dir=str(out_dir / "trainer"), num_agents=NUM_AGENTS, team_mode=team_mode,
                  learning_rate=args.learning_rate, logging_steps=1, bf16=False, use_cpu=True, report_to="none",
                  save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500, disable_tqdm=True,
                  temperature=1.0, seed=0)
    set_seed(0)  # same LoRA initialisation on every process
    env = EndsFirstOnProcessZero(NUM_AGENTS) if uneven else TargetSumEnv(NUM_AGENTS)
    common["num_turns"] = env.num_turns
    if trainer == "ppo":
        # :ga2: 3 updates of 2 accumulated micro-batches, with one centralized critic that both slots' backwards reach
        ga2 = "ga2" in variant
        config = MultiAgentPPOConfig(per_device_train_batch_size=EPISODES_PER_STEP // (2 if ga2 else 1),
                                     gradient_accumulation_steps=2 if ga2 else 1, num_mini_batches=1,
                                     num_ppo_epochs=1, response_length=4, stop_token="eos",
                                     total_episodes=EPISODES_PER_STEP * 2 * (3 if ga2 else args.max_steps),
                                     num_sample_generations=0, critic="centralized" if ga2 else "per_agent",
                                     backward_per_agent="single" not in variant,
                                     value_adapter="critics" in variant,
                                     max_staleness=int("async" in variant), **common)
        return MultiAgentPPOTrainer(args=config, model=args.model_dir, reward_funcs=reward, env=env,
                                    train_dataset=dataset, peft_config=peft_config)
    # the adapters team also has an adaptive entropy bonus (GRPO's `use_adaptive_entropy`), whose controllers must
    # see the entropy of every process's tokens and so agree between the processes
    entropy = (dict(use_adaptive_entropy=True, entropy_coef=0.01, entropy_coef_delta=0.01, entropy_target=50.0)
               if team_mode == "adapters" else {})
    accumulation = dict(gradient_accumulation_steps=2, max_steps=3) if "ga2" in variant else {}
    config = MAGRPOConfig(num_generations=NUM_GENERATIONS,
                          per_device_train_batch_size=NUM_GENERATIONS * EPISODES_PER_STEP, max_completion_length=4,
                          gradient_checkpointing=False, backward_per_agent="single" not in variant,
                          max_staleness=int("async" in variant),
                          **{"max_steps": args.max_steps, **accumulation}, **entropy, **common)
    return MAGRPOTrainer(model=args.model_dir, reward_funcs=reward, env=env, args=config, train_dataset=dataset,
                         peft_config=peft_config)


def train_and_record(args: argparse.Namespace, name: str, trainer_name: str, team_mode: str, save_steps: int = 0,
                     resume: str | None = None, uneven: bool = False, variant: Sequence[str] = ()) -> Any:
    """Train one team and write `<out-dir>/<name>/rank<process_index>.pt`; returns the trainer."""
    out_dir = Path(args.out_dir) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    reward = RecordingReward()
    trainer = build_trainer(args, trainer_name, team_mode, reward, out_dir, save_steps, uneven, variant)
    initial = parameters(trainer.model)
    agents_per_forward: list[int] = []  # per training forward of the team, how many agents it ran
    counted = trainer.team if trainer_name == "magrpo" else trainer.wrapper  # PPO: policies and value models
    forward = counted.forward

    def counting_forward(batches: Sequence[Any], *rest: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            agents_per_forward.append(sum(batch is not None for batch in batches))
        return forward(batches, *rest, **kwargs)

    counted.forward = counting_forward
    ppo_grad_norms: list[float] = []  # PPO logs no gradient norm: the norm of the gradient each optimizer step got
    if trainer_name == "ppo":
        create = trainer.create_optimizer_and_scheduler

        def create_recording(num_training_steps: int) -> None:
            create(num_training_steps)

            def record(optimizer: Any, *_: Any) -> None:
                grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
                ppo_grad_norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

            trainer.optimizer.register_step_pre_hook(record)

        trainer.create_optimizer_and_scheduler = create_recording
    trainer.train(resume_from_checkpoint=resume)
    # every parameter the team trains (in `adapters` mode each agent's adapter; in PPO also the value models)
    final = parameters(trainer.model)
    row_ids, joint_actions = sorted(reward.row_ids), list(reward.joint_actions)  # training's, not evaluation's
    evaluation = {}
    if args.evaluate:
        trainer.args.per_device_eval_batch_size = 2
        evaluation = trainer.evaluate(Dataset.from_dict({"target": [10] * 5, "row_id": list(range(1000, 1005))}))
    if args.save:
        trainer.save_model(str(out_dir / "final"))
    accelerator = trainer.accelerator
    result = {
        "process_index": accelerator.process_index,
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "sharded": type(trainer.model).__name__.startswith("FSDP"),
        "global_step": trainer.state.global_step,
        "row_ids": row_ids,
        "eval_reward": evaluation.get("eval_reward"),
        "turns": sorted(reward.turns),
        "agents_per_forward": agents_per_forward,
        "joint_actions": joint_actions,
        "losses": [log.get("loss", log.get("loss/policy_avg")) for log in trainer.state.log_history
                   if "loss" in log or "loss/policy_avg" in log],
        "staleness": [log["async/staleness"] for log in trainer.state.log_history if "async/staleness" in log],
        "grad_norms": ppo_grad_norms or [log["grad_norm"] for log in trainer.state.log_history if "grad_norm" in log],
        "entropy_coefs": dict(trainer.entropy_control.coefs) if getattr(trainer, "entropy_control", None) else None,
        "last_entropy": dict(trainer.entropy_control.last_entropy) if getattr(trainer, "entropy_control", None)
        else None,
        "initial": {name: initial[name] for name in final},
        "final": final,
    }
    path = out_dir / f"rank{accelerator.process_index}.pt"
    torch.save(result, path)
    print(f"[rank {accelerator.process_index}/{accelerator.num_processes}] {name}: wrote {path} "
          f"({len(final)} trainable tensors, {len(reward.row_ids)} rows, pid {os.getpid()})")
    accelerator.wait_for_everyone()
    return trainer


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    for run in args.runs.split(","):
        trainer_name, team_mode, *variant = run.split(":")
        uneven = "uneven" in variant
        name = "_".join([trainer_name, team_mode, *variant])
        resume_check = args.resume_check and trainer_name == "magrpo" and not variant
        save_steps = args.max_steps - 1 if resume_check else 0
        trainer = train_and_record(args, name, trainer_name, team_mode, save_steps, uneven=uneven, variant=variant)
        if resume_check:
            checkpoint = os.path.join(trainer.args.output_dir, f"checkpoint-{save_steps}")
            train_and_record(args, f"{name}_resumed", trainer_name, team_mode, resume=checkpoint)


if __name__ == "__main__":
    main()
