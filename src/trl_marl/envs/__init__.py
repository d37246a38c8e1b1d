"""Multi-agent environments: the `MultiAgentEnv` protocol and built-in environments."""

from .arithmetic import TargetSumEnv, TargetSumReward, parse_int, target_sum_reward
from .base import MultiAgentEnv, Prompt, PromptEnv, Transcript, Turn

__all__ = [
    "MultiAgentEnv",
    "Prompt",
    "PromptEnv",
    "TargetSumEnv",
    "TargetSumReward",
    "Transcript",
    "Turn",
    "parse_int",
    "target_sum_reward",
]
