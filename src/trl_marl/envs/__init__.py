"""Multi-agent environments: the `MultiAgentEnv` protocol and built-in environments.

- `PromptEnv`, `TokenizedPromptEnv`: plain prompt columns (TRL-style datasets).
- `TargetSumEnv`: a synthetic coordination task (offline demo and tests).
- `CooperativeWritingEnv`: MAGRPO's writing task (summary + detailed expansion) with its team rewards.
- `CooperativeCodingEnv`: MAGRPO's coding task (helper + main function, sandboxed tests) with its team rewards.
- `DebateEnv`, `ToyDebateEnv`: collaborative debate (Du et al. 2024) as used by MAPoRL.
"""

from .arithmetic import TargetSumEnv, TargetSumReward, parse_int, target_sum_reward
from .base import MultiAgentEnv, Prompt, PromptEnv, TokenizedPromptEnv, Transcript, Turn
from .coding import (
    CodingTeamReward,
    CombinedSyntaxReward,
    CooperativeCodingEnv,
    HelperDefinedReward,
    HelperUsedReward,
    MainDefinedReward,
    NonTrivialMainReward,
    PassRateReward,
    load_humaneval,
    load_mbpp,
)
from .debate import DebateEnv, ToyDebateEnv
from .writing import (
    CooperativeWritingEnv,
    LengthRangeReward,
    LengthRatioReward,
    LexicalDiversityReward,
    StyleConsistencyReward,
    TransitionWordsReward,
    WritingTeamReward,
    load_tldr,
)

__all__ = [
    "CodingTeamReward",
    "CombinedSyntaxReward",
    "CooperativeCodingEnv",
    "CooperativeWritingEnv",
    "DebateEnv",
    "HelperDefinedReward",
    "HelperUsedReward",
    "LengthRangeReward",
    "LengthRatioReward",
    "LexicalDiversityReward",
    "MainDefinedReward",
    "MultiAgentEnv",
    "NonTrivialMainReward",
    "PassRateReward",
    "Prompt",
    "PromptEnv",
    "StyleConsistencyReward",
    "TargetSumEnv",
    "TargetSumReward",
    "ToyDebateEnv",
    "TokenizedPromptEnv",
    "Transcript",
    "TransitionWordsReward",
    "Turn",
    "WritingTeamReward",
    "load_humaneval",
    "load_mbpp",
    "load_tldr",
    "parse_int",
    "target_sum_reward",
]
