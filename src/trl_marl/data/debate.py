"""The debate datasets of MAPoRL (Park et al., arXiv 2502.18439) in the schema of [`~trl_marl.envs.debate.DebateEnv`].

Every loader returns a `datasets.Dataset` with the columns

- `question` (`str`): what the agents are asked;
- `answer` (`str`): the gold final answer as a plain string (`"72"`, `"entailment"`), which the verifiers of
  `trl_marl.rewards.verifier` compare answers with;

plus the raw columns that are useful for inspection (listed per loader).

- [`load_gsm8k`]: `openai/gsm8k` (grade-school math; gold after `#### `).
- [`load_tinygsm`]: `TinyGSM/TinyGSM` (12.3M synthetic GSM8K-style problems whose solutions are Python functions; the
  gold answer is what the function returns, computed in the sandbox of `trl_marl.sandbox`).
- [`load_anli`]: `facebook/anli` (adversarial natural language inference, rounds 1-3).

Where the Hub loaders read from (the Hub, its local cache, a local copy): the `trl_marl.data` docstring; these also
read a JSON Lines file given as `data_files`.
"""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..rewards.answers import ANLI_LABELS
from ..utils.numbers import normalize_number
from .files import first_rows

if TYPE_CHECKING:
    import datasets

    from ..sandbox import SandboxLimits

__all__ = [
    "ANLI_LABELS",
    "ANLI_QUESTION_TEMPLATE",
    "load_anli",
    "load_gsm8k",
    "load_tinygsm",
    "normalize_number",
    "parse_gsm8k_answer",
    "tinygsm_answers",
]


def _check_max_rows(max_rows: int | None) -> None:
    if max_rows is not None and max_rows < 0:
        raise ValueError(f"`max_rows` must be >= 0 or None, got {max_rows}.")


def _check_columns(dataset: Any, needed: Sequence[str], loader: str, name: str, split: str) -> None:
    columns = list(dataset.column_names or [])
    missing = [c for c in needed if c not in columns]
    if missing:
        raise ValueError(
            f"{loader} expects the columns {list(needed)}, but {name!r} ({split}) lacks {missing} (it has {columns})."
        )


# ----------------------------------------------------------------------------------------------------------------
# Numbers
# ----------------------------------------------------------------------------------------------------------------

# `normalize_number` is the package's one normaliser of numbers (`trl_marl.utils.numbers`): the verifiers compare
# answers with the gold answers these loaders produce under the same rules (integers as digits, decimals without
# trailing zeros, fractions reduced, floats rounded to 6 places, no scientific notation, at most 50 digits).


# ----------------------------------------------------------------------------------------------------------------
# GSM8K
# ----------------------------------------------------------------------------------------------------------------


def parse_gsm8k_answer(answer_text: str) -> str:
    """The final answer of a GSM8K solution: the text after its last `####`, normalised (`"1,200"` -> `"1200"`).

    Args:
        answer_text (`str`): A GSM8K `answer` (the worked solution ending in `#### <answer>`).

    Returns:
        `str`: The final answer, normalized with [`normalize_number`] (`trl_marl.utils.numbers`) when it is a number
        (else stripped, commas removed).

    Raises:
        ValueError: The text has no `####`.
    """
    if "####" not in answer_text:
        raise ValueError(f"A GSM8K answer ends with '#### <answer>'; got {answer_text[-80:]!r}.")
    final = answer_text.rsplit("####", 1)[1].strip()
    return normalize_number(final) or final.replace(",", "")


def _gsm8k_row(example: Mapping[str, Any]) -> dict[str, str]:
    raw = str(example["answer"])
    return {"question": str(example["question"]).strip(), "answer": parse_gsm8k_answer(raw), "answer_text": raw}


