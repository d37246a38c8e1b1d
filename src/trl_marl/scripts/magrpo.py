"""`trl-marl magrpo`: MAGRPO on a built-in task (cooperative writing, cooperative coding, target sum, the tool relay).

Run with a YAML file holding script, `MAGRPOConfig` and `ModelConfig` fields (see `examples/configs/`):

```bash
trl-marl magrpo --config examples/configs/magrpo_writing.yaml
accelerate launch -m trl_marl.scripts.magrpo --config examples/configs/magrpo_coding.yaml
```

`model_name_or_path: toy` runs offline on a tiny model from `trl_marl.toy` with synthetic rows of the task's
schema (a smoke run: the toy model cannot write prose or code); any Hub model id trains for real. Offline on a real
model: `--model_name_or_path smollm2-135m-instruct` with local data (`--data_files rows.jsonl`, or for coding
`--dataset_name trl-marl/team_coding`); where the data comes from is `scripts.data_sources`.
`examples/magrpo_writing.py`, `examples/magrpo_coding.py` and `examples/magrpo_tools.py` are [`run_example`] with
their task; `--tools` gives agents tools (docs/tools.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from datasets import Dataset

from ..data.files import first_rows
from ..toy.rows import (
    TOY_CODING_PROMPTS,
    TOY_HALVES_PROMPTS,
    TOY_WRITING_PROMPTS,
    toy_coding_rows,
    toy_writing_rows,
)
from ..utils.quiet import say
from .arguments import OutputDirArguments, fresh_output_dir, resume_value
from .data_sources import (
    DataSource,
    UsageError,
    exit_on_unavailable,
    hub_dataset,
    local_rows,
    offline_route,
    resolve_source,
    shipped_suggestions,
)

TOOL_NAMES = ("calculator", "python", "none")
"""The tools an agent of a script can be given (`--tools`, one name per agent; `none`: no tools)."""

DEFAULT_DATASETS = {"writing": "trl-lib/tldr", "coding": "openai/openai_humaneval"}
"""The Hub dataset of each task when `--dataset_name` is not given."""

TaskBuilder = Callable[["MAGRPOScriptArguments", int, int, bool], tuple[Any, Any, Dataset]]
"""`build(script_args, num_agents, num_turns, offline) -> (env, team_reward, train_dataset)`: a task of
`trl-marl magrpo` (`offline`: a toy model, which trains on synthetic rows unless the data is local or shipped)."""


@dataclass(frozen=True)
class MAGRPOTask:
    """A task of `trl-marl magrpo`: how to build it, one line for `--help`, and its agents' default tools."""

    build: TaskBuilder
    summary: str
    default_tools: tuple[str, ...] | None = None


_TASKS: dict[str, MAGRPOTask] = {}


def register_magrpo_task(name: str, build: TaskBuilder, summary: str, default_tools: Sequence[str] | None = None,
                         replace: bool = False) -> None:
    """Make `name` a value of `--task` for `trl-marl magrpo` and its examples (`run_example`, `main`).

    Args:
        name: The task's name.
        build: Builds the task's env, team reward and training rows ([`TaskBuilder`]).
        summary: One line for the help.
        default_tools: One tool name per agent among [`TOOL_NAMES`], used when `--tools` is not given.
        replace: Replace a task registered under `name` (otherwise that is an error).

    Example:

    ```python
    from datasets import Dataset
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward
    from trl_marl.scripts.magrpo import register_magrpo_task, run_example

    def target_twelve(script_args, num_agents, num_turns, offline):
        return TargetSumEnv(num_agents, num_turns), TargetSumReward(), Dataset.from_dict({"target": [12] * 64})

    register_magrpo_task("target_twelve", target_twelve, "Two numbers that add up to 12.")
    run_example("target_twelve", None, "my_script.py")
    ```
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"A task's name must be a non-empty string, got {name!r}.")
    if name in _TASKS and not replace:
        raise ValueError(f"A task named {name!r} is registered already: choose another name, or pass "
                         "`replace=True` to replace it.")
    if default_tools is not None and any(tool not in TOOL_NAMES for tool in default_tools):
        raise ValueError(f"`default_tools` of task {name!r} takes names among {TOOL_NAMES}, got "
                         f"{list(default_tools)}.")
    _TASKS[name] = MAGRPOTask(build, summary, tuple(default_tools) if default_tools is not None else None)


def magrpo_task_names() -> tuple[str, ...]:
    """The registered tasks' names, the built-in ones first."""
    return tuple(_TASKS)


