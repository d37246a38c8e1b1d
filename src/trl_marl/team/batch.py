"""`AgentBatch`: one agent's tokenized samples, as the log-probability forwards (`team.forward`) and the losses read
them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AgentBatch"]


@dataclass
class AgentBatch:
    """Tokenized samples of one agent: left-padded prompts followed by right-padded completions.

    `completion_mask` marks the completion tokens the model reads (the attention mask's second part). For an agent
    with tools, `tool_mask` marks which of them the model generated (1) and which the chat template wrote: tool
    results and their formatting (0). The loss, its token counts and its statistics take `loss_mask`, the product of
    the two, as TRL's `GRPOTrainer` multiplies its `completion_mask` by its `tool_mask`.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    tool_mask: torch.Tensor | None = None

    @property
    def loss_mask(self) -> torch.Tensor:
        """The completion tokens the loss is taken over: `completion_mask`, times `tool_mask` when there is one."""
        return self.completion_mask if self.tool_mask is None else self.completion_mask * self.tool_mask

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def to(self, device: torch.device | str) -> AgentBatch:
        return AgentBatch(self.prompt_ids.to(device), self.prompt_mask.to(device), self.completion_ids.to(device),
                          self.completion_mask.to(device),
                          tool_mask=None if self.tool_mask is None else self.tool_mask.to(device))

    def __len__(self) -> int:
        return self.prompt_ids.size(0)
