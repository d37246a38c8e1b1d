"""trl-marl trainers and their configurations: one package per algorithm (`magrpo`, `ppo`) over what they share
(`base`, `per_agent`, `distributed`, `engine_correction`)."""

from .magrpo import MAGRPOConfig, MAGRPOTrainer, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig, NonFiniteError
from .ppo import MultiAgentPPOConfig, MultiAgentPPOTrainer, PPOConfig, PPOTrainer

__all__ = [
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MAREINFORCEConfig",
    "MARLOOConfig",
    "MAReMaxConfig",
    "MultiAgentPPOConfig",
    "MultiAgentPPOTrainer",
    "NonFiniteError",
    "PPOConfig",
    "PPOTrainer",
]
