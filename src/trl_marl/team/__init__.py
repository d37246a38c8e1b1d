"""The team: its agents' policies (`AgentTeam`) and everything that runs them, one module per role.

- [`~trl_marl.team.policies`]: `AgentTeam`, the policies of a team in one of three layouts (an adapter per agent on
  one base model, a model per agent, shared weights), its per-(turn, agent) slots and reference policies. The team
  *has* the parts below (`team.logprob_forwards`, `team.generation_backend`, `team.adapter_control`, `team.saver`),
  plain objects that hold a reference to it, and calls them from its public methods.
- [`~trl_marl.team.settings`]: `TeamSettings`, the knobs the parts read (`team.settings`, set with
  `AgentTeam.configure`).
- [`~trl_marl.team.building`]: `AgentTeam.build`: the models loaded or copied per agent, tokenizers, adapters.
- [`~trl_marl.team.forward`]: the log-probability forwards (`LogProbForwards`, `team.logprob_forwards`:
  `AgentTeam.forward`, old-policy and reference log-probabilities, PPO's logits) on `AgentBatch`es, and what such a
  forward may leave out.
- [`~trl_marl.team.sampling`]: `AgentTeam.generate`: the prompts tokenized and handed to the team's generation
  backend (`team.generation_backend`), which returns a `Generation`.
- [`~trl_marl.team.generation`]: the generation backends behind one interface (`generation.base`:
  `GenerationBackend.generate` returns a `Generation`): the team's own decoding, the default
  (`generation.transformers_backend`: which rows decode together, the lean decoding loop of `generation.lean`, shared
  prompt prefills of `generation.prefill`, continuous batching), static-cache compiled decoding
  (`generation.compiled`), vLLM in process (`generation.vllm`) or as a server (`generation.vllm_server`).
- [`~trl_marl.team.adapters`]: switching the active LoRA adapter, and activation checkpointing across adapters
  (`AdapterControl`, `team.adapter_control`).
- [`~trl_marl.team.mixed_adapters`]: one batch over several agents' adapters, each adapter on its run of rows (for
  generation and for training forwards).
- [`~trl_marl.team.compile`]: `torch.compile` of the log-probability forwards.
- [`~trl_marl.team.saving`]: `save_pretrained`, `from_pretrained` (`TeamSaver`, `team.saver`), and the weights of a
  PEFT model's base.
- [`~trl_marl.team.chat`]: using a trained team: `chat` / `chat_team` (text in, text out, chat templates applied),
  `merged_agent` / `save_merged` (an agent's adapter merged into a standalone model); the one mixin of `AgentTeam`.
"""

from ..utils.tokens import (
    Prompt,
    is_chat,
    is_token_ids,
    joint_model_inputs,
    load_tokenizer,
    pad_left,
    pad_right,
    sequence_model_inputs,
    tokenize_prompts,
    truncate_after_eos,
)
from .forward import AgentBatch, logits_dtype_autocast
from .generation.base import Generation
from .generation.transformers_backend import generate_with_continuous_batching
from .policies import TEAM_MODES, AgentTeam, is_partitioned, no_split_modules
from .saving import TEAM_CONFIG_NAME, base_state_dict
from .settings import TeamSettings

__all__ = [
    "TEAM_CONFIG_NAME",
    "TEAM_MODES",
    "AgentBatch",
    "AgentTeam",
    "Generation",
    "Prompt",
    "TeamSettings",
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
