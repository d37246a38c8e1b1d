"""A mistyped option is refused before the imports (issue 53): from the names shipped with the package while the
installed versions and config sources are the ones they were written under, else once a command of the same kind has
run (the parser records its option names under a fingerprint of the installed versions and sources); the early check
gives the parser's own lines from them (`scripts.option_names`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_marl.scripts import option_names
from trl_marl.scripts.arguments import unknown_name_messages
from trl_marl.scripts.early import unknown_names_early
from trl_marl.scripts.option_names import (
    OptionNames,
    fingerprint,
    installed_versions,
    known_option_names,
    record_option_names,
    shipped_option_names,
    source_digest,
)

ROOT = Path(__file__).resolve().parents[2]
WRITING = str(ROOT / "examples" / "configs" / "magrpo_writing.yaml")
HEAVY = ("torch", "transformers", "peft", "datasets", "trl.trainer")
NAMES = OptionNames(frozenset({"--learning_rate", "--lr_scheduler_type", "--seed", "--config", "-h", "--help"}),
                    frozenset({"learning_rate", "lr_scheduler_type", "seed"}), True)


@pytest.fixture
def no_shipped_names(tmp_path: Path, monkeypatch) -> None:
    """Ignore the names shipped with the package (as an install with other versions would)."""
    monkeypatch.setattr(option_names, "SHIPPED", tmp_path / "no-shipped-names.json")


def test_names_are_recorded_and_read_per_command_and_fingerprint(tmp_path: Path, monkeypatch,
                                                                 no_shipped_names) -> None:
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    assert known_option_names("trl-marl magrpo") is None
    record_option_names("trl-marl magrpo", NAMES)
    assert known_option_names("trl-marl magrpo") == NAMES
    assert known_option_names("trl-marl maporl gsm8k") is None  # another command's names are its own
    [path] = (tmp_path / "options").iterdir()
    assert path.name == f"trl-marl-magrpo-{fingerprint()}.json" and fingerprint() == fingerprint()
    real = option_names.metadata.version
    monkeypatch.setattr(option_names.metadata, "version", lambda name: "9.9" if name == "trl" else real(name))
    assert known_option_names("trl-marl magrpo") is None  # another TRL: other names, maybe
    monkeypatch.undo()
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    monkeypatch.setattr(option_names, "SHIPPED", tmp_path / "no-shipped-names.json")
    path.write_text("{not json")
    assert known_option_names("trl-marl magrpo") is None  # a damaged file is ignored, then rewritten
    record_option_names("trl-marl magrpo", NAMES)
    assert known_option_names("trl-marl magrpo") == NAMES
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("TRL_MARL_CACHE", str(blocked))  # a cache that cannot be written is skipped
    record_option_names("trl-marl magrpo", NAMES)
    assert known_option_names("trl-marl magrpo") is None


def test_the_messages_are_the_parsers_for_the_same_names(tmp_path: Path, monkeypatch) -> None:
    from trl_marl.scripts.magrpo import build_parser

    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    parser = build_parser(prog="trl-marl magrpo")
    record_option_names(parser.prog, parser.option_names())
    config = tmp_path / "run.yaml"
    config.write_text("num_generation: 4\nlearning_rate: 1.0e-5\nenv: writing\n")
    lines = [["--config", str(config)], ["--lerning_rate", "1e-4"], ["--learning_rat=1e-4"], ["--seed", "3"],
             ["--config", WRITING, "--num_generations", "2", "--bogus"], ["--config", str(tmp_path / "none.yaml")]]
    for args in lines:
        assert unknown_names_early(args, "trl-marl magrpo") == parser.unknown_names(args), args
    assert unknown_names_early(lines[0], "trl-marl magrpo") == [
        f"{config} sets `num_generation`, which is not an option: did you mean `num_generations` or "
        "`num_generations_eval`?"]
    assert unknown_names_early(lines[2] + lines[3], "trl-marl magrpo") == []  # an abbreviation is argparse's
    assert unknown_name_messages(["--lr", "1"], NAMES) == []  # a prefix of two names: argparse calls it ambiguous
    assert unknown_name_messages(["--rate", "1"], NAMES) == ["unknown option `--rate`"]
    config.write_text("a: [unclosed\n")
    assert unknown_names_early(["--config", str(config)], "trl-marl magrpo") == []  # the parser says why


_PROBE = """
import json, sys
from pathlib import Path
from trl_marl.cli import main
from trl_marl.scripts import option_names
if sys.argv[2] == "ignore the shipped names":
    option_names.SHIPPED = Path("no-shipped-names.json")
elif sys.argv[2] != "-":
    option_names.SHIPPED = Path(sys.argv[2])
