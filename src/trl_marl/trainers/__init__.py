"""trl-marl trainers and their configurations."""

from .magrpo_config import MAGRPOConfig
from .magrpo_trainer import MAGRPOTrainer, NonFiniteError

__all__ = ["MAGRPOConfig", "MAGRPOTrainer", "NonFiniteError"]
