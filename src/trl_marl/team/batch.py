"""`AgentBatch`: one agent's tokenized samples, as the log-probability forwards (`team.forward`) and the losses read
them."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AgentBatch", "PrefillGroups", "group_identical_rows"]


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


@dataclass
class PrefillGroups:
    """The distinct rows of a generation batch.

    Attributes:
        first_rows: `(U,)` the index of the first row of each distinct prompt (the rows whose prefill runs).
        row_to_group: `(B,)` for every row, the index (into `first_rows`) of its distinct prompt.
    """

    first_rows: torch.Tensor
    row_to_group: torch.Tensor

    @property
    def num_groups(self) -> int:
        return self.first_rows.numel()


def group_identical_rows(input_ids: torch.Tensor, tags: Sequence[Hashable] | None = None) -> PrefillGroups:
    """Group the rows of a padded batch that are identical: same token ids (padding included) and same tag.

    Args:
        input_ids: `(B, L)` token ids (left-padded prompts).
        tags: One hashable per row that must also match (e.g. the LoRA adapter of each row), or None.

    Example:

    ```python
    groups = group_identical_rows(torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9], [0, 5, 6]]))
    groups.first_rows.tolist(), groups.row_to_group.tolist()  # ([0, 2], [0, 0, 1, 0])
    group_identical_rows(torch.tensor([[5, 6], [5, 6]]), tags=["agent_0", "agent_1"]).num_groups  # 2
    ```
    """
    if tags is not None and len(tags) != input_ids.size(0):
        raise ValueError(f"Got {len(tags)} tags for {input_ids.size(0)} rows.")
    index: dict[tuple[Any, tuple[int, ...]], int] = {}
    first_rows: list[int] = []
    row_to_group: list[int] = []
    for row, ids in enumerate(input_ids.tolist()):
        key = (tags[row] if tags is not None else None, tuple(ids))
        group = index.setdefault(key, len(index))
        if group == len(first_rows):
            first_rows.append(row)
        row_to_group.append(group)
    return PrefillGroups(torch.tensor(first_rows, dtype=torch.long), torch.tensor(row_to_group, dtype=torch.long))
