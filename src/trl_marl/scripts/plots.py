"""The demos' plots (`trl-marl demo` and `trl-marl demo --real`): reward curves over training steps, and a debate's
majority-vote accuracy per turn with its answer flips, before and after MAPoRL. Both demos write them with
[`save_figure`] into their output folder and list the paths in their JSON (`plots`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

PHASE_COLORS = {"before": "tab:gray", "after": "tab:green"}
"""One colour per phase in both panels of the MAPoRL plot: before training, after MAPoRL."""


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display is needed, none is opened)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curves_figure(curves: Sequence[tuple[str, Sequence[float]]], title: str, ylabel: str = "team reward") -> Any:
    """One line per `(label, values)`, the values logged at training steps 1, 2, ... (a team reward per step)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for index, (label, values) in enumerate(curves):
        ax.plot(range(1, len(values) + 1), list(values), label=label, alpha=1.0 if index == 0 else 0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    return fig


TOY_DEBATE_TITLE = "MAPoRL on the toy debate: 3 agents answer, then revise after reading each other"


def maporl_figure(d: dict[str, Any], title: str = TOY_DEBATE_TITLE) -> Any:
    """The MAPoRL plot: majority-vote accuracy per debate turn, and how often answers flip between turns, before
    and after training (one colour per phase in both panels, both on a 0-1 scale).

    Args:
        d: `{"before": ..., "after": ...}`, each with `majority_accuracy` (one value per turn) and, when measured,
            `w_to_r_rate` and `r_to_w_rate` (one value per turn change; a missing one is drawn as 0).
        title: The figure's title.
    """
    plt = _pyplot()
    turns = list(range(1, len(d["before"]["majority_accuracy"]) + 1))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    fig.suptitle(title)
    names = {"before": "before training", "after": "after MAPoRL"}
    for phase in ("before", "after"):
        axes[0].plot(turns, d[phase]["majority_accuracy"], "o-", color=PHASE_COLORS[phase], label=names[phase])
    axes[0].set_xticks(turns)
    axes[0].set_ylim(0, 1)
    axes[0].set_xlabel("debate turn")
    axes[0].set_ylabel("majority-vote accuracy")
    axes[0].set_title("Accuracy per turn")
    axes[0].legend()
    changes = [f"{t} -> {t + 1}" for t in turns[:-1]]
    width = 0.2
    kinds = {"w_to_r_rate": ("wrong -> right", None), "r_to_w_rate": ("right -> wrong", "//")}
    for i, (key, phase) in enumerate([(k, p) for k in kinds for p in ("before", "after")]):
        xs = [j + (i - 1.5) * width for j in range(len(changes))]
        label, hatch = kinds[key]
        axes[1].bar(xs, d[phase].get(key, [0] * len(changes)), width, color=PHASE_COLORS[phase], hatch=hatch,
                    edgecolor="black", linewidth=0.5, label=f"{label}, {names[phase]}")
    axes[1].set_xticks(range(len(changes)), changes)
    axes[1].set_ylim(0, 1)
    axes[1].set_xlabel("turn change")
    axes[1].set_ylabel("share of answers that flip")
    axes[1].set_title("Flips: wrong -> right (of wrong answers),\nright -> wrong (of right answers)", fontsize=10)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: Any, output_dir: str, name: str) -> str:
    """Write `fig` as `output_dir/name` (PNG, 100 dpi), close it, and return the path."""
    path = os.path.join(output_dir, name)
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    return path
