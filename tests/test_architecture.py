"""The layers of `docs/architecture.md` hold: no module imports upward, modules stay small, examples stand alone.

Every `import` statement of every module under `src/trl_marl` is read with `ast` (top-level, in functions and under
`if TYPE_CHECKING:` alike: a lazy import is still a dependency), resolved to a `trl_marl` module, and compared by
layer. A module may import its own layer and the layers below it, never one above. The same imports make a graph
that must have no circle, even within a layer. No module-level function takes the trainer: what reads or writes a
trainer's state is a method of the class that owns that state.
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
              "trl_marl.reward_contract")),
    ("tools", ("trl_marl.tools",)),
    ("rollout", ("trl_marl.rollout", "trl_marl.evaluation", "trl_marl.teamwork")),
    ("trainers", ("trl_marl.trainers", "trl_marl.legacy")),
    ("offline", ("trl_marl.toy", "trl_marl.offline_models")),
    ("scripts", ("trl_marl.scripts", "trl_marl.cli", "trl_marl.metrics", "trl_marl")),
]

# (importer, imported module prefix) -> why it is tolerated for now. Keep this list very short.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

# Circles of imports tolerated for now: the modules of the circle -> why. Keep this list very short; it only shrinks.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}

# Modules over MAX_LINES lines, each with the one responsibility that justifies its size, as a sentence. Keep this
# list very short.
MAX_LINES = 600
LONG_MODULES: dict[str, str] = {
    "trl_marl/sandbox/harness.py": "It is sent as one source file to each sandbox interpreter (stdlib only, no "
                                   "imports).",
    "trl_marl/data/team_coding.py": "It is a table of coding problems written as data, one entry per problem, with "
                                    "the split and loaders that read it.",
    "trl_marl/legacy/trainer.py": "The classic TRL 0.11 PPO loop is kept whole for drop-in users.",
    "trl_marl/trainers/magrpo/trainer.py": "MAGRPOTrainer reads top to bottom in one file (constructor, hooks, "
                                           "training step, backward per agent, logging, evaluation), as TRL keeps "
                                           "GRPOTrainer.",
    "trl_marl/trainers/ppo/trainer.py": "MultiAgentPPOTrainer reads top to bottom in one file (constructor, rollout "
                                        "and targets, hooks, the PPO loop, backward per policy slot), as TRL keeps "
                                        "PPOTrainer.",
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
        elif isinstance(node, ast.Call) and dynamic_import(node) is not None:
            name, anchor = dynamic_import(node)
            if name.startswith("."):  # import_module(".x", __package__ or __name__): relative to that anchor
                level = len(name) - len(name.lstrip("."))
                base = (package if anchor == "__package__" else module).split(".")
                base = base[: len(base) - (level - 1)]
                name = ".".join(base + ([name.lstrip(".")] if name.lstrip(".") else []))
            if name.split(".")[0] == "trl_marl":
                found.append((node.lineno, name))
    return found


def dynamic_import(node: ast.Call) -> tuple[str, str | None] | None:
    """`("trl_marl.x", anchor)` for `importlib.import_module("trl_marl.x"[, anchor])` or `__import__("trl_marl.x")`
    with a literal name (the anchor: the name of the `package` argument, e.g. `"__name__"`); None otherwise. Imports
    by a computed name cannot be read here: every one in the package has a literal name or a name from a literal
    table in the same module."""
    func = node.func
    called = (func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
              and func.value.id == "importlib" else func.id if isinstance(func, ast.Name) else None)
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    anchor = node.args[1].id if len(node.args) > 1 and isinstance(node.args[1], ast.Name) else None
    return first.value, anchor


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


def test_long_modules_state_a_reason_each():
    """Each entry of LONG_MODULES says, in a sentence, why the module stays whole."""
    vague = []
    for relative, reason in LONG_MODULES.items():
        text = reason.strip() if isinstance(reason, str) else ""
        if len(text.split()) < 5 or not text[0].isupper() or not text.endswith("."):
            vague.append(f"{relative}: {reason!r}")
    assert not vague, ("Each LONG_MODULES entry needs its reason as a sentence (a capital, five words or more, a "
                       "full stop):\n" + "\n".join(vague))


def parameter_names(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    args = function.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    return [a.arg for a in named]


def module_level_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions defined at module level (also under a module-level `if` or `try`), not methods."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                        *(stmt for handler in getattr(node, "handlers", []) for stmt in handler.body)]
    return found


def test_no_module_level_function_takes_the_trainer():
    """A function that reads or writes a trainer's state is a method of the class that owns it (the trainer, or a
    small class such as `trainers.magrpo.diagnostics.TrainingDiagnostics`), or it takes exactly the values it needs."""
    offenders = []
    for path in SOURCES:
        for function in module_level_functions(ast.parse(path.read_text(encoding="utf-8"))):
            if "trainer" in parameter_names(function):
                offenders.append(f"{path.relative_to(SRC)}:{function.lineno} {function.name}(trainer, ...)")
    assert not offenders, "Module-level functions that take the trainer:\n" + "\n".join(offenders)


def import_graph() -> dict[str, set[str]]:
    """module -> the trl_marl modules it imports (each import resolved to the longest module name it starts with)."""
    modules = {module_name(path): path for path in SOURCES}

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {resolve(target) for _, target in imported_modules(path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """The circles of `graph`: one per strongly connected component of two or more modules, as the component and a
    path through it that starts and ends at the same module (Tarjan's algorithm, then a shortest way back)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    circles = []
    for component in components:
        start = min(component)
        paths = {other: [start, other] for other in sorted(graph[start] & component)}
        frontier = list(paths)
        while start not in paths and frontier:
            node = frontier.pop(0)
            for other in sorted(graph[node] & component):
                if other not in paths:
                    paths[other] = [*paths[node], other]
                    frontier.append(other)
        circles.append((frozenset(component), paths.get(start, sorted(component))))
    return circles


def test_import_circles_are_found():
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        (frozenset("abc"), ["a", "b", "c", "a"])]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    """No circle of imports among trl_marl modules, lazy imports included: what two modules share moves down."""
    circles = [path for component, path in import_circles(import_graph()) if component not in KNOWN_CIRCLES]
    assert not circles, "Import circles (move what they share into a module below both):\n" + "\n".join(
        " -> ".join(circle) for circle in circles)