def magrpo_task(name: str) -> MAGRPOTask:
    """The task registered as `name`.

    Raises:
        UsageError: No task has that name; the message gives the closest names and every name.
    """
    if name not in _TASKS:
        from .arguments import closest

        near = closest(name, _TASKS)
        hint = f"did you mean {' or '.join(f'`{n}`' for n in near)}? " if near else ""
        raise UsageError(f"`--task` {name!r} is not a task: {hint}Choose one of {', '.join(_TASKS)}.")
    return _TASKS[name]

WRITING_COLUMNS = "columns `text` and `reference`, or TL;DR's `prompt` and `completion`"
CODING_COLUMNS = "HumanEval's columns `task_id`, `prompt`, `canonical_solution`, `test`, `entry_point`"
DATA_HELP = {
    "dataset_name": "The training data: a Hub dataset (default: trl-lib/tldr for writing, openai/openai_humaneval "
                    "for coding, which also takes google-research-datasets/mbpp), `trl-marl/team_coding` (coding "
                    "problems shipped with trl-marl: no Hub), `trl-marl/team_writing` (writing texts shipped with "
                    "trl-marl: standard-library docstrings), or a local .jsonl/.json/.csv/.parquet file (writing: "
                    f"{WRITING_COLUMNS}; coding: {CODING_COLUMNS}). The toy model trains on synthetic rows unless "
                    "the data is local or shipped.",
    "data_files": "Local .jsonl/.json/.csv/.parquet file(s) to train on (comma-separated), whatever `dataset_name` "
                  "says: the offline route with `--model_name_or_path smollm2-135m-instruct`.",
}


