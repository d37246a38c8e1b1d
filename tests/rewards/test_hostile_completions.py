"""Nothing a policy writes may end training (issue 54): hostile completions through every built-in reward, tool and
parser that a training step calls.

The rewards: the team rewards of the built-in tasks (target sum, tool relay, split items, writing, coding with and
without its CodeBLEU term), the centralised wrapper, unit tests in the sandbox, the answer verifier and MAPoRL's
influence-aware reward over it, CodeBLEU and ROUGE-L; the parsers they and the environments use; the tool-call parser
and the two shipped tools (the calculator, Python in the sandbox).

The corpus holds what broke or slowed training before (lone surrogates, a 5,000-digit number, a tool call nested
1,000 deep, huge code, thousands of unclosed tags) and what might (NUL bytes, control and bidirectional characters,
deep brackets, unclosed fences and boxes, empty text). Every reward must return one score per completion, each `None`
or a finite number, without raising and within a time bound; every parser must return, not raise; every tool call
must give encodable text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from helpers import encodes
from trl_marl.envs import CentralizedEnv, TargetSumEnv
from trl_marl.envs.base import Transcript
from trl_marl.envs.centralized import split_sections
from trl_marl.rewards import (
    AnswerVerifier,
    CentralizedReward,
    CodingTeamReward,
    InfluenceAwareReward,
    SplitItemsReward,
    TargetSumReward,
    UnitTestReward,
    WritingTeamReward,
    extract_label,
    extract_math_answer,
)
from trl_marl.rewards.arithmetic import parse_int, parse_leading_int
from trl_marl.rewards.coordination import first_word
from trl_marl.rewards.tool_division import ToolDivisionReward
from trl_marl.rewards.tool_relay import ToolRelayReward, integers, last_integer
from trl_marl.rewards.writing_halves import HalvesTeamReward
from trl_marl.tools import ToolFormat, calculator, call_tool, parse_completion, python
from trl_marl.tools.templates import CHATML_RESPONSE_TEMPLATE, CHATML_TOOL_TEMPLATE
from trl_marl.toy import build_toy_chat_tokenizer
from trl_marl.toy.rows import toy_coding_rows, toy_writing_rows
from trl_marl.utils.code import extract_code
from trl_marl.utils.numbers import canonical_number, find_numbers, normalize_text
from trl_marl.utils.text import completion_text, encodable, words

HOSTILE: dict[str, str] = {
    "empty": "",
    "blank": " \n\t\r\x0b\x0c",
    "surrogate": "caf\udce9 5",
    "surrogates only": "\ud800\udfff\udc00" * 50,
    "surrogate in a number": "4\ud8002",
    "nul": "\x00" * 200 + "5" + "\x00",
    "control": "".join(chr(c) for c in range(32)) + "\x7f\x85\u2028\u2029\u202e\u200b\ufeff 7",
    "5,000 digits": "7" * 5000,
    "negative 5,000 digits": "The answer is -" + "9" * 5000,
    "100,000 digits": "1" * 100_000,
    "digits and commas": ",".join(["123"] * 5000),
    "deep json call": '<tool_call>\n{"name": "calculator", "arguments": ' + '{"x": ' * 1000 + "1" + "}" * 1000
                      + "}\n</tool_call>",
    "surrogate call": '<tool_call>\n{"name": "calculator\\ud800", "arguments": {"expression": "caf\\udce9"}}\n'
                      "</tool_call>",
    "deep brackets": "(" * 5000 + "5" + ")" * 5000,
    "deep boxes": "\\boxed{" * 2000 + "5" + "}" * 2000,
    "unclosed boxes": "\\boxed{" * 5000,
    "huge sum code": "```python\ndef f(a):\n    return " + "+".join(["a"] * 10_000) + "\n```",
    "huge flat code": "def main():\n" + "    x = 1\n" * 20_000,
    "unclosed fences": "```python\n" * 3000,
    "unclosed tags": "<agent_0>" * 20_000,
    "crossed tags": "<agent_0><agent_1>3</agent_0>7</agent_1>" * 1000,
    "200 KB of letters": "a" * 200_000,
    "combining marks": "5\u0338 \u0663\u0664 \uff15 \u00b2 \u2155",
    "emoji and rtl": "\U0001f600 \u202eanswer: 5\u202c",
}

CASES = sorted(HOSTILE)


def as_chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def assert_scores(scores: Any, count: int) -> None:
    scores = list(scores)
    assert len(scores) == count
    for score in scores:
        assert score is None or (isinstance(score, (int, float)) and math.isfinite(float(score))), score


# --------------------------------------------------------------------------------------------------- rewards
def reward_cases() -> list[tuple[str, Callable[[], Any], dict[str, Any]]]:
    """(name, the reward's factory, its dataset columns for one row): the built-in rewards a training step calls."""
    cases: list[tuple[str, Callable[[], Any], dict[str, Any]]] = [
        ("target_sum", TargetSumReward, {"target": 10}),
        ("target_sum leading", lambda: TargetSumReward(leading=True), {"target": 10}),
        ("tool_relay turn 1", ToolRelayReward, {"answer": "3965", "turn": 1}),
        ("tool_relay turn 2", ToolRelayReward, {"answer": "3965", "turn": 2}),
        ("tool_division", ToolDivisionReward, {"answer1": "408", "answer2": "4368"}),
        ("split_items", SplitItemsReward, {"items": ["apple", "pear"]}),
        ("centralized target_sum", lambda: CentralizedReward(CentralizedEnv(TargetSumEnv(2)), TargetSumReward()),
         {"target": 10}),
        ("answer verifier", AnswerVerifier, {"answer": "5"}),
        ("influence", lambda: InfluenceAwareReward(AnswerVerifier(), alpha0=0.1, alpha1=0.1, beta0=0.1, beta1=0.1),
         {"answer": "5", "transcript": True}),
        ("writing team", WritingTeamReward, dict(toy_writing_rows(1)[0])),
        ("coding team", CodingTeamReward, dict(toy_coding_rows(1)[0])),
        ("writing halves", HalvesTeamReward, {"text": "Open the file. Raise OSError when it is missing."}),
        ("unit tests", UnitTestReward, dict(toy_coding_rows(1)[0])),
    ]
    try:
        import codebleu  # noqa: F401

        from trl_marl.rewards import CodeBLEUReward

        cases.append(("codebleu", CodeBLEUReward, {"reference": "def f(a):\n    return a + 1\n"}))
        cases.append(("coding team with codebleu", lambda: CodingTeamReward(weights={"codebleu": 1.0}),
                      dict(toy_coding_rows(1)[0])))
    except ImportError:
        pass
    try:
        import rouge_score  # noqa: F401

        from trl_marl.rewards import RougeLReward

        cases.append(("rouge_l", RougeLReward, {"reference": "the cat sat on the mat"}))
    except ImportError:
        pass
    return cases


@pytest.mark.parametrize(("name", "factory", "row"), reward_cases(), ids=[c[0] for c in reward_cases()])
@pytest.mark.parametrize("chat", [False, True], ids=["text", "chat"])
def test_every_reward_scores_every_hostile_completion(name: str, factory, row: dict[str, Any], chat: bool) -> None:
    reward = factory()
    texts = [HOSTILE[key] for key in CASES]
    form = as_chat if chat else (lambda text: text)
    completions = [form(text) for text in texts]
    partner = [form(HOSTILE[CASES[(i + 1) % len(CASES)]]) for i in range(len(CASES))]
    turn = row.get("turn", 1)
    columns = {k: [v] * len(texts) for k, v in row.items() if k not in ("turn", "transcript")}
    if row.get("transcript"):  # a debate's reward reads every answer from the transcripts
        columns["transcript"] = [Transcript().extend([completion_text(a), completion_text(b)])
                                 for a, b in zip(completions, partner)]
        columns["agent_index"] = 0
    start = time.monotonic()
    scores = reward(["Solve it."] * len(texts), completions, agent_completions=[completions, partner], turn=turn,
                    **columns)
    assert_scores(scores, len(texts))
    assert time.monotonic() - start < 60, f"{name} took {time.monotonic() - start:.1f} s"


def test_a_tiny_training_step_survives_hostile_completions(tmp_path) -> None:
    """MAGRPO on the toy target-sum task, the texts of the team's samples replaced by hostile ones (what the rewards,
    the transcripts and the logs read): one step trains, every logged number finite."""
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer

    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_turns=1, num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=8, max_steps=1, learning_rate=1e-3,
                        report_to="none", save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True, bf16=False,
                        log_completions=True, no_signal_warning_interval=None)
    dataset = Dataset.from_list([{"prompt": "Pick a number:", "target": 10, "answer": "10"}] * 2)
    rewards = [TargetSumReward(), ToolRelayReward(),
               CentralizedReward(CentralizedEnv(TargetSumEnv(2)), TargetSumReward())]
    trainer = MAGRPOTrainer(model="toy", env=TargetSumEnv(2), reward_funcs=rewards, args=args, train_dataset=dataset)
    texts = iter([HOSTILE[key] for key in CASES] * 10)
    seen: list[str] = []

    def hostile_decode(rows: Any, *args: Any, **kwargs: Any) -> list[str]:  # what the policy "wrote"
        out = [next(texts) for _ in rows]
        seen.extend(out)
        return out

    for tokenizer in trainer.team.tokenizers:
        tokenizer.batch_decode = hostile_decode
    trainer.train()
    assert trainer.state.global_step == 1
    assert len(seen) >= 4  # the rewards scored hostile texts
    assert all(math.isfinite(v) for h in trainer.state.log_history for v in h.values()
               if isinstance(v, float) and not math.isnan(v))


