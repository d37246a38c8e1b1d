"""`trl-marl demo` pins its CPU kernels (`trl_marl.scripts.numerics.NUMERICS_PINS`) so that its digits do not depend on
the machine's instruction set or MKL's dispatch: it restarts itself with the pins when they are missing, keeps what
the user set, never restarts a process that is not the demo's command line, and never pins `--real` (whose records
were measured unpinned)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from trl_marl.scripts import demo, numerics

ROOT = Path(__file__).resolve().parents[2]
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}


class Restarted(Exception):
    """Raised by the fake `os.execve`: the process would have been replaced here."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_demo_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """A process started as `trl-marl demo --quick --seed 3` on an AVX2 CPU, with `os.execve` and both demos faked."""
    calls: list[Any] = []

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        calls.append(("execve", path, argv, env))
        raise Restarted

    monkeypatch.setattr(sys, "argv", ["/venv/bin/trl-marl", "demo", "--quick", "--seed", "3"])
    monkeypatch.setattr(sys, "orig_argv", ["/venv/bin/python", "/venv/bin/trl-marl", "demo", "--quick", "--seed", "3"])
    monkeypatch.setattr(os, "execve", execve)
    monkeypatch.setattr(numerics, "cpu_flags", lambda: {"sse4_2", "avx", "avx2", "fma"})
    monkeypatch.setattr(demo, "run_demo", lambda config: calls.append(("toy", config)))
    from trl_marl.scripts import demo_real

    monkeypatch.setattr(demo_real, "run_real_demo", lambda config: calls.append(("real", config)))
    for key in PINS:
        monkeypatch.delenv(key, raising=False)
    return calls


def test_pins_are_what_is_missing_on_an_avx2_cpu() -> None:
    assert numerics.NUMERICS_PINS == PINS
    assert numerics.numerics_pins({}, {"avx", "avx2"}) == PINS
    assert (
        numerics.numerics_pins({"PATH": "/bin"}, ["avx2", "avx512f"]) == PINS
    )  # an AVX-512 CPU runs the AVX2 kernels
    assert numerics.numerics_pins({"MKL_CBWR": "COMPATIBLE"}, {"avx2"}) == {
        "ATEN_CPU_CAPABILITY": "avx2"
    }  # the user's
    assert numerics.numerics_pins(PINS, {"avx2"}) == {}
    assert numerics.numerics_pins({}, {"avx", "sse4_2"}) == {}  # no AVX2: these kernels do not exist there
    assert numerics.numerics_pins({}, set()) == {}  # not x86 / no /proc/cpuinfo
    assert numerics.numerics_pins({"TRL_MARL_NATIVE_KERNELS": "1"}, {"avx2"}) == {}  # the user's opt-out
    assert numerics.numerics_pins({"TRL_MARL_NATIVE_KERNELS": "0"}, {"avx2"}) == PINS


def test_the_toy_demo_restarts_itself_with_the_pins(
    launched: list[Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRL_MARL_CACHE", "/somewhere")
    with pytest.raises(Restarted):
        demo.demo_command(parse(["--quick", "--seed", "3"]))
    [(kind, path, argv, env)] = launched
    assert (kind, path) == ("execve", sys.executable)
    assert argv == ["/venv/bin/python", "/venv/bin/trl-marl", "demo", "--quick", "--seed", "3"]  # the same command
    assert {k: env[k] for k in PINS} == PINS and env["TRL_MARL_CACHE"] == "/somewhere"  # the rest of the env kept
    assert "ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2" in capsys.readouterr().out


def test_a_pinned_process_runs_the_demo(launched: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in PINS.items():
        monkeypatch.setenv(key, value)
    assert demo.demo_command(parse(["--quick", "--seed", "3"])) == 0
    assert launched == [("toy", demo.DemoConfig(preset="quick", seed=3, output_dir="trl-marl-demo"))]


def test_the_user_choice_is_kept(launched: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    with pytest.raises(Restarted):
        demo.demo_command(parse([]))
    env = launched[0][3]
    assert env["ATEN_CPU_CAPABILITY"] == "default" and env["MKL_CBWR"] == "AVX2"


def test_no_restart_outside_the_command_line_or_for_real(launched: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert demo.demo_command(parse(["--real", "--quick"])) == 0  # --real: its README block was measured unpinned
    monkeypatch.setattr(sys, "argv", ["/venv/lib/python3.11/site-packages/pytest/__main__.py", "tests"])
    assert demo.demo_command(parse(["--quick"])) == 0  # a test or a script calling the demo: never re-executed
    monkeypatch.setattr(sys, "argv", ["/venv/bin/trl-marl", "demo"])
    monkeypatch.setattr(numerics, "cpu_flags", lambda: {"neon", "asimd"})  # an Arm CPU: nothing to pin
    assert demo.demo_command(parse([])) == 0
    assert [c[0] for c in launched] == ["real", "toy", "toy"]
    with pytest.raises(Restarted):  # a measuring script asks for the restart whatever its name
        numerics.restart_with_pinned_numerics(flags={"avx2"}, programs=None)


@pytest.mark.skipif("avx2" not in numerics.cpu_flags(), reason="needs an x86 CPU with AVX2")
def test_the_restarted_process_computes_with_the_pins(tmp_path: Path) -> None:
    """For real: a process that already ran tensor operations restarts, and the new one has the pins in effect (here
    the user's `ATEN_CPU_CAPABILITY=default` is kept, which shows that the restarted torch reads it)."""
    code = (
        "import os, sys; sys.argv[0] = 'trl-marl'\n"
        "import torch; torch.ones(8).sum()  # PyTorch fixes its kernels here\n"
        "from trl_marl.scripts.numerics import restart_with_pinned_numerics\n"
        "restart_with_pinned_numerics()\n"
        "print('pinned', torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    env.update(PYTHONPATH=str(ROOT / "src"), ATEN_CPU_CAPABILITY="default")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Pinning the CPU kernels") and "MKL_CBWR=AVX2" in lines[0]
    assert "ATEN_CPU_CAPABILITY" not in lines[0]
    assert lines[1:] == ["pinned DEFAULT AVX2"]


def test_toy_models_are_kept_per_kernels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A toy model pretrained on other kernels gives other digits: the demo keeps its models in a folder per kernel
    set, so a cache filled by an unpinned run is never trained on by a pinned one (and the other way round)."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability().lower()
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    monkeypatch.delenv("MKL_CBWR", raising=False)
    unpinned = demo.demo_model_dir("target")
    assert numerics.kernel_tag() == f"{capability}-mkl-default"
    for value in ("AVX2", "BRANCH=AVX2,STRICT", "avx2"):
        monkeypatch.setenv("MKL_CBWR", value)
        assert numerics.kernel_tag() == f"{capability}-mkl-avx2"
    pinned = demo.demo_model_dir("target")
    assert pinned == str(tmp_path / "toy" / "demo" / f"{capability}-mkl-avx2" / "target") and pinned != unpinned
