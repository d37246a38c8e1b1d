"""A team with tools inside MAGRPO's rollout: the calls run, their results are appended and masked, the answer is
what the rewards and the other agents see, and the metrics count the calls.

Generation is scripted (the team's `generate` replaced) so that every token of a completion is known: agent 0 has an
`add` tool and calls it once before answering; agent 1 has none.
"""

from __future__ import annotations

import json

import pytest
from datasets import Dataset

from helpers import ANSWER, CALL, PARTNER, add, scripted
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.tools import CHATML_TOOL_TEMPLATE, team_tools, tool_suffix_ids
from trl_marl.tools.templates import ToolFormat
from trl_marl.toy import build_toy_chat_tokenizer, build_toy_model


def make_trainer(model_dir: str, out: str, tools, reward, environment_factory=None, **extra) -> MAGRPOTrainer:
    settings = dict(output_dir=out, num_agents=2, num_turns=1, num_generations=2, per_device_train_batch_size=2,
                    max_completion_length=160, max_steps=1, learning_rate=1e-3, report_to="none", save_strategy="no",
                    logging_steps=1, seed=0, disable_tqdm=True, bf16=False)
    args = MAGRPOConfig(**{**settings, **extra})
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Add 2 and 3."}], "secret": "7"}])
    return MAGRPOTrainer(model=model_dir, reward_funcs=reward, args=args, train_dataset=dataset, tools=tools,
                         environment_factory=environment_factory)


