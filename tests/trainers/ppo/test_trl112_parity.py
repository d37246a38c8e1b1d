"""The PPO drop-in against the real TRL 1.12 `PPOTrainer`, first update on identical rollouts, over issue 12's grid.

TRL 1.12 (`trl.experimental.ppo`) is installed by pip into a folder of its own (`pip install --no-deps --target`)
and run in a child process with that folder first on `PYTHONPATH`, on top of this environment's transformers,
accelerate and peft. Both sides replay the same recorded rollouts (see `benchmarks/parity/bench_ppo.py`, part (a)) for
every configuration of the grid: num_mini_batches 1/2/4 x gradient_accumulation_steps 1/2 x num_ppo_epochs 1/4,
each with and without LoRA, with whitened rewards wherever TRL 1.12 accepts them and with and without the
missing-EOS penalty. Every configuration TRL 1.12 accepts must run here, and every logged metric must agree.

TRL 1.12 averages its per-micro-batch statistics over `(epochs, num_mini_batches, gradient_accumulation_steps)`
slots and leaves the slots of micro-batches that never happen at zero; those metrics are compared once the
never-written zeros are removed (documented in `PPOConfig`'s docstring and benchmarks/README.md), and as logged
where no slot is left empty.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parents[3] / "benchmarks" / "parity"
ATOL, RTOL = 5e-5, 1e-4  # float32 round-off of up to 4 epochs x 4 mini-batches of Adam steps


@pytest.fixture(scope="module")
def trl112_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("trl112")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", "--target",
         str(target), "trl==1.12.0"],
        capture_output=True, text=True, check=False, timeout=600,
    )
    if done.returncode != 0:
        if "No matching distribution" in done.stderr or "Could not find a version" in done.stderr \
                or "NewConnectionError" in done.stderr or "Network is unreachable" in done.stderr:
            pytest.skip(f"trl==1.12.0 cannot be downloaded here (no package index): {done.stderr[-300:]}")
        raise RuntimeError(f"pip could not install trl==1.12.0:\n{done.stdout}\n{done.stderr}")
    return target


def _close(ours: float, trl: float) -> bool:
    if math.isnan(ours) or math.isnan(trl):
        return math.isnan(ours) and math.isnan(trl)
    return abs(ours - trl) <= ATOL + RTOL * abs(trl)


@pytest.mark.slow
def test_first_update_matches_trl_112_over_the_grid(
    trl112_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    import bench_ppo

    monkeypatch.setenv("TRL112_PYTHONPATH", str(trl112_folder))
    monkeypatch.setattr(bench_ppo, "TRL112_PYTHON", sys.executable)
    bench_ppo.setup(tmp_path)
    table, versions = bench_ppo.run_equivalence(tmp_path, "grid")
    assert versions["trl"] == "1.12.0"

    failures: list[str] = []
    for case in bench_ppo.GRID_CASES:
        row: dict[str, Any] = table[case["name"]]
        if not row["permutations_equal"]:
            failures.append(f"{case['name']}: different mini-batch permutations {row['permutation_calls']}")
        # TRL fills every stats slot when a mini-batch has gradient_accumulation_steps micro-batches
        written_all = case["gradient_accumulation_steps"] == 1 or case["num_mini_batches"] == 1
        for metric in bench_ppo.METRICS:
            ours, trl = row["ours"][metric], row["trl_undiluted"][metric]
            if not _close(ours, trl):
                failures.append(f"{case['name']}: {metric} ours {ours!r} vs TRL 1.12 (zero slots removed) {trl!r}")
            if written_all and not _close(ours, row["trl"][metric]):
                failures.append(f"{case['name']}: {metric} ours {ours!r} vs TRL 1.12 as logged {row['trl'][metric]!r}")
    assert not failures, "\n".join(failures)
    assert len(table) == len(bench_ppo.GRID_CASES) == 25
