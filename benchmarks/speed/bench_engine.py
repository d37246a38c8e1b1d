"""Seconds per update of the trainers on the shared rollout engine (median over updates, first one dropped).

Three small runs on toy models: the drop-in `PPOTrainer` (reward model, 16 episodes per update), a 3-agent 3-turn
MAPoRL debate (`MultiAgentPPOTrainer`, per-turn policies, influence-aware reward), and a 2-agent 2-turn MAGRPO tree
(G=8). To compare two source trees, run it once per tree, alternating, and compare medians (another busy process
on the machine changes every number; see DESIGN.md's CPU timing pitfall)::

    PYTHONPATH=src python benchmarks/speed/bench_engine.py --workdir /tmp/bench_engine --out after.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import torch


class _Timer:
    """A `TrainerCallback`-compatible recorder of the wall time of each optimizer step / PPO update."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.last = 0.0

    def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
        self.last = time.perf_counter()

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self.seconds.append(now - self.last)
        self.last = now

    def __getattr__(self, name: str) -> Any:  # every other callback event: nothing to do
        if name.startswith("on_"):
            return lambda *args, **kwargs: None
        raise AttributeError(name)


def _median(seconds: list[float]) -> float:
    return statistics.median(seconds[1:] if len(seconds) > 1 else seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/tmp/bench_engine")
    parser.add_argument("--out", default=None)
    cli = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from trl_marl import (
        MAGRPOConfig,
        MAGRPOTrainer,
        MultiAgentPPOConfig,
        MultiAgentPPOTrainer,
        PPOConfig,
        PPOTrainer,
        load_tokenizer,
    )
    from trl_marl.envs import TargetSumEnv
    from trl_marl.envs.debate import ToyDebateEnv
    from trl_marl.rewards import AnswerVerifier, InfluenceAwareReward
    from trl_marl.toy import make_toy_model

    try:  # the layout since issue 11
        from trl_marl.rewards import TargetSumReward
        from trl_marl.toy import toy_debate_dataset
    except ImportError:  # a tree from before it (to compare before / after)
        from trl_marl.data import toy_debate_dataset
        from trl_marl.rewards.arithmetic import TargetSumReward

    work = Path(cli.workdir)
    add = make_toy_model(work / "add", task="addition", hidden_size=32, num_layers=1, pretrain_steps=50)
    target = make_toy_model(work / "tgt", task="target", hidden_size=32, num_layers=1, pretrain_steps=100,
                            targets=(10,))
    debate = make_toy_model(work / "deb", task="debate", hidden_size=32, num_layers=1, pretrain_steps=50)
    common: dict[str, Any] = dict(report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0)
    results: dict[str, float] = {}

    tokenizer = load_tokenizer(add)
    rng = random.Random(0)
    prompts = [f"Q:{rng.randint(0, 49)}+{rng.randint(0, 49)}=A:" for _ in range(64)]
    dataset = Dataset.from_dict({"input_ids": [tokenizer(p)["input_ids"] for p in prompts]})
    torch.manual_seed(0)
    timer = _Timer()
    PPOTrainer(
        args=PPOConfig(output_dir=str(work / "out1"), per_device_train_batch_size=16, total_episodes=16 * 12,
                       response_length=8, stop_token="eos", num_sample_generations=0, **common),
        processing_class=tokenizer, model=AutoModelForCausalLM.from_pretrained(add),
        ref_model=AutoModelForCausalLM.from_pretrained(add),
        reward_model=AutoModelForSequenceClassification.from_pretrained(add, num_labels=1),
        value_model=AutoModelForSequenceClassification.from_pretrained(add, num_labels=1),
        train_dataset=dataset, callbacks=[timer],
    ).train()
    results["ppo_dropin"] = _median(timer.seconds)

    timer = _Timer()
    MultiAgentPPOTrainer(
        args=MultiAgentPPOConfig(output_dir=str(work / "out2"), num_agents=3, num_turns=3,
                                 per_device_train_batch_size=16, total_episodes=16 * 8, response_length=4,
                                 stop_token="eos", num_ppo_epochs=1, learning_rate=1e-4, policy_sharing="agent_turn",
                                 value_input="answer", num_sample_generations=0, **common),
        model=debate, env=ToyDebateEnv(3, 3), train_dataset=toy_debate_dataset(128, seed=0), callbacks=[timer],
        reward_funcs=[InfluenceAwareReward(AnswerVerifier(task="math"), alpha0=0.1, alpha1=0.1, beta0=0.1,
                                           beta1=0.1)],
    ).train()
    results["ppo_debate_3x3"] = _median(timer.seconds)

    timer = _Timer()
    MAGRPOTrainer(
        model=target, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, 2), callbacks=[timer],
        args=MAGRPOConfig(output_dir=str(work / "out3"), num_agents=2, num_turns=2, num_generations=8,
                          per_device_train_batch_size=64, max_completion_length=4, learning_rate=3e-3, max_steps=10,
                          **common),
        train_dataset=Dataset.from_dict({"target": [10] * 1024}),
    ).train()
    results["magrpo_2x2_G8"] = _median(timer.seconds)
    print(json.dumps(results))
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
