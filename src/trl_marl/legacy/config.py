"""`PPOConfig` of the classic PPO API (field names and defaults of TRL 0.11's `PPOConfig`)."""

from __future__ import annotations

import math
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.ppo import CLASSIC_KL_PENALTIES


def _script_name() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "ppo"
    return name[:-3] if name.endswith(".py") else name


@dataclass
class PPOConfig:
    """Settings of the classic `PPOTrainer` loop (`generate` -> score -> `step`).

    Field names and defaults are those of TRL 0.11's `PPOConfig`, so existing scripts construct it unchanged. The
    derived fields `backward_batch_size`, `global_backward_batch_size`, `global_batch_size`, `world_size` and
    `total_ppo_epochs` are filled in `__post_init__`.

    Example:
        ```python
        from trl_marl.legacy import PPOConfig

        config = PPOConfig(model_name="gpt2", learning_rate=1.41e-5, batch_size=16, mini_batch_size=4)
        config.backward_batch_size  # 4 (= mini_batch_size * gradient_accumulation_steps)
        ```
    """

    exp_name: str = field(default_factory=_script_name, metadata={"help": "Name of this experiment (the script)."})
    seed: int = field(default=0, metadata={"help": "Seed of python, numpy and torch, set when the trainer is built."})
    log_with: str | None = field(
        default=None, metadata={"help": "Tracker for `log_stats`: 'wandb', 'tensorboard' or None (no tracker)."}
    )
    task_name: str | None = field(default=None, metadata={"help": "Name of the task, for the trackers."})
    model_name: str = field(default="gpt2", metadata={"help": "Name of the model (informational)."})
    query_dataset: str = field(default="stanfordnlp/imdb", metadata={"help": "Query dataset name (informational)."})
    reward_model: str = field(
        default="sentiment-analysis:lvwerra/distilbert-imdb", metadata={"help": "Reward model (informational)."}
    )
    remove_unused_columns: bool = field(
        default=True,
        metadata={"help": "Drop the columns of a `datasets.Dataset` that the model's forward, 'label', 'query' and "
                          "'response' do not use before building `trainer.dataloader`."},
    )
    tracker_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword arguments of the tracker."}
    )
    accelerator_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword arguments of `accelerate.Accelerator`."}
    )
    project_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Keyword arguments of `accelerate.utils.ProjectConfiguration`."}
    )
    tracker_project_name: str = field(default="trl", metadata={"help": "Project name of the tracker."})
    push_to_hub_if_best_kwargs: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "Not supported here (needs the Hub); must stay empty."}
    )
    steps: int = field(default=20000, metadata={"help": "Number of training samples (sets `total_ppo_epochs`)."})
    learning_rate: float = field(default=1.41e-5, metadata={"help": "Learning rate of the default Adam optimizer."})
    adap_kl_ctrl: bool = field(
        default=True, metadata={"help": "Adapt the KL coefficient toward `target` (else it stays `init_kl_coef`)."}
    )
    init_kl_coef: float = field(default=0.2, metadata={"help": "Initial KL penalty coefficient beta."})
    kl_penalty: str = field(
        default="kl",
        metadata={"help": "Per-token KL penalty: 'kl' (logp - ref), 'abs' (|logp - ref|), 'mse' "
                          "((logp - ref)^2 / 2) or 'full' (exact KL of the whole distributions)."},
    )
    target: float = field(default=6.0, metadata={"help": "Target KL of the adaptive controller."})
    horizon: float = field(default=10000.0, metadata={"help": "Horizon of the adaptive controller."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor of GAE."})
    lam: float = field(default=0.95, metadata={"help": "Lambda of GAE."})
    cliprange: float = field(default=0.2, metadata={"help": "Clip range of the policy ratio."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range of the value prediction."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    batch_size: int = field(default=128, metadata={"help": "Samples per `step()` call."})
    forward_batch_size: int | None = field(
        default=None, metadata={"help": "Deprecated alias of `mini_batch_size` (overrides it when set)."}
    )
    mini_batch_size: int = field(
        default=128, metadata={"help": "Samples per optimisation mini-batch (and per forward pass)."}
    )
    gradient_accumulation_steps: int = field(
        default=1, metadata={"help": "Mini-batches whose gradients are accumulated before an optimizer step."}
    )
    world_size: int | None = field(default=None, metadata={"help": "Number of processes (set by the trainer)."})
    ppo_epochs: int = field(default=4, metadata={"help": "Optimisation epochs over each batch."})
    max_grad_norm: float | None = field(default=None, metadata={"help": "Gradient clipping norm (None: none)."})
    optimize_cuda_cache: bool | None = field(default=None, metadata={"help": "Deprecated: `optimize_device_cache`."})
    optimize_device_cache: bool = field(
        default=False, metadata={"help": "Empty the accelerator cache after forward passes."}
    )
    early_stopping: bool = field(
        default=False, metadata={"help": "Stop the epochs of a step when the policy KL passes 1.5 * `target_kl`."}
    )
    target_kl: float = field(default=1.0, metadata={"help": "KL threshold of `early_stopping`."})
    compare_steps: int = field(default=1, metadata={"help": "Steps between best-model comparisons (unused here)."})
    ratio_threshold: float = field(
        default=10.0, metadata={"help": "Skip a mini-batch's update (loss times 0) when its mean ratio exceeds this."}
    )
    use_score_scaling: bool = field(default=False, metadata={"help": "Divide scores by their running std."})
    use_score_norm: bool = field(
        default=False, metadata={"help": "With `use_score_scaling`, also subtract their running mean."}
    )
    score_clip: float | None = field(default=None, metadata={"help": "Clip scores to [-score_clip, score_clip]."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Scale the per-token rewards to unit variance."})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Enable gradient checkpointing."})
    is_encoder_decoder: bool | None = field(default=None, metadata={"help": "Set by the trainer."})
    is_peft_model: bool | None = field(default=None, metadata={"help": "Set by the trainer."})
    backward_batch_size: int | None = field(
        default=None, metadata={"help": "Derived: `mini_batch_size * gradient_accumulation_steps`."}
    )
    global_backward_batch_size: int | None = field(default=None, metadata={"help": "Derived: over all processes."})
    global_batch_size: int | None = field(default=None, metadata={"help": "Derived: `batch_size` over all processes."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for dataset preprocessing."})

    def __post_init__(self) -> None:
        if self.optimize_cuda_cache is not None:
            if self.optimize_device_cache:
                raise ValueError("Set only one of `optimize_device_cache` and `optimize_cuda_cache`.")
            self.optimize_device_cache = bool(self.optimize_cuda_cache)
        if self.forward_batch_size is not None:
            warnings.warn("`forward_batch_size` is deprecated: it overrides `mini_batch_size`.", stacklevel=2)
            self.mini_batch_size = self.forward_batch_size
        if self.kl_penalty not in CLASSIC_KL_PENALTIES:
            raise ValueError(f"`kl_penalty` must be one of {CLASSIC_KL_PENALTIES}, got {self.kl_penalty!r}.")
        self.backward_batch_size = self.mini_batch_size * self.gradient_accumulation_steps
        if self.batch_size % self.backward_batch_size != 0:
            raise ValueError(
                f"`batch_size` ({self.batch_size}) must be a multiple of `mini_batch_size * "
                f"gradient_accumulation_steps` ({self.backward_batch_size})."
            )
        self.total_ppo_epochs = int(math.ceil(self.steps / self.batch_size))

    def to_dict(self) -> dict[str, Any]:
        """The fields as a flat dict (nested dicts joined with '/'), for trackers."""
        flat: dict[str, Any] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}/{k}" if prefix else str(k), v)
            else:
                flat[prefix] = value

        walk("", {**asdict(self), "total_ppo_epochs": self.total_ppo_epochs})
        return flat
