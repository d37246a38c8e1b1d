"""Learning-curve plots of the real-model benchmark records (`learning_real.py`), one PNG per task for docs/.

Each figure has two panels: the training reward per step of every seed (thin lines) and their mean over seeds
(thick), one colour per arm; and the held-out metric of each seed before and after training (dots, joined per
seed), the value at the end of training, never the best step. Only what the records hold is drawn: an arm with no
record is absent, and the legend gives the number of seeds of each arm.

    python benchmarks/learning/plot_real.py coding --records benchmarks/results/learning_real_magrpo_coding_*.json \\
        --output docs/real_coding_learning.png
    python benchmarks/learning/plot_real.py writing \\
        --records benchmarks/results/learning_real_magrpo_writing_*.json --output docs/real_writing_learning.png
    python benchmarks/learning/plot_real.py rule_division \\
        --records "benchmarks/results/learning_real_magrpo_coding_rule_division_decide_2or1_named_*.json" \\
        --output docs/real_rule_division_learning.png
    python benchmarks/learning/plot_real.py writing_halves --steps 40 \\
        --records "benchmarks/results/learning_real_magrpo_writing_halves_summary_options_*.json" \\
        --output docs/real_writing_halves_learning_40steps.png
    python benchmarks/learning/plot_real.py writing_halves --steps 40 80 \\
        --records "benchmarks/results/learning_real_magrpo_writing_halves_summary_options_40steps_team_*.json" \\
        "benchmarks/results/learning_real_magrpo_writing_halves_summary_options_80steps_alone_*.json" \\
        --output docs/real_writing_halves_learning_alone80.png
    python benchmarks/learning/plot_real.py debate \\
        --records benchmarks/results/learning_real_maporl_hidden_sum_*.json --output docs/real_debate_learning.png

Coding plots the held-out success (every hidden test passes); writing plots the held-out mean team reward (of 4.0),
because its all-terms success hardly moves in 20 steps while the reward's terms do; the rule division (issue 55's
ninth coding design) plots the held-out pass rate, its training reward, since its success stays near zero; the
writing halves (issue 55's eighth writing design) plot the held-out team reward, its training reward, where two
writers who write the same part earn 0.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

ARM_COLORS = {"team": "tab:blue", "alone": "tab:orange", "central": "tab:green", "influence": "tab:blue",
              "verifier": "tab:red"}
TITLES = {"coding": "Cooperative coding (MAGRPO), SmolLM2-135M-Instruct",
          "writing": "Cooperative writing (MAGRPO), SmolLM2-135M-Instruct",
          "rule_division": "Coding rule division: who writes which function (MAGRPO), SmolLM2-135M-Instruct",
          "writing_halves": "Writing halves: who writes which part (MAGRPO), SmolLM2-135M-Instruct",
          "debate": "Hidden-information debate (MAPoRL), SmolLM2-135M-Instruct"}


def load_runs(paths: Sequence[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every `(record, run)` of the record files `paths` (globs allowed), in file then seed order."""
    files = sorted({p for pattern in paths for p in glob.glob(pattern)})
    if not files:
        raise SystemExit(f"no record matches {list(paths)}")
    out = []
    for path in files:
        with open(path) as f:
            record = json.load(f)
        out.extend((record, run) for run in record["runs"])
    return out


def heldout_success(split: dict[str, Any]) -> float:
    """A held-out evaluation's success rate (the coding task's plotted value)."""
    return split["success"]


def heldout_reward(split: dict[str, Any]) -> float:
    """A held-out evaluation's mean training reward, the team reward (the rule division's pass rate, the writing
    halves' reward with a collision at 0)."""
    return split["reward"]


def heldout_team_reward(split: dict[str, Any]) -> float:
    """A held-out evaluation's mean team reward (the writing task's plotted value)."""
    return split["metrics"]["team_reward"]


MAGRPO_METRICS: dict[str, tuple[Callable[[dict[str, Any]], float], str, float]] = {
    "coding": (heldout_success, "success (joint action, held-out)", 1.0),
    "writing": (heldout_team_reward, "team reward of 4.0 (held-out mean)", 4.0),
    "rule_division": (heldout_reward, "pass rate of the joint program (held-out mean)", 0.5),
    "writing_halves": (heldout_reward, "team reward, a collision earns 0 (held-out mean)", 1.0),
}
"""Per MAGRPO task: the held-out value drawn, its axis label and the top of its axis."""

RECORD_TASKS = {"coding": "coding", "writing": "writing", "rule_division": "coding_rule_division_decide_2or1_named",
                "writing_halves": "writing_halves_summary_options"}
"""Per MAGRPO plot, the `--task` of `learning_real.py` its records ran (a glob such as `..._coding_*.json` also
matches the other coding tasks' records, which are left out)."""


