"""Do both sides of the family benchmark sample their policies exactly? A goodness-of-fit check at trained weights.

`bench_family.py` compares learning curves of ours and comlrl 1.4.3, and `family_same_samples.py` showed that on the
same samples the two updates agree. What is left is the sampling. This script trains our MAGRPO team on
`bench_family.py`'s target-sum task for `--train-steps` updates (so that the agents' distributions are peaked and
differ, as they do when a run takes off), then draws `--samples` completions per agent twice:

- through our trainer's own rollout path (`team.generate` with the trainer's generation config: shared prefill, the
  lean decoding loop), and
- through comlrl's `MAGRPOTrainer._generate_completions` on copies of the same weights (its `model.generate` call,
  eval mode, `num_return_sequences=G`),

and compares each side's completion frequencies with the exact completion probabilities (teacher forcing), with the
chi-square test of `tests/team/test_sampling_distribution.py`. comlrl is imported from its own virtualenv's
site-packages (appended to `sys.path`, after ours), as `family_same_samples.py` does::

    PYTHONPATH=src python benchmarks/parity/family_sampler_fit.py --seed 1 --train-steps 60 --samples 25600
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parents[1] / "tests"))

from family_same_samples import comlrl_and_model_dir  # noqa: E402

PROMPT = "T=10:"


def up_to_eos(tokens: list[int], eos: int, max_new_tokens: int) -> tuple[int, ...]:
    return tuple(tokens[: tokens.index(eos) + 1] if eos in tokens else tokens[:max_new_tokens])


Completion = tuple[int, ...]


def fit(counts: Counter, model: Any, prompt_ids: list[int]) -> tuple[float, list[tuple[Completion, float, float]]]:
    """(chi-square p, the three most frequent completions with their observed and exact probabilities)."""
    from test_sampling_distribution import chi_square_p, completion_probability

    exact = {c: completion_probability(lambda ids: model(ids).logits, prompt_ids, c, 1.0) for c in counts}
    n = sum(counts.values())
    return chi_square_p(counts, exact), [(c, k / n, exact[c]) for c, k in counts.most_common(3)]


def draw(sample: Callable[[], list[list[tuple[int, ...]]]], samples: int) -> list[Counter]:
    """Per agent, how often each completion came out of `sample` (one call: a list of completions per agent)."""
    counts = [Counter(), Counter()]
    while sum(counts[0].values()) < samples:
        for agent, completions in enumerate(sample()):
            counts[agent].update(completions)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--train-steps", type=int, default=60)
    parser.add_argument("--samples", type=int, default=25600, help="completions per agent and side")
    parser.add_argument("--work-dir", default="/tmp/family-sampler-fit")
    parser.add_argument("--comlrl-site", default=None,
                        help="comlrl's site-packages (default: $COMLRL_PYTHON's, or the cached comlrl virtualenv's)")
    args = parser.parse_args()
    model_dir = comlrl_and_model_dir(parser, args)

    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    P, G, max_new = 4, 8, 4
    config = MAGRPOConfig(
        output_dir=str(Path(args.work_dir) / "ours"), num_agents=2, num_generations=G,
        per_device_train_batch_size=P * G, max_completion_length=max_new, learning_rate=3e-4,
        lr_scheduler_type="constant", beta=0.0, temperature=1.0, top_p=1.0, top_k=0, bf16=False,
        gradient_checkpointing=False, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
        seed=args.seed, max_steps=args.train_steps, scale_rewards="group",
    )
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=config,
                            processing_class=load_tokenizer(model_dir),
                            train_dataset=Dataset.from_dict({"target": [10] * (2 * P * G * args.train_steps)}))
    trainer.train()
    team, generation_config = trainer.team, trainer.joint_rollout.generation_config
    tokenizer = team.tokenizers[0]
    eos, prompt_ids = tokenizer.eos_token_id, tokenizer(PROMPT)["input_ids"]
    models = [copy.deepcopy(team.models[team.agent_model[a]]).eval() for a in range(2)]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    print(f"ours, seed {args.seed}, after {args.train_steps} updates (reward of the last 5: "
          f"{sum(rewards[-5:]) / 5:+.3f})")

    def ours() -> list[list[tuple[int, ...]]]:
        out = team.generate([[PROMPT] * (P * G)] * 2, generation_config)
        return [[up_to_eos(list(c), eos, max_new) for c in completions] for _, completions in out]

    import comlrl.trainers.reinforce as reinforce

    comlrl_config = reinforce.MAGRPOConfig(
        num_train_epochs=1, agent_learning_rate=3e-4, num_agents=2, num_generations=G, max_new_tokens=max_new,
        temperature=1.0, top_p=1.0, top_k=None, num_turns=1, joint_mode="aligned", eval_interval=0,
        rollout_buffer_size=P, train_batch_size=P, advantage_normalization=True, advantage_mode="mean",
        reference_kl_enabled=False, agent_devices="cpu",
    )
    comlrl = reinforce.MAGRPOTrainer(agents=[copy.deepcopy(m) for m in models], num_agents=2, tokenizer=tokenizer,
                                     args=comlrl_config, wandb_config=None, reward_func=lambda a, b: [0.0],
                                     train_dataset=Dataset.from_list([{"prompt": PROMPT}] * P))

    def theirs() -> list[list[tuple[int, ...]]]:
        outputs = [comlrl._generate_completions(comlrl.agents[a], [{"prompt": PROMPT}], agent_idx=a,
                                                num_return_sequences=G, max_new_tokens=max_new) for a in range(2)]
        return [[up_to_eos(t.tolist(), eos, max_new) for t in out["completion_input_ids"][0]] for out in outputs]

    print("| sampler | agent | completions | chi-square p | most frequent: observed / exact |")
    print("|---|---|---|---|---|")
    for name, sample in (("ours: team.generate", ours), ("comlrl: _generate_completions", theirs)):
        torch.manual_seed(args.seed)
        start = time.perf_counter()
        counts = draw(sample, args.samples)
        seconds = time.perf_counter() - start
        for agent in range(2):
            p, top = fit(counts[agent], models[agent], prompt_ids)
            listed = ", ".join(f"{tokenizer.decode(list(c))!r} {o:.3f} / {e:.3f}" for c, o, e in top)
            print(f"| {name} ({seconds:.0f} s) | {agent} | {sum(counts[agent].values())} | {p:.3f} | {listed} |")


if __name__ == "__main__":
    main()
