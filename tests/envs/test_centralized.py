"""The centralised single-policy baseline: `CentralizedEnv` (one policy writes every agent's part in tagged
sections) and `CentralizedReward` (the team reward on those parts), and a tiny MAGRPO run with one agent."""

from __future__ import annotations

import math
import warnings
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import CentralizedEnv, TargetSumEnv, Transcript, split_sections
from trl_marl.envs.writing import CooperativeWritingEnv
from trl_marl.rewards import CentralizedReward, TargetSumReward
from trl_marl.rewards.writing import WritingTeamReward

warnings.filterwarnings("ignore")
TAGS = ["agent_0", "agent_1"]


# ----------------------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text, parts", [
    ("<agent_0>3</agent_0><agent_1>7</agent_1>", ["3", "7"]),
    ("<agent_1>\n 7 \n</agent_1> then <agent_0>3</agent_0>", ["3", "7"]),          # any order, stripped
    ("Sure! <agent_0>a\nb</agent_0> and <agent_1>c</agent_1> done", ["a\nb", "c"]),  # text outside ignored
    ("<agent_0>3</agent_0>", ["3", ""]),                                              # missing section
    ("<agent_0>3<agent_1>7</agent_1>", ["", "7"]),                                    # unclosed section
    ("<agent_0>3</agent_1><agent_1>7</agent_0>", ["", ""]),                           # crossed tags
    ("<agent_0>1</agent_0><agent_0>2</agent_0><agent_1></agent_1>", ["1", ""]),       # first duplicate; empty
    ("<AGENT_0>3</AGENT_0>", ["", ""]),                                               # tags are case-sensitive
    ("", ["", ""]),
])
def test_split_sections(text, parts):
    assert split_sections(text, TAGS) == parts


def test_split_with_role_names_and_chat_completions():
    env = CentralizedEnv(TargetSumEnv(2), tags=("first", "second"))
    assert env.split("<second>7</second><first>3</first>") == ["3", "7"]
    assert env.split([{"role": "assistant", "content": "<first>x</first>"}]) == ["x", ""]


def test_bad_tags_are_refused():
    with pytest.raises(ValueError, match="one section name per agent"):
        CentralizedEnv(TargetSumEnv(2), tags=("a",))
    with pytest.raises(ValueError, match="unique names"):
        CentralizedEnv(TargetSumEnv(2), tags=("a", "a"))
    with pytest.raises(ValueError, match="unique names"):
        CentralizedEnv(TargetSumEnv(2), tags=("a b", "c"))


# ----------------------------------------------------------------------------------------------------------- the env
def test_prompt_shows_what_each_agent_sees_on_the_team_transcript():
    env = CentralizedEnv(TargetSumEnv(2, num_turns=2))
    assert (env.num_agents, env.num_turns, env.required_columns) == (1, 2, ("target",))
    row = {"target": 10}
    first = env.agent_prompt(row, 0, Transcript())
    assert first == ("You write the parts of all 2 agents of a team, each inside its own tags: "
                     "<agent_0>...</agent_0> <agent_1>...</agent_1>\n\nEvery agent sees:\nT=10:")
    transcript = Transcript().extend(["<agent_1>5</agent_1> <agent_0>3</agent_0>"])
    # the team transcript: what TargetSumEnv's agents would see at turn 2 (own answer first)
    assert env.team_transcript(transcript)[0].responses == ("3", "5")
    assert env.agent_prompts(row, transcript) == ["T=10:3+5:", "T=10:5+3:"]
    second = env.agent_prompt(row, 0, transcript)
    assert second.endswith("<agent_0> sees:\nT=10:3+5:\n\n<agent_1> sees:\nT=10:5+3:")
    assert not env.is_done(row, transcript)
    assert env.is_done(row, transcript.extend(["<agent_0>1</agent_0>"]))


def test_feedback_and_chat_prompts_are_the_wrapped_envs():
    inner = CooperativeWritingEnv(num_turns=2, chat=True)
    env = CentralizedEnv(inner, tags=("summary", "detailed"), format_prompt=lambda texts, tags: " | ".join(texts))
    row = {"text": "My cat ate my homework."}
    transcript = Transcript().extend(["<summary>Cat ate it.</summary><detailed>My cat ate all my homework.</detailed>"
                                      ])
    team = Transcript().extend(["Cat ate it.", "My cat ate all my homework."])
    assert env.feedback(row, transcript) == inner.feedback(row, team) is not None
    prompt = env.agent_prompt(row, 0, transcript)
    assert isinstance(prompt, list) and prompt[0]["role"] == "user"
    expected = [inner.agent_prompt(row, a, team)[-1]["content"] for a in range(2)]
    assert all(e in prompt[0]["content"] for e in expected)


