"""The peers' virtualenvs: which libraries each comparison runs against, at which pinned versions, and where they live.

The peers cannot share our environment (comlrl pins its own stack, TRL 1.12 and TRL 0.11.4 are older TRLs, TRL 0.11.4
needs transformers 4.4x), so each one gets its own virtualenv under a cache folder:
``$TRL_MARL_CACHE/bench_venvs/<name>`` if ``TRL_MARL_CACHE`` is set, else
``$XDG_CACHE_HOME/trl_marl/bench_venvs/<name>`` (``~/.cache/trl_marl/bench_venvs/<name>`` by default), the same
root as the toy models' cache. ``python -m benchmarks ...`` builds the ones it needs (``--dry-run`` prints the
commands instead); a benchmark script run by hand finds the interpreter through its environment variable
(``COMLRL_PYTHON``, ``TRL112_PYTHON``, ``TRL011_PYTHON``) or, without it, in the cache folder.

This module needs the standard library only: the benchmark scripts import it whatever environment they run in.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PeerEnv:
    """One peer's virtualenv.

    Attributes:
        name: Folder name under the cache root, and the name ``--peer-python NAME=PATH`` takes.
        env_var: Environment variable through which the benchmark scripts receive the peer's interpreter.
        installs: The ``pip install`` argument lists, run in this order (torch first, so that the peer's resolver
            keeps the torch build already installed).
        what: One line: what the peer is and which benchmarks use it.
    """

    name: str
    env_var: str
    installs: tuple[tuple[str, ...], ...]
    what: str


# Versions as the benchmarks were measured with (see each script's docstring): torch 2.13.0 on both sides of every
# comparison, transformers 5.23.0 wherever the peer accepts it.
PEERS: dict[str, PeerEnv] = {
    "comlrl": PeerEnv(
        name="comlrl",
        env_var="COMLRL_PYTHON",
        installs=(("torch==2.13.0",), ("comlrl==1.4.3", "torch==2.13.0", "transformers==5.23.0")),
        what="comlrl 1.4.3, the MAGRPO authors' library (speed: magrpo, profile, compile; learning: family; "
        "parity: same-samples, sampler-fit)",
    ),
    "trl112": PeerEnv(
        name="trl112",
        env_var="TRL112_PYTHON",
        installs=(
            ("torch==2.13.0",),
            ("trl==1.12.0", "torch==2.13.0", "transformers==5.23.0", "accelerate==1.15.0", "datasets==5.2.0",
             "numpy==2.4.6", "peft==0.21.2"),
        ),
        what="TRL 1.12's trl.experimental.ppo.PPOTrainer (speed: ppo; parity: ppo-equivalence)",
    ),
    "trl011": PeerEnv(
        name="trl011",
        env_var="TRL011_PYTHON",
        installs=(("torch==2.13.0",), ("trl==0.11.4", "transformers==4.46.3", "rich")),
        what="TRL 0.11.4's classic PPOTrainer.step() (parity: legacy)",
    ),
}


def cache_root() -> Path:
    """Returns the folder that holds the peers' virtualenvs (not necessarily existing yet)."""
    root = os.environ.get("TRL_MARL_CACHE")
    if root:
        return Path(root).expanduser() / "bench_venvs"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "trl_marl" / "bench_venvs"


def _spec(name: str) -> PeerEnv:
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; the peers are {sorted(PEERS)}")
    return PEERS[name]


def venv_dir(name: str) -> Path:
    """Returns the cached virtualenv folder of peer ``name``."""
    return cache_root() / _spec(name).name


def venv_python(name: str) -> Path:
    """Returns the interpreter of peer ``name``'s cached virtualenv."""
    return venv_dir(name) / "bin" / "python"


def peer_python(name: str) -> str:
    """Returns the interpreter a benchmark script should run peer ``name`` with.

    The peer's environment variable (``COMLRL_PYTHON``, ...) wins; without it, the cached virtualenv's interpreter,
    which may not exist yet (``python -m benchmarks`` builds it; the scripts say so when it is missing).
    """
    return os.environ.get(_spec(name).env_var) or str(venv_python(name))


def site_packages(python: str) -> str | None:
    """Returns the ``site-packages`` folder of the virtualenv that holds interpreter ``python``, if there is one."""
    venv = Path(python).parent.parent
    found = sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages")))
    return found[0] if found else None


def install_commands(name: str, base_python: str | None = None) -> list[list[str]]:
    """Returns the commands that build peer ``name``'s virtualenv: ``python -m venv``, then each ``pip install``."""
    spec = _spec(name)
    folder = venv_dir(name)
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    return [[base_python or sys.executable, "-m", "venv", str(folder)], *([*pip, *pkgs] for pkgs in spec.installs)]


def ensure_peer(
    name: str,
    dry_run: bool = False,
    run: Callable[..., object] = subprocess.run,
    echo: Callable[[str], None] = print,
) -> str:
    """Builds peer ``name``'s cached virtualenv unless it exists; returns its interpreter.

    Args:
        name: A key of :data:`PEERS`.
        dry_run: Print the commands instead of running them.
        run: Runs one command (``subprocess.run``; a test passes a recorder).
        echo: Prints one line.

    Returns:
        The interpreter's path.
    """
    python = venv_python(name)
    if python.exists():
        return str(python)
    for command in install_commands(name):
        echo(("would run: " if dry_run else "+ ") + shlex.join(command))
        if not dry_run:
            run(command, check=True)
    return str(python)


def describe(names: Sequence[str] | None = None) -> str:
    """One line per peer: name, cached folder, environment variable, what it is."""
    lines = []
    for name in names or sorted(PEERS):
        spec = _spec(name)
        lines.append(f"  {name:8s} {spec.what}\n           venv {venv_dir(name)} (or ${spec.env_var})")
    return "\n".join(lines)
