"""comlrl peer for ``bench_family.py``: comlrl's ``IACTrainer`` / ``MAACTrainer`` on the two-agent target-sum task.

Run it in the separate comlrl virtualenv (comlrl is not a dependency of trl_marl; see ``benchmarks/peers.py``)::

    $COMLRL_PYTHON benchmarks/parity/bench_comlrl_ac_peer.py --algorithm iac --model-dir /tmp/toy-qwen2 \
        --steps 30 --num-generations 8 --prompts-per-step 4 --json /tmp/comlrl-iac.json

Same task and reward as ``bench_comlrl_peer.py`` (both agents see ``T=10:``; team reward 1 if the two integers sum
to 10, -0.5 if either is not an integer, else 0). One benchmark step: ``P`` dataset rows, each giving ``G``
completions per agent (``num_generations``; comlrl allows G > 1 for one turn), i.e. ``P * G`` joint actions, then
one update per agent (``rollout_buffer_size = train_batch_size = P * G``: one actor step and, for IAC, one critic
step per agent; for MAAC one step of the shared critic per agent's buffer). Critics are separate copies of the
same model folder with comlrl's value head (IAC: one per agent, ``use_separate_critic=True``; MAAC: one shared).
comlrl's own defaults are kept otherwise (``advantage_normalization=True``, ``value_loss_coef=0.6``,
``critic_learning_rate`` = the actor's). The end of each step is observed by wrapping the trainer's
``_drain_ready_agent_buffers`` (no behavioural change); everything runs through the public ``train()``.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from importlib.metadata import version  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_comlrl_peer import PROMPT, team_reward  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description="Benchmark comlrl's IACTrainer / MAACTrainer (2 agents, CPU).")
    parser.add_argument("--algorithm", choices=["iac", "maac"], default="iac")
    parser.add_argument("--critic-type", choices=["v", "q"], default="v")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--prompts-per-step", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4, help="actor and critic learning rate")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)

    from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model_dir)

    def load():
        return AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)

    P, G = args.prompts_per_step, args.num_generations
    common = dict(
        agent_learning_rate=args.lr, critic_learning_rate=args.lr, rollout_buffer_size=P * G,
        train_batch_size=P * G, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
        top_p=args.top_p, top_k=None, num_train_epochs=1, num_agents=2, num_turns=1, num_generations=G,
        eval_interval=0, critic_type=args.critic_type, agent_devices="cpu", critic_devices="cpu",
    )
    dataset = Dataset.from_list([{"prompt": PROMPT} for _ in range(P * args.steps)])
    reward_log: list[float] = []

    def reward_func(completions1, completions2):
        rewards = [team_reward(a, b) for a, b in zip(completions1, completions2)]
        reward_log.extend(rewards)
        return rewards

    if args.algorithm == "iac":
        config = IACConfig(use_separate_critic=True, **common)
        trainer = IACTrainer(agents=[load(), load()], critics=[load(), load()], tokenizer=tokenizer,
                             reward_func=reward_func, args=config, train_dataset=dataset, wandb_config=None)
    else:
        config = MAACConfig(**common)
        trainer = MAACTrainer(agents=[load(), load()], critics=[load()], tokenizer=tokenizer,
                              reward_func=reward_func, args=config, train_dataset=dataset, wandb_config=None)
    trainer.verbose = False

    step_rewards: list[float] = []
    step_ends: list[float] = []
    mark = {"rew": 0}
    orig_drain = trainer._drain_ready_agent_buffers

    def timed_drain(ready_agents, epoch_metrics):
        out = orig_drain(ready_agents, epoch_metrics)
        if ready_agents:
            step_ends.append(time.perf_counter())
            step_rewards.append(float(np.mean(reward_log[mark["rew"]:])))
            mark["rew"] = len(reward_log)
        return out

    trainer._drain_ready_agent_buffers = timed_drain
    t0 = time.perf_counter()
    trainer.train()
    total_s = time.perf_counter() - t0
    if len(step_rewards) != args.steps or len(reward_log) != P * G * args.steps:
        raise RuntimeError(f"expected {args.steps} updates / {P * G * args.steps} joint actions, observed "
                           f"{len(step_rewards)} / {len(reward_log)}")
    result = {
        "peer": "comlrl",
        "comlrl_version": version("comlrl"),
        "algorithm": type(trainer).__name__,
        "critic_type": args.critic_type,
        "advantage_normalization": config.advantage_normalization,
        "value_loss_coef": config.value_loss_coef,
        "num_generations": G,
        "prompts_per_step": P,
        "reward_mean_per_step": step_rewards,
        "joint_samples_total": len(reward_log),
        "train_wall_s": total_s,
        "step_times_s": [b - a for a, b in zip([t0] + step_ends[:-1], step_ends)],
        "argv": sys.argv[1:],
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in ("algorithm", "train_wall_s", "joint_samples_total")}))


if __name__ == "__main__":
    main()