def test_prefill_starts_the_completion_and_counts_in_the_parts():
    from trl_marl.envs import ChatSplitItemsEnv
    from trl_marl.rewards import CentralizedReward, SplitItemsReward

    chat = CentralizedEnv(ChatSplitItemsEnv(2, system_prompt=None, prefill=""), prefill="<agent_0>")
    prompt = chat.agent_prompt({"items": [37, 52]}, 0, Transcript())
    assert [m["role"] for m in prompt] == ["user", "assistant"] and prompt[1]["content"] == "<agent_0>"
    assert chat.split("37</agent_0><agent_1>52</agent_1>") == ["37", "52"]
    assert chat.split([{"role": "assistant", "content": " 37</agent_0>"}]) == ["37", ""]
    transcript = Transcript().extend(["37</agent_0><agent_1>52</agent_1>"])
    assert chat.team_transcript(transcript)[0].responses == ("37", "52")
    reward = CentralizedReward(chat, SplitItemsReward())
    completions = ["37</agent_0><agent_1>52</agent_1>", "37</agent_0><agent_1>37</agent_1>", "<agent_0>37</agent_0>"]
    assert reward([prompt] * 3, completions, items=[[37, 52]] * 3) == [1.0, 0.5, 0.0]  # a second opening tag is
    # malformed: the prefill already opened the section
    text = CentralizedEnv(TargetSumEnv(2), prefill="<agent_0>")
    assert text.agent_prompt({"target": 10}, 0, Transcript()).endswith("Every agent sees:\nT=10:<agent_0>")
    assert CentralizedEnv(TargetSumEnv(2)).split("3</agent_0>") == ["", ""]  # no prefill: nothing is prepended
    with pytest.raises(TypeError, match="`prefill` must be a string"):
        CentralizedEnv(TargetSumEnv(2), prefill=None)


def test_token_id_prompts_are_refused_with_a_clear_error():
    from trl_marl.envs import TokenizedPromptEnv

    env = CentralizedEnv(TokenizedPromptEnv(2))
    with pytest.raises(TypeError, match="only combine text prompts"):
        env.check_row_values({"input_ids": [1, 2]}, "train_dataset", 0)


# ----------------------------------------------------------------------------------------------------------- reward
class Spy:
    """A team reward that records its call and returns the team's TargetSumReward."""

    reward_kind = "team"
    name = "spy"

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, prompts, completions, **kwargs):
        self.calls.append(dict(kwargs, prompts=prompts, completions=completions))
        return TargetSumReward()(prompts, completions, **kwargs)


def test_wrapped_reward_equals_the_team_reward_on_the_same_parts():
    env = CentralizedEnv(TargetSumEnv(2))
    completions = ["<agent_0>3</agent_0><agent_1>7</agent_1>", "<agent_0>3</agent_0><agent_1>6</agent_1>",
                   "<agent_0>3</agent_0>", "nonsense"]
    parts = [env.split(c) for c in completions]
    team = [[p[a] for p in parts] for a in range(2)]
    direct = TargetSumReward()(team[0], team[0], agent_completions=team, target=[10] * 4)
    assert direct == [1.0, 0.0, -0.5, -0.5]  # 3+7=10, 3+6!=10, missing part, no part
    assert CentralizedReward(env, TargetSumReward())(["p"] * 4, completions, target=[10] * 4) == direct


def test_team_reward_is_called_as_a_team_would_be_in_a_trainer():
    env = CentralizedEnv(TargetSumEnv(2, num_turns=2))
    spy = Spy()
    reward = CentralizedReward(env, spy)
    assert reward.name == "centralized_spy" and reward.reward_kind == "team"
    turn_1 = "<agent_0>3</agent_0><agent_1>5</agent_1>"
    turn_2 = [{"role": "assistant", "content": "<agent_0>4</agent_0><agent_1>6</agent_1>"}]
    transcript = Transcript().extend([turn_1]).extend([turn_2[0]["content"]])
    out = reward(["centralised prompt"], [turn_2], agent_prompts=[["centralised prompt"]],
                 agent_completions=[[turn_2]], agent_index=None, turn=2, transcript=[transcript], trainer_state=None,
                 target=[10])
    assert out == [1.0]
    (call,) = spy.calls
    assert call["agent_completions"] == [[[{"role": "assistant", "content": "4"}]],
                                         [[{"role": "assistant", "content": "6"}]]]
    assert call["completions"] == call["agent_completions"][0]
    assert call["agent_prompts"] == [["T=10:3+5:"], ["T=10:5+3:"]]  # what each agent saw at turn 2
    assert call["prompts"] == ["T=10:3+5:"]
    assert call["transcript"][0].turns[0].responses == ("3", "5")
    assert call["transcript"][0].turns[1].responses == ("4", "6")
    assert (call["agent_index"], call["turn"], call["target"]) == (None, 2, [10])


