"""The hidden-sum debate's data (`trl_marl.data.hidden_debate`): the one split shares no pair, rows hold each fact
in one agent's column only."""

from __future__ import annotations

from collections import Counter

import pytest

from trl_marl.data.hidden_debate import (
    HIDDEN_SUM_NUMBERS,
    PREFILL_COLUMNS,
    PRIVATE_COLUMNS,
    hidden_sum_row,
    hidden_sum_rows,
    hidden_sum_split,
    load_hidden_sum,
)


def unordered(pairs: list[tuple[int, int]]) -> set[tuple[int, int]]:
    return {(min(p), max(p)) for p in pairs}


def test_the_split_shares_no_pair_in_either_order_and_covers_every_question():
    train, heldout = hidden_sum_split()
    # 12 of the 45 unordered pairs of 1..9 are held out: {3, 3} and 11 pairs of two numbers (2 orders each)
    assert (len(train), len(heldout)) == (58, 23)
    assert not unordered(train) & unordered(heldout)
    assert not set(train) & {(b, a) for a, b in heldout}
    assert sorted(train + heldout) == [(a, b) for a in range(1, 10) for b in range(1, 10)]
    assert len(unordered(heldout)) == 12 and [p for p in heldout if p[0] == p[1]] == [(3, 3)]
    assert hidden_sum_split() == (train, heldout)  # one split: the same on every call
    assert hidden_sum_split(seed=1)[1] != heldout


def test_a_small_split_by_hand():
    train, heldout = hidden_sum_split(num_heldout=2, seed=0, numbers=(1, 2))
    # the unordered pairs of {1, 2} are (1, 1), (1, 2), (2, 2): two are held out, every order of them
    assert len(unordered(heldout)) == 2 and len(unordered(train)) == 1
    assert sorted(train + heldout) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert ((1, 2) in heldout) == ((2, 1) in heldout)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"num_heldout": 0}, r"`num_heldout` must be in 1..44"),
    ({"num_heldout": 45}, r"`num_heldout` must be in 1..44"),
    ({"numbers": (1, 1, 2)}, r"`numbers` must be distinct"),
])
def test_bad_split_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        hidden_sum_split(**kwargs)


def test_each_agent_column_holds_its_own_number_only():
    row = hidden_sum_row(7, 5)
    assert row == {
        "question": "What is a + b?", "answer": "12", "a": 7, "b": 5,
        "context_0": "You know that a = 7. Only the other agent knows b.",
        "context_1": "You know that b = 5. Only the other agent knows a.",
        "prefill_0": "I know that a = 7. So a + b = 7 +",
        "prefill_1": "I know that b = 5. So a + b = 5 +",
    }
    assert (PRIVATE_COLUMNS, PREFILL_COLUMNS) == (("context_0", "context_1"), ("prefill_0", "prefill_1"))


def test_rows_cycle_through_the_pairs_and_stay_in_their_split():
    train, heldout = hidden_sum_split()
    rows = hidden_sum_rows(heldout, 2 * len(heldout), seed=3)
    counts = Counter((r["a"], r["b"]) for r in rows)
    assert set(counts) == set(heldout) and set(counts.values()) == {2}
    assert all(r["answer"] == str(r["a"] + r["b"]) for r in rows)
    assert {(r["a"], r["b"]) for r in hidden_sum_rows(train, 200, seed=0)} == set(train)
    assert hidden_sum_rows(train, 10, seed=0) != hidden_sum_rows(train, 10, seed=1)
    assert set(HIDDEN_SUM_NUMBERS) == set(range(1, 10))
    with pytest.raises(ValueError, match="`pairs` is empty"):
        hidden_sum_rows([], 3, seed=0)


def test_load_hidden_sum_gives_every_question_of_a_split():
    from trl_marl.data import load_hidden_sum as exported

    assert exported is load_hidden_sum
    train, heldout = hidden_sum_split()
    dataset = load_hidden_sum("heldout", repeats=3, seed=1)
    assert len(dataset) == 69 and Counter((r["a"], r["b"]) for r in dataset) == dict.fromkeys(heldout, 3)
    assert {(r["a"], r["b"]) for r in load_hidden_sum("train")} == set(train)
    with pytest.raises(ValueError, match="split must be 'train' or 'heldout'"):
        load_hidden_sum("test")
    with pytest.raises(ValueError, match="`repeats` must be >= 1"):
        load_hidden_sum("train", repeats=0)
