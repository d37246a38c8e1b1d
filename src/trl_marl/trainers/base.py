"""[`TeamTrainer`], the base class of every trl-marl trainer: what they all do the same way (the setup steps of the
constructor, input checks, the data loader, dropout, the processes, the metrics book, checkpoints and evaluation).

`MAGRPOTrainer` and `MultiAgentPPOTrainer` subclass it, and so does a new algorithm (docs/extending.md). It holds no
algorithm. Its constructor steps, called in this order by a subclass's `__init__` (each trainer keeps only what
differs between them):

1. `_check_inputs`: the environment against the config, the datasets' columns and first prompts, before any model;
2. `_build_team`: seeded from `args.seed`, the team built by the trainer's builder, its CPU threads, and every
   prompt's length checked against the completion budget;
3. `_setup_generation`: the team's typed settings (`team.settings.TeamSettings`) and generation backend, set at once
   with `AgentTeam.configure` (`trainers.settings`);
4. `_timed_rewards`: a reward set with the config's `reward_timeout` and `reward_isolation`;
5. `_init_trainer`: `transformers.Trainer`'s own constructor, with the rows collator, and the state every trainer
   keeps (the team, the environment, the metrics book, the non-finite counter).

It checks the launch (`trainers.distributed`), gathers sharded weights for rollouts (`rollout_context`), and logs what
the trainer recorded in its [`MetricsBook`] (`self._metrics`) with every `log`. Checkpoints (a team of several models
and adapters, saved and resumed whole) come from `_trl_compat.TeamCheckpointMixin`.
For evaluation, a trainer provides `play_evaluation_episodes(rows, temperature)` (one episode per row with one
sample per agent, played by the shared rollout engine, `trl_marl.rollout.JointRollout`) and gets `evaluate()`, which
plays `evaluation_samples_per_row()` independent episodes of every row (MAGRPO: `num_generations_eval`; default 1)
and computes every metric over all of them.

Evaluation metrics (the same names in every trainer; `eval` is `metric_key_prefix`, joined TRL-style with `_`):

| key | what |
|---|---|
| `eval_reward` | mean reward of turn 1 (the team reward per joint action; in PPO the mean of the agents' scores) |
| `eval_turn_{t}/reward` | the same at turn `t` |
| `eval_turn_{t}/majority_accuracy` | majority vote of the agents' answers at turn `t` (ties: expected accuracy) |
| `eval_turn_{t}/agent_accuracy` | fraction of right answers at turn `t` |
| `eval_turn_{t}_{t+1}/w_to_r`, `r_to_w`, `persuaded`, `persuader` (+ `_rate`) | collaboration transitions |
| `eval_final/majority_accuracy`, `eval_final/agent_accuracy`, `eval_num_debates` | the last turn; how many episodes |
| `eval_runtime` | seconds |

The accuracy and transition metrics need an answer verifier (`eval_verifier`, or a reward function that is one or
wraps one, e.g. `InfluenceAwareReward(AnswerVerifier(...))`) and the gold answers in `gold_column`
(`trl_marl.evaluation.DebateEvaluation` defines each of them). The reward metrics need reward functions.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, NoReturn, Protocol, TypeVar, cast, runtime_checkable

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
from torch.utils.data import Dataset as TorchDataset
from transformers import TrainerCallback, set_seed

from .._trl_compat import (
    CHECKPOINT_PREFIX,
    TeamCheckpointMixin,
    TRLBaseTrainer,
    checkpoint_problem,
    last_complete_checkpoint,
    warn_if_launcher_dropped_processes,
)
from ..envs.base import MultiAgentEnv, Transcript
from ..evaluation import DebateEvaluation
from ..reward_contract import LocalReward, NonFiniteCounter, NonFiniteError, RewardFunctionError, RewardSet, TeamReward
from ..reward_contract.sets import check_tool_scoring
from ..team import AgentTeam
from ..team.generation import GenerationSettings, build_generation_backend
from ..tools.loop import ToolLoop
from ..tools.toolset import AgentTools
from ..utils.threads import apply_cpu_threads
from ..validation import check_dataset_prompts, check_prompt_lengths
from .console import install_console_metrics
from .distributed import (
    any_process,
    check_fsdp_request,
    gather_objects,
    gathered_root,
    gathered_zero3,
    is_fsdp2_module,
    missing_chunks,
    rollout_phase,
    setup_strategy,
    zero3_engine,
)
from .logbook import MetricsBook
from .rows import RowDataset, collate_rows

__all__ = ["MetricsBook", "TeamTrainer", "TeamTrainingArguments", "collate_rows", "gather_objects", "rollout_phase"]

RewardsT = TypeVar("RewardsT", RewardSet, TeamReward, LocalReward)


@runtime_checkable
class TeamTrainingArguments(Protocol):
    """The config fields the setup steps of [`TeamTrainer`] read, besides `transformers.TrainingArguments`' own:
    what a new algorithm's config adds, declared with the field factories both `MAGRPOConfig` and
    `MultiAgentPPOConfig` use (`trainers.fields`, `reward_contract.settings`, `tools.settings`, `trainers.console`),
    and the generation fields of [`GenerationSettings`] it wants to offer."""

    num_agents: int
    num_turns: int
    seed: int
    use_cpu: bool
    cpu_threads: int | None
    prompt_length_check: str
    share_prompt_prefill: bool
    reward_timeout: float | None
    reward_isolation: str
    console_metrics: list[str] | None
    max_nonfinite: int

    @property
    def remove_unused_columns(self) -> bool | None: ...  # `bool | None` in TRL's configs; `_init_trainer` sets it

    @remove_unused_columns.setter
    def remove_unused_columns(self, value: bool) -> None: ...


class TeamTrainer(TeamCheckpointMixin, TRLBaseTrainer):
    """The base class of trl-marl's trainers (see the module docstring): a subclass's `__init__` calls the setup steps
    below in order and adds what its algorithm needs; its rollout, advantages and loss are its own.

    A sketch of a new algorithm's constructor (`docs/extending.md` has the whole recipe):

    ```python
    class MyTrainer(TeamTrainer):
        def __init__(self, model, reward_funcs, args, train_dataset, env, eval_dataset=None, callbacks=None):
            self._check_inputs(env, args, train_dataset, eval_dataset)
            team = self._build_team(lambda: AgentTeam.build(model, args.num_agents), args, env,
                                    train_dataset, eval_dataset, args.max_completion_length,
                                    "MyConfig.max_completion_length")
            self._setup_generation(team, args, temperature=args.temperature)
            self.rewards = self._timed_rewards(TeamReward(reward_funcs, args.reward_weights), args)
            self._init_trainer(team, env, args, model=team, train_dataset=train_dataset,
                               eval_dataset=eval_dataset, callbacks=callbacks)
    ```
    """

    env: MultiAgentEnv
    team: AgentTeam
    model: nn.Module  # the team, or a wrapper holding it (`_init_trainer` always passes one)
    train_dataset: RowDataset  # required (`_check_inputs`)
    eval_dataset: RowDataset | None
    eval_verifier: Any = None
    gold_column: str = "answer"
    tool_loop: ToolLoop | None = None  # the team's tool calls (`_build_team`); None: no agent has tools
    _name: str = "TeamTrainer"
    _paper: dict[str, str] = {}
    _tag_names: list[str] = ["trl", "trl-marl", "multi-agent"]
    console_metrics_default: tuple[str, ...] = ("loss", "reward")
    """What the console shows of each logged step when the config's `console_metrics` is None."""

    # ------------------------------------------------------------------ setup steps (in this order)
    def _check_inputs(self, env: MultiAgentEnv, args: TeamTrainingArguments, train_dataset: Any,
                      eval_dataset: Any = None, eval_verifier: Any = None, gold_column: str = "answer") -> None:
        """Step 1, before any model loads: a training set is given, the environment agrees with the config
        (`check_env_agrees`), and both datasets' columns and first prompts suit the environment
        (`validate_dataset`); the evaluation's answer verifier and gold column are kept."""
        if train_dataset is None:
            raise ValueError(f"`train_dataset` is required: {self._name} plays one episode per dataset row.")
        self.eval_verifier = eval_verifier
        self.gold_column = gold_column
        self.check_env_agrees(env, args)
        self.validate_dataset(env, train_dataset, "train_dataset")  # the first rows, before a model is loaded
        if eval_dataset is not None:
            self.validate_dataset(env, eval_dataset, "eval_dataset")

    def _build_team(self, build: Callable[[], AgentTeam], args: TeamTrainingArguments, env: MultiAgentEnv,
                    train_dataset: Any, eval_dataset: Any, max_new_tokens: int, length_field: str,
                    chat_template_kwargs: dict[str, Any] | None = None,
                    agent_tools: Sequence[AgentTools | None] | None = None) -> AgentTeam:
        """Step 2: the team that `build()` returns, built right after seeding from `args.seed` (a run is a function of
        its seed: LoRA weights and any other fresh weights are drawn now, before `Trainer.__init__` seeds), with
        `args.cpu_threads` applied, and every row of both datasets checked against the context window with
        `max_new_tokens` (the config field `length_field`) to generate (`check_prompt_lengths`). With `agent_tools`
        (`team_tools`), `self.tool_loop` is built first (`ToolLoop.for_team`): the check measures their schemas."""
        set_seed(args.seed)
        team = build()
        apply_cpu_threads(team.models, args.cpu_threads, on_cpu=True if args.use_cpu else None)
        if agent_tools is not None:
            self.tool_loop = ToolLoop.for_team(agent_tools, team, args)
        per_member = self._member_template_kwargs(args)
        for where, dataset in (("train_dataset", train_dataset), ("eval_dataset", eval_dataset)):
            if dataset is not None:  # every row, before the first step
                check_prompt_lengths(team, env, dataset, where, max_new_tokens, length_field,
                                     chat_template_kwargs=chat_template_kwargs, on_long=args.prompt_length_check,
                                     member_template_kwargs=per_member)
        return team

    def _member_template_kwargs(self, args: Any) -> list[dict | None] | None:
        """Per team member, the chat template arguments of its prompts with its tools (None without a tool loop)."""
        loop, kwargs = self.tool_loop, getattr(args, "chat_template_kwargs", None)
        return None if loop is None else loop.member_template_kwargs(kwargs)

    def _setup_generation(self, team: AgentTeam, args: TeamTrainingArguments, temperature: float,
                          continuous_batching_config: Any = None) -> None:
        """Step 3: the team's typed settings, built from the config here and set at once (`AgentTeam.configure`):
        the team samples at `temperature` (its log-probabilities divide the logits by it), shares prompt prefills as
        `args.share_prompt_prefill` says (and prompt forwards as MAGRPO's `share_prompt_forward`), decodes with
        `continuous_batching_config` (MAGRPO's `use_transformers_continuous_batching`; None: off), and through the
        backend of the config's typed [`GenerationSettings`] (`team.generation.build_generation_backend`)."""
        settings = team.settings.replace(temperature=temperature, share_prompt_prefill=args.share_prompt_prefill,
                                         continuous_batching_config=continuous_batching_config,
                                         share_prompt_forward=getattr(args, "share_prompt_forward", False))
        backend = GenerationSettings.of(args)
        team.configure(settings, generation_backend=lambda team: build_generation_backend(backend, team))

    @staticmethod
    def _timed_rewards(rewards: RewardsT, args: TeamTrainingArguments) -> RewardsT:
        """Step 4: `rewards` (a `RewardSet`, `TeamReward` or `LocalReward`) with the config's reward time limit."""
        rewards.set_timeout(args.reward_timeout, f"{type(args).__name__}.reward_timeout", args.reward_isolation)
        return rewards

    def _init_trainer(self, team: AgentTeam, env: MultiAgentEnv, args: TeamTrainingArguments, model: nn.Module,
                      train_dataset: Any, eval_dataset: Any, callbacks: list[TrainerCallback] | None,
                      optimizers: tuple[Any, Any] = (None, None)) -> None:
        """Step 5: `transformers.Trainer`'s constructor on `model` (the team, or a wrapper holding it and more), with
        raw rows as batches (`collate_rows`: the environment and the reward functions read every column), then the
        state every trainer keeps: `team`, `env`, the metrics book `log` drains and the non-finite reward counter
        (`args.max_nonfinite`)."""
        if self.tool_loop is not None:  # each turn with tools passes the rewards its calls: checked before any step
            scoring = getattr(self, "compute_rewards", None)
            check_tool_scoring(scoring, getattr(self, "rewards", None), getattr(self, "local_rewards", None))
        args.remove_unused_columns = False  # the environment and the reward functions read the raw rows
        self.env = env
        self._metrics = MetricsBook()
        super().__init__(model=model, args=args, data_collator=collate_rows, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, processing_class=team.tokenizers[0], callbacks=callbacks,
                         optimizers=optimizers)
        self.team = team
        self.nonfinite = NonFiniteCounter(args.max_nonfinite, lambda: self.state)  # names the NaN/inf rewards
        install_console_metrics(self.callback_handler, args.console_metrics, self.console_metrics_default)

    # ------------------------------------------------------------------ input checks
    @staticmethod
    def check_env_agrees(env: MultiAgentEnv, args: TeamTrainingArguments) -> None:
        """The environment and the config must give the same numbers of agents and turns.

        Checked first of all, with the launch itself: a warning when `accelerate launch --num_processes N` started
        this script as one process (`_trl_compat.warn_if_launcher_dropped_processes`).
        """
        warn_if_launcher_dropped_processes()
        if env.num_agents != args.num_agents or env.num_turns != args.num_turns:
            raise ValueError(
                f"The environment has {env.num_agents} agents and {env.num_turns} turns but `{type(args).__name__}` "
                f"says num_agents={args.num_agents}, num_turns={args.num_turns}; make them agree."
            )

    @staticmethod
    def validate_dataset(env: MultiAgentEnv, dataset: Any, where: str) -> tuple[list[int], list[list[Any]]]:
        """Check a dataset's columns and its first rows' prompts; returns `check_dataset_prompts`'s result."""
        columns = getattr(dataset, "column_names", None)
        if columns is None:
            try:
                first = dataset[0]
            except Exception as exc:  # noqa: BLE001 - any indexing failure means we cannot validate
                raise TypeError(f"`{where}` must be a datasets.Dataset or an indexable sequence of dicts.") from exc
            columns = list(first)
        if len(dataset) == 0:
            raise ValueError(f"`{where}` is empty.")
        env.validate_row(dict.fromkeys(columns), where=f"`{where}`")
        return check_dataset_prompts(env, dataset, where)

    @staticmethod
    def disable_dropout(modules: Iterable[nn.Module | None]) -> None:
        """Set every dropout probability of `modules` to 0 (RL on sampled tokens needs a deterministic forward)."""
        for module in modules:
            if module is None:
                continue
            for sub in module.modules():
                if isinstance(sub, nn.Dropout):
                    sub.p = 0.0

    # ------------------------------------------------------------------ processes
    def create_accelerator_and_postprocess(self) -> None:
        """`transformers.Trainer`'s accelerator, checked for what a team can run on several processes: FSDP2 (also on
        CPU processes), never FSDP1, and no process that would silently train alone (`trainers.distributed`).

        With `torch_compile`, the team compiles its log-probability forwards itself (`compile_team_forwards`).
        """
        check_fsdp_request(self.args)
        super().create_accelerator_and_postprocess()
        if setup_strategy(self.accelerator, self.args):
            self.is_fsdp_enabled = True  # FSDP2 turned on for CPU processes
        if self.args.torch_compile:
            self.compile_team_forwards()

    def is_sharded(self) -> bool:
        """Whether the weights are sharded across several processes (FSDP2, DeepSpeed ZeRO-3): every forward is then
        a collective that all processes must run."""
        sharded = is_fsdp2_module(self.model) or self.zero3_engine() is not None
        return sharded and self.accelerator.num_processes > 1

    def zero3_engine(self) -> Any:
        """The trainer's DeepSpeed engine when it partitions the weights (ZeRO-3), else None."""
        return zero3_engine(getattr(self, "deepspeed", None), self.accelerator.state)

    @contextmanager
    def rollout_context(self) -> Iterator[None]:
        """No gradients and the parameters that the rollout needs gathered: the root unit's under FSDP2
        (`distributed.gathered_root`), all of them under DeepSpeed ZeRO-3 (`distributed.gathered_zero3`); nested
        contexts gather once. With sharded weights the team plays its turns in lockstep (`AgentTeam.lockstep`) and
        without a shared prompt prefill (one more forward on some processes only)."""
        if self.__dict__.get("_in_rollout_phase"):
            with torch.no_grad():
                yield
            return
        self.__dict__["_in_rollout_phase"] = True
        team = getattr(self, "team", None)
        # with sharded weights every forward is a collective: turns in lockstep, and no shared prefill (one more
        # forward on a process whose rows repeat a prompt, which the others, e.g. one playing a discarded turn, would
        # not run: it would wait forever)
        lockstep = (team.playing_in_lockstep(functools.partial(any_process, self.accelerator))
                    if team is not None and self.is_sharded() else nullcontext())
        try:
            with lockstep, torch.no_grad(), gathered_root(self.model), gathered_zero3(self.zero3_engine()):
                yield
        finally:
            self.__dict__["_in_rollout_phase"] = False

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        """`Trainer`'s accelerator arguments, without its `torch_compile` plugin: accelerate would compile the whole
        team (its Python loop over agents recompiles at every new length); `compile_team_forwards` does instead."""
        args = super()._build_accelerator_args(**kwargs)
        if self.args.torch_compile and "dynamo_plugin" in args:
            from accelerate.utils import TorchDynamoPlugin

            args["dynamo_plugin"] = TorchDynamoPlugin(backend="no")
        return args

    def compile_team_forwards(self) -> None:
        """`torch_compile=True`: compile the team's log-probability forwards (`AgentTeam.compile_forwards`, with
        `torch_compile_backend` and `torch_compile_mode`); generation, value models and rewards stay eager."""
        args = self.args
        state = self.accelerator.state
        strategy = next((name for name, attribute in (("FSDP", "fsdp_plugin"), ("DeepSpeed", "deepspeed_plugin"))
                         if getattr(state, attribute, None) is not None), None)
        if strategy is not None:
            raise ValueError(
                f"`torch_compile=True` with {strategy} is not supported by trl-marl's trainers (compiled forwards of "
                f"sharded agents are not tested): set `torch_compile=False`, or train without {strategy}."
            )
        model = self.model
        # the team, or the wrapper holding it (`nn.Module` types a submodule attribute as `Tensor | Module`)
        team = cast(AgentTeam, model if hasattr(model, "compile_forwards") else model.team)
        team.compile_forwards(args.torch_compile_backend, args.torch_compile_mode)

    # ------------------------------------------------------------------ logging
    _metrics: MetricsBook
    """What the trainer recorded since the last `log` (each trainer creates its own in `__init__`)."""

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """`Trainer.log` of `logs` and of what the trainer recorded in its metrics book for the current mode (train
        or eval), which is emptied afterwards."""
        mode = "train" if self.model.training else "eval"
        logs = {**logs, **self._metrics.logged(mode)}
        super().log(logs, start_time)
        self._metrics.clear(mode)

    # ------------------------------------------------------------------ model card
    def _output_dir(self) -> str:
        """`args.output_dir`: never None once `TrainingArguments.__post_init__` ran (default "trainer_output")."""
        output_dir = self.args.output_dir
        if output_dir is None:
            raise ValueError(f"`{type(self.args).__name__}.output_dir` is None: set the folder of the run's files.")
        return output_dir

    def write_model_card(self, algorithm: str, reward_names: list[str], config_summary: dict[str, Any],
                         model_name: str | None, dataset_name: str | None, tags: str | list[str] | None,
                         output_dir: str | None) -> None:
        """Write `README.md` in `output_dir` (default: `args.output_dir`) on the main process: the algorithm, the
        trainer's paper (`_paper`), the agents, the rewards and the main settings (`trl_marl.model_card`)."""
        if not self.is_world_process_zero():
            return
        from ..model_card import write_team_model_card

        write_team_model_card(
            output_dir=output_dir or self._output_dir(),
            team=self.team,
            algorithm=algorithm,
            paper=self._paper,
            reward_names=reward_names,
            env_name=type(self.env).__name__,
            config_summary=config_summary,
            model_name=model_name,
            dataset_name=dataset_name,
            tags=[*self._tag_names, *([tags] if isinstance(tags, str) else (tags or []))],
            global_step=self.state.global_step or None,
        )

    # ------------------------------------------------------------------ stopping on a broken reward
    def save_team(self, output_dir: str) -> str:
        """Save the trained team alone to `output_dir` (main process): every agent's weights or adapter with its
        tokenizer, `team_config.json` and the model card; no optimizer, scheduler or value model. It loads with
        `AgentTeam.from_pretrained` and `trl-marl generate --team`. Returns `output_dir`."""
        if self.args.should_save:
            self.team.save_pretrained(output_dir)
            # every trainer's `create_model_card` takes the folder too (TRL's declares model_name, dataset_name, tags)
            create_model_card: Callable[..., None] = self.create_model_card
            create_model_card(output_dir=output_dir)
        return output_dir

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """`Trainer.train`; a run stopped by a [`NonFiniteError`] saves its last completed step first, as a reward
        error does ([`stop_after_reward_error`])."""
        try:
            return super().train(*args, **kwargs)
        except NonFiniteError as error:
            self.stop_after_reward_error(error)

    def stop_after_reward_error(self, error: RewardFunctionError | NonFiniteError) -> NoReturn:
        """Save the last completed step, then raise `error` again, saying where that checkpoint is.

        Called by `train()` when a reward function raised, timed out (`reward_timeout`) or broke the reward contract,
        or when more rewards or losses were NaN/inf than `max_nonfinite` allows ([`NonFiniteError`]).
        The step in progress is lost (its rollout is incomplete); the weights, optimizer and scheduler of the last
        completed step are saved as `checkpoint-<step>` (whatever `save_strategy` says, unless a good checkpoint of
        that step exists already; the random state saved is the one at the failure, so the resumed run samples anew
        rather than replaying the failed step), and `train(resume_from_checkpoint=True)` goes on from there once the
        reward is fixed. Nothing is saved before the first step completes, nor with several processes: a checkpoint
        needs every process, and the others may be waiting inside the failed step.

        Raises:
            RewardFunctionError: always (of `error`'s type, with the checkpoint's path or why none was written).
        """
        state, output_dir = self.state, self._output_dir()
        step = int(state.global_step)
        final_dir = os.path.join(output_dir, f"{CHECKPOINT_PREFIX}-{step}")
        resume = (" Resume with `trainer.train(resume_from_checkpoint=True)` (command line: `--resume_from_checkpoint "
                  "true`) once the cause is fixed." if self.resumable
                  else " Load the team from it with `AgentTeam.from_pretrained`.")
        if step == 0:
            where = "No training step had completed, so nothing was saved."
        elif self.accelerator.num_processes > 1:
            newest = last_complete_checkpoint(output_dir)
            where = ("Nothing was saved now (a checkpoint needs every process, and the others may be waiting in the "
                     f"failed step); the newest checkpoint is {newest or 'none'}.")
        elif os.path.isdir(final_dir) and checkpoint_problem(final_dir, checksums=False) is None:
            where = f"The last completed step ({step}) is already saved in {final_dir}.{resume}"
        else:
            try:
                self._save_checkpoint(self.model_wrapped, trial=None)
                where = f"The last completed step ({step}) was saved in {final_dir}.{resume}"
            except Exception as save_error:  # noqa: BLE001 - reported with the reward's error, which stays the cause
                newest = last_complete_checkpoint(output_dir)
                where = (f"Saving the last completed step ({step}) in {final_dir} failed too "
                         f"({type(save_error).__name__}: {save_error}); the newest checkpoint is {newest or 'none'}.")
        message = f"Training stopped during step {step + 1}: {error} {where}"
        try:
            stopped = type(error)(message)
        except Exception:  # noqa: BLE001 - a subclass with another constructor
            stopped = NonFiniteError(message) if isinstance(error, NonFiniteError) else RewardFunctionError(message)
        raise stopped from error

    # ------------------------------------------------------------------ data
    def rows_dataloader(self, batch_size: int, shuffle: bool = True, drop_last: bool = True,
                        wrap_sampler: Any = None) -> DataLoader:
        """Batches of raw rows of the training set, shuffled by a generator seeded from `args.seed`.

        `wrap_sampler`, when given, wraps the index sampler (e.g. MAGRPO's `BlockRepeatSampler`).
        """
        generator = torch.Generator().manual_seed(self.args.seed)
        dataset = self.train_dataset
        sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if wrap_sampler is not None:
            sampler = wrap_sampler(sampler)
        # torch types a map-style dataset as its `Dataset` class; it takes any object with `__getitem__` and `__len__`
        rows = cast("TorchDataset[dict[str, Any]]", dataset)
        loader = DataLoader(rows, batch_size=batch_size, sampler=sampler, collate_fn=collate_rows,
                            drop_last=drop_last, num_workers=0)
        return self.accelerator.prepare(loader)

    # ------------------------------------------------------------------ evaluation
    def answer_verifier(self) -> Any:
        """What extracts and checks answers in `evaluate()`: `eval_verifier`, or a reward function's verifier."""
        if self.eval_verifier is not None:
            return self.eval_verifier
        for func in getattr(self, "reward_funcs", []):
            for candidate in (func, getattr(func, "verifier", None)):
                if candidate is not None and hasattr(candidate, "extract") and hasattr(candidate, "score"):
                    return candidate
        return None

    def play_evaluation_episodes(
        self, rows: list[dict[str, Any]], temperature: float | None = None
    ) -> tuple[list[Transcript], dict[int, list[float]]]:
        """Play one episode per row (one sample per agent): the transcripts, and the rewards of each turn."""
        raise NotImplementedError(f"{type(self).__name__} is a TeamTrainer: it must define "
                                  "play_evaluation_episodes(rows, temperature)")

    def evaluation_samples_per_row(self) -> int:
        """How many independent episodes `evaluate()` plays of every row (GRPO's samples per prompt at evaluation)."""
        return 1

    def check_evaluation_prompts(self, dataset: Any) -> None:
        """Checks an evaluation set before playing it (the trainer adds its prompt-length check)."""
        self.validate_dataset(self.env, dataset, "eval_dataset")

    @torch.no_grad()
    def evaluate(
        self,
        eval_dataset: Any = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
        temperature: float | None = None,
    ) -> dict[str, float]:
        """Play the episodes of every evaluation row and report the team reward per turn and, with an answer verifier,
        MAPoRL's per-turn majority accuracy and collaboration transitions (module docstring: the metric names).

        Each row is played `evaluation_samples_per_row()` times (independent episodes); `per_device_eval_batch_size`
        counts episodes, so a batch holds that many divided by the episodes per row of rows (at least one).
        """
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            raise ValueError("No evaluation dataset: pass `eval_dataset` to the trainer or to `evaluate()`.")
        self.check_evaluation_prompts(dataset)
        verifier = self.answer_verifier()
        if verifier is None and not getattr(self, "reward_funcs", None):
            raise ValueError(
                "evaluate() needs an answer verifier (`eval_verifier=AnswerVerifier(...)`) or reward functions."
            )
        accelerator = self.accelerator
        rows = [dataset[i] for i in range(len(dataset))][accelerator.process_index :: accelerator.num_processes]
        if verifier is not None and rows and self.gold_column not in rows[0]:
            raise KeyError(f"evaluate() reads the gold answer from the column {self.gold_column!r}, which is missing.")
        model = self.model
        was_training = model.training
        model.eval()
        start = time.perf_counter()
        debates: list[tuple[list[list[Any]], list[list[bool]]]] = []
        per_turn: dict[int, list[float]] = defaultdict(list)
        repeats = self.evaluation_samples_per_row()
        size = max(1, self.args.per_device_eval_batch_size // repeats)
        chunks = [[row for row in rows[i : i + size] for _ in range(repeats)] for i in range(0, len(rows), size)]
        # sharded weights: every forward is a collective, so each process plays as many chunks as the busiest one (a
        # process short of rows then plays the first evaluation row, discarded, with its random state restored)
        extra = missing_chunks(accelerator, len(chunks)) if self.is_sharded() else 0
        try:
            with self.rollout_context():
                played = []
                for chunk in chunks:
                    played.append((chunk, *self.play_evaluation_episodes(chunk, temperature)))
                    self._evaluation_step(chunks)
                for _ in range(extra):
                    with torch.random.fork_rng(devices=[accelerator.device] if accelerator.device.type == "cuda"
                                               else []):
                        self.play_evaluation_episodes([dataset[0]], temperature)
            for chunk, transcripts, rewards in played:
                for turn, values in rewards.items():
                    per_turn[turn].extend(values)
                if verifier is not None:
                    one = DebateEvaluation()
                    one.add_transcripts(transcripts, [row[self.gold_column] for row in chunk], verifier)
                    debates.extend(zip(one.answers, one.correct))
        finally:
            model.train(was_training)
        metrics: dict[str, float] = {}
        if per_turn:
            gathered = gather_objects(accelerator, [dict(per_turn)])
            merged: dict[int, list[float]] = defaultdict(list)
            for part in gathered:
                for turn, values in part.items():
                    merged[turn].extend(values)
            metrics[f"{metric_key_prefix}_reward"] = _finite_mean(merged.get(1, []))
            for turn in sorted(merged):
                metrics[f"{metric_key_prefix}_turn_{turn}/reward"] = _finite_mean(merged[turn])
        if verifier is not None:
            evaluation = DebateEvaluation()
            for answers, correct in gather_objects(accelerator, debates):
                evaluation.add(answers, correct)
            if len(evaluation):
                metrics.update({f"{metric_key_prefix}_{k}": v for k, v in evaluation.compute().items()})
        metrics[f"{metric_key_prefix}_runtime"] = time.perf_counter() - start
        self.log(dict(metrics))  # `Trainer.log` adds `epoch` to what it is given
        self.control = self.callback_handler.on_evaluate(
            self.args, self.state, self.control, metrics
        )
        return metrics

    def _evaluation_step(self, chunks: list[Any]) -> None:
        """Tell the callbacks that one evaluation batch of `chunks` was played (`on_prediction_step`, with `chunks` as
        the evaluation "dataloader" whose length is the number of batches): transformers' `ProgressCallback` and the
        demos' bars advance one step."""
        handler = self.callback_handler
        before = handler.eval_dataloader
        handler.eval_dataloader = chunks
        try:
            self.control = handler.on_prediction_step(self.args, self.state, self.control)
        finally:
            handler.eval_dataloader = before


def _finite_mean(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")
