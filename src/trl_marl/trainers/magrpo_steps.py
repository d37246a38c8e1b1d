"""How MAGRPO's optimizer steps get their rollouts: one generation per step, reused for `num_iterations` steps.

TRL's `GRPOTrainer` generates a batch of `per_device_train_batch_size * steps_per_generation` completions and, with
`num_iterations = mu > 1` (the mu of the GRPO paper), takes mu passes of clipped updates over it, the importance
ratio's denominator being the log-probs the policy gave the completions when they were sampled. Its sampler hands out
the prompts of one generation mu times over, so that an epoch still plays every prompt once. The same here:

- [`BlockRepeatSampler`] yields each block of indices (the rows of one generation) `repeat` times;
- [`_AccumulatedRows`] holds the rows of one generation and, once rolled out, its micro-batches; the trainer keeps it
  for the mu optimizer steps that reuse it;
- [`_MicroStep`] is what `training_step` receives for one micro-step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

__all__ = ["BlockRepeatSampler"]


class BlockRepeatSampler(Sampler[int]):
    """The indices of `sampler`, in blocks of `block_size`, each block yielded `repeat` times in a row.

    With `block_size` the rows of one generation and `repeat = num_iterations`, each optimizer step of a generation's
    mu passes reads the same rows (TRL's `RepeatSampler(repeat_count=num_iterations * steps_per_generation)` does the
    same over its generation batches). The last block may be shorter.

    Example:

    ```python
    >>> list(BlockRepeatSampler(range(5), block_size=2, repeat=2))
    [0, 1, 0, 1, 2, 3, 2, 3, 4, 4]
    ```
    """

    def __init__(self, sampler: Any, block_size: int, repeat: int) -> None:
        if block_size < 1 or repeat < 1:
            raise ValueError(f"block_size and repeat must be >= 1, got {block_size} and {repeat}.")
        self.sampler = sampler
        self.block_size = block_size
        self.repeat = repeat

    def __iter__(self) -> Iterator[int]:
        block: list[int] = []
        for index in self.sampler:
            block.append(int(index))
            if len(block) == self.block_size:
                for _ in range(self.repeat):
                    yield from block
                block = []
        for _ in range(self.repeat if block else 0):
            yield from block

    def __len__(self) -> int:
        return len(self.sampler) * self.repeat


class _AccumulatedRows:
    """The dataset rows of every micro-step of one generation, and (once rolled out) their micro-batches."""

    def __init__(self, row_batches: list[list[dict[str, Any]]]) -> None:
        self.row_batches = row_batches
        self.batches: list[dict[str, Any] | None] | None = None


class _MicroStep:
    """Micro-step `index` of an [`_AccumulatedRows`]: what `training_step` receives from `get_batch_samples`."""

    def __init__(self, group: _AccumulatedRows, index: int) -> None:
        self.group = group
        self.index = index

    def __len__(self) -> int:
        return len(self.group.row_batches[self.index])

    def __contains__(self, key: object) -> bool:
        return False  # no tensors by name (`Trainer.floating_point_ops` asks for "input_ids"): rows become them later
