"""IAC and MAAC in `MultiAgentPPOTrainer`: per-agent critics (IAC, today's behaviour) and one centralized critic
over the joint history (MAAC, `critic_type` V or Q), on the same engine, GAE and value loss."""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.core.ppo import (
    bootstrap_next_turn,
    generalized_advantage_estimation,
    score_positions,
    turn_level_advantages,
)
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards import TargetSumReward
from trl_marl.trainers.ppo.samples import joint_value_prompt, next_turn_values
from trl_marl.trainers.ppo.value import check_joint_tokenizers, sequence_scores

warnings.filterwarnings("ignore")


def trainer(path: str, tmp_path: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_turns=2, per_device_train_batch_size=4,
        gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=1, total_episodes=8, response_length=4,
        stop_token="eos", learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1,
        num_sample_generations=0, disable_tqdm=True, seed=0, temperature=1.0,
    )
    kwargs.update(overrides)
    return MultiAgentPPOTrainer(args=MultiAgentPPOConfig(**kwargs), model=path, env=TargetSumEnv(2, num_turns=2),
                                reward_funcs=TargetSumReward(), train_dataset=Dataset.from_dict({"target": [10] * 16}))


def weight_sums(tr: MultiAgentPPOTrainer) -> list[float]:
    return [float(sum(p.detach().double().abs().sum() for p in m.parameters()))
            for m in [*tr.team.models, *tr.wrapper.value_models]]


# ------------------------------------------------------------------------------------------------ the critic's inputs
def test_joint_value_prompt_by_hand():
    prompts, completions = [[1, 2], [3], [4, 5]], [[7], [8, 9], [6]]
    assert joint_value_prompt(prompts, completions, 0, "V") == [1, 2, 3, 4, 5]  # V(s): every agent's prompt
    assert joint_value_prompt(prompts, completions, 2, "V") == [1, 2, 3, 4, 5]  # the same state for every agent
    assert joint_value_prompt(prompts, completions, 0, "Q") == [1, 2, 3, 4, 5, 8, 9, 6]  # + the others' actions
    assert joint_value_prompt(prompts, completions, 1, "Q") == [1, 2, 3, 4, 5, 7, 6]


def test_q_critic_baseline_reads_the_others_actions_not_its_own():
    # critic_type="Q" values agent 0's response from Q(s, a_-0): the joint history and agent 1's response, not agent
    # 0's own (a baseline that read it would depend on the action it judges, see `joint_value_prompt`)
    prompts = [[1, 2], [3]]
    base = joint_value_prompt(prompts, [[7], [8, 9]], 0, "Q")
    assert base == [1, 2, 3, 8, 9]
    assert joint_value_prompt(prompts, [[5, 5, 5], [8, 9]], 0, "Q") == base  # its own response: not read
    assert joint_value_prompt(prompts, [[7], [4]], 0, "Q") == [1, 2, 3, 4]  # the other agent's: read
    assert joint_value_prompt(prompts, [[7], [8, 9]], 1, "Q") == [1, 2, 3, 7]


def strip_left(ids: torch.Tensor, pad: int) -> list[int]:
    ids = ids.tolist()
    while ids and ids[0] == pad:
        ids.pop(0)
    return ids


