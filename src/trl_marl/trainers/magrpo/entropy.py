"""GRPO's entropy bonus for a team: `entropy_coef`, and Skywork-OR1's adaptive control (`use_adaptive_entropy`).

Each trained agent's loss becomes `L_a - c_a * H_a`, where `H_a` is the mean entropy of the agent's policy over the
tokens its policy loss acts on (`trl_marl.core.entropy_bonus`, with gradients), scaled for gradient accumulation
only, as in TRL's `GRPOTrainer`. With a fixed `entropy_coef`, `c_a` is that value for every agent. With
`use_adaptive_entropy`, every agent has a controller of its own (arXiv 2505.22312): after each optimizer step its
coefficient moves by `entropy_coef_delta` toward more bonus when the agent's entropy over the step (all its tokens,
all processes) was at or below `entropy_target`, toward less otherwise (`core.adaptive_entropy_coef`, bounded by
`entropy_coef_min`/`entropy_coef_max`), and the bonus is applied only while that measured entropy is at or below the
target (none before the first measurement). The coefficients are logged as `agent_<i>/entropy_coef` and saved in
checkpoints (`entropy_control.json`), so a resumed run continues with them.

Also here: the token selection of `top_entropy_quantile` ([`high_entropy_masks`], [`agent_high_entropy_mask`]): the
policy gradient only on each agent's highest-entropy tokens, the threshold taken over every process's tokens.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

import torch

from ...core import adaptive_entropy_coef, entropy_bonus, high_entropy_mask

if TYPE_CHECKING:
    from accelerate import Accelerator

    from .config import MAGRPOConfig

__all__ = [
    "ENTROPY_STATE_FILE",
    "EntropyControl",
    "agent_high_entropy_mask",
    "gathered_entropies",
    "high_entropy_masks",
]

ENTROPY_STATE_FILE = "entropy_control.json"


class EntropyControl:
    """The entropy bonus of each agent of a team (see the module docstring).

    Args:
        args: A `MAGRPOConfig` (`entropy_coef`, `use_adaptive_entropy`, `entropy_coef_min/max/delta`,
            `entropy_target`).
        agents: The trained agents.

    Example:

    ```python
    >>> from types import SimpleNamespace
    >>> args = SimpleNamespace(entropy_coef=0.01, use_adaptive_entropy=True, entropy_target=0.5,
    ...                        entropy_coef_delta=0.005, entropy_coef_min=0.0, entropy_coef_max=1.0)
    >>> control = EntropyControl(args, agents=[0])
    >>> control.applied_coef(0)  # no bonus before the first measurement
    0.0
    ```
    """

    def __init__(self, args: MAGRPOConfig, agents: list[int]) -> None:
        self.args = args
        self.adaptive = bool(args.use_adaptive_entropy)
        self.enabled = args.entropy_coef != 0.0 or self.adaptive  # a bonus, hence entropies with gradients
        self.agents = list(agents)
        self.coefs = {a: float(args.entropy_coef) for a in self.agents}
        self.last_entropy = {a: math.inf for a in self.agents}  # the entropy of the last optimizer step
        self._window: dict[int, torch.Tensor] = {}  # agent -> [sum of entropies, tokens] over the current step

    def applied_coef(self, agent: int) -> float:
        """The coefficient of agent `agent`'s bonus in the current optimizer step (0 while adaptive control sees
        an entropy above the target)."""
        if self.adaptive and not self.last_entropy[agent] <= self.args.entropy_target:
            return 0.0
        return self.coefs[agent]

    def bonus(self, agent: int, entropy: torch.Tensor, mask: torch.Tensor, scale: float,
              train: bool) -> torch.Tensor:
        """`c_a * H_a / scale`, the term subtracted from the agent's loss (`scale`: the accumulation steps in
        training); in training with adaptive control, the step's entropy statistics are recorded too."""
        mask = mask.to(entropy.dtype)
        if train and self.adaptive:
            stats = torch.stack([(entropy.detach() * mask).sum(), mask.sum()])
            self._window[agent] = stats if agent not in self._window else self._window[agent] + stats
        return self.applied_coef(agent) * entropy_bonus(entropy, mask) / scale

    def end_step(self, accelerator: Accelerator, metrics: dict[str, list[float]]) -> None:
        """After an optimizer step: update the adaptive coefficients from the step's entropy over every process,
        and log each agent's coefficient (nothing without a bonus)."""
        if not self.enabled:
            return
        if self.adaptive:
            device = accelerator.device
            local = torch.stack([self._window.get(a, torch.zeros(2, device=device)).to(device).float()
                                 for a in self.agents])
            totals = accelerator.reduce(local, reduction="sum").cpu()
            for (total, tokens), a in zip(totals.tolist(), self.agents):
                entropy = total / max(tokens, 1.0)
                args = self.args
                self.coefs[a] = adaptive_entropy_coef(self.coefs[a], entropy, args.entropy_target,
                                                      args.entropy_coef_delta, args.entropy_coef_min,
                                                      args.entropy_coef_max)
                self.last_entropy[a] = entropy
            self._window.clear()
        for a in self.agents:
            metrics[f"agent_{a}/entropy_coef"].append(self.coefs[a])

    def save(self, checkpoint_dir: str) -> None:
        """Write the adaptive controllers' state into a checkpoint folder (nothing for a fixed coefficient)."""
        if self.adaptive:
            state = {str(a): {"entropy_coef": self.coefs[a], "last_entropy": self.last_entropy[a]}
                     for a in self.agents}
            with open(os.path.join(checkpoint_dir, ENTROPY_STATE_FILE), "w") as f:
                json.dump(state, f)

    def load(self, checkpoint_dir: str) -> None:
        """Restore what `save` wrote, when the checkpoint has it."""
        path = os.path.join(checkpoint_dir, ENTROPY_STATE_FILE)
        if not (self.adaptive and os.path.exists(path)):
            return
        with open(path) as f:
            state = json.load(f)
        for a in self.agents:
            if str(a) in state:
                self.coefs[a] = float(state[str(a)]["entropy_coef"])
                self.last_entropy[a] = float(state[str(a)]["last_entropy"])


def gathered_entropies(accelerator: Accelerator, entropy: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
    """The completion tokens' entropies of every process (`top_entropy_quantile`'s pool, as TRL's); `None` with
    one process (the local ones are used)."""
    if accelerator.num_processes == 1:
        return None
    pool = accelerator.gather(accelerator.pad_across_processes(entropy[mask.bool()].float(), dim=0, pad_index=-1.0))
    return pool[pool >= 0]


def agent_high_entropy_mask(accelerator: Accelerator, entropy: torch.Tensor, mask: torch.Tensor,
                            top_quantile: float) -> torch.Tensor | None:
    """One agent's `top_entropy_quantile` token mask (`core.high_entropy_mask`, the threshold over every process's
    tokens of that agent, so a collective with several processes); `None` when the quantile is 1 (every token)."""
    if top_quantile >= 1.0:
        return None
    entropy = entropy.detach()
    return high_entropy_mask(entropy, mask, top_quantile, gathered_entropies(accelerator, entropy, mask))


def high_entropy_masks(accelerator: Accelerator, inputs: dict[str, Any],
                       top_quantile: float) -> list[torch.Tensor | None]:
    """Each agent's [`agent_high_entropy_mask`] (`None` for an agent without entropies); each depends on that
    agent's entropies only."""
    return [None if entropy is None else
            agent_high_entropy_mask(accelerator, entropy, inputs["batches"][a].loss_mask, top_quantile)
            for a, entropy in enumerate(inputs["entropy"])]
