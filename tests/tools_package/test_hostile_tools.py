"""Tool calls a policy writes to end training (issue 54, items 1-3): nothing it writes may escape `train()`.

Before the fix: a lone surrogate in a tool's name (`"calculator\\ud800"`) or echoed back by a tool (`"caf\\udce9"`)
raised `TypeError` from the tokenizer out of `train()`; a tool call nested 1,000 deep raised `RecursionError` through
TRL's `parse_response`; ten hanging calls in one message cost ten timeouts, one after another.
"""

from __future__ import annotations

import json
import time

import pytest
from datasets import Dataset

from helpers import ANSWER, encodes, scripted
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.tools import ToolFormat, ToolLoop, call_tool, parse_completion, resolve_tool_format
from trl_marl.tools.calling import MAX_CALL_DEPTH, encodable_json
from trl_marl.tools.templates import CHATML_RESPONSE_TEMPLATE, CHATML_TOOL_TEMPLATE, use_tool_chat_template
from trl_marl.tools.toolset import AgentTools
from trl_marl.toy import build_toy_chat_tokenizer


def echo(text: str) -> str:
    """Say a text back.

    Args:
        text: The text.
    """
    return text


def nap(seconds: float) -> str:
    """Sleep, then say so.

    Args:
        seconds: How long to sleep.
    """
    time.sleep(seconds)
    return "awake"