@pytest.mark.parametrize("critic_type", ["V", "Q"])
def test_centralized_critic_reads_the_joint_history_and_feeds_gae(target_model_dir, tmp_path, critic_type):
    tr = trainer(target_model_dir, tmp_path, critic="centralized", critic_type=critic_type)
    assert len(tr.wrapper.value_models) == 1 and tr.wrapper.value_index == [0, 0]
    seen: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
    original = tr.compute_advantages

    def spy(rewards, values, policy_masks, value_masks):
        seen.append(([r.clone() for r in rewards], [v.clone() for v in values]))
        return original(rewards, values, policy_masks, value_masks)

    tr.compute_advantages = spy
    rows = [{"target": 10}] * 3
    with torch.no_grad():
        rollouts = tr.rollout(rows)
    played = tr.last_rollout
    pad = tr.team.tokenizers[0].pad_token_id
    critic = tr.wrapper.value_models[0]
    assert len(seen) == 2  # one whitening group per agent, both valued by the one critic
    for a, ro in enumerate(rollouts):
        for i in range(ro.responses.size(0)):
            turn = played.turns[int(ro.turns[i]) - 1]
            k = [node.row_index for node in turn.nodes].index(int(ro.rows[i]))
            expected = joint_value_prompt([turn.prompt_ids[b][k] for b in range(2)],
                                          [turn.completion_ids[b][k] for b in range(2)], a, critic_type)
            query = strip_left(ro.value_query_responses[i, : ro.value_context_length], pad)
            assert query == expected
            assert ro.value_query_responses[i, ro.value_context_length:].tolist() == ro.responses[i].tolist()
        # the values given to GAE are the centralized critic's on those inputs, at the response's positions
        Cv = ro.value_context_length
        full, _ = sequence_scores(critic, ro.value_query_responses, pad, Cv)
        expected_values = torch.masked_fill(full[:, Cv - 1 : -1].float(), ~ro.value_mask, 0)
        rewards, values = seen[a]
        torch.testing.assert_close(values[0], expected_values)
        adv, ret = generalized_advantage_estimation(rewards[0], expected_values, tr.args.gamma, tr.args.lam)
        torch.testing.assert_close(ro.returns, ret)


@pytest.mark.parametrize("critic_type", ["V", "Q"])
def test_maac_runs_multi_turn_and_updates_its_critic(target_model_dir, tmp_path, critic_type):
    tr = trainer(target_model_dir, tmp_path, critic="centralized", critic_type=critic_type)
    critic = tr.wrapper.value_models[0]
    before = {n: p.detach().clone() for n, p in critic.named_parameters()}
    policies = [{n: p.detach().clone() for n, p in tr.team.policy(a).named_parameters()} for a in range(2)]
    tr.train()
    assert any(not torch.equal(before[n], p) for n, p in critic.named_parameters())
    for a in range(2):
        assert any(not torch.equal(policies[a][n], p) for n, p in tr.team.policy(a).named_parameters())
    logs = [h for h in tr.state.log_history if "loss/value_avg" in h]
    assert len(logs) == 2 and all(torch.isfinite(torch.tensor(h["loss/value_avg"])) for h in logs)
    assert {"agent_0/turn_2/reward", "agent_1/loss/value_avg"} <= set(logs[-1])
    out = tmp_path / "saved"
    tr.save_model(str(out))
    assert (out / "value_model_0").exists() and not (out / "value_model_1").exists()


# ------------------------------------------------------------------------------------------------ IAC
# IAC is the trainer's per-agent value models as they were before `critic` existed (checked once when it was added:
# the weights of a fixed-seed run equal those of the commit before). Here: its inputs and values, by construction.
def test_iac_is_todays_per_agent_critic(target_model_dir, tmp_path):
    tr = trainer(target_model_dir, tmp_path, critic="per_agent")
    assert tr.args.critic_type is None and tr.wrapper.value_index == [0, 1] and len(tr.wrapper.value_models) == 2
    with torch.no_grad():
        rollouts = tr.rollout([{"target": 10}] * 3)
    played = tr.last_rollout
    pad = tr.team.tokenizers[0].pad_token_id
    for a, ro in enumerate(rollouts):
        for i in range(ro.responses.size(0)):
            turn = played.turns[int(ro.turns[i]) - 1]
            k = [node.row_index for node in turn.nodes].index(int(ro.rows[i]))
            # each agent's critic reads that agent's own prompt (its view of the debate so far) and its response
            assert strip_left(ro.value_query_responses[i, : ro.value_context_length], pad) == turn.prompt_ids[a][k]
            assert ro.value_query_responses[i, ro.value_context_length:].tolist() == ro.responses[i].tolist()
        Cv = ro.value_context_length
        full, _ = sequence_scores(tr.wrapper.value_models[a], ro.value_query_responses, pad, Cv)
        torch.testing.assert_close(ro.values, torch.masked_fill(full[:, Cv - 1 : -1].float(), ~ro.value_mask, 0))
    before = weight_sums(tr)
    tr.train()
    after = weight_sums(tr)
    assert all(b != a for b, a in zip(before, after))  # both policies and both critics learn


