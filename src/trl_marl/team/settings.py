"""`TeamSettings`: the knobs that the parts of an `AgentTeam` read, typed, with each default written once.

The team's log-probability forwards read `temperature`, `joint_adapter_forward`, `logprob_chunk_elements` and
`share_prompt_forward`; its own decoding (`team.generation.transformers_backend`) reads `share_prompt_prefill`,
`lean_decode` and `continuous_batching_config`. A trainer builds them once from its config
(`TeamTrainer._setup_generation`) and hands them to [`AgentTeam.configure`]; a user may do the same, or set one
attribute (`team.temperature = 0.7`), which replaces that one field and checks the result the same way.

Example:

```python
>>> from trl_marl.team.settings import TeamSettings
>>> settings = TeamSettings(temperature=0.7)
>>> settings.replace(lean_decode=False).lean_decode
False
>>> TeamSettings(temperature=0.0)  # ValueError: `temperature` must be a number > 0 (...), got 0.0: ...
```
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

from ..core import DEFAULT_CHUNK_ELEMENTS

__all__ = ["TeamSettings"]


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False, got {value!r} ({type(value).__name__}).")


@dataclass(frozen=True)
class TeamSettings:
    """The settings of a team's parts, checked when built (a bad value raises with the field's name and the fix).

    Args:
        temperature (`float`, defaults to `1.0`): The log-probability forwards divide the logits by it before the
            log-softmax (as TRL's `GRPOTrainer`); a trainer sets its sampling temperature. Must be > 0.
        share_prompt_prefill (`bool`, defaults to `True`): The team's own decoding runs a prompt's forward once for
            rows that repeat it through the same weights and copies its KV cache to each (`team.generation.prefill`).
        lean_decode (`bool`, defaults to `True`): The team's own decoding samples with `team.generation.lean` where
            it supports the generation settings; False always calls `model.generate`.
        continuous_batching_config (`Any`, defaults to `None`): A `transformers.ContinuousBatchingConfig`: the team's
            own decoding runs `generate_batch` (continuous batching), one policy per model (not for mixed-adapter
            batches). None: off.
        joint_adapter_forward (`bool`, defaults to `True`): In `adapters` mode, the forwards of several agents run as
            one forward through the shared base model, each row through its agent's adapter, where they can.
        logprob_chunk_elements (`int`, defaults to `2**24`): The log-probability forwards take each token's
            log-probability through the LM head a chunk of positions at a time, with at most this many logits per
            chunk (`team.head`); 0 computes the full `[batch, length, vocab]` logits at once.
        share_prompt_forward (`bool`, defaults to `False`): MAGRPO's log-probability forward runs each distinct
            prompt of an agent's batch once and its completions after the prompt's KV cache (`team.shared_prompt`),
            where the forward allows it; the same values up to floating-point reordering.
    """

    temperature: float = 1.0
    share_prompt_prefill: bool = True
    lean_decode: bool = True
    continuous_batching_config: Any = None
    joint_adapter_forward: bool = True
    logprob_chunk_elements: int = field(default=DEFAULT_CHUNK_ELEMENTS)
    share_prompt_forward: bool = False

    def __post_init__(self) -> None:
        temperature = self.temperature
        if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real)
                or not math.isfinite(temperature) or temperature <= 0):
            raise ValueError(
                f"`temperature` must be a number > 0 (the logits are divided by it), got {temperature!r}: pass the "
                "sampling temperature, e.g. `temperature=1.0` (greedy decoding still scores at a temperature > 0)."
            )
        for name in ("share_prompt_prefill", "lean_decode", "joint_adapter_forward", "share_prompt_forward"):
            _check_flag(name, getattr(self, name))
        chunk = self.logprob_chunk_elements
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 0:
            raise ValueError(
                f"`logprob_chunk_elements` must be an integer >= 0 (logits per chunk of the LM head; 0 for the full "
                f"logits), got {chunk!r}: e.g. `logprob_chunk_elements={DEFAULT_CHUNK_ELEMENTS}` (the default)."
            )
        config = self.continuous_batching_config
        if isinstance(config, (bool, int, float, str, dict)):
            raise TypeError(
                f"`continuous_batching_config` must be a `transformers.ContinuousBatchingConfig` or None, got "
                f"{config!r}: build one, e.g. `ContinuousBatchingConfig(max_memory_percent=0.5)`, or leave it None "
                "(a trainer builds it from `use_transformers_continuous_batching`)."
            )

    def replace(self, **changes: Any) -> TeamSettings:
        """These settings with `changes` applied, checked again (an unknown name raises, listing the fields)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError(f"Unknown team setting(s) {unknown}: the settings are {sorted(names)}.")
        return dataclasses.replace(self, **changes)
