"""Extract the cooperative writing texts (`trl_marl.data.team_writing`) from the Python standard library's docstrings.

Run with CPython 3.11.7 (the version the shipped file was extracted from; another version's docstrings differ, so the
script refuses it unless `--any-version` is given):

    python scripts/extract_team_writing.py            # writes src/trl_marl/data/team_writing.jsonl

What it keeps. The standard library's Python sources are parsed with `ast` (nothing is imported, so no module runs):
the docstrings of modules and of public classes, functions and methods (no name part starting with "_"), outside
`test`, `idlelib`, `lib2to3`, `tkinter`, `turtledemo`, `pydoc_data`, `encodings`, `ensurepip`, `venv` and private
modules. A docstring is kept when

- its first line is a one-line summary (a capital first letter, a final full stop, 3-25 words, no markup) followed
  by a blank line: the author's own short version of the explanation, the row's `reference`;
- the prose paragraphs that follow it (up to the first paragraph with doctest lines `>>>`, reST markup (`::`,
  backquotes, `:role:`), an indented or bulleted block, a section header such as "Args:", or many code tokens) hold
  40 to 150 words: the row's `text`, each paragraph's lines joined with single spaces and `*emphasis*` marks removed;
- the text does not open with the summary's words (copying them would be the short summary), does not say "XXX"
  (a maintainer's note, not documentation), and no earlier docstring had the same text.

Changes made to the PSF's text (the summary the PSF License asks for): the docstrings were cut to their summary line
and leading prose paragraphs, whitespace was normalised and `*emphasis*` marks removed; nothing else was edited.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import sysconfig
from pathlib import Path

PYTHON_VERSION = (3, 11, 7)
OUTPUT = Path(__file__).resolve().parents[1] / "src" / "trl_marl" / "data" / "team_writing.jsonl"
SKIPPED_PACKAGES = frozenset({"test", "tests", "idlelib", "lib2to3", "tkinter", "turtledemo", "pydoc_data",
                              "encodings", "ensurepip", "venv", "site-packages", "__pycache__"})
MIN_WORDS, MAX_WORDS = 40, 150
SUMMARY_WORDS = (3, 25)

# a paragraph with any of these is not prose: doctest, reST, an indented or bulleted block, a "Section:" header,
# a "name -- description" definition line, template or format characters
_NOT_PROSE = re.compile(r"(>>>|::|`|:\w+:|\*\*|^\s*[-*+] |^\s*\d+[.)] |^\s+\S|[{}<>#\\$]|%\(|^[A-Z][a-z]+:\s*$"
                        r"|^\S+ -+ )", re.MULTILINE)
_CODE_TOKEN = re.compile(r"[_=()\[\]]|\w\.\w")
_EMPHASIS = re.compile(r"\*(\w[^*]*?)\*")


def is_codey(paragraph: str, limit: float = 0.06) -> bool:
    """Whether more than `limit` of the paragraph's tokens look like code (`a_b`, `f()`, `x=1`, `a.b`)."""
    tokens = paragraph.split()
    code = sum(1 for t in tokens if _CODE_TOKEN.search(t) and t not in ("e.g.", "i.e."))
    return code > limit * max(1, len(tokens))


def split_docstring(doc: str) -> tuple[str, str] | None:
    """`(summary line, explanation)` of a cleaned docstring, or None when it does not qualify (module docstring)."""
    lines = doc.split("\n")
    if len(lines) < 3 or lines[1].strip():
        return None
    summary = lines[0].strip()
    if (not summary[:1].isupper() or not summary.endswith(".") or _NOT_PROSE.search(summary)
            or not SUMMARY_WORDS[0] <= len(summary.split()) <= SUMMARY_WORDS[1]):
        return None
    paragraphs = []
    for paragraph in "\n".join(lines[2:]).split("\n\n"):
        if not paragraph.strip() or _NOT_PROSE.search(paragraph) or is_codey(paragraph):
            break
        paragraphs.append(" ".join(paragraph.split()))
    text = _EMPHASIS.sub(r"\1", " ".join(paragraphs))
    summary = _EMPHASIS.sub(r"\1", summary)
    if not MIN_WORDS <= len(text.split()) <= MAX_WORDS or not text.endswith((".", ")")) or "XXX" in text:
        return None
    if text.lower().startswith(summary.lower().rstrip(".")):  # the short version would be the text's first words
        return None
    return summary, text


def docstrings(root: str) -> list[tuple[str, str, str]]:
    """`(module, qualname, cleaned docstring)` of every public module, class and function under `root`, in a fixed
    order (directories and files sorted)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        relative = os.path.relpath(dirpath, root)
        parts = [] if relative == "." else relative.split(os.sep)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_PACKAGES and not d.startswith(("_", "test"))
                             and os.path.exists(os.path.join(dirpath, d, "__init__.py")))
        for filename in sorted(filenames):
            if not filename.endswith(".py") or (filename.startswith(("_", "test")) and filename != "__init__.py"):
                continue
            module = ".".join(parts + ([] if filename == "__init__.py" else [filename[:-3]]))
            if not module:
                continue
            try:
                tree = ast.parse(Path(dirpath, filename).read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue

            def visit(node: ast.AST, qualname: str, module: str = module) -> None:
                doc = ast.get_docstring(node, clean=True)
                if doc:
                    found.append((module, qualname, doc))
                for child in node.body:
                    if (isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                            and not child.name.startswith("_")):
                        visit(child, f"{qualname}.{child.name}" if qualname else child.name)

            visit(tree, "")
    return found


def extract(root: str) -> list[dict[str, str]]:
    """The rows: `text`, `reference`, `source` (module.qualname) and `module` (the top-level package, the split's
    unit)."""
    rows, seen = [], set()
    for module, qualname, doc in docstrings(root):
        parts = split_docstring(doc)
        if parts is None or parts[1] in seen:
            continue
        seen.add(parts[1])
        source = f"{module}.{qualname}" if qualname else module
        rows.append({"text": parts[1], "reference": parts[0], "source": source, "module": module.split(".")[0]})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--any-version", action="store_true",
                        help=f"run on another Python than {'.'.join(map(str, PYTHON_VERSION))} (the rows differ)")
    args = parser.parse_args(argv)
    if tuple(sys.version_info[:3]) != PYTHON_VERSION and not args.any_version:
        raise SystemExit(f"The shipped texts come from CPython {'.'.join(map(str, PYTHON_VERSION))}; this is "
                         f"{sys.version.split()[0]}. Use that version, or --any-version for a different set.")
    rows = extract(sysconfig.get_paths()["stdlib"])
    with open(args.output, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    modules = sorted({r["module"] for r in rows})
    print(f"wrote {len(rows)} rows from {len(modules)} top-level modules to {args.output}")


if __name__ == "__main__":
    main()