@dataclass
class MAGRPOScriptArguments(OutputDirArguments):
    """Script arguments of `trl-marl magrpo` and the MAGRPO examples (and `overwrite_output_dir`)."""

    task: str = field(default="writing", metadata={"help": "The task: writing, coding, target_sum, tool_relay or "
                                                            "writing_halves (or one registered with "
                                                            "`register_magrpo_task`)."})
    dataset_name: str | None = field(default=None, metadata={"help": DATA_HELP["dataset_name"]})
    data_files: str | None = field(default=None, metadata={"help": DATA_HELP["data_files"]})
    dataset_config: str | None = field(
        default=None,
        metadata={"help": "The dataset's config: `full` or `sanitized` for MBPP; the levels for trl-marl/team_coding "
                  "(`1`, `2` or `1,2`, the default)."},
    )
    dataset_split: str | None = field(
        default=None,
        metadata={"help": "Split to train on (default: train; test for HumanEval and MBPP; for "
                  "trl-marl/team_coding and trl-marl/team_writing: train, heldout or all). Not used with local files "
                  "(a file is one split)."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many rows."})
    num_toy_rows: int = field(default=64, metadata={"help": "Synthetic rows for the offline toy model."})
    tools: list[str] | None = field(
        default=None,
        metadata={"help": f"The tools of each agent, one name per agent among {TOOL_NAMES} (e.g. `--tools "
                  "calculator none`): `calculator` (arithmetic, never code), `python` (code run in trl-marl's "
                  "sandbox), `none`. Default: the task's (tool_relay: calculator for agent 0), else none. Tool calls "
                  "need a chat template that can write them (docs/tools.md)."},
    )
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
        say(f"[trl-marl] offline toy model: {field_name} {value} -> {limit} (the toy has 128 positions and short "
            "answers; the config's value is meant for a real model)")
        setattr(training_args, field_name, limit)


def say_toy_skips(source: DataSource | None) -> None:
    """Say, in one line, that the toy model does not load the Hub dataset `source` (its rows are synthetic)."""
    if source is not None and source.kind == "hub":
        near = shipped_suggestions(source.name)
        hint = f"; did you mean {' or '.join(near)} (shipped with trl-marl, loaded)?" if near else ""
        say(f"[trl-marl] offline toy model: trains on synthetic rows; the Hub dataset {source.name!r} "
            f"({source.option}) is not loaded (a local file, `--data_files`, is){hint}")


def _levels(config: str | None) -> tuple[int, ...]:
    if not config:
        return (1, 2)
    try:
        return tuple(int(part) for part in config.replace(" ", "").split(","))
    except ValueError:
        raise ValueError(f"`dataset_config` {config!r}: trl-marl/team_coding takes its levels, `1`, `2` or `1,2`."
                         ) from None


def writing_rows(script_args: MAGRPOScriptArguments, source: DataSource) -> Dataset:
    """The writing task's rows (`text`, `reference`) from a local file or a Hub dataset in TL;DR's schema."""
    from ..data import load_team_writing, load_tldr

    if source.kind == "local":
        with local_rows(source, WRITING_COLUMNS):
            return load_tldr(max_rows=script_args.max_train_samples, data_files=source.files)
    if source.kind == "shipped":
        if source.name != "trl-marl/team_writing":
            raise UsageError(f"{source.option} {source.name!r} is a coding dataset; the writing task reads "
                             f"{WRITING_COLUMNS} (shipped: trl-marl/team_writing).")
        return first_rows(load_team_writing(script_args.dataset_split or "train"), script_args.max_train_samples)
    with hub_dataset(source, offline_route(WRITING_COLUMNS, shipped="trl-marl/team_writing")):
        return load_tldr(split=script_args.dataset_split or "train", max_rows=script_args.max_train_samples,
                         dataset_name=source.name)


def coding_rows(script_args: MAGRPOScriptArguments, source: DataSource) -> Dataset:
    """The coding task's rows (HumanEval's schema) from a local file, the shipped problems or a Hub dataset."""
    from ..data import load_humaneval, load_mbpp, load_team_coding

    if source.kind == "local":
        with local_rows(source, CODING_COLUMNS):
            dataset = load_humaneval(data_files=source.files)
    elif source.kind == "shipped":
        if source.name != "trl-marl/team_coding":
            raise UsageError(f"{source.option} {source.name!r} is a writing dataset; the coding task reads "
                             f"{CODING_COLUMNS} (shipped: trl-marl/team_coding).")
        dataset = load_team_coding(script_args.dataset_split or "train", _levels(script_args.dataset_config))
    else:
        route = offline_route(CODING_COLUMNS, shipped="trl-marl/team_coding")
        with hub_dataset(source, route):
            if "mbpp" in source.name:
                dataset = load_mbpp(split=script_args.dataset_split or "test",
                                    config=script_args.dataset_config or "full", path=source.name)
            else:
                dataset = load_humaneval(split=script_args.dataset_split or "test", path=source.name)
    return first_rows(dataset, script_args.max_train_samples)


class _CompositeReward(Protocol):
    """A team reward made of terms (`WritingTeamReward`, `CodingTeamReward`)."""

    def reward_funcs(self) -> list[Any]: ...

    def reward_weights(self) -> list[float]: ...


def _is_composite(reward: object) -> TypeGuard[_CompositeReward]:
    """Whether a team reward is made of terms (it has `reward_funcs`), each logged with its weight."""
    return hasattr(reward, "reward_funcs")


def build_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
               offline: bool) -> tuple[Any, Callable[..., Any], Dataset]:
    """The environment, team reward and training rows of the task `script_args.task` (registered with
    [`register_magrpo_task`]).

    `offline` (a toy model) trains on synthetic rows, unless the data is local or shipped: then on those rows, with
    prompts cut to the toy's 128 positions.
    """
    return magrpo_task(script_args.task).build(script_args, num_agents, num_turns, offline)


def _target_sum_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
                     offline: bool) -> tuple[Any, Any, Dataset]:
    from ..envs import TargetSumEnv
    from ..rewards.arithmetic import TargetSumReward

    if script_args.dataset_name or script_args.data_files:
        raise UsageError("The target_sum task makes its own rows (a target number); `--dataset_name` and "
                         "`--data_files` do not apply to it: leave them out.")
    return (TargetSumEnv(num_agents, num_turns), TargetSumReward(),
            Dataset.from_dict({"target": [10] * max(script_args.num_toy_rows, 8)}))


