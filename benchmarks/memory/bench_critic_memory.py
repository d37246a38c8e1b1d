"""Memory of MAPoRL's critics: adapter critics (`value_adapter=True`) against full value models (issue 51).

Two measurements, both for a 3-agent IAC debate team (one LoRA adapter per agent on one base model, one critic per
agent):

1. **Training-state bytes, counted** (no training run; `--count`, the default): the bytes of the weights, the
   gradients and AdamW's two moments (kept in each trained parameter's dtype, as `torch.optim.AdamW` keeps them) of
   every parameter the trainer holds, for four teams built by the package's own code on PyTorch's `meta` device
   (nothing is allocated, so 1.5B shapes count on a laptop):

   * `no_critic`: the policies alone (the base model and three adapters), the floor;
   * `adapter_critics`: plus `build_adapter_critics` (three adapters `critic_<i>` of the policies' LoRA config and
     three heads); `adapter_critics_r4`: the same at rank 4 (`value_adapter_rank=4`, the GPU example configs');
   * `full_critics`: plus three one-label sequence classifiers of the base training every weight (the trainer's
     default value models);
   * `top8_critics`: the same, training their top 8 layers (`value_train_layers=8`).

   Shapes: SmolLM2-135M (its shipped config), Qwen2.5-0.5B and -1.5B (`benchmarks/gpu/bench_gpu.py`'s shapes). The
   base in bfloat16 as the GPU example configs load it; LoRA as `examples/configs/maporl_gsm8k.yaml` (r=16, alpha 32,
   every linear projection), the adapters in float32 (PEFT's default upcast on a bf16 base).

2. **Peak RSS of one PPO update** (`--rss`): a fresh process per variant builds the trainer on SmolLM2-135M (float32
   on CPU; 3 agents, 2 turns, 4 debates, 16 new tokens) and runs one update; its peak resident set (`VmHWM`) with
   adapter critics against full critics, interleaved over `--repeats`.

Run from the repository root::

    PYTHONPATH=src python benchmarks/memory/bench_critic_memory.py                  # counts (seconds)
    PYTHONPATH=src python benchmarks/memory/bench_critic_memory.py --rss --repeats 1  # + RSS (minutes)

Writes `benchmarks/results/critic_memory.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
DEFAULT_JSON = HERE.parent / "results" / "critic_memory.json"
SHAPES = ("smollm2-135m", "0.5b", "1.5b")
AGENTS = 3
TEAMS = ("no_critic", "adapter_critics", "adapter_critics_r4", "full_critics", "top8_critics")


def lora_config() -> Any:
    """The GPU example config's LoRA (`examples/configs/maporl_gsm8k.yaml`): r=16, alpha 32, every projection."""
    from peft import LoraConfig

    return LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def model_config(shape: str) -> Any:
    """The transformers config of `shape`: SmolLM2-135M's shipped one, or a Qwen2.5 shape of `bench_gpu.py`."""
    if shape == "smollm2-135m":
        from transformers import AutoConfig

        from trl_marl.utils.model_names import resolve_model_name

        return AutoConfig.from_pretrained(resolve_model_name("smollm2-135m-instruct"))
    from transformers import Qwen2Config

    sys.path.insert(0, str(HERE.parent / "gpu"))
    from bench_gpu import SIZES  # the published Qwen2.5 shapes

    return Qwen2Config(**SIZES[shape], tie_word_embeddings=True, pad_token_id=0)


def state_bytes(parameters: list[torch.nn.Parameter]) -> dict[str, int]:
    """Weights, gradients and AdamW moments of `parameters` (each counted once), in bytes."""
    unique = list({id(p): p for p in parameters}.values())
    weights = sum(p.numel() * p.element_size() for p in unique)
    trained = sum(p.numel() * p.element_size() for p in unique if p.requires_grad)
    return {"weights": weights, "gradients": trained, "adamw": 2 * trained, "total": weights + 3 * trained,
            "trained_parameters": sum(p.numel() for p in unique if p.requires_grad)}


