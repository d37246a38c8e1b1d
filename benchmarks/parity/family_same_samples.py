"""Same samples, same update? comlrl 1.4.3's REINFORCE-family trainer and ours, fed identical completions.

`bench_family.py` compares learning curves, where each side samples its own completions, so one seed's outcome is
one draw of a noisy, bimodal process (a team either finds a pair of answers that sums to the target and converges,
or it does not). This script removes the sampling: comlrl's `MAGRPOTrainer` (or `MAREINFORCETrainer`,
`MARLOOTrainer`, `MAReMaxTrainer`) trains for `--steps` updates on the two-agent target-sum task, every completion it
samples is recorded, and then our `MAGRPOTrainer` (the matching preset) trains from the same initial weights on
exactly those completions (its `team.generate` replays them). After every update it compares the two sides'
gradients per agent (cosine) and, every few updates, the cumulative weight change.

It imports comlrl from its own virtualenv's site-packages (appended to `sys.path`, after ours), so both trainers run
in one process on the same torch::

    PYTHONPATH=src python benchmarks/parity/family_same_samples.py --algorithm maremax --steps 12 --seed 0

Besides ours vs comlrl, it compares comlrl's gradient with the policy gradient of its own batch written out at its
own weights ("textbook": every completion token up to and including EOS, no padding). What it shows (2026-11-22,
see benchmarks/README.md): ours equals the textbook gradient (cosine 1.0000); comlrl's equals it only on some
updates, because its loss feeds `prompt + completion[:-1]` and then also drops the last logit
(`logits[prompt_len - 1 : -1]`), so the last token of each row's padded width is never trained: the EOS of a row's
longest completions, or the last padding token of the shorter ones (whose earlier padding it does train on).

Our side uses `loss_type="dr_grpo"` (a constant divisor: each completion's token log-probs summed, as comlrl does;
AdamW is then fed gradients proportional to comlrl's), no gradient clipping and no weight decay (comlrl's AdamW
weight decay is set to 0 as well), so that any difference left is in what the two losses are computed on.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))
sys.path.insert(0, str(BENCH_DIR))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))


def flat(tensors: list[torch.Tensor | None], like: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([(t if t is not None else torch.zeros_like(p)).detach().flatten().clone()
                      for t, p in zip(tensors, like)])


def textbook_gradient(trainer: Any, model: Any, samples: Any, params: list[torch.Tensor]) -> torch.Tensor:
    """The policy gradient of comlrl's own batch at comlrl's current weights, written out: -mean over rows of
    (1/G) sum_i A_i sum_t log p(token_t), over every completion token up to and including EOS (no padding), with
    comlrl's advantages (`_compute_advantages`, plus its per-row normalisation when enabled)."""
    loss = torch.zeros(())
    for sample in samples:
        data = sample.completions_data
        prompt = data["prompt_input_ids"][0].detach().clone()
        advantages = trainer._compute_advantages(torch.tensor(sample.returns, dtype=torch.float))
        if trainer.args.advantage_normalization and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / advantages.std(unbiased=False).clamp(min=1e-6)
        for tokens, advantage in zip(data["completion_input_ids"][0], advantages):
            pad = (tokens == model.config.pad_token_id).nonzero()
            tokens = tokens[: max(1, int(pad[0]) if len(pad) else tokens.numel())].detach().clone()
            logits = model(torch.cat([prompt, tokens[:-1]])[None], use_cache=False).logits[0, prompt.numel() - 1:]
            logp = torch.log_softmax(logits.float(), dim=-1).gather(1, tokens[:, None]).sum()
            loss = loss - advantage * logp / len(advantages)
    grads = torch.autograd.grad(loss / len(samples), params, allow_unused=True)
    return flat(list(grads), params)