# ------------------------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("overrides, message", [
    (dict(critic="joint"), "critic"),
    (dict(critic_type="Q"), "centralized critic"),
    (dict(critic="centralized", critic_type="A"), "critic_type"),
    (dict(critic="centralized", value_input="answer"), "value_input"),
    (dict(turn_gamma=1.5), "turn_gamma"),
    (dict(advantage_mode="response"), "advantage_mode"), (dict(advantage_mode="mean"), "group estimator"),
])
def test_bad_critic_settings(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none", **overrides)


def test_critic_type_defaults_and_case():
    assert MultiAgentPPOConfig(output_dir="o", report_to="none", critic="centralized").critic_type == "V"
    assert MultiAgentPPOConfig(output_dir="o", report_to="none", critic="centralized", critic_type="q").critic_type \
        == "Q"


def test_centralized_critic_needs_one_vocabulary():
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return self.vocab

    check_joint_tokenizers([Tok({"a": 0}), Tok({"a": 0})])
    with pytest.raises(ValueError, match="agent 1's tokenizer has another vocabulary"):
        check_joint_tokenizers([Tok({"a": 0}), Tok({"b": 0})])


# ------------------------------------------------------------------------------------------------ between turns
def test_bootstrap_next_turn_by_hand():
    rewards = torch.zeros(2, 4)
    out = bootstrap_next_turn(rewards, torch.tensor([1, 3]), torch.tensor([0.5, 2.0]), 0.9)
    # score steps: len + 1 = 2 (fits in the window), and 3 (len + 1 = 4 does not fit: the last step)
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 0.45, 0.0], [0.0, 0.0, 0.0, 1.8]]))
    assert torch.equal(rewards, torch.zeros(2, 4))  # not in place


def test_next_turn_values_find_the_agents_next_sample_in_any_slot():
    def slot(turns, agents, rows, first_values):
        values = torch.tensor(first_values).unsqueeze(1).repeat(1, 3)
        return SimpleNamespace(turns=torch.tensor(turns), agents=torch.tensor(agents), rows=torch.tensor(rows),
                               values=values)

    rollouts = [
        slot([1, 1, 2], [0, 0, 0], [0, 1, 0], [0.1, 0.2, 0.3]),  # agent 0, both turns (row 1 ended after turn 1)
        slot([1], [1], [0], [0.5]),                                # agent 1, turn 1
        None,
        slot([2], [1], [0], [0.7]),                                # agent 1, turn 2 (its own slot: agent_turn)
    ]
    out = next_turn_values(rollouts)
    torch.testing.assert_close(out[0], torch.tensor([0.3, 0.0, 0.0]))
    torch.testing.assert_close(out[1], torch.tensor([0.7]))
    assert out[2] is None
    torch.testing.assert_close(out[3], torch.tensor([0.0]))


