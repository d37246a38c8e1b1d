"""How `AgentTeam` samples ([`SamplingMixin`], one of its bases): it tokenizes every agent's prompts and hands the
rows to its generation backend, which returns a [`Generation`].

The backend is an object with one interface (`team.generation.base.GenerationBackend.generate`), never None: the
team's own decoding (`team.generation.transformers_backend.TransformersBackend`, the default: lean loop, shared
prompt prefills, `model.generate` fallback, continuous batching), the compiled one (`"compiled"`) or vLLM (`"vllm"`),
each cutting every completion after its first stop token. Which rows decode together, and how, is the backend's
business; the team keeps the switches the default backend reads (`lean_decode`, `share_prompt_prefill`,
`continuous_batching_config`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel

from ..utils.tokens import Prompt, tokenize_prompts
from .generation.base import Generation, GenerationBackend
from .generation.transformers_backend import TransformersBackend


def _eos_ids(tokenizer: Any, model: PreTrainedModel) -> set[int]:
    ids: set[int] = set()
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tokenizer.eos_token_id, gen_eos):
        if value is None:
            continue
        ids.update(value if isinstance(value, list) else [value])
    return ids


class SamplingMixin:
    """The sampling of `AgentTeam` (one of its bases: it reads the team's tokenizers and `generation_backend`)."""

    _generation_backend: GenerationBackend

    @property
    def generation_backend(self) -> GenerationBackend:
        """What samples the team's completions: a [`GenerationBackend`], by default a [`TransformersBackend`] (the
        team's own decoding). Setting None restores the default; an object that is no `GenerationBackend` is
        refused."""
        return self._generation_backend

    @generation_backend.setter
    def generation_backend(self, backend: GenerationBackend | None) -> None:
        if backend is None:
            backend = TransformersBackend()
        elif not isinstance(backend, GenerationBackend):
            raise TypeError(
                f"`generation_backend` must be a `trl_marl.team.generation.GenerationBackend`, got "
                f"{type(backend).__name__}: subclass `GenerationBackend` and define `generate(team, prompt_ids, "
                "generation_config, stop_token_ids=None) -> Generation` (or set None for the team's own decoding)."
            )
        self._generation_backend = backend

    def stop_token_ids(self, agent_index: int) -> set[int]:
        """The tokens that end agent `agent_index`'s completions by default: its tokenizer's EOS and every EOS of its
        model's generation config (instruct models often have several, e.g. `<|im_end|>` and `<|endoftext|>`)."""
        return _eos_ids(self.tokenizers[agent_index], self.base_model_of(agent_index))

    @torch.no_grad()
    def generate(
        self, prompts: Sequence[Sequence[Prompt]], generation_config: GenerationConfig,
        chat_template_kwargs: dict | None = None, stop_token_ids: set[int] | None = None,
    ) -> Generation:
        """Sample one completion per prompt for every agent, through `generation_backend`.

        With the default backend, rows that repeat a prompt through the same weights share one prefill when
        `share_prompt_prefill` is on; agents with different adapters or models never do.

        Args:
            prompts: `prompts[a]` is the list of prompts of agent `a` (strings, chat messages or token ids).
            generation_config: Sampling settings (`max_new_tokens`, `temperature`, ...).
            chat_template_kwargs: Passed to the chat template of chat prompts.
            stop_token_ids: Completions are cut after the first of these tokens. Default: the EOS tokens of the
                tokenizer and the model's generation config. An empty set keeps every generated token.

        Returns:
            A [`Generation`]: per agent, the prompt ids and the completion ids (token id lists), and the backend's
            log-probabilities of the completion tokens where it gives them (else None). It still reads as the list of
            `(prompt_ids, completion_ids)` pairs this method returned before: `generation[a]`, iteration, equality.
        """
        if len(prompts) != self.num_agents:
            raise ValueError(f"Expected prompts for {self.num_agents} agents, got {len(prompts)}.")
        prompt_ids = [tokenize_prompts(self.tokenizers[a], prompts[a], chat_template_kwargs)
                      for a in range(self.num_agents)]
        backend = self.generation_backend
        generation = backend.generate(self, prompt_ids, generation_config, stop_token_ids=stop_token_ids)
        if not isinstance(generation, Generation):
            raise TypeError(
                f"{type(backend).__name__}.generate returned {type(generation).__name__}, not a "
                "`trl_marl.team.generation.Generation`: return `Generation.from_rows(team, prompt_ids, rows, ...)`."
            )
        return generation
