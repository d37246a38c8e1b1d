"""`trl-marl demo --quick` runs end to end; its table, plots and JSON exist and agree with each other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_demo_end_to_end(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1",
               TRL_MARL_CACHE=os.environ.get("TRL_MARL_CACHE", str(tmp_path / "cache")))
    result = subprocess.run([sys.executable, "-m", "trl_marl.cli", "demo", "--quick", "--output-dir", str(out)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads((out / "demo_metrics.json").read_text())
    # only the plots and the metrics are left behind: no empty `runs/` (trainer output) folders, here or in the cwd
    assert sorted(os.listdir(out)) == ["demo_metrics.json", "magrpo_team_reward.png", "maporl_accuracy_per_turn.png"]
    assert set(os.listdir(tmp_path)) <= {"demo", "cache"}, os.listdir(tmp_path)
    for plot in ("magrpo_team_reward.png", "maporl_accuracy_per_turn.png"):
        assert (out / plot).stat().st_size > 1000, plot
        assert str(out / plot) in metrics["plots"]
    # the printed table is the one in the JSON, and its numbers are the JSON's numbers
    assert metrics["table"] in result.stdout
    magrpo, maporl = metrics["magrpo"], metrics["maporl"]
    assert f"{magrpo['magrpo_success_after']:8.3f}" in metrics["table"]
    assert f"{magrpo['alone_success_after']:8.3f}" in metrics["table"]
    assert "".join(f"{v:9.3f}" for v in maporl["after"]["majority_accuracy"]) in metrics["table"]
    assert len(magrpo["magrpo_curve"]) == magrpo["steps"] == len(magrpo["alone_curves"][0])
    assert len(maporl["before"]["majority_accuracy"]) == 3 and len(maporl["before"]["w_to_r_rate"]) == 2
    for value in (magrpo["success_before"], magrpo["magrpo_success_after"], *maporl["after"]["majority_accuracy"]):
        assert 0.0 <= value <= 1.0
    # on an x86 CPU with AVX2 the command restarted itself with its kernel pins, and the run computed with them
    from trl_marl.scripts.numerics import NUMERICS_PINS, cpu_flags

    if "avx2" in cpu_flags() and not any(k in env for k in (*NUMERICS_PINS, "TRL_MARL_NATIVE_KERNELS")):
        assert metrics["numerics"]["pins"] == NUMERICS_PINS and metrics["numerics"]["torch_cpu_capability"] == "AVX2"
        assert result.stdout.startswith("Pinning the CPU kernels")
