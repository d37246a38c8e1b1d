"""The rows of a dataset as trl-marl's trainers read them: [`RowDataset`] (its length and its rows by index) and
[`collate_rows`] (a batch is the list of raw rows, which the environments and the reward functions read)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["RowDataset", "collate_rows"]


class RowDataset(Protocol):
    """A dataset as the trainers read it: its length and its rows by index (a `datasets.Dataset`, a list of dicts)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> dict[str, Any]: ...


def collate_rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The data collator of every trl-marl trainer: a batch is the list of raw dataset rows (envs read them)."""
    return batch