def test_known_circles_still_exist():
    """An entry of KNOWN_CIRCLES that no longer happens must be removed (the list only shrinks)."""
    found = {component for component, _ in import_circles(import_graph())}
    for circle, reason in KNOWN_CIRCLES.items():
        assert circle in found, f"{sorted(circle)} is no longer a circle: remove it from KNOWN_CIRCLES ({reason})"


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
def test_moved_env_names_are_gone_and_live_in_their_home(name, home):
    """The names that moved out of `trl_marl.envs` before any release keep no alias there (issue 52)."""
    import importlib

    import trl_marl.envs as envs

    assert not hasattr(envs, name)
    assert hasattr(importlib.import_module(home), name)


def test_dynamic_imports_count_as_imports(tmp_path):
    """`importlib.import_module` and `__import__` with a literal name are read like `import` statements, so an
    upward import cannot hide in one."""
    fake = PACKAGE / "envs" / "_fake_for_test.py"
    try:
        fake.write_text('import importlib\n\n\ndef f():\n    return importlib.import_module("trl_marl.rewards.coding")'
                        '\n\n\ndef g():\n    return importlib.import_module(".writing", __package__)\n'
                        '\n\ndef h():\n    return __import__("trl_marl.data")\n', encoding="utf-8")
        assert imported_modules(fake) == [(5, "trl_marl.rewards.coding"), (9, "trl_marl.envs.writing"),
                                          (13, "trl_marl.data")]
    finally:
        fake.unlink()
