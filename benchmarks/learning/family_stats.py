"""Merge `bench_family.py` results over seeds and test whether ours and comlrl differ.

`bench_family.py` runs each algorithm of the CoMLRL family here and in comlrl 1.4.3, seed by seed; long seed sweeps
end up in several JSON files (one run per seed, or a few seeds per file). This script reads any number of them,
keeps one final reward per (algorithm, side, seed) (the mean team reward of the last `final_window` updates, never
the peak; a seed found twice must agree, or the script stops), and prints per algorithm: the mean over the seeds both
sides ran with its standard error, the difference ours - comlrl, the number of seeds above +0.5 (the task's outcome
is close to bimodal: a team takes off to about +0.85 or stays near +0.1), and a two-sided permutation p-value for the
difference of the means (the side labels shuffled within the pooled finals, 20000 draws, fixed seed).

The final reward mostly counts how many seeds took off before the last updates. Two measures that use the whole curve
are reported beside it, with their own permutation p-values: the mean reward over all updates (the area under the
learning curve), and the take-off update (the first update at which the mean of the last `final_window` updates
exceeds `--takeoff`, default +0.5; a run that never does counts as one update past its end).

`--ours-from FILE ...` takes our side from other files than comlrl's (e.g. a diagnostic variant of ours run with
`bench_family.py --sides ours`): the positional files then give comlrl's runs, and their `ours` runs are ignored.

Usage::

    python benchmarks/learning/family_stats.py benchmarks/results/family_100steps.json run-*.json --json merged.json

Two input layouts are read: `bench_family.py`'s own (`algorithms[a]["runs"][side]`, one entry per seed of
`seeds`, with the per-update `rewards`) and the compact one this script writes (`algorithms[a][side]` with
`seeds` and `curves`), so merged files can be merged again. Keys of the compact layout other than an algorithm name
(e.g. `iac_seeds_20_39` in older files) are read as that algorithm when their prefix is one.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ALGORITHMS = ("magrpo", "mareinforce", "marloo", "maremax", "iac", "maac")
SIDES = ("ours", "comlrl")


def _algorithm_of(key: str) -> str | None:
    for name in ALGORITHMS:
        if key == name or key.startswith(name + "_seeds_"):
            return name
    return None


def read_curves(path: Path) -> Iterable[tuple[str, str, int, list[float]]]:
    """`(algorithm, side, seed, per-update team rewards)` for every run stored in `path`."""
    data = json.loads(path.read_text())
    for key, entry in data.get("algorithms", {}).items():
        algorithm = _algorithm_of(key)
        if algorithm is None or not isinstance(entry, dict):
            continue
        if "runs" in entry:  # bench_family.py's layout: runs in the order of the file's seeds
            for side, runs in entry["runs"].items():
                for seed, run in zip(data["seeds"], runs):
                    yield algorithm, side, int(seed), [float(r) for r in run["rewards"]]
            continue
        for side in SIDES:  # the compact layout
            block = entry.get(side)
            if isinstance(block, dict) and "curves" in block:
                for seed, curve in zip(block["seeds"], block["curves"]):
                    yield algorithm, side, int(seed), [float(r) for r in curve]


def merge(paths: Sequence[Path], window: int) -> dict[str, dict[str, dict[int, list[float]]]]:
    """Every run of `paths`, keyed by algorithm, side and seed; duplicates must give the same final reward."""
    merged: dict[str, dict[str, dict[int, list[float]]]] = {}
    for path in paths:
        for algorithm, side, seed, curve in read_curves(path):
            runs = merged.setdefault(algorithm, {}).setdefault(side, {})
            if seed in runs and abs(final(runs[seed], window) - final(curve, window)) > 1e-9:
                raise ValueError(f"{path}: {algorithm} {side} seed {seed} differs from an earlier file's run.")
            runs[seed] = curve
    return merged


def final(curve: Sequence[float], window: int) -> float:
    """The mean team reward of the last `window` updates."""
    return statistics.fmean(curve[-window:])


def sem(values: Sequence[float]) -> float:
    return statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")


def permutation_p(a: Sequence[float], b: Sequence[float], draws: int = 20000, seed: int = 0) -> float:
    """Two-sided p-value of `mean(a) - mean(b)` under random relabelling of the pooled values."""
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    pooled, n = list(a) + list(b), len(a)
    rng = random.Random(seed)
    hits = 0
    for _ in range(draws):
        rng.shuffle(pooled)
        if abs(statistics.fmean(pooled[:n]) - statistics.fmean(pooled[n:])) >= observed - 1e-12:
            hits += 1
    return (hits + 1) / (draws + 1)


def takeoff(curve: Sequence[float], window: int, threshold: float) -> int:
    """The first update (1-based) at which the mean reward of the last `window` updates exceeds `threshold`;
    `len(curve) + 1` if it never does."""
    for end in range(window, len(curve) + 1):
        if statistics.fmean(curve[end - window:end]) > threshold:
            return end
    return len(curve) + 1


def summarize(merged: dict[str, dict[str, dict[int, list[float]]]], window: int,
              threshold: float = 0.5) -> list[dict[str, Any]]:
    rows = []
    for algorithm in ALGORITHMS:
        sides = merged.get(algorithm, {})
        seeds = sorted(set(sides.get("ours", {})) & set(sides.get("comlrl", {})))
        if not seeds:
            continue
        ours = [final(sides["ours"][s], window) for s in seeds]
        peer = [final(sides["comlrl"][s], window) for s in seeds]
        rows.append({
            "algorithm": algorithm, "seeds": seeds, "ours": statistics.fmean(ours), "ours_sem": sem(ours),
            "comlrl": statistics.fmean(peer), "comlrl_sem": sem(peer),
            "difference": statistics.fmean(ours) - statistics.fmean(peer),
            "difference_se": (sem(ours) ** 2 + sem(peer) ** 2) ** 0.5,
            "above_half": [sum(v > 0.5 for v in ours), sum(v > 0.5 for v in peer)],
            "permutation_p": permutation_p(ours, peer),
        })
        for name, measure in (("mean_reward", statistics.fmean),
                              ("takeoff", lambda c: float(takeoff(c, window, threshold)))):
            a = [measure(sides["ours"][s]) for s in seeds]
            b = [measure(sides["comlrl"][s]) for s in seeds]
            rows[-1][name] = {"ours": statistics.fmean(a), "ours_sem": sem(a), "comlrl": statistics.fmean(b),
                              "comlrl_sem": sem(b), "permutation_p": permutation_p(a, b)}
    return rows


def _seed_ranges(seeds: Sequence[int]) -> str:
    parts, start = [], seeds[0]
    for prev, cur in zip(seeds, list(seeds[1:]) + [None]):
        if cur != prev + 1:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = cur
    return ", ".join(parts)


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| algorithm | seeds | ours | comlrl | ours - comlrl (SE) | seeds above +0.5 (ours / comlrl) | "
             "permutation p |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['algorithm']} | {_seed_ranges(r['seeds'])} ({len(r['seeds'])}) | {r['ours']:+.3f} +- "
            f"{r['ours_sem']:.3f} | {r['comlrl']:+.3f} +- {r['comlrl_sem']:.3f} | {r['difference']:+.3f} "
            f"({r['difference_se']:.3f}) | {r['above_half'][0]} / {r['above_half'][1]} | {r['permutation_p']:.2f} |")
    lines += ["", "| algorithm | mean reward over all updates (ours / comlrl) | p | take-off update (ours / comlrl) "
              "| p |", "|---|---|---|---|---|"]
    for r in rows:
        m, t = r["mean_reward"], r["takeoff"]
        lines.append(f"| {r['algorithm']} | {m['ours']:+.3f} +- {m['ours_sem']:.3f} / {m['comlrl']:+.3f} +- "
                     f"{m['comlrl_sem']:.3f} | {m['permutation_p']:.3f} | {t['ours']:.1f} +- {t['ours_sem']:.1f} / "
                     f"{t['comlrl']:.1f} +- {t['comlrl_sem']:.1f} | {t['permutation_p']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path, help="bench_family.py results (or files this script wrote)")
    parser.add_argument("--window", type=int, default=5, help="final reward = mean of the last WINDOW updates")
    parser.add_argument("--takeoff", type=float, default=0.5,
                        help="take-off = first update whose last-WINDOW mean reward exceeds this")
    parser.add_argument("--ours-from", nargs="+", type=Path, default=None,
                        help="take our runs from these files instead (the positional files then give comlrl's)")
    parser.add_argument("--json", type=Path, help="write the merged runs (compact layout) and the summary here")
    args = parser.parse_args(argv)
    merged = merge(args.files, args.window)
    if args.ours_from:
        ours = merge(args.ours_from, args.window)
        for algorithm, sides in merged.items():
            sides.pop("ours", None)
            if "ours" in ours.get(algorithm, {}):
                sides["ours"] = ours[algorithm]["ours"]
    rows = summarize(merged, args.window, args.takeoff)
    print(markdown(rows))
    if args.json:
        out = {"sources": [str(p) for p in args.files], "ours_from": [str(p) for p in args.ours_from or []],
               "final_window": args.window, "takeoff_threshold": args.takeoff, "summary": rows,
               "algorithms": {a: {side: {"seeds": sorted(runs), "curves": [runs[s] for s in sorted(runs)]}
                                  for side, runs in sides.items()} for a, sides in merged.items()}}
        text = json.dumps(out, indent=1)  # then one line per list of numbers (a reward curve, a seed list)
        text = re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",")
                      + "]", text)
        args.json.write_text(text)


if __name__ == "__main__":
    main()
