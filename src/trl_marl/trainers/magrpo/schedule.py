"""How MAGRPO's optimizer steps get their rollouts: one generation per step, reused for `num_iterations` steps.

TRL's `GRPOTrainer` generates a batch of `per_device_train_batch_size * steps_per_generation` completions and, with
`num_iterations = mu > 1` (the mu of the GRPO paper), takes mu passes of clipped updates over it, the importance
ratio's denominator being the log-probs the policy gave the completions when they were sampled. Its sampler hands out
the prompts of one generation mu times over, so that an epoch still plays every prompt once. The same here:

- [`BlockRepeatSampler`] yields each block of indices (the rows of one generation) `repeat` times;
- [`GenerationSchedule`] turns the data loader's micro-batches of rows into micro-steps of generations;
- [`_AccumulatedRows`] holds the rows of one generation and, once rolled out, its micro-batches; the trainer keeps it
  for the mu optimizer steps that reuse it;
- [`MicroStep`] is what `training_step` receives for one micro-step.

The sampling settings of a step are in [`~trl_marl.trainers.magrpo.sampling_config`], the reference policy's periodic
sync in [`~trl_marl.trainers.magrpo.reference`], and the all-gather of the rollout's batch statistics
(`gathered_rows`) in [`~trl_marl.trainers.distributed`].
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

__all__ = ["BlockRepeatSampler", "GenerationSchedule", "MicroStep"]



def read_row_batches(epoch_iterator: Iterator[Any], count: int) -> list[Any]:
    """The next `count` row batches of `epoch_iterator` (fewer at the end of the epoch)."""
    row_batches: list[Any] = []
    for _ in range(count):
        try:
            row_batches.append(next(epoch_iterator))
        except StopIteration:
            break
    return row_batches

class BlockRepeatSampler(Sampler[int]):
    """The indices of `sampler`, in blocks of `block_size`, each block yielded `repeat` times in a row.

    With `block_size` the rows of one generation and `repeat = num_iterations`, each pass over a generation reads
    the same rows (TRL's `RepeatSampler(repeat_count=num_iterations * steps_per_generation)` does the same over its
    generation batches). As TRL's, a last block shorter than `block_size` is dropped, so that every generation is
    whole and its repeats line up with the passes.

    Example:

    ```python
    >>> list(BlockRepeatSampler(range(5), block_size=2, repeat=2))
    [0, 1, 0, 1, 2, 3, 2, 3]
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

    def __len__(self) -> int:
        return len(self.sampler) // self.block_size * self.block_size * self.repeat


class _AccumulatedRows:
    """The dataset rows of every micro-step of one generation, and (once rolled out) their micro-batches."""

    def __init__(self, row_batches: list[list[dict[str, Any]]]) -> None:
        self.row_batches = row_batches
        self.batches: list[dict[str, Any] | None] | None = None


class MicroStep:
    """Micro-step `index` of an [`_AccumulatedRows`]: what `training_step` receives from `get_batch_samples`."""

    def __init__(self, group: _AccumulatedRows, index: int) -> None:
        self.group = group
        self.index = index
        self.last = False  # the last micro-step of its optimizer step

    def __len__(self) -> int:
        return len(self.group.row_batches[self.index])

    def __contains__(self, key: object) -> bool:
        return False  # no tensors by name (`Trainer.floating_point_ops` asks for "input_ids"): rows become them later


class GenerationSchedule:
    """Which generation, and which micro-batch of it, each micro-step trains on (TRL GRPO's generation batches).

    A generation is `steps_per_generation` micro-batches of rows, played in one rollout at its first micro-step, so
    that the token count `loss_type="dapo"` divides by is known before the first backward; with `num_iterations =
    mu` its micro-batches are taken mu times over (the sampler repeated its rows mu times: the repeats are read and
    dropped). A generation may span several optimizer steps (`steps_per_generation > gradient_accumulation_steps`:
    its rows are read ahead) or one optimizer step may hold several generations. TRL shuffles the completions of a
    generation before splitting them into micro-batches; here a micro-batch keeps whole episodes (every agent's
    samples of its rows), which only changes which samples share a micro-batch.

    Example:

    ```python
    >>> schedule = GenerationSchedule(steps_per_generation=2, num_iterations=2)
    >>> loader = iter([["a"], ["b"], ["a"], ["b"], ["c"], ["d"], ["c"], ["d"]])  # BlockRepeatSampler's order
    >>> [(s.group.row_batches, s.index) for s in schedule.micro_steps(loader, 3)]
    [([['a'], ['b']], 0), ([['a'], ['b']], 1), ([['a'], ['b']], 0)]
    ```
    """

    def __init__(self, steps_per_generation: int, num_iterations: int) -> None:
        self.steps_per_generation = steps_per_generation
        self.num_iterations = num_iterations
        self.generation: _AccumulatedRows | None = None
        self.cursor = 0  # the next micro-batch of the generation
        self.passes_left = 0  # passes over the generation still to come after this one

    def micro_steps(self, epoch_iterator: Iterator[Any], num_batches: int) -> list[MicroStep]:
        """The next `num_batches` micro-steps (fewer at the end of the data); the last one is marked `last`."""
        steps: list[MicroStep] = []
        for _ in range(num_batches):
            group = self.generation
            if group is None or (self.cursor == len(group.row_batches) and self.passes_left == 0):
                row_batches = read_row_batches(epoch_iterator, self.steps_per_generation)  # a whole generation
                if not row_batches:
                    break
                group = self.generation = _AccumulatedRows(row_batches)
                self.cursor, self.passes_left = 0, self.num_iterations - 1
            else:
                if self.cursor == len(group.row_batches):  # another pass over the same generation
                    self.cursor, self.passes_left = 0, self.passes_left - 1
                if self.passes_left < self.num_iterations - 1:
                    try:
                        next(epoch_iterator)  # the sampler's repeat of this micro-batch's rows
                    except StopIteration:
                        break
            steps.append(MicroStep(group, self.cursor))
            self.cursor += 1
        if steps:
            steps[-1].last = True
        return steps
