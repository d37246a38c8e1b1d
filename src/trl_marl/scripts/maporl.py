"""`trl-marl maporl`: MAPoRL (Park et al., arXiv 2502.18439) on GSM8K, ANLI or the hidden-sum debate: a team of LLMs
debates, trained with multi-agent PPO on the influence-aware verification reward.

Run with a YAML file holding script, `MultiAgentPPOConfig` and `ModelConfig` fields (see `examples/configs/`):

```bash
trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml
trl-marl maporl hidden_sum --config examples/configs/maporl_hidden_sum.yaml --model_name_or_path smollm2-135m-instruct
accelerate launch -m trl_marl.scripts.maporl anli --config examples/configs/maporl_anli.yaml
```

`--model_name_or_path toy:debate` (the default) runs offline: the toy debate model on two-number additions
(`ToyDebateEnv`, rows of `trl_marl.toy.toy_debate_dataset`). Plain `toy` is the target-number toy model everywhere,
which cannot debate, so it is refused here with that fix. The examples `examples/maporl_gsm8k.py`,
`examples/maporl_anli.py` and `examples/maporl_hidden_sum.py` are this module's three tasks.

Offline on a real model: `--model_name_or_path smollm2-135m-instruct --data_files train.jsonl` with
`--eval_data_files test.jsonl` (or `--eval_split none`); where the data comes from is `scripts.data_sources`, and the
config's LoRA targets are fitted to the model's family (`scripts.lora_targets`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from datasets import Dataset, concatenate_datasets
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification
from trl import ModelConfig, get_peft_config

from ..data import load_anli, load_gsm8k, load_tinygsm
from ..data.files import first_rows
from ..data.hidden_debate import HIDDEN_SUM_SPLITS, hidden_sum_env, load_hidden_sum
from ..envs.debate import ANLI_ANSWER_FORMAT, GSM8K_ANSWER_FORMAT, DebateEnv, ToyDebateEnv
from ..rewards.influence import InfluenceAwareReward
from ..rewards.verifier import AnswerVerifier
from ..team import load_tokenizer
from ..toy import is_toy_name, resolve_toy_name, toy_debate_dataset
from ..trainers import MultiAgentPPOConfig, MultiAgentPPOTrainer
from ..trainers.ppo.config import resume_problem
from ..utils.inputs import check_model_path
from ..utils.model_names import resolve_model_name
from ..utils.quiet import say
from ..utils.threads import show_thread_choice
from .arguments import OutputDirArguments, SuggestingParser, fresh_output_dir, resume_value
from .data_sources import (
    DataSource,
    UsageError,
    exit_on_unavailable,
    hub_dataset,
    local_rows,
    offline_route,
    resolve_source,
)
from .lora_targets import fit_lora_targets
from .magrpo import describe_model_option, fit_to_toy, model_init_kwargs, say_toy_skips


@dataclass
class DebateScriptArguments(OutputDirArguments):
    """Debate, reward and offline settings shared by the MAPoRL examples (PPO settings: `MultiAgentPPOConfig`)."""

    max_train_samples: int | None = field(default=None, metadata={"help": "Keep at most this many training rows."})
    eval_split: str | None = field(
        default=None, metadata={"help": "Split to evaluate the debate on after training ('none': no evaluation)."}
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep at most this many evaluation rows."})
    eval_data_files: str | None = field(
        default=None,
        metadata={"help": "Evaluate on local .jsonl/.json/.csv/.parquet file(s) (the training data's columns) "
                  "instead of `eval_split` of `dataset_name`: needed, or `--eval_split none`, when the training data "
                  "is a local file."},
    )
    num_toy_rows: int = field(default=256, metadata={"help": "Synthetic rows for `--model_name_or_path toy:debate`."})
    chat_prompts: bool = field(default=True, metadata={"help": "Prompt with chat messages (instruct models)."})
    history: str = field(
        default="all", metadata={"help": "Answers shown at later turns: 'all' previous turns (MAPoRL) or 'last'."}
    )
    show_verifier_scores: bool = field(
        default=False, metadata={"help": "Show the verifier's scores of the previous answers in the prompts."}
    )
    reward_mode: str = field(
        default="influence",
        metadata={"help": "'influence' (Definition 1 + incentives), 'verifier' (own score) or 'final' (last turn)."},
    )
    influence_gamma: float = field(default=1.0, metadata={"help": "Discount of future turns in the reward."})
    alpha0: float = field(default=0.0, metadata={"help": "Incentive: revising relative to a wrong majority."})
    alpha1: float = field(default=0.0, metadata={"help": "Incentive: revising relative to a right majority."})
    beta0: float = field(default=0.0, metadata={"help": "Incentive: a wrong answer's influence on the majority."})
    beta1: float = field(default=0.0, metadata={"help": "Incentive: a right answer's influence on the majority."})
    value_model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Backbone of the value models (it must share the policy's tokenizer). Default: a copy "
                  "of the policy's base model."},
    )


GSM8K_COLUMNS = "GSM8K's columns `question` and `answer` (a solution ending in `#### <number>`)"
ANLI_COLUMNS = "ANLI's columns `premise`, `hypothesis` and `label` (0 entailment, 1 neutral, 2 contradiction)"


@dataclass
class GSM8KScriptArguments(DebateScriptArguments):
    """Data settings of the GSM8K example."""

    dataset_name: str = field(
        default="openai/gsm8k",
        metadata={"help": "The GSM8K dataset: a Hub name, or a local .jsonl/.json/.csv/.parquet file with "
                  f"{GSM8K_COLUMNS}."},
    )
    dataset_config: str = field(default="main", metadata={"help": "GSM8K config: 'main' or 'socratic'."})
    dataset_split: str = field(default="train", metadata={"help": "Split to train on (not used with a local file)."})
    data_files: str | None = field(
        default=None,
        metadata={"help": f"Train on local .jsonl/.json/.csv/.parquet file(s) with {GSM8K_COLUMNS} instead of "
                  "`dataset_name`: the offline route, with `--model_name_or_path smollm2-135m-instruct`."},
    )
    tinygsm_rows: int = field(
        default=0,
        metadata={"help": "Add this many TinyGSM rows (MAPoRL: 12,800); answers are computed in the sandbox."},
    )


TOY_DEBATE_MODEL = "toy:debate"
"""The offline model of a MAPoRL run: the toy model pretrained on the toy debate (`trl_marl.toy`, task "debate")."""


def use_debate_model_name(model_args: ModelConfig) -> None:
    """Default `model_args.model_name_or_path` to [`TOY_DEBATE_MODEL`]; refuse `toy`, the target-number toy model.

    Raises:
        ValueError: The name is `toy` (or `trl-marl/toy`): it means the target-number model everywhere, and that model
            cannot debate; the message names `toy:debate`.
    """
    name = model_args.model_name_or_path
    if name is None:
        model_args.model_name_or_path = TOY_DEBATE_MODEL
    elif name in ("toy", "trl-marl/toy"):
        raise ValueError(
            f"`model_name_or_path={name!r}` is the target-number toy model, which cannot debate. The offline toy "
            f"debate model is {TOY_DEBATE_MODEL!r}: pass `--model_name_or_path {TOY_DEBATE_MODEL}` (or leave the "
            "option out)."
        )


def build_models(model_args: ModelConfig, value_model_name: str | None, num_agents: int,
                 value_adapter: bool = False) -> tuple[Any, Any, Any]:
    """The policy base model, its tokenizer, and the value models (`None`: the trainer's default copies, or with
    `value_adapter` its adapter critics on the policy's base).

    A 4-bit/8-bit policy (QLoRA) cannot give its weights to the default value models, so each agent then gets a
    quantized sequence classifier with a LoRA adapter on its backbone and a trainable score head, unless the critics
    are adapters on the policy's own (4-bit) base (`value_adapter`). With `value_adapter`, `value_model_name` is a
    saved adapter critic (`value_model_<i>/`), which starts every critic.
    """
    name = model_args.model_name_or_path
    if name is None:  # `prepare_model_name` defaults it
        raise ValueError("`model_name_or_path` is not set: call `prepare_model_name(model_args)` first.")
    offline = is_toy_name(name)
    path = resolve_toy_name(name) if offline else resolve_model_name(name)  # e.g. "smollm2-135m-instruct" -> folder
    init = model_init_kwargs(model_args)  # dtype, attention implementation, 4-bit/8-bit quantization
    if offline:
        init.pop("dtype", None)  # toy models are float32
    else:
        init["revision"] = model_args.model_revision
    check_model_path(path, "`model_name_or_path`")
    policy = AutoModelForCausalLM.from_pretrained(path, **init)
    if path != name:  # a registered name: the model card and adapters name it, not its cache folder
        policy.config.name_or_path = policy.name_or_path = name
    # the name the user passed, for the model card (`nn.Module` types its attributes as tensors or modules)
    cast(Any, policy).trl_marl_model_name = name
    # the config's LoRA targets, fitted to this model's family before the value models and the adapters use them
    fit_lora_targets(model_args, [n for n, _ in policy.named_modules()], f"{name} ({type(policy).__name__})")
    quantized = "quantization_config" in init
    value_models: Any = None
    if value_adapter:
        if value_model_name:
            from ..trainers.ppo.value import load_value_model

            value_models = load_value_model(value_model_name)
    elif quantized or value_model_name:
        value_models = [value_model(value_model_name or path, init, model_args, quantized) for _ in range(num_agents)]
    return policy, load_tokenizer(path), value_models


def value_model(path: str, init: dict[str, Any], model_args: ModelConfig, quantized: bool) -> Any:
    """A value model (`num_labels=1`); quantized, it trains a LoRA adapter on its backbone and its score head."""
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, **init)
    if quantized:
        from peft import LoraConfig, get_peft_model

        from ..utils.quiet import peft_quietly

        lora = LoraConfig(r=model_args.lora_r, lora_alpha=model_args.lora_alpha, lora_dropout=model_args.lora_dropout,
                          target_modules=model_args.lora_target_modules or "all-linear",
                          task_type="FEATURE_EXTRACTION")
        prefix = model.base_model_prefix
        with peft_quietly():
            setattr(model, prefix, get_peft_model(getattr(model, prefix), lora))
        model.score.float().requires_grad_(True)
    return model


def wants_eval(script_args: DebateScriptArguments) -> bool:
    """Whether to evaluate after training (`--eval_split none` or an empty split skips it)."""
    split = script_args.eval_split
    return bool(split and split.lower() != "none")


def _history(script_args: DebateScriptArguments) -> Literal["all", "last"]:
    """`--history`, a string of the command line (`DebateEnv` checks it)."""
    return cast(Literal["all", "last"], script_args.history)


def reward_function(script_args: DebateScriptArguments, verifier: AnswerVerifier) -> InfluenceAwareReward:
    """MAPoRL's influence-aware verification reward over `verifier`'s scores (Definition 1, Tables 1-2)."""
    return InfluenceAwareReward(verifier, gamma=script_args.influence_gamma, alpha0=script_args.alpha0,
                                alpha1=script_args.alpha1, beta0=script_args.beta0, beta1=script_args.beta1,
                                # (a string of the command line: InfluenceAwareReward checks it)
                                mode=cast(Literal["influence", "verifier", "final"], script_args.reward_mode))


def train(script_args: DebateScriptArguments, training_args: MultiAgentPPOConfig, model_args: ModelConfig,
          env: Any, verifier: AnswerVerifier, train_dataset: Dataset | None, eval_dataset: Dataset | None) -> Any:
    """Build the MAPoRL trainer, train, save every agent, and evaluate the debate when there is evaluation data.

    With a toy model name the environment is the toy debate (`ToyDebateEnv`) and the verifier the math one; the
    rows are synthetic where no local rows were loaded (`train_dataset`/`eval_dataset` None).
    """
    A = training_args.num_agents
    show_thread_choice()  # the torch threads chosen for a CPU run, in one line
    if is_toy_name(model_args.model_name_or_path):  # "Q:12+34=A:", then "Q:12+34=46 45 47?A:"
        env = ToyDebateEnv(num_agents=A, num_turns=training_args.num_turns)
        fit_to_toy(training_args, "response_length", limit=8)  # toy answers are a number and EOS
        verifier = AnswerVerifier(task="math")
        if train_dataset is None:
            train_dataset = toy_debate_dataset(script_args.num_toy_rows, seed=training_args.seed)
        if eval_dataset is None and wants_eval(script_args):
            eval_dataset = toy_debate_dataset(script_args.max_eval_samples or 64, seed=training_args.seed + 1)
    policy, tokenizer, value_models = build_models(model_args, script_args.value_model_name_or_path, A,
                                                   training_args.value_adapter)
    trainer = MultiAgentPPOTrainer(
        args=training_args,
        model=policy,
        processing_class=tokenizer,
        reward_funcs=[reward_function(script_args, verifier)],  # called per (turn, agent) with the whole debates
        env=env,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        value_model=value_models,
        peft_config=get_peft_config(model_args),  # one LoRA adapter per agent on one (4-bit) base model
        eval_verifier=verifier,
    )
    if training_args.output_dir is None:  # TrainingArguments defaults it to "trainer_output"
        raise ValueError("`output_dir` is not set.")
    fresh_output_dir(training_args.output_dir, script_args.overwrite_output_dir)
    trainer.train(resume_from_checkpoint=resume_value(training_args.resume_from_checkpoint))
    trainer.save_model(training_args.output_dir)  # agent_0/ ... agent_{A-1}/, team_config.json, README.md
    if eval_dataset is not None:  # majority-vote accuracy per turn, collaboration transitions (W->R, R->W, ...)
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
    return trainer


def prepare_model_name(model_args: ModelConfig) -> None:
    """Default the model to the toy debate model (`toy`, the target-number model, is refused) and refuse, before any
    dataset is loaded, a name that cannot load (`utils.inputs.check_model_path`: the offline names, no Hub retries)."""
    use_debate_model_name(model_args)
    check_model_path(model_args.model_name_or_path, "`model_name_or_path`")


def debate_sources(script_args: Any, model_args: ModelConfig) -> tuple[DataSource | None, DataSource | None]:
    """Where the training and the evaluation rows come from (None: not loaded).

    A toy model loads local files only (it answers `Q:12+34=A:`; Hub datasets are not loaded, and its rows are then
    synthetic). Local training data needs local evaluation data (`--eval_data_files`) or `--eval_split none`: its
    `eval_split` would otherwise be a split of the Hub dataset.
    """
    toy = is_toy_name(model_args.model_name_or_path)
    train_source = resolve_source(script_args.dataset_name, script_args.data_files)
    if train_source is None:  # every task has a default `dataset_name`
        raise UsageError("No training data: pass `--dataset_name` or `--data_files`.")
    eval_source = None
    if wants_eval(script_args):
        if script_args.eval_data_files:
            eval_source = resolve_source(None, script_args.eval_data_files, files_option="`--eval_data_files`")
        elif train_source.kind == "local" and not toy:
            raise UsageError(
                f"The training data is a local file ({train_source.option} {train_source.name!r}), but `eval_split` "
                f"is {script_args.eval_split!r}, a split of a Hub dataset. Pass `--eval_data_files FILE` (rows "
                "with the same columns) or `--eval_split none`."
            )
        elif train_source.kind != "local":
            eval_source = train_source  # `eval_split` of the same dataset
    if toy:
        say_toy_skips(train_source)
        train_source = train_source if train_source.kind == "local" else None
        eval_source = eval_source if eval_source is not None and eval_source.kind == "local" else None
    return train_source, eval_source


def main_gsm8k(script_args: GSM8KScriptArguments, training_args: MultiAgentPPOConfig, model_args: ModelConfig) -> Any:
    """MAPoRL on GSM8K: a math debate scored by the rule-based answer verifier; returns the trainer."""
    prepare_model_name(model_args)
    verifier = AnswerVerifier(task="math")  # the last \boxed{} / "#### " / "answer is" number vs. the gold number
    env = DebateEnv(num_agents=training_args.num_agents, num_turns=training_args.num_turns,
                    chat=script_args.chat_prompts, answer_format=GSM8K_ANSWER_FORMAT, history=_history(script_args),
                    show_verifier_scores=script_args.show_verifier_scores, verifier=verifier)
    train_source, eval_source = debate_sources(script_args, model_args)
    route = offline_route(GSM8K_COLUMNS)

    def rows(source: DataSource | None, split: str, max_rows: int | None) -> Dataset | None:
        if source is None:
            return None
        if source.kind == "local":  # question, answer ("72"), answer_text
            with local_rows(source, GSM8K_COLUMNS):
                return load_gsm8k(max_rows=max_rows, data_files=source.files)
        with hub_dataset(source, route):
            return load_gsm8k(split=split, config=script_args.dataset_config, max_rows=max_rows,
                              dataset_name=source.name)

    train_dataset = rows(train_source, script_args.dataset_split, script_args.max_train_samples)
    if train_dataset is not None and script_args.tinygsm_rows > 0:
        with hub_dataset(DataSource("hub", "TinyGSM/TinyGSM", "`--tinygsm_rows`"), route + " Or `--tinygsm_rows 0`."):
            tinygsm = load_tinygsm(max_rows=script_args.tinygsm_rows)  # question, answer, code
        train_dataset = concatenate_datasets([train_dataset.select_columns(["question", "answer"]),
                                              tinygsm.select_columns(["question", "answer"])])
    eval_dataset = rows(eval_source, script_args.eval_split or "", script_args.max_eval_samples)
    return train(script_args, training_args, model_args, env, verifier, train_dataset, eval_dataset)


@dataclass
class ANLIScriptArguments(DebateScriptArguments):
    """Data settings of the ANLI example."""

    dataset_name: str = field(
        default="facebook/anli",
        metadata={"help": "The ANLI dataset: a Hub name, or a local .jsonl/.json/.csv/.parquet file with "
                  f"{ANLI_COLUMNS}."},
    )
    data_files: str | None = field(
        default=None,
        metadata={"help": f"Train on local .jsonl/.json/.csv/.parquet file(s) with {ANLI_COLUMNS} instead of "
                  "`dataset_name` (`anli_rounds` and `dataset_split` then do not apply): the offline route, with "
                  "`--model_name_or_path smollm2-135m-instruct`."},
    )
    anli_rounds: list[int] = field(default_factory=lambda: [1], metadata={"help": "ANLI rounds to use (1, 2, 3)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to train on: train, dev or test."})
    skip_train_rows: int = field(
        default=0, metadata={"help": "Skip the first rows of the training split (MAPoRL: 10,000, the verifier's)."}
    )


def main_anli(script_args: ANLIScriptArguments, training_args: MultiAgentPPOConfig, model_args: ModelConfig) -> Any:
    """MAPoRL on ANLI: a label debate scored by the rule-based label verifier; returns the trainer."""
    prepare_model_name(model_args)
    verifier = AnswerVerifier(task="label")  # the last entailment/neutral/contradiction of an answer vs. the gold
    env = DebateEnv(num_agents=training_args.num_agents, num_turns=training_args.num_turns,
                    chat=script_args.chat_prompts, answer_format=ANLI_ANSWER_FORMAT, history=_history(script_args),
                    show_verifier_scores=script_args.show_verifier_scores, verifier=verifier)
    train_source, eval_source = debate_sources(script_args, model_args)
    route = offline_route(ANLI_COLUMNS)

    def rows(source: DataSource | None, split: str, max_rows: int | None) -> Dataset | None:
        # question (premise + hypothesis + the three labels), answer ("entailment", ...), premise, hypothesis, label
        if source is None:
            return None
        if source.kind == "local":
            with local_rows(source, ANLI_COLUMNS):
                return load_anli(max_rows=max_rows, data_files=source.files)
        with hub_dataset(source, route):
            return load_anli(round=script_args.anli_rounds, split=split, max_rows=max_rows, dataset_name=source.name)

    train_dataset = rows(train_source, script_args.dataset_split, None)
    if train_dataset is not None and train_source is not None:  # (rows come from a source)
        if script_args.skip_train_rows >= len(train_dataset):
            raise UsageError(
                f"`skip_train_rows` ({script_args.skip_train_rows}) skips every one of the {len(train_dataset)} "
                f"training rows of {train_source.option} {train_source.name!r} (the config skips the rows MAPoRL's "
                "verifier trained on): pass `--skip_train_rows 0`, or a smaller number."
            )
        start = script_args.skip_train_rows
        stop = len(train_dataset) if script_args.max_train_samples is None else start + script_args.max_train_samples
        train_dataset = train_dataset.select(range(start, min(stop, len(train_dataset))))
    eval_dataset = rows(eval_source, script_args.eval_split or "", script_args.max_eval_samples)
    return train(script_args, training_args, model_args, env, verifier, train_dataset, eval_dataset)


@dataclass
class HiddenSumScriptArguments(DebateScriptArguments):
    """Data settings of the hidden-sum debate (its questions ship with trl-marl: no dataset option)."""

    eval_split: str | None = field(
        default="heldout",
        metadata={"help": "Questions to evaluate the debate on after training: 'heldout' (number pairs that never "
                  "occur in training, in either order), 'train', or 'none' (no evaluation)."},
    )
    eval_repeats: int = field(
        default=3, metadata={"help": "Times each evaluation question is debated (fresh samples each time)."}
    )


def main_hidden_sum(script_args: HiddenSumScriptArguments, training_args: MultiAgentPPOConfig,
                    model_args: ModelConfig) -> Any:
    """MAPoRL on the hidden-sum debate (`trl_marl.data.hidden_debate`): each of 2 agents knows one number of a sum,
    so a right answer needs the other's; scored by the math verifier. Returns the trainer.

    Raises:
        ValueError: `num_agents` is not 2, `num_turns` is below 2, `eval_split` is not a split of the questions, or
            `eval_repeats` is below 1.
    """
    prepare_model_name(model_args)
    if training_args.num_agents != 2 or training_args.num_turns < 2:
        raise ValueError(
            f"The hidden-sum debate has 2 agents (each knows one number) and needs 2 or more turns (the second is "
            f"where an agent hears the other's number); got `num_agents={training_args.num_agents}`, "
            f"`num_turns={training_args.num_turns}`: pass `--num_agents 2 --num_turns 2`."
        )
    evaluate = wants_eval(script_args)
    if evaluate and script_args.eval_split not in HIDDEN_SUM_SPLITS:
        raise ValueError(f"`eval_split` must be one of {HIDDEN_SUM_SPLITS} or 'none' for the hidden-sum debate, got "
                         f"{script_args.eval_split!r}.")
    if script_args.eval_repeats < 1:
        raise ValueError(f"`eval_repeats` must be >= 1, got {script_args.eval_repeats}.")
    verifier = AnswerVerifier(task="math")  # the answer's last number against the gold sum
    if is_toy_name(model_args.model_name_or_path):  # the toy reads `Q:12+34=A:`: `train` runs the toy debate
        say("[trl-marl] offline toy model: trains on the toy debate's synthetic additions; the hidden-sum questions "
            "need a language model (`--model_name_or_path smollm2-135m-instruct`)")
        return train(script_args, training_args, model_args, None, verifier, None, None)
    env = hidden_sum_env(num_turns=training_args.num_turns, chat=script_args.chat_prompts,
                         history=script_args.history, show_verifier_scores=script_args.show_verifier_scores,
                         verifier=verifier)
    train_dataset = first_rows(load_hidden_sum("train", seed=training_args.seed), script_args.max_train_samples)
    eval_dataset = None
    if evaluate and script_args.eval_split is not None:  # (`evaluate` means a split is named)
        # a seed of its own, so the evaluation order does not follow the training order
        eval_dataset = first_rows(load_hidden_sum(script_args.eval_split, repeats=script_args.eval_repeats,
                                             seed=10_000 + training_args.seed), script_args.max_eval_samples)
    return train(script_args, training_args, model_args, env, verifier, train_dataset, eval_dataset)


TASKS: dict[str, tuple[type, Callable[..., Any]]] = {
    "gsm8k": (GSM8KScriptArguments, main_gsm8k),
    "anli": (ANLIScriptArguments, main_anli),
    "hidden_sum": (HiddenSumScriptArguments, main_hidden_sum),
}
"""The tasks of `trl-marl maporl <task>`: their script arguments and their main function."""


def build_parser(task: str, prog: str | None = None, description: str | None = None) -> SuggestingParser:
    """The `TrlParser` of (script, MultiAgentPPOConfig, ModelConfig) arguments of `task` (unknown names answered with
    the closest known ones: `scripts.arguments.SuggestingParser`); `description` heads `--help` (an example's
    docstring)."""
    if task not in TASKS:
        raise SystemExit(f"trl-marl maporl: unknown task {task!r}; choose one of {sorted(TASKS)}.")
    from .arguments import described
    from .help import MODEL_HELP

    parser = SuggestingParser((TASKS[task][0], MultiAgentPPOConfig, ModelConfig),
                              prog=prog or f"trl-marl maporl {task}", **described(description))
    describe_model_option(parser, MODEL_HELP)
    return parser


def parse(task: str, argv: Sequence[str] | None = None, prog: str | None = None,
          description: str | None = None) -> tuple[Any, Any, Any]:
    """Parse `--config FILE` and overrides into (script, MultiAgentPPOConfig, ModelConfig) arguments of `task`; a
    resume these settings cannot do ends the program with one line, before any model loads."""
    parser = build_parser(task, prog, description)
    arguments = parser.parse_args_and_config(args=list(argv) if argv is not None else None)
    training_args = arguments[1]
    if resume_value(training_args.resume_from_checkpoint) is not None:
        problem = resume_problem(training_args)
        if problem is not None:
            print(f"{parser.prog}: {problem}", file=sys.stderr)
            raise SystemExit(2)
    return arguments


def run_example(task: str, argv: Sequence[str] | None, prog: str, description: str | None = None) -> Any:
    """An example script of one task (`examples/maporl_<task>.py`): parse `argv` (default: the command line), train,
    save and evaluate; returns the trainer."""
    arguments = parse(task, argv, prog, description)
    return exit_on_unavailable(lambda: TASKS[task][1](*arguments), prog)


def main(argv: Sequence[str] | None = None) -> Any:
    """`trl-marl maporl <gsm8k|anli|hidden_sum> --config FILE [overrides]`: train, save and evaluate; returns the
    trainer."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        from .help import short_help

        if argv and argv[0] in ("-h", "--help", "--help-all"):
            print(short_help("maporl"))
            raise SystemExit(0)
        raise SystemExit(f"usage: trl-marl maporl {{{','.join(sorted(TASKS))}}} --config FILE [overrides]")
    arguments = parse(argv[0], argv[1:])
    # the model name is checked before any data; what the Hub cannot give ends the program with one message
    return exit_on_unavailable(lambda: TASKS[argv[0]][1](*arguments), f"trl-marl maporl {argv[0]}")


if __name__ == "__main__":
    main()
