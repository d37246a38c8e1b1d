"""`ChatSplitItemsEnv` (division of labour as chat prompts) and its team reward `SplitItemsReward`."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.envs.coordination import ChatSplitItemsEnv, join_items
from trl_marl.rewards.coordination import SplitItemsReward, first_word
from trl_marl.utils.tokens import tokenize_prompts


@pytest.mark.parametrize("text, word", [
    (" 37. I take the first", "37"), ("52", "52"), (' "Blue"', "blue"), (" (52)", "52"), ("37<|im_end|>", "37"),
    ([{"role": "assistant", "content": " 9 now"}], "9"),
    ("37.5", None), ("3,700", None), (" ...", None), ("", None), ([], None), ("_37", None),
])
def test_first_word(text: Any, word: str | None) -> None:
    assert first_word(text) == word


def test_reward_counts_distinct_items_named() -> None:
    reward = SplitItemsReward()
    agents = [[" 37.", " 37", " 37", " 12", " 37 52", "52"], [" 52", " 37.", " nine", " 13", " 37", " 37"]]
    items = [[37, 52]] * 6
    # both items; the same item twice counts once; a non-item counts nothing; only the FIRST word is read
    assert reward(None, None, agent_completions=agents, items=items) == [1.0, 0.5, 0.5, 0.0, 0.5, 1.0]


def test_reward_three_items_words_and_case() -> None:
    reward = SplitItemsReward(items_column="things")
    agents = [[" Red", " red"], [" blue.", " Red"], [" green!", " cat"]]
    things = [["red", "blue", "green"]] * 2
    assert reward(None, None, agent_completions=agents, things=things) == [1.0, pytest.approx(1 / 3)]
    with pytest.raises(KeyError, match="needs the dataset column 'things'"):
        reward(None, None, agent_completions=agents, items=[["red"]] * 2)


def test_prompts() -> None:
    env = ChatSplitItemsEnv(2)
    assert env.agent_prompt({"items": [37, 52]}, 1, Transcript()) == [
        {"role": "system", "content": "Answer with one number."},
        {"role": "user", "content": "The numbers are 37 and 52. You and a partner each say one of these numbers, "
                                    "without seeing each other's answer. The team wins if you say different "
                                    "numbers. You are player 2."},
        {"role": "assistant", "content": "My number is"},
    ]
    bare = ChatSplitItemsEnv(2, system_prompt=None, prefill="").agent_prompt({"items": [1, 2]}, 0, Transcript())
    assert [m["role"] for m in bare] == ["user"] and bare[0]["content"].endswith("You are player 1.")
    assert join_items([1]) == "1" and join_items(["a", "b", "c"]) == "a, b and c"


@pytest.mark.parametrize("items, message", [
    ("37 52", "must be a non-empty list"), ([], "must be a non-empty list"), ([37, 37], "must hold distinct one-word"),
    (["big cat", "dog"], "must hold distinct one-word"), (["Dog", "dog"], "must hold distinct one-word"),
])
def test_bad_rows_name_the_column(items: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"train_dataset row 3: column 'items' {message}"):
        ChatSplitItemsEnv(2).check_row_values({"items": items}, "train_dataset", 3)


def test_bad_template_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"`template` may only use the fields \{items\} and \{player\}"):
        ChatSplitItemsEnv(2, template="Pick from {list}.")


def test_real_tokenizer_prompt_ends_with_the_prefill(real_model_dir: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_model_dir)
    ids = tokenize_prompts(tok, [ChatSplitItemsEnv(2).agent_prompt({"items": [37, 52]}, 0, Transcript())])[0]
    text = tok.decode(ids)
    assert text.endswith("You are player 1.<|im_end|>\n<|im_start|>assistant\nMy number is")
    assert ids[-1] != tok.eos_token_id and "SmolLM" not in text
