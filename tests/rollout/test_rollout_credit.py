"""Credit assignment of `JointRollout` on hand-built and scripted trees (no model: every number is by hand).

The engine backs up returns; `assign_advantages` turns them into advantages with the estimator a trainer names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import torch

from helpers import ScriptedTeam, free_port
from trl_marl.envs.base import MultiAgentEnv, Transcript
from trl_marl.reward_contract import TeamReward
from trl_marl.rollout import JointRollout, Node, TurnResult, assign_advantages


class _Env(MultiAgentEnv):
    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> str:
        return f"a{agent_index}t{len(transcript) + 1}"


_ScriptedTeam = ScriptedTeam  # sample g of every node is the one-token completion `g`


def _path_reward(table: dict[tuple[int, ...], float]):
    """A team reward read from `table[(joint action at turn 1, ..., joint action now)]`."""

    def reward(prompts, completions, agent_completions, transcript, turn, **kwargs) -> list[float]:
        out = []
        for i, tr in enumerate(transcript):  # the transcript includes the scored turn (the reward contract)
            assert len(tr) == turn and tr[turn - 1].responses[0] == agent_completions[0][i]
            path = tuple(int(tr[t].responses[0]) for t in range(len(tr)))
            out.append(table[path])
        return out

    return reward


def _rollout(num_turns: int, discount: float, table: dict, G: int = 2, **kwargs: Any) -> JointRollout:
    env = _Env(num_agents=2, num_turns=num_turns)
    return JointRollout(env, _ScriptedTeam(2, G), TeamReward([_path_reward(table)]), generation_config=None,
                        num_generations=G, discount=discount, **kwargs)


def _turn(turn: int, rewards: list[list[float]], children: dict, capped: set) -> TurnResult:
    K = len(rewards)
    return TurnResult(turn, [Node(0, Transcript())] * K, [], [], [], [], torch.zeros(0),
                      torch.zeros(0), torch.tensor(rewards), children=children, capped=capped)


def test_three_turn_tree_with_branching_cap_by_hand():
    # Two agents, G = 2 aligned (J = 2 joint actions per node), gamma = .5, a cap of one branch per node:
    # turn 1: node 0, r = [1, 0]; joint 0 continues (child node 0), joint 1 is capped
    # turn 2: node 0, r = [0, 2]; joint 1 continues (child node 0), joint 0 is capped
    # turn 3: node 0, r = [4, 0]
    # Backup: R3 = [4, 0], V3 = 2.
    #   turn 2: joint 1 -> V3 = 2; capped joint 0 bootstraps from its continued sibling: 2.
    #           R2 = [0 + .5 * 2, 2 + .5 * 2] = [1, 3], V2 = 2
    #   turn 1: R1 = [1 + .5 * 2, 0 + .5 * 2 (bootstrap)] = [2, 1]
    # Advantages (mean baseline, each agent a copy): [.5, -.5], [-1, 1], [2, -2].
    rollout = _rollout(3, 0.5, {})
    turns = [_turn(1, [[1.0, 0.0]], {(0, 0): 0}, {(0, 1)}),
             _turn(2, [[0.0, 2.0]], {(0, 1): 0}, {(0, 0)}),
             _turn(3, [[4.0, 0.0]], {}, set())]
    rollout._backup(turns)
    assign_advantages(turns, "mean")
    expected_returns = [[2.0, 1.0], [1.0, 3.0], [4.0, 0.0]]
    expected_adv = [[0.5, -0.5], [-1.0, 1.0], [2.0, -2.0]]
    for t, ret, adv in zip(turns, expected_returns, expected_adv):
        torch.testing.assert_close(t.returns, torch.tensor([ret]))
        torch.testing.assert_close(t.advantages, torch.tensor([[adv, adv]]))


def test_three_turn_tree_two_nodes_by_hand():
    # gamma = .9; turn 1: one node, r = [0, 1], both continue (nodes 0 and 1 at turn 2);
    # turn 2: node 0 r = [1, 1] (its joint 0 continues, joint 1 capped), node 1 r = [0, 0] (joint 1 continues,
    # joint 0 capped); turn 3: node 0 (from turn-2 node 0) r = [0, 2]; node 1 (from turn-2 node 1) r = [1, 3].
    # V3 = [1, 2]. Turn 2: node 0: R = [1 + .9 * 1, 1 + .9 * 1] = [1.9, 1.9] (cap bootstraps 1), V = 1.9;
    #                      node 1: R = [0 + .9 * 2, 0 + .9 * 2] = [1.8, 1.8], V = 1.8.
    # Turn 1: R = [0 + .9 * 1.9, 1 + .9 * 1.8] = [1.71, 2.62]; advantages [-.455, .455].
    rollout = _rollout(3, 0.9, {})
    turns = [_turn(1, [[0.0, 1.0]], {(0, 0): 0, (0, 1): 1}, set()),
             _turn(2, [[1.0, 1.0], [0.0, 0.0]], {(0, 0): 0, (1, 1): 1}, {(0, 1), (1, 0)}),
             _turn(3, [[0.0, 2.0], [1.0, 3.0]], {}, set())]
    rollout._backup(turns)
    assign_advantages(turns, "mean")
    torch.testing.assert_close(turns[0].returns, torch.tensor([[1.71, 2.62]]))
    torch.testing.assert_close(turns[1].returns, torch.tensor([[1.9, 1.9], [1.8, 1.8]]))
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[-0.455, 0.455]] * 2]))
    torch.testing.assert_close(turns[1].advantages, torch.zeros(2, 2, 2))
    torch.testing.assert_close(turns[2].advantages, torch.tensor([[[-1.0, 1.0]] * 2] * 2))


def test_early_stopped_branch_keeps_its_success():
    # The audit's example, played by JointRollout: G = 2, gamma = 1, T = 3, early_stop_threshold = .9.
    # Turn 1: r = [0, 0]. Joint 0's child succeeds at turn 2 (r = [1, 1]: mean 1 >= .9, it stops);
    # joint 1's child gets [.2, .2] and continues; its children all get 1.0 at turn 3.
    # The stopped node's success persists for the one turn it skips: R2 = 1 + 1 * 1 = 2 (not 1);
    # the continued node: R2 = .2 + 1 = 1.2. Turn 1: R1 = [2, 1.2] -> advantages [+.4, -.4]
    # (with R = r for the stopped node they were [-.1, +.1]: the early success was pushed down).
    table = {(0,): 0.0, (1,): 0.0, (0, 0): 1.0, (0, 1): 1.0, (1, 0): 0.2, (1, 1): 0.2}
    table.update({(1, j, k): 1.0 for j in range(2) for k in range(2)})
    result = _rollout(3, 1.0, table, early_stop_threshold=0.9).run([{}])
    assign_advantages(result.turns, "mean")
    first, second, third = result.turns
    assert second.stopped == {0} and len(third.nodes) == 2
    torch.testing.assert_close(second.returns, torch.tensor([[2.0, 2.0], [1.2, 1.2]]))
    torch.testing.assert_close(first.returns, torch.tensor([[2.0, 1.2]]))
    torch.testing.assert_close(first.advantages, torch.tensor([[[0.4, -0.4]] * 2]))


def test_early_stop_with_discount_and_unequal_rewards():
    # gamma = .5, T = 3, threshold .5: turn-1 node r = [1, 0] (mean .5) stops at once and skips 2 turns:
    # R = r + (.5 + .25) * .5 = [1.375, .375]; the advantage among its joint actions stays r - mean r = [.5, -.5].
    result = _rollout(3, 0.5, {(0,): 1.0, (1,): 0.0}, early_stop_threshold=0.5).run([{}])
    assign_advantages(result.turns, "mean")
    assert len(result.turns) == 1
    torch.testing.assert_close(result.turns[0].returns, torch.tensor([[1.375, 0.375]]))
    torch.testing.assert_close(result.turns[0].advantages, torch.tensor([[[0.5, -0.5]] * 2]))


@pytest.mark.parametrize("joint_mode", ["aligned", "cross"])
def test_batch_mode_scales_by_the_team_std(joint_mode):
    # One node, G = 4 in aligned mode, team rewards [0, 1, 0, 1]: team std .57735 -> advantages +-.866 for both
    # agents (not +-.935, the std of the eight agent copies). In cross mode (J = 16) the reward is agent 0's
    # sample parity: team returns are eight 0s and eight 1s (std sqrt(4/15) = .5164); agent 0's credited returns
    # are [0, 1, 0, 1] -> A = +-.5 / .5164 = +-.968; agent 1's are all .5 -> 0.
    table = {(g,): float(g % 2) for g in range(16)}
    if joint_mode == "cross":
        def reward(prompts, completions, agent_completions, **kwargs):
            return [float(int(c) % 2) for c in agent_completions[0]]
        env = _Env(num_agents=2, num_turns=1)
        rollout = JointRollout(env, _ScriptedTeam(2, 4), TeamReward([reward]), None, num_generations=4,
                               joint_mode="cross")
        scale = (4 / 15) ** 0.5 + 1e-4
        expected = torch.tensor([[[-0.5 / scale, 0.5 / scale] * 2, [0.0] * 4]])
    else:
        rollout = _rollout(1, 1.0, table, G=4)
        scale = (1 / 3) ** 0.5 + 1e-4
        expected = torch.tensor([[[-0.5 / scale, 0.5 / scale] * 2] * 2])
    turns = rollout.run([{}]).turns
    assign_advantages(turns, "batch")
    torch.testing.assert_close(turns[0].advantages, expected)


# ------------------------------------------------------------------------------------------ batch std over processes
# The audit's numbers: team rewards [0, 1, 0, 1] here and [0, 10, 0, 10] on a second process (one node, G = 4,
# aligned). TRL's GRPOTrainer gathers the rewards before the batch std: std([0, 1, 0, 1, 0, 10, 0, 10]) =
# sqrt(141.5 / 7) = 4.49603, so this process's advantages are +-.5 / 4.49613 = +-.11121 (and the other's
# +-5 / 4.49613 = +-1.11207); the std of this process alone (.57735) gave +-.866.
POOLED_STD = (141.5 / 7) ** 0.5 + 1e-4


def _other_process(*turn_returns: tuple[int, list[float]]):
    """A `gather` as process 0 of two sees it: its own rows, then those the other process sends ((turn, return))."""
    other = torch.tensor([[float(turn), r] for turn, returns in turn_returns for r in returns], dtype=torch.float64)
    sent: list[torch.Tensor] = []

    def gather(rows: torch.Tensor) -> torch.Tensor:
        sent.append(rows.clone())
        return torch.cat([rows, other])

    return gather, sent


def test_batch_std_pools_the_returns_of_every_process():
    gather, sent = _other_process((1, [0.0, 10.0, 0.0, 10.0]))
    rollout = _rollout(1, 1.0, {(g,): float(g % 2) for g in range(4)}, G=4, gather=gather)
    turns = rollout.run([{}]).turns
    assign_advantages(turns, "batch")
    turn = turns[0]
    torch.testing.assert_close(turn.pooled_returns, torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 10.0, 0.0, 10.0]))
    a = 0.5 / POOLED_STD
    assert a == pytest.approx(0.11121, abs=1e-5)
    torch.testing.assert_close(turn.advantages, torch.tensor([[[-a, a, -a, a]] * 2]))
    # one collective per rollout: this process's (turn, return) rows, in one call
    assert len(sent) == 1
    torch.testing.assert_close(sent[0], torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]],
                                                     dtype=torch.float64))


def test_batch_std_pools_each_turn_with_the_processes_that_reached_it():
    # This process plays two turns (gamma = 0, so R = r), the other only the first: turn 1 pools both processes
    # (+-.11121 as above); turn 2 only this process's [0, 2, 0, 2] (std 1.1547: +-1 / 1.1548 = +-.86596).
    gather, sent = _other_process((1, [0.0, 10.0, 0.0, 10.0]))
    rollout = _rollout(2, 0.0, {}, G=4, gather=gather)
    turns = [_turn(1, [[0.0, 1.0, 0.0, 1.0]], {(0, 0): 0}, {(0, 1), (0, 2), (0, 3)}),
             _turn(2, [[0.0, 2.0, 0.0, 2.0]], {}, set())]
    rollout._backup(turns)
    assign_advantages(turns, "batch")
    assert len(sent) == 1 and sent[0][:, 0].tolist() == [1.0] * 4 + [2.0] * 4
    a1, a2 = 0.5 / POOLED_STD, 1.0 / ((4 / 3) ** 0.5 + 1e-4)
    assert a2 == pytest.approx(0.86596, abs=1e-5)
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[-a1, a1, -a1, a1]] * 2]))
    torch.testing.assert_close(turns[1].advantages, torch.tensor([[[-a2, a2, -a2, a2]] * 2]))


def test_group_modes_ignore_the_other_processes():
    # the group baselines are each node's own: pooling changes nothing outside "batch"
    gather, _ = _other_process((1, [0.0, 10.0, 0.0, 10.0]))
    rollout = _rollout(1, 1.0, {(g,): float(g % 2) for g in range(4)}, G=4, gather=gather)
    turns = rollout.run([{}]).turns
    assign_advantages(turns, "mean")
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[-0.5, 0.5, -0.5, 0.5]] * 2]))


TWO_PROCESS_SCRIPT = '''
import os, sys, torch
from functools import partial
from accelerate import Accelerator
from trl_marl.envs.base import MultiAgentEnv
from trl_marl.reward_contract import TeamReward
from trl_marl.rollout import JointRollout, assign_advantages
from trl_marl.team import Generation
from trl_marl.trainers.distributed import gathered_rows

accelerator = Accelerator(cpu=True)
rank = accelerator.process_index


class Env(MultiAgentEnv):
    def agent_prompt(self, row, agent_index, transcript):
        return "p"

    def is_done(self, row, transcript):  # process 0's episodes end after turn 1, process 1's play two turns
        return rank == 0


class Tokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return ["".join(map(str, x)) for x in ids]


class Team:  # sample g of every node is the completion "g"
    tokenizers = [Tokenizer()] * 2

    def generate(self, prompts, generation_config, chat_template_kwargs=None):
        return Generation([[[0]] * len(p) for p in prompts], [[[i % 4] for i in range(len(p))] for p in prompts])


def reward(prompts, completions, agent_completions, turn, **kwargs):
    scale = (1.0 if rank == 0 else 10.0) if turn == 1 else 2.0
    return [scale * (int(c) % 2) for c in agent_completions[0]]


rollout = JointRollout(Env(num_agents=2, num_turns=2), Team(), TeamReward([reward]), None, num_generations=4,
                       discount=0.0, gather=partial(gathered_rows, accelerator))
turns = rollout.run([{}]).turns
assign_advantages(turns, "batch")
torch.save({"world": accelerator.num_processes, "turns": [t.turn for t in turns],
            "advantages": [t.advantages for t in turns]}, os.path.join(sys.argv[1], f"rank{rank}.pt"))
'''


@pytest.mark.slow
def test_batch_std_over_two_processes(tmp_path):
    # Two real processes (gloo on CPU, started as tests/trainers/test_accelerate.py starts them) and the MAGRPO
    # trainer's all-gather (`gathered_rows`): turn 1 pools both processes' returns (+-.11121 on process 0, +-1.11207
    # on process 1); only process 1 reaches turn 2, whose 4 nodes' returns [0, 2, 0, 2] give std sqrt(16 / 15)
    # (+-.96815).
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "two_processes.py"
    script.write_text(TWO_PROCESS_SCRIPT)
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")])), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
           "--num_processes", "2", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
           str(port), str(script), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    first, second = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert first["world"] == second["world"] == 2
    assert first["turns"] == [1] and second["turns"] == [1, 2]
    a, b = 0.5 / POOLED_STD, 5.0 / POOLED_STD
    c = 1.0 / ((16 / 15) ** 0.5 + 1e-4)
    torch.testing.assert_close(first["advantages"][0], torch.tensor([[[-a, a, -a, a]] * 2]))
    torch.testing.assert_close(second["advantages"][0], torch.tensor([[[-b, b, -b, b]] * 2]))
    torch.testing.assert_close(second["advantages"][1], torch.tensor([[[-c, c, -c, c]] * 2] * 4))


# ------------------------------------------------------------------------------------ the estimator is the caller's
# One episode, two turns, gamma = 0 (R = r), G = 2 aligned (both agents' samples carry the joint return): turn 1
# r = [1, 3]; both joint actions continue; turn 2 r = [5, 1] (after joint 0) and [3, 5] (after joint 1).
EPISODE = {(0,): 1.0, (1,): 3.0, (0, 0): 5.0, (0, 1): 1.0, (1, 0): 3.0, (1, 1): 5.0}


def test_the_engine_stops_at_returns_and_the_caller_names_the_estimator():
    turns = _rollout(2, 0.0, EPISODE).run([{}]).turns
    assert [t.advantages for t in turns] == [None, None]  # no estimator chosen by the engine
    torch.testing.assert_close(turns[1].agent_returns, torch.tensor([[[5.0, 1.0]] * 2, [[3.0, 5.0]] * 2]))
    # Dr. MAS pools each agent's samples over the episode's turns and nodes: [1, 3, 5, 1, 3, 5], mean 3,
    # var 16 / 5, std 1.78885 (+ 1e-4)
    assign_advantages(turns, "agent_norm")
    s = (16 / 5) ** 0.5 + 1e-4
    torch.testing.assert_close(turns[0].advantages, torch.tensor([[[-2 / s, 0.0]] * 2]))
    torch.testing.assert_close(turns[1].advantages, torch.tensor([[[2 / s, -2 / s]] * 2, [[0.0, 2 / s]] * 2]))
    # per node ("std"), the second branch [3, 5] would be [-.7071, .7071]
    assign_advantages(turns, "std")
    a = 1 / (2**0.5 + 1e-4)
    torch.testing.assert_close(turns[1].advantages[1], torch.tensor([[-a, a]] * 2))
    with pytest.raises(ValueError, match="`advantage_mode` must be one of"):
        assign_advantages(turns, "agent-norm")
