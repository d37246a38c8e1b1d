"""The sampling settings of a MAGRPO step: GRPO's generation fields of a `MAGRPOConfig` as a `GenerationConfig`, and
transformers' continuous-batching settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from transformers import GenerationConfig

from ..fields import dict_field_value

if TYPE_CHECKING:
    from ...team import AgentTeam
    from .config import MAGRPOConfig

__all__ = ["continuous_batching_config", "generation_config"]


def generation_config(args: MAGRPOConfig, team: AgentTeam) -> GenerationConfig:
    """The sampling settings of a `MAGRPOConfig` (GRPO's fields), for every agent of `team`.

    Agents that end at the same tokens (one tokenizer, or equal EOS ids) get them here, agent 0's generation config's
    EOS (else its tokenizer's) as before. Agents that end at different tokens (a `models` team of different base
    models) get no `eos_token_id` here: the backend gives each agent's model its own stop tokens and pad token
    (`trl_marl.team.generation.base.agent_generation_config`), so no agent stops at another's EOS. An `eos_token_id`
    in `generation_kwargs` applies to every agent.
    """
    tokenizer = team.tokenizers[0]
    eos = team.base_model_of(0).generation_config.eos_token_id
    own_stops = {frozenset(team.stop_token_ids(a)) for a in range(team.num_agents)}
    settings = dict(
        max_new_tokens=args.max_completion_length, do_sample=True, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id if eos is None else eos,
        cache_implementation=args.cache_implementation,
    )
    if len(own_stops) > 1:  # each agent stops at its own EOS (filled per agent by the backend)
        settings["eos_token_id"] = None
    # `generation_kwargs` wins over the defaults above, as in TRL (e.g. `{"eos_token_id": [eos, fence]}` to stop at
    # a closing code fence as well; passed twice to `GenerationConfig` it was a `TypeError`)
    return GenerationConfig(**{**settings, **(dict_field_value(args.generation_kwargs, "generation_kwargs") or {})})


def continuous_batching_config(args: MAGRPOConfig, team: AgentTeam) -> Any:
    """GRPO's `use_transformers_continuous_batching` for a team: the `ContinuousBatchingConfig` its models generate
    with (`transformers_continuous_batching_config`, with TRL's default of half the memory for the cache), or `None`.

    transformers' `generate_batch` runs one policy per model: it takes no per-row adapter names, so a team in
    `adapters` mode (its agents are LoRA adapters of one model, generated in one mixed-adapter batch) is refused.
    `models` mode (one model per agent, each with at most one adapter) and `shared` mode work.
    """
    if not args.use_transformers_continuous_batching:
        return None
    if team.mode == "adapters" and len(set(team.agent_adapter)) > 1:
        raise ValueError(
            "`use_transformers_continuous_batching=True` (or `use_transformers_paged`) cannot generate for a team in "
            "`adapters` mode: its agents are LoRA adapters of one model, sampled in one batch with one adapter per "
            "row, and transformers' continuous batching (`generate_batch`) takes no per-row adapter. Use "
            "`team_mode='models'` (one model per agent) or `'shared'`, or turn continuous batching off."
        )
    from transformers.generation import ContinuousBatchingConfig

    kwargs = dict(dict_field_value(args.transformers_continuous_batching_config,
                                   "transformers_continuous_batching_config") or {})
    kwargs.setdefault("max_memory_percent", 0.5)  # as TRL: leave room for the training step
    return ContinuousBatchingConfig(**kwargs)
