"""Multi-agent environments: the `MultiAgentEnv` protocol and built-in environments.

- `PromptEnv`, `TokenizedPromptEnv`: plain prompt columns (TRL-style datasets).
- `TargetSumEnv`: a synthetic coordination task (offline demo and tests); `ChatTargetSumEnv` its chat form for real
  instruct models (assistant prefill).
- `ChatSplitItemsEnv`: division of labour for real instruct models: the agents must name different items of a
  list without seeing each other's answer (a position convention, which transfers to unseen lists).
- `CooperativeWritingEnv`: MAGRPO's writing task (summary + detailed expansion).
- `CooperativeCodingEnv`: MAGRPO's coding task (helper + main function, sandboxed tests as feedback);
  `PrivateRuleCodingEnv` with a rule only the helper reads, `NamingCodingEnv` with an interface name the two agents
  must agree on, `DivisionCodingEnv` with roles the agents choose, `RuleDivisionCodingEnv` with two rules and two
  one-expression functions the agents divide.
- `SymmetricWritingEnv`: the writing task with roles the writers choose (who writes the summary).
- `DebateEnv`, `ToyDebateEnv`: collaborative debate (Du et al. 2024) as used by MAPoRL.
- `CentralizedEnv`: one policy writes every agent's part of any text env in tagged sections (the baseline);
  `CentralizedCodingEnv` the coding task's: both functions in one code block; `CentralizedRuleDivisionCodingEnv`
  the rule division's.

An environment only describes the interaction; each task's rewards are in `trl_marl.rewards` (`rewards.writing`,
`rewards.coding`, `rewards.arithmetic`, `rewards.coordination`) and its dataset loaders in `trl_marl.data`.
"""

from __future__ import annotations

from .arithmetic import ChatTargetSumEnv, TargetSumEnv
from .base import MultiAgentEnv, Prompt, PromptEnv, TokenizedPromptEnv, Transcript, Turn
from .centralized import CentralizedEnv, split_sections
from .coding import CooperativeCodingEnv
from .coding_central import CentralizedCodingEnv
from .coding_division import DivisionCodingEnv
from .coding_private import NamingCodingEnv, PrivateRuleCodingEnv
from .coding_rule_division import CentralizedRuleDivisionCodingEnv, RuleDivisionCodingEnv
from .coordination import ChatSplitItemsEnv
from .debate import DebateEnv, ToyDebateEnv
from .writing import CooperativeWritingEnv, SymmetricWritingEnv, writing_text

__all__ = [
    "CentralizedCodingEnv",
    "CentralizedRuleDivisionCodingEnv",
    "CentralizedEnv",
    "CooperativeCodingEnv",
    "ChatSplitItemsEnv",
    "ChatTargetSumEnv",
    "CooperativeWritingEnv",
    "DebateEnv",
    "DivisionCodingEnv",
    "MultiAgentEnv",
    "Prompt",
    "NamingCodingEnv",
    "PrivateRuleCodingEnv",
    "RuleDivisionCodingEnv",
    "PromptEnv",
    "SymmetricWritingEnv",
    "TargetSumEnv",
    "TokenizedPromptEnv",
    "ToyDebateEnv",
    "Transcript",
    "Turn",
    "split_sections",
    "writing_text",
]
