"""Using a trained team ([`ChatMixin`], `AgentTeam`'s one mixin): text in, text out, and one agent as a plain model.

- [`ChatMixin.chat`]: one agent's answers to a list of prompts, as strings. A plain-text prompt becomes a user message
  of a conversation (with an optional system message) and goes through the agent's chat template, as during
  training; chat messages go through it unchanged. Greedy decoding unless `do_sample=True`.
- [`ChatMixin.chat_team`]: every agent's answers to the same prompts, in one batched `generate` call.
- [`ChatMixin.merged_agent`] / [`ChatMixin.save_merged`]: an agent's LoRA adapter merged into a copy of its base
  model, a standalone `PreTrainedModel` that `AutoModelForCausalLM.from_pretrained` (or vLLM) loads without PEFT.

Example:

```python
from trl_marl import AgentTeam

team = AgentTeam.from_pretrained("my-team")
print(team.chat(0, ["What is 2 + 3?"], max_new_tokens=32))  # a list with agent 0's answer
team.save_merged(0, "my-team-agent0")  # AutoModelForCausalLM.from_pretrained("my-team-agent0")
```

Why a mixin, when the team's other roles are parts it has (`team.logprob_forwards`, `team.generation_backend`, ...):
these methods hold no state and read nothing but the team's public API (`generate`, `stop_token_ids`, `tokenizers`,
`policy`), so they are convenience methods of the class itself, not a part to configure, swap or copy.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import GenerationConfig, PreTrainedModel

from ..utils.tokens import Prompt, tokenize_prompts
from ..validation.data import context_window

if TYPE_CHECKING:
    from peft import PeftModel

    from .generation.base import Generation


def _as_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    """A single prompt (a string, or one conversation) as a list of one; a list of prompts unchanged."""
    if isinstance(prompts, str):
        return [prompts]
    items: list[Any] = list(prompts)  # prompts, or the messages of one conversation
    if items and isinstance(items[0], dict):  # one conversation: a list of messages
        return [items]
    return items


class ChatMixin:
    """Text generation and adapter merging for `AgentTeam` (its one mixin: it reads the team's tokenizers, models,
    adapters and `generate`, and holds no state)."""

    if TYPE_CHECKING:  # what the mixin reads of `AgentTeam`
        tokenizers: list[Any]
        agent_adapter: list[str | None]

        @property
        def num_agents(self) -> int: ...

        def policy(self, agent_index: int) -> PreTrainedModel: ...

        def generate(self, prompts: Sequence[Sequence[Any]], generation_config: GenerationConfig,
                     chat_template_kwargs: dict | None = None,
                     stop_token_ids: set[int] | None = None) -> Generation: ...

        def stop_token_ids(self, agent_index: int) -> set[int]: ...

    def _chat_prompt(self, agent: int, prompt: Prompt, system_prompt: str | None,
                     apply_chat_template: bool) -> Prompt:
        """What `generate` gets for one text prompt: a conversation when the agent's tokenizer has a chat template."""
        if not isinstance(prompt, str) or not apply_chat_template:
            return prompt
        if getattr(self.tokenizers[agent], "chat_template", None) is None:
            return prompt  # a base model without a template reads the text as it is
        messages = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
        return [*messages, {"role": "user", "content": prompt}]

    def _check_agent(self, agent: int) -> None:
        if not isinstance(agent, int) or isinstance(agent, bool) or not 0 <= agent < self.num_agents:
            raise ValueError(f"`agent` must be one of 0..{self.num_agents - 1} (the team has {self.num_agents} "
                             f"agents), got {agent!r}.")

    def _chat_rows(self, agent_prompts: list[list[Prompt]], max_new_tokens: int, do_sample: bool,
                   temperature: float, top_p: float, system_prompt: str | None, apply_chat_template: bool,
                   seed: int | None) -> list[list[str]]:
        """Each agent's answers to its prompts (an empty list for an agent without prompts)."""
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"`max_new_tokens` must be a positive integer, got {max_new_tokens!r}.")
        if do_sample and not (math.isfinite(temperature) and temperature > 0):
            raise ValueError(f"`temperature` must be > 0 when sampling (`do_sample=True`), got {temperature!r}.")
        if not 0 < top_p <= 1:
            raise ValueError(f"`top_p` must be in (0, 1] (a probability mass), got {top_p!r}.")
        rows = [tokenize_prompts(self.tokenizers[a], [self._chat_prompt(a, p, system_prompt, apply_chat_template)
                                                      for p in prompts])
                for a, prompts in enumerate(agent_prompts)]  # token ids: `generate` takes them as they are
        self._check_prompt_lengths(rows)
        settings: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": do_sample}
        if do_sample:
            settings.update(temperature=temperature, top_p=top_p, top_k=0)
        asked = [a for a, prompts in enumerate(rows) if prompts]
        settings["pad_token_id"] = self.tokenizers[asked[0] if asked else 0].pad_token_id
        stops = {frozenset(self.stop_token_ids(a)) for a in asked}
        if len(stops) == 1 and next(iter(stops)):  # stop at the end of a turn (not only cut there afterwards)
            settings["eos_token_id"] = sorted(next(iter(stops)))
        config = GenerationConfig(**settings)
        if seed is not None:
            torch.manual_seed(seed)
        outputs = self.generate(rows, config)
        return [[self.tokenizers[a].decode(ids, skip_special_tokens=True) for ids in completions]
                for a, completions in enumerate(outputs.completion_ids)]

    def _check_prompt_lengths(self, rows: list[list[list[int]]]) -> None:
        """Refuse a prompt (token ids) longer than its agent's context window (`max_position_embeddings`) before
        generating: a 100,000-character prompt would otherwise run attention over tens of thousands of positions for
        minutes."""
        for agent, prompts in enumerate(rows):
            limit = context_window(self.policy(agent).config) if prompts else None
            if limit is None:
                continue
            for i, ids in enumerate(prompts):
                if len(ids) > limit:
                    raise ValueError(
                        f"prompt {i + 1} is {len(ids)} tokens for agent {agent}, longer than its model's context "
                        f"window (max_position_embeddings={limit}): shorten it."
                    )

    def chat(self, agent: int, prompts: Prompt | Sequence[Prompt], max_new_tokens: int = 128,
             do_sample: bool = False, temperature: float = 1.0, top_p: float = 1.0, system_prompt: str | None = None,
             apply_chat_template: bool = True, seed: int | None = None) -> list[str]:
        """Agent `agent`'s answer to each prompt, as text.

        Args:
            agent: The agent (0-based; with per-turn policies, the member `(turn - 1) * agents + agent`).
            prompts: A string, a conversation (a list of `{"role", "content"}` messages), or a list of those.
            max_new_tokens: The most tokens of each answer.
            do_sample: Sample (with `temperature` and `top_p`) instead of greedy decoding.
            temperature: The sampling temperature (with `do_sample`).
            top_p: Nucleus sampling's probability mass (with `do_sample`).
            system_prompt: A system message put before each plain-text prompt.
            apply_chat_template: Wrap plain-text prompts as a user message and render them with the agent's chat
                template (as the trainers do for chat datasets); False feeds the text to the model as it is.
            seed: Seed torch's generator first (reproducible samples).

        Returns:
            One answer per prompt, special tokens (the end-of-turn token) removed.
        """
        self._check_agent(agent)
        rows: list[list[Prompt]] = [[] for _ in range(self.num_agents)]
        rows[agent] = _as_list(prompts)
        return self._chat_rows(rows, max_new_tokens, do_sample, temperature, top_p, system_prompt,
                               apply_chat_template, seed)[agent]

    def chat_team(self, prompts: Prompt | Sequence[Prompt], max_new_tokens: int = 128, do_sample: bool = False,
                  temperature: float = 1.0, top_p: float = 1.0, system_prompt: str | None = None,
                  apply_chat_template: bool = True, seed: int | None = None) -> list[list[str]]:
        """Every agent's answer to each prompt (`answers[agent][i]`), in one batched `generate` call.

        The arguments are those of [`chat`]; every agent gets the same prompts.
        """
        shared = _as_list(prompts)
        return self._chat_rows([list(shared) for _ in range(self.num_agents)], max_new_tokens, do_sample,
                               temperature, top_p, system_prompt, apply_chat_template, seed)

    def merged_agent(self, agent: int) -> PreTrainedModel:
        """A standalone copy of agent `agent`'s policy: its LoRA adapter merged into its base model's weights (a
        plain copy of its model when it has no adapter). The team is left unchanged.

        Raises:
            ValueError: If the base model is quantized (4-bit or 8-bit weights cannot take a merged adapter).
        """
        self._check_agent(agent)
        model = self.policy(agent)
        adapter = self.agent_adapter[agent]
        if adapter is None:
            return copy.deepcopy(model)
        peft_model = cast("PeftModel", model)  # an agent with an adapter runs a PeftModel (`policy`'s doc)
        base = peft_model.get_base_model()
        if getattr(base, "is_loaded_in_4bit", False) or getattr(base, "is_loaded_in_8bit", False):
            raise ValueError(
                "The agent's base model is quantized (load_in_4bit/load_in_8bit): its adapter cannot be merged into "
                "those weights. Load the team again without quantization, e.g. "
                "`AgentTeam.from_pretrained(path, model_init_kwargs={'dtype': torch.bfloat16})`, then merge."
            )
        own = copy.deepcopy(peft_model)
        own.set_adapter(adapter)
        merged = own.merge_and_unload(adapter_names=[adapter])
        merged.requires_grad_(False)
        return merged.eval()

    def save_merged(self, agent: int, output_dir: str | os.PathLike) -> str:
        """Save [`merged_agent`]`(agent)` and the agent's tokenizer to `output_dir`: a folder that
        `AutoModelForCausalLM.from_pretrained` and vLLM load as a plain model.

        Returns:
            The folder's path.
        """
        output_dir = os.fspath(output_dir)
        self.merged_agent(agent).save_pretrained(output_dir)
        self.tokenizers[agent].save_pretrained(output_dir)
        return output_dir
