"""Hand-computed checks of ``trl_marl.core`` (advantages, returns and token losses)."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from helpers import close as close_within
from trl_marl.core import (
    SUPPORTED_LOSS_TYPES,
    adaptive_entropy_coef,
    agent_returns_from_joint,
    aggregate_token_loss,
    batch_scaled_advantages,
    clipped_surrogate,
    completion_mask_from_eos,
    early_stop_returns,
    entropy_bonus,
    entropy_from_logits,
    group_relative_advantages,
    high_entropy_mask,
    joint_action_indices,
    k1_kl,
    k3_kl,
    log_importance_weights,
    masked_mean,
    masked_var,
    nan_std,
    off_policy_sequence_mask,
    selective_log_softmax,
    tree_returns,
    whiten,
)

NAN = float("nan")


close = partial(close_within, rtol=0)  # the values of this module: within `atol`, no relative slack


# ----------------------------------------------------------------------------------------------------------------
# group_relative_advantages
# ----------------------------------------------------------------------------------------------------------------
def test_mean_mode():
    # R = [1, 0, 0, 1] -> mean .5 -> A = [.5, -.5, -.5, .5]
    close(group_relative_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0])), [0.5, -0.5, -0.5, 0.5])
    # groups along the last dim: [[1, 3], [2, 2]] -> means [2, 2] -> [[-1, 1], [0, 0]]
    close(group_relative_advantages(torch.tensor([[1.0, 3.0], [2.0, 2.0]])), [[-1.0, 1.0], [0.0, 0.0]])


def test_std_mode_unbiased():
    # R = [1, 0, 0, 1]: squared deviations .25 x 4 = 1; unbiased var = 1/3; std = 0.57735
    # A = +-.5 / (0.57735 + 1e-4) = +-0.865876
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    close(group_relative_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), mode="std"), [a, -a, -a, a])
    assert abs(a - 0.865876) < 1e-6
    # identical rewards: std 0 -> A = 0 / 1e-4 = 0
    close(group_relative_advantages(torch.tensor([3.0, 3.0]), mode="std"), [0.0, 0.0])
    # custom eps: R = [0, 2] -> mean 1, std sqrt(2) -> A = +-1/(sqrt 2 + 0.5)
    b = 1 / (math.sqrt(2) + 0.5)
    close(group_relative_advantages(torch.tensor([0.0, 2.0]), mode="std", eps=0.5), [-b, b])


def test_loo_mode():
    # R = [1, 0, 0, 1]; A_0 = 1 - mean(0, 0, 1) = 2/3 ; A_1 = 0 - mean(1, 0, 1) = -2/3  (= 4/3 * (R - .5))
    close(group_relative_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), mode="loo"), [2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # R = [0, 3]: A_0 = 0 - 3 = -3 ; A_1 = 3 - 0 = 3
    close(group_relative_advantages(torch.tensor([0.0, 3.0]), mode="loo"), [-3.0, 3.0])


def test_loo_mode_is_comlrl_rloo():
    # comlrl's MARLOO: A_i = (G * R_i - sum_j R_j) / (G - 1). R = [2, 0, 1]: sum 3, G 3 -> [3/2, -3/2, 0]
    close(group_relative_advantages(torch.tensor([2.0, 0.0, 1.0]), mode="loo"), [1.5, -1.5, 0.0])


def test_raw_mode_is_the_return():
    # MAREINFORCE: no baseline, A = R (a constant shift of every return shifts every advantage)
    close(group_relative_advantages(torch.tensor([[1.0, 0.0, 3.0], [2.0, 2.0, 2.0]]), mode="raw"),
          [[1.0, 0.0, 3.0], [2.0, 2.0, 2.0]])
    # NaN (unscorable) -> 0, the others untouched
    close(group_relative_advantages(torch.tensor([NAN, -1.5]), mode="raw"), [0.0, -1.5])


def test_max_mode_subtracts_the_group_max():
    # MAReMax: A = R - max R per group. [1, 0, 3] -> max 3 -> [-2, -3, 0]; [2, 2] -> [0, 0]
    close(group_relative_advantages(torch.tensor([1.0, 0.0, 3.0]), mode="max"), [-2.0, -3.0, 0.0])
    close(group_relative_advantages(torch.tensor([[-1.0, -4.0], [2.0, 2.0]]), mode="max"), [[0.0, -3.0], [0.0, 0.0]])
    # NaN is left out of the max and gets 0; an all-NaN group gives 0 everywhere
    close(group_relative_advantages(torch.tensor([[1.0, NAN, 0.5], [NAN, NAN, NAN]]), mode="max"),
          [[0.0, 0.0, -0.5], [0.0, 0.0, 0.0]])


def test_advantage_nan_handling():
    r = torch.tensor([1.0, NAN, 0.0, 2.0])
    # valid [1, 0, 2]: mean 1 -> mean mode A = [0, 0(NaN), -1, 1]
    close(group_relative_advantages(r), [0.0, 0.0, -1.0, 1.0])
    # squared deviations 0 + 1 + 1 = 2, unbiased var 2 / (3 - 1) = 1 -> std 1 -> A = [0, 0, -1/1.0001, 1/1.0001]
    close(group_relative_advantages(r, mode="std"), [0.0, 0.0, -1 / 1.0001, 1 / 1.0001])
    # loo with k = 3 valid: A_2 = 0 - mean(1, 2) = -1.5 ; A_3 = 2 - mean(1, 0) = 1.5 ; A_0 = 1 - mean(0, 2) = 0
    close(group_relative_advantages(r, mode="loo"), [0.0, 0.0, -1.5, 1.5])
    # one valid sample (std undefined) and an all-NaN group: every advantage is 0, no NaN leaks out
    for mode in ("mean", "std", "loo"):
        out = group_relative_advantages(torch.tensor([[NAN, 3.0], [NAN, NAN]]), mode=mode)
        close(out, [[0.0, 0.0], [0.0, 0.0]])


def test_advantage_errors():
    with pytest.raises(ValueError, match="mean.*std.*loo"):
        group_relative_advantages(torch.zeros(4), mode="rank")
    for mode in ("std", "loo"):
        with pytest.raises(ValueError, match="at least 2"):
            group_relative_advantages(torch.zeros(3, 1), mode=mode)
    # G = 1 is fine for the mean baseline: A = 0
    close(group_relative_advantages(torch.tensor([[5.0]])), [[0.0]])


def test_batch_scaled_advantages():
    # groups [1, 0] and [3, 5]: group means .5 and 4 -> centered [.5, -.5, -1, 1]
    # batch [1, 0, 3, 5]: mean 2.25; squared deviations 1.5625 + 5.0625 + .5625 + 7.5625 = 14.75; var 14.75/3
    s = math.sqrt(14.75 / 3) + 1e-4
    out = batch_scaled_advantages(torch.tensor([[1.0, 0.0], [3.0, 5.0]]))
    close(out, [[0.5 / s, -0.5 / s], [-1 / s, 1 / s]])
    # a NaN is left out of both the group mean and the batch std, and gets 0
    # groups [1, NaN] and [3, 5]: centered [0, 0, -1, 1]; batch [1, 3, 5]: mean 3, var (4 + 0 + 4)/2 = 4, std 2
    out = batch_scaled_advantages(torch.tensor([[1.0, NAN], [3.0, 5.0]]))
    close(out, [[0.0, 0.0], [-1 / 2.0001, 1 / 2.0001]])


def test_batch_scale_is_the_std_of_team_returns():
    # one node, G = 4, two agents in aligned mode: each agent's returns are a copy of the team's [0, 1, 0, 1].
    # team-level std: mean .5, squared deviations 4 * .25 = 1, var 1/3, std .57735 -> A = +-.5 / .57735 = +-.866
    # (the std over the eight agent copies would be sqrt(2/7) = .5345 -> +-.935)
    team = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # (K=1, J=4)
    agent_returns = agent_returns_from_joint(team, joint_action_indices(2, 4, "aligned"), 4)  # (1, 2, 4)
    s = math.sqrt(1 / 3) + 1e-4
    out = batch_scaled_advantages(agent_returns, team_returns=team)
    close(out, [[[-0.5 / s, 0.5 / s, -0.5 / s, 0.5 / s]] * 2])
    assert abs(float(out[0, 0, 1]) - 0.866) < 1e-3
    # one agent: the team returns are the agent's returns, so the default (TRL's scale_rewards="batch") agrees
    close(batch_scaled_advantages(team), batch_scaled_advantages(team, team_returns=team))


def test_batch_scale_over_two_processes():
    # The audit's numbers: team returns [0, 1, 0, 1] on process 0 and [0, 10, 0, 10] on process 1 (one node each).
    # TRL's GRPOTrainer takes the std of the gathered rewards: mean 2.75, squared deviations 4 * 7.5625 + 2 * 3.0625
    # + 2 * 52.5625 = 141.5, var 141.5 / 7, std 4.49603 -> process 0: +-.5 / 4.49613 = +-.11121, process 1: +-1.11207.
    # Each process alone would give +-.866 on both (std .57735 and 5.7735).
    here, there = torch.tensor([[0.0, 1.0, 0.0, 1.0]]), torch.tensor([[0.0, 10.0, 0.0, 10.0]])
    gathered = torch.cat([here, there], dim=1)
    s = math.sqrt(141.5 / 7) + 1e-4
    close(batch_scaled_advantages(here, team_returns=gathered), [[-0.5 / s, 0.5 / s] * 2])
    close(batch_scaled_advantages(there, team_returns=gathered), [[-5 / s, 5 / s] * 2], atol=1e-5)
    assert float(batch_scaled_advantages(here, team_returns=gathered)[0, 1]) == pytest.approx(0.11121, abs=1e-5)
    assert float(batch_scaled_advantages(here)[0, 1]) == pytest.approx(0.866, abs=1e-3)


def test_every_advantage_mode_has_a_row_in_the_equation_table():
    # every built-in estimator (the MAGRPO family: MAREINFORCE raw, MARLOO loo, MAReMax max, MAGRPO mean / std; GRPO's
    # batch; AT-GRPO's agent_turn, Dr. MAS's agent_norm) in the one equation table (docs/architecture.md), each naming
    # its function in core/; `trl_marl.core`'s docstring points there instead of keeping a copy
    from pathlib import Path

    import trl_marl.core
    from trl_marl.core.advantages import ADVANTAGE_MODES, advantage_estimator

    assert set(ADVANTAGE_MODES) >= {"mean", "std", "loo", "raw", "max", "batch", "agent_turn", "agent_norm"}
    arch = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    arch_rows = arch.splitlines()
    for mode in ADVANTAGE_MODES:
        name = advantage_estimator(mode).__name__
        assert any(f'advantage_mode="{mode}"' in row and f"`core.advantages.{name}`" in row for row in arch_rows), mode
    for row in arch_rows:  # CoMLRL's MAReMax is a group-max baseline, not ReMax's greedy-rollout one
        if "MAReMax" in row:
            assert "not ReMax" in row
    doc = trl_marl.core.__doc__ or ""
    assert "| paper | equation | function |" not in doc and "docs/architecture.md" in doc


# ----------------------------------------------------------------------------------------------------------------
# Equivalence with TRL's GRPO advantage numerics
# ----------------------------------------------------------------------------------------------------------------
def _random_rewards(seed: int, groups: int = 32, g: int = 8) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(groups, g, generator=gen)
    rewards[torch.rand(groups, g, generator=gen) < 0.15] = NAN  # unscorable samples
    rewards[0, :-1] = NAN  # one group with a single valid sample
    rewards[1] = 1.0  # one group with zero std
    return rewards


def test_nan_std_matches_trl():
    from trl.trainer.utils import nanstd

    rewards = _random_rewards(0)
    torch.testing.assert_close(nan_std(rewards, dim=1), nanstd(rewards, dim=1), atol=1e-6, rtol=0, equal_nan=True)
    torch.testing.assert_close(nan_std(rewards), nanstd(rewards), atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_group_advantages_match_trl(seed: int):
    from trl.trainer.utils import nanstd

    g = 8
    rewards = _random_rewards(seed, g=g)
    flat = rewards.flatten()  # TRL's layout: (num_prompts * G,), groups contiguous
    grouped = flat.view(-1, g)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(g)

    # scale_rewards="group"
    std = nanstd(grouped, dim=1).repeat_interleave(g)
    trl_group = torch.nan_to_num((flat - mean) / (std + 1e-4), nan=0.0)
    torch.testing.assert_close(group_relative_advantages(rewards, mode="std").flatten(), trl_group, atol=1e-6, rtol=0)

    # scale_rewards="none"
    trl_none = torch.nan_to_num(flat - mean, nan=0.0)
    torch.testing.assert_close(group_relative_advantages(rewards, mode="mean").flatten(), trl_none, atol=1e-6, rtol=0)

    # scale_rewards="batch"
    trl_batch = torch.nan_to_num((flat - mean) / (nanstd(flat).expand_as(flat) + 1e-4), nan=0.0)
    torch.testing.assert_close(batch_scaled_advantages(rewards).flatten(), trl_batch, atol=1e-6, rtol=0)


def test_loo_matches_explicit_leave_one_out():
    rewards = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    expected = torch.empty_like(rewards)
    for i in range(6):
        others = torch.cat([rewards[:, :i], rewards[:, i + 1 :]], dim=1)
        expected[:, i] = rewards[:, i] - others.mean(dim=1)
    torch.testing.assert_close(group_relative_advantages(rewards, mode="loo"), expected, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------------------------------------------
# Joint actions and credit
# ----------------------------------------------------------------------------------------------------------------
def test_joint_action_indices():
    aligned = joint_action_indices(2, 3, "aligned")
    assert aligned.dtype == torch.long
    assert aligned.tolist() == [[0, 0], [1, 1], [2, 2]]
    assert joint_action_indices(2, 2, "cross").tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    cross = joint_action_indices(3, 2, "cross")
    assert cross.shape == (8, 3)
    assert cross[5].tolist() == [1, 0, 1]  # itertools.product order: 5 = 0b101
    assert joint_action_indices(1, 4, "cross").tolist() == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="aligned.*cross"):
        joint_action_indices(2, 2, "random")


def test_cross_vs_aligned_credit():
    # 2 agents, G = 2. cross joint actions (a0, a1): (0,0)->1, (0,1)->2, (1,0)->3, (1,1)->6
    cross = joint_action_indices(2, 2, "cross")
    credit = agent_returns_from_joint(torch.tensor([1.0, 2.0, 3.0, 6.0]), cross, 2)
    # agent 0: sample 0 in (0,0),(0,1) -> mean(1, 2) = 1.5 ; sample 1 in (1,0),(1,1) -> mean(3, 6) = 4.5
    # agent 1: sample 0 in (0,0),(1,0) -> mean(1, 3) = 2   ; sample 1 in (0,1),(1,1) -> mean(2, 6) = 4
    close(credit, [[1.5, 4.5], [2.0, 4.0]])
    # group advantages: agent 0 -> [-1.5, 1.5], agent 1 -> [-1, 1]
    # (a sum instead of a mean would give [3, 9] and [4, 8]: advantages doubled, G^(n-1) = 2)
    close(group_relative_advantages(credit), [[-1.5, 1.5], [-1.0, 1.0]])

    # aligned: joint action g = (g, g) ; R = [1, 6] -> both agents credited [1, 6] -> A = [-2.5, 2.5]
    aligned = joint_action_indices(2, 2, "aligned")
    credit = agent_returns_from_joint(torch.tensor([1.0, 6.0]), aligned, 2)
    close(credit, [[1.0, 6.0], [1.0, 6.0]])
    close(group_relative_advantages(credit), [[-2.5, 2.5], [-2.5, 2.5]])


def test_agent_returns_batched_and_nan():
    cross = joint_action_indices(2, 2, "cross")
    joint = torch.tensor([[1.0, 2.0, 3.0, 6.0], [1.0, NAN, 3.0, 6.0]])
    out = agent_returns_from_joint(joint, cross, 2)
    assert out.shape == (2, 2, 2)
    close(out[0], [[1.5, 4.5], [2.0, 4.0]])
    # (0,1) unscorable: agent 0 sample 0 -> mean(1) = 1 ; agent 1 sample 1 -> mean(6) = 6
    close(out[1], [[1.0, 4.5], [2.0, 6.0]])
    # a sample whose joint returns are all NaN stays NaN (-> advantage 0 downstream)
    out = agent_returns_from_joint(torch.tensor([NAN, 5.0]), joint_action_indices(2, 2, "aligned"), 2)
    assert torch.isnan(out[:, 0]).all()
    close(group_relative_advantages(out), [[0.0, 0.0], [0.0, 0.0]])


# ----------------------------------------------------------------------------------------------------------------
# Multi-turn returns
# ----------------------------------------------------------------------------------------------------------------
def test_tree_returns():
    rewards = torch.tensor([1.0, 2.0, 3.0])
    children = torch.tensor([[1.0, 3.0], [4.0, NAN], [NAN, NAN]])
    mask = torch.tensor([[True, True], [True, False], [False, False]])
    # gamma = .5: R0 = 1 + .5 * mean(1, 3) = 2 ; R1 = 2 + .5 * mean(4) = 4 (missing child ignored);
    # R2 = 3 (no children: early stop / branching cap)
    close(tree_returns(rewards, children, 0.5, mask), [2.0, 4.0, 3.0])
    # no children at all -> R = r
    close(tree_returns(rewards, None, 0.5), [1.0, 2.0, 3.0])
    # full children, gamma = 1: R = r + mean(children) -> [1 + 2, 2 + 5]
    close(tree_returns(torch.tensor([1.0, 2.0]), torch.tensor([[1.0, 3.0], [4.0, 6.0]]), 1.0), [3.0, 7.0])


def test_tree_returns_two_turns_batched():
    # turn 2 leaves have no children: R2 = r2
    r2 = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])  # (B=1, J=2 turn-1 nodes, C=2 children each) rewards
    leaves = tree_returns(r2, None, 0.9)
    # turn 1: r1 = [0, 1] ; R1 = r1 + .9 * mean(children) = [0 + .9 * .5, 1 + .9 * 0] = [.45, 1]
    r1 = torch.tensor([[0.0, 1.0]])
    close(tree_returns(r1, leaves, 0.9), [[0.45, 1.0]])


def test_early_stop_returns():
    # a node stopped at turn t = 1 of T = 3 with rewards [1, 0] (rbar = .5), gamma = .5:
    # future = (.5 + .25) * .5 = .375 -> R = [1.375, .375]; the siblings' own difference (1.0) is unchanged
    close(early_stop_returns(torch.tensor([1.0, 0.0]), remaining_turns=2, discount=0.5), [1.375, 0.375])
    # at the last turn nothing is skipped: R = r
    close(early_stop_returns(torch.tensor([1.0, 0.0]), remaining_turns=0, discount=0.5), [1.0, 0.0])
    # batched nodes (K, J), a NaN reward is left out of rbar and stays NaN
    out = early_stop_returns(torch.tensor([[1.0, 1.0], [NAN, 0.5]]), remaining_turns=1, discount=1.0)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0], [NAN, 1.0]]), atol=1e-6, rtol=0, equal_nan=True)
    with pytest.raises(ValueError):
        early_stop_returns(torch.tensor([1.0]), remaining_turns=-1, discount=1.0)


def test_early_stop_does_not_invert_credit():
    # the audit's example: two turn-1 joint actions with reward 0; the first one's child node succeeds at
    # turn 2 (r = 1.0) and stops, the second one's child continues with 0.2 then 1.0; gamma = 1, T = 3.
    # Without a future the stopped child is worth 1.0 and the continued one 1.2: advantages [-.1, +.1].
    stopped = early_stop_returns(torch.tensor([1.0, 1.0]), remaining_turns=1, discount=1.0)  # [2, 2]
    continued = tree_returns(torch.tensor([0.2, 0.2]), torch.tensor([[1.0], [1.0]]), 1.0)  # [1.2, 1.2]
    turn_1 = tree_returns(torch.zeros(2), torch.stack([stopped.mean(), continued.mean()]).unsqueeze(-1), 1.0)
    close(turn_1, [2.0, 1.2])
    close(group_relative_advantages(turn_1), [0.4, -0.4])


# ----------------------------------------------------------------------------------------------------------------
# masked statistics / whitening
# ----------------------------------------------------------------------------------------------------------------
def test_masked_helpers_and_whiten():
    x = torch.tensor([1.0, 2.0, 3.0, 100.0])
    m = torch.tensor([1, 1, 1, 0])
    close(masked_mean(x, m), 2.0)  # (1 + 2 + 3) / 3
    close(masked_var(x, m), 1.0)  # (1 + 0 + 1) / (3 - 1)
    close(masked_var(x, m, unbiased=False), 2 / 3)  # (1 + 0 + 1) / 3
    # per-row mean: [[1, 2], [3, 100]] with mask [[1, 1], [1, 0]] -> [1.5, 3]
    close(masked_mean(x.view(2, 2), m.view(2, 2), dim=1), [1.5, 3.0])
    # whiten with mask: mean 2, var 1 -> (x - 2) / sqrt(1 + 1e-8)
    close(whiten(x, m), [-1.0, 0.0, 1.0, 98.0], atol=1e-5)
    # no mask: [1, 2, 3, 4] mean 2.5, unbiased var (2.25 + .25 + .25 + 2.25) / 3 = 5/3
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    s = math.sqrt(5 / 3)
    close(whiten(y), [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s])
    close(whiten(y, shift_mean=False), [2.5 - 1.5 / s, 2.5 - 0.5 / s, 2.5 + 0.5 / s, 2.5 + 1.5 / s])
    with pytest.raises(ValueError, match="at least 2"):
        masked_var(x, torch.tensor([0, 1, 0, 0]))


# ----------------------------------------------------------------------------------------------------------------
# Masks, log-probs, entropy, KL
# ----------------------------------------------------------------------------------------------------------------
def test_completion_mask_from_eos():
    ids = torch.tensor([[5, 7, 2, 0, 0], [5, 6, 7, 8, 9], [2, 2, 0, 0, 0]])
    mask = completion_mask_from_eos(ids, 2)
    assert mask.dtype == torch.int32
    # row 0: EOS at 2 -> [1, 1, 1, 0, 0] ; row 1: no EOS -> all ones ; row 2: EOS first -> [1, 0, 0, 0, 0]
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    # several EOS ids: 9 also ends a completion
    assert completion_mask_from_eos(ids, [2, 9]).tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert completion_mask_from_eos(torch.tensor([[9, 2, 4]]), [2, 9]).tolist() == [[1, 0, 0]]


def test_k3_and_k1():
    # logp = log .5, ref = log .25: ref - logp = log .5 -> k3 = .5 - log .5 - 1 = 0.193147 ; k1 = log 2
    # logp = log .25, ref = log .5: ref - logp = log 2 -> k3 = 2 - log 2 - 1 = 0.306853 ; k1 = -log 2
    logp = torch.log(torch.tensor([0.5, 0.25, 0.3]))
    ref = torch.log(torch.tensor([0.25, 0.5, 0.3]))
    close(k3_kl(logp, ref), [0.5 + math.log(2) - 1, 1 - math.log(2), 0.0])
    assert abs(k3_kl(logp, ref)[0].item() - 0.193147) < 1e-6
    close(k1_kl(logp, ref), [math.log(2), -math.log(2), 0.0])


def test_selective_log_softmax_and_entropy():
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # p = [.25, .75] and [.5, .5]
    index = torch.tensor([[1, 0]])
    close(selective_log_softmax(logits, index), [[math.log(0.75), math.log(0.5)]])
    # H = -(.25 ln .25 + .75 ln .75) = 0.562335 ; H(uniform of 2) = ln 2
    close(entropy_from_logits(logits), [[0.562335, math.log(2)]])
    # random check against log_softmax + gather, float32 and bfloat16, and K indices per position
    gen = torch.Generator().manual_seed(0)
    big = torch.randn(3, 5, 11, generator=gen)
    idx = torch.randint(0, 11, (3, 5), generator=gen)
    ref = big.log_softmax(-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(selective_log_softmax(big, idx), ref)
    torch.testing.assert_close(
        selective_log_softmax(big.bfloat16(), idx),
        big.bfloat16().log_softmax(-1).gather(-1, idx.unsqueeze(-1)).squeeze(-1),
    )
    idx_k = torch.randint(0, 11, (3, 5, 2), generator=gen)
    torch.testing.assert_close(selective_log_softmax(big, idx_k), big.log_softmax(-1).gather(-1, idx_k))
    assert entropy_from_logits(big, chunk_size=4).shape == (3, 5)


def test_logps_and_entropy_match_trl():
    from trl.trainer import utils as trl_utils

    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 7, 33, generator=gen)
    idx = torch.randint(0, 33, (4, 7), generator=gen)
    torch.testing.assert_close(selective_log_softmax(logits, idx), trl_utils.selective_log_softmax(logits, idx))
    torch.testing.assert_close(entropy_from_logits(logits), trl_utils.entropy_from_logits(logits))


# ----------------------------------------------------------------------------------------------------------------
# Clipped surrogate
# ----------------------------------------------------------------------------------------------------------------
def test_clipped_surrogate_both_sides():
    old = torch.zeros(2, 2)
    logps = torch.log(torch.tensor([[1.5, 0.5], [1.1, 0.7]]))  # ratios
    adv = torch.tensor([1.0, -1.0])
    loss, clipped = clipped_surrogate(logps, old, adv)  # eps = .2 -> clip to [.8, 1.2]
    # A=+1, rho=1.5: -min(1.5, 1.2) = -1.2 (clipped) ; A=+1, rho=.5: -min(.5, .8) = -.5 (not clipped)
    # A=-1, rho=1.1: -min(-1.1, -1.1) = 1.1        ; A=-1, rho=.7: -min(-.7, -.8) = .8 (clipped)
    close(loss, [[-1.2, -0.5], [1.1, 0.8]])
    assert clipped.tolist() == [[True, False], [False, True]]

    # clip-higher: eps_high = .28 -> A=+1, rho=1.5: -min(1.5, 1.28) = -1.28
    loss, _ = clipped_surrogate(logps, old, adv, epsilon_high=0.28)
    close(loss[0, 0], -1.28)

    # negative advantage with a large ratio is NOT clipped by PPO: A=-1, rho=1.5: -min(-1.5, -1.2) = 1.5
    # two-sided clipping delta = 1.3 caps it: -min(-1.3, -1.2) = 1.3
    big = torch.log(torch.tensor([[1.5]]))
    close(clipped_surrogate(big, torch.zeros(1, 1), torch.tensor([-1.0]))[0], [[1.5]])
    close(clipped_surrogate(big, torch.zeros(1, 1), torch.tensor([-1.0]), delta=1.3)[0], [[1.3]])

    # per-token advantages (B, T) are used as given
    loss, _ = clipped_surrogate(logps, old, torch.tensor([[1.0, -1.0], [1.0, -1.0]]))
    # [+1 @1.5 -> -1.2, -1 @.5 -> -min(-.5, -.8) = .8], [+1 @1.1 -> -1.1, -1 @.7 -> .8]
    close(loss, [[-1.2, 0.8], [-1.1, 0.8]])


def test_clipped_surrogate_gradient_zero_when_clipped():
    logps = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_()
    loss, _ = clipped_surrogate(logps, torch.zeros(1, 2), torch.tensor([1.0]))
    loss.sum().backward()
    # clipped token: no gradient ; unclipped: d(-rho)/dlogp = -rho = -1.1
    close(logps.grad, [[0.0, -1.1]])


def test_clipped_surrogate_sequence_level():
    old = torch.zeros(2, 3)
    logps = torch.log(torch.tensor([[1.5, 0.5, 9.0], [1.5, 0.5, 9.0]]))
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    loss, clipped = clipped_surrogate(
        logps, old, torch.tensor([1.0, -1.0]), importance_sampling_level="sequence", mask=mask
    )
    # mean log-ratio over the 2 real tokens: (log 1.5 + log .5)/2 = log sqrt(.75) -> rho = 0.866025 (inside clip)
    rho = math.sqrt(0.75)
    assert loss.shape == (2, 1)
    close(loss, [[-rho], [rho]])
    assert not clipped.any()
    with pytest.raises(ValueError, match="token.*sequence"):
        clipped_surrogate(logps, old, torch.zeros(2), importance_sampling_level="segment")


# ----------------------------------------------------------------------------------------------------------------
# Token aggregation
# ----------------------------------------------------------------------------------------------------------------
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the 6 is a padded token


def test_aggregate_grpo():
    # row means (1 + 2 + 3)/3 = 2 and (4 + 5)/2 = 4.5 -> mean 3.25
    close(aggregate_token_loss(LOSS, MASK, "grpo"), 3.25)


def test_aggregate_bnpo():
    # (1 + 2 + 3 + 4 + 5) / 5 = 3
    close(aggregate_token_loss(LOSS, MASK, "bnpo"), 3.0)


def test_aggregate_dr_grpo():
    # 15 / (B=2 * max_completion_length=4) = 1.875
    close(aggregate_token_loss(LOSS, MASK, "dr_grpo", max_completion_length=4), 1.875)
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate_token_loss(LOSS, MASK, "dr_grpo")


def test_aggregate_dapo():
    # 15 / num_items_in_batch (10 tokens in the whole generation batch) = 1.5 ; fallback 15 / 5 = 3
    close(aggregate_token_loss(LOSS, MASK, "dapo", num_items_in_batch=10), 1.5)
    close(aggregate_token_loss(LOSS, MASK, "dapo", num_items_in_batch=torch.tensor(10)), 1.5)
    close(aggregate_token_loss(LOSS, MASK, "dapo"), 3.0)


def test_aggregate_edge_cases():
    # sequence-level loss (B, 1) broadcasts over the mask: grpo (1 + 2)/2 = 1.5 ; bnpo (1*3 + 2*2) / 5 = 1.4
    seq = torch.tensor([[1.0], [2.0]])
    close(aggregate_token_loss(seq, MASK, "grpo"), 1.5)
    close(aggregate_token_loss(seq, MASK, "bnpo"), 1.4)
    # empty masks: denominators clamped at 1 -> 0, not NaN
    empty = torch.zeros(2, 3)
    for loss_type in SUPPORTED_LOSS_TYPES:
        close(aggregate_token_loss(LOSS, empty, loss_type, max_completion_length=3, num_items_in_batch=0), 0.0)
    with pytest.raises(ValueError, match="grpo.*bnpo.*dr_grpo.*dapo"):
        aggregate_token_loss(LOSS, MASK, "cispo")
    assert SUPPORTED_LOSS_TYPES == ("grpo", "bnpo", "dr_grpo", "dapo")


def test_log_importance_weights_token_and_sequence():
    logps = torch.tensor([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.5, -2.0, -2.0]])
    # token: log pi - log pi_old = [0.5, 0, -1]
    close(log_importance_weights(logps, old), [[0.5, 0.0, -1.0]])
    # sequence over the first two tokens (mask [1, 1, 0]): mean(0.5, 0) = 0.25
    close(log_importance_weights(logps, old, "sequence", torch.tensor([[1, 1, 0]])), [[0.25]])
    with pytest.raises(ValueError, match="importance_sampling_level"):
        log_importance_weights(logps, old, "word")



def test_high_entropy_mask():
    entropies = torch.tensor([[0.1, 0.5, 0.9, 0.3], [2.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 1], [0, 0, 0, 0]])
    # pool [0.1, 0.5, 0.9, 0.3]: the median by linear interpolation is 0.4 -> keep 0.5 and 0.9; padding never kept
    out = high_entropy_mask(entropies, mask, 0.5)
    assert out.tolist() == [[False, True, True, False], [False, False, False, False]]
    # top 100%: every completion token; a pool from elsewhere (e.g. every process) sets the threshold
    assert high_entropy_mask(entropies, mask, 1.0).tolist()[0] == [True] * 4
    # pool [0, 0.4]: threshold 0.2 -> 0.5, 0.9 and 0.3 are kept
    assert high_entropy_mask(entropies, mask, 0.5, pool=torch.tensor([0.0, 0.4])).tolist()[0] == [False, True, True,
                                                                                                   True]
    assert not high_entropy_mask(entropies, torch.zeros_like(mask), 0.5).any()


def test_off_policy_sequence_mask():
    # per-sequence drift mean(log pi_old - log pi) over the mask: [0.3, 0.1, 0.9, 0.5]; threshold 0.2
    old = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0], [-1.0, 0.0, 0.0]])
    logps = torch.tensor([[-1.2, -1.4, 5.0], [-1.1, -2.1, 5.0], [-1.9, -1.9, -1.9], [-1.5, 5.0, 5.0]],
                         requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([-1.0, -1.0, 2.0, 0.0])
    out = off_policy_sequence_mask(advantages, logps, old, mask, 0.2)
    # drifted with A < 0: dropped; little drift: kept; A > 0 or A = 0: kept whatever the drift
    assert out.tolist() == [[0.0], [1.0], [1.0], [1.0]]
    assert not out.requires_grad
    # the threshold is inclusive (drift <= delta keeps), and on-policy nothing drifts
    assert off_policy_sequence_mask(advantages, logps, old, mask, 0.3)[0].item() == 1.0
    assert off_policy_sequence_mask(advantages, old, old, mask, 0.0).flatten().tolist() == [1.0] * 4


def test_entropy_bonus_and_adaptive_coefficient():
    entropies = torch.tensor([[1.0, 3.0, 7.0], [2.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    bonus = entropy_bonus(entropies, mask)
    close(bonus, (1.0 + 3.0 + 2.0) / 3)  # a plain token mean: padding and unmasked tokens do not count
    bonus.backward()
    close(entropies.grad, [[1 / 3, 1 / 3, 0.0], [1 / 3, 0.0, 0.0]])
    assert entropy_bonus(entropies, torch.zeros_like(mask)).item() == 0.0
    # Skywork-OR1: up by delta at or below the target, down otherwise, within [min, max]
    assert adaptive_entropy_coef(0.01, 0.1, 0.2, 0.005, 0.0, 1.0) == pytest.approx(0.015)
    assert adaptive_entropy_coef(0.01, 0.2, 0.2, 0.005, 0.0, 1.0) == pytest.approx(0.015)
    assert adaptive_entropy_coef(0.01, 0.5, 0.2, 0.005, 0.0, 1.0) == pytest.approx(0.005)
    assert adaptive_entropy_coef(0.998, 0.1, 0.2, 0.005, 0.0, 1.0) == 1.0
    assert adaptive_entropy_coef(0.002, 0.5, 0.2, 0.005, 0.0, 1.0) == 0.0