def test_tool_call_runs_and_its_result_is_masked(chat_model_dir, tmp_path):
    def reward(prompts, completions, **kwargs):  # runs in a child process: what it saw shows in the rewards
        return [1.0 if ANSWER in str(c) and "tool_call" not in str(c) else 0.0 for c in completions]

    trainer = make_trainer(chat_model_dir, str(tmp_path), [[add], None], reward)
    calls = {"first": 0, "after_tool": 0}
    prompts: list[list[str]] = [[], []]
    trainer.team.generate = scripted(trainer, calls, prompts)
    tokenizer = trainer.team.tokenizers[0]
    rollout = trainer.joint_rollout.run(list(trainer.train_dataset))
    turn = rollout.turns[0]

    # agent 0's prompt describes its tool; agent 1's does not
    assert '"name": "add"' in prompts[0][0] and "<tools>" in prompts[0][0]
    assert "<tools>" not in prompts[1][0]
    assert calls == {"first": 2, "after_tool": 2}
    call_ids = tokenizer(CALL, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    answer_ids = tokenizer(ANSWER, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    suffix = tool_suffix_ids(tokenizer, ToolFormat(), [{"role": "tool", "name": "add", "content": "5"}])
    assert tokenizer.decode(suffix) == "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    for i in range(2):
        assert turn.completion_ids[0][i] == call_ids + suffix + answer_ids
        assert turn.tool_masks[0][i] == [1] * len(call_ids) + [0] * len(suffix) + [1] * len(answer_ids)
        assert turn.completions[0][i] == ANSWER  # the answer, not the call
        assert [m["role"] for m in turn.tool_messages[0][i]] == ["assistant", "tool", "assistant"]
        assert turn.tool_messages[0][i][1]["content"] == "5"
    assert turn.tool_masks[1] is None and turn.completions[1] == [PARTNER, PARTNER]
    assert turn.rewards.tolist() == [[1.0, 1.0]]  # the team reward saw the answer, not the call
    stats = turn.tool_stats[0]
    assert (stats.samples, stats.calls, stats.failed_calls, stats.rounds) == (2, 2, 0, 2)
    assert turn.tool_stats[1] is None
    # generated tokens count what the model wrote: agent 0's call and answer, agent 1's reply
    partner_ids = tokenizer(PARTNER, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert rollout.generated_tokens == 2 * (len(call_ids) + len(answer_ids)) + 2 * len(partner_ids)


def test_batches_mask_tool_results_out_of_the_loss(chat_model_dir, tmp_path):
    trainer = make_trainer(chat_model_dir, str(tmp_path), [[add], None], lambda completions, **kw: [0.0] * len(
        completions))
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    batch = trainer._make_batches([list(trainer.train_dataset)], "train")[0]
    tokenizer = trainer.team.tokenizers[0]
    agent0 = batch["batches"][0]
    call_len = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1
    answer_len = len(tokenizer(ANSWER, add_special_tokens=False)["input_ids"]) + 1
    suffix_len = len(tool_suffix_ids(tokenizer, ToolFormat(), [{"role": "tool", "name": "add", "content": "5"}]))
    # the model reads the results (attention) but is not trained on them
    assert agent0.completion_mask.sum(dim=1).tolist() == [call_len + suffix_len + answer_len] * 2
    assert agent0.loss_mask.sum(dim=1).tolist() == [call_len + answer_len] * 2
    assert agent0.loss_mask[0, call_len: call_len + suffix_len].sum() == 0
    assert batch["batches"][1].tool_mask is None
    partner_tokens = int(batch["batches"][1].loss_mask.sum())
    assert [int(n) for n in batch["num_items"]] == [2 * (call_len + answer_len), partner_tokens]


def test_metrics_report_calls_failures_and_rounds(chat_model_dir, tmp_path):
    def broken_add(a: int, b: int) -> int:
        """Add two integers (broken).

        Args:
            a: The first integer.
            b: The second integer.
        """
        raise RuntimeError("out of order")

    broken_add.__name__ = "add"
    trainer = make_trainer(chat_model_dir, str(tmp_path), [[broken_add], None],
                           lambda completions, **kw: [float(len(c)) for c in completions])
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "agent_0/tools/call_frequency" in h)
    assert logged["agent_0/tools/call_frequency"] == 1.0
    assert logged["agent_0/tools/failure_frequency"] == 1.0
    assert logged["agent_0/tools/rounds"] == 1.0
    assert "agent_1/tools/call_frequency" not in logged
    turn = trainer.last_rollout.turns[0]
    error = turn.tool_messages[0][0][1]["content"]
    assert "out of order" in error and "error" in error


def test_tool_arguments_are_checked_before_any_model_loads():
    with pytest.raises(ValueError, match="2 entries"):
        team_tools([[add]], None, num_agents=2)
    with pytest.raises(ValueError, match="without a name"):
        team_tools([lambda x: x], None, num_agents=1)
    with pytest.raises(ValueError, match="two tools named 'add'"):
        team_tools([add, add], None, num_agents=1)

    def undocumented(x):
        return x

    with pytest.raises(ValueError, match="cannot be described"):
        team_tools([undocumented], None, num_agents=1)
    with pytest.raises(ValueError, match="dict"):
        team_tools(None, {"a": object}, num_agents=1)

    class Scored:
        def reset(self, **row):
            return None

        def get_reward(self):
            return 1.0

    with pytest.raises(ValueError, match="get_reward"):
        team_tools(None, Scored, num_agents=1)
    tools = team_tools([add], None, num_agents=2)
    assert [t.tools for t in tools] == [(add,), (add,)]
    assert team_tools([None, [add]], None, num_agents=2)[0] is None


def test_tool_agents_need_a_tokenizer_that_can_write_tool_calls(tmp_path):
    from trl_marl.toy import build_toy_tokenizer

    path = tmp_path / "plain"
    tokenizer = build_toy_tokenizer()
    build_toy_model(tokenizer, hidden_size=32, num_layers=1).save_pretrained(path)
    tokenizer.save_pretrained(path)
    args = MAGRPOConfig(output_dir=str(tmp_path / "out"), num_generations=2, per_device_train_batch_size=2,
                        max_completion_length=8, report_to="none")
    with pytest.raises(ValueError, match="cannot express tool calls"):
        MAGRPOTrainer(model=str(path), reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                      train_dataset=Dataset.from_list([{"prompt": "1+1="}]), tools=[add])


def test_chatml_template_renders_plain_chatml_without_tools():
    tokenizer = build_toy_chat_tokenizer()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             chat_template=CHATML_TOOL_TEMPLATE)
    assert rendered == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                        "<|im_start|>assistant\n")
    with_tools = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, tools=[add])
    assert with_tools.startswith("<|im_start|>system\nBe brief.\n\nYou can call these tools:\n<tools>\n")
    schema = json.loads(with_tools.split("<tools>\n")[1].split("\n")[0])
    assert schema["function"]["name"] == "add" and set(schema["function"]["parameters"]["properties"]) == {"a", "b"}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("tool_call_timeout", 0.0, "tool_call_timeout"),
    ("max_tool_result_chars", 10, "max_tool_result_chars` must be >= 64"),
    ("max_tool_calling_iterations", -1, "max_tool_calling_iterations"),
])
def test_tool_settings_are_checked(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        MAGRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2, **{field: value})


