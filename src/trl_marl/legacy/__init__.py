"""The classic PPO API of TRL <= 0.11, on `trl_marl`'s PPO math and team machinery.

Change `from trl import ...` to `from trl_marl.legacy import ...` (and `from trl.core import LengthSampler` to
`from trl_marl.legacy import LengthSampler`) and a script written for the classic `PPOTrainer` runs unchanged. The
deliberate differences from TRL 0.11.4 are listed in `docs/legacy_ppo.md`.

Example:
    ```python
    from trl_marl.legacy import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer, create_reference_model

    model = AutoModelForCausalLMWithValueHead.from_pretrained("gpt2")
    trainer = PPOTrainer(PPOConfig(batch_size=16, mini_batch_size=4), model, create_reference_model(model), tok)
    ```
"""

from __future__ import annotations

import random

import numpy as np
import torch

from .config import PPOConfig
from .kl import AdaptiveKLController, FixedKLController
from .trainer import PPOTrainer
from .value_head import AutoModelForCausalLMWithValueHead, ValueHead, create_reference_model


class LengthSampler:
    """Draws a length uniformly from `[min_value, max_value)` (numpy's global generator), e.g. `max_new_tokens`.

    Args:
        min_value: Smallest length.
        max_value: One past the largest length.

    Example:
        >>> sampler = LengthSampler(4, 8)
        >>> 4 <= sampler() < 8
        True
    """

    def __init__(self, min_value: int, max_value: int) -> None:
        self.values = list(range(min_value, max_value))

    def __call__(self) -> int:
        return int(np.random.choice(self.values))


def set_seed(seed: int) -> None:
    """Seed python's `random`, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


__all__ = [
    "AdaptiveKLController",
    "AutoModelForCausalLMWithValueHead",
    "FixedKLController",
    "LengthSampler",
    "PPOConfig",
    "PPOTrainer",
    "ValueHead",
    "create_reference_model",
    "set_seed",
]
