"""Help texts, errors and labels that describe the same thing say the same thing (issue 39, deliverable 7)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from trl_marl import MAGRPOConfig
from trl_marl.cli import build_parser, short_help

ROOT = Path(__file__).resolve().parents[2]


def test_the_batch_rule_of_the_help_is_the_one_the_config_enforces(tmp_path: Path) -> None:
    help_text = " ".join(short_help("magrpo").split())
    line = help_text.split("--per_device_train_batch_size B", 1)[1].split("--gradient_accumulation_steps N", 1)[0]
    assert "B itself must be a multiple of G" in line
    assert "B x gradient_accumulation_steps" not in help_text
    # what the config does: B = 2 with G = 4 fails even when B x gradient_accumulation_steps = 8 is a multiple of G
    common = dict(output_dir=str(tmp_path), report_to="none", num_generations=4)
    with pytest.raises(ValueError, match=r"per_device_train_batch_size` \(2\) must be a multiple of"):
        MAGRPOConfig(per_device_train_batch_size=2, gradient_accumulation_steps=2, **common)
    assert MAGRPOConfig(per_device_train_batch_size=4, gradient_accumulation_steps=1, **common).num_generations == 4


TIME = re.compile(r"~\s?\d+\s?s\b|about a minute|under a minute|\d+ (?:seconds|minutes?)")


def test_the_quick_demo_takes_the_same_time_in_every_help() -> None:
    parser = build_parser()
    top = TIME.findall(parser.epilog)
    demo = next(a for a in parser._subparsers._actions if isinstance(a, argparse._SubParsersAction)).choices["demo"]
    quick = next(a for a in demo._actions if "--quick" in a.option_strings)
    assert top and top == TIME.findall(quick.help), (parser.epilog, quick.help)


def test_the_real_learning_benchmark_is_labelled_with_the_task_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    sys.modules.pop("benchmarks.suite", None)
    from benchmarks import suite

    bench = next(b for _, benches in suite.GROUPS.values() for b in benches if b.name == "learning_real_magrpo")
    source = (ROOT / "benchmarks" / bench.script).read_text()
    default = re.search(r'add_argument\("--task", [^\n]*default="(\w+)"', source).group(1)
    assert default == "split"
    assert "split" in bench.what and "target-sum" not in bench.what
