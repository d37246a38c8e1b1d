"""One registry for every trainer's credit assignment (issue 52, item 2): PPO's critic estimators beside MAGRPO's
group estimators, the facts about each declared at its registration, and the one `advantage_mode` knob.

Every expected number is derived in the comment above it.
"""

from __future__ import annotations

import pytest
import torch

import trl_marl.core.estimators as estimators_module
from trl_marl.core import (
    CriticInputs,
    advantage_estimator,
    advantage_modes,
    critic_estimator,
    estimator_for_scale_rewards,
    estimator_scale_rewards,
    gae_group_advantages,
    register_advantage_estimator,
    turn_group_advantages,
)

T = torch.tensor


def close(actual: torch.Tensor, expected: list, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=0)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry for the test: what it registers is gone afterwards."""
    monkeypatch.setattr(estimators_module, "_REGISTRY", dict(estimators_module._REGISTRY))


def two_responses(whiten_rewards: bool = False) -> CriticInputs:
    # two responses of two tokens of one slot: the first scored 1 on its last token, the second 0; values 0
    ones = torch.ones(2, 2, dtype=torch.bool)
    return CriticInputs([T([[0.0, 1.0], [0.0, 0.0]])], [torch.zeros(2, 2)], [ones], [ones], gamma=1.0, lam=1.0,
                        whiten_rewards=whiten_rewards)


def test_both_kinds_live_in_one_registry_and_each_trainer_asks_for_its_own():
    assert advantage_modes("critic") == ("gae", "turn")
    assert {"mean", "std", "loo", "raw", "max", "batch", "agent_turn", "agent_norm"} <= set(advantage_modes())
    assert critic_estimator("gae") is gae_group_advantages and critic_estimator("turn") is turn_group_advantages
    # a name of the other kind is refused with the kind it is and the names this trainer takes
    with pytest.raises(ValueError, match=r"`advantage_mode` must be one of \('gae', 'turn'\), got 'std' \('std' is "
                                         r"a group estimator, MAGRPO's"):
        critic_estimator("std")
    with pytest.raises(ValueError, match=r"got 'gae' \('gae' is a critic estimator, PPO's"):
        advantage_estimator("gae")
    with pytest.raises(ValueError, match="kind='critic'"):
        critic_estimator("nope")


def test_gae_by_hand():
    # gamma = lam = 1, V = 0: A_t = the reward still to come, [[1, 1], [0, 0]]; returns the same. Whitened over the
    # four policy tokens: mean 0.5, unbiased var (4 * 0.25) / 3 = 1/3 -> (A - 0.5) / sqrt(1/3) = +-0.86603
    advantages, returns = gae_group_advantages(two_responses())
    close(advantages[0], [[0.86603, 0.86603], [-0.86603, -0.86603]])
    close(returns[0], [[1.0, 1.0], [0.0, 0.0]])


def test_gae_with_whitened_rewards_by_hand():
    # whiten_rewards scales the rewards only (mean kept): entries [0, 1, 0, 0], mean 0.25, unbiased var 0.25 (std
    # 0.5): r -> (r - 0.25) / 0.5 + 0.25 = [-0.25, 1.75, -0.25, -0.25]; GAE (gamma = lam = 1, V = 0) sums what is
    # still to come: [[1.5, 1.75], [-0.5, -0.25]], which are also the returns
    advantages, returns = gae_group_advantages(two_responses(whiten_rewards=True))
    close(returns[0], [[1.5, 1.75], [-0.5, -0.25]], atol=1e-4)
    # whitened advantages: mean 0.625, unbiased var ((0.875^2 + 1.125^2 + 1.125^2 + 0.875^2) / 3) = 1.35417
    std = 1.35417 ** 0.5
    close(advantages[0], [[0.875 / std, 1.125 / std], [-1.125 / std, -0.875 / std]], atol=1e-4)


def test_turn_level_by_hand():
    # one advantage per response, A = R - V(s): [1, 0]; whitened over the two responses (mean 0.5, unbiased var
    # 0.5, std 0.70711): +-0.70711, given to every token; the returns (value targets) are GAE's, as in test_gae
    advantages, returns = turn_group_advantages(two_responses())
    close(advantages[0], [[0.70711, 0.70711], [-0.70711, -0.70711]])
    close(returns[0], [[1.0, 1.0], [0.0, 0.0]])


def test_grpo_scale_rewards_names_an_estimator_at_its_registration(registry):
    assert [estimator_for_scale_rewards(v) for v in ("none", "group", "batch")] == ["mean", "std", "batch"]
    assert estimator_scale_rewards("std") == "group" and estimator_scale_rewards("loo") is None
    with pytest.raises(ValueError, match=r"`scale_rewards` must be one of \('none', 'group', 'batch'\)"):
        estimator_for_scale_rewards("token")

    def doubled(returns: torch.Tensor, context: object) -> torch.Tensor:
        """A = 2 R."""
        return 2 * returns

    with pytest.raises(ValueError, match="`scale_rewards='group'` names the estimator 'std' already"):
        register_advantage_estimator("test_doubled", scale_rewards="group")(doubled)
    register_advantage_estimator("test_doubled", scale_rewards="group", replace=True)(doubled)
    assert estimator_for_scale_rewards("group") == "test_doubled" and estimator_scale_rewards("std") is None


def test_a_critic_estimator_takes_no_group_facts(registry):
    for facts in ({"uses_local_returns": True}, {"scale_rewards": "none"}):
        with pytest.raises(ValueError, match="critic estimator .* takes neither"):
            register_advantage_estimator("test_critic", kind="critic", **facts)
    with pytest.raises(ValueError, match=r"`kind` must be one of \('group', 'critic'\)"):
        register_advantage_estimator("test_critic", kind="token")


def test_ppo_config_takes_a_registered_critic_estimator(tmp_path, registry):
    from trl_marl import MultiAgentPPOConfig

    assert MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none").advantage_mode == "gae"

    @register_advantage_estimator("test_signs", kind="critic")
    def signs(inputs: CriticInputs) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The sign of GAE's advantage."""
        advantages, returns = gae_group_advantages(inputs)
        return [a.sign() for a in advantages], returns

    args = MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none", advantage_mode="test_signs")
    assert args.advantage_mode == "test_signs"
    with pytest.raises(ValueError, match="`advantage_mode` must be one of .*'test_signs'.*got 'mean'"):
        MultiAgentPPOConfig(output_dir=str(tmp_path), report_to="none", advantage_mode="mean")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"advantage_mode": "loo", "scale_rewards": "group"},
     r"`scale_rewards='group'` is GRPO's name for `advantage_mode='std'`, which contradicts `advantage_mode='loo'`"),
    ({"advantage_mode": "gae"}, r"'gae' is a critic estimator"),
])
def test_magrpo_has_one_knob(tmp_path, kwargs, message):
    from trl_marl import MAGRPOConfig

    for value, mode in (("none", "mean"), ("group", "std"), ("batch", "batch")):
        assert MAGRPOConfig(output_dir=str(tmp_path), report_to="none", scale_rewards=value).advantage_mode == mode
    assert MAGRPOConfig(output_dir=str(tmp_path), report_to="none", advantage_mode="std",
                        scale_rewards="group").advantage_mode == "std"  # the two agree: accepted
    with pytest.raises(ValueError, match=message):
        MAGRPOConfig(output_dir=str(tmp_path), report_to="none", **kwargs)


def test_assign_advantages_checks_what_a_hook_returns():
    from trl_marl.rollout import Node, TurnResult, assign_advantages

    turn = TurnResult(1, [Node(0, None)], [], [], [], [], torch.zeros(0), torch.zeros(0), T([[0.0, 1.0]]))
    turn.returns, turn.agent_returns = T([[0.0, 1.0]]), T([[[0.0, 1.0]]])  # K = 1 node, n = 1 agent, G = 2
    with pytest.raises(ValueError, match="advantages for 2 turns, but the rollout has 1"):
        assign_advantages([turn], [torch.zeros(1, 1, 2)] * 2)
    with pytest.raises(ValueError, match=r"Turn 1's advantages have shape \(1, 2\), its returns \(1, 1, 2\)"):
        assign_advantages([turn], [torch.zeros(1, 2)])
    assign_advantages([turn], [T([[[float("nan"), 3.0]]])])
    close(turn.advantages, [[[0.0, 3.0]]])  # NaN becomes 0
    assign_advantages([turn], "mean")
    close(turn.advantages, [[[-0.5, 0.5]]])
