"""How MAGRPO's optimizer steps get their rollouts: one generation per step, reused for `num_iterations` steps.

TRL's `GRPOTrainer` generates a batch of `per_device_train_batch_size * steps_per_generation` completions and, with
`num_iterations = mu > 1` (the mu of the GRPO paper), takes mu passes of clipped updates over it, the importance
ratio's denominator being the log-probs the policy gave the completions when they were sampled. Its sampler hands out
the prompts of one generation mu times over, so that an epoch still plays every prompt once. The same here:

- [`BlockRepeatSampler`] yields each block of indices (the rows of one generation) `repeat` times;
- [`GenerationSchedule`] turns the data loader's micro-batches of rows into micro-steps of generations;
- [`_AccumulatedRows`] holds the rows of one generation and, once rolled out, its micro-batches; the trainer keeps it
  for the mu optimizer steps that reuse it;
- [`_MicroStep`] is what `training_step` receives for one micro-step.

Also here: the sampling settings of a step (`generation_config`, `continuous_batching_config`), the reference
policy's periodic sync (`ReferenceSync`, `sync_ref_model`), and the all-gather through which the rollout's batch
statistics see every process's returns (`gathered_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Sampler
from transformers import GenerationConfig, TrainerCallback

from ..distributed import full_tensor

__all__ = [
    "BlockRepeatSampler",
    "GenerationSchedule",
    "ReferenceSync",
    "continuous_batching_config",
    "gathered_rows",
    "generation_config",
]


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


class _MicroStep:
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

    def micro_steps(self, epoch_iterator: Iterator[Any], num_batches: int) -> list[_MicroStep]:
        """The next `num_batches` micro-steps (fewer at the end of the data); the last one is marked `last`."""
        steps: list[_MicroStep] = []
        for _ in range(num_batches):
            group = self.generation
            if group is None or (self.cursor == len(group.row_batches) and self.passes_left == 0):
                row_batches = []
                for _ in range(self.steps_per_generation):  # the rows of a whole generation, read ahead
                    try:
                        row_batches.append(next(epoch_iterator))
                    except StopIteration:
                        break
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
            steps.append(_MicroStep(group, self.cursor))
            self.cursor += 1
        if steps:
            steps[-1].last = True
        return steps


class ReferenceSync(TrainerCallback):
    """GRPO's `sync_ref_model` (TR-DPO, arXiv 2404.09656) for a team: every `steps` optimizer steps each frozen
    reference copy moves toward its policy, ``theta_ref <- alpha * theta + (1 - alpha) * theta_ref``.

    Args:
        team: The [`AgentTeam`]; its `ref_models[i]` (frozen copies) follow `models[i]`.
        steps: `ref_model_sync_steps`.
        alpha: `ref_model_mixup_alpha`.
    """

    @staticmethod
    def check(team: Any) -> None:
        """Refuse a team with no reference copy to move (its agents' references are base models under adapters)."""
        if any(adapter is not None for adapter in team.agent_adapter):
            raise ValueError(
                "`sync_ref_model=True` needs a reference copy to move, but agents with a LoRA adapter take the base "
                "model under the disabled adapter as their reference (as GRPOTrainer with PEFT, which refuses it "
                "too). Use `sync_ref_model=False`, or a team without adapters (`team_mode='models'`)."
            )

    def __init__(self, team: Any, steps: int, alpha: float) -> None:
        self.team = team
        self.steps = steps
        self.alpha = alpha

    @torch.no_grad()
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.steps != 0:
            return
        for model, ref in zip(self.team.models, self.team.ref_models):
            if ref is None:
                continue
            for ref_param, param in zip(ref.parameters(), model.parameters()):
                policy = full_tensor(param.detach())  # FSDP2: the shards of every process, gathered
                ref_param.mul_(1.0 - self.alpha).add_(policy.to(ref_param.device), alpha=self.alpha)


def gathered_rows(accelerator: Any, rows: torch.Tensor) -> torch.Tensor:
    """The rows of a float `(N, C)` tensor of every process, concatenated in process order (a collective).

    N may differ between processes: each pads its rows to the longest with NaN rows, and the rows whose first column
    is NaN are dropped after the gather, so the first column must hold no NaN (the rollout sends the turn there).
    This is the `gather` of the MAGRPO trainer's rollout (`trl_marl.rollout.JointRollout`), through which
    `advantage_mode="batch"` takes the std of every process's returns, as TRL's `GRPOTrainer` does.

    Example: with two processes holding rows `[[1, 0.5]]` and `[[1, 2.0], [2, 3.0]]`, both get
    `[[1, 0.5], [1, 2.0], [2, 3.0]]`.
    """
    if accelerator.num_processes == 1:
        return rows
    local = rows.to(accelerator.device)
    padded = accelerator.pad_across_processes(local, dim=0, pad_index=float("nan"))
    pooled = accelerator.gather(padded).to(rows.device)
    return pooled[~torch.isnan(pooled[:, 0])]


def generation_config(args: Any, team: Any) -> GenerationConfig:
    """The sampling settings of a `MAGRPOConfig` (GRPO's fields), for every agent of `team`."""
    tokenizer = team.tokenizers[0]
    eos = team.base_model_of(0).generation_config.eos_token_id
    settings = dict(
        max_new_tokens=args.max_completion_length, do_sample=True, temperature=args.temperature, top_p=args.top_p,
        top_k=args.top_k, min_p=args.min_p, repetition_penalty=args.repetition_penalty,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id if eos is None else eos,
        cache_implementation=args.cache_implementation,
    )
    # `generation_kwargs` wins over the defaults above, as in TRL (e.g. `{"eos_token_id": [eos, fence]}` to stop at
    # a closing code fence as well; passed twice to `GenerationConfig` it was a `TypeError`)
    return GenerationConfig(**{**settings, **(args.generation_kwargs or {})})


def continuous_batching_config(args: Any, team: Any) -> Any:
    """GRPO's `use_transformers_continuous_batching` for a team: the `ContinuousBatchingConfig` its models generate
    with (`transformers_continuous_batching_config`, with TRL's default of half the memory for the cache), or `None`.

    transformers' `generate_batch` runs one policy per model: it takes no per-row adapter names, so a team in
    `adapters` mode (its agents are LoRA adapters of one model, generated in one mixed-adapter batch) is refused.
    `models` mode (one model per agent, each with at most one adapter) and `shared` mode work.
    """
    if not args.use_transformers_continuous_batching:
        return None
    if team.mode == "adapters" and len(set(team.agent_adapter)) > 1:
        raise ValueError(
            "`use_transformers_continuous_batching=True` (or `use_transformers_paged`) cannot generate for a team in "
            "`adapters` mode: its agents are LoRA adapters of one model, sampled in one batch with one adapter per "
            "row, and transformers' continuous batching (`generate_batch`) takes no per-row adapter. Use "
            "`team_mode='models'` (one model per agent) or `'shared'`, or turn continuous batching off."
        )
    from transformers.generation import ContinuousBatchingConfig

    kwargs = dict(args.transformers_continuous_batching_config or {})
    kwargs.setdefault("max_memory_percent", 0.5)  # as TRL: leave room for the training step
    return ContinuousBatchingConfig(**kwargs)