try:
    main(json.loads(sys.argv[1]))
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "loaded": [m for m in HEAVY if m in sys.modules]}))
"""


@pytest.mark.parametrize("command", [["magrpo"], ["maporl", "hidden_sum"]])
def test_the_second_mistyped_command_is_refused_before_the_imports(tmp_path: Path, command: list[str]) -> None:
    """Where the shipped names do not apply (other versions, an edited config), the first command's parser records
    the names and the second command is refused early."""
    config = str(ROOT / "examples" / "configs" / ("magrpo_writing.yaml" if command == ["magrpo"]
                                                   else "maporl_hidden_sum.yaml"))
    argv = [*command, "--config", config, "--model_name_or_path", "toy", "--lerning_rate", "1e-4"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_MARL_CACHE": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PROBE}", json.dumps(argv),
                            "ignore the shipped names"], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=300) for _ in range(2)]
    results = [json.loads(run.stdout.strip().splitlines()[-1]) for run in runs]
    assert results[0]["code"] == 2 and "transformers" in results[0]["loaded"]  # the parser's check, after the imports
    assert results[1] == {"code": 2, "loaded": []}  # the same check, before them
    prog = "trl-marl " + " ".join(command)
    # our lines only: importing the libraries may log their own (bitsandbytes with `kernels` installed, offline)
    ours = [[line for line in run.stderr.splitlines() if line.startswith(prog)] for run in runs]
    assert ours[1] == ours[0]
    assert ours[1] == [
        f"{prog}: unknown option `--lerning_rate`: did you mean `--learning_rate`?",
        f"{prog}: `{prog} --help-all` lists every option."]


def test_the_demo_records_the_training_commands_names(tmp_path: Path, monkeypatch) -> None:
    """The README's first command is the demo: after it, the first training command is checked before its imports."""
    from trl_marl.scripts.demo import record_training_option_names
    from trl_marl.scripts.help import MAPORL_TASKS
    from trl_marl.scripts.maporl import build_parser as maporl_parser

    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path))
    record_training_option_names()
    names = known_option_names("trl-marl magrpo")
    assert names is not None and "--learning_rate" in names.options and "num_generations" in names.fields
    for task in MAPORL_TASKS:
        assert known_option_names(f"trl-marl maporl {task}") == maporl_parser(task).option_names(), task
    assert unknown_names_early(["--lerning_rate", "1"], "trl-marl maporl gsm8k") == [
        "unknown option `--lerning_rate`: did you mean `--learning_rate`?"]


def test_the_shipped_names_are_current() -> None:
    """The shipped file holds every training command's names under the installed versions and sources; a developer who
    changes a config field (or a pin) reruns `python -m trl_marl.scripts.option_snapshot`."""
    from trl_marl.scripts.option_snapshot import snapshot

    shipped = json.loads(option_names.SHIPPED.read_text())
    live = snapshot()
    fix = "run `python -m trl_marl.scripts.option_snapshot` and commit scripts/option_names.json"
    assert sorted(shipped["commands"]) == sorted(live["commands"]), fix
    for command, entry in live["commands"].items():
        assert shipped["commands"][command]["sources"] == entry["sources"], f"{command}: {fix}"
        if shipped["versions"] == installed_versions():
            assert shipped["commands"][command] == entry, f"{command}: {fix}"
            names = shipped_option_names(command)
            assert names is not None and sorted(names.options) == entry["options"]
        else:  # another version of TRL or transformers may have other options: the parser decides
            assert shipped_option_names(command) is None


def test_shipped_names_apply_only_to_their_versions_and_sources(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "names.json"
    entry = {"options": ["--seed", "--help"], "fields": ["seed"], "allow_abbrev": True,
             "sources": {"scripts/magrpo.py": source_digest("scripts/magrpo.py")}}
    data = {"versions": installed_versions(), "commands": {"trl-marl magrpo": entry}}
    path.write_text(json.dumps(data))
    names = OptionNames(frozenset({"--seed", "--help"}), frozenset({"seed"}), True)
    assert shipped_option_names("trl-marl magrpo", path) == names
    assert shipped_option_names("trl-marl maporl gsm8k", path) is None  # not shipped
    path.write_text(json.dumps({**data, "versions": {**data["versions"], "trl": "0.11.4"}}))
    assert shipped_option_names("trl-marl magrpo", path) is None  # another TRL
    edited = {**entry, "sources": {"scripts/magrpo.py": "0" * 64}}
    path.write_text(json.dumps({**data, "commands": {"trl-marl magrpo": edited}}))
    assert shipped_option_names("trl-marl magrpo", path) is None  # an edited config: its parser decides
    gone = {**entry, "sources": {"scripts/no_such_module.py": ""}}
    path.write_text(json.dumps({**data, "commands": {"trl-marl magrpo": gone}}))
    assert shipped_option_names("trl-marl magrpo", path) is None
    path.write_text("[1, 2")
    assert shipped_option_names("trl-marl magrpo", path) is None
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(option_names, "SHIPPED", tmp_path / "shipped.json")
    (tmp_path / "shipped.json").write_text(json.dumps(data))
    assert known_option_names("trl-marl magrpo") == names  # nothing recorded yet: the shipped names
    record_option_names("trl-marl magrpo", NAMES)
    assert known_option_names("trl-marl magrpo") == NAMES  # what this install's parser recorded comes first


@pytest.mark.parametrize("command", [["magrpo"], ["maporl", "gsm8k"]])
def test_the_first_mistyped_command_after_an_install_is_refused_before_the_imports(tmp_path: Path,
                                                                                  command: list[str]) -> None:
    """An empty cache, as after `pip install`: the shipped names refuse the option with the parser's lines."""
    from trl_marl.scripts.magrpo import build_parser as magrpo_parser
    from trl_marl.scripts.maporl import build_parser as maporl_parser
    from trl_marl.scripts.option_snapshot import write_snapshot

    prog = "trl-marl " + " ".join(command)
    shipped = tmp_path / "option_names.json"  # the file a release ships, written for the versions installed here
    write_snapshot(shipped)
    assert shipped_option_names(prog, shipped) is not None
    argv = [*command, "--model_name_or_path", "toy", "--lerning_rate", "1e-4", "--num_generation", "2"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_MARL_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PROBE}", json.dumps(argv), str(shipped)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"code": 2, "loaded": []}
    parser = magrpo_parser(prog=prog) if command == ["magrpo"] else maporl_parser(command[1], prog=prog)
    assert run.stderr.splitlines() == [f"{prog}: {line}" for line in parser.unknown_names(argv[len(command):])] + [
        f"{prog}: `{prog} --help-all` lists every option."]
    assert not (tmp_path / "cache").exists()  # nothing recorded: the names were the shipped ones