def run_comlrl(args: argparse.Namespace, model_dir: str) -> dict[str, Any]:
    """comlrl's trainer for `args.steps` updates; records every completion, per-update gradients and weights."""
    import comlrl.trainers.reinforce as reinforce
    from bench_comlrl_peer import ALGORITHMS, team_reward
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    config_name, trainer_name, mode = ALGORITHMS[args.algorithm]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    agents = [AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32) for _ in range(2)]
    config = getattr(reinforce, config_name)(
        num_train_epochs=1, agent_learning_rate=args.lr, num_agents=2, num_generations=args.num_generations,
        max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0, top_k=None, num_turns=1,
        joint_mode="aligned", eval_interval=0, rollout_buffer_size=args.prompts, train_batch_size=args.prompts,
        advantage_normalization=args.algorithm == "magrpo", advantage_mode=mode, reference_kl_enabled=False,
        agent_devices="cpu",
    )
    trainer = getattr(reinforce, trainer_name)(
        agents=agents, num_agents=2, tokenizer=tokenizer, args=config, wandb_config=None,
        train_dataset=Dataset.from_list([{"prompt": "T=10:"}] * (args.prompts * args.steps)),
        reward_func=lambda c1, c2: [team_reward(a, b) for a, b in zip(c1, c2)],
    )
    trainer.verbose = False
    for optimizer in trainer.optimizers:
        for group in optimizer.param_groups:
            group["weight_decay"] = 0.0
    init = [[p.detach().clone() for p in agent.parameters()] for agent in agents]
    completions: list[list[list[list[int]]]] = [[], []]  # agent -> row -> G completions (token ids, EOS kept)
    grads: list[list[torch.Tensor]] = [[], []]
    deltas: list[list[torch.Tensor]] = [[], []]
    pads: list[list[int]] = [[], []]  # per agent and row: the padding tokens after EOS that comlrl's loss counts
    textbook: list[list[torch.Tensor]] = [[], []]
    generate, update = trainer._generate_completions, trainer._update_from_samples

    def recording_generate(agent: Any, batch_items: Any, agent_idx: int = 0, **kwargs: Any) -> Any:
        out = generate(agent, batch_items, agent_idx=agent_idx, **kwargs)
        tokens, lengths = out["completion_input_ids"][0], out["response_lens"]
        completions[agent_idx].append([t[: max(1, n)].tolist() for t, n in zip(tokens, lengths)])
        pads[agent_idx].append(sum(len(t) - max(1, n) for t, n in zip(tokens, lengths)))
        return out

    def recording_update(agent_idx: int, samples: Any) -> None:
        params = list(agents[agent_idx].parameters())
        textbook[agent_idx].append(textbook_gradient(trainer, agents[agent_idx], samples, params))
        update(agent_idx, samples)  # zero_grad, backward per completion, step: the gradients stay on .grad
        grads[agent_idx].append(flat([p.grad for p in params], params))
        deltas[agent_idx].append(flat([p - p0 for p, p0 in zip(params, init[agent_idx])], params))

    trainer._generate_completions, trainer._update_from_samples = recording_generate, recording_update
    trainer.train()
    return {"completions": completions, "grads": grads, "deltas": deltas, "pads": pads, "textbook": textbook}


