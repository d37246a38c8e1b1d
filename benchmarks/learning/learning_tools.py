"""Tool-using agents on the real offline model "smollm2-135m-instruct" (issue 38, deliverable 4).

The tool relay (`trl_marl.envs.tool_relay`): "What is a * b?" for two-digit a and b. Agent 0 has the `calculator`
tool (`trl_marl.tools.calculator`, given with `MAGRPOTrainer(tools=[[calculator], None])`), agent 1 has none and must
give the final answer at turn 2 from what agent 0 said at turn 1. Team reward per turn
(`trl_marl.rewards.tool_relay.ToolRelayReward`): turn 1, agent 0's answer ends with the product; turn 2, agent 1's
final answer is the product. MAGRPO, both agents trained on the team reward (LoRA adapters on one base model).

Measured before and after training on held-out questions (`trl_marl.data.tool_relay`: the unordered pairs {a, b} are
split once; no held-out pair is ever trained on), `eval_episodes` per question sampled at the training temperature,
every value at the END of training (never the best step), every seed reported:

- `team_success`: the share of episodes whose final answer (agent 1, turn 2) is the product;
- `calculator_correct`: agent 0's turn-1 answer gives the product;
- `tool_call_rate`: agent 0 called a tool at turn 1; `correct_tool_call_rate`: its first call was the calculator on
  an expression whose value is the product; `failed_call_rate`: calls that gave an error, per call;
- `relay_rate`: agent 1 is right at turn 2 when agent 0 was right at turn 1.

Results go to a JSON file under benchmarks/results with the command, the machine and the git commit read when the run
starts (`benchmarks/provenance.py`; a dirty tree is refused unless `--allow-dirty`). `--smoke` runs 1 step with a
tiny evaluation set to check the wiring (not a measurement).

    python benchmarks/learning/learning_tools.py --seeds 0 1 2 --steps 20
    python benchmarks/learning/learning_tools.py --seeds 0 --smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for `benchmarks.provenance`
from benchmarks.provenance import git_state, machine_info, require_clean  # noqa: E402

MODEL = "smollm2-135m-instruct"
HERE = os.path.dirname(os.path.abspath(__file__))
# sized for one CPU thread: agent 0's prompt (the tool's schema and two worked exchanges) is ~415 tokens, so the
# prefills and the training forwards over it dominate. The completion budget holds a call (34 tokens), its result
# (14) and the stated product (13): 61 tokens; at 48 every answer after a call was cut before its number
SIZES: dict[str, Any] = {"batch": 8, "generations": 4, "completion": 72, "lr": 1e-3, "max_branches": 2,
                         "tool_rounds": 2, "eval_rows": 32, "eval_episodes": 1, "temperature": 0.7}
SMOKE: dict[str, Any] = {"batch": 4, "generations": 2, "eval_rows": 2, "eval_episodes": 1}
EVAL_SEED = 10_000
"""The held-out questions are the same for every seed (drawn with this seed from the held-out pairs)."""


def build_trainer(seed: int, steps: int, sizes: dict[str, Any], output_dir: str, model: str) -> Any:
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.data.tool_relay import tool_relay_rows, tool_relay_split
    from trl_marl.envs.tool_relay import ToolRelayEnv
    from trl_marl.rewards.tool_relay import ToolRelayReward
    from trl_marl.scripts.demo_real import real_lora_config
    from trl_marl.tools import calculator

    train, _ = tool_relay_split()
    rows = tool_relay_rows(train, max(64, steps * sizes["batch"] // sizes["generations"]), seed)
    config = MAGRPOConfig(
        output_dir=output_dir, num_agents=2, num_turns=2, num_generations=sizes["generations"],
        per_device_train_batch_size=sizes["batch"], max_completion_length=sizes["completion"],
        max_branches=sizes["max_branches"], max_tool_calling_iterations=sizes["tool_rounds"],
        learning_rate=sizes["lr"], lr_scheduler_type="constant", max_steps=steps, logging_steps=1, report_to="none",
        save_strategy="no", temperature=sizes["temperature"], seed=seed, disable_tqdm=True, beta=0.0,
        activation_checkpointing=False,
    )
    return MAGRPOTrainer(model=model, reward_funcs=ToolRelayReward(), env=ToolRelayEnv(), args=config,
                         train_dataset=Dataset.from_list(rows), peft_config=real_lora_config(),
                         tools=[[calculator], None])


def first_call_is_right(messages: list[dict[str, Any]], product: int) -> bool:
    """Whether the first tool call of an agent's turn is the calculator on an expression worth `product`."""
    from trl_marl.tools import calculator

    calls = messages[0].get("tool_calls") if messages else None
    if not calls:
        return False
    function = calls[0].get("function", {})
    expression = function.get("arguments", {}).get("expression") if isinstance(function.get("arguments"),
                                                                              dict) else None
    if function.get("name") != "calculator" or not isinstance(expression, str):
        return False
    try:
        return calculator(expression) == str(product)
    except ValueError:
        return False