def of_task(runs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
            task: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The runs whose record ran `task` (a record without a task name ran the default task then: the split game)."""
    return [(record, run) for record, run in runs if record["settings"].get("task", "split") == task]


def of_steps(runs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
             steps: int | Sequence[int] | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The runs trained for `steps` optimizer steps (one count or several: e.g. a team trained 40 steps beside agents
    trained alone for 80, each arm one length, which `main` checks); with None, all of them, which must share one
    step count (a plot of seeds trained for different lengths would compare unlike runs: the error names `--steps`)."""
    if steps is not None:
        wanted = {steps} if isinstance(steps, int) else set(steps)
        return [(record, run) for record, run in runs if record["settings"].get("steps") in wanted]
    counts = sorted({record["settings"].get("steps") for record, _ in runs}, key=str)
    if len(counts) > 1:
        raise SystemExit(f"the records ran {counts} optimizer steps: plot one length at a time with --steps N")
    return list(runs)


def magrpo_series(runs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
                  value: Callable[[dict[str, Any]], float] = heldout_success) -> dict[str, Any]:
    """Per arm: the reward curve and the held-out `value` before and after of each seed (arms `team`, `central`,
    `alone`; `alone`'s curve is the mean of its two agents' trainings)."""
    arms: dict[str, dict[str, list[Any]]] = {}
    for _, run in runs:
        for arm, before_key in (("team", "untrained"), ("central", "central_untrained"), ("alone", "untrained")):
            if arm not in run:
                continue
            data = run[arm]
            if "reward_curve" in data:
                curve = data["reward_curve"]
            else:
                curves = [a["reward_curve"] for a in data["agents"]]
                curve = [statistics.mean(v) for v in zip(*curves)]
            slot = arms.setdefault(arm, {"curves": [], "before": [], "after": [], "seeds": []})
            slot["curves"].append(curve)
            slot["before"].append(value(run[before_key]["heldout"]) if before_key in run else None)
            slot["after"].append(value(data["heldout"]))
            slot["seeds"].append(run["seed"])
    return arms


def debate_series(runs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """Per reward kind: the score curve and the held-out majority accuracy at the last turn before and after."""
    arms: dict[str, dict[str, list[Any]]] = {}
    for record, run in runs:
        kind = record["settings"].get("reward", "influence")
        slot = arms.setdefault(kind, {"curves": [], "before": [], "after": [], "seeds": []})
        slot["curves"].append(run["score_curve"])
        slot["before"].append(run["before"]["majority_accuracy"][-1])
        slot["after"].append(run["after"]["majority_accuracy"][-1])
        slot["seeds"].append(run["seed"])
    return arms


def figure(task: str, arms: dict[str, Any], metric: str, top: float = 1.0) -> Any:
    """The two-panel figure of `arms` (see the module docstring)."""
    from trl_marl.scripts.plots import _pyplot

    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    fig.suptitle(TITLES[task])
    for index, (arm, slot) in enumerate(arms.items()):
        color = ARM_COLORS.get(arm, f"C{index}")
        for curve in slot["curves"]:
            left.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.25, linewidth=0.8)
        length, seeds = min(len(c) for c in slot["curves"]), len(slot["curves"])
        mean = [statistics.mean(c[i] for c in slot["curves"]) for i in range(length)]
        label = f"{arm} ({seeds} seed{'s' if seeds != 1 else ''}, {length} steps)"
        left.plot(range(1, length + 1), mean, color=color, linewidth=2.2, label=label)
        for k, (before, after) in enumerate(zip(slot["before"], slot["after"])):
            x0, x1 = index * 3, index * 3 + 1
            if before is not None:
                right.plot([x0, x1], [before, after], "-", color=color, alpha=0.5)
                right.plot([x0], [before], "o", color="tab:gray")
            right.plot([x1], [after], "o", color=color, label=arm if k == 0 else None)
    left.set_xlabel("training step" if task != "debate" else "PPO update")
    left.set_ylabel("training reward (mean of the step's samples)")
    left.set_title("Training reward: seeds (thin) and their mean")
    left.legend()
    ticks = [(i * 3, "before") for i in range(len(arms))] + [(i * 3 + 1, name) for i, name in enumerate(arms)]
    right.set_xticks([t for t, _ in ticks], [label for _, label in ticks], fontsize=8)
    right.set_ylim(0, top)
    right.set_ylabel(metric)
    right.set_title("Held-out, untrained (gray) and at the end of training")
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", choices=sorted(TITLES))
    parser.add_argument("--records", nargs="+", required=True, help="record files (globs allowed)")
    parser.add_argument("--output", required=True, help="PNG path")
    parser.add_argument("--steps", type=int, nargs="+", default=None,
                        help="keep the records trained for this many steps (needed when the records mix lengths); "
                             "several counts plot arms of different lengths, each arm one length")
    args = parser.parse_args(argv)
    runs = load_runs(args.records)
    if args.task == "debate":
        arms, metric, top = debate_series(runs), "majority accuracy at the last turn", 1.0
    else:
        value, metric, top = MAGRPO_METRICS[args.task]
        arms = magrpo_series(of_steps(of_task(runs, RECORD_TASKS[args.task]), args.steps), value)
        if not arms:
            raise SystemExit(f"no record of {args.records} ran --task {RECORD_TASKS[args.task]}")
        for arm, slot in arms.items():
            lengths = sorted({len(curve) for curve in slot["curves"]})
            if len(lengths) > 1:
                raise SystemExit(f"the {arm} arm's records trained {lengths} steps: keep one length per arm with "
                                 "--steps")
    fig = figure(args.task, arms, metric, top)
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}: " + ", ".join(f"{arm} {len(s['curves'])} seeds" for arm, s in arms.items()))
    return args.output


if __name__ == "__main__":
    main()