def tool_call(name: str, arguments: str) -> str:
    """A Hermes-style call as the model writes it (`arguments` is JSON text, escapes included)."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


def deep(levels: int) -> str:
    return '{"x": ' * levels + "1" + "}" * levels



@pytest.fixture(scope="module")
def tokenizer():
    return build_toy_chat_tokenizer()


@pytest.fixture(scope="module", params=["trl-marl parser", "TRL parser"])
def parsing(request):
    """Both ways a completion is parsed: trl-marl's ChatML parser, and TRL's `parse_response` (a tokenizer whose
    own template writes tool calls)."""
    tokenizer = build_toy_chat_tokenizer()
    if request.param == "TRL parser":
        use_tool_chat_template(tokenizer)
        fmt = resolve_tool_format(tokenizer)
        assert fmt.response_template is None  # the tokenizer's own parser, through TRL
    else:
        fmt = ToolFormat(chat_template=CHATML_TOOL_TEMPLATE, response_template=CHATML_RESPONSE_TEMPLATE)
    return tokenizer, fmt


def parse(parsing, text: str) -> dict:
    tokenizer, fmt = parsing
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return parse_completion(tokenizer, fmt, ids, [], [echo])


# ------------------------------------------------------------------------------------------ item 1: surrogates
def test_a_lone_surrogate_in_a_call_becomes_encodable_text(parsing) -> None:
    message = parse(parsing, tool_call("echo\\ud800", '{"te\\udcffxt": "caf\\udce9", "n": ["\\ud83d"]}'))
    function = message["tool_calls"][0]["function"]
    assert function["name"] == "echo\ufffd"
    assert function["arguments"] == {"te\ufffdxt": "caf\ufffd", "n": ["\ufffd"]}
    assert encodes(message)


def test_a_surrogate_pair_stays_the_character_it_encodes(parsing) -> None:
    message = parse(parsing, tool_call("echo", '{"text": "\\ud83d\\ude00"}'))
    assert message["tool_calls"][0]["function"]["arguments"] == {"text": "\U0001f600"}


def test_a_tool_that_echoes_a_surrogate_gives_encodable_text() -> None:
    outcome = call_tool(echo, {"text": "caf\udce9"}, timeout=5.0, max_chars=100)
    assert outcome.content == "caf\ufffd" and not outcome.failed
    failed = call_tool(echo, {"text": 5}, timeout=5.0, max_chars=None)  # an error naming the bad value
    assert failed.failed and encodes(failed.content)

    def shout(text: str) -> str:
        """Raise with the text.

        Args:
            text: The text.
        """
        raise ValueError(text)

    raised = call_tool(shout, {"text": "\udce9" * 3}, timeout=5.0, max_chars=None)
    assert raised.failed and raised.content.startswith("{'error': 'ValueError: ") and encodes(raised.content)


def test_encodable_json_copies_and_bounds_the_depth() -> None:
    data = {"a\udc00": [("x\ud800", 1.5, None, True)]}
    assert encodable_json(data) == {"a\ufffd": [["x\ufffd", 1.5, None, True]]}
    assert "a\udc00" in data  # the input is not changed
    assert encodable_json(json.loads(deep(MAX_CALL_DEPTH)))
    with pytest.raises(ValueError, match="deeper"):
        encodable_json(json.loads(deep(MAX_CALL_DEPTH + 1)))


# ------------------------------------------------------------------------------ item 2: anything that won't parse
@pytest.mark.parametrize("arguments", [deep(1000), deep(100_000), "[" * 1000 + "]" * 1000, deep(MAX_CALL_DEPTH),
                                       '{"n": ' + "7" * 5000 + "}", '{"a": 1', '"\\ud800', "NaN", "\x00\x01\x1b"])
def test_a_call_that_cannot_be_read_is_text_not_an_exception(parsing, arguments: str) -> None:
    text = tool_call("echo", arguments)
    message = parse(parsing, text)
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    assert encodes(message)
    for call in message.get("tool_calls", []):  # whatever was read as a call is a well-formed one
        assert isinstance(call["function"]["name"], str)


def test_a_call_within_the_depth_is_still_a_call(parsing) -> None:
    message = parse(parsing, tool_call("echo", deep(20)))
    assert message["tool_calls"][0]["function"]["name"] == "echo"


def test_deep_calls_are_text_even_from_a_deep_stack(parsing) -> None:
    def nested(levels: int) -> dict:
        return parse(parsing, tool_call("echo", deep(700))) if levels == 0 else nested(levels - 1)

    message = nested(250)  # the parse starts 250 frames down, as inside a trainer
    assert "tool_calls" not in message or encodes(message)


# ------------------------------------------------------------------------------------ item 3: time per turn
def loop_with(tokenizer, tools, timeout: float, turn_timeout: float | None = None) -> ToolLoop:
    return ToolLoop([AgentTools(tools=tuple(tools))], [tokenizer], max_iterations=1, timeout=timeout,
                    turn_timeout=turn_timeout)


def run_once(loop: ToolLoop, tokenizer, completion: str):
    from transformers import GenerationConfig

    from trl_marl.team import Generation

    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "go"}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    answer = tokenizer(ANSWER, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def generate(prompt_ids, config):
        return Generation(prompt_ids=prompt_ids, completion_ids=[[answer for _ in rows] for rows in prompt_ids])

    first = Generation(prompt_ids=[[list(prompt)]], completion_ids=[[ids]])
    return loop.run(generate, first, GenerationConfig(max_new_tokens=4096))


def test_ten_hanging_calls_cost_one_timeout_not_ten(tokenizer) -> None:
    loop = loop_with(tokenizer, [nap], timeout=0.3)
    calls = "\n".join(tool_call("nap", '{"seconds": 30}') for _ in range(10))
    start = time.monotonic()
    turn = run_once(loop, tokenizer, calls)
    elapsed = time.monotonic() - start
    assert elapsed < 1.5  # 3 s before: ten calls of 0.3 s, one after another
    results = [m["content"] for m in turn.messages[0][0] if m["role"] == "tool"]
    assert len(results) == 10
    assert "did not return within" in results[0]
    assert all("was not called" in r and "seconds for tool calls are spent" in r for r in results[1:])
    assert (turn.stats[0].calls, turn.stats[0].failed_calls) == (10, 10)


def test_the_turn_budget_is_shared_by_the_calls_and_can_be_set(tokenizer) -> None:
    # naps of 0.4 s in a turn of 1.0 s: 0.2 s of slack either way, so a loaded machine's overhead cannot move a call
    loop = loop_with(tokenizer, [nap], timeout=5.0, turn_timeout=1.0)
    calls = "\n".join(tool_call("nap", '{"seconds": 0.4}') for _ in range(5))
    start = time.monotonic()
    turn = run_once(loop, tokenizer, calls)
    assert time.monotonic() - start < 3.0
    results = [m["content"] for m in turn.messages[0][0] if m["role"] == "tool"]
    assert results[:2] == ["awake", "awake"]  # 0.8 s spent: the third gets what is left and runs past it
    assert "did not return within" in results[2] and all("was not called" in r for r in results[3:])


def test_quick_calls_all_run_within_the_budget(tokenizer) -> None:
    loop = loop_with(tokenizer, [echo], timeout=5.0)
    turn = run_once(loop, tokenizer, "\n".join(tool_call("echo", f'{{"text": "r{i}"}}') for i in range(20)))
    results = [m["content"] for m in turn.messages[0][0] if m["role"] == "tool"]
    assert results == [f"r{i}" for i in range(20)] and turn.stats[0].failed_calls == 0


@pytest.mark.parametrize("value", [0, -1.0, True, "1"])
def test_turn_timeout_must_be_positive(tokenizer, value) -> None:
    with pytest.raises(ValueError, match="turn_timeout"):
        loop_with(tokenizer, [echo], timeout=1.0, turn_timeout=value)


def test_every_sample_calling_a_hanging_tool_costs_the_turn_bound_not_one_timeout_per_sample(tokenizer) -> None:
    """Eight samples whose calls each hang: each sample's own bound (`turn_timeout`, 0.3 s) held, but the step took
    eight of them; the team's turn bound (`total_timeout`) ends the turn's calls once spent, over every sample."""
    from transformers import GenerationConfig

    from trl_marl.team import Generation

    loop = ToolLoop([AgentTools(tools=(nap,))], [tokenizer], max_iterations=1, timeout=0.3, total_timeout=0.5)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "go"}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    ids = tokenizer(tool_call("nap", '{"seconds": 30}'), add_special_tokens=False)["input_ids"]
    answer = tokenizer(ANSWER, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def generate(prompt_ids, config):
        return Generation(prompt_ids=prompt_ids, completion_ids=[[answer for _ in rows] for rows in prompt_ids])

    first = Generation(prompt_ids=[[list(prompt)] * 8], completion_ids=[[ids + [tokenizer.eos_token_id]] * 8])
    start = time.monotonic()
    turn = loop.run(generate, first, GenerationConfig(max_new_tokens=4096))
    assert time.monotonic() - start < 1.5  # 2.4 s before: eight samples x 0.3 s
    results = [[m["content"] for m in messages if m["role"] == "tool"] for messages in turn.messages[0]]
    assert "did not return within" in results[0][0] and "did not return within" in results[1][0]
    assert all("was not called: the team's turn 0.5 seconds" in r[0] for r in results[2:])
    assert (turn.stats[0].calls, turn.stats[0].failed_calls) == (8, 8)
    assert ToolLoop([None], [tokenizer], timeout=30.0).total_timeout == 120.0  # the default: 4 x the call timeout


@pytest.mark.parametrize("value", [0, -1.0, True, "1"])
def test_tool_turn_timeout_is_checked_in_the_configs(value) -> None:
    from trl_marl import MAGRPOConfig, MultiAgentPPOConfig

    for config in (MAGRPOConfig, MultiAgentPPOConfig):
        with pytest.raises(ValueError, match="`tool_turn_timeout` must be > 0 seconds"):
            config(output_dir="unused", tool_turn_timeout=value)


# ------------------------------------------------------------------------------------------ a training step
HOSTILE_CALLS = "\n".join([
    tool_call("calculator\\ud800", '{"expression": "1+1"}'),  # an unknown name with a lone surrogate
    tool_call("echo", '{"text": "caf\\udce9 \\u0000 \\u001b[2J"}'),  # echoed back: a surrogate, NUL, escapes
    tool_call("echo", deep(3)),  # a wrong argument
    tool_call("nap", '{"seconds": 30}'),  # a hanging call, then another one that is never run
    tool_call("nap", '{"seconds": 30}'),
])


@pytest.mark.parametrize("call", [HOSTILE_CALLS, tool_call("echo", deep(1000)), tool_call("echo\\udfff", deep(60))])
def test_training_survives_hostile_tool_calls(chat_model_dir, tmp_path, call: str) -> None:
    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_turns=1, num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=512, max_steps=1, learning_rate=1e-3,
                        report_to="none", save_strategy="no", logging_steps=1, seed=0, disable_tqdm=True, bf16=False,
                        tool_call_timeout=0.5, prompt_length_check="ignore")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Go."}]}])
    trainer = MAGRPOTrainer(model=chat_model_dir, args=args, train_dataset=dataset, tools=[[echo, nap], None],
                            reward_funcs=lambda completions, **kw: [float(i) for i in range(len(completions))])
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []], call=call)
    start = time.monotonic()
    trainer.train()
    assert time.monotonic() - start < 60
    assert trainer.state.global_step == 1
    messages = trainer.last_rollout.turns[0].tool_messages[0]
    assert encodes(messages)
