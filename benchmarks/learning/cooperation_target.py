"""Issue 55's target, computed from `learning_real.py magrpo` records: does the team beat its agents trained alone?

The records of the `team` and `alone` arms of one task (any number of files, one or more seeds each; a seed found
twice in an arm must agree, or the script stops) give, per seed, the held-out value at the end of training of the
untrained team, the MAGRPO team and the same agents trained alone, then paired (`--value`: `reward`, the training
reward, e.g. the pass rate, or `success`). Two conditions, fixed by issue 55 before any run they are applied to:

- **the team beats alone-then-paired by more than the seed spread** on at least `--min-seeds` seeds (4 of 5):
  `gap = team - alone > spread`, where the spread is the larger of the two arms' sample standard deviations over the
  seeds that ran both;
- **blanking a partner's answer costs the team at least half its gain** (necessity): on every seed with a teamwork
  evaluation, `team - blanked_i >= (team - untrained) / 2` for each agent i whose partner's answer is blanked.

The teamwork evaluation scores with the task's success function; its `team` condition samples as the end-of-training
evaluation does, so its score must equal the `--value` measured there (checked: a different scale stops the script).

The alone arm is also reported as the issue asks it to be shown: each agent's training reward over the first
`--window` steps, the `--window` steps before the last ones and the last `--window` steps; and whether it has
**plateaued**, a test fixed before the 80-step alone runs it judges: the mean of the last `--plateau-window` steps
exceeds the mean of the `--plateau-window` steps before them by no more than two standard errors of that difference
(each step's reward taken as one independent draw). An agent that fails it was still rising when training stopped.

The alone arm may train longer than the team (issue 55 asks for agents trained alone until their own reward
plateaus), never shorter: a team trained longer than its rivals would win by the extra steps.

Usage::

    python benchmarks/learning/cooperation_target.py \\
        "benchmarks/results/learning_real_magrpo_coding_rule_division_decide_2or1_named_{team,alone}_seed*.json"
    # the 40-step team against agents trained alone for 80 steps (to their plateau), on the 3 seeds that ran both
    python benchmarks/learning/cooperation_target.py --min-seeds 3 \\
        "benchmarks/results/learning_real_magrpo_writing_halves_summary_options_40steps_team_seed*.json" \\
        "benchmarks/results/learning_real_magrpo_writing_halves_summary_options_80steps_alone_seed*.json"

Records of different tasks are refused, and so are records of one arm with different step counts.
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ARMS = ("team", "alone")


@dataclass
class SeedResult:
    """One seed's held-out values at the end of training (None: the arm did not run on this seed)."""

    seed: int
    untrained: float | None = None
    team: float | None = None
    alone: float | None = None
    blanked: dict[str, list[float]] = field(default_factory=dict)  # arm -> score with each partner blanked
    curves: dict[str, list[list[float]]] = field(default_factory=dict)  # arm -> training reward per step (per agent)

    def plateaued(self, window: int = 10) -> list[bool | None]:
        """Per alone agent: has its training reward stopped rising (module docstring)? Needs 2 x `window` steps."""
        return [plateaued(curve, window) for curve in self.curves.get("alone", [])]

    @property
    def gap(self) -> float | None:
        return None if self.team is None or self.alone is None else self.team - self.alone

    def necessity(self, arm: str = "team") -> bool | None:
        """Whether blanking each partner costs `arm` at least half its gain over the untrained team (None: no
        teamwork evaluation, or no gain to lose)."""
        value, blanked = getattr(self, arm), self.blanked.get(arm)
        if value is None or self.untrained is None or not blanked:
            return None
        gain = value - self.untrained
        if gain <= 0:
            return None
        return all(value - score >= gain / 2 for score in blanked)


def plateaued(curve: Sequence[float], window: int = 10) -> bool | None:
    """Whether `curve`'s last `window` steps average at most two standard errors above the `window` steps before
    them: `mean(last) - mean(before) <= 2 * sqrt(var(last) / window + var(before) / window)` (sample variances).
    None: the curve is shorter than two windows, too short to tell."""
    if window < 2:
        raise SystemExit(f"--plateau-window is {window}: a standard error needs windows of 2 steps or more.")
    if len(curve) < 2 * window:
        return None
    before, last = curve[-2 * window:-window], curve[-window:]
    error = (statistics.variance(last) / window + statistics.variance(before) / window) ** 0.5
    return statistics.mean(last) - statistics.mean(before) <= 2 * error