def run_ours(args: argparse.Namespace, model_dir: str, comlrl: dict[str, Any]) -> dict[str, Any]:
    """Our trainer on the recorded completions: `team.generate` replays comlrl's samples, step by step."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.team import Generation

    config_cls = {"magrpo": MAGRPOConfig, "mareinforce": MAREINFORCEConfig, "marloo": MARLOOConfig,
                  "maremax": MAReMaxConfig}[args.algorithm]
    extra = {"scale_rewards": "group"} if args.algorithm == "magrpo" else {}
    P, G = args.prompts, args.num_generations
    config = config_cls(
        output_dir=str(Path(args.work_dir) / "ours"), num_agents=2, num_generations=G,
        per_device_train_batch_size=P * G, max_completion_length=args.max_new_tokens, learning_rate=args.lr,
        lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, top_k=0, bf16=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
        seed=args.seed, max_steps=args.steps, max_grad_norm=0.0, weight_decay=0.0, loss_type="dr_grpo",
        adam_epsilon=1e-8 / args.max_new_tokens, **extra,
    )
    trainer_cls = MAGRPOTrainer
    if args.emulate_comlrl:  # the diagnostic subclass of bench_family.py: comlrl's off-by-one, both halves
        from bench_family import LastTokenSkippingMAGRPO

        trainer_cls = LastTokenSkippingMAGRPO(train_padding=True)
    trainer = trainer_cls(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=config,
                            processing_class=load_tokenizer(model_dir),
                            train_dataset=Dataset.from_dict({"target": [10] * (2 * P * G * args.steps)}))
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    policies = [trainer.team.policy(a) for a in range(2)]
    init = [[p.detach().clone() for p in policy.parameters()] for policy in policies]
    grads: list[list[torch.Tensor]] = [[], []]
    deltas: list[list[torch.Tensor]] = [[], []]
    step = [0]
    generate = trainer.team.generate

    def replay(prompts: Any, generation_config: Any, *a: Any, **k: Any) -> Any:
        out = generate(prompts, generation_config, *a, **k)  # keeps the prompt ids (and the RNG use) of a real step
        rows = slice(P * step[0], P * step[0] + P)
        step[0] += 1
        return Generation(prompt_ids=[out.prompt_ids[i] for i in range(2)],
                          completion_ids=[[list(c) for row in comlrl["completions"][i][rows] for c in row]
                                          for i in range(2)])

    class Recorder(TrainerCallback):
        def on_pre_optimizer_step(self, *unused: Any, **kwargs: Any) -> None:
            for a, policy in enumerate(policies):
                params = list(policy.parameters())
                grads[a].append(flat([p.grad for p in params], params))

        def on_step_end(self, *unused: Any, **kwargs: Any) -> None:
            for a, policy in enumerate(policies):
                params = list(policy.parameters())
                deltas[a].append(flat([p - p0 for p, p0 in zip(params, init[a])], params))

    trainer.team.generate = replay
    trainer.add_callback(Recorder())
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"grads": grads, "deltas": deltas, "rewards": rewards}


def comlrl_and_model_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Puts comlrl's site-packages (`--comlrl-site`) on `sys.path` after ours, sets one torch thread, and builds (or
    reuses) the family benchmark's toy model in `--work-dir`; returns that model's folder."""
    from peers import peer_python, site_packages

    site = args.comlrl_site or site_packages(peer_python("comlrl"))
    if site is None:
        parser.error("comlrl's site-packages not found: pass --comlrl-site")
    sys.path.append(site)
    torch.set_num_threads(1)

    from trl_marl.toy import make_toy_model

    model_dir = str(Path(args.work_dir) / "target10-h64-l2")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=64, num_layers=2, seed=0, pretrain_steps=300)
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default="maremax", choices=["magrpo", "mareinforce", "marloo", "maremax"])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--work-dir", default="/tmp/family-same-samples")
    parser.add_argument("--emulate-comlrl", action="store_true",
                        help="ours with bench_family.py's emulation of comlrl's off-by-one (last token of each "
                             "group's padded width skipped, the padding after shorter completions trained), so that "
                             "the update, not only the textbook gradient, can be compared with comlrl's")
    parser.add_argument("--comlrl-site", default=None,
                        help="comlrl's site-packages (default: $COMLRL_PYTHON's, or the cached comlrl virtualenv's)")
    args = parser.parse_args()
    model_dir = comlrl_and_model_dir(parser, args)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    theirs = run_comlrl(args, model_dir)
    ours = run_ours(args, model_dir, theirs)
    print(f"{args.algorithm}, seed {args.seed}: gradient cosine per update (same weights only at update 1; later the "
          "weights have drifted by the earlier differences), and cosine of the cumulative weight change")
    print("| update | mean reward | post-EOS pads in comlrl's batch (agent 0 / 1) | comlrl vs textbook, agent 0 / 1 "
          "| ours vs comlrl, agent 0 / 1 | weight-change cos, agent 0 / 1 |")
    print("|---|---|---|---|---|---|")
    for k in range(args.steps):
        g = [cosine(theirs["grads"][a][k], ours["grads"][a][k]) for a in range(2)]
        d = [cosine(theirs["deltas"][a][k], ours["deltas"][a][k]) for a in range(2)]
        pads = [sum(theirs["pads"][a][k * args.prompts: (k + 1) * args.prompts]) for a in range(2)]
        t = [cosine(theirs["grads"][a][k], theirs["textbook"][a][k]) for a in range(2)]
        print(f"| {k + 1} | {ours['rewards'][k]:+.3f} | {pads[0]} / {pads[1]} | {t[0]:.5f} / {t[1]:.5f} "
              f"| {g[0]:.5f} / {g[1]:.5f} | {d[0]:.4f} / {d[1]:.4f} |")


if __name__ == "__main__":
    main()