def test_writing_team_reward_on_parts():
    env = CentralizedEnv(CooperativeWritingEnv(), tags=("summary", "detailed"))
    short, detailed = "Cat ate homework.", "My cat ate my homework, and my teacher did not believe me at all."
    team_reward = WritingTeamReward(reference_column=None)
    source = ["My cat ate my homework. The teacher did not believe me."]  # a source they are about: gate 1
    direct = team_reward([short], [short], agent_completions=[[short], [detailed]], text=source)
    wrapped = CentralizedReward(env, team_reward)(
        ["p"], [f"<detailed>{detailed}</detailed><summary>{short}</summary>"], text=source)
    assert wrapped == pytest.approx(direct) and direct[0] > 1.5


def test_agent_rewards_are_averaged_over_the_agents():
    def length(prompts, completions, agent_index=None, **kwargs):
        return [float(len(c)) if c else None for c in completions]
    length.reward_kind = "agent"

    env = CentralizedEnv(TargetSumEnv(2))
    reward = CentralizedReward(env, length)
    assert reward(["p"] * 2, ["<agent_0>12</agent_0><agent_1>3456</agent_1>", "<agent_0>12</agent_0>"]) == [3.0, 2.0]


# ----------------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("num_turns", [1, 2])
def test_one_policy_trains_with_magrpo_on_the_team_reward(target_model_dir, tmp_path, num_turns):
    """MAGRPOTrainer(num_agents=1) runs unchanged on the centralised env; the team reward sees two agents' parts."""
    torch.manual_seed(0)
    # a short prompt: the toy model has 128 positions
    env = CentralizedEnv(TargetSumEnv(2, num_turns=num_turns), format_prompt=lambda texts, tags: "|".join(texts))
    spy = Spy()

    def length(prompts, completions, **kwargs):  # a signal the untrained toy can follow (it writes no tags)
        return [0.1 * len(c) for c in completions]

    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=1, num_turns=num_turns, num_generations=4,
        per_device_train_batch_size=8, max_completion_length=6, learning_rate=3e-3, max_steps=2, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
        reward_isolation="thread",  # the test reads what the spy saw: run the rewards in the trainer's process
    )
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=[CentralizedReward(env, spy), length], env=env,
                            args=args, train_dataset=Dataset.from_dict({"target": [10] * 16}))
    before = [p.detach().clone() for p in trainer.team.parameters()]
    trainer.train()
    after = list(trainer.team.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after))
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert logs and all(math.isfinite(h["loss"]) and math.isfinite(h["reward"]) for h in logs)
    assert "rewards/centralized_spy/mean" in set().union(*(h.keys() for h in logs))
    assert spy.calls and {c["turn"] for c in spy.calls} == set(range(1, num_turns + 1))
    for call in spy.calls:
        assert len(call["agent_completions"]) == 2 and len(call["agent_prompts"]) == 2
        assert all(len(t[call["turn"] - 1].responses) == 2 for t in call["transcript"])
        if call["turn"] == 2:  # agents saw the previous turn's parts, as TargetSumEnv shows them
            assert all(p.startswith("T=10:") and p.endswith(":") and p != "T=10:" for p in call["agent_prompts"][0])


def test_a_task_view_refuses_an_env_it_cannot_wrap_before_reading_it() -> None:
    """`wraps` and `one_turn` narrow what a view of one task accepts; the check names the type, or the turn count and
    its fix, and runs before the view reads the env's attributes (no AttributeError for a wrong type)."""
    from trl_marl.envs.coding_central import CentralizedCodingEnv
    from trl_marl.envs.writing import CentralizedWritingEnv

    with pytest.raises(TypeError, match="must be a MultiAgentEnv, got int"):
        CentralizedEnv(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a CooperativeCodingEnv, got TargetSumEnv"):
        CentralizedCodingEnv(TargetSumEnv(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="CentralizedWritingEnv plays one turn; .* num_turns=2: build it with "
                                         "num_turns=1"):
        CentralizedWritingEnv(CooperativeWritingEnv(num_turns=2))
    assert CentralizedEnv(CooperativeWritingEnv(num_turns=2)).num_turns == 2  # the generic view plays any number
