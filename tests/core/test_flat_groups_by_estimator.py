"""Whether a rollout has a learning signal is the advantage estimator's answer, not the returns' (issue 54, item 15).

A flat group (every sample the same return) gives advantage 0 under the group-relative estimators, but `"raw"` gives
the returns themselves and `"agent_norm"` compares an agent's samples across the nodes and turns of an episode; the
no-signal warning asks the estimator. `agent_norm` refuses a tree that lacks the turn it estimates. Every number by
hand.
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict

import pytest
import torch

from trl_marl.core import estimators
from trl_marl.core.advantages import AdvantageContext, agent_norm_advantages, no_signal_nodes, std_advantages
from trl_marl.envs.base import Transcript
from trl_marl.rollout import (
    Node,
    Rollout,
    TurnResult,
    assign_advantages,
    flat_group_fraction,
    no_signal_fraction,
)
from trl_marl.trainers.magrpo.diagnostics import DiagnosticSettings, NoLearningSignalWarning, TrainingDiagnostics

# three flat nodes of one episode, one agent, G = 2: the agent's pooled returns [1, 1, 2, 2, 0, 0] have mean 1 and
# unbiased std sqrt(4 / 5) = 0.8944, so agent_norm gives the nodes 0, +1/0.8944 = +1.118 and -1.118
FLAT_NODES = torch.tensor([[[1.0, 1.0]], [[2.0, 2.0]], [[0.0, 0.0]]])
ONE_EPISODE = AdvantageContext(eps=0.0, rows=torch.tensor([0, 0, 0]))


def test_agent_norm_gives_flat_groups_advantages_the_returns_call_flat() -> None:
    expected = torch.tensor([[[0.0, 0.0]], [[1.0, 1.0]], [[-1.0, -1.0]]]) / math.sqrt(0.8)
    torch.testing.assert_close(agent_norm_advantages(FLAT_NODES, ONE_EPISODE), expected)
    assert expected[1, 0, 0].item() == pytest.approx(1.1180, abs=1e-4)
    assert no_signal_nodes("agent_norm", FLAT_NODES, ONE_EPISODE).tolist() == [True, False, False]
    # the group-relative estimators give each flat group 0; raw gives the returns (0 only where they are 0)
    for mode in ("mean", "std", "loo", "max"):
        assert no_signal_nodes(mode, FLAT_NODES, ONE_EPISODE).tolist() == [True, True, True], mode
    assert no_signal_nodes("raw", FLAT_NODES, ONE_EPISODE).tolist() == [False, False, True]


def test_float32_rounding_of_a_flat_group_is_no_signal() -> None:
    flat = torch.full((1, 1, 3), 7.7, dtype=torch.float32)
    # float32: 7.7 * 3 rounds, the mean is off by an ulp and "std" divides that by eps = 1e-4
    assert std_advantages(flat, AdvantageContext()).abs().max().item() > 1e-3
    assert no_signal_nodes("std", flat, AdvantageContext()).tolist() == [True]
    # a real spread of 1e-6 in float64 is a signal
    spread = torch.tensor([[[0.1, 0.1 + 1e-6]]], dtype=torch.float64)
    assert no_signal_nodes("mean", spread, AdvantageContext()).tolist() == [False]


def test_agent_norm_refuses_a_tree_without_its_turn() -> None:
    turn1 = torch.tensor([[[2.0, 0.0]]])
    turn2 = torch.tensor([[[4.0, 2.0]]])
    row = torch.tensor([0])
    # turn 2 of the same episode only: the (row, agent) keys exist, but the statistics would be turn 2's alone
    # (mean 3, std 1.414: turn 1's advantages would read -0.707 and -2.121)
    with pytest.raises(ValueError, match="must hold this turn's own `\\(rows, returns\\)`"):
        agent_norm_advantages(turn1, AdvantageContext(rows=row, tree=((row, turn2),)))
    # the same returns under another episode's row are not this turn either
    with pytest.raises(ValueError, match="this turn's own"):
        agent_norm_advantages(turn1, AdvantageContext(rows=row, tree=((row + 1, turn1), (row, turn2))))
    # with it (a copy in another dtype is the same turn), or an empty tree: agent 0 over [2, 0, 4, 2] (mean 2,
    # std 1.633) gives turn 1 [0, -1.2247]; alone [2, 0] (mean 1, std 1.414) gives [0.7071, -0.7071]
    pooled = agent_norm_advantages(turn1, AdvantageContext(eps=0.0, rows=row, tree=((row, turn1.double()),
                                                                                     (row, turn2))))
    torch.testing.assert_close(pooled, torch.tensor([[[0.0, -2.0 / math.sqrt(8.0 / 3.0)]]]))
    alone = agent_norm_advantages(turn1, AdvantageContext(eps=0.0, rows=row))
    torch.testing.assert_close(alone, torch.tensor([[[1.0, -1.0]]]) / math.sqrt(2.0))
    # NaN (unscorable) returns match NaN
    nan_turn = torch.tensor([[[2.0, float("nan")]]])
    agent_norm_advantages(nan_turn, AdvantageContext(rows=row, tree=((row, nan_turn.clone()), (row, turn2))))


def _turn(turn: int, team_returns: list[list[float]], rows: list[int], G: int = 2) -> TurnResult:
    """A scored turn of one agent (aligned: joint action g is sample g) with the given (K, G) returns."""
    returns = torch.tensor(team_returns)
    K = len(team_returns)
    return TurnResult(turn=turn, nodes=[Node(row_index=r, transcript=Transcript()) for r in rows], prompts=[[]],
                      prompt_ids=[[]], completion_ids=[[[5, 2]] * (K * G)], completions=[[]],
                      joint_indices=torch.arange(G).view(G, 1), rewards_per_func=returns.reshape(-1, 1),
                      rewards=returns, returns=returns, agent_returns=returns.view(K, 1, G))


def _flat_rollout() -> Rollout:
    """One episode: turn 1 a flat node of 1, turn 2 two flat nodes of 2 and 0 (FLAT_NODES over two turns)."""
    return Rollout(turns=[_turn(1, [[1.0, 1.0]], [0]), _turn(2, [[2.0, 2.0], [0.0, 0.0]], [0, 0])],
                   generation_time=0.0, generated_tokens=0, nonfinite_rewards=0)


def test_the_fraction_asks_the_estimator() -> None:
    turns = _flat_rollout().turns
    assert flat_group_fraction(turns) == 1.0  # the returns' fact: every group flat
    assert no_signal_fraction(turns, "mean") == 1.0
    assert no_signal_fraction(turns, "raw") == pytest.approx(1 / 3)  # only the node of 0s
    assert no_signal_fraction(turns, "agent_norm") == pytest.approx(1 / 3)  # only the node at the episode's mean
    # a custom estimator's advantages are read as assigned
    assign_advantages(turns, [t.agent_returns * 0.0 for t in turns])
    assert no_signal_fraction(turns) == 1.0
    assign_advantages(turns, "raw")
    assert no_signal_fraction(turns) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="no advantages"):
        no_signal_fraction([_turn(1, [[1.0, 1.0]], [0])])


def _warnings(mode: str, rollout: Rollout, estimator: str | None = "mode") -> list[str]:
    args = DiagnosticSettings(advantage_mode=mode, team_reward_weight=1.0, max_completion_length=8,
                              no_signal_warning_interval=1, zero_std_warning_steps=None, zero_std_warning_fraction=0.9,
                              entropy_warning_threshold=None, entropy_warning_steps=20)
    diag = TrainingDiagnostics(args, is_main_process=True)
    assign_advantages(rollout.turns, mode)
    diag.see_rollout(rollout, eos_ids={2}, estimator=mode if estimator == "mode" else estimator)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        diag.end_step(defaultdict(list))
    return [str(w.message) for w in record if issubclass(w.category, NoLearningSignalWarning)]


@pytest.mark.parametrize("mode, warns", [("mean", True), ("std", True), ("raw", False), ("agent_norm", False)])
def test_the_warning_asks_the_estimator(mode: str, warns: bool) -> None:
    messages = _warnings(mode, _flat_rollout())
    assert len(messages) == int(warns)
    if warns:
        assert "every group gave all its samples the same return (`frac_reward_zero_std` = 1)" in messages[0]


def test_agent_norm_without_any_spread_in_the_episode_warns() -> None:
    rollout = Rollout(turns=[_turn(1, [[1.0, 1.0]], [0]), _turn(2, [[1.0, 1.0], [1.0, 1.0]], [0, 0])],
                      generation_time=0.0, generated_tokens=0, nonfinite_rewards=0)
    assert len(_warnings("agent_norm", rollout)) == 1


def test_an_estimator_that_gives_zeros_to_spread_returns_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimators, "_REGISTRY", dict(estimators._REGISTRY))  # restored after the test
    estimators.register_advantage_estimator("zeros_for_test")(lambda returns, context: torch.zeros_like(returns))
    rollout = Rollout(turns=[_turn(1, [[0.0, 1.0]], [0])], generation_time=0.0, generated_tokens=0,
                      nonfinite_rewards=0)
    (message,) = _warnings("zeros_for_test", rollout)
    assert "the `zeros_for_test` advantage estimator gave every sample advantage 0" in message