def load_gsm8k(
    split: str = "train",
    config: str = "main",
    max_rows: int | None = None,
    dataset_name: str = "openai/gsm8k",
    data_files: str | Sequence[str] | None = None,
) -> datasets.Dataset:
    """Load GSM8K (Cobbe et al., 2021) for the debate: MAPoRL's math benchmark (train 7,473 rows, test 1,319).

    `openai/gsm8k` has the configs `main` and `socratic` (sub-questions in the solutions), the splits `train` and
    `test`, and the columns `question` and `answer` (the worked solution, ending in `#### 72`).

    Args:
        split (`str`): The split to load.
        config (`str`): The dataset config (`"main"` or `"socratic"`).
        max_rows (`int`, *optional*): Keep only the first `max_rows` rows.
        dataset_name (`str`): The dataset (a Hub name or a local path with the same columns).
        data_files (`str` or `list[str]`, *optional*): Read these local files instead (`.jsonl`, `.json`, `.csv` or
            `.parquet`, see `trl_marl.data.files`; e.g. a copy of GSM8K with `question` and `answer` per row);
            `dataset_name`, `config` and `split` are then not used.

    Returns:
        `datasets.Dataset`: `question`, `answer` (the final answer, e.g. `"72"`, commas removed) and `answer_text`
        (the raw solution).
    """
    import datasets

    _check_max_rows(max_rows)
    if data_files is not None:
        from .files import load_data_files

        dataset = load_data_files(data_files)
        name = str(data_files)
    else:
        dataset = datasets.load_dataset(dataset_name, config, split=split)
        name = dataset_name
    _check_columns(dataset, ("question", "answer"), "load_gsm8k", name, split)
    dataset = first_rows(dataset, max_rows)
    extra = [c for c in dataset.column_names if c not in ("question", "answer")]
    return dataset.map(_gsm8k_row, remove_columns=extra)


# ----------------------------------------------------------------------------------------------------------------
# TinyGSM
# ----------------------------------------------------------------------------------------------------------------


