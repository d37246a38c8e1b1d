"""Tests of the text-similarity rewards: `RougeLReward` (rouge-score) and `CodeBLEUReward` (codebleu).

Each reward must give exactly the value of the library it wraps, computed here by calling the library directly.
"""

from __future__ import annotations

import math
import sys

import pytest

pytest.importorskip("rouge_score")
pytest.importorskip("codebleu")

from codebleu import calc_codebleu  # noqa: E402
from rouge_score import rouge_scorer  # noqa: E402

from trl_marl.rewards.codebleu import CodeBLEUReward, strip_code_fences  # noqa: E402
from trl_marl.rewards.rouge import RougeLReward  # noqa: E402
from trl_marl.utils.text import completion_text  # noqa: E402

PAIRS = [  # (prediction, reference)
    ("the cat sat", "the cat sat on the mat"),
    ("Cats are sitting on mats, running and jumping.", "The cat sat on the mat and ran."),
    ("completely unrelated words", "the cat sat on the mat"),
    ("", "the cat sat on the mat"),
]

CODE_PAIRS = [  # (prediction, reference)
    ("def add(a, b):\n    return a + b\n", "def add(x, y):\n    return x + y\n"),
    (
        "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n",
        "def mean(values):\n    return sum(values) / len(values)\n",
    ),
    (
        "def f(n):\n    if n < 2:\n        return n\n    return f(n - 1) + f(n - 2)\n",
        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    ),
]


def rouge_l(prediction: str, reference: str, use_stemmer: bool = False) -> float:
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=use_stemmer)
    return scorer.score(reference, prediction)["rougeL"].fmeasure


# ----------------------------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------------------------


def test_completion_text_handles_plain_and_chat_completions() -> None:
    assert completion_text("hi") == "hi"
    assert completion_text([{"role": "assistant", "content": "hello"}]) == "hello"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"
    assert completion_text([]) == ""
    assert completion_text([{"role": "assistant", "content": None}]) == ""


# ----------------------------------------------------------------------------------------------------------------
# ROUGE-L
# ----------------------------------------------------------------------------------------------------------------


def test_rouge_l_hand_computed() -> None:
    # LCS("the cat sat", "the cat sat on the mat") = 3: P = 3/3, R = 3/6, F = 2 * 1 * 0.5 / 1.5 = 2/3
    reward = RougeLReward()
    assert reward.name == "rouge_l"
    assert reward(prompts=["p"], completions=["the cat sat"], reference=["the cat sat on the mat"]) == [
        pytest.approx(2 / 3)
    ]


@pytest.mark.parametrize("use_stemmer", [False, True])
def test_rouge_l_equals_rouge_score(use_stemmer: bool) -> None:
    predictions = [p for p, _ in PAIRS]
    references = [r for _, r in PAIRS]
    reward = RougeLReward(use_stemmer=use_stemmer)
    values = reward(prompts=[""] * len(PAIRS), completions=predictions, reference=references)
    expected = [rouge_l(p, r, use_stemmer) for p, r in PAIRS]
    assert values == pytest.approx(expected, abs=1e-12)
    assert values[2] == 0.0 and values[3] == 0.0
    if use_stemmer:  # "Cats"/"cat", "sitting"/"sat" differ: the stemmer changes the score of pair 1
        assert values[1] != pytest.approx(rouge_l(*PAIRS[1], use_stemmer=False))


def test_rouge_l_reads_chat_completions_and_a_configured_column() -> None:
    reward = RougeLReward(reference_column="summary")
    completions = [[{"role": "assistant", "content": p}] for p, _ in PAIRS]
    values = reward(prompts=[""] * len(PAIRS), completions=completions, summary=[r for _, r in PAIRS])
    assert values == pytest.approx([rouge_l(p, r) for p, r in PAIRS])


