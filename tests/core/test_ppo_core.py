"""The PPO equations of `trl_marl.core.ppo` (and `core.whiten`) on hand-computed values.

Every expected number is worked out in the comments next to it, so a failure points at one equation.
"""

from __future__ import annotations

import math

import pytest
import torch

from helpers import close
from trl_marl.core import whiten
from trl_marl.core.ppo import (
    clipped_value_loss,
    generalized_advantage_estimation,
    kl_penalty,
    ppo_policy_loss,
    response_masks,
    score_positions,
    shaped_token_rewards,
)


# ---------------------------------------------------------------------------------------------------- masks
def test_every_equation_of_the_module_is_in_its_header() -> None:
    # each "Equation N" that a function of core.ppo implements is written out in the module's numbered header
    import inspect
    import re

    import trl_marl.core.ppo as ppo

    implemented = {int(n) for n in re.findall(r"Equation (\d+)", inspect.getsource(ppo))}
    written = {int(n) for n in re.findall(r"^(\d+)\. ", ppo.__doc__ or "", flags=re.M)}
    assert implemented == set(range(1, 8)) and implemented <= written
    assert "lam" in (ppo.__doc__ or "").split("7. ")[1]  # eq. 7 says that lam does not enter


def test_response_masks() -> None:
    # last real token at index 1, an empty response (-1), and a response filling the 4 positions (3)
    policy, value = response_masks(torch.tensor([1, -1, 3]), width=4)
    assert policy.dtype == torch.bool and value.dtype == torch.bool
    # policy steps: t <= len
    assert policy.tolist() == [
        [True, True, False, False],  # t <= 1
        [False, False, False, False],  # t <= -1: nothing
        [True, True, True, True],  # t <= 3
    ]
    # value/reward steps: t <= len + 1 (one step past the response when it exists)
    assert value.tolist() == [
        [True, True, True, False],  # t <= 2
        [True, False, False, False],  # t <= 0
        [True, True, True, True],  # t <= 4: the window ends at 3
    ]


def test_score_positions() -> None:
    # width 4: after = len + 1 = [2, 0, 4, 3]; 2 < 4 -> 2, 0 < 4 -> 0, 4 >= 4 -> len = 3, 3 < 4 -> 3
    positions = score_positions(torch.tensor([1, -1, 3, 2]), width=4)
    assert positions.tolist() == [2, 0, 3, 3]


def test_score_position_of_full_length_response_is_its_last_token() -> None:
    # a response that uses the whole window (len = T - 1) has no step after it: the score goes on its last token
    assert score_positions(torch.tensor([4]), width=5).tolist() == [4]
    # one token shorter: the step just after it (index 4) still fits
    assert score_positions(torch.tensor([3]), width=5).tolist() == [4]


# ---------------------------------------------------------------------------------------------------- KL
def test_kl_penalty_k1() -> None:
    logps = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    # k1 = logp - ref = [-1 + 1.5, -2 + 1] = [0.5, -1.0]  (may be negative)
    close(kl_penalty(logps, ref, "k1"), [0.5, -1.0])
    close(kl_penalty(logps, ref), [0.5, -1.0])  # k1 is the default


def test_kl_penalty_k3() -> None:
    logps = torch.tensor([-1.0, -2.0, -0.7])
    ref = torch.tensor([-1.5, -1.0, -0.7])
    # r = ref - logp = [-0.5, 1.0, 0.0];  k3 = (e^r - 1) - r
    #   e^-0.5 - 1 + 0.5 = 0.60653066 - 0.5 = 0.10653066
    #   e^1 - 1 - 1      = 2.71828183 - 2   = 0.71828183
    #   e^0 - 1 - 0      = 0                  (zero where the policies agree)
    close(kl_penalty(logps, ref, "k3"), [0.10653066, 0.71828183, 0.0])
    assert (kl_penalty(torch.randn(100), torch.randn(100), "k3") >= 0).all()  # k3 is never negative


