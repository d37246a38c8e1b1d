"""Tests of the MAPoRL dataset loaders (`trl_marl.data`); `datasets.load_dataset` is replaced by synthetic rows."""

from __future__ import annotations

import builtins
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import datasets
import pytest

from trl_marl.data import (
    ANLI_LABELS,
    load_anli,
    load_gsm8k,
    load_tinygsm,
    normalize_number,
    parse_gsm8k_answer,
    tinygsm_answers,
)
from trl_marl.toy import toy_debate_dataset


class FakeHub:
    """Stands in for `datasets.load_dataset`: records each call and returns the dataset registered for it."""

    def __init__(self, tables: dict[str, dict[str, list[Any]]]) -> None:
        self.tables = tables
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> datasets.Dataset:
        self.calls.append((args, kwargs))
        return datasets.Dataset.from_dict(self.tables[kwargs.get("split", "train")])


# ----------------------------------------------------------------------------------------------------------------
# Numbers
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(72, "72"), (18.0, "18"), (2.5, "2.5"), (1 / 3, "0.333333"), (-0.0, "0"), (-3, "-3"), ("1,234", "1234"),
     (" $5 ", "5"), ("2.50", "2.5"), (True, None), (math.nan, None), (math.inf, None),
     ("abc", None), ("5 apples", None), (None, None), ([1], None),
     # the same rules as the verifier (trl_marl.utils.numbers): no scientific notation, fractions reduced, at
     # most 50 digits, thousands separators in groups of three, ASCII digits only
     ("1e3", None), ("6/8", "3/4"), ("-4/2", "-2"), ("1/0", None), (Fraction(1, 3), "1/3"), (Decimal("2.50"), "2.5"),
     (10**50 - 1, "9" * 50), (10**50, None), (1e60, None), ("1,2345", None), ("\uff11\uff18", None),
     (0.1 + 0.2, "0.3"), (2.675, "2.675"), (2 / 3, "0.666667"), ("50%", "50"), (" -$1,234.50 ", "-1234.5")],
)
def test_normalize_number(value, expected):
    assert normalize_number(value) == expected


def test_normalize_number_rounds_floats_like_round():
    assert normalize_number(2.675, decimals=2) == "2.67"  # 2.675 is 2.67499999... in binary
    assert normalize_number(0.125, decimals=2) == "0.12"  # half to even
    assert normalize_number(0.1 + 0.2, decimals=None) == "0.30000000000000004"
    assert normalize_number(1e20) == "100000000000000000000"


def test_parse_gsm8k_answer():
    assert parse_gsm8k_answer("She pays 9 * 8 = <<9*8=72>>72 dollars.\n#### 72") == "72"
    assert parse_gsm8k_answer("#### 1,200") == "1200"
    assert parse_gsm8k_answer("a #### 1 #### -3 ") == "-3"
    with pytest.raises(ValueError, match="####"):
        parse_gsm8k_answer("no marker 72")


# ----------------------------------------------------------------------------------------------------------------
# GSM8K
# ----------------------------------------------------------------------------------------------------------------

GSM8K = {
    "question": ["Natalia sold 48 clips. How many? ", "A farm has 1,000 hens and 200 more. How many?", "Q3"],
    "answer": ["48 + 24 = <<48+24=72>>72\n#### 72", "1000 + 200 = 1200\n#### 1,200", "x\n#### -4"],
}


def test_load_gsm8k(monkeypatch):
    hub = FakeHub({"test": GSM8K})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    dataset = load_gsm8k(split="test", max_rows=2)
    assert hub.calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    assert sorted(dataset.column_names) == ["answer", "answer_text", "question"]
    assert dataset["question"] == ["Natalia sold 48 clips. How many?", "A farm has 1,000 hens and 200 more. How many?"]
    assert dataset["answer"] == ["72", "1200"]
    assert dataset["answer_text"] == GSM8K["answer"][:2]
    assert load_gsm8k(split="test", config="socratic")["answer"] == ["72", "1200", "-4"]
    assert hub.calls[-1] == (("openai/gsm8k", "socratic"), {"split": "test"})


def test_load_gsm8k_local_files_and_bad_schema(monkeypatch, tmp_path):
    hub = FakeHub({"train": GSM8K, "bad": {"problem": ["q"], "answer": ["#### 1"]}})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    local = tmp_path / "gsm8k_train.jsonl"
    local.write_text("")  # the rows come from the fake `load_dataset`; the file must exist (`data.files`)
    assert len(load_gsm8k(data_files=str(local))) == 3
    assert hub.calls[-1] == (("json",), {"data_files": [str(local)], "split": "train"})
    with pytest.raises(ValueError, match="question"):
        load_gsm8k(split="bad")
    with pytest.raises(ValueError, match="max_rows"):
        load_gsm8k(max_rows=-1)


# ----------------------------------------------------------------------------------------------------------------
# TinyGSM (solutions run in the sandbox)
# ----------------------------------------------------------------------------------------------------------------