def test_rouge_l_agent_selection() -> None:
    a0 = ["the cat sat", "a dog"]
    a1 = ["on the mat", "barked loudly"]
    refs = ["the cat sat on the mat", "a dog barked loudly"]
    kwargs = {"agent_completions": [a0, a1], "agent_index": None, "reference": refs}
    assert RougeLReward()(prompts=["", ""], completions=a0, **kwargs) == pytest.approx(
        [rouge_l(a0[0], refs[0]), rouge_l(a0[1], refs[1])]
    )
    assert RougeLReward(agent_index=1)(prompts=["", ""], completions=a0, **kwargs) == pytest.approx(
        [rouge_l(a1[0], refs[0]), rouge_l(a1[1], refs[1])]
    )
    concat = RougeLReward(agent_index="concat", separator=" ")(prompts=["", ""], completions=a0, **kwargs)
    assert concat == pytest.approx([1.0, 1.0])
    with pytest.raises(ValueError, match="team has 2 agent"):
        RougeLReward(agent_index=2)(prompts=["", ""], completions=a0, **kwargs)
    with pytest.raises(ValueError, match="agent_completions"):
        RougeLReward(agent_index=1)(prompts=["", ""], completions=a0, reference=refs)


def test_rouge_l_missing_references_and_multiple_references() -> None:
    reward = RougeLReward()
    values = reward(
        prompts=[""] * 4,
        completions=["the cat sat", "the cat sat", "the cat sat", "the cat sat"],
        reference=[None, float("nan"), ["a dog", "the cat sat down"], "the cat"],
    )
    assert values[0] is None and values[1] is None
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    best = scorer.score_multi(["a dog", "the cat sat down"], "the cat sat")["rougeL"].fmeasure
    assert values[2] == pytest.approx(best)
    assert values[2] == pytest.approx(rouge_l("the cat sat", "the cat sat down"))  # the best reference counts
    assert values[3] == pytest.approx(rouge_l("the cat sat", "the cat"))


def test_rouge_l_missing_column_is_named() -> None:
    with pytest.raises(KeyError, match="'reference'.*received only the columns \\['text'\\]"):
        RougeLReward()(prompts=["p"], completions=["c"], text=["t"], agent_completions=[["c"]], turn=1)
    with pytest.raises(KeyError, match="'gold'"):
        RougeLReward(reference_column="gold")(prompts=["p"], completions=["c"], reference=["r"])


def test_rouge_l_rejects_bad_agent_index() -> None:
    with pytest.raises(ValueError, match="agent_index"):
        RougeLReward(agent_index="all")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------
# CodeBLEU
# ----------------------------------------------------------------------------------------------------------------


def codebleu(prediction: str, reference: str, weights: tuple[float, ...] = (0.25, 0.25, 0.25, 0.25)) -> float:
    return calc_codebleu([reference], [prediction], lang="python", weights=weights)["codebleu"]


def test_codebleu_equals_codebleu_package() -> None:
    reward = CodeBLEUReward()
    assert reward.name == "codebleu"
    values = reward(prompts=[""] * 3, completions=[p for p, _ in CODE_PAIRS], reference=[r for _, r in CODE_PAIRS])
    expected = [codebleu(p, r) for p, r in CODE_PAIRS]
    assert values == pytest.approx(expected, abs=1e-12)
    assert len(set(values)) == 3  # the pairs are distinguishable
    identical = reward(prompts=[""], completions=[CODE_PAIRS[0][1]], reference=[CODE_PAIRS[0][1]])
    assert identical == [pytest.approx(1.0)]


def test_codebleu_weights_option() -> None:
    weights = (0.1, 0.2, 0.3, 0.4)
    reward = CodeBLEUReward(weights=weights)
    values = reward(prompts=[""] * 3, completions=[p for p, _ in CODE_PAIRS], reference=[r for _, r in CODE_PAIRS])
    assert values == pytest.approx([codebleu(p, r, weights) for p, r in CODE_PAIRS], abs=1e-12)
    with pytest.raises(ValueError, match="4 numbers"):
        CodeBLEUReward(weights=(0.5, 0.5))