# --------------------------------------------------------------------------------------------------- parsers
PARSERS: dict[str, Callable[[str], Any]] = {
    "parse_int": parse_int,
    "parse_leading_int": parse_leading_int,
    "integers": integers,
    "last_integer": last_integer,
    "first_word": first_word,
    "split_sections": lambda text: split_sections(text, ("agent_0", "agent_1")),
    "extract_math_answer": extract_math_answer,
    "extract_label": extract_label,
    "extract_code": extract_code,
    "find_numbers": lambda text: [m.group(0) for m in find_numbers(normalize_text(text))],
    "canonical_number": canonical_number,
    "completion_text": completion_text,
    "words": words,
    "encodable": encodable,
}


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_every_parser_returns_on_every_hostile_completion(parser: str) -> None:
    start = time.monotonic()
    for key in CASES:
        PARSERS[parser](HOSTILE[key])
    assert time.monotonic() - start < 30


# ----------------------------------------------------------------------------------------------------- tools

@pytest.fixture(scope="module")
def tokenizer():
    return build_toy_chat_tokenizer()


@pytest.mark.parametrize("key", CASES)
def test_tool_call_parsing_returns_an_encodable_message(tokenizer, key: str) -> None:
    fmt = ToolFormat(chat_template=CHATML_TOOL_TEMPLATE, response_template=CHATML_RESPONSE_TEMPLATE)
    text = encodable(HOSTILE[key])  # token ids come from encodable text; escapes inside JSON may still decode
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    message = parse_completion(tokenizer, fmt, ids, [], [calculator])
    assert message["role"] == "assistant" and isinstance(message["content"], str) and encodes(message)


@pytest.mark.parametrize("key", CASES)
def test_the_calculator_answers_every_hostile_expression(key: str) -> None:
    outcome = call_tool(calculator, {"expression": HOSTILE[key]}, timeout=10.0, max_chars=4000)
    assert isinstance(outcome.content, str) and encodes(outcome.content) and not outcome.timed_out


@pytest.mark.parametrize("key", CASES)
def test_the_python_tool_answers_every_hostile_program(key: str) -> None:
    outcome = call_tool(python, {"code": HOSTILE[key]}, timeout=60.0, max_chars=2000)
    assert isinstance(outcome.content, str) and encodes(outcome.content) and not outcome.timed_out