def test_kl_penalty_unknown_estimator() -> None:
    with pytest.raises(ValueError, match="Unknown KL estimator 'k2'"):
        kl_penalty(torch.zeros(2), torch.zeros(2), "k2")


# ---------------------------------------------------------------------------------------------------- rewards
def test_shaped_token_rewards() -> None:
    scores = torch.tensor([2.0, -1.0])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, -0.2, 0.0]])
    # lengths [0, 2], width 3 -> score positions [1 (= 0 + 1), 2 (= 2 + 1 does not fit: the last token)]
    rewards, non_score = shaped_token_rewards(scores, kl, kl_coef=0.5, sequence_lengths=torch.tensor([0, 2]))
    # non-score reward = -0.5 * kl
    close(non_score, [[-0.05, -0.1, -0.15], [-0.2, 0.1, 0.0]])
    # plus the score on the score step: row 0 at t=1 (-0.1 + 2 = 1.9), row 1 at t=2 (0 - 1 = -1)
    close(rewards, [[-0.05, 1.9, -0.15], [-0.2, 0.1, -1.0]])
    # the KL input and the non-score rewards are not modified in place by adding the score
    close(kl, [[0.1, 0.2, 0.3], [0.4, -0.2, 0.0]])


# ---------------------------------------------------------------------------------------------------- GAE
def test_gae_by_hand() -> None:
    rewards = torch.tensor([[1.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 1.0, 1.5]])
    advantages, returns = generalized_advantage_estimation(rewards, values, gamma=0.9, lam=0.8)
    # gamma * lam = 0.72, V_3 = 0 (past the window)
    # t=2: delta = 2 + 0.9 * 0   - 1.5 = 0.5;   A_2 = 0.5
    # t=1: delta = 0 + 0.9 * 1.5 - 1.0 = 0.35;  A_1 = 0.35 + 0.72 * 0.5  = 0.71
    # t=0: delta = 1 + 0.9 * 1.0 - 0.5 = 1.4;   A_0 = 1.4  + 0.72 * 0.71 = 1.9112
    close(advantages, [[1.9112, 0.71, 0.5]])
    # R_t = A_t + V_t = [1.9112 + 0.5, 0.71 + 1.0, 0.5 + 1.5]
    close(returns, [[2.4112, 1.71, 2.0]])


def test_gae_gamma_one_lam_one_is_reward_to_go_minus_value() -> None:
    # gamma = lam = 1: A_t = sum_{l >= t} r_l - V_t (Monte Carlo return minus baseline)
    rewards = torch.tensor([[0.0, -0.1, 1.0]])
    values = torch.tensor([[0.2, 0.3, 0.4]])
    advantages, returns = generalized_advantage_estimation(rewards, values, gamma=1.0, lam=1.0)
    # reward-to-go = [0.9, 0.9, 1.0]
    close(advantages, [[0.7, 0.6, 0.6]])
    close(returns, [[0.9, 0.9, 1.0]])


def test_gae_matches_its_definition() -> None:
    # A_t = sum_{l=0}^{T-1-t} (gamma lam)^l delta_{t+l}, delta_t = r_t + gamma V_{t+1} - V_t, V_T = 0
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    values = torch.randn(4, 6, generator=generator, dtype=torch.float64)
    gamma, lam = 0.95, 0.7
    advantages, returns = generalized_advantage_estimation(rewards, values, gamma, lam)
    B, T = rewards.shape
    expected = torch.zeros_like(rewards)
    for b in range(B):
        for t in range(T):
            for k in range(t, T):
                next_value = values[b, k + 1] if k + 1 < T else 0.0
                delta = rewards[b, k] + gamma * next_value - values[b, k]
                expected[b, t] += (gamma * lam) ** (k - t) * delta
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected + values)