def test_strip_code_fences() -> None:
    assert strip_code_fences("x = 1\n") == "x = 1\n"  # no fence: unchanged
    assert strip_code_fences("Here:\n```python\nx = 1\ny = 2\n```\nDone.") == "x = 1\ny = 2"
    assert strip_code_fences("```\na = 1\n```\ntext\n~~~py\nb = 2\n~~~\n") == "a = 1\nb = 2"
    assert strip_code_fences("Sure!\n```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off


def test_codebleu_strips_fences_from_completions() -> None:
    prediction, reference = CODE_PAIRS[1]
    fenced = f"Here is the function:\n```python\n{prediction}```\nIt sums the values."
    reward = CodeBLEUReward()
    [value] = reward(prompts=[""], completions=[[{"role": "assistant", "content": fenced}]], reference=[reference])
    assert value == pytest.approx(codebleu(prediction, reference), abs=1e-12)
    [raw] = CodeBLEUReward(strip_fences=False)(prompts=[""], completions=[fenced], reference=[reference])
    assert raw == pytest.approx(codebleu(fenced, reference), abs=1e-12)
    assert raw != pytest.approx(value)


def test_codebleu_agent_selection_strips_each_agent() -> None:
    helper = "def helper(x):\n    return x * 2\n"
    main = "def main(y):\n    return helper(y) + 1\n"
    reference = helper + "\n\n" + main
    agent_completions = [[f"```python\n{helper}```"], [f"Main:\n```python\n{main}```"]]
    kwargs = {"agent_completions": agent_completions, "reference": [reference]}
    [concat] = CodeBLEUReward(agent_index="concat")(prompts=[""], completions=agent_completions[0], **kwargs)
    assert concat == pytest.approx(codebleu(helper.rstrip("\n") + "\n\n" + main.rstrip("\n"), reference), abs=1e-12)
    assert concat == pytest.approx(1.0)
    [second] = CodeBLEUReward(agent_index=1)(prompts=[""], completions=agent_completions[0], **kwargs)
    assert second == pytest.approx(codebleu(main.rstrip("\n"), reference), abs=1e-12)


def test_codebleu_empty_completion_and_missing_references() -> None:
    reference = CODE_PAIRS[0][1]
    reward = CodeBLEUReward()
    completions = ["", "```python\n```", "x = 1"]
    values = reward(prompts=[""] * 3, completions=completions, reference=[reference, reference, None])
    assert values[:2] == [0.0, 0.0]
    assert values[2] is None
    # codebleu itself gives an empty candidate theta = 0.25 (its `dataflow_match_score or 1`)
    [library] = CodeBLEUReward(empty_score=None)(prompts=[""], completions=[""], reference=[reference])
    assert library == pytest.approx(codebleu("", reference)) and library == pytest.approx(0.25)


def test_codebleu_missing_column_and_bad_language() -> None:
    with pytest.raises(KeyError, match="'reference'.*received only the columns \\['prompt_id'\\]"):
        CodeBLEUReward()(prompts=[""], completions=["x = 1"], prompt_id=[3])
    with pytest.raises(ValueError, match="`lang` must be one of"):
        CodeBLEUReward(lang="cobol")


def test_codebleu_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "codebleu", None)  # `import codebleu` now raises ImportError
    with pytest.raises(ImportError) as info:
        CodeBLEUReward()
    message = str(info.value)
    assert "trl-marl[rewards]" in message and "tree-sitter-python~=0.21" in message


def test_codebleu_broken_grammar_names_the_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    import codebleu.utils

    def broken(lang: str) -> None:
        raise TypeError("an integer is required")

    monkeypatch.setattr(codebleu.utils, "get_tree_sitter_language", broken)
    with pytest.raises(ImportError, match="tree-sitter-python~=0.21"):
        CodeBLEUReward()


def test_rewards_return_finite_floats_or_none() -> None:
    values = RougeLReward()(prompts=["", ""], completions=["a", "b"], reference=["a", None])
    assert values[0] is not None and math.isfinite(values[0]) and values[1] is None