def _tool_relay_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
                     offline: bool) -> tuple[Any, Any, Dataset]:
    from ..data.tool_relay import tool_relay_rows, tool_relay_split
    from ..envs.tool_relay import ToolRelayEnv
    from ..rewards.tool_relay import ToolRelayReward

    if script_args.dataset_name or script_args.data_files or (num_agents, num_turns) != (2, 2):
        raise UsageError("The tool_relay task makes its own rows (\"What is a * b?\", the training pairs of "
                         "`trl_marl.data.tool_relay`) with 2 agents and 2 turns: leave `--dataset_name` and "
                         "`--data_files` out and set `--num_agents 2 --num_turns 2`.")
    train, _ = tool_relay_split()
    rows = tool_relay_rows(train, script_args.max_train_samples or 512, seed=0)
    return ToolRelayEnv(), ToolRelayReward(), Dataset.from_list(rows)


def _task_rows(script_args: MAGRPOScriptArguments, offline: bool, default: str,
               load: Callable[[MAGRPOScriptArguments, DataSource], Dataset],
               toy_rows: Callable[[int], Dataset]) -> Dataset:
    """A data-backed task's training rows, `load`ed from the source; a toy model trains on synthetic rows unless the
    user gave local or shipped data (its 128 positions hold neither a Hub text nor a task's default data)."""
    given = bool(script_args.dataset_name or script_args.data_files)
    source = resolve_source(script_args.dataset_name, script_args.data_files, default)
    if source is None:  # every data-backed task names its default dataset
        raise UsageError("No training data: pass `--dataset_name` or `--data_files`.")
    if offline and (source.kind == "hub" or not given):
        say_toy_skips(source if given else None)
        return toy_rows(script_args.num_toy_rows)
    return load(script_args, source)


def _writing_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
                  offline: bool) -> tuple[Any, Any, Dataset]:
    from ..envs.writing import CooperativeWritingEnv
    from ..rewards.writing import WritingTeamReward

    dataset = _task_rows(script_args, offline, DEFAULT_DATASETS["writing"], writing_rows, toy_writing_rows)
    env = CooperativeWritingEnv(num_turns=num_turns, **(TOY_WRITING_PROMPTS if offline else {}))
    reference = "reference" if "reference" in dataset.column_names else None  # ROUGE-L needs a reference
    return env, WritingTeamReward(reference_column=reference), dataset


def _coding_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
                 offline: bool) -> tuple[Any, Any, Dataset]:
    from ..envs.coding import CooperativeCodingEnv
    from ..rewards.coding import CodingTeamReward

    dataset = _task_rows(script_args, offline, DEFAULT_DATASETS["coding"], coding_rows, toy_coding_rows)
    env = CooperativeCodingEnv(num_turns=num_turns, **(TOY_CODING_PROMPTS if offline else {}))
    return env, CodingTeamReward(env=env), dataset


def _writing_halves_task(script_args: MAGRPOScriptArguments, num_agents: int, num_turns: int,
                         offline: bool) -> tuple[Any, Any, Dataset]:
    from ..envs.writing_halves import HalvesWritingEnv
    from ..rewards.writing_halves import HalvesTeamReward

    if (num_agents, num_turns) != (2, 1):
        raise UsageError("The writing_halves task has 2 writers and 1 turn: set `--num_agents 2 --num_turns 1`.")
    dataset = _task_rows(script_args, offline, "trl-marl/team_writing", writing_rows, toy_writing_rows)
    env = HalvesWritingEnv(chat=False, **TOY_HALVES_PROMPTS) if offline else HalvesWritingEnv()
    return env, HalvesTeamReward(), dataset