def evaluate(trainer: Any, rows: Sequence[dict[str, Any]], sizes: dict[str, Any], seed: int) -> dict[str, Any]:
    """The held-out metrics of the module docstring, from `eval_episodes` sampled episodes per question."""
    import torch
    from transformers import GenerationConfig

    from trl_marl.reward_contract import TeamReward
    from trl_marl.rollout import JointRollout

    team = trainer.team
    tok = team.tokenizers[0]
    episodes = [row for row in rows for _ in range(sizes["eval_episodes"])]
    engine = JointRollout(trainer.env, team, TeamReward([trainer.reward_funcs[0]]),
                          GenerationConfig(max_new_tokens=sizes["completion"], do_sample=True,
                                           temperature=sizes["temperature"], top_k=0, pad_token_id=tok.pad_token_id,
                                           eos_token_id=tok.eos_token_id),
                          num_generations=1, seed=seed, tool_loop=trainer.tool_loop)
    torch.manual_seed(seed)
    was_training = team.training
    team.eval()
    with torch.no_grad():
        rollout = engine.run(episodes)
    team.train(was_training)
    first = rollout.turns[0]
    last = rollout.turns[-1]
    n = len(episodes)
    calculator_right = first.rewards.reshape(-1)
    final = torch.zeros(n)
    for k, node in enumerate(last.nodes):
        final[node.row_index] = last.rewards[k, 0]
    messages = first.tool_messages[0]
    products = [int(row["answer"]) for row in episodes]
    stats = first.tool_stats[0]
    relayed = [float(final[i]) for i in range(n) if calculator_right[i] == 1.0]
    return {
        "team_success": float(final.mean()),
        "calculator_correct": float(calculator_right.mean()),
        "tool_call_rate": statistics.mean(1.0 if m and m[0].get("tool_calls") else 0.0 for m in messages),
        "correct_tool_call_rate": statistics.mean(float(first_call_is_right(m, p))
                                                  for m, p in zip(messages, products)),
        "failed_call_rate": stats.failed_calls / stats.calls if stats.calls else 0.0,
        "relay_rate": statistics.mean(relayed) if relayed else None,
        "episodes": n,
        "examples": [{"question": episodes[i]["question"], "agent_0": first.completions[0][i],
                      "agent_1_final": last.completions[1][k]}
                     for k, i in enumerate(node.row_index for node in last.nodes[:3])],
    }


def run_seed(seed: int, steps: int, sizes: dict[str, Any], work: str, model: str) -> dict[str, Any]:
    from trl_marl.data.tool_relay import tool_relay_rows, tool_relay_split

    _, heldout = tool_relay_split()
    rows = tool_relay_rows(heldout, sizes["eval_rows"], EVAL_SEED)
    trainer = build_trainer(seed, steps, sizes, os.path.join(work, f"seed{seed}"), model)
    before = evaluate(trainer, rows, sizes, EVAL_SEED + seed)
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    after = evaluate(trainer, rows, sizes, EVAL_SEED + seed)
    curve = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    calls = [h.get("agent_0/tools/call_frequency") for h in trainer.state.log_history
             if "agent_0/tools/call_frequency" in h]
    return {"seed": seed, "before": before, "after": after, "train_seconds": seconds,
            "s_per_step": seconds / max(1, trainer.state.global_step), "reward_curve": curve,
            "call_frequency_curve": calls}


KEYS = ("team_success", "calculator_correct", "tool_call_rate", "correct_tool_call_rate", "relay_rate")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase in ("before", "after"):
        for key in KEYS:
            values = [r[phase][key] for r in runs if r[phase][key] is not None]
            if values:
                out[f"{phase}/{key}"] = {"mean": statistics.mean(values),
                                         "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                                         "min": min(values), "max": max(values)}
    return out


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--smoke", action="store_true", help="1 step, tiny evaluation: checks the wiring only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 on a shared machine)")
    parser.add_argument("--eval-rows", type=int, default=None, help="held-out questions")
    parser.add_argument("--output", default=None, help="JSON path (default benchmarks/results/learning_tools*.json)")
    parser.add_argument("--allow-dirty", action="store_true", help="run on a tree with uncommitted changes")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    git = git_state()
    require_clean(git, args.allow_dirty)
    import torch

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.set_num_threads(args.threads)
    from trl_marl.utils.malloc import keep_freed_memory

    kept = keep_freed_memory()
    sizes = {**SIZES, **(SMOKE if args.smoke else {})}
    if args.eval_rows is not None:
        sizes["eval_rows"] = args.eval_rows
    steps = 1 if args.smoke else args.steps
    settings = {"model": args.model, "steps": steps, "sizes": sizes, "smoke": args.smoke, "threads": args.threads,
                "task": "tool_relay", "lora": "r=8 alpha=16 q_proj,v_proj layers 22-29",
                "malloc_keep_freed_memory": kept}
    output = args.output or os.path.join(os.path.dirname(HERE), "results",
                                         f"learning_tools{'_smoke' if args.smoke else ''}.json")
    start = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="learning-tools-") as work:
        for seed in args.seeds:
            run = run_seed(seed, steps, sizes, work, args.model)
            runs.append(run)
            print(json.dumps({"seed": seed, **{f"{k}_{p}": None if run[p][k] is None else round(run[p][k], 3)
                                               for p in ("before", "after") for k in KEYS},
                              "s_per_step": round(run["s_per_step"], 1)}), flush=True)
            record = {"benchmark": "learning_tools/tool_relay",
                      "command": "python benchmarks/learning/learning_tools.py " + " ".join(argv),
                      "commit": git["commit"], "dirty": git["dirty"], "dirty_paths": git["dirty_paths"],
                      "machine": machine_info(), "model": args.model, "settings": settings,
                      "seeds": [r["seed"] for r in runs], "runs": runs, "summary": summarize(runs),
                      "seconds": time.perf_counter() - start,
                      "note": "values at the end of training; held-out questions never trained on"}
            with open(output, "w") as f:
                json.dump(record, f, indent=2)
    print(f"wrote {output}")
    return record


if __name__ == "__main__":
    main()
