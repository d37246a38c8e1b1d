"""`ChatTargetSumEnv` (target-sum as chat prompts with an assistant prefill) and the leading-integer reward."""

from __future__ import annotations

from typing import Any

import pytest

from trl_marl.envs import ChatTargetSumEnv
from trl_marl.envs.base import Transcript
from trl_marl.rewards import TargetSumReward
from trl_marl.rewards.arithmetic import parse_int, parse_leading_int
from trl_marl.utils.tokens import tokenize_prompts


@pytest.mark.parametrize("text, value", [
    (" 7", 7), ("7", 7), (" 12. Because we", 12), ("7<|im_end|>", 7), (" 3 and", 3), ("-2,", -2), ("5.", 5),
    ("  0", 0), ([{"role": "assistant", "content": " 9 now"}], 9),
    (" seven", None), ("I pick 7", None), ("5.5", None), ("5,000", None), ("", None), ([], None), (" .7", None),
])
def test_parse_leading_int(text: Any, value: int | None) -> None:
    assert parse_leading_int(text) == value


def test_leading_reward_reads_the_first_integer_and_the_default_still_wants_one_integer() -> None:
    agents = [[" 3. Easy", " 4", " five", "5.5"], [" 5 because", "4", " 3", " 3"]]
    leading = TargetSumReward(invalid_penalty=0.5, leading=True)
    assert leading(["p"] * 4, agents[0], agent_completions=agents, target=[8, 9, 8, 8]) == [1.0, 0.0, -0.5, -0.5]
    strict = TargetSumReward(invalid_penalty=0.5)
    assert strict(["p"] * 4, agents[0], agent_completions=agents, target=[8, 9, 8, 8]) == [-0.5, 0.0, -0.5, -0.5]
    assert parse_int(" 3. Easy") is None


def test_leading_reward_on_conversational_completions() -> None:
    a = [[{"role": "assistant", "content": " 6."}], [{"role": "assistant", "content": " 2"}]]
    b = [[{"role": "assistant", "content": " 5"}], [{"role": "assistant", "content": "no"}]]
    reward = TargetSumReward(invalid_penalty=1.0, leading=True)
    assert reward(["p", "p"], a, agent_completions=[a, b], target=[11, 7]) == [1.0, -1.0]


def test_chat_prompt_messages_and_later_turns() -> None:
    env = ChatTargetSumEnv(2, num_turns=2)
    first = env.agent_prompt({"target": 8}, 1, Transcript())
    assert first == [
        {"role": "system", "content": "Answer with one number."},
        {"role": "user", "content": "You and a partner each pick a whole number from 0 to 8 without seeing each "
                                    "other's pick. You both win if the two numbers add up to exactly 8. You are "
                                    "player 2."},
        {"role": "assistant", "content": "My number is"},
    ]
    second = env.agent_prompt({"target": 8}, 0, Transcript().extend([" 3.", " 4"]))
    assert second[2:] == [
        {"role": "assistant", "content": "My number is 3."},
        {"role": "user", "content": "Your partner picked 4. Pick again: the two numbers must add up to exactly 8."},
        {"role": "assistant", "content": "My number is"},
    ]
    bare = ChatTargetSumEnv(2, system_prompt=None, prefill="").agent_prompt({"target": 5}, 0, Transcript())
    assert [m["role"] for m in bare] == ["user"]


def test_bad_template_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"`template` may only use the fields \{target\} and \{player\}"):
        ChatTargetSumEnv(2, template="Sum to {total}.")


def test_real_tokenizer_prompt_ends_with_the_prefill(real_model_dir: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(real_model_dir)
    env = ChatTargetSumEnv(2)
    ids = tokenize_prompts(tok, [env.agent_prompt({"target": 11}, 0, Transcript())])[0]
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\nAnswer with one number.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\nMy number is")  # continued: no <|im_end|> after the prefill
    assert ids[-1] != tok.eos_token_id and text.count("<|im_end|>") == 2
    assert "SmolLM" not in text  # our short system message replaced the template's default one
    assert len(ids) == 66  # 77 with the template's default system message
    default = tokenize_prompts(tok, [ChatTargetSumEnv(2, system_prompt=None).agent_prompt({"target": 11}, 0,
                                                                                          Transcript())])[0]
    assert "SmolLM" in tok.decode(default) and len(default) == 77