@pytest.mark.parametrize("critic", ["per_agent", "centralized"])
def test_turn_gamma_bootstraps_turn_one_from_the_critics_next_state_value(target_model_dir, tmp_path, critic):
    tr = trainer(target_model_dir, tmp_path, critic=critic, turn_gamma=0.5)
    seen: list[torch.Tensor] = []
    original = tr.compute_advantages

    def spy(rewards, values, policy_masks, value_masks):
        seen.append(rewards[0].clone())
        return original(rewards, values, policy_masks, value_masks)

    tr.compute_advantages = spy
    with torch.no_grad():
        rollouts = tr.rollout([{"target": 10}] * 4)
    nxt = next_turn_values(rollouts)
    bootstrapped = 0
    for a, ro in enumerate(rollouts):
        plain = ro.non_score_rewards.clone()
        rows = torch.arange(plain.size(0))
        plain[rows, score_positions(ro.sequence_lengths, plain.size(1))] += ro.scores
        extra = seen[a] - plain
        step = score_positions(ro.sequence_lengths, plain.size(1))
        for i in range(plain.size(0)):
            if int(ro.turns[i]) == 2:
                assert nxt[a][i] == 0 and torch.allclose(extra[i], torch.zeros_like(extra[i]), atol=1e-6)
            else:
                # V(s_2) of the same agent and episode: the critic's value before its first turn-2 token
                j = [k for k in range(plain.size(0)) if int(ro.turns[k]) == 2 and ro.rows[k] == ro.rows[i]]
                assert len(j) == 1 and nxt[a][i] == ro.values[j[0], 0] != 0
                assert extra[i, step[i]].item() == pytest.approx(0.5 * ro.values[j[0], 0].item(), abs=1e-6)
                bootstrapped += 1
    assert bootstrapped == 8  # 4 episodes x 2 agents, each with a second turn
    tr.train()
    assert all(torch.isfinite(torch.tensor(h["loss/value_avg"])) for h in tr.state.log_history
               if "loss/value_avg" in h)


# ------------------------------------------------------------------------------------------------ turn-level credit
def test_turn_level_advantages_by_hand():
    # A 3-token response scored 1 at its last step, values 0.2, 0.5, 0.9: per-token GAE (gamma = lam = 1) gives
    # A_t = R - V_t = 0.8, 0.5, 0.1; turn-level credit gives the response A = R - V(s_0) = 0.8.
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.2, 0.5, 0.9]])
    adv, ret = generalized_advantage_estimation(rewards, values, 1.0, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.8, 0.5, 0.1]]))
    torch.testing.assert_close(turn_level_advantages(rewards, values, 1.0), torch.tensor([0.8]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]]))
    # gamma = 0.5: R = r_0 + 0.5 r_1 + 0.25 r_2 = 0.25, A = 0.25 - 0.2
    torch.testing.assert_close(turn_level_advantages(rewards, values, 0.5), torch.tensor([0.05]))
    # the KL penalty of every token counts: R = 1 - 0.1 - 0.1 - 0.1
    torch.testing.assert_close(turn_level_advantages(rewards - 0.1, values, 1.0), torch.tensor([0.5]))


def test_turn_level_advantage_does_not_depend_on_lam():
    # The audit's example: a 53-token response (last token at step 52) scored 1 on step 53, V = 0 everywhere.
    # R - V(s) = 1; GAE's first step at the default lam = 0.95 is 0.95^53 = 0.066.
    rewards, values = torch.zeros(1, 60), torch.zeros(1, 60)
    rewards[0, 53] = 1.0
    gae, _ = generalized_advantage_estimation(rewards, values, 1.0, 0.95)
    assert gae[0, 0].item() == pytest.approx(0.95**53) == pytest.approx(0.06597, abs=1e-5)
    torch.testing.assert_close(turn_level_advantages(rewards, values, 1.0), torch.tensor([1.0]))


def _turn_level_group() -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
    """One whitening group (one slot) of three responses in a window of 10 steps, gamma = 1:

    - 0: one token (step 0), KL penalty -0.05 on it, scored 1 on step 1; V = 0.2, 0.6: A = 0.95 - 0.2 = 0.75;
    - 1: one token, scored 0 (it failed); V = 0.2, 0.6: A = 0 - 0.2 = -0.2;
    - 2: eight tokens (steps 0-7), scored 0 on step 8 (it failed); V = 0.5, then 0.3 on steps 1-8: A = -0.5.
    """
    rewards, values = torch.zeros(3, 10), torch.zeros(3, 10)
    rewards[0, 0] = -0.05
    rewards[0, 1] = 1.0
    values[0, :2] = values[1, :2] = torch.tensor([0.2, 0.6])
    values[2, 0], values[2, 1:9] = 0.5, 0.3
    lengths = torch.tensor([0, 0, 7])
    steps = torch.arange(10).unsqueeze(0)
    return [rewards], [values], [steps <= lengths.unsqueeze(1)], [steps <= (lengths + 1).unsqueeze(1)]