def count_team(shape: str, critics: str) -> dict[str, int]:
    """Training-state bytes of a 3-agent `adapters` team on `shape` with `critics` (one of `TEAMS`), built on the
    meta device by the package's own code."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    from trl_marl import AgentTeam
    from trl_marl.toy import build_toy_tokenizer
    from trl_marl.trainers.ppo.adapter_critic import build_adapter_critics
    from trl_marl.trainers.ppo.value import freeze_below_top_layers

    config = model_config(shape)
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    # the tokenizer only pads: a toy one serves any shape here (nothing is tokenized)
    team = AgentTeam.build(base, AGENTS, mode="adapters", peft_config=lora_config(),
                           processing_class=build_toy_tokenizer())
    parameters = list(team.parameters())
    if critics.startswith("adapter_critics"):  # the adapters join the team's model; the heads are the critics' own
        rank = 4 if critics.endswith("_r4") else None
        heads = [p for critic in build_adapter_critics(team, rank=rank) for p in critic.parameters()]
        parameters = list(team.parameters()) + heads
    elif critics in ("full_critics", "top8_critics"):
        for _ in range(AGENTS):
            classifier_config = config.__class__.from_dict({**config.to_dict(), "num_labels": 1, "id2label": None,
                                                            "label2id": None})
            with torch.device("meta"):
                value_model = AutoModelForSequenceClassification.from_config(classifier_config, dtype=torch.bfloat16)
            if critics == "top8_critics":
                freeze_below_top_layers(value_model, 8)
            parameters += list(value_model.parameters())
    elif critics != "no_critic":
        raise ValueError(f"critics must be one of {TEAMS}, got {critics!r}")
    return state_bytes(parameters)


def count_all(shapes: tuple[str, ...] = SHAPES) -> dict[str, Any]:
    """Every team of every shape, with each team's total as a ratio to the team with no critic."""
    out: dict[str, Any] = {}
    for shape in shapes:
        teams = {name: count_team(shape, name) for name in TEAMS}
        floor = teams["no_critic"]["total"]
        out[shape] = {"teams": teams, "ratio_to_no_critic": {n: t["total"] / floor for n, t in teams.items()}}
    return out


# ------------------------------------------------------------------------------------------------ peak RSS
def one_update(variant: str) -> None:
    """Child process: one PPO update of a 3-agent debate on SmolLM2-135M with `variant`'s critics; prints its peak
    RSS in MB (`VmHWM`) as the last line."""
    import warnings

    from datasets import Dataset

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import PromptEnv

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    lora = lora_config()
    lora.target_modules = ["q_proj", "v_proj"]
    config = MultiAgentPPOConfig(
        output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"critic-memory-{variant}"), num_agents=AGENTS,
        num_turns=2, per_device_train_batch_size=4, total_episodes=4, response_length=16, num_ppo_epochs=1,
        stop_token="eos", report_to="none", save_strategy="no", num_sample_generations=0, disable_tqdm=True,
        activation_checkpointing=False, value_adapter=variant == "adapter_critics", seed=0)
    rows = Dataset.from_dict({"prompt": [f"What is {a} + {a + 3}? Discuss, then answer." for a in range(8)]})
    trainer = MultiAgentPPOTrainer(config, "smollm2-135m-instruct", train_dataset=rows, env=PromptEnv(AGENTS, 2),
                                   reward_funcs=lambda completions, **_: [float(len(c) % 5) for c in completions],
                                   peft_config=lora)
    trainer.train()
    with open("/proc/self/status") as handle:
        peak = next(line for line in handle if line.startswith("VmHWM"))
    print(int(peak.split()[1]) / 1024)


def measure_rss(repeats: int) -> dict[str, Any]:
    """Peak RSS (MB) of one update per variant, each in a fresh process, interleaved over `repeats`."""
    peaks: dict[str, list[float]] = {"adapter_critics": [], "full_critics": []}
    for _ in range(repeats):
        for variant in peaks:
            result = subprocess.run([sys.executable, __file__, "--child", variant], capture_output=True, text=True,
                                    check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            peaks[variant].append(float(result.stdout.strip().splitlines()[-1]))
    median = {k: sorted(v)[len(v) // 2] for k, v in peaks.items()}
    return {"peak_rss_mb": peaks, "median_mb": median,
            "ratio_adapter_to_full": median["adapter_critics"] / median["full_critics"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--rss", action="store_true", help="also measure the peak RSS of one update (minutes)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--child", choices=("adapter_critics", "full_critics"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(DEFAULT_JSON))
    args = parser.parse_args(argv)
    if args.child:
        one_update(args.child)
        return {}
    sys.path.insert(0, str(HERE.parents[1]))
    from benchmarks.provenance import git_state, machine_info

    start = time.perf_counter()
    record: dict[str, Any] = {
        "benchmark": "critic_memory", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **{key: value for key, value in git_state().items() if key in ("commit", "dirty")}, "machine": machine_info(),
        "command": "python benchmarks/memory/bench_critic_memory.py " + " ".join(argv or sys.argv[1:]),
        "agents": AGENTS, "lora": "r=16 alpha=32 q,k,v,o,gate,up,down; adapters float32, base bfloat16",
        "counted": count_all(tuple(args.shapes))}
    for shape, result in record["counted"].items():
        ratios = ", ".join(f"{name} {value:.3f}x" for name, value in result["ratio_to_no_critic"].items())
        print(f"{shape}: training state vs no critic: {ratios}", flush=True)
    if args.rss:
        record["rss"] = measure_rss(args.repeats)
        print(f"peak RSS of one update: {record['rss']['median_mb']} -> adapter/full "
              f"{record['rss']['ratio_adapter_to_full']:.3f}", flush=True)
    record["seconds"] = time.perf_counter() - start
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {args.out}")
    return record


if __name__ == "__main__":
    main()
