"""trl-marl trainers and their configurations."""

from .magrpo_config import MAGRPOConfig, MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig
from .magrpo_trainer import MAGRPOTrainer, NonFiniteError
from .ppo_config import MultiAgentPPOConfig, PPOConfig
from .ppo_dropin import PPOTrainer
from .ppo_trainer import MultiAgentPPOTrainer

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