# ---------------------------------------------------------------------------------------------------- losses
def test_ppo_policy_loss_both_clip_sides() -> None:
    cliprange = 0.2  # ratio clipped to [0.8, 1.2]
    advantages = torch.tensor([[1.0, 1.0, -2.0, -2.0, 5.0]])
    ratios = torch.tensor([[1.5, 0.5, 1.5, 0.5, 2.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0]])
    logps = (old + ratios.log()).requires_grad_()
    mask = torch.tensor([[True, True, True, True, False]])  # the last token is padding
    loss, clip_fraction, ratio = ppo_policy_loss(logps, old, advantages, cliprange, mask)
    # per token max(-A rho, -A clip(rho)):
    #   A=+1, rho=1.5: max(-1.5, -1.2) = -1.2  clipped (no gain from pushing an advantaged token past 1.2)
    #   A=+1, rho=0.5: max(-0.5, -0.8) = -0.5  unclipped
    #   A=-2, rho=1.5: max( 3.0,  2.4) =  3.0  unclipped (a bad token made more likely is fully penalized)
    #   A=-2, rho=0.5: max( 1.0,  1.6) =  1.6  clipped (no gain from pushing a bad token below 0.8)
    #   masked: ignored
    # loss = (-1.2 - 0.5 + 3.0 + 1.6) / 4 = 2.9 / 4 = 0.725; clipped on 2 of 4 tokens
    close(loss, 0.725, atol=1e-5)
    close(clip_fraction, 0.5)
    close(ratio.detach(), [[1.5, 0.5, 1.5, 0.5, 2.0]], atol=1e-5)
    loss.backward()
    # d loss / d logp = -A rho / 4 on unclipped tokens, 0 on clipped and masked ones
    #   token 2: -1 * 0.5 / 4 = -0.125;  token 3: 2 * 1.5 / 4 = 0.75
    close(logps.grad, [[0.0, -0.125, 0.75, 0.0, 0.0]], atol=1e-5)


def test_ppo_policy_loss_inside_the_clip_range() -> None:
    # rho = 1.1 is inside [0.8, 1.2]: loss = -A rho = -(0.5 * 1.1 + (-1) * 1.1) / 2 = -(0.55 - 1.1) / 2 = 0.275
    old = torch.zeros(1, 2)
    loss, clip_fraction, _ = ppo_policy_loss(
        old + math.log(1.1), old, torch.tensor([[0.5, -1.0]]), 0.2, torch.ones(1, 2, dtype=torch.bool)
    )
    close(loss, 0.275, atol=1e-6)
    close(clip_fraction, 0.0)


