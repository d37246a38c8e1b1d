"""MAGRPO and its family (MAREINFORCE, MARLOO, MAReMax): the trainer, its configs, and what it is made of.

`trainer` (`MAGRPOTrainer`, read top to bottom), `config` (`MAGRPOConfig`), `family` (the family's configs), `schedule`
(which rows each micro-step plays), `generation` (the sampling settings of a step), `reference` (`ReferenceSync`,
the periodic reference sync), `entropy` (the entropy bonus and the `top_entropy_quantile` token masks),
`diagnostics` (the rollout metrics and the no-learning warnings).
"""

from .config import MAGRPOConfig
from .diagnostics import NoLearningSignalWarning, TrainingDiagnosticWarning
from .family import MAREINFORCEConfig, MAReMaxConfig, MARLOOConfig
from .trainer import MAGRPOTrainer, NonFiniteError

__all__ = [
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MAREINFORCEConfig",
    "MARLOOConfig",
    "MAReMaxConfig",
    "NoLearningSignalWarning",
    "NonFiniteError",
    "TrainingDiagnosticWarning",
]
