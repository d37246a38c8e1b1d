"""The layers of `docs/architecture.md` hold: no module imports upward, modules stay small, examples stand alone.

Every `import` statement of every module under `src/trl_marl` is read with `ast` (top-level, in functions and under
`if TYPE_CHECKING:` alike: a lazy import is still a dependency), resolved to a `trl_marl` module, and compared by
layer. A module may import its own layer and the layers below it, never one above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "trl_marl"

# Lowest first; a module belongs to the layer of the longest prefix that names it. Keep in sync with
# docs/architecture.md ("Layers").
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("utils", ("trl_marl.utils",)),
    ("core", ("trl_marl.core",)),
    ("sandbox", ("trl_marl.sandbox",)),
    ("envs", ("trl_marl.envs",)),
    ("rewards", ("trl_marl.rewards",)),
    ("data", ("trl_marl.data",)),
    ("team", ("trl_marl._trl_compat", "trl_marl.model_card", "trl_marl.team", "trl_marl.validation",
              "trl_marl.rewarding", "trl_marl.generation")),
    ("rollout", ("trl_marl.rollout", "trl_marl.evaluation")),
    ("trainers", ("trl_marl.trainers", "trl_marl.legacy")),
    ("toy", ("trl_marl.toy",)),
    ("scripts", ("trl_marl.scripts", "trl_marl.cli", "trl_marl.metrics", "trl_marl")),
]

# (importer, imported module prefix) -> why it is tolerated for now. Keep this list very short.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

# Modules over MAX_LINES lines, each with the one responsibility that justifies its size. Keep this list very short.
MAX_LINES = 600
LONG_MODULES: dict[str, str] = {
    "trl_marl/sandbox/harness.py": "sent as one source file to each sandbox interpreter (stdlib only, no imports)",
    "trl_marl/team.py": "AgentTeam alone (layouts, slots, generation, log-probs, saving); helpers are in utils.tokens",
    "trl_marl/legacy/trainer.py": "the classic TRL 0.11 PPO loop, kept whole for drop-in users",
    "trl_marl/trainers/magrpo/trainer.py": "MAGRPOTrainer read top to bottom in one file, as TRL keeps GRPOTrainer",
    "trl_marl/trainers/ppo/trainer.py": "MultiAgentPPOTrainer read top to bottom in one file, as TRL keeps PPOTrainer",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer of LAYERS: add it there and to docs/architecture.md.")
    return best


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every trl_marl import in the file; `from . import x` yields the package."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "trl_marl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "trl_marl":
                continue
            if not node.module:  # `from . import a, b`: the submodules a and b
                found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, target))
    return found


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_in_a_layer():
    for path in SOURCES:
        layer_of(module_name(path))


def test_no_import_runs_upward():
    upward = []
    for path in SOURCES:
        importer = module_name(path)
        mine = layer_of(importer)
        for line, target in imported_modules(path):
            if layer_of(target) <= mine:
                continue
            if any(importer == a and (target == b or target.startswith(b + ".")) for a, b in KNOWN_UPWARD):
                continue
            upward.append(f"{path.relative_to(SRC)}:{line} ({LAYERS[mine][0]}) imports {target} "
                          f"({LAYERS[layer_of(target)][0]})")
    assert not upward, "Imports that run upward through the layers of docs/architecture.md:\n" + "\n".join(upward)


def test_known_upward_imports_still_exist():
    """An entry of KNOWN_UPWARD that no longer happens must be removed (the list only shrinks)."""
    for importer, target in KNOWN_UPWARD:
        path = SRC / (importer.replace(".", "/") + ".py")
        if not path.exists():
            path = SRC / importer.replace(".", "/") / "__init__.py"
        targets = [t for _, t in imported_modules(path)]
        assert any(t == target or t.startswith(target + ".") for t in targets), (importer, target)


def test_modules_stay_small():
    long = []
    for path in SOURCES:
        relative = path.relative_to(SRC).as_posix()
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and relative not in LONG_MODULES:
            long.append(f"{relative}: {lines} lines")
    assert not long, f"Modules over {MAX_LINES} lines (split them, or add a one-line reason to LONG_MODULES):\n" + (
        "\n".join(long))
    for relative in LONG_MODULES:
        lines = len((SRC / relative).read_text(encoding="utf-8").splitlines())
        assert lines > MAX_LINES, f"{relative} has {lines} lines now: remove it from LONG_MODULES."


def test_only_trl_compat_imports_trl_internals():
    """TRL's private modules and names are touched in `_trl_compat.py` alone."""
    offenders = []
    for path in SOURCES:
        if path.name == "_trl_compat.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "trl":
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(part.startswith("_") for part in (node.module or "").split(".")):
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno} from {node.module} import {private}")
    assert not offenders, "\n".join(offenders)


def test_examples_do_not_import_each_other():
    examples = sorted((ROOT / "examples").glob("*.py"))
    stems = {path.stem for path in examples}
    offenders = []
    for path in examples:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [(node.module or "").split(".")[0]]
            offenders += [f"{path.name}:{node.lineno} imports {name}" for name in names if name in stems]
    assert not offenders, "Examples must import the package, not each other:\n" + "\n".join(offenders)


def test_the_architecture_document_names_every_layer():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, prefixes in LAYERS:
        assert f"`{name}`" in text, name
        for prefix in prefixes:
            assert f"`{prefix.removeprefix('trl_marl.')}" in text or prefix == "trl_marl", prefix


@pytest.mark.parametrize(("name", "home"), [
    ("target_sum_reward", "trl_marl.rewards.arithmetic"),
    ("WritingTeamReward", "trl_marl.rewards.writing"),
    ("CodingTeamReward", "trl_marl.rewards.coding"),
    ("load_tldr", "trl_marl.data"),
])
def test_moved_env_names_resolve_with_a_deprecation_warning(name, home):
    import importlib

    import trl_marl.envs as envs

    with pytest.warns(DeprecationWarning, match=home):
        value = getattr(envs, name)
    assert value is getattr(importlib.import_module(home), name)
    with pytest.raises(AttributeError):
        envs.no_such_name  # noqa: B018
