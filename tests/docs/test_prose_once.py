"""Prose once: each argument and table lives in one place, and the other places link to it (issue 36, item 9).

The texts searched are the pages of docs/ and, for every module of `src/trl_marl`, its docstrings (module, class,
function) and its config fields' `help` strings: what a reader of the docs, of `help()` or of `--help` reads.
README.md is the project's front page and may summarise.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

COPY_WORDS = 25  # a run of this many words in two places is a copy

# Copies still tolerated: (file, file) -> why. The list only shrinks.
KNOWN_COPIES: dict[tuple[str, str], str] = {
    ("src/trl_marl/rewards/codebleu.py", "src/trl_marl/rewards/rouge.py"): (
        "Each reward function documents the arguments of TRL's reward signature in its own Args section, as every "
        "Google-style docstring does."
    ),
}


def docstrings_and_help(path: Path) -> str:
    """A module's docstrings and the literal `help` strings of its fields, one per paragraph."""
    texts = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            texts.append(ast.get_docstring(node) or "")
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "help":
                    try:
                        texts.append(str(ast.literal_eval(value)))
                    except ValueError:  # a help built by an expression: not prose written here
                        pass
    return "\n\n".join(texts)


def prose() -> dict[str, str]:
    """Every docs page and every module's docstrings and help, by path relative to the repository."""
    pages = sorted((ROOT / "docs").glob("*.md"))
    texts = {path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8") for path in pages}
    for path in sorted((ROOT / "src" / "trl_marl").rglob("*.py")):
        texts[path.relative_to(ROOT).as_posix()] = docstrings_and_help(path)
    return texts


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def shared_runs(texts: dict[str, str], length: int) -> dict[tuple[str, str], str]:
    """(file, file) -> the first run of `length` consecutive words that both contain (case and punctuation aside)."""
    owners: dict[tuple[str, ...], str] = {}
    shared: dict[tuple[str, str], str] = {}
    for name, text in texts.items():
        tokens = words(text)
        for start in range(len(tokens) - length + 1):
            run = tuple(tokens[start:start + length])
            first = owners.setdefault(run, name)
            if first != name:
                shared.setdefault((first, name), " ".join(run))
    return shared


def holders(texts: dict[str, str], pattern: str) -> list[str]:
    """The files whose text (whitespace and backticks aside) matches `pattern`."""
    regex = re.compile(pattern)
    return sorted(name for name, text in texts.items() if regex.search(" ".join(text.replace("`", "").split())))


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    return prose()


def test_shared_runs_are_found() -> None:
    one = "the team loss is a sum of per agent terms so its gradient is the sum of theirs"
    found = shared_runs({"a.md": f"Intro. {one.upper()}!", "b.py": f"{one}, as said", "c.md": "other words"}, 18)
    assert found == {("a.md", "b.py"): one}
    assert shared_runs({"a.md": one, "b.md": one}, 19) == {}  # 18 words: shorter than the run asked for


def test_the_equation_table_is_in_one_place(texts: dict[str, str]) -> None:
    assert holders(texts, r"\| paper \| equation \| function \|") == ["docs/architecture.md"]
    import trl_marl.core

    assert "docs/architecture.md" in (trl_marl.core.__doc__ or "")


def test_the_backward_per_agent_argument_is_in_one_place(texts: dict[str, str]) -> None:
    """The step of the argument, the gradient of the sum is the sum of the agents' gradients, is written once."""
    assert holders(texts, r"grad L = sum_\w grad L_\w") == ["src/trl_marl/trainers/per_agent.py"]
    for page in ("docs/magrpo.md", "docs/extending.md"):
        assert "(../src/trl_marl/trainers/per_agent.py)" in texts[page], page


@pytest.mark.parametrize("config", ["MAGRPOConfig", "MultiAgentPPOConfig"])
def test_the_backward_per_agent_help_is_short_and_links_the_argument(config: str) -> None:
    import trl_marl.trainers

    field = {f.name: f for f in dataclasses.fields(getattr(trl_marl.trainers, config))}["backward_per_agent"]
    text = field.metadata["help"]
    assert "trl_marl.trainers.per_agent" in text
    assert len(text.split()) <= 40, text


def test_no_long_copy_between_two_places(texts: dict[str, str]) -> None:
    """No run of `COPY_WORDS` words appears in two docs pages or modules: one place says it, the others link there."""
    copies = shared_runs(texts, COPY_WORDS)
    unexpected = {pair: run for pair, run in copies.items() if tuple(sorted(pair)) not in KNOWN_COPIES}
    assert not unexpected, "Prose written twice (keep one, link to it):\n" + "\n".join(
        f"{a} and {b}: {run!r}" for (a, b), run in unexpected.items())
    for pair, reason in KNOWN_COPIES.items():
        assert pair in copies or pair[::-1] in copies, f"{pair} no longer share prose: remove it ({reason})"