register_magrpo_task("writing", _writing_task, "MAGRPO's cooperative writing: a short and a detailed summary.")
register_magrpo_task("coding", _coding_task, "MAGRPO's cooperative coding: a helper `aux` and the main function.")
register_magrpo_task("target_sum", _target_sum_task, "Numbers that add up to a target (a toy task).")
register_magrpo_task("tool_relay", _tool_relay_task, "A product relayed through a calculator (docs/tools.md).",
                     default_tools=("calculator", "none"))
register_magrpo_task("writing_halves", _writing_halves_task, "Two writers choose who summarizes which half of a "
                     "text (shipped texts by default).")


def agent_tools(script_args: MAGRPOScriptArguments, num_agents: int) -> list[list[Any] | None] | None:
    """The `tools` argument of `MAGRPOTrainer` from `--tools` (or the task's default): None without tools."""
    names = script_args.tools if script_args.tools is not None else magrpo_task(script_args.task).default_tools
    if not names or all(name == "none" for name in names):
        return None
    unknown = [name for name in names if name not in TOOL_NAMES]
    if unknown or len(names) != num_agents:
        raise ValueError(f"`--tools` takes one name per agent ({num_agents} here) among {TOOL_NAMES}; got {names}.")
    from ..tools import calculator, python

    known = {"calculator": calculator, "python": python}
    return [None if name == "none" else [known[name]] for name in names]


def centralize(env: Any, reward_funcs: Sequence[Any], training_args: Any) -> tuple[Any, list[Any]]:
    """The centralised baseline of a team task: one policy plays every agent of `env`, on the same team reward.

    Returns the single-policy environment and the reward functions wrapped for it; `training_args` gets
    `num_agents=1` and the team's total completion budget (`max_completion_length` times the number of agents), so
    that "team vs one model doing everything" compares the same number of generated tokens per step.
    """
    from ..envs.centralized import CentralizedEnv
    from ..envs.coding import CooperativeCodingEnv
    from ..envs.coding_central import CentralizedCodingEnv
    from ..rewards.centralized import CentralizedReward

    # code: both functions in one code block (a small model writes that far more readily than tags around code)
    coding = isinstance(env, CooperativeCodingEnv) and env.num_turns == 1
    single = CentralizedCodingEnv(env) if coding else CentralizedEnv(env)
    say(f"[trl-marl] centralised baseline: one policy writes the parts of all {env.num_agents} agents "
        f"(max_completion_length {training_args.max_completion_length} -> "
        f"{training_args.max_completion_length * env.num_agents})")
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


def fit_lora_to_model(model_args: Any, name: str, path: str) -> None:
    """Fit the config's LoRA targets to the model at `path` (`scripts.lora_targets`), before any dataset loads."""
    if not getattr(model_args, "use_peft", False) or not model_args.lora_target_modules:
        return
    from .lora_targets import fit_lora_targets, model_module_names

    try:
        modules, cls = model_module_names(path)
    except Exception:  # e.g. a model whose code is not in transformers: PEFT's own check names bad targets later
        return
    fit_lora_targets(model_args, modules, f"{name} ({cls})")


