"""Do our rollouts sample what the policy says? Ours vs `generate` called the way comlrl calls it, same weights.

`family_same_samples.py` shows that, fed the same completions, our IAC and MAGRPO updates are comlrl's. What is left
between the two sides of `bench_family.py` is sampling: ours generates every row of a step in one batched call
through `AgentTeam.generate` (prompts tokenized once, a shared prefill, `inference_mode`), comlrl calls
`model.generate(..., do_sample=True, num_return_sequences=G)` once per prompt. This script trains our IAC on the
target-sum task of `bench_family.py` and, at every rollout, also draws the same number of completions per agent
directly with `model.generate` on the weights the rollout used (G per call, as comlrl does). The completions of the
two samplers are counted per distinct token sequence and compared with a two-sample chi-square test (cells with
fewer than 10 counts pooled), separately for the first `--near-init` updates (weights close to the start) and for the
updates after them (weights that have moved).

    PYTHONPATH=src python benchmarks/parity/family_sampling_check.py --seed 7 --steps 70

Both samplers draw from torch's global generator in turn, so the direct draws shift the random stream of the run
(its learning curve is not the `bench_family.py` one); the test only asks whether the two samplers' completions come
from the same distribution. A p-value far below 0.05 in either window would mean they do not.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

MIN_CELL = 10


def chi_square_two_samples(a: Counter, b: Counter) -> dict[str, Any]:
    """Two-sample chi-square test of homogeneity over the distinct completions (rare ones pooled into one cell)."""
    na, nb = sum(a.values()), sum(b.values())
    cells: list[tuple[int, int]] = []
    rare = [0, 0]
    for key in set(a) | set(b):
        if a[key] + b[key] >= MIN_CELL:
            cells.append((a[key], b[key]))
        else:
            rare[0] += a[key]
            rare[1] += b[key]
    if sum(rare) > 0:
        cells.append((rare[0], rare[1]))
    statistic = 0.0
    for oa, ob in cells:
        total = oa + ob
        ea, eb = total * na / (na + nb), total * nb / (na + nb)
        statistic += (oa - ea) ** 2 / ea + (ob - eb) ** 2 / eb
    dof = len(cells) - 1
    # P(chi2_dof > statistic) = Q(dof / 2, statistic / 2), the regularized upper incomplete gamma function
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                            torch.tensor(statistic / 2.0, dtype=torch.float64))) if dof > 0 else 1.0
    return {"n_ours": na, "n_direct": nb, "cells": len(cells), "dof": dof, "chi2": statistic, "p_value": p_value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--near-init", type=int, default=10, help="updates counted as 'near the initial weights'")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.toy import make_toy_model

    torch.set_num_threads(1)
    work_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="family-sampling-"))
    model_dir = str(work_dir / "target10-h64-l2")
    make_toy_model(model_dir, task="target", targets=(10,), hidden_size=64, num_layers=2, seed=0, pretrain_steps=300)
    P, G, steps = args.prompts, args.num_generations, args.steps
    config = MultiAgentPPOConfig(
        output_dir=str(work_dir / "out"), num_agents=2, per_device_train_batch_size=P * G,
        gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=1, total_episodes=P * G * steps,
        response_length=4, stop_token="eos", learning_rate=3e-4, lr_scheduler_type="constant", kl_coef=0.0,
        vf_coef=0.6, gamma=1.0, lam=1.0, temperature=1.0, report_to="none", save_strategy="no", logging_steps=1,
        num_sample_generations=0, disable_tqdm=True, seed=args.seed, bf16=False, advantage_mode="turn",
        critic="per_agent",
    )
    trainer = MultiAgentPPOTrainer(args=config, model=model_dir, env=TargetSumEnv(2),
                                   reward_funcs=TargetSumReward(0.5),
                                   train_dataset=Dataset.from_dict({"target": [10] * (P * G * steps)}))
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    team = trainer.team
    windows = {"near_init": ([Counter(), Counter()], [Counter(), Counter()]),
               "trained": ([Counter(), Counter()], [Counter(), Counter()])}
    calls = [0]
    rollout_generate = team.generate

    def generate_and_compare(prompts: Any, generation_config: Any, *rest: Any, **kwargs: Any) -> Any:
        out = rollout_generate(prompts, generation_config, *rest, **kwargs)
        calls[0] += 1
        ours, direct = windows["near_init" if calls[0] <= args.near_init else "trained"]
        for agent, (prompt_ids, completions) in enumerate(out):
            ours[agent].update(tuple(c) for c in completions)
            model = team.policy(agent)
            ids = torch.tensor([prompt_ids[0]])
            pad = team.tokenizers[agent].pad_token_id
            for _ in range(len(completions) // G):  # comlrl: one call per prompt, G sequences returned
                with torch.no_grad():
                    seq = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                         temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4,
                                         num_return_sequences=G, pad_token_id=pad)
                for row in seq[:, ids.size(1):].tolist():
                    direct[agent][tuple(row[: row.index(pad)] if pad in row else row)] += 1
        return out

    team.generate = generate_and_compare
    trainer.train()
    result: dict[str, Any] = {"seed": args.seed, "steps": steps, "near_init": args.near_init, "windows": {}}
    for name, (ours, direct) in windows.items():
        result["windows"][name] = [chi_square_two_samples(ours[a], direct[a]) for a in range(2)]
        for agent, test in enumerate(result["windows"][name]):
            print(f"{name:9s} agent {agent}: n = {test['n_ours']} / {test['n_direct']}, chi2 = {test['chi2']:.1f} "
                  f"on {test['dof']} dof, p = {test['p_value']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