class Vault:
    """An environment: each rollout's row holds a secret that only its `peek` tool reveals."""

    built = 0

    def __init__(self) -> None:
        Vault.built += 1
        self.secret = ""
        self.peeks = 0

    def reset(self, **row) -> str:
        self.secret, self.peeks = row["secret"], 0
        return " (The vault is locked.)"

    def peek(self, times: int) -> str:
        """Read the secret.

        Args:
            times: How many times to read it.
        """
        self.peeks += 1
        return self.secret * times


def test_environment_factory_gives_each_sample_its_own_state(chat_model_dir, tmp_path):
    Vault.built = 0
    trainer = make_trainer(chat_model_dir, str(tmp_path), None, lambda completions, **kw: [0.0] * len(completions),
                           environment_factory=[Vault, None])
    assert Vault.built == 1  # probed once at construction (its tools checked), then reused
    prompts: list[list[str]] = [[], []]
    call = '<tool_call>\n{"name": "peek", "arguments": {"times": 3}}\n</tool_call>'
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, prompts, call=call)
    turn = trainer.joint_rollout.run(list(trainer.train_dataset)).turns[0]
    assert Vault.built == 2  # two samples, two instances (the probe reused)
    assert "Add 2 and 3. (The vault is locked.)<|im_end|>" in prompts[0][0]  # reset's text appended to the prompt
    assert '"name": "peek"' in prompts[0][0] and "(The vault is locked.)" not in prompts[1][0]
    assert [m[1]["content"] for m in turn.tool_messages[0]] == ["777", "777"]
    pool = trainer.tool_loop.agent_tools[0].environments(2)
    assert [env.peeks for env in pool] == [1, 1]


def test_results_that_do_not_fit_the_budget_are_dropped(chat_model_dir, tmp_path):
    tokenizer = build_toy_chat_tokenizer()
    call_len = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1
    trainer = make_trainer(chat_model_dir, str(tmp_path), [[add], None],
                           lambda completions, **kw: [0.0] * len(completions), max_completion_length=call_len + 5)
    calls = {"first": 0, "after_tool": 0}
    trainer.team.generate = scripted(trainer, calls, [[], []])
    turn = trainer.joint_rollout.run(list(trainer.train_dataset)).turns[0]
    assert calls == {"first": 2, "after_tool": 0}  # the result (~40 tokens) does not fit: no second generation
    assert [len(ids) for ids in turn.completion_ids[0]] == [call_len, call_len]
    assert turn.tool_masks[0] == [[1] * call_len] * 2
    assert [len(m) for m in turn.tool_messages[0]] == [1, 1]  # the unanswered call, no tool message
    stats = turn.tool_stats[0]
    assert (stats.calls, stats.cut_by_budget, stats.rounds) == (2, 2, 0)
    assert turn.completions[0] == ["", ""]  # a call without an answer answers nothing


def test_max_tool_calling_iterations_zero_runs_no_tool(chat_model_dir, tmp_path):
    trainer = make_trainer(chat_model_dir, str(tmp_path), [[add], None],
                           lambda completions, **kw: [0.0] * len(completions), max_tool_calling_iterations=0)
    calls = {"first": 0, "after_tool": 0}
    trainer.team.generate = scripted(trainer, calls, [[], []])
    turn = trainer.joint_rollout.run(list(trainer.train_dataset)).turns[0]
    assert calls == {"first": 2, "after_tool": 0}
    assert (turn.tool_stats[0].calls, turn.tool_stats[0].rounds) == (0, 0)  # as TRL: the loop never starts
    assert all(mask == [1] * len(ids) for mask, ids in zip(turn.tool_masks[0], turn.completion_ids[0]))


def test_the_prompt_length_check_counts_the_tools_schemas(tmp_path):
    """A tool agent's prompt carries its tools' schemas: the check before training measures them (was: the prompt
    without them, 100-200 tokens short on a real model, so a prompt that overflows the context went unnoticed)."""
    tokenizer = build_toy_chat_tokenizer()
    messages = [{"role": "user", "content": "Add 2 and 3."}]
    plain = len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))
    with_tools = len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=False, tools=[add]))
    completion = 8
    window = plain + completion + 4  # room for the plain prompt, not for the one with the schema
    assert with_tools + completion > window
    path = tmp_path / "short"
    build_toy_model(tokenizer, hidden_size=32, num_layers=1, max_position_embeddings=window).save_pretrained(path)
    tokenizer.save_pretrained(path)
    build = dict(max_completion_length=completion, prompt_length_check="error")
    with pytest.raises(ValueError, match=rf"prompt of agent 1 for row 0 of `train_dataset` is {with_tools} tokens"):
        make_trainer(str(path), str(tmp_path / "a"), [None, [add]], lambda completions, **kw: [0.0], **build)
    make_trainer(str(path), str(tmp_path / "b"), None, lambda completions, **kw: [0.0], **build)  # fits without


