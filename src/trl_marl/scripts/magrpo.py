"""`trl-marl magrpo`: MAGRPO on a built-in task (cooperative writing, cooperative coding, target sum).

Run with a YAML file holding script, `MAGRPOConfig` and `ModelConfig` fields (see `examples/configs/`):

```bash
trl-marl magrpo --config examples/configs/magrpo_writing.yaml
accelerate launch -m trl_marl.scripts.magrpo --config examples/configs/magrpo_coding.yaml
```

`model_name_or_path: toy` runs offline on a tiny model from `trl_marl.toy` with synthetic rows of the task's
schema (a smoke run: the toy model cannot write prose or code); any Hub model id trains for real.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

from ..toy.rows import TOY_CODING_PROMPTS, TOY_WRITING_PROMPTS, toy_coding_rows, toy_writing_rows

TASKS = ("writing", "coding", "target_sum")


@dataclass
class MAGRPOScriptArguments:
    """Script arguments of `trl-marl magrpo` and the MAGRPO examples."""

    task: str = field(default="writing", metadata={"help": f"The task: one of {TASKS}."})
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Dataset to load (default: trl-lib/tldr for writing, openai/openai_humaneval or mbpp for "
                  "coding). Ignored for the toy model, which uses synthetic rows."},
    )
    dataset_split: str = field(default="train", metadata={"help": "Dataset split to train on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many rows."})
    num_toy_rows: int = field(default=64, metadata={"help": "Synthetic rows for the offline toy model."})
    centralized: bool = field(
        default=False,
        metadata={"help": "Train the centralised single-policy baseline instead of the team: one model writes every "
                  "agent's part in tagged sections (`CentralizedEnv`), scored by the same team reward, with "
                  "`num_agents=1` and `max_completion_length` times the team's size (docs/centralized.md)."},
    )


def is_offline_toy(model_name_or_path: str) -> bool:
    from ..toy import is_toy_name

    return is_toy_name(model_name_or_path)


# The toy models have 128 positions and answer in a few tokens: an offline run with a config written for a real model
# (256-384 new tokens) would warn about the context and take about a minute a step for nothing.
TOY_MAX_NEW_TOKENS = 16


def fit_to_toy(training_args: Any, field_name: str, limit: int = TOY_MAX_NEW_TOKENS) -> None:
    """Lower `training_args.<field_name>` (a completion length) to `limit` for an offline toy run, and say so."""
    value = getattr(training_args, field_name)
    if value is not None and value > limit:
        print(f"[trl-marl] offline toy model: {field_name} {value} -> {limit} (the toy has 128 positions and short "
              "answers; the config's value is meant for a real model)", flush=True)
        setattr(training_args, field_name, limit)


def build_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
               offline: bool) -> tuple[Any, Callable[..., Any], Dataset]:
    """The environment, team reward and training rows of a built-in task."""
    if script_args.task == "writing":
        from ..data import load_tldr
        from ..envs.writing import CooperativeWritingEnv
        from ..rewards.writing import WritingTeamReward

        dataset = (toy_writing_rows(script_args.num_toy_rows) if offline
                   else load_tldr(split=script_args.dataset_split, max_rows=script_args.max_train_samples))
        env = CooperativeWritingEnv(num_turns=num_turns, **(TOY_WRITING_PROMPTS if offline else {}))
        return env, WritingTeamReward(), dataset
    if script_args.task == "coding":
        from ..data import load_humaneval, load_mbpp
        from ..envs.coding import CooperativeCodingEnv
        from ..rewards.coding import CodingTeamReward

        if offline:
            dataset = toy_coding_rows(script_args.num_toy_rows)
        elif script_args.dataset_name and "mbpp" in script_args.dataset_name:
            dataset = load_mbpp()
        else:
            dataset = load_humaneval()
        if script_args.max_train_samples is not None:
            dataset = dataset.select(range(min(len(dataset), script_args.max_train_samples)))
        env = CooperativeCodingEnv(num_turns=num_turns, **(TOY_CODING_PROMPTS if offline else {}))
        return env, CodingTeamReward(env=env), dataset
    if script_args.task == "target_sum":
        from ..envs import TargetSumEnv
        from ..rewards.arithmetic import TargetSumReward

        return (TargetSumEnv(num_agents, num_turns), TargetSumReward(),
                Dataset.from_dict({"target": [10] * max(script_args.num_toy_rows, 8)}))
    raise ValueError(f"Unknown task {script_args.task!r}; choose one of {TASKS}.")


def centralize(env: Any, reward_funcs: Sequence[Any], training_args: Any) -> tuple[Any, list[Any]]:
    """The centralised baseline of a team task: one policy plays every agent of `env`, on the same team reward.

    Returns the single-policy environment and the reward functions wrapped for it; `training_args` gets
    `num_agents=1` and the team's total completion budget (`max_completion_length` times the number of agents), so
    that "team vs one model doing everything" compares the same number of generated tokens per step.
    """
    from ..envs.centralized import CentralizedEnv
    from ..rewards.centralized import CentralizedReward

    single = CentralizedEnv(env)
    print(f"[trl-marl] centralised baseline: one policy writes the parts of all {env.num_agents} agents "
          f"(max_completion_length {training_args.max_completion_length} -> "
          f"{training_args.max_completion_length * env.num_agents})", flush=True)
    training_args.num_agents = 1
    training_args.max_completion_length *= env.num_agents
    return single, [CentralizedReward(single, f) for f in reward_funcs]


def model_init_kwargs(model_args: Any) -> dict[str, Any]:
    """`from_pretrained` keyword arguments from a `trl.ModelConfig` (dtype, attention, 4/8-bit quantization)."""
    from trl import get_quantization_config

    kwargs: dict[str, Any] = {}
    if model_args.dtype not in (None, "auto"):
        import torch

        kwargs["dtype"] = getattr(torch, model_args.dtype)
    if model_args.attn_implementation is not None:
        kwargs["attn_implementation"] = model_args.attn_implementation
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        require_bitsandbytes()
        kwargs["quantization_config"] = quantization
    return kwargs


def require_bitsandbytes() -> None:
    """Refuse `--load_in_4bit`/`--load_in_8bit` without bitsandbytes, naming the extra that installs it."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ImportError(
            "`load_in_4bit`/`load_in_8bit` (QLoRA) need the `bitsandbytes` package: install trl-marl's `qlora` "
            'extra, `pip install "trl-marl[qlora]"` (from a clone: `pip install -e ".[qlora]"`), or set '
            "`--load_in_4bit false`."
        )


