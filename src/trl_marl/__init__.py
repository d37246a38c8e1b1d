"""trl-marl: multi-agent reinforcement learning for teams of LLM agents, built on Hugging Face TRL.

Public API:

- [`MAGRPOConfig`], [`MAGRPOTrainer`]: Multi-Agent Group Relative Policy Optimization (arXiv 2508.04652).
- [`MAREINFORCEConfig`], [`MARLOOConfig`], [`MAReMaxConfig`]: MAGRPO with comlrl's other advantages (no
  baseline, leave-one-out, group-max baseline: the best sampled return, not ReMax's greedy-rollout baseline).
- [`AgentTeam`]: the agents' policies (one LoRA adapter per agent, one model per agent, or shared weights).
- [`trl_marl.envs`]: the `MultiAgentEnv` protocol and built-in environments.
- [`trl_marl.core`]: the algorithms' math as pure tensor functions.
- [`trl_marl.toy`]: tiny offline models and tasks for tests and demos.
"""

from . import (
    _trl_compat,  # noqa: F401  (fails early, with a clear message, outside the tested TRL range)
    toy,  # noqa: F401  (registers the offline toy model names, e.g. "toy")
)
from .envs import MultiAgentEnv, PromptEnv, TargetSumEnv
from .rollout import RewardFunctionError
from .team import AgentTeam, load_tokenizer
from .trainers import (
    MAGRPOConfig,
    MAGRPOTrainer,
    MAREINFORCEConfig,
    MAReMaxConfig,
    MARLOOConfig,
    MultiAgentPPOConfig,
    MultiAgentPPOTrainer,
    NonFiniteError,
    PPOConfig,
    PPOTrainer,
)
from .validation import RewardTimeoutError

__version__ = "0.1.0.dev0"

__all__ = [
    "AgentTeam",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MAREINFORCEConfig",
    "MARLOOConfig",
    "MAReMaxConfig",
    "MultiAgentEnv",
    "MultiAgentPPOConfig",
    "MultiAgentPPOTrainer",
    "NonFiniteError",
    "PPOConfig",
    "PPOTrainer",
    "PromptEnv",
    "RewardFunctionError",
    "RewardTimeoutError",
    "TargetSumEnv",
    "load_tokenizer",
    "__version__",
]