def test_each_member_is_measured_with_its_own_chat_template():
    """Members with different chat templates (a team of different models) each get their own template's overhead in
    the bound that spares tokenizing (was: one cache for the team, so agent 1 was bounded by agent 0's template)."""
    from types import SimpleNamespace

    from trl_marl.envs import PromptEnv
    from trl_marl.validation import ContextLengthWarning
    from trl_marl.validation.data import check_prompt_lengths

    short, verbose = build_toy_chat_tokenizer(), build_toy_chat_tokenizer()
    verbose.chat_template = "{{ 'a long preamble ' * 20 }}" + short.chat_template
    config = SimpleNamespace(max_position_embeddings=80)
    team = SimpleNamespace(tokenizers=[short, verbose], base_model_of=lambda slot: SimpleNamespace(config=config))
    rows = [{"prompt": [{"role": "user", "content": "Add 2 and 3."}]}]
    with pytest.warns(ContextLengthWarning, match=r"prompt of agent 1 for row 0 of `train_dataset` is \d+ tokens"):
        check_prompt_lengths(team, PromptEnv(num_agents=2), rows, "train_dataset", 8,
                             "MAGRPOConfig.max_completion_length")


def test_rewards_read_each_agents_calls_and_results(chat_model_dir, tmp_path):
    """`agent_tool_messages[a][i]`: agent a's turn in joint action i as messages (call, result, answer), None for an
    agent without tools; the reward runs in a child process, so what it read shows in its scores."""
    def from_the_result(prompts, completions, agent_tool_messages, **kwargs):
        assert agent_tool_messages[1] is None
        return [float(int(turn[1]["content"]) + len(turn)) for turn in agent_tool_messages[0]]

    trainer = make_trainer(chat_model_dir, str(tmp_path), [[add], None], from_the_result)
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    turn = trainer.joint_rollout.run(list(trainer.train_dataset)).turns[0]
    assert turn.rewards.tolist() == [[8.0, 8.0]]  # the result 5, plus 3 messages


def test_rewards_without_tools_get_no_tool_messages(chat_model_dir, tmp_path):
    def no_tool_keyword(prompts, completions, **kwargs):
        return [0.0 if "agent_tool_messages" in kwargs else 1.0 for _ in completions]

    trainer = make_trainer(chat_model_dir, str(tmp_path), None, no_tool_keyword)
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []], tool_members=())
    assert trainer.joint_rollout.run(list(trainer.train_dataset)).turns[0].rewards.tolist() == [[1.0, 1.0]]


def test_a_reward_that_cannot_take_the_tool_messages_is_refused_before_any_step(chat_model_dir, tmp_path):
    """Without `**kwargs` a function must name every keyword a call passes: with tools that includes
    `agent_tool_messages`, checked when the trainer is built (without tools the same function is accepted)."""
    def named_keywords(prompts, completions, agent_prompts, agent_completions, agent_index, turn, transcript,
                       trainer_state, secret):
        return [1.0 for _ in completions]

    with pytest.raises(TypeError, match=r"`named_keywords` does not take `\*\*kwargs`.*`agent_tool_messages`"):
        make_trainer(chat_model_dir, str(tmp_path), [[add], None], named_keywords)
    make_trainer(chat_model_dir, str(tmp_path), None, named_keywords)


def test_a_compute_rewards_override_without_tool_messages_is_refused_with_tools(chat_model_dir, tmp_path):
    class OldOverride(MAGRPOTrainer):
        def compute_rewards(self, prompts, completions, rows, transcripts, turn):
            return super().compute_rewards(prompts, completions, rows, transcripts, turn)

    def reward(prompts, completions, **kwargs):
        return [1.0 for _ in completions]

    args = MAGRPOConfig(output_dir=str(tmp_path), num_agents=2, num_generations=2, per_device_train_batch_size=2,
                        max_completion_length=160, max_steps=1, report_to="none", save_strategy="no")
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Add 2 and 3."}]}])
    with pytest.raises(TypeError, match=r"`OldOverride.compute_rewards` does not take `tool_messages`.*"
                                        r"tool_messages=None"):
        OldOverride(model=chat_model_dir, reward_funcs=reward, args=args, train_dataset=dataset, tools=[[add], None])
    OldOverride(model=chat_model_dir, reward_funcs=reward, args=args, train_dataset=dataset)  # no tools: it trains