def main(script_args: MAGRPOScriptArguments, training_args: Any, model_args: Any) -> Any:
    """Train a team with MAGRPO on the task of `script_args`; returns the trainer."""
    from trl import get_peft_config

    from ..toy import resolve_toy_name
    from ..trainers import MAGRPOTrainer
    from ..utils.inputs import check_model_path
    from ..utils.threads import show_thread_choice

    show_thread_choice()  # the torch threads chosen for a CPU run, in one line
    name = model_args.model_name_or_path or "toy"
    check_model_path(name, "`model_name_or_path`")  # before any dataset is downloaded
    offline = is_offline_toy(name)
    model = resolve_toy_name(name) if offline else name
    if offline:
        fit_to_toy(training_args, "max_completion_length")
    env, team_reward, dataset = build_task(script_args, training_args.num_agents, training_args.num_turns, offline)
    if training_args.model_init_kwargs is None:
        training_args.model_init_kwargs = model_init_kwargs(model_args)
    reward_funcs = [team_reward]
    if hasattr(team_reward, "reward_funcs"):  # log every term of a composite team reward
        reward_funcs = team_reward.reward_funcs()
        training_args.reward_weights = training_args.reward_weights or team_reward.reward_weights()
    if script_args.centralized:
        env, reward_funcs = centralize(env, reward_funcs, training_args)
    trainer = MAGRPOTrainer(model=model, reward_funcs=reward_funcs, env=env, args=training_args,
                            train_dataset=dataset, peft_config=get_peft_config(model_args))
    trainer.train()
    trainer.save_model(training_args.output_dir)
    return trainer


def build_parser(prog: str | None = None) -> Any:
    """The `TrlParser` of (script, MAGRPOConfig, ModelConfig) arguments, with the offline model names in the help and
    the closest known names for an unknown one (`scripts.arguments.SuggestingParser`)."""
    from trl import ModelConfig

    from ..trainers import MAGRPOConfig
    from .arguments import SuggestingParser
    from .help import MODEL_HELP

    parser = SuggestingParser((MAGRPOScriptArguments, MAGRPOConfig, ModelConfig), prog=prog)
    describe_model_option(parser, MODEL_HELP)
    return parser


def describe_model_option(parser: Any, text: str) -> None:
    """Replace the help of `--model_name_or_path` (TRL's `ModelConfig` does not know the offline names)."""
    for action in parser._actions:
        if action.dest == "model_name_or_path":
            action.help = text


def parse(argv: Sequence[str] | None = None, prog: str | None = None) -> tuple[Any, Any, Any]:
    """Parse `--config FILE` and command-line overrides into (script, MAGRPOConfig, ModelConfig) arguments."""
    return build_parser(prog).parse_args_and_config(args=list(argv) if argv is not None else None)


if __name__ == "__main__":
    main(*parse(prog="python -m trl_marl.scripts.magrpo"))
