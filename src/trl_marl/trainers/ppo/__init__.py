"""Multi-agent PPO (MAPoRL's, CoMLRL's IAC and MAAC) and the drop-in for TRL's `PPOTrainer`.

`trainer` (`MultiAgentPPOTrainer`), `config` (`MultiAgentPPOConfig`, `PPOConfig`), `samples` (each policy slot's
samples, scores and PPO targets), `value` (value and reward models, `PolicyValueTeam`), `logging` (the metrics of an
update), `dropin` (`PPOTrainer`, TRL 1.12's interface).
"""

from .config import MultiAgentPPOConfig, PPOConfig
from .dropin import PPOTrainer
from .samples import AgentRollout
from .trainer import MultiAgentPPOTrainer
from .value import PolicyValueTeam, load_value_model

__all__ = ["AgentRollout", "MultiAgentPPOConfig", "MultiAgentPPOTrainer", "PPOConfig", "PPOTrainer", "PolicyValueTeam",
           "load_value_model"]