def _expand(patterns: Sequence[str]) -> list[str]:
    """Glob each pattern, with `{a,b}` alternatives expanded first (the shell may not have done it)."""
    paths: list[str] = []
    for pattern in patterns:
        start, end = pattern.find("{"), pattern.find("}")
        options = pattern[start + 1:end].split(",") if 0 <= start < end else None
        variants = [pattern[:start] + o + pattern[end + 1:] for o in options] if options else [pattern]
        for variant in variants:
            paths.extend(sorted(glob.glob(variant)) or ([variant] if Path(variant).exists() else []))
    return list(dict.fromkeys(paths))


def _set(current: float | None, new: float, what: str) -> float:
    if current is not None and abs(current - new) > 1e-9:
        raise SystemExit(f"{what} is {current} in one record and {new} in another: the records disagree.")
    return new


def load(paths: Sequence[str], value: str = "reward") -> tuple[dict[str, Any], list[SeedResult]]:
    """The shared settings (task, each arm's step count) and the per-seed results of the team/alone records in
    `paths`."""
    if not paths:
        raise SystemExit("No records matched: give the JSON files of `learning_real.py magrpo --arms team|alone`.")
    task: str | None = None
    steps: dict[str, int] = {}
    seeds: dict[int, SeedResult] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        if not any(arm in run for run in data["runs"] for arm in ARMS):
            # A single-policy record (`--arms central`) matched by a wide glob: not part of the target.
            print(f"skipped {path}: no team or alone run in it (arms {data['settings'].get('arms')})", file=sys.stderr)
            continue
        mine = data["settings"].get("task")
        if task is None:
            task = mine
        elif mine != task:
            raise SystemExit(f"{path} ran task {mine!r}, the first record {task!r}: compare records of one task "
                             "(pass a narrower glob).")
        count = data["settings"].get("steps")
        for run in data["runs"]:
            for arm in ARMS:
                if arm in run and steps.setdefault(arm, count) != count:
                    raise SystemExit(f"{path}'s {arm} arm trained {count} steps, another "
                                     f"record's {steps[arm]}: compare records of one step count per arm (pass a "
                                     "narrower glob).")
            result = seeds.setdefault(run["seed"], SeedResult(run["seed"]))
            result.untrained = _set(result.untrained, run["untrained"]["heldout"][value],
                                    f"seed {run['seed']}'s untrained {value}")
            for arm in ARMS:
                if arm not in run:
                    continue
                arm_run = run[arm]
                setattr(result, arm, _set(getattr(result, arm), arm_run["heldout"][value],
                                          f"seed {run['seed']}'s {arm} {value}"))
                agents = arm_run.get("agents")
                result.curves[arm] = ([a["reward_curve"] for a in agents] if agents
                                      else [arm_run["reward_curve"]])
                conditions = (arm_run.get("teamwork") or {}).get("conditions")
                if conditions:
                    team_score = conditions["team"]["score"]
                    if abs(team_score - arm_run["heldout"][value]) > 1e-6:
                        raise SystemExit(f"{path}, seed {run['seed']}: the teamwork evaluation's team scores "
                                         f"{team_score} and the held-out {value} is {arm_run['heldout'][value]}: "
                                         "they are on different scales; pass the --value the task's success "
                                         "function measures.")
                    result.blanked[arm] = [c["score"] for name, c in sorted(conditions.items())
                                           if name.startswith("blank_partner_")]
    if "team" in steps and "alone" in steps and steps["alone"] < steps["team"]:
        raise SystemExit(f"the alone arm trained {steps['alone']} steps and the team {steps['team']}: agents trained "
                         "alone may train longer than the team (to their plateau), never shorter.")
    return {"task": task, "steps": steps}, [seeds[s] for s in sorted(seeds)]