def _entry_point(code: str) -> str | None:
    """The function a TinyGSM solution defines and that computes the answer (parsed, never run).

    The last top-level function that takes no required argument, preferring `simple_math_problem` (the name TinyGSM
    uses); `None` when the code does not parse or defines no such function.
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            args = node.args
            required = len(args.posonlyargs) + len(args.args) - len(args.defaults)
            required += sum(default is None for default in args.kw_defaults)
            if required == 0:
                names.append(node.name)
    if "simple_math_problem" in names:
        return "simple_math_problem"
    return names[-1] if names else None


def tinygsm_answers(
    codes: Sequence[str],
    limits: SandboxLimits | None = None,
    max_workers: int | None = None,
) -> list[str | None]:
    """The answers of TinyGSM solutions: what each solution's function returns, run in the sandbox.

    Dataset code never runs in this process: each solution runs in its own sandboxed interpreter
    (`trl_marl.sandbox.run_programs`, with its resource limits, namespaces and guards), followed by a call of
    its entry point (`simple_math_problem`, see `_entry_point`) that prints the result after a random marker. The
    printed value is read back with `ast.literal_eval` and normalized with [`normalize_number`].

    Args:
        codes (`Sequence[str]`): The solutions (TinyGSM's `code` column).
        limits (`SandboxLimits`, *optional*): Limits of each run (default: 5 s wall time, 256 MiB memory).
        max_workers (`int`, *optional*): Solutions run at the same time (default: the number of CPUs).

    Returns:
        `list[str | None]`: One answer per solution; `None` where the code does not parse, defines no function,
        fails, times out, or returns something that is not a finite number.
    """
    from ..sandbox import SandboxLimits, run_programs

    if limits is None:
        limits = SandboxLimits(wall_time=5.0, cpu_time=5.0, memory_mb=256)
    marker = f"__trl_marl_answer_{secrets.token_hex(8)}__"
    answers: list[str | None] = [None] * len(codes)
    programs, where = [], []
    for index, code in enumerate(codes):
        entry = _entry_point(str(code))
        if entry is None:
            continue
        programs.append(f"{code}\n\nprint({marker!r} + repr({entry}()))\n")
        where.append(index)
    if not programs:
        return answers
    results = run_programs(programs, [None] * len(programs), limits=limits, max_workers=max_workers)
    for index, result in zip(where, results):
        if result.reason != "ok":
            continue
        lines = [line for line in result.stdout.splitlines() if line.startswith(marker)]
        if not lines:
            continue
        try:
            value = ast.literal_eval(lines[-1][len(marker) :].strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        answers[index] = normalize_number(value)
    return answers


def load_tinygsm(
    split: str = "train",
    max_rows: int | None = 12_800,
    start: int = 0,
    dataset_name: str = "TinyGSM/TinyGSM",
    streaming: bool | None = None,
    limits: SandboxLimits | None = None,
    max_workers: int | None = None,
    drop_failed: bool = True,
) -> datasets.Dataset:
    """Load TinyGSM (Liu et al., 2023) with gold answers computed in the sandbox.

    `TinyGSM/TinyGSM` (one split, `train`, 12.3M rows) has the columns `question` and `code`, a Python function
    (`def simple_math_problem() -> int:`) whose return value is the answer. It holds no answer column, so the
    answers are computed by running each solution in the sandbox ([`tinygsm_answers`]; never in this process):
    about 0.1 s of CPU per row, i.e. minutes for MAPoRL's 12,800 rows (cache the result with `save_to_disk`).
    MAPoRL trains on the first 12,800 rows, the default here.

    Args:
        split (`str`): The split to load.
        max_rows (`int`, *optional*): Keep only `max_rows` rows (from `start`); `None` for all 12.3M.
        start (`int`): Skip the first `start` rows.
        dataset_name (`str`): The dataset (a Hub name or a local path with the same columns).
        streaming (`bool`, *optional*): Stream the rows instead of downloading the whole dataset (several GB).
            Default: stream when `max_rows` is given.
        limits (`SandboxLimits`, *optional*): Sandbox limits of each solution (see [`tinygsm_answers`]).
        max_workers (`int`, *optional*): Solutions run at the same time.
        drop_failed (`bool`): Drop the rows whose answer could not be computed (else their `answer` is `None`).

    Returns:
        `datasets.Dataset`: `question`, `answer` (e.g. `"18"` or `"2.5"`) and `code` (the raw solution).
    """
    import datasets

    _check_max_rows(max_rows)
    if start < 0:
        raise ValueError(f"`start` must be >= 0, got {start}.")
    if streaming is None:
        streaming = max_rows is not None
    dataset = datasets.load_dataset(dataset_name, split=split, streaming=streaming)
    if streaming:
        stop = None if max_rows is None else start + max_rows
        rows = [{"question": r["question"], "code": r["code"]} for r in islice(iter(dataset), start, stop)]
        dataset = datasets.Dataset.from_list(rows, features=datasets.Features(
            {"question": datasets.Value("string"), "code": datasets.Value("string")}))
    else:
        _check_columns(dataset, ("question", "code"), "load_tinygsm", dataset_name, split)
        end = len(dataset) if max_rows is None else min(len(dataset), start + max_rows)
        dataset = dataset.select(range(min(start, end), end))
    _check_columns(dataset, ("question", "code"), "load_tinygsm", dataset_name, split)
    answers = tinygsm_answers(dataset["code"], limits=limits, max_workers=max_workers)
    dataset = datasets.Dataset.from_dict(
        {"question": [str(q).strip() for q in dataset["question"]], "answer": answers, "code": dataset["code"]},
        features=datasets.Features({name: datasets.Value("string") for name in ("question", "answer", "code")}),
    )
    if drop_failed:
        keep = [i for i, answer in enumerate(answers) if answer is not None]
        if len(keep) < len(answers):
            dataset = dataset.select(keep)
    return dataset


# ----------------------------------------------------------------------------------------------------------------
# ANLI
# ----------------------------------------------------------------------------------------------------------------

ANLI_QUESTION_TEMPLATE = (
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n"
    "Given the premise, is the hypothesis true (entailment), possibly true (neutral), or false (contradiction)? "
    "Answer entailment, neutral or contradiction."
)
"""How [`load_anli`] builds the question from a premise and a hypothesis (names the three labels)."""


def _anli_row(example: Mapping[str, Any], template: str) -> dict[str, str]:
    question = template.format(premise=str(example["premise"]).strip(), hypothesis=str(example["hypothesis"]).strip())
    return {"question": question, "answer": ANLI_LABELS[int(example["label"])]}


def _anli_splits(round: int | Sequence[int], split: str) -> list[str]:
    """The Hub splits of ANLI that `round` and `split` name (see [`load_anli`])."""
    if re.fullmatch(r"\w+_r\d+", split):
        return [split]
    rounds = [round] if isinstance(round, int) else list(round)
    if not rounds or any(r not in (1, 2, 3) for r in rounds):
        raise ValueError(f"ANLI has rounds 1, 2 and 3; got round={round!r}.")
    if split not in ("train", "dev", "test"):
        raise ValueError(f"`split` must be 'train', 'dev', 'test' or a full split name like 'dev_r1'; got {split!r}.")
    return [f"{split}_r{r}" for r in rounds]


def load_anli(
    round: int | Sequence[int] = 1,
    split: str = "train",
    max_rows: int | None = None,
    dataset_name: str = "facebook/anli",
    question_template: str = ANLI_QUESTION_TEMPLATE,
    data_files: str | Sequence[str] | None = None,
) -> datasets.Dataset:
    """Load ANLI (Nie et al., 2020), MAPoRL's natural language inference benchmark.

    `facebook/anli` has the splits `train_r1`, `dev_r1`, `test_r1`, ..., `test_r3` (rounds 1-3; round 1: 16,946 /
    1,000 / 1,000 rows) and the columns `uid`, `premise`, `hypothesis`, `label` (0 entailment, 1 neutral,
    2 contradiction) and `reason`. Rows with another label (e.g. -1, unlabelled) are dropped.

    Args:
        round (`int` or `Sequence[int]`): The round(s) to load (1, 2, 3); several rounds are concatenated in order.
        split (`str`): `"train"`, `"dev"` or `"test"` (the round suffix is added), or a full split name such as
            `"dev_r2"` (then `round` is ignored).
        max_rows (`int`, *optional*): Keep only the first `max_rows` rows (after concatenating the rounds).
        dataset_name (`str`): The dataset (a Hub name or a local path with the same columns).
        question_template (`str`): The question, a format string with the fields `premise` and `hypothesis`.
        data_files (`str` or `list[str]`, *optional*): Read these local files instead (`.jsonl`, `.json`, `.csv` or
            `.parquet`, see `trl_marl.data.files`) with ANLI's columns `premise`, `hypothesis` and `label`;
            `dataset_name`, `round` and `split` are then not used.

    Returns:
        `datasets.Dataset`: `question`, `answer` (`"entailment"`, `"neutral"` or `"contradiction"`) and the raw
        columns (`premise`, `hypothesis`, `label`, and `uid`/`reason` when present).
    """
    import datasets

    _check_max_rows(max_rows)
    if data_files is not None:
        from .files import load_data_files

        parts = [load_data_files(data_files)]
        _check_columns(parts[0], ("premise", "hypothesis", "label"), "load_anli", str(data_files), "local file")
    else:
        parts = []
        for name in _anli_splits(round, split):
            part = datasets.load_dataset(dataset_name, split=name)
            _check_columns(part, ("premise", "hypothesis", "label"), "load_anli", dataset_name, name)
            parts.append(part)
    dataset = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    labels = dataset["label"]
    keep = [i for i, label in enumerate(labels) if label is not None and int(label) in (0, 1, 2)]
    if len(keep) < len(labels):
        dataset = dataset.select(keep)
    dataset = first_rows(dataset, max_rows)
    return dataset.map(_anli_row, fn_kwargs={"template": question_template})
