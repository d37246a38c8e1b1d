"""The advantage-estimator registry (`trl_marl.core.advantages`) and its two multi-agent estimators, by hand.

AT-GRPO (`"agent_turn"`, arXiv 2510.11062) and Dr. MAS (`"agent_norm"`, arXiv 2602.08847); every expected number is
derived in the comment above it.
"""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import trl_marl.core.advantages as advantages_module
import trl_marl.core.estimators as estimators_module
from trl_marl.core import (
    ADVANTAGE_MODES,
    AdvantageContext,
    advantage_estimator,
    advantage_modes,
    agent_local_returns_from_joint,
    agent_norm_advantages,
    agent_turn_advantages,
    estimator_uses_local_returns,
    joint_action_indices,
    register_advantage_estimator,
    std_advantages,
)

NAN = float("nan")
NO_EPS = AdvantageContext(eps=0.0)


def close(actual: torch.Tensor, expected: list | torch.Tensor, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


# ----------------------------------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------------------------------
def test_every_mode_is_registered_and_public():
    from trl_marl.core.advantages import ADVANTAGE_MODES as from_module

    assert from_module == ADVANTAGE_MODES
    assert ADVANTAGE_MODES[:6] == ("mean", "std", "loo", "raw", "max", "batch")  # "batch" like the others
    assert {"agent_turn", "agent_norm"} <= set(ADVANTAGE_MODES) <= set(advantage_modes())
    assert advantage_estimator("agent_turn") is agent_turn_advantages
    assert advantage_estimator("agent_norm") is agent_norm_advantages


@pytest.mark.parametrize("bad", ["nope", "Mean", "", None])
def test_unknown_mode_names_the_field_and_the_registered_modes(bad):
    with pytest.raises(ValueError, match="`advantage_mode` must be one of") as info:
        advantage_estimator(bad)
    for mode in ADVANTAGE_MODES:
        assert repr(mode) in str(info.value)
    assert "register_advantage_estimator" in str(info.value)  # the fix


def test_magrpo_config_validates_against_the_registry(tmp_path):
    from trl_marl import MAGRPOConfig

    with pytest.raises(ValueError, match="`advantage_mode` must be one of .*'agent_norm'"):
        MAGRPOConfig(output_dir=str(tmp_path), advantage_mode="agent-norm", report_to="none")
    assert MAGRPOConfig(output_dir=str(tmp_path), advantage_mode="agent_norm", report_to="none").advantage_mode == (
        "agent_norm")

    @register_advantage_estimator("test_registry_config_mode")
    def _config_mode(returns: torch.Tensor, context: AdvantageContext) -> torch.Tensor:
        """A test estimator."""
        return returns

    # registered after the config class was defined: still valid
    args = MAGRPOConfig(output_dir=str(tmp_path), advantage_mode="test_registry_config_mode", report_to="none")
    assert args.advantage_mode == "test_registry_config_mode"


def test_help_text_is_built_from_the_registry(tmp_path):
    from dataclasses import fields

    from trl_marl import MAGRPOConfig

    help_text = next(f for f in fields(MAGRPOConfig) if f.name == "advantage_mode").metadata["help"]
    for mode in ADVANTAGE_MODES:
        summary = advantage_estimator(mode).__doc__.strip().splitlines()[0].rstrip(".")
        assert f"'{mode}': {summary}" in help_text
    assert "AT-GRPO" in help_text and "Dr. MAS" in help_text


def test_register_refuses_a_taken_name_unless_replaced():
    @register_advantage_estimator("test_registry_taken")
    def first(returns: torch.Tensor, context: AdvantageContext) -> torch.Tensor:
        """First."""
        return returns

    def second(returns: torch.Tensor, context: AdvantageContext) -> torch.Tensor:
        """Second."""
        return -returns

    with pytest.raises(ValueError, match="'test_registry_taken' is registered already .*replace=True"):
        register_advantage_estimator("test_registry_taken")(second)
    with pytest.raises(ValueError, match="registered already"):
        register_advantage_estimator("mean")(second)  # a built-in is not silently replaced either
    assert register_advantage_estimator("test_registry_taken", replace=True)(second) is second
    assert advantage_estimator("test_registry_taken") is second
    for bad in ("", 3):
        with pytest.raises(ValueError, match="non-empty string"):
            register_advantage_estimator(bad)  # type: ignore[arg-type]


def test_docstring_examples_hold():
    # the worked example of every estimator, run as written (the registry is restored: an example registers one)
    saved = dict(estimators_module._REGISTRY)
    try:
        result = doctest.testmod(advantages_module, optionflags=doctest.NORMALIZE_WHITESPACE)
        registry = doctest.testmod(estimators_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    finally:
        estimators_module._REGISTRY.clear()
        estimators_module._REGISTRY.update(saved)
    assert result.attempted >= 10 and result.failed == 0
    assert registry.attempted >= 2 and registry.failed == 0


# ----------------------------------------------------------------------------------------------------------------
# AT-GRPO: agent- and turn-wise groups, team + lambda * local
# ----------------------------------------------------------------------------------------------------------------
TEAM = torch.tensor([[[0.0, 1.0, 1.0, 2.0], [0.0, 1.0, 1.0, 2.0]]])  # one node, two agents (aligned copies), G = 4


def test_agent_turn_without_local_reward_is_the_group_std_advantage():
    # [0, 1, 1, 2]: mean 1, squared deviations 1 + 0 + 0 + 1 = 2, unbiased var 2 / 3, std .81650
    # -> A = [-1.22474, 0, 0, 1.22474] for both agents (MAGRPO's groups are already per agent and node: "std")
    a = 1 / math.sqrt(2 / 3)
    close(agent_turn_advantages(TEAM, NO_EPS), [[[-a, 0.0, 0.0, a]] * 2])
    close(agent_turn_advantages(TEAM, AdvantageContext()), std_advantages(TEAM, AdvantageContext()))


def test_agent_turn_mixes_a_local_reward_per_agent():
    # alpha = 2 (R~ = 2 R + R^loc); local returns agent 0 [2, 0, 0, 0], agent 1 [0, 0, 0, 4]:
    # agent 0: R~ = [2, 2, 2, 4], mean 2.5, squared deviations 3 * .25 + 2.25 = 3, var 1, std 1
    #          -> A = [-.5, -.5, -.5, 1.5]
    # agent 1: R~ = [0, 2, 2, 8], mean 3, squared deviations 9 + 1 + 1 + 25 = 36, var 12, std 3.46410
    #          -> A = [-.86603, -.28868, -.28868, 1.44338]
    local = torch.tensor([[[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0]]])
    out = agent_turn_advantages(TEAM, AdvantageContext(eps=0.0, local_returns=local, team_weight=2.0))
    close(out, [[[-0.5, -0.5, -0.5, 1.5], [-0.86603, -0.28868, -0.28868, 1.44338]]])
    # the agents' groups are separate: agent 1's local reward does not move agent 0's advantages
    only_agent_0 = local.clone()
    only_agent_0[0, 1] = 0.0
    out = agent_turn_advantages(TEAM, AdvantageContext(eps=0.0, local_returns=only_agent_0, team_weight=2.0))
    close(out[0, 0], [-0.5, -0.5, -0.5, 1.5])
    # with eps = 1e-4 (TRL's): agent 0's deviations [-.5, -.5, -.5, 1.5] over std 1 + 1e-4
    out = agent_turn_advantages(TEAM, AdvantageContext(local_returns=local, team_weight=2.0))
    close(out[0, 0], [-0.5 / 1.0001, -0.5 / 1.0001, -0.5 / 1.0001, 1.5 / 1.0001])
    # alpha = 0: the local reward alone; agent 0's R~ = [2, 0, 0, 0], mean .5, var (2.25 + 3 * .25) / 3 = 1
    out = agent_turn_advantages(TEAM, AdvantageContext(eps=0.0, local_returns=local, team_weight=0.0))
    close(out[0, 0], [1.5, -0.5, -0.5, -0.5])


def test_only_estimators_registered_for_it_read_local_returns():
    assert estimator_uses_local_returns("agent_turn")
    assert not any(estimator_uses_local_returns(m) for m in ("mean", "std", "loo", "raw", "max", "batch",
                                                                "agent_norm"))

    @register_advantage_estimator("test_local_reader", uses_local_returns=True)
    def local_only(returns, context):
        "the local return itself (a test estimator)."
        return context.local_returns

    assert estimator_uses_local_returns("test_local_reader")
    register_advantage_estimator("test_local_reader", replace=True)(std_advantages)  # replaced, without the flag

    assert not estimator_uses_local_returns("test_local_reader")
    with pytest.raises(ValueError, match="`advantage_mode` must be one of"):
        estimator_uses_local_returns("no_such_estimator")


def test_agent_turn_errors_and_unscorable_samples():
    with pytest.raises(ValueError, match="one local return per sample"):
        agent_turn_advantages(TEAM, AdvantageContext(local_returns=torch.zeros(1, 2, 3)))
    with pytest.raises(ValueError, match="'agent_turn' needs at least 2 samples per group, got G=1"):
        agent_turn_advantages(torch.zeros(1, 2, 1), AdvantageContext())
    # a NaN return is left out of the group's statistics and gets 0: [0, NaN, 2] -> mean 1, std sqrt(2)
    out = agent_turn_advantages(torch.tensor([[[0.0, NAN, 2.0]]]), NO_EPS)
    close(out, [[[-1 / math.sqrt(2), 0.0, 1 / math.sqrt(2)]]])


# ----------------------------------------------------------------------------------------------------------------
# Dr. MAS: each agent normalised with its own statistics over the episode (every node, every turn)
# ----------------------------------------------------------------------------------------------------------------
# Two episodes (rows 0 and 1), two agents, G = 2. Turn 1: node 0 (row 0), node 1 (row 1). Turn 2: nodes 0 and 1 of
# row 0 (two branches), node 2 of row 1.
TURN_1 = torch.tensor([[[1.0, 3.0], [2.0, 2.0]],
                       [[0.0, 0.0], [6.0, NAN]]])
TURN_2 = torch.tensor([[[5.0, 1.0], [2.0, 2.0]],
                       [[3.0, 5.0], [2.0, 6.0]],
                       [[0.0, 4.0], [6.0, 6.0]]])
ROWS_1, ROWS_2 = torch.tensor([0, 1]), torch.tensor([0, 0, 1])
TREE = ((ROWS_1, TURN_1), (ROWS_2, TURN_2))
# Pools (every sample of the agent in the episode):
#   row 0, agent 0: [1, 3, 5, 1, 3, 5]  mean 3, squared deviations 4 + 0 + 4 + 4 + 0 + 4 = 16, var 16 / 5, std 1.78885
#   row 0, agent 1: [2, 2, 2, 2, 2, 6]  mean 8 / 3, squared deviations 5 * 4 / 9 + 100 / 9 = 40 / 3, var 8 / 3,
#                                       std 1.63299
#   row 1, agent 0: [0, 0, 0, 4]        mean 1, squared deviations 1 + 1 + 1 + 9 = 12, var 4, std 2
#   row 1, agent 1: [6, NaN, 6, 6]      NaN left out: mean 6, std 0 -> advantage 0 (0 / 0, and NaN -> 0)
S00, S01 = math.sqrt(16 / 5), math.sqrt(8 / 3)
M01 = 8 / 3


def test_agent_norm_pools_every_turn_and_node_of_an_episode():
    out_1 = agent_norm_advantages(TURN_1, AdvantageContext(eps=0.0, rows=ROWS_1, tree=TREE))
    close(out_1, [[[(1 - 3) / S00, 0.0], [(2 - M01) / S01] * 2],
                  [[-0.5, -0.5], [0.0, 0.0]]])
    out_2 = agent_norm_advantages(TURN_2, AdvantageContext(eps=0.0, rows=ROWS_2, tree=TREE))
    close(out_2, [[[2 / S00, -2 / S00], [(2 - M01) / S01] * 2],
                  [[0.0, 2 / S00], [(2 - M01) / S01, (6 - M01) / S01]],
                  [[-0.5, 1.5], [0.0, 0.0]]])
    # the same numbers written out: 2 / 1.78885 = 1.11803, (2 - 2.66667) / 1.63299 = -.40825, (6 - 2.66667) / 1.63299
    # = 2.04124
    close(out_2[1], [[0.0, 1.11803], [-0.40825, 2.04124]])


def test_agent_norm_is_not_the_per_node_group_statistic():
    # turn 2, row 0's second branch, agent 0 returns [3, 5]: its own node's std mode gives [-.70711, .70711]; Dr. MAS
    # compares it with the agent's whole episode (mean 3): [0, 1.11803]
    close(std_advantages(TURN_2, NO_EPS)[1, 0], [-0.70711, 0.70711])
    close(agent_norm_advantages(TURN_2, AdvantageContext(eps=0.0, rows=ROWS_2, tree=TREE))[1, 0], [0.0, 1.11803])


def test_agent_norm_defaults():
    # no tree: this turn alone, pooling the nodes of a row: row 0's agent 0 at turn 2 is [5, 1, 3, 5] (mean 3.5,
    # squared deviations 2.25 + 6.25 + .25 + 2.25 = 11, var 11 / 3, std 1.91485)
    s = math.sqrt(11 / 3)
    out = agent_norm_advantages(TURN_2, AdvantageContext(eps=0.0, rows=ROWS_2))
    close(out[:2, 0], [[1.5 / s, -2.5 / s], [-0.5 / s, 1.5 / s]])
    # no rows either: every node is an episode of its own, i.e. the group std advantage
    close(agent_norm_advantages(TURN_2, NO_EPS), std_advantages(TURN_2, NO_EPS))
    # a tree without this turn's episodes is an error, not a silent misalignment
    with pytest.raises(ValueError, match="must hold this turn's"):
        agent_norm_advantages(TURN_2, AdvantageContext(rows=torch.tensor([0, 0, 7]), tree=TREE))


def test_the_extending_guide_estimator_example_runs(tmp_path, monkeypatch):
    # docs/extending.md's "A new advantage estimator" block, as written: a median baseline becomes a valid mode
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    block = next(b for b in blocks if "register_advantage_estimator" in b)
    monkeypatch.chdir(tmp_path)
    saved = dict(estimators_module._REGISTRY)
    namespace: dict = {}
    try:
        exec(compile(block, "extending.md", "exec"), namespace)  # noqa: S102 - the project's own documentation
        assert namespace["args"].advantage_mode == "median"
        # [1, 0, 9]: median 1 -> [0, -1, 8]; a NaN is left out of the median and gets 0
        median = advantage_estimator("median")
        close(median(torch.tensor([[[1.0, 0.0, 9.0]]]), AdvantageContext()), [[[0.0, -1.0, 8.0]]])
        close(median(torch.tensor([[[1.0, NAN, 9.0]]]), AdvantageContext()), [[[0.0, 0.0, 8.0]]])
    finally:
        estimators_module._REGISTRY.clear()
        estimators_module._REGISTRY.update(saved)


def test_each_agent_is_credited_its_own_local_return():
    # aligned, G = 3: sample g of agent a is joint action g: its own row, never the other agent's
    local = torch.tensor([[[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]])  # (B=1, n=2, J=3)
    close(agent_local_returns_from_joint(local, joint_action_indices(2, 3, "aligned"), 3), local)
    # cross, G = 2, joints (0,0) (0,1) (1,0) (1,1); agent 0 [1, NaN, 5, 7] -> sample 0 mean(1) = 1 (NaN left out),
    # sample 1 mean(5, 7) = 6; agent 1 [NaN, 2, NaN, 4] -> sample 0 (joints 0, 2) has none: NaN; sample 1 mean(2, 4)
    local = torch.tensor([[1.0, NAN, 5.0, 7.0], [NAN, 2.0, NAN, 4.0]])
    out = agent_local_returns_from_joint(local, joint_action_indices(2, 2, "cross"), 2)
    torch.testing.assert_close(out, torch.tensor([[1.0, 6.0], [NAN, 3.0]]), equal_nan=True)
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 2, 4\): one local return per agent and joint action"):
        agent_local_returns_from_joint(torch.zeros(4, 2), joint_action_indices(2, 2, "cross"), 2)


def test_the_returns_module_examples_hold():
    import trl_marl.core.returns as returns_module

    result = doctest.testmod(returns_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 2 and result.failed == 0