def test_turn_level_credit_whitens_one_advantage_per_response(tmp_path):
    # A = [0.75, -0.2, -0.5], whitened over the three responses (mean 0.016667, unbiased std 0.652559), then given
    # to every token: [1.12378, -0.33203, -0.79176]. The failing one-token response stays negative. Whitening the
    # broadcast tokens instead (ten tokens, eight of them -0.5: mean -0.345, std 0.3961) would give it
    # +0.145 / 0.3961 = +0.366; with lam = 0.95's first-step advantages [0.73, -0.17, -0.399] as well, +0.262.
    args = MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none", advantage_mode="turn")
    assert (args.gamma, args.lam, args.whiten_rewards) == (1.0, 0.95, False)
    rewards, values, policy_masks, value_masks = _turn_level_group()
    advantages, returns = MultiAgentPPOTrainer.compute_advantages(
        SimpleNamespace(args=args), rewards, values, policy_masks, value_masks)
    expected = torch.zeros(3, 10)
    expected[0, 0], expected[1, 0], expected[2, :8] = 1.12378, -0.33203, -0.79176
    torch.testing.assert_close(advantages[0], expected, atol=1e-4, rtol=0)
    # the value targets stay GAE(gamma, lam)'s returns
    torch.testing.assert_close(returns[0], generalized_advantage_estimation(rewards[0], values[0], 1.0, 0.95)[1])


def test_turn_level_credit_whitens_a_shared_group_jointly(tmp_path):
    # Two slots of one whitening group (a team that shares one policy): the three responses of the example above,
    # split over the slots, are whitened together, as one group of three.
    args = MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none", advantage_mode="turn")
    (rewards,), (values,), (policy,), (value,) = _turn_level_group()
    split = [slice(0, 1), slice(1, 3)]
    advantages, _ = MultiAgentPPOTrainer.compute_advantages(
        SimpleNamespace(args=args), [rewards[i] for i in split], [values[i] for i in split],
        [policy[i] for i in split], [value[i] for i in split])
    torch.testing.assert_close(advantages[0][0, 0], torch.tensor(1.12378), atol=1e-4, rtol=0)
    torch.testing.assert_close(advantages[1][:, 0], torch.tensor([-0.33203, -0.79176]), atol=1e-4, rtol=0)
    assert advantages[1][0, 1:].abs().sum() == 0 and advantages[1][1, 8:].abs().sum() == 0


@pytest.mark.parametrize("critic", ["per_agent", "centralized"])
def test_turn_level_credit_gives_each_response_one_advantage(target_model_dir, tmp_path, critic):
    # In a real rollout: every token of a response gets the response's R - V(s) (eq. 7), whitened over the group's
    # responses, one entry each.
    tr = trainer(target_model_dir, tmp_path, critic=critic, advantage_mode="turn")
    seen: list[tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]] = []
    original = tr.compute_advantages

    def spy(rewards, values, policy_masks, value_masks):
        out = original(rewards, values, policy_masks, value_masks)
        seen.append(([r.clone() for r in rewards], [v.clone() for v in values], policy_masks, out[0]))
        return out

    tr.compute_advantages = spy
    with torch.no_grad():
        tr.rollout([{"target": 10}] * 3)
    assert len(seen) == 2
    for rewards, values, masks, advantages in seen:
        r, v, m, adv = rewards[0], values[0], masks[0], advantages[0]
        counted = m.any(dim=1)
        assert int(counted.sum()) >= 2
        a = r.sum(dim=1) - v[:, 0]  # R - V(s) with gamma = 1, by hand
        a = a[counted]
        whitened = (a - a.mean()) / torch.sqrt(a.var() + 1e-8)
        expected = torch.zeros_like(adv)
        expected[counted] = whitened.unsqueeze(1).expand(-1, adv.size(1))
        torch.testing.assert_close(adv, torch.where(m, expected, torch.zeros_like(expected)), atol=1e-5, rtol=0)
    tr.train()
    assert all(torch.isfinite(torch.tensor(h["loss/policy_avg"])) for h in tr.state.log_history
               if "loss/policy_avg" in h)
