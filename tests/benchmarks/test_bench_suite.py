"""`python -m benchmarks`: the entry point, its groups, and the peers' virtualenvs it builds (never built here)."""

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_ROOT = REPO_ROOT / "benchmarks"
GROUPS = ("speed", "memory", "parity", "learning", "gpu")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture
def suite(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path / "cache"))
    for var in ("COMLRL_PYTHON", "TRL112_PYTHON", "TRL011_PYTHON"):
        monkeypatch.delenv(var, raising=False)
    return importlib.import_module("benchmarks.suite")


def test_help_exits_0_and_names_every_group_and_script():
    done = _cli("--help")
    assert done.returncode == 0, done.stderr
    assert "usage: python -m benchmarks" in done.stdout
    for group in GROUPS:
        assert f"  {group}: " in done.stdout
    for script in ("speed/bench_magrpo.py", "memory/bench_ppo_memory.py", "parity/bench_legacy_peer.py",
                   "learning/bench_family.py", "gpu/bench_gpu.py"):
        assert script in done.stdout


@pytest.mark.parametrize("group", GROUPS)
def test_each_group_help_exits_0_and_lists_its_benchmarks(group, suite):
    done = _cli(group, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m benchmarks {group}")
    for bench in suite.GROUPS[group][1]:
        assert bench.name in done.stdout and bench.script in done.stdout


def test_every_registered_script_exists_and_every_benchmark_script_is_registered(suite):
    registered = {bench.script for _, benches in suite.GROUPS.values() for bench in benches}
    for script in registered:
        assert (BENCH_ROOT / script).is_file(), script
    # helpers imported or started by the benchmarks, and the analysis tool of the family runs
    helpers = {"speed/ab_timing.py", "speed/profile_hooks.py", "parity/bench_ppo_trl112_peer.py",
               "parity/bench_comlrl_peer.py", "parity/bench_comlrl_ac_peer.py", "learning/family_stats.py",
               "learning/writing_untrained.py",  # the untrained writing team on training texts (the task's sizing)
               "learning/writing_symmetric_pilot.py",  # pilot rates of the symmetric writing task (training rows)
               "learning/coding_pilot.py",  # pilot rates of the cooperative coding designs (training rows)
               "learning/plot_real.py",  # the learning-curve plots drawn from the real-model records
               "learning/cooperation_target.py"}  # issue 55's target computed from the team and alone records
    on_disk = {str(p.relative_to(BENCH_ROOT)) for p in BENCH_ROOT.glob("*/*.py")}
    assert on_disk - registered - helpers == set()
    assert not list(BENCH_ROOT.glob("*.json")), "raw results belong in benchmarks/results/"


def test_dry_run_prints_the_venv_commands_and_builds_nothing(tmp_path):
    cache = tmp_path / "cache"
    done = _cli("parity", "--only", "legacy", "--dry-run", env={"TRL_MARL_CACHE": str(cache), "TRL011_PYTHON": ""})
    assert done.returncode == 0, done.stderr
    venv = cache / "bench_venvs" / "trl011"
    lines = [line for line in done.stdout.splitlines() if line.startswith("would run: ")]
    assert lines[0].endswith(f"-m venv {venv}")
    assert lines[1] == f"would run: {venv}/bin/python -m pip install --quiet torch==2.13.0"
    assert lines[2] == f"would run: {venv}/bin/python -m pip install --quiet trl==0.11.4 transformers==4.46.3 rich"
    assert lines[3].startswith(f"would run: TRL011_PYTHON={venv}/bin/python ")
    assert lines[3].endswith("benchmarks/parity/bench_legacy_peer.py")
    assert len(lines) == 4
    assert not cache.exists()


def test_install_commands_pin_each_peer(suite):
    peers = importlib.import_module("benchmarks.peers")
    venv = peers.cache_root() / "comlrl"
    assert peers.install_commands("comlrl", base_python="/usr/bin/python3") == [
        ["/usr/bin/python3", "-m", "venv", str(venv)],
        [f"{venv}/bin/python", "-m", "pip", "install", "--quiet", "torch==2.13.0"],
        [f"{venv}/bin/python", "-m", "pip", "install", "--quiet", "comlrl==1.4.3", "torch==2.13.0",
         "transformers==5.23.0"],
    ]
    trl112 = peers.install_commands("trl112")[2]
    assert "trl==1.12.0" in trl112 and "transformers==5.23.0" in trl112
    with pytest.raises(ValueError, match="unknown peer 'trl2'; the peers are"):
        peers.install_commands("trl2")


def test_ensure_peer_builds_once_and_reuses_an_existing_venv(suite):
    peers = importlib.import_module("benchmarks.peers")
    ran = []
    python = peers.ensure_peer("trl112", run=lambda cmd, check: ran.append(cmd), echo=lambda line: None)
    assert ran == peers.install_commands("trl112")
    assert python == str(peers.cache_root() / "trl112" / "bin" / "python")
    Path(python).parent.mkdir(parents=True)
    Path(python).touch()
    ran.clear()
    assert peers.ensure_peer("trl112", run=lambda cmd, check: ran.append(cmd), echo=lambda line: None) == python
    assert ran == []


def test_a_run_uses_the_given_peer_python_and_puts_src_on_the_path(suite, tmp_path, capsys):
    calls = []

    def run(command, **kw):
        calls.append((command, kw))
        return SimpleNamespace(returncode=0)

    peer = tmp_path / "python"
    peer.touch()
    assert suite.main(["speed", "--only", "profile", "--peer-python", str(peer), "--results-dir", str(tmp_path)],
                      run=run) == 0
    (command, kw), = calls  # no venv built: the given interpreter is used
    assert command[1:] == [str(BENCH_ROOT / "speed" / "bench_profile.py"), "--json", str(tmp_path / "profile.json")]
    assert kw["cwd"] == REPO_ROOT
    assert kw["env"]["COMLRL_PYTHON"] == str(peer)
    assert kw["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT / "src")


def test_peer_python_without_a_name_is_refused_when_several_peers_are_needed(suite, tmp_path):
    peer = tmp_path / "python"
    peer.touch()
    with pytest.raises(SystemExit, match="need 3 peers .*write NAME=PATH"):
        suite.main(["parity", "--peer-python", str(peer), "--dry-run"])
    with pytest.raises(SystemExit, match="--peer-python comlrl=/nowhere/python: no such interpreter"):
        suite.main(["learning", "--peer-python", "comlrl=/nowhere/python", "--dry-run"])


def test_no_machine_specific_paths_in_the_benchmarks():
    offenders = []
    for path in BENCH_ROOT.rglob("*"):
        if path.suffix in (".py", ".md") and ("/work/" in path.read_text() or "venv-comlrl" in path.read_text()):
            offenders.append(str(path.relative_to(REPO_ROOT)))
    assert offenders == []
