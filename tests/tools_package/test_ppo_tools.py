"""A team with tools inside MAPoRL's PPO: the results are part of the agent's response but not its actions, so they
leave the policy and value losses and GAE skips them; the response is cut after the agent's last message, not after
its tool call. Generation is scripted (`helpers.scripted`): agent 0 has an `add` tool and calls it once before
answering; agent 1 has none."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset

from helpers import ANSWER, CALL, PARTNER, add, scripted
from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.core.ppo import generalized_advantage_estimation
from trl_marl.tools import tool_suffix_ids
from trl_marl.tools.templates import ToolFormat
from trl_marl.trainers.ppo.samples import put_tool_steps_back, skip_tool_steps


def answered(prompts, completions, **kwargs):
    return [1.0 if ANSWER in str(c) else 0.0 for c in completions]


def from_the_result(prompts, completions, agent_tool_messages, agent_index, **kwargs):
    """Agent 0: its calculator's result (read from its turn's messages); agent 1 (no tools): 1 when it has none."""
    if agent_index == 1:
        return [float(agent_tool_messages[1] is None)] * len(completions)
    return [float(turn[1]["content"]) for turn in agent_tool_messages[0]]


def make_ppo(model_dir: str, out: str, tools, reward=answered, **extra) -> MultiAgentPPOTrainer:
    settings = dict(output_dir=out, num_agents=2, per_device_train_batch_size=2, total_episodes=2, response_length=160,
                    stop_token="eos", num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="no",
                    num_sample_generations=0, logging_steps=1, seed=0, gamma=1.0, lam=1.0)
    args = MultiAgentPPOConfig(**{**settings, **extra})
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": "Add 2 and 3."}]}] * 2)
    return MultiAgentPPOTrainer(args=args, model=model_dir, reward_funcs=reward, train_dataset=dataset, tools=tools)


def test_gae_skips_the_steps_the_tool_loop_wrote():
    """Steps 1-2 are a tool result: GAE runs over steps 0, 3, 4 as if they were consecutive (hand-computed), and the
    result steps get 0."""
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.9, 0.9, 0.6, 0.8]])
    mask = torch.tensor([[1, 0, 0, 1, 1]])
    adv, ret = generalized_advantage_estimation(skip_tool_steps(rewards, mask), skip_tool_steps(values, mask),
                                                1.0, 0.5)
    # deltas over the agent's steps: 0 + 0.6 - 0.5 = 0.1, 0 + 0.8 - 0.6 = 0.2, 1 - 0.8 = 0.2;
    # A = (0.1 + 0.5 * 0.3, 0.2 + 0.5 * 0.2, 0.2) = (0.25, 0.3, 0.2); returns A + V = (0.75, 0.9, 1.0)
    torch.testing.assert_close(put_tool_steps_back(adv, mask), torch.tensor([[0.25, 0.0, 0.0, 0.3, 0.2]]))
    torch.testing.assert_close(put_tool_steps_back(ret, mask), torch.tensor([[0.75, 0.0, 0.0, 0.9, 1.0]]))
    # through the result steps instead (what the tool mask prevents) the first action would get another value
    through, _ = generalized_advantage_estimation(rewards, values, 1.0, 0.5)
    assert abs(float(through[0, 0]) - 0.25) > 0.01


def test_ppo_agent_with_tools_trains_only_on_its_own_tokens(chat_model_dir, tmp_path):
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None])
    calls = {"first": 0, "after_tool": 0}
    prompts: list[list[str]] = [[], []]
    trainer.team.generate = scripted(trainer, calls, prompts)
    tokenizer = trainer.team.tokenizers[0]
    pad = tokenizer.pad_token_id
    rollouts = trainer.rollout(list(trainer.train_dataset))

    assert '"name": "add"' in prompts[0][0] and "<tools>" not in prompts[1][0]
    assert calls == {"first": 2, "after_tool": 2}
    call_ids = tokenizer(CALL, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    answer_ids = tokenizer(ANSWER, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    suffix = tool_suffix_ids(tokenizer, ToolFormat(), [{"role": "tool", "name": "add", "content": "5"}])
    n_call, n_suffix, n_answer = len(call_ids), len(suffix), len(answer_ids)
    ro = rollouts[0]
    assert ro.texts == [ANSWER, ANSWER] and ro.scores.tolist() == [1.0, 1.0]  # the reward read the answer
    for i in range(2):
        kept = ro.postprocessed[i][ro.postprocessed[i] != pad].tolist()
        assert kept == call_ids + suffix + answer_ids  # cut after the answer's EOS, not after the call's
        assert int(ro.sequence_lengths[i]) == n_call + n_suffix + n_answer - 1
        written = torch.zeros(ro.responses.size(1), dtype=torch.bool)
        written[n_call: n_call + n_suffix] = True
        assert ro.tool_mask[i].eq(0).tolist() == written.tolist()
        own = torch.zeros_like(written)
        own[: n_call + n_suffix + n_answer] = True
        own &= ~written
        assert ro.policy_mask[i].tolist() == own.tolist()  # the call and the answer, not the result
        assert not bool(ro.value_mask[i][written].any()) and bool(ro.value_mask[i][own].all())
        assert not bool(ro.advantages[i][written].any()) and not bool(ro.returns[i][written].any())
        assert bool((ro.kl[i][written] == 0).all())
    assert ro.tool_mask is not None and rollouts[1].tool_mask is None  # agent 1 has no tools
    assert rollouts[1].texts == [PARTNER, PARTNER]


def test_ppo_with_tools_trains_and_logs_tool_use(chat_model_dir, tmp_path):
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None])
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    before = [p.detach().clone() for p in trainer.team.models[0].parameters() if p.requires_grad]
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["agent_0/tools/call_frequency"] == 1.0 and logged["agent_0/tools/failure_frequency"] == 0.0
    assert "agent_1/tools/call_frequency" not in logged
    after = [p for p in trainer.team.models[0].parameters() if p.requires_grad]
    assert any(not torch.equal(b, a) for b, a in zip(before, after))


def test_ppo_tools_need_a_stop_token(tmp_path):
    with pytest.raises(ValueError, match=r"set `stop_token='eos'`"):
        make_ppo("no-model-is-loaded", str(tmp_path), [add], stop_token=None)


@pytest.mark.parametrize("answer_ends", [True, False])
def test_missing_eos_penalty_reads_the_last_message(chat_model_dir, tmp_path, answer_ends):
    """The tool call's message ends with an EOS; the penalty asks whether the agent's *answer* did."""
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None], missing_eos_penalty=1.0)
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []], answer_ends=answer_ends)
    rollouts = trainer.rollout(list(trainer.train_dataset))
    assert rollouts[0].texts == [ANSWER, ANSWER]
    assert rollouts[0].scores.tolist() == ([1.0, 1.0] if answer_ends else [0.0, 0.0])


def test_a_member_per_turn_gets_the_tools_of_the_agent_it_plays(chat_model_dir, tmp_path):
    """`policy_sharing="agent_turn"`: members 0 and 2 play agent 0 at turns 1 and 2, and both have its tool."""
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None], policy_sharing="agent_turn", num_turns=2)
    prompts: list[list[str]] = [[], [], [], []]
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, prompts, tool_members=(0, 2))
    rollouts = trainer.rollout(list(trainer.train_dataset))
    assert [ro.tool_mask is not None for ro in rollouts] == [True, False, True, False]
    assert rollouts[0].texts == rollouts[2].texts == [ANSWER, ANSWER]
    assert "<tools>" in prompts[2][0] and "<tools>" not in prompts[3][0]


def test_tools_for_a_team_that_does_not_fit_the_agents_are_refused():
    from types import SimpleNamespace

    from trl_marl.tools import ToolLoop, team_tools

    team = SimpleNamespace(num_agents=3, agents_per_turn=3)
    with pytest.raises(ValueError, match="given for 2 agents, but the team has 3 members"):
        ToolLoop.for_team(team_tools([add], None, 2), team, MultiAgentPPOConfig(output_dir="unused"))


def test_ppo_rewards_read_each_agents_calls_and_results(chat_model_dir, tmp_path):
    """PPO's reward functions get `agent_tool_messages` too (one sample per agent and episode)."""
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None], from_the_result)
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    rollouts = trainer.rollout(list(trainer.train_dataset))
    assert rollouts[0].scores.tolist() == [5.0, 5.0] and rollouts[1].scores.tolist() == [1.0, 1.0]


def test_ppo_evaluation_rewards_read_each_agents_calls_too(chat_model_dir, tmp_path):
    """The evaluation scores each turn as training does: a reward reading the calculator's result works there."""
    trainer = make_ppo(chat_model_dir, str(tmp_path), [[add], None], from_the_result)
    trainer.team.generate = scripted(trainer, {"first": 0, "after_tool": 0}, [[], []])
    _, rewards = trainer.play_evaluation_episodes(list(trainer.train_dataset))
    assert rewards == {1: [3.0, 3.0]}  # per episode, the mean over the agents: (5 + 1) / 2
