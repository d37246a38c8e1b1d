"""The team: its agents' policies (`AgentTeam`) and what runs them.

- [`~trl_marl.team.policies`]: `AgentTeam`, the policies of a team in one of three layouts (an adapter per agent on
  one base model, a model per agent, shared weights), its per-(turn, agent) slots and reference policies.
"""

from .policies import (
    TEAM_CONFIG_NAME,
    TEAM_MODES,
    AgentBatch,
    AgentTeam,
    Prompt,
    base_state_dict,
    generate_with_continuous_batching,
    is_chat,
    is_partitioned,
    is_token_ids,
    joint_model_inputs,
    load_tokenizer,
    logits_dtype_autocast,
    no_split_modules,
    pad_left,
    pad_right,
    sequence_model_inputs,
    tokenize_prompts,
    truncate_after_eos,
)

__all__ = [
    "TEAM_CONFIG_NAME",
    "TEAM_MODES",
    "AgentBatch",
    "AgentTeam",
    "Prompt",
    "base_state_dict",
    "generate_with_continuous_batching",
    "is_chat",
    "is_partitioned",
    "is_token_ids",
    "joint_model_inputs",
    "load_tokenizer",
    "logits_dtype_autocast",
    "no_split_modules",
    "pad_left",
    "pad_right",
    "sequence_model_inputs",
    "tokenize_prompts",
    "truncate_after_eos",
]
