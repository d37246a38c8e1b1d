"""HumanEval and MBPP in HumanEval's schema, for the cooperative coding task
([`~trl_marl.envs.coding.CooperativeCodingEnv`]) and [`~trl_marl.rewards.execution.UnitTestReward`]."""


from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..utils.code import parse_or_none, top_level_function

if TYPE_CHECKING:
    import datasets

HUMANEVAL_COLUMNS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
"""The columns of HumanEval, the schema [`CooperativeCodingEnv`] reads."""


def _check_columns(dataset: datasets.Dataset, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise KeyError(f"{name} should have the column(s) {missing}; it has {dataset.column_names}.")


def load_humaneval(split: str = "test", path: str = "openai/openai_humaneval",
                   data_files: str | Sequence[str] | None = None, **load_kwargs: Any) -> datasets.Dataset:
    """HumanEval (164 Python tasks) with the columns `task_id`, `prompt`, `canonical_solution`, `test`,
    `entry_point`.

    Args:
        split (`str`): The split (HumanEval has only `test`).
        path (`str`): The Hub dataset.
        data_files (`str`, *optional*): A local copy instead (e.g. the original `HumanEval.jsonl.gz`; `.jsonl`,
            `.json`, `.csv` or `.parquet`, see `trl_marl.data.files`); `path`, `split` and `load_kwargs` are then not
            used.
        **load_kwargs: More arguments for `datasets.load_dataset`.

    Returns:
        `datasets.Dataset`
    """
    import datasets

    if data_files is not None:
        from .files import load_data_files

        dataset = load_data_files(data_files)
    else:
        dataset = datasets.load_dataset(path, split=split, **load_kwargs)
    _check_columns(dataset, HUMANEVAL_COLUMNS, f"HumanEval ({data_files or path})")
    return dataset


def _mbpp_entry_point(code: str, tests: Sequence[str]) -> str:
    """The function MBPP's tests call: the first top-level function of `code` named in a test (else the last one)."""
    tree = parse_or_none(textwrap.dedent(code))
    if tree is not None:
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    else:
        names = re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", code, flags=re.MULTILINE)
    if not names:
        raise ValueError(f"No function definition in the MBPP solution:\n{code}")
    for name in names:
        if any(re.search(rf"\b{re.escape(name)}\s*\(", test) for test in tests):
            return name
    return names[-1]


def _mbpp_signature(code: str, entry_point: str) -> str:
    tree = parse_or_none(textwrap.dedent(code))
    node = top_level_function(tree, entry_point)
    if node is None:
        match = re.search(rf"^def\s+{re.escape(entry_point)}\s*\(.*?\)\s*(->[^:]*)?:", code, flags=re.M | re.S)
        return match.group(0) if match else f"def {entry_point}(*args):"
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{keyword} {entry_point}({ast.unparse(node.args)}){returns}:"


def mbpp_to_humaneval(example: Mapping[str, Any], num_examples: int = 1) -> dict[str, Any]:
    """Map one MBPP row (`full` or `sanitized` config) to the HumanEval schema [`CooperativeCodingEnv`] reads.

    - `entry_point`: the function of `code` that the tests call;
    - `prompt`: `def <signature>:` with a docstring holding the task text (`text`, or `prompt` in the sanitized
      config) and the first `num_examples` tests as examples;
    - `test`: the setup code (`test_setup_code`, or `test_imports`) then `def check(candidate):` with the asserts
      of `test_list` (they call the function by name, as MBPP's tests do);
    - `canonical_solution`: `code`; `task_id`: `"MBPP/<id>"`; `test_list` is kept.

    Args:
        example (`Mapping`): An MBPP row.
        num_examples (`int`): How many tests to show in the docstring.
    """
    text = example.get("text") or example.get("prompt") or ""
    code = str(example["code"]).replace("\r\n", "\n")
    tests = [str(t).strip() for t in example["test_list"]]
    entry_point = _mbpp_entry_point(code, tests)
    doc = textwrap.fill(" ".join(str(text).split()), width=100, initial_indent="    ", subsequent_indent="    ")
    doc_lines = [doc]
    if num_examples > 0 and tests:
        doc_lines += ["", "    Examples:", *(f"    {t}" for t in tests[:num_examples])]
    docstring = "\n".join(doc_lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    prompt = f'{_mbpp_signature(code, entry_point)}\n    """\n{docstring}\n    """\n'
    setup = example.get("test_setup_code") or ""
    if not setup and example.get("test_imports"):
        setup = "\n".join(example["test_imports"])
    check = "def check(candidate):\n" + ("\n".join(f"    {t}" for t in tests) if tests else "    pass") + "\n"
    test = (setup.strip() + "\n\n\n" if setup.strip() else "") + check
    return {
        "task_id": f"MBPP/{example['task_id']}",
        "prompt": prompt,
        "canonical_solution": code,
        "test": test,
        "entry_point": entry_point,
        "test_list": tests,
    }


def load_mbpp(split: str = "test", config: str = "full", path: str = "google-research-datasets/mbpp",
              num_examples: int = 1, **load_kwargs: Any) -> datasets.Dataset:
    """MBPP mapped to the HumanEval schema (`task_id`, `prompt`, `canonical_solution`, `test`, `entry_point`, plus
    `text` and `test_list`); see [`mbpp_to_humaneval`].

    Args:
        split (`str`): `train`, `test`, `validation` or `prompt`.
        config (`str`): `full` (974 tasks) or `sanitized` (427 hand-checked tasks).
        path (`str`): The Hub dataset (`mbpp` is the legacy name of `google-research-datasets/mbpp`).
        num_examples (`int`): How many of the tests to show in each prompt's docstring.
        **load_kwargs: More arguments for `datasets.load_dataset`.

    Returns:
        `datasets.Dataset`
    """
    import datasets

    dataset = datasets.load_dataset(path, config, split=split, **load_kwargs)
    _check_columns(dataset, ("task_id", "code", "test_list"), f"MBPP ({path}, {config})")
    text_column = "text" if "text" in dataset.column_names else "prompt"
    _check_columns(dataset, (text_column,), f"MBPP ({path}, {config})")
    mapped = dataset.map(
        lambda example: {**mbpp_to_humaneval(example, num_examples), "text": example[text_column]},
        remove_columns=dataset.column_names,
    )
    return mapped