def verdict(results: Sequence[SeedResult], min_seeds: int = 4, plateau_window: int = 10) -> dict[str, Any]:
    """Issue 55's two conditions over `results`, and whether each alone agent's training reward had plateaued
    (module docstring)."""
    paired = [(r.seed, r.team, r.alone) for r in results if r.team is not None and r.alone is not None]
    out: dict[str, Any] = {"seeds_both_arms": [seed for seed, _, _ in paired]}
    if len(paired) < 2:
        out.update(spread=None, seeds_above_spread=None, gain_holds=False,
                   reason="fewer than two seeds ran both arms: no spread")
    else:
        spread = max(statistics.stdev([team for _, team, _ in paired]),
                     statistics.stdev([alone for _, _, alone in paired]))
        above = [seed for seed, team, alone in paired if team - alone > spread]
        out.update(spread=spread, seeds_above_spread=above, gain_holds=len(above) >= min_seeds,
                   gap_mean=statistics.mean(team - alone for _, team, alone in paired),
                   team_ahead=[seed for seed, team, alone in paired if team > alone])
    checked = [r for r in results if r.necessity() is not None]
    out["necessity_seeds"] = {r.seed: r.necessity() for r in checked}
    out["necessity_holds"] = bool(checked) and all(r.necessity() for r in checked)
    tested = {r.seed: r.plateaued(plateau_window) for r in results if r.curves.get("alone")}
    out["alone_plateaued"] = tested
    flags = [flag for flags in tested.values() for flag in flags]
    out["alone_plateau_holds"] = None if not flags or None in flags else all(flags)
    out["min_seeds"] = min_seeds
    return out


def _mean(values: Sequence[float]) -> float:
    return statistics.mean(values) if values else float("nan")


def table(results: Sequence[SeedResult], window: int = 5, plateau_window: int = 10) -> str:
    """Per seed: the three arms, the gap, the blanked scores, each alone agent's training reward over the first
    `window` steps, the `window` steps before the last ones and the last `window` steps, and whether it plateaued."""
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    lines = ["seed | untrained | team | alone | gap | team blanked | necessity | alone agents' training reward, "
             f"first, second-to-last and last {window} steps | plateaued ({plateau_window}-step windows)"]
    for r in results:
        curves = r.curves.get("alone", [])
        windows = ", ".join(f"{_mean(c[:window]):.3f} -> {_mean(c[-2 * window:-window]):.3f} -> "
                             f"{_mean(c[-window:]):.3f}" for c in curves) or "-"
        plateaued = "/".join(str(flag) for flag in r.plateaued(plateau_window)) or "-"
        blanked = "/".join(fmt(x) for x in r.blanked.get("team", [])) or "-"
        lines.append(f"{r.seed} | {fmt(r.untrained)} | {fmt(r.team)} | {fmt(r.alone)} | {fmt(r.gap)} | {blanked} | "
                     f"{r.necessity()} | {windows} | {plateaued}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="team and alone records (globs; {a,b} alternatives allowed)")
    parser.add_argument("--value", choices=("reward", "success"), default="reward",
                        help="the held-out value compared (reward: the training reward, e.g. the pass rate)")
    parser.add_argument("--min-seeds", type=int, default=4, help="seeds whose gap must exceed the spread")
    parser.add_argument("--window", type=int, default=5, help="steps averaged at each end of a training curve")
    parser.add_argument("--plateau-window", type=int, default=10,
                        help="steps in each of the two last windows the plateau test compares")
    parser.add_argument("--json", default=None, help="write the table's numbers and the verdict here")
    args = parser.parse_args(argv)
    settings, results = load(_expand(args.records), args.value)
    report: dict[str, Any] = {"settings": {**settings, "value": args.value},
                              "seeds": [asdict(r) | {"gap": r.gap} for r in results],
                              "verdict": verdict(results, args.min_seeds, args.plateau_window)}
    steps = settings["steps"]
    trained = (f"{next(iter(steps.values()))} steps" if len(set(steps.values())) == 1
               else ", ".join(f"{arm} {count} steps" for arm, count in steps.items()))
    print(f"{settings['task']}, {trained}, held-out {args.value} at the end of training")
    print(table(results, args.window, args.plateau_window))
    v = report["verdict"]
    spread = "-" if v["spread"] is None else f"{v['spread']:.3f}"
    print(f"spread {spread}; gap above it on seeds {v['seeds_above_spread']} (target: {args.min_seeds}): "
          f"{'holds' if v['gain_holds'] else 'does not hold'}; necessity: "
          f"{'holds' if v['necessity_holds'] else 'does not hold'}; alone agents plateaued: "
          f"{ {None: 'too short to tell', True: 'all', False: 'not all'}[v['alone_plateau_holds']]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