TINYGSM_CODE = [
    'def simple_math_problem() -> int:\n    """\n    Ann buys 3 bags of 4 apples.\n    """\n'
    "    bags = 3\n    apples = 4.0\n    result = bags * apples\n    return result\n",
    "def helper(x):\n    return x / 4\n\ndef simple_math_problem():\n    return helper(10)\n",
    "def simple_math_problem():\n    raise ValueError('no')\n",
    "import builtins\nbuiltins.TRL_MARL_RAN_HERE = True\ndef simple_math_problem():\n    return 'many'\n",
    "def simple_math_problem(:\n    return 1\n",
    "def solve(n):\n    return n\n",
]


def test_tinygsm_answers_run_in_the_sandbox():
    answers = tinygsm_answers(TINYGSM_CODE, max_workers=2)
    assert answers == ["12", "2.5", None, None, None, None]
    assert not hasattr(builtins, "TRL_MARL_RAN_HERE")  # dataset code never runs in this process
    assert tinygsm_answers([]) == []


def test_load_tinygsm(monkeypatch):
    table = {"question": [f"Problem {i}?" for i in range(len(TINYGSM_CODE))], "code": TINYGSM_CODE}
    hub = FakeHub({"train": table})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    dataset = load_tinygsm(max_rows=3, start=1)  # streams rows 1..3
    assert hub.calls == [(("TinyGSM/TinyGSM",), {"split": "train", "streaming": True})]
    assert sorted(dataset.column_names) == ["answer", "code", "question"]
    assert dataset["question"] == ["Problem 1?"]  # row 2 fails and row 3 returns text: dropped
    assert dataset["answer"] == ["2.5"]
    kept = load_tinygsm(max_rows=None, drop_failed=False)
    assert hub.calls[-1][1]["streaming"] is False
    assert kept["answer"] == ["12", "2.5", None, None, None, None]


# ----------------------------------------------------------------------------------------------------------------
# ANLI
# ----------------------------------------------------------------------------------------------------------------


def anli_split(tag: str) -> dict[str, list[Any]]:
    return {
        "uid": [f"{tag}-{i}" for i in range(4)],
        "premise": [f"Premise {tag} {i}. " for i in range(4)],
        "hypothesis": [f"Hypothesis {tag} {i}." for i in range(4)],
        "label": [0, 1, 2, -1],
        "reason": ["", "", "", ""],
    }


def test_load_anli(monkeypatch):
    hub = FakeHub({name: anli_split(name) for name in ("train_r1", "dev_r1", "dev_r2", "test_r3")})
    monkeypatch.setattr(datasets, "load_dataset", hub)
    dataset = load_anli()
    assert hub.calls == [(("facebook/anli",), {"split": "train_r1"})]
    assert dataset["answer"] == ["entailment", "neutral", "contradiction"]  # the unlabelled row is dropped
    assert ANLI_LABELS == ("entailment", "neutral", "contradiction")
    assert {"question", "answer", "premise", "hypothesis", "label", "uid"} <= set(dataset.column_names)
    question = dataset[0]["question"]
    assert question.startswith("Premise: Premise train_r1 0.\nHypothesis: Hypothesis train_r1 0.\n")
    assert all(label in question for label in ANLI_LABELS)

    both = load_anli(round=[1, 2], split="dev", max_rows=4)
    assert [c[1]["split"] for c in hub.calls[-2:]] == ["dev_r1", "dev_r2"]
    assert both["uid"] == ["dev_r1-0", "dev_r1-1", "dev_r1-2", "dev_r2-0"]
    assert load_anli(split="test_r3", round=1)["uid"] == ["test_r3-0", "test_r3-1", "test_r3-2"]
    custom = load_anli(question_template="{hypothesis} | {premise}", max_rows=1)
    assert custom["question"] == ["Hypothesis train_r1 0. | Premise train_r1 0."]


def test_load_anli_rejects_bad_rounds_and_splits():
    with pytest.raises(ValueError, match="round"):
        load_anli(round=4)
    with pytest.raises(ValueError, match="split"):
        load_anli(split="validation")


# ----------------------------------------------------------------------------------------------------------------
# Toy
# ----------------------------------------------------------------------------------------------------------------


def test_toy_debate_dataset():
    dataset = toy_debate_dataset(50, seed=3, max_operand=9)
    assert dataset.column_names == ["question", "answer"]
    assert len(dataset) == 50
    for row in dataset:
        a, b = (int(x) for x in row["question"].split("+"))
        assert 0 <= a <= 9 and 0 <= b <= 9
        assert row["answer"] == str(a + b)
    assert toy_debate_dataset(50, seed=3, max_operand=9)["question"] == dataset["question"]
    assert toy_debate_dataset(50, seed=4, max_operand=9)["question"] != dataset["question"]
    assert len(toy_debate_dataset(0)) == 0
    with pytest.raises(ValueError):
        toy_debate_dataset(-1)


def test_first_rows_caps_keeps_order_and_passes_none_through() -> None:
    from trl_marl.data.files import first_rows

    rows = datasets.Dataset.from_dict({"x": [5, 6, 7]})
    assert first_rows(rows, 2)["x"] == [5, 6]
    assert first_rows(rows, 0)["x"] == []
    assert first_rows(rows, 10)["x"] == [5, 6, 7]
    assert first_rows(rows, None) is rows