def test_clipped_value_loss() -> None:
    cliprange_value = 0.2
    old = torch.tensor([[1.0, 1.0, 0.0, 3.0]])
    new = torch.tensor([[1.5, 1.1, -0.5, 10.0]])
    returns = torch.tensor([[2.0, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    loss, clip_fraction = clipped_value_loss(new, old, returns, cliprange_value, mask)
    # per step max((V' - R)^2, (clip(V', V - 0.2, V + 0.2) - R)^2):
    #   V'=1.5, V=1,  R=2: clip -> 1.2;  max(0.25, 0.64) = 0.64  clipped (moved 0.5 toward R, credited 0.2)
    #   V'=1.1, V=1,  R=2: inside range;  max(0.81, 0.81) = 0.81  unclipped (equal losses do not count)
    #   V'=-0.5, V=0, R=0: clip -> -0.2; max(0.25, 0.04) = 0.25  unclipped (moving away from R is not clipped)
    #   masked: ignored
    # loss = 0.5 * (0.64 + 0.81 + 0.25) / 3 = 0.5 * 1.7 / 3 = 0.283333; clipped on 1 of 3 steps
    close(loss, 0.5 * 1.7 / 3, atol=1e-6)
    close(clip_fraction, 1 / 3)


def test_clipped_value_loss_unclipped_is_half_squared_error() -> None:
    # |V' - V| <= 0.2 everywhere: the loss is 0.5 * mean (V' - R)^2 = 0.5 * (0.1^2 + 0.3^2) / 2 = 0.025
    old = torch.tensor([[0.0, 1.0]])
    loss, clip_fraction = clipped_value_loss(
        torch.tensor([[0.1, 0.9]]), old, torch.tensor([[0.0, 1.2]]), 0.2, torch.ones(1, 2, dtype=torch.bool)
    )
    close(loss, 0.025)
    close(clip_fraction, 0.0)


# ---------------------------------------------------------------------------------------------------- whiten
def test_whiten_shift_mean() -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 6.0])
    # mean 3; deviations [-2, -1, 0, 3]; unbiased var = (4 + 1 + 0 + 9) / 3 = 14 / 3; std = 2.1602469
    close(whiten(values, shift_mean=True), [-2 / 2.1602469, -1 / 2.1602469, 0.0, 3 / 2.1602469], atol=1e-5)
    # shift_mean=False only rescales: the mean 3 is added back
    close(whiten(values, shift_mean=False), [3 - 2 / 2.1602469, 3 - 1 / 2.1602469, 3.0, 3 + 3 / 2.1602469], atol=1e-5)


def test_whiten_masked_statistics() -> None:
    # statistics over [1, 3] only: mean 2, unbiased var = (1 + 1) / 1 = 2; every entry is transformed
    values = torch.tensor([1.0, 3.0, 100.0])
    mask = torch.tensor([1.0, 1.0, 0.0])
    s = math.sqrt(2.0)
    close(whiten(values, mask), [-1 / s, 1 / s, 98 / s], atol=1e-4)
    close(whiten(values, mask, shift_mean=False), [2 - 1 / s, 2 + 1 / s, 2 + 98 / s], atol=1e-4)


# ---------------------------------------------------------------------------------------------------- classic loop
def test_classic_kl_penalty_variants() -> None:
    from trl_marl.core.ppo import classic_kl_penalty

    logps, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.5])
    # d = logp - ref = [2, -0.5]
    close(classic_kl_penalty(logps, ref, "kl"), [2.0, -0.5])
    close(classic_kl_penalty(logps, ref, "abs"), [2.0, 0.5])
    close(classic_kl_penalty(logps, ref, "mse"), [2.0, 0.125])  # d^2 / 2
    # full: p = [0.5, 0.5], q = [0.25, 0.75] -> 0.5 ln 2 + 0.5 ln(2/3)
    p, q = torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.25, 0.75]]).log()
    close(classic_kl_penalty(p, q, "full"), [0.5 * math.log(2.0) + 0.5 * math.log(2.0 / 3.0)])
    with pytest.raises(ValueError, match="Unknown KL penalty"):
        classic_kl_penalty(logps, ref, "k3")


def test_adaptive_kl_coef_by_hand() -> None:
    from trl_marl.core.ppo import adaptive_kl_coef

    # e = clip(7/6 - 1, -0.2, 0.2) = 1/6; beta = 0.2 * (1 + (1/6) * 100 / 1000) = 0.2 * (1 + 1/60)
    assert adaptive_kl_coef(0.2, 7.0, 6.0, 1000.0, 100) == pytest.approx(0.2 * (1 + 1 / 60))
    # far above the target: e clipped to +0.2 -> 0.1 * (1 + 0.2 * 10 / 10) = 0.12
    assert adaptive_kl_coef(0.1, 60.0, 6.0, 10.0, 10) == pytest.approx(0.12)
    # far below: e clipped to -0.2 -> 0.1 * (1 - 0.2 * 10 / 10) = 0.08
    assert adaptive_kl_coef(0.1, 0.0, 6.0, 10.0, 10) == pytest.approx(0.08)


def test_running_moments_update_by_hand() -> None:
    from trl_marl.core.ppo import running_moments_update

    # first batch [1, 3] from the initial (0, 1, ~0): mean 2, population var 1, count 2
    mean, var, count = running_moments_update(0.0, 1.0, 1e-24, torch.tensor([1.0, 3.0]))
    assert (mean, var, count) == pytest.approx((2.0, 1.0, 2.0))
    # add [5]: all values [1, 3, 5] -> mean 3, population var 8/3, count 3
    mean, var, count = running_moments_update(mean, var, count, torch.tensor([5.0]))
    assert (mean, var, count) == pytest.approx((3.0, 8.0 / 3.0, 3.0))