def main(script_args: MAGRPOScriptArguments, training_args: Any, model_args: Any) -> Any:
    """Train a team with MAGRPO on the task of `script_args`, resuming from `training_args.resume_from_checkpoint`
    (a checkpoint's path, or `true` for the newest in `output_dir`) as `trainer.train(resume_from_checkpoint=...)`
    does; returns the trainer."""
    from trl import get_peft_config

    from ..toy import resolve_toy_name
    from ..trainers import MAGRPOTrainer
    from ..utils.inputs import check_model_path
    from ..utils.model_names import resolve_model_name
    from ..utils.threads import show_thread_choice

    show_thread_choice()  # the torch threads chosen for a CPU run, in one line
    name = model_args.model_name_or_path or "toy"
    check_model_path(name, "`model_name_or_path`")  # before any dataset is downloaded
    offline = is_offline_toy(name)
    model = resolve_toy_name(name) if offline else name
    if offline:
        fit_to_toy(training_args, "max_completion_length")
    fit_lora_to_model(model_args, name, model if offline else resolve_model_name(name))
    env, team_reward, dataset = build_task(script_args, training_args.num_agents, training_args.num_turns, offline)
    if training_args.model_init_kwargs is None:
        training_args.model_init_kwargs = model_init_kwargs(model_args)
    reward_funcs = [team_reward]
    if _is_composite(team_reward):  # log every term of a composite team reward
        reward_funcs = team_reward.reward_funcs()
        training_args.reward_weights = training_args.reward_weights or team_reward.reward_weights()
    if script_args.centralized:
        env, reward_funcs = centralize(env, reward_funcs, training_args)
    tools = agent_tools(script_args, training_args.num_agents)
    if tools is not None and script_args.centralized:
        raise ValueError("`--centralized true` with `--tools`: the centralised baseline writes every agent's part in "
                         "one completion, which has no tools; leave one of them out.")
    trainer = MAGRPOTrainer(model=model, reward_funcs=reward_funcs, env=env, args=training_args,
                            train_dataset=dataset, peft_config=get_peft_config(model_args), tools=tools)
    fresh_output_dir(training_args.output_dir, script_args.overwrite_output_dir)
    trainer.train(resume_from_checkpoint=resume_value(training_args.resume_from_checkpoint))
    trainer.save_model(training_args.output_dir)
    return trainer


def build_parser(prog: str | None = None, description: str | None = None) -> Any:
    """The `TrlParser` of (script, MAGRPOConfig, ModelConfig) arguments, with the offline model names in the help and
    the closest known names for an unknown one (`scripts.arguments.SuggestingParser`); `description` heads `--help`
    (an example's docstring)."""
    from trl import ModelConfig

    from ..trainers import MAGRPOConfig
    from .arguments import SuggestingParser, described
    from .help import MODEL_HELP

    parser = SuggestingParser((MAGRPOScriptArguments, MAGRPOConfig, ModelConfig), prog=prog, **described(description))
    describe_model_option(parser, MODEL_HELP)
    for action in parser._actions:
        if action.dest == "task":  # the registered tasks, the user's included
            tasks = "; ".join(f"`{name}`: {task.summary.rstrip('.')}" for name, task in _TASKS.items())
            action.help = f"The task: {tasks}."
    return parser


def describe_model_option(parser: Any, text: str) -> None:
    """Replace the help of `--model_name_or_path` (TRL's `ModelConfig` does not know the offline names)."""
    for action in parser._actions:
        if action.dest == "model_name_or_path":
            action.help = text


def parse(argv: Sequence[str] | None = None, prog: str | None = None,
          description: str | None = None) -> tuple[Any, Any, Any]:
    """Parse `--config FILE` and command-line overrides into (script, MAGRPOConfig, ModelConfig) arguments."""
    return build_parser(prog, description).parse_args_and_config(args=list(argv) if argv is not None else None)


def run_example(task: str, argv: Sequence[str] | None, prog: str, description: str | None = None) -> Any:
    """An example script of one task (`examples/magrpo_<task>.py`): parse `argv` (default: the command line), train,
    save; returns the trainer. `--task` defaults to `task`; another task is refused (the example would not be the
    one its name says)."""
    parser = build_parser(prog, description)
    parser.set_defaults(task=task)  # a config's or the command line's `task` still wins: then refused below
    script_args, training_args, model_args = parser.parse_args_and_config(
        args=list(argv) if argv is not None else None)
    if script_args.task != task:
        raise SystemExit(f"{prog} trains the {task} task, but `task` is {script_args.task!r}: run "
                         f"`trl-marl magrpo --task {script_args.task} ...` or leave `task` out.")
    return exit_on_unavailable(lambda: main(script_args, training_args, model_args), prog)


def cli_main(argv: Sequence[str], prog: str = "trl-marl magrpo") -> Any:
    """`trl-marl magrpo --config FILE [overrides]`: parse, train, save; returns the trainer. A dataset or model that
    the Hub cannot give ends the program with one message (`data_sources.exit_on_unavailable`)."""
    arguments = parse(argv, prog=prog)
    return exit_on_unavailable(lambda: main(*arguments), prog)


if __name__ == "__main__":
    cli_main(sys.argv[1:], prog="python -m trl_marl.scripts.magrpo")
