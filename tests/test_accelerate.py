"""Multi-process training with `accelerate launch`: 2 CPU processes (gloo) train one MAGRPO team.

Each process plays different dataset rows and samples different completions, so its local gradients differ; the
test checks that DistributedDataParallel still leaves both processes with identical weights, and that the weights
moved away from their initial values.

`accelerate launch --cpu --num_processes 2` starts a *single* process unless an MPI hostfile is given (accelerate's
simple launcher does not spawn CPU workers), so the processes are started with `--multi_gpu` (torchrun) and the
script trains with `use_cpu=True`, which gives accelerate's `MULTI_CPU` mode with the gloo backend.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from trl_marl.toy import make_toy_model

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPT = REPO_ROOT / "tests" / "scripts" / "magrpo_ddp.py"
NUM_PROCESSES = 2
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def toy_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return make_toy_model(tmp_path_factory.mktemp("toy") / "toy32", hidden_size=32, num_layers=1,
                              pretrain_steps=50, targets=(10,))
    finally:
        torch.set_num_threads(threads)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch_env() -> dict[str, str]:
    """The current environment, with `src/` importable (installed or not) and one thread per process."""
    import trl_marl

    env = dict(os.environ)
    paths = [str(Path(trl_marl.__file__).resolve().parents[1]), str(REPO_ROOT / "src")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the run is CPU-only even on a GPU machine
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # a launcher around pytest must not leak into the child processes
    return env


def _launch(model_dir: str, out_dir: Path, team_mode: str, *extra: str) -> list[dict[str, Any]]:
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--multi_gpu", "--num_processes", str(NUM_PROCESSES), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
        str(SCRIPT), "--model-dir", model_dir, "--out-dir", str(out_dir), "--team-mode", team_mode, *extra,
    ]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_launch_env(), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`accelerate launch` did not finish in {TIMEOUT_S} s.\nstdout:\n{exc.stdout}\n"
                    f"stderr:\n{exc.stderr}")
    assert proc.returncode == 0, (
        f"`accelerate launch` exited with {proc.returncode}.\nstdout:\n{proc.stdout[-5000:]}\n"
        f"stderr:\n{proc.stderr[-10000:]}"
    )
    results = []
    for rank in range(NUM_PROCESSES):
        path = out_dir / f"rank{rank}.pt"
        assert path.is_file(), f"process {rank} wrote no result.\nstderr:\n{proc.stderr[-10000:]}"
        results.append(torch.load(path, weights_only=False))
    return results


# the adapters run also has an adaptive entropy bonus (GRPO's `use_adaptive_entropy`), whose controllers must see the
# entropy of every process's tokens and so agree between the processes
@pytest.mark.parametrize(("team_mode", "adaptive_entropy"), [("models", False), ("adapters", True)])
def test_two_processes_end_with_identical_weights(toy_model_dir: str, tmp_path: Path, team_mode: str,
                                                  adaptive_entropy: bool) -> None:
    flags = ["--adaptive-entropy"] if adaptive_entropy else []
    results = _launch(toy_model_dir, tmp_path / "out", team_mode, *flags)
    first, second = results

    assert [r["num_processes"] for r in results] == [NUM_PROCESSES] * NUM_PROCESSES
    assert [r["process_index"] for r in results] == list(range(NUM_PROCESSES))
    assert first["global_step"] == second["global_step"] > 0

    # the data was sharded: each process played its own rows
    assert first["row_ids"] and second["row_ids"]
    shared_rows = sorted(set(first["row_ids"]) & set(second["row_ids"]))
    assert not shared_rows, f"both processes played the dataset rows {shared_rows}"

    # every agent has trainable parameters
    names = sorted(first["final"])
    assert names == sorted(second["final"])
    prefixes = ("agent_0", "agent_1") if team_mode == "adapters" else ("models.0.", "models.1.")
    for prefix in prefixes:
        assert any(prefix in name for name in names), f"no trainable parameter of {prefix!r} in {names}"

    # identical weights on both processes, and all of them trained
    different = [n for n in names if not torch.equal(first["final"][n], second["final"][n])]
    assert not different, f"parameters that differ between the processes: {different}"
    for result in results:
        assert all(torch.equal(result["initial"][n], first["initial"][n]) for n in names)
    unchanged = [n for n in names if torch.equal(first["final"][n], first["initial"][n])]
    assert not unchanged, f"parameters that training did not change: {unchanged}"

    # every row has the same prompt, so only per-process sampling seeds make the processes' rollouts (hence their
    # local gradients) differ; without that, identical weights would not show that gradients were averaged
    assert first["joint_actions"] != second["joint_actions"], "both processes sampled the same completions"
    if adaptive_entropy:  # five steps under the target: +0.01 each; one entropy measured over both processes
        assert first["entropy_coefs"] == second["entropy_coefs"] == pytest.approx({0: 0.06, 1: 0.06})
        assert first["last_entropy"] == second["last_entropy"]
        assert all(0.0 < h < 50.0 for h in first["last_entropy"].values())


def test_launcher_that_drops_processes_is_reported(tmp_path: Path) -> None:
    # `accelerate launch --num_processes 2` without `--multi_gpu` starts ONE process on a machine without GPUs (an
    # example used to log epoch 0.375 instead of 0.75 this way): the trainers say so, with the fix.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, warnings\n"
        "from trl_marl._trl_compat import processes_dropped_by_launcher, warn_if_launcher_dropped_processes\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    warn_if_launcher_dropped_processes()\n"
        "print('DROPPED', processes_dropped_by_launcher(), 'WORLD', os.environ.get('WORLD_SIZE'))\n"
        "print('WARNING', [str(w.message) for w in caught])\n"
    )
    base = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--mixed_precision", "no",
            "--dynamo_backend", "no", "--main_process_port", str(_free_port())]
    single = subprocess.run([*base, "--num_processes", "2", str(probe)], cwd=REPO_ROOT, env=_launch_env(),
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert single.returncode == 0, single.stderr[-3000:]
    assert single.stdout.count("DROPPED") == 1  # accelerate really started one process
    assert "DROPPED 2 WORLD None" in single.stdout
    assert "asked for 2 processes but started this script as a single process" in single.stdout
    assert "--multi_gpu --num_processes 2" in single.stdout

    both = subprocess.run([*base, "--multi_gpu", "--num_processes", "2", str(probe)], cwd=REPO_ROOT,
                          env=_launch_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert both.returncode == 0, both.stderr[-3000:]
    assert both.stdout.count("DROPPED None WORLD 2") == 2 and "WARNING []" in both.stdout
