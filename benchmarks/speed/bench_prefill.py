"""Generation time with and without a shared prompt prefill (`AgentTeam.share_prompt_prefill`).

Each case times `AgentTeam.generate` on one batch, alternating the two settings (A B B A ...) so that a busy
neighbour on the machine slows both alike, and reports the median wall time (`time.perf_counter`) and CPU time of
this process (`time.process_time`) per call. Both settings draw the same samples from the same seed (checked), so
they decode the same number of tokens. Cases:

- `long_1node`: toy Qwen2 of hidden 256, 4 layers; one agent, one node of G=8 samples of a 256-token prompt, 16
  new tokens (`min_new_tokens=16`, so every call decodes 16 tokens).
- `long_adapters_4nodes`: the same model as a 2-agent `adapters` team (one LoRA adapter per agent, one mixed-adapter
  batch); 4 nodes x 2 agents x G=8 = 64 rows of 256-token prompts, 16 new tokens.
- `demo_magrpo`: the demo's MAGRPO step (`trl-marl demo`): 2 agents of the pretrained h32/1-layer target model
  (`models` mode), 8 nodes x G=8 of `TargetSumEnv` prompts (6 tokens), the trainer's own generation config (4 new
  tokens). Sharing was slower here (one more forward call, almost nothing saved), so the demo turns it off.
- `demo_maporl`: the demo's debate (3 agents of h64/2-layer models, one sample per agent: G=1, 16 episodes): no
  two rows repeat, so nothing is shared; this measures the cost of looking.

Run (1 thread, as the demo; about 4 minutes on a busy 2-core machine)::

    PYTHONPATH=src python benchmarks/speed/bench_prefill.py --reps 5 --demo-reps 40 --out prefill.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _time_ab(run: Callable[[bool], Any], reps: int) -> dict[str, float]:
    """Median wall and CPU seconds of `run(share)` for share in (False, True), alternated A B B A ..."""
    samples: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    outputs = {}
    for share in (False, True):  # warm-up (allocator, kernels), and the two settings' outputs for the check
        outputs[share] = run(share)
    if outputs[False] != outputs[True]:
        raise AssertionError("the shared prefill changed the samples")
    for rep in range(reps):
        for share in ((False, True) if rep % 2 == 0 else (True, False)):
            wall, cpu = time.perf_counter(), time.process_time()
            run(share)
            samples[share].append((time.perf_counter() - wall, time.process_time() - cpu))
    result = {}
    for share, name in ((False, "plain"), (True, "shared")):
        result[f"{name}_wall_s"] = statistics.median(s[0] for s in samples[share])
        result[f"{name}_cpu_s"] = statistics.median(s[1] for s in samples[share])
    result["speedup_wall"] = result["plain_wall_s"] / result["shared_wall_s"]
    result["speedup_cpu"] = result["plain_cpu_s"] / result["shared_cpu_s"]
    return result


def _runner(team: Any, prompts: list[list[Any]], config: Any, seed: int = 0) -> Callable[[bool], Any]:
    def run(share: bool) -> Any:
        team.share_prompt_prefill = share
        torch.manual_seed(seed)
        return team.generate(prompts, config)

    return run


def _long_prompt_cases(reps: int) -> dict[str, dict[str, float]]:
    from peft import LoraConfig
    from transformers import GenerationConfig

    from trl_marl import AgentTeam
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    # the toy tokenizer has one token per character (of its small alphabet) and adds BOS: 255 characters, 256 tokens
    text = ("Q:12+34=A:46 T:10? " * 20)[:255]
    assert len(tokenizer(text)["input_ids"]) == 256 and tokenizer.unk_token_id not in tokenizer(text)["input_ids"]
    config = GenerationConfig(do_sample=True, max_new_tokens=16, min_new_tokens=16, temperature=1.0,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    results = {}
    G = 8

    def model() -> Any:
        return build_toy_model(tokenizer, hidden_size=256, num_layers=4, num_heads=4, max_position_embeddings=512)

    team = AgentTeam.build(model(), 1, mode="models", processing_class=tokenizer)
    results["long_1node"] = _time_ab(_runner(team, [[text] * G], config), reps)

    torch.manual_seed(0)
    team = AgentTeam.build(model(), 2, mode="adapters", processing_class=tokenizer,
                           peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    nodes = [f"{k}{text[1:]}" for k in range(4)]  # 4 distinct 256-token prompts
    prompts = [[p for p in nodes for _ in range(G)] for _ in range(2)]
    results["long_adapters_4nodes"] = _time_ab(_runner(team, prompts, config), reps)
    return results


def _demo_cases(reps: int) -> dict[str, dict[str, float]]:
    from datasets import Dataset
    from transformers import GenerationConfig

    from trl_marl import AgentTeam, MAGRPOConfig, MAGRPOTrainer, load_tokenizer
    from trl_marl.envs import TargetSumEnv, Transcript
    from trl_marl.envs.debate import ToyDebateEnv
    from trl_marl.rewards import TargetSumReward
    from trl_marl.scripts.demo import MAGRPO_LEARNING_RATE, TARGET, debate_team
    from trl_marl.toy import make_toy_model, toy_facts_dataset

    results = {}
    # the demo's MAGRPO run (scripts/demo.py `_magrpo_trainer`): its model, env, batch and generation config
    model_dir = make_toy_model(task="target", hidden_size=32, num_layers=1, pretrain_steps=100, seed=0,
                               targets=(TARGET,))
    args = MAGRPOConfig(output_dir="/tmp/bench_prefill", num_agents=2, num_generations=8,
                        per_device_train_batch_size=64, max_completion_length=4, learning_rate=MAGRPO_LEARNING_RATE,
                        report_to="none", save_strategy="no", temperature=1.0, seed=0, disable_tqdm=True)
    env = TargetSumEnv(num_agents=2)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(invalid_penalty=0.5), env=env, args=args,
                            train_dataset=Dataset.from_dict({"target": [TARGET] * 64}))
    rows = [{"target": TARGET}] * 8
    prompts = [[env.agent_prompt(row, a, Transcript()) for row in rows for _ in range(8)] for a in range(2)]
    results["demo_magrpo"] = _time_ab(_runner(trainer.team, prompts, trainer.joint_rollout.generation_config), reps)

    # the demo's debate: 3 agents of different models, one sample each (G=1), 16 episodes, 4 new tokens
    dirs = debate_team()
    team = AgentTeam.build(dirs, 3, processing_class=[load_tokenizer(d) for d in dirs])
    tokenizer = team.tokenizers[0]
    debate = ToyDebateEnv(3, 3)
    episodes = list(toy_facts_dataset(16, seed=0))
    prompts = [[debate.agent_prompt(row, a, Transcript()) for row in episodes] for a in range(3)]
    config = GenerationConfig(do_sample=True, max_new_tokens=4, temperature=1.0, top_k=0, top_p=1.0,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    results["demo_maporl"] = _time_ab(_runner(team, prompts, config), reps)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed calls per setting of the long-prompt cases")
    parser.add_argument("--demo-reps", type=int, default=40, help="timed calls per setting of the (fast) demo cases")
    parser.add_argument("--cases", default="long,demo", help="comma-separated: long, demo")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    cli = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    results: dict[str, Any] = {"threads": torch.get_num_threads(), "reps": cli.reps, "demo_reps": cli.demo_reps}
    cases = cli.cases.split(",")
    if "long" in cases:
        results.update(_long_prompt_cases(cli.reps))
    if "demo" in cases:
        results.update(_demo_cases(cli.demo_reps))
    print(json.dumps(results, indent=2))
    if cli.out:
        Path(cli.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
