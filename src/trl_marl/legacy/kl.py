"""KL controllers of the classic PPO loop: the coefficient beta of the per-token KL penalty."""

from __future__ import annotations

from ..core.ppo import adaptive_kl_coef


class AdaptiveKLController:
    """Adapts beta toward a target KL (Ziegler et al. 2019, Sec. 2.2), see `trl_marl.core.ppo.adaptive_kl_coef`.

    Args:
        init_kl_coef: Initial beta.
        target: Target KL.
        horizon: Horizon H: the larger, the slower beta moves.

    Example:
        >>> ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
        >>> ctl.update(current=12.0, n_steps=256)
        >>> round(ctl.value, 6)
        0.201024
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: float) -> None:
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = float(horizon)

    def update(self, current: float, n_steps: int) -> None:
        """Move beta after a batch of `n_steps` samples whose mean KL was `current`."""
        self.value = adaptive_kl_coef(self.value, float(current), self.target, self.horizon, int(n_steps))


class FixedKLController:
    """Keeps beta constant.

    Args:
        kl_coef: beta.

    Example:
        >>> ctl = FixedKLController(0.05)
        >>> ctl.update(current=100.0, n_steps=8)
        >>> ctl.value
        0.05
    """

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current: float, n_steps: int) -> None:
        """Does nothing: the coefficient is fixed."""
