"""The per-agent local reward channel of `JointRollout` (`local_reward=`), on scripted trees: every number by hand.

Each agent's local reward is scored per joint action, backed up through the tree like the team reward (per agent),
credited to that agent's samples (`TurnResult.local_returns`) and mixed in by `"agent_turn"` (AT-GRPO).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from helpers import ScriptedTeam
from trl_marl.envs.base import MultiAgentEnv, Transcript
from trl_marl.reward_contract import LocalReward, TeamReward, agent_reward, team_reward
from trl_marl.rollout import JointRollout, assign_advantages, flat_group_fraction


class _Env(MultiAgentEnv):
    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> str:
        return f"a{agent_index}t{len(transcript) + 1}"


_ScriptedTeam = ScriptedTeam  # sample g of every node is the one-token completion `g`


def _path(tr: Transcript, agent: int) -> tuple[int, ...]:
    return tuple(int(step.responses[agent]) for step in tr)


def _team(table: dict[tuple[int, ...], float]):
    def team(prompts, completions, transcript, **kwargs) -> list[float]:
        return [table[_path(tr, 0)] for tr in transcript]

    return team


CALLS: list[tuple[str, int | None, int]] = []


def _local(table: dict[tuple[int, tuple[int, ...]], float | None], name: str = "local"):
    """Agent a's local reward read from `table[(a, agent a's path of completions)]`; records who was scored."""

    def local(prompts, completions, agent_index, agent_completions, transcript, turn, **kwargs) -> list:
        CALLS.append((name, agent_index, turn))
        out = []
        for i, tr in enumerate(transcript):  # `completions` are agent `agent_index`'s, as for an agent reward
            assert completions[i] == agent_completions[agent_index][i] == tr[turn - 1].responses[agent_index]
            out.append(table[(agent_index, _path(tr, agent_index))])
        return out

    local.__name__ = name
    return local


def _rollout(num_turns: int, discount: float, team: dict, local: Any, G: int = 2, **kwargs: Any) -> JointRollout:
    return JointRollout(_Env(num_agents=2, num_turns=num_turns), _ScriptedTeam(2, G), TeamReward([_team(team)]),
                        generation_config=None, num_generations=G, discount=discount,
                        local_reward=LocalReward(local, 2) if not isinstance(local, LocalReward) else local, **kwargs)


# Two agents, two turns, G = 2 aligned (joint action g: both agents wrote "g"), gamma = .5; both joint actions of
# the root continue, so turn 2 has node 0 (after joint 0) and node 1 (after joint 1).
TEAM = {(0,): 1.0, (1,): 0.0, (0, 0): 0.0, (0, 1): 2.0, (1, 0): 1.0, (1, 1): 1.0}
LOCAL = {  # (agent, that agent's completions so far) -> its local reward
    (0, (0,)): 0.0, (0, (1,)): 3.0, (0, (0, 0)): 1.0, (0, (0, 1)): 1.0, (0, (1, 0)): 0.0, (0, (1, 1)): 4.0,
    (1, (0,)): 2.0, (1, (1,)): 2.0, (1, (0, 0)): 0.0, (1, (0, 1)): 2.0, (1, (1, 0)): 0.0, (1, (1, 1)): 0.0,
}


def test_local_returns_of_a_two_agent_two_turn_tree_by_hand():
    # Team: turn 2 R = [0, 2] (node 0, value 1) and [1, 1] (node 1, value 1); turn 1 R = [1 + .5, 0 + .5] = [1.5, .5].
    # Agent 0's local: turn 2 [1, 1] (value 1) and [0, 4] (value 2); turn 1 [0 + .5 * 1, 3 + .5 * 2] = [.5, 4].
    # Agent 1's local: turn 2 [0, 2] (value 1) and [0, 0] (value 0); turn 1 [2 + .5 * 1, 2 + .5 * 0] = [2.5, 2].
    turns = _rollout(2, 0.5, TEAM, [_local(LOCAL)]).run([{}]).turns
    first, second = turns
    torch.testing.assert_close(first.returns, torch.tensor([[1.5, 0.5]]))
    torch.testing.assert_close(first.local_rewards, torch.tensor([[[0.0, 2.0], [3.0, 2.0]]]))  # (K, J, n)
    torch.testing.assert_close(first.local_returns, torch.tensor([[[0.5, 4.0], [2.5, 2.0]]]))  # (K, n, G)
    torch.testing.assert_close(second.local_returns,
                               torch.tensor([[[1.0, 1.0], [0.0, 2.0]], [[0.0, 4.0], [0.0, 0.0]]]))
    # the team returns are those of the same rollout without a local reward
    plain = JointRollout(_Env(num_agents=2, num_turns=2), _ScriptedTeam(2, 2), TeamReward([_team(TEAM)]),
                         generation_config=None, num_generations=2, discount=0.5).run([{}]).turns
    for with_local, without in zip(turns, plain):
        torch.testing.assert_close(with_local.agent_returns, without.agent_returns)
        assert without.local_returns is None


def test_agent_turn_mixes_the_local_returns_and_differs_from_std():
    # R~ = alpha R + R^loc with alpha = 1; G = 2, so a group's advantages are +-(d / 2) / (|d| / sqrt 2 + 1e-4).
    # Turn 1, agent 0: R~ = [1.5 + .5, .5 + 4] = [2, 4.5]: [-a, +a] where "std" (team [1.5, .5]) gives [+a, -a];
    #         agent 1: R~ = [4, 2.5]: [+a, -a], as "std".
    # Turn 2, node 0: agent 0 [0 + 1, 2 + 1] = [1, 3]: [-a, +a]; agent 1 [0, 4]: [-a, +a] (std: [-a, +a]).
    #         node 1: agent 0 [1 + 0, 1 + 4] = [1, 5]: [-a, +a]; agent 1 [1, 1]: [0, 0] (std: the team's flat [0, 0]).
    turns = _rollout(2, 0.5, TEAM, [_local(LOCAL)]).run([{}]).turns
    assign_advantages(turns, "agent_turn")
    d = {gap: (gap / 2) / (gap / math.sqrt(2) + 1e-4) for gap in (1.5, 2.0, 2.5, 4.0)}
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[-d[2.5], d[2.5]], [d[1.5], -d[1.5]]]]))
    torch.testing.assert_close(turns[1].advantages, torch.tensor([[[-d[2.0], d[2.0]], [-d[4.0], d[4.0]]],
                                                                  [[-d[4.0], d[4.0]], [0.0, 0.0]]]))
    agent_turn = [t.advantages.clone() for t in turns]
    assign_advantages(turns, "std")
    a = 0.5 / (1 / math.sqrt(2) + 1e-4)
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[a, -a], [a, -a]]]))
    assert not torch.allclose(agent_turn[0], turns[0].advantages)
    assert not torch.allclose(agent_turn[1], turns[1].advantages)
    # alpha = 9: the team reward wins for agent 0 at turn 1: R~ = [13.5 + .5, 4.5 + 4] = [14, 8.5] -> [+, -]
    assign_advantages(turns, "agent_turn", team_weight=9.0)
    gap = 5.5
    torch.testing.assert_close(turns[0].advantages[0, 0],
                               torch.tensor([1.0, -1.0]) * (gap / 2) / (gap / math.sqrt(2) + 1e-4))


def test_cross_mode_credits_each_agent_its_own_local_reward():
    # One turn, G = 2, cross: joint actions (0, 0), (0, 1), (1, 0), (1, 1). Agent 0's local reward is 1 when it
    # wrote something other than agent 1, agent 1's is its own completion times 10 (another agent's never mixes in).
    # Agent 0: joint [0, 1, 1, 0] -> sample 0 (joints 0, 1) .5, sample 1 (joints 2, 3) .5.
    # Agent 1: joint [0, 10, 0, 10] -> sample 0 (joints 0, 2) 0, sample 1 (joints 1, 3) 10.
    @agent_reward
    def own(completions, agent_index, agent_completions, **kwargs):
        if agent_index == 0:
            return [float(c != o) for c, o in zip(completions, agent_completions[1])]
        return [10.0 * int(c) for c in completions]

    rollout = _rollout(1, 1.0, {(0,): 0.0, (1,): 1.0}, [own], joint_mode="cross")
    turn = rollout.run([{}]).turns[0]
    torch.testing.assert_close(turn.local_rewards, torch.tensor([[[0.0, 0.0], [1.0, 10.0], [1.0, 0.0], [0.0, 10.0]]]))
    torch.testing.assert_close(turn.local_returns, torch.tensor([[[0.5, 0.5], [0.0, 10.0]]]))


def test_per_agent_lists_weights_none_and_nonfinite():
    # Agent 0 is scored by `f` (weight 2) and `g` (weight 1), agent 1 by `h` alone (weight .5): each function is
    # called for its own agent only. `f` skips sample 0 (None: adds nothing), `g` gives 1 everywhere; `h` gives NaN
    # for sample 1 (non-finite: that sample's local reward is NaN, counted) and 4 for sample 0.
    CALLS.clear()
    f = _local({(0, (0,)): None, (0, (1,)): 3.0}, "f")
    g = _local({(0, (0,)): 1.0, (0, (1,)): 1.0}, "g")
    h = _local({(1, (0,)): 4.0, (1, (1,)): float("nan")}, "h")
    local = LocalReward([[f, g], [h]], num_agents=2, weights=[2.0, 1.0, 0.5])
    assert local.names(0) == ["f", "g"] and local.names(1) == ["h"]
    result = _rollout(1, 1.0, {(0,): 0.0, (1,): 1.0}, local).run([{}])
    assert sorted(CALLS) == [("f", 0, 1), ("g", 0, 1), ("h", 1, 1)]
    turn = result.turns[0]
    # agent 0: [2 * None + 1 * 1, 2 * 3 + 1 * 1] = [1, 7]; agent 1: [.5 * 4, NaN]
    torch.testing.assert_close(turn.local_rewards, torch.tensor([[[1.0, 2.0], [7.0, float("nan")]]]), equal_nan=True)
    assert result.nonfinite_rewards == 1
    assign_advantages(result.turns, "agent_turn")
    # agent 0: R~ = [0 + 1, 1 + 7] -> [-a, +a]; agent 1: R~ = [2, NaN]: one valid sample -> [0, 0]
    a = 3.5 / (7 / math.sqrt(2) + 1e-4)
    torch.testing.assert_close(turn.advantages, torch.tensor([[[-a, a], [0.0, 0.0]]]))


def test_early_stop_and_the_branching_cap_back_up_the_local_reward_as_the_team_reward():
    # gamma = 1, T = 3, early_stop_threshold = .9, max_branches = 1 (the seeded choice keeps one joint action).
    # A node stopped early keeps its local reward for the turns it skips, as its team reward; a capped joint
    # action is credited its continued sibling's local value.
    team = {(0,): 1.0, (1,): 1.0}  # turn 1: mean 1 >= .9: the root stops at once (skips 2 turns)
    local = {(0, (0,)): 2.0, (0, (1,)): 0.0, (1, (0,)): 0.0, (1, (1,)): 1.0}
    turn = _rollout(3, 1.0, team, [_local(local)], early_stop_threshold=0.9).run([{}]).turns[0]
    assert turn.stopped == {0}
    # agent 0: r = [2, 0], mean 1 -> R = r + 2 * 1 = [4, 2]; agent 1: r = [0, 1], mean .5 -> [1, 2]
    torch.testing.assert_close(turn.local_returns, torch.tensor([[[4.0, 2.0], [1.0, 2.0]]]))
    # the branching cap: turn 1 continues one joint action; the other is bootstrapped from it, per agent
    team = {(0,): 0.0, (1,): 0.0, (0, 0): 0.0, (0, 1): 0.0, (1, 0): 0.0, (1, 1): 0.0}
    local = {(a, p): float(sum(p) + a) for a in range(2) for p in [(0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1)]}
    first, second = _rollout(2, 1.0, team, [_local(local)], max_branches=1, seed=0).run([{}]).turns
    (kept,) = [j for (_, j) in first.children]
    # the child after joint `kept` has agent a's local rewards [kept + a, kept + 1 + a]: value kept + .5 + a
    value = torch.tensor([kept + 0.5, kept + 1.5])
    expected = torch.stack([torch.tensor([0.0, 1.0]) + a + value[a] for a in range(2)])
    torch.testing.assert_close(first.local_returns[0], expected)
    torch.testing.assert_close(second.local_returns[0], torch.tensor([[kept, kept + 1.0], [kept + 1, kept + 2.0]]))


def test_a_node_flat_in_team_returns_is_not_flat_with_local_returns():
    # one node, team [1, 1] (flat); agent 0's local [0, 3]: the group still teaches agent 0
    flat_team = {(0,): 1.0, (1,): 1.0}
    turns = _rollout(1, 1.0, flat_team, [_local({(0, (0,)): 0.0, (0, (1,)): 3.0, (1, (0,)): 0.0,
                                                 (1, (1,)): 0.0})]).run([{}]).turns
    assert flat_group_fraction(turns) == 0.0
    turns = _rollout(1, 1.0, flat_team, [_local({(a, (g,)): 1.0 for a in range(2) for g in range(2)})]).run([{}]).turns
    assert flat_group_fraction(turns) == 1.0


def test_bad_local_reward_arguments_name_the_field_and_the_fix():
    ok = _local(LOCAL)
    with pytest.raises(ValueError, match="`local_reward_funcs` has 3 lists for a team of 2 agents"):
        LocalReward([[ok], [ok], [ok]], num_agents=2)
    with pytest.raises(ValueError, match="`local_reward_funcs` mixes functions and lists"):
        LocalReward([ok, [ok]], num_agents=2)
    with pytest.raises(ValueError, match="`local_reward_funcs` is empty"):
        LocalReward([], num_agents=2)
    with pytest.raises(ValueError, match="gives no agent a function"):
        LocalReward([[], []], num_agents=2)
    with pytest.raises(ValueError, match=r"`local_reward_weights` has 1 entries but `local_reward_funcs` has 2"):
        LocalReward([[ok], [ok]], num_agents=2, weights=[1.0])
    with pytest.raises(ValueError, match=r"declared a team reward .* Pass it in `reward_funcs`"):
        LocalReward([team_reward(_local(LOCAL, "shared"))], num_agents=2)
    with pytest.raises(TypeError, match="is not callable"):
        LocalReward(["not a function"], num_agents=2)
