"""`generation_backend="transformers"` (the default): [`TransformersBackend`], the team's own decoding.

Every agent's rows decode in as few batches as the team's layout allows: the agents of one model in one batch (in
`adapters` mode, one adapter name per row, PEFT's mixed-adapter batches), in eval mode (a 4-bit model too: the team
keeps bitsandbytes from repacking its layers, `team.quantized`). Each batch decodes

- through transformers' continuous batching (`generate_batch`, a paged cache) when the team has a
  `continuous_batching_config` (one policy per model: not for a mixed-adapter batch);
- else through the lean decoding loop (`team.generation.lean`: `generate`'s tokens without its per-call setup, and
  `model.generate` itself for the settings the loop does not take, or with `AgentTeam.lean_decode=False`), after one
  prefill per distinct (prompt, adapter) whose KV cache is copied to the rows that repeat it
  (`team.generation.prefill`, with `AgentTeam.share_prompt_prefill`).

Each completion is cut after its first stop token ([`stop_ids`] of the batch's first agent). The backend holds no
state of its own: it reads the switches above from the team's settings (`team.settings`, a
`team.settings.TeamSettings`) at every call, and activates an agent's adapter through `team.adapter_control`.
`"compiled"` (`team.generation.compiled.CompiledBackend`) is this backend with [`TransformersBackend.decode`] run on
a static KV cache and without the shared prefill.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel

from ...utils.tokens import pad_left, truncate_after_eos
from ..forward import no_autograd
from .base import Generation, GenerationBackend, agent_generation_config, stop_ids
from .lean import BehaviourLogps, decode
from .prefill import shared_prefill_cache

__all__ = ["TransformersBackend", "generate_with_continuous_batching"]


class TransformersBackend(GenerationBackend):
    """The team's own decoding (see the module docstring): the default `AgentTeam.generation_backend`.

    Example:

    ```python
    >>> from trl_marl.team.generation import TransformersBackend
    >>> TransformersBackend().name
    'transformers'
    ```
    """

    name = "transformers"
    # whether rows that repeat a prompt share one prefill (when the team's `share_prompt_prefill` is on)
    shares_prefill: bool = True
    # whether `generate` returns each sampled token's behaviour log-probability (`Generation.sampling_logps`: the
    # log-softmax of the decoding's raw logits / `team.temperature`, `lean.BehaviourLogps`): the rollout worker of
    # asynchronous rollouts turns it on in its copy of the team, so that no forward recomputes them. None are
    # returned when a batch decoded through `model.generate` or continuous batching
    behaviour_logprobs: bool = False

    @torch.no_grad()
    def generate(self, team: Any, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
                 stop_token_ids: set[int] | None = None) -> Generation:
        """Every agent's completions, decoded by the team's own models (see [`GenerationBackend.generate`])."""
        completion_ids: list[list[list[int]] | None] = [None] * len(prompt_ids)
        logps: list[list[list[float]]] | None = [[] for _ in prompt_ids] if self.behaviour_logprobs else None
        for model_index, model in enumerate(team.models):
            agents = [a for a in range(len(prompt_ids)) if team.agent_model[a] == model_index and prompt_ids[a]]
            if not agents:
                continue
            rows = [ids for a in agents for ids in prompt_ids[a]]  # every agent of the model in one batch
            outputs, row_logps = self._generate_rows(team, model, agents[0], rows, generation_config,
                                                     [team.agent_adapter[a] for a in agents for _ in prompt_ids[a]],
                                                     stop_token_ids)
            start = 0
            for a in agents:
                completion_ids[a] = outputs[start: start + len(prompt_ids[a])]
                if logps is not None and row_logps is not None:
                    logps[a] = row_logps[start: start + len(prompt_ids[a])]
                start += len(prompt_ids[a])
            if row_logps is None:
                logps = None  # all or none: the rest are recomputed by a forward
        return Generation(list(prompt_ids), [rows or [] for rows in completion_ids], logps)

    def decode(self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               generation_config: GenerationConfig, adapter_names: list[str | None] | None = None,
               past_key_values: Any = None, lean: bool = True,
               behaviour: BehaviourLogps | None = None) -> torch.Tensor:
        """One batch's prompts followed by its generated tokens: `team.generation.lean.decode` (a subclass may
        decode otherwise, with the same call and result, leaving `behaviour` not `available`)."""
        return decode(model, input_ids, attention_mask, generation_config, adapter_names=adapter_names,
                      past_key_values=past_key_values, lean=lean, behaviour=behaviour)

    def _generate_rows(
        self, team: Any, model: PreTrainedModel, agent_index: int, rows: list[list[int]],
        generation_config: GenerationConfig, adapter_names: list[str | None], stop_token_ids: set[int] | None = None,
    ) -> tuple[list[list[int]], list[list[float]] | None]:
        """One batch of rows through `model` (agent `agent_index`'s tokenizer pads them), each cut after a stop
        token, and with `behaviour_logprobs` each token's behaviour log-probability (None without)."""
        tokenizer = team.tokenizers[agent_index]
        # its own EOS and pad when the call sets neither an EOS nor stop tokens
        generation_config = agent_generation_config(team, agent_index, generation_config, stop_token_ids)
        ids, mask = pad_left(rows, tokenizer.pad_token_id)
        ids, mask = ids.to(team.device), mask.to(team.device)
        kwargs: dict[str, Any] = {}
        if team.mode == "adapters" and len(set(adapter_names)) > 1:
            kwargs["adapter_names"] = adapter_names
        elif team.mode == "adapters":
            team.adapter_control.activate(agent_index)
        was_training = model.training
        model.eval()  # a 4-bit model too: the team keeps bitsandbytes from repacking it (`team.quantized`)
        behaviour = BehaviourLogps(team.temperature) if self.behaviour_logprobs else None
        try:
            outputs = self._decode_rows(team, model, ids, mask, rows, generation_config, adapter_names, kwargs,
                                        behaviour)
        finally:
            model.train(was_training)
        stops = stop_ids(team, agent_index, stop_token_ids, generation_config)
        cut = [truncate_after_eos(row, stops) for row in outputs]
        return cut, None if behaviour is None else behaviour.rows([len(row) for row in cut])

    def _decode_rows(self, team: Any, model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor,
                     rows: list[list[int]], generation_config: GenerationConfig, adapter_names: list[str | None],
                     kwargs: dict[str, Any], behaviour: BehaviourLogps | None = None) -> list[list[int]]:
        """The generated token ids of each row (prompt excluded, not yet cut at EOS); `behaviour` records their
        log-probabilities when the lean loop decodes them."""
        settings = team.settings  # the team's `TeamSettings`
        if settings.continuous_batching_config is not None:
            if behaviour is not None:
                behaviour.available = False
            if len(set(adapter_names)) > 1:
                raise ValueError("Continuous batching cannot take a mixed-adapter batch (one adapter per row).")
            return generate_with_continuous_batching(model, rows, generation_config,
                                                     settings.continuous_batching_config)
        # `inference_mode` when safe (`no_autograd`): no autograd bookkeeping in the many small ops of decoding;
        # nothing made here outlives the call but token id lists (continuous batching, above, keeps its own cache and
        # thread, and stays under `no_grad`)
        with no_autograd():
            if settings.share_prompt_prefill and self.shares_prefill:  # one prefill per distinct (prompt, adapter)
                cache = shared_prefill_cache(model, ids, mask, generation_config, kwargs.get("adapter_names"))
                if cache is not None:
                    kwargs["past_key_values"] = cache
            if behaviour is not None:
                kwargs["behaviour"] = behaviour
            out = self.decode(model, ids, mask, generation_config, lean=settings.lean_decode, **kwargs)
            return [row.tolist() for row in out[:, ids.size(1):]]


def generate_with_continuous_batching(model: PreTrainedModel, rows: list[list[int]],
                                      generation_config: GenerationConfig, config: Any) -> list[list[int]]:
    """Sample one completion per prompt with transformers' continuous batching (`generate_batch`, paged cache).

    The model runs its active policy for every row: `generate_batch` passes no per-row adapter names, so a team
    whose agents share a model through different LoRA adapters cannot generate this way. A request that fails or
    goes missing (transformers only logs those) raises instead of silently shortening the batch.
    """
    generator = cast(GenerationMixin, model)  # a causal LM (transformers' `PreTrainedModel` type has no `generate`)
    outputs = list(generator.generate_batch(rows, generation_config=generation_config,
                                            continuous_batching_config=config, progress_bar=False).values())
    failed = [o.error for o in outputs if o.error is not None]
    if len(outputs) != len(rows) or failed:
        raise RuntimeError(f"Continuous batching returned {len(outputs) - len(failed)} of {len(rows)} completions"
                           + (f"; first error: {failed[0]}" if failed else "") + ".")
    return [list(o.generated_tokens) for o in outputs]
