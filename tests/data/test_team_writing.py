"""The cooperative writing texts (`trl_marl.data.team_writing`): the split is by module and fixed, every text is prose
of the documented length, the PSF's licence and notice ship with them, and the extraction script reproduces them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from helpers import load_script
from trl_marl.data import load_team_writing
from trl_marl.data.team_writing import (
    COLUMNS,
    HELDOUT_MODULES,
    PSF_NOTICE,
    PYTHON_VERSION,
    team_writing_rows,
)
from trl_marl.utils.text import words

ROOT = Path(__file__).resolve().parents[2]
ROWS = team_writing_rows("all")


@pytest.fixture(scope="module")
def script():
    return load_script(ROOT / "scripts" / "extract_team_writing.py")


def test_split_is_by_module_fixed_and_disjoint():
    train, held = team_writing_rows("train"), team_writing_rows("heldout")
    assert (len(ROWS), len(train), len(held)) == (174, 130, 44)
    assert HELDOUT_MODULES == ("abc", "cmd", "http", "logging", "lzma", "pathlib", "symtable", "textwrap", "turtle",
                               "unittest", "weakref", "wsgiref")  # changing it voids the records
    train_modules, held_modules = {r["module"] for r in train}, {r["module"] for r in held}
    assert not train_modules & held_modules and held_modules == set(HELDOUT_MODULES)
    assert len(train_modules) == 43
    assert sorted(r["source"] for r in train + held) == sorted(r["source"] for r in ROWS)
    for row in ROWS:  # the split's unit is the top-level module of the source
        assert row["source"].split(".")[0] == row["module"]


def test_every_text_is_prose_of_the_documented_length():
    assert len({r["source"] for r in ROWS}) == len(ROWS) and len({r["text"] for r in ROWS}) == len(ROWS)
    for row in ROWS:
        assert tuple(row) == COLUMNS
        assert 40 <= len(row["text"].split()) <= 150, row["source"]
        assert 3 <= len(row["reference"].split()) <= 25 and row["reference"].endswith("."), row["source"]
        for field in ("text", "reference"):
            value = row[field]
            assert ">>>" not in value and "::" not in value and "`" not in value and "\n" not in value, row["source"]
            assert not re.search(r":\w+:", value) and value == value.strip(), row["source"]
    # the reference is the author's own short version, not a copy of the text's opening
    assert sum(r["text"].startswith(r["reference"][:-1]) for r in ROWS) == 0
    mean_words = sum(len(words(r["text"])) for r in ROWS) / len(ROWS)
    assert 55 < mean_words < 70


def test_loader_rows_and_bad_split():
    dataset = load_team_writing("heldout")
    assert dataset.column_names == list(COLUMNS) and len(dataset) == 44
    assert dataset[0] == team_writing_rows("heldout")[0]
    rows = team_writing_rows("train")
    rows[0]["text"] = "changed"  # each call returns fresh rows
    assert team_writing_rows("train")[0]["text"] != "changed"
    with pytest.raises(ValueError, match="split must be 'train', 'heldout' or 'all', got 'test'"):
        team_writing_rows("test")


def test_the_psf_licence_and_notice_ship_with_the_texts():
    licence = (ROOT / "LICENSES" / "PSF-2.0.txt").read_text()
    flat = " ".join(licence.split())
    assert PSF_NOTICE in flat and PSF_NOTICE.startswith("Copyright (c) 2001, 2002,")
    assert PSF_NOTICE.endswith("2022, 2023 Python Software Foundation; All Rights Reserved")
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence and "summary of the changes" in flat.lower()
    assert "team_writing.jsonl" in licence and "scripts/extract_team_writing.py" in licence


def test_the_wheel_carries_the_texts_and_the_licence():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "LICENSES/*.txt" in project["project"]["license-files"]  # the wheel carries the licence
    assert "team_writing.jsonl" in project["tool"]["setuptools"]["package-data"]["trl_marl.data"]


def test_split_docstring_keeps_the_summary_and_the_prose_before_any_code(script):
    prose = " ".join(["The helper reads every line of the file and counts the words it finds there."] * 4)
    doc = f"Count the words of a file.\n\n{prose}\nIt returns *count* as an integer.\n\n>>> count('x')\n3"
    summary, text = script.split_docstring(doc)
    assert summary == "Count the words of a file."
    assert text == prose + " It returns count as an integer."  # emphasis marks removed, lines joined
    assert script.split_docstring(doc.replace("\n\n", "\n", 1)) is None  # no blank line after the summary
    assert script.split_docstring("Count words.\n\nToo short to be a source text.") is None
    assert script.split_docstring(f"count the words of a file.\n\n{prose}") is None  # no capital: not a summary
    # a paragraph with code tokens or reST ends the text; what is left is too short
    assert script.split_docstring(f"Count the words.\n\nShort intro.\n\n{prose} Use `wc` instead.") is None
    assert script.split_docstring(f"Count the words.\n\nSee f(x_1)=g(y_2) and h(z_3)=k(w_4) now.\n\n{prose}") is None


@pytest.mark.skipif(".".join(map(str, sys.version_info[:3])) != PYTHON_VERSION,
                    reason=f"the shipped texts were extracted from CPython {PYTHON_VERSION}")
def test_the_extraction_script_reproduces_the_shipped_file(script, tmp_path):
    out = tmp_path / "rows.jsonl"
    script.main(["--output", str(out)])
    shipped = ROOT / "src" / "trl_marl" / "data" / "team_writing.jsonl"
    assert out.read_text(encoding="utf-8") == shipped.read_text(encoding="utf-8")


def test_the_extraction_script_refuses_another_python(script, monkeypatch):
    monkeypatch.setattr(script, "PYTHON_VERSION", (2, 7, 18))
    with pytest.raises(SystemExit, match="CPython 2.7.18"):
        script.main(["--output", "/nonexistent/rows.jsonl"])
