"""How `AgentTeam` samples ([`SamplingMixin`], one of its bases): every agent's prompts in as few batches as the
layout allows, each batch through the team's own decoding or through its generation backend.

The team's own decoding runs the agents of one model in one batch (in `adapters` mode, one adapter name per row),
with one prefill per distinct prompt (`team.generation.prefill`) and the lean decoding loop (`team.generation.lean`,
`model.generate` where the loop does not apply); `continuous_batching_config` hands the rows to transformers'
continuous batching instead. A backend (`team.generation`: `"compiled"`, `"vllm"`) either decodes the same batches
(`decodes_rows`) or takes every agent's rows at once. Either way each completion is cut after its first stop token.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel

from ..utils.tokens import Prompt, pad_left, tokenize_prompts, truncate_after_eos
from .forward import checkpointing_paused, no_autograd
from .generation.lean import decode
from .generation.prefill import shared_prefill_cache


def _eos_ids(tokenizer: Any, model: PreTrainedModel) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, gen_eos):
        if value is None:
            continue
        ids.update(value if isinstance(value, list) else [value])
    return ids


class SamplingMixin:
    """The sampling of `AgentTeam` (one of its bases: it reads the team's models, tokenizers, adapters,
    `generation_backend`, `lean_decode` and `share_prompt_prefill`)."""

    def stop_token_ids(self, agent_index: int) -> set[int]:
        """The tokens that end agent `agent_index`'s completions by default: its tokenizer's EOS and every EOS of its
        model's generation config (instruct models often have several, e.g. `<|im_end|>` and `<|endoftext|>`)."""
        return _eos_ids(self.tokenizers[agent_index], self.base_model_of(agent_index))

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[Prompt]], generation_config: GenerationConfig,
        chat_template_kwargs: dict | None = None, stop_token_ids: set[int] | None = None,
    ) -> list[tuple[list[list[int]], list[list[int]]]]:
        """Sample one completion per prompt for every agent.

        Rows that repeat a prompt through the same weights share one prefill when `share_prompt_prefill` is on (see
        the class docstring); agents with different adapters or models never do.

        Args:
            prompts: `prompts[a]` is the list of prompts of agent `a` (strings, chat messages or token ids).
            generation_config: Sampling settings (`max_new_tokens`, `temperature`, ...).
            stop_token_ids: Completions are cut after the first of these tokens. Default: the EOS tokens of the
                tokenizer and the model's generation config. An empty set keeps every generated token.

        Returns:
            For each agent, `(prompt_ids, completion_ids)`: token id lists.
        """
        if len(prompts) != self.num_agents:
            raise ValueError(f"Expected prompts for {self.num_agents} agents, got {len(prompts)}.")
        prompt_ids = [tokenize_prompts(self.tokenizers[a], prompts[a], chat_template_kwargs)
                      for a in range(self.num_agents)]
        self.sampling_logps = None
        backend = self.generation_backend
        if backend is not None and not getattr(backend, "decodes_rows", False):  # e.g. vLLM: all rows, cut below
            outputs, logps = backend.generate_with_logprobs(self, prompt_ids, generation_config)
            cut = [[truncate_after_eos(row, self._stop_ids(a, stop_token_ids, generation_config))
                    for row in outputs[a]] for a in range(self.num_agents)]
            if logps is not None:
                self.sampling_logps = [[list(lp[: len(row)]) for lp, row in zip(logps[a], cut[a])]
                                       for a in range(self.num_agents)]
            return [(prompt_ids[a], cut[a]) for a in range(self.num_agents)]
        completion_ids: list[list[list[int]] | None] = [None] * self.num_agents
        # Agents that run on the same model generate in one batch (one adapter name per row in `adapters` mode).
        for model_index, model in enumerate(self.models):
            agents = [a for a in range(self.num_agents) if self.agent_model[a] == model_index and prompt_ids[a]]
            # A 4-bit model generates in train mode (see `_keeps_train_mode`), where PEFT refuses mixed-adapter
            # batches: its agents then generate one after the other.
            groups = [[a] for a in agents] if _keeps_train_mode(model) else ([agents] if agents else [])
            for group in groups:
                rows = [ids for a in group for ids in prompt_ids[a]]
                outputs = self._generate_rows(model, group[0], rows, generation_config,
                                              [self.agent_adapter[a] for a in group for _ in prompt_ids[a]],
                                              stop_token_ids)
                start = 0
                for a in group:
                    completion_ids[a] = outputs[start: start + len(prompt_ids[a])]
                    start += len(prompt_ids[a])
        return [(prompt_ids[a], completion_ids[a] or []) for a in range(self.num_agents)]

    def _generate_rows(
        self, model: PreTrainedModel, agent_index: int, rows: list[list[int]], generation_config: GenerationConfig,
        adapter_names: list[str | None], stop_token_ids: set[int] | None = None,
    ) -> list[list[int]]:
        tokenizer = self.tokenizers[agent_index]
        ids, mask = pad_left(rows, tokenizer.pad_token_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        kwargs: dict[str, Any] = {}
        if self.mode == "adapters" and len(set(adapter_names)) > 1:
            kwargs["adapter_names"] = adapter_names
        elif self.mode == "adapters":
            self._activate(agent_index)
        was_training = model.training
        keeps_train_mode = _keeps_train_mode(model)
        if not keeps_train_mode:
            model.eval()
        try:
            # in train mode, checkpointed layers would drop the KV cache while decoding: pause checkpointing there
            with checkpointing_paused(model) if keeps_train_mode else nullcontext():
                outputs = self._decode_rows(model, ids, mask, rows, generation_config, adapter_names, kwargs)
        finally:
            model.train(was_training)
        stops = self._stop_ids(agent_index, stop_token_ids, generation_config)
        return [truncate_after_eos(row, stops) for row in outputs]

    def _stop_ids(self, agent_index: int, stop_token_ids: set[int] | None,
                  generation_config: GenerationConfig | None = None) -> set[int]:
        """The tokens an agent's completions are cut after: `stop_token_ids`; when None, [`stop_token_ids`] and every
        `eos_token_id` of the call's `generation_config` (a row that decoding ended at such a token is padded after
        it: without the cut, the padding would count as completion tokens)."""
        if stop_token_ids is not None:
            return stop_token_ids
        stops = self.stop_token_ids(agent_index)
        called = getattr(generation_config, "eos_token_id", None)
        if called is not None:
            stops |= set(called if isinstance(called, list) else [called])
        return stops

    def _decode_rows(self, model: PreTrainedModel, ids: torch.Tensor, mask: torch.Tensor, rows: list[list[int]],
                     generation_config: GenerationConfig, adapter_names: list[str | None],
                     kwargs: dict[str, Any]) -> list[list[int]]:
        """The generated token ids of each row (prompt excluded, not yet cut at EOS)."""
        if self.continuous_batching_config is not None:
            if len(set(adapter_names)) > 1:
                raise ValueError("Continuous batching cannot take a mixed-adapter batch (one adapter per row).")
            return generate_with_continuous_batching(model, rows, generation_config, self.continuous_batching_config)
        # `inference_mode` when safe (`no_autograd`): no autograd bookkeeping in the many small ops of decoding;
        # nothing made here outlives the call but token id lists (continuous batching, above, keeps its own cache and
        # thread, and stays under `no_grad`)
        # a row-decoding backend (`"compiled"`) decodes the same batches, without a shared prefill (its static KV
        # caches outlive the call, kept apart per inference/no_grad mode)
        backend = self.generation_backend
        row_decode = backend.decode if backend is not None else decode
        with no_autograd():
            if self.share_prompt_prefill and backend is None:  # one prefill per distinct (prompt, adapter)
                cache = shared_prefill_cache(model, ids, mask, generation_config, kwargs.get("adapter_names"))
                if cache is not None:
                    kwargs["past_key_values"] = cache
            out = row_decode(model, ids, mask, generation_config, lean=self.lean_decode, **kwargs)
            return [row.tolist() for row in out[:, ids.size(1):]]


def generate_with_continuous_batching(model: PreTrainedModel, rows: list[list[int]],
                                      generation_config: GenerationConfig, config: Any) -> list[list[int]]:
    """Sample one completion per prompt with transformers' continuous batching (`generate_batch`, paged cache).

    The model runs its active policy for every row: `generate_batch` passes no per-row adapter names, so a team
    whose agents share a model through different LoRA adapters cannot generate this way. A request that fails or
    goes missing (transformers only logs those) raises instead of silently shortening the batch.
    """
    outputs = list(model.generate_batch(rows, generation_config=generation_config, continuous_batching_config=config,
                                        progress_bar=False).values())
    failed = [o.error for o in outputs if o.error is not None]
    if len(outputs) != len(rows) or failed:
        raise RuntimeError(f"Continuous batching returned {len(outputs) - len(failed)} of {len(rows)} completions"
                           + (f"; first error: {failed[0]}" if failed else "") + ".")
    return [list(o.generated_tokens) for o in outputs]


def _keeps_train_mode(model: Any) -> bool:
    """Whether `model` must generate in train mode: a bitsandbytes 4-bit model on CPU.

    bitsandbytes (0.50, CPUs with AVX512-BF16) repacks 4-bit weights in place for its CPU inference kernel on the
    first eval-mode no-grad forward; every later forward then runs a kernel without input gradient, so the LoRA
    adapters below the last layer would silently train on wrong gradients. Generation in train mode avoids the
    repacking (trainers disable dropout, so sampling is unchanged).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if not getattr(base, "is_loaded_in_4bit", False):
        return False
    return next(base.parameters()).device.type == "cpu"
