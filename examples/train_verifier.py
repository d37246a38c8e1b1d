"""Train a MAPoRL verifier (Park et al., arXiv 2502.18439) on a team's own, automatically labelled answers.

MAPoRL scores every answer of every agent at every debate turn with a verifier, Verifier(q, s) in [0, 1]. The
paper trains it on 7,463 GSM8K (or 10,000 ANLI) questions, held apart from the questions used for MAPoRL itself so
that the agents are not trained against a verifier that memorised their training set. This script:

1. samples answers of a team of agents (`trl_marl.AgentTeam`) to the questions of a dataset;
2. labels each answer 1 (correct) or 0 (wrong) with the rule-based `AnswerVerifier` against the gold answer
   (an answer without an extractable final answer is wrong);
3. balances the classes by downsampling the majority class;
4. trains an outcome reward model, `AutoModelForSequenceClassification` with `num_labels=1`, on
   `template.format(question=q, response=s)` with binary cross-entropy on its logit;
5. saves it (with its tokenizer and a `verifier_config.json` holding the template) for
   `trl_marl.rewards.verifier.ModelVerifier(output_dir)` or `trl-marl serve-verifier --model output_dir`.

GSM8K with a team of two Phi-3-mini agents (the paper's setting):

    python examples/train_verifier.py --model_name_or_path microsoft/Phi-3-mini-128k-instruct --num_agents 2 \
        --dataset_name openai/gsm8k --dataset_config main --max_questions 7463 --output_dir gsm8k-verifier \
        --per_device_train_batch_size 8 --learning_rate 1e-5 --num_train_epochs 1 --bf16 true

ANLI (labels 0/1/2 = entailment/neutral/contradiction), a heterogeneous team (one model per agent):

    python examples/train_verifier.py \
        --model_name_or_path microsoft/Phi-3-mini-128k-instruct,Qwen/Qwen2.5-3B-Instruct --num_agents 2 \
        --task label --dataset_name facebook/anli --dataset_config none --dataset_split train_r1 \
        --question_template "Premise: {premise}\\nHypothesis: {hypothesis}" --gold_column label \
        --max_questions 10000 --max_new_tokens 250 --output_dir anli-verifier

Offline on the real model (no Hub): `--model_name_or_path smollm2-135m-instruct --data_files questions.jsonl`, a
local .jsonl/.json/.csv/.parquet file with a question column and a gold answer column (`--question_column`,
`--gold_column`; GSM8K's `question` and `answer` by default):

    python examples/train_verifier.py --model_name_or_path smollm2-135m-instruct --data_files questions.jsonl \
        --max_new_tokens 64 --output_dir /tmp/smollm2-verifier --report_to none

Offline smoke run in seconds (`toy`: a tiny model from `trl_marl.toy` pretrained briefly on single-digit addition,
synthetic questions `Q:3+4=A:`, or the rows of `--data_files` in that format; nothing is downloaded):

    python examples/train_verifier.py --model_name_or_path toy --output_dir /tmp/toy-verifier --report_to none
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, GenerationConfig, Trainer, TrainingArguments, set_seed

from trl_marl import AgentTeam, load_tokenizer
from trl_marl.data.files import first_rows
from trl_marl.rewards.answers import ANLI_LABELS
from trl_marl.rewards.verifier import VERIFIER_CONFIG_FILE, AnswerVerifier, ModelVerifier
from trl_marl.toy import AdditionTask, is_toy_name, make_toy_model, resolve_toy_name
from trl_marl.utils.inputs import check_model_path
from trl_marl.utils.model_names import resolve_model_name
from trl_marl.utils.threads import apply_cpu_threads, show_thread_choice

INSTRUCTIONS = {
    "math": "Solve the problem step by step. Write the final answer as a number after '####'.",
    "label": "Does the premise entail the hypothesis? Reason briefly, then answer with one word: entailment, neutral "
    "or contradiction.",
}


@dataclass
class VerifierScriptArguments:
    """What to sample, how to label it, and what to train (training hyper-parameters: `TrainingArguments`)."""

    model_name_or_path: str = field(
        default="microsoft/Phi-3-mini-128k-instruct",
        metadata={"help": "The team's model (all agents share its weights), or a comma-separated list with one model "
                  "per agent. `toy`: an offline toy model on synthetic addition questions."},
    )
    num_agents: int = field(default=2, metadata={"help": "Number of agents answering every question."})
    verifier_model_name_or_path: str | None = field(
        default=None, metadata={"help": "Base model of the verifier (default: the first team model)."}
    )
    task: str = field(default="math", metadata={"help": "`math` (numeric answers) or `label` (ANLI-style labels)."})
    labels: str = field(default=",".join(ANLI_LABELS), metadata={"help": "Comma-separated labels of a label task."})
    dataset_name: str = field(
        default="openai/gsm8k",
        metadata={"help": "Dataset of questions with gold answers: a Hub name, or a local .jsonl/.json/.csv/.parquet "
                  "file."},
    )
    data_files: str | None = field(
        default=None,
        metadata={"help": "Local .jsonl/.json/.csv/.parquet file(s) of questions with gold answers, instead of "
                  "`dataset_name` (`dataset_config` and `dataset_split` then do not apply): the offline route, with "
                  "`--model_name_or_path smollm2-135m-instruct`. With `toy`, its questions must be in the toy's "
                  "format (`Q:3+4=A:`; use `--use_chat_template false --instruction ''`)."},
    )
    dataset_config: str | None = field(default="main", metadata={"help": "Dataset configuration (`none`: none)."})
    dataset_split: str = field(default="train", metadata={"help": "Split to sample questions from."})
    question_column: str = field(default="question", metadata={"help": "Column holding the question."})
    question_template: str | None = field(
        default=None, metadata={"help": "Builds the question from a row's columns, e.g. `Premise: {premise}` "
                                "(default: the `question_column`)."}
    )
    gold_column: str = field(default="answer", metadata={"help": "Column holding the gold answer."})
    max_questions: int | None = field(default=None, metadata={"help": "Use at most this many questions."})
    instruction: str | None = field(
        default=None, metadata={"help": "Appended to each question in the agents' prompt (default: per task)."}
    )
    use_chat_template: bool = field(default=True, metadata={"help": "Prompt the agents as a chat user message."})
    samples_per_agent: int = field(default=1, metadata={"help": "Answers each agent samples per question."})
    max_new_tokens: int = field(default=300, metadata={"help": "Longest answer (the paper: 300 GSM8K, 250 ANLI)."})
    temperature: float = field(default=1.0, metadata={"help": "Sampling temperature of the agents."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling of the agents."})
    generation_batch_size: int = field(default=32, metadata={"help": "Questions per generation batch."})
    template: str = field(
        default="{question}\n{response}",
        metadata={"help": "How the verifier sees a pair: a format string with {question} and {response}."},
    )
    max_length: int = field(default=1024, metadata={"help": "Longest verifier input; longer texts keep their end."})
    eval_fraction: float = field(default=0.1, metadata={"help": "Fraction of the balanced data held out."})
    num_toy_questions: int = field(default=64, metadata={"help": "Synthetic questions of the `toy` run."})
    toy_max_operand: int = field(default=9, metadata={"help": "Largest operand of the `toy` additions."})
    toy_pretrain_steps: int = field(default=150, metadata={"help": "Pretraining steps of the `toy` model."})


class VerifierTrainer(Trainer):
    """A `Trainer` whose loss is binary cross-entropy with logits between the model's score and a 0/1 label."""

    def compute_loss(
        self, model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """BCE-with-logits of the pooled logit (`num_labels=1`) against the float label of each sequence."""
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits.squeeze(-1).float()
        loss = F.binary_cross_entropy_with_logits(logits, labels.float().to(logits.device))
        return (loss, outputs) if return_outputs else loss


def load_question_rows(args: VerifierScriptArguments) -> Dataset:
    """The rows of `--data_files`, of a local `--dataset_name` file, or of the Hub dataset (one clear error, naming
    the offline route, when the Hub cannot give it: `trl_marl.scripts.data_sources`)."""
    from datasets import load_dataset

    from trl_marl.data.files import load_data_files
    from trl_marl.scripts.data_sources import hub_dataset, offline_route, resolve_source

    source = resolve_source(args.dataset_name, args.data_files)
    if source.kind == "local":
        return load_data_files(source.files, field=source.option)
    config = None if (args.dataset_config or "none").lower() == "none" else args.dataset_config
    columns = f"a `{args.question_column}` and a `{args.gold_column}` column"
    with hub_dataset(source, offline_route(columns)):
        return load_dataset(args.dataset_name, config, split=args.dataset_split)


def load_questions(args: VerifierScriptArguments, seed: int) -> tuple[str, list[dict[str, Any]]]:
    """The team model and the question rows (`question`, `gold`, `prompt`) of the run."""
    if is_toy_name(args.model_name_or_path):
        if args.model_name_or_path == "toy":
            model = make_toy_model(task="addition", hidden_size=32, num_layers=1, num_heads=4,
                                   pretrain_steps=args.toy_pretrain_steps, max_operand=args.toy_max_operand, seed=seed)
        else:
            model = resolve_toy_name(args.model_name_or_path)
        if not args.data_files:  # synthetic questions; the toy answers `Q:3+4=A:` in raw text
            task, rng = AdditionTask(max_operand=args.toy_max_operand), random.Random(seed)
            rows = []
            for _ in range(args.num_toy_questions):
                question, gold = task.sample(rng)
                rows.append({"question": question, "gold": gold, "prompt": question})
            return model, rows
    else:
        model = args.model_name_or_path
    dataset = load_question_rows(args)
    missing = [c for c in (args.question_column, args.gold_column) if c not in dataset.column_names]
    if missing and not args.question_template:
        raise ValueError(f"The questions lack the column(s) {missing} (they have {dataset.column_names}): set "
                         "`--question_column` and `--gold_column` (or `--question_template`).")
    dataset = first_rows(dataset, args.max_questions)
    instruction = args.instruction if args.instruction is not None else INSTRUCTIONS[args.task]
    rows = []
    for row in dataset:
        question = args.question_template.format(**row) if args.question_template else str(row[args.question_column])
        text = f"{question}\n\n{instruction}" if instruction else question
        prompt: Any = [{"role": "user", "content": text}] if args.use_chat_template else text
        rows.append({"question": question, "gold": row[args.gold_column], "prompt": prompt})
    return model, rows


def sample_and_label(
    args: VerifierScriptArguments, team: AgentTeam, rows: list[dict[str, Any]], checker: AnswerVerifier
) -> list[dict[str, Any]]:
    """Every agent answers every question `samples_per_agent` times; each answer is labelled by `checker`."""
    tokenizer = team.tokenizers[0]
    generation_config = GenerationConfig(
        max_new_tokens=args.max_new_tokens, do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    records = []
    for start in range(0, len(rows), args.generation_batch_size):
        chunk = rows[start : start + args.generation_batch_size]
        batch = [row for row in chunk for _ in range(args.samples_per_agent)]
        outputs = team.generate([[row["prompt"] for row in batch]] * team.num_agents, generation_config)
        for agent, (_prompt_ids, completion_ids) in enumerate(outputs):
            for row, ids in zip(batch, completion_ids):
                response = team.tokenizers[agent].decode(ids, skip_special_tokens=True)
                records.append({
                    "question": row["question"], "response": response, "agent": agent,
                    "gold": checker.parse_gold(row["gold"]), "label": int(checker.score(response, row["gold"])),
                })
        print(f"  sampled {min(start + args.generation_batch_size, len(rows))}/{len(rows)} questions", flush=True)
    return records


def balance(records: list[dict[str, Any]], seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Downsamples the majority class to the size of the minority class; returns (positives, negatives)."""
    positives = [r for r in records if r["label"] == 1]
    negatives = [r for r in records if r["label"] == 0]
    if not positives or not negatives:
        raise SystemExit(
            f"Cannot train a verifier: the team's {len(records)} answers are all "
            f"{'correct' if positives else 'wrong'}. Sample more questions or answers (--max_questions, "
            "--samples_per_agent) or raise --temperature."
        )
    rng = random.Random(seed)
    size = min(len(positives), len(negatives))
    return rng.sample(positives, size), rng.sample(negatives, size)


def split(positives: list[dict], negatives: list[dict], eval_fraction: float, seed: int) -> tuple[list, list]:
    """A train/eval split with both classes in the same proportion in each part."""
    n_eval = int(round(len(positives) * eval_fraction))
    if n_eval >= len(positives):
        n_eval = len(positives) - 1
    train = positives[n_eval:] + negatives[n_eval:]
    evaluation = positives[:n_eval] + negatives[:n_eval]
    random.Random(seed).shuffle(train)
    return train, evaluation


def tokenize(records: list[dict[str, Any]], tokenizer: Any, template: str, max_length: int) -> Dataset:
    """`input_ids` (special tokens added, the last `max_length` tokens kept) and float `labels` of each pair."""
    texts = [template.format(question=r["question"], response=r["response"]) for r in records]
    ids = [row[-max_length:] for row in tokenizer(texts, add_special_tokens=True)["input_ids"]]
    return Dataset.from_dict({"input_ids": ids, "labels": [float(r["label"]) for r in records]})


def make_collator(pad_id: int) -> Any:
    """Right-pads `input_ids` with the model's pad id (the id its classification head pools with)."""

    def collate(features: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        input_ids = torch.full((len(features), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(features), width), dtype=torch.long)
        for i, f in enumerate(features):
            input_ids[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"], dtype=torch.long)
            attention_mask[i, : len(f["input_ids"])] = 1
        labels = torch.tensor([float(f["labels"]) for f in features], dtype=torch.float32)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

    return collate


def main(args: VerifierScriptArguments, training_args: TrainingArguments) -> dict[str, Any]:
    """Samples, labels, balances, trains and saves; returns the metrics written to `verifier_metrics.json`."""
    if args.task not in INSTRUCTIONS:
        raise SystemExit(f"--task must be one of {tuple(INSTRUCTIONS)}, got {args.task!r}.")
    start = time.perf_counter()
    set_seed(training_args.seed)
    offline = is_toy_name(args.model_name_or_path)
    if offline:
        args.max_new_tokens = min(args.max_new_tokens, 4)
        args.template = "{question}{response}"  # the toy vocabulary has no newline; its prompts end with "A:"
        args.use_chat_template, args.instruction = False, ""  # the toy reads `Q:3+4=A:` as raw text
    for name in args.model_name_or_path.split(","):  # before any dataset is downloaded: the offline names, no retries
        check_model_path(name.strip(), "`model_name_or_path`")
    model_name, rows = load_questions(args, training_args.seed)
    names = [name.strip() for name in model_name.split(",")] if "," in model_name else [model_name]
    print(f"[1/4] {len(rows)} questions; team of {args.num_agents} agent(s): {', '.join(names)}", flush=True)

    team = AgentTeam.build(names if len(names) > 1 else names[0], args.num_agents,
                           mode=None if len(names) > 1 else "shared")
    if torch.cuda.is_available():
        team.to("cuda")
    show_thread_choice()
    apply_cpu_threads(team.models)  # on CPU: 1 thread for a tiny model (OMP_NUM_THREADS wins)
    checker = AnswerVerifier(task=args.task, labels=tuple(label.strip() for label in args.labels.split(",")))
    records = sample_and_label(args, team, rows, checker)
    del team
    accuracy = sum(r["label"] for r in records) / len(records)
    print(f"[2/4] {len(records)} answers: {accuracy:.1%} correct, {checker.unparseable_fraction:.1%} without an "
          "answer", flush=True)
    positives, negatives = balance(records, training_args.seed)
    train_records, eval_records = split(positives, negatives, args.eval_fraction, training_args.seed)
    print(f"[3/4] balanced: {len(positives)} correct + {len(negatives)} wrong; train {len(train_records)}, eval "
          f"{len(eval_records)}", flush=True)

    base = args.verifier_model_name_or_path or names[0]
    base = resolve_model_name(base)  # a registered name ("toy", "smollm2-135m-instruct") -> its cached folder
    tokenizer = load_tokenizer(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if not torch.cuda.is_available():
        training_args.dataloader_pin_memory = False  # pinning needs an accelerator (else a warning every epoch)
    trainer = VerifierTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenize(train_records, tokenizer, args.template, args.max_length),
        data_collator=make_collator(model.config.pad_token_id),
        processing_class=tokenizer,
    )
    trainer.train()
    out = training_args.output_dir
    trainer.save_model(out)
    tokenizer.save_pretrained(out)
    with open(os.path.join(out, VERIFIER_CONFIG_FILE), "w") as f:
        json.dump({"template": args.template, "task": args.task, "base_model": base, "team": names}, f, indent=2)
    with open(os.path.join(out, "verifier_data.jsonl"), "w") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")

    metrics: dict[str, Any] = {
        "num_answers": len(records), "team_accuracy": accuracy, "unparseable_fraction": checker.unparseable_fraction,
        "num_positive": len(positives), "num_negative": len(negatives), "num_train": len(train_records),
        "num_eval": len(eval_records),
    }
    if eval_records:
        verifier = ModelVerifier(out, max_length=args.max_length)
        scores = verifier.score_batch([r["question"] for r in eval_records], [r["response"] for r in eval_records])
        correct = [(s >= 0.5) == bool(r["label"]) for s, r in zip(scores, eval_records)]
        metrics["eval_accuracy"] = sum(correct) / len(correct)
        metrics["eval_mean_score_correct"] = sum(s for s, r in zip(scores, eval_records) if r["label"]) / (
            len(eval_records) // 2)
        metrics["eval_mean_score_wrong"] = sum(s for s, r in zip(scores, eval_records) if not r["label"]) / (
            len(eval_records) // 2)
    metrics["seconds"] = round(time.perf_counter() - start, 1)
    with open(os.path.join(out, "verifier_metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    print(f"[4/4] verifier saved to {out}: {json.dumps(metrics)}", flush=True)
    return metrics


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse `argv` (default: the command line) and run [`main`]; returns its metrics. A dataset or model that the
    Hub cannot give ends the program with one message naming the offline route."""
    from trl_marl.scripts.arguments import SuggestingParser, described
    from trl_marl.scripts.data_sources import exit_on_unavailable

    prog = "python examples/train_verifier.py"
    parser = SuggestingParser((VerifierScriptArguments, TrainingArguments), prog=prog, **described(__doc__))
    script_args, train_args = parser.parse_args_and_config(args=argv)
    return exit_on_unavailable(lambda: main(script_args, train_args), prog)


if __name__ == "__main__":
    cli()
