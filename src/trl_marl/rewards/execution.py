"""The unit-test reward: a completion's program run against its row's tests in the sandbox ([`trl_marl.sandbox`]).

The sandbox (limits, test specifications, the runner, the threat model in `docs/sandbox.md`) is the package
`trl_marl.sandbox`; this module only turns completions into programs (`trl_marl.utils.code`) and results into
rewards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..sandbox import ExecutionResult, SandboxLimits, TestSpec, run_programs
from ..utils.code import build_humaneval_program, extract_code
from ..utils.columns import MULTI_AGENT_KWARGS, AgentSelector, column, is_missing, select_texts
from ..utils.text import completion_text

__all__ = ["UnitTestReward"]


# ---------------------------------------------------------------------------------------------------- reward
class UnitTestReward:
    """Fraction of a row's unit tests that the completion's program passes, run in the sandbox.

    A TRL reward function (`reward(prompts, completions, **columns) -> list[float]`, `name = "unit_tests"`).
    Each completion (a string or chat messages, Markdown fences stripped) becomes a program checked against its
    row's tests:

    - HumanEval rows (columns `test` and `entry_point`): [`build_humaneval_program`] with the row's HumanEval
      prompt (the `prompt_column` if the call has it, else the string prompt of the call), then the row's `test`
      with `check` split into one test per assert statement;
    - MBPP rows (column `test_list`, optional `test_setup_code`): the code as is, one test per assert.

    With `code_column` (a column holding complete programs, e.g. the combined helper + main program of the
    cooperative coding environment) or `program_builder` (`program_builder(code, row) -> program`, with `code`
    the completion's text without fences and `row` the row's columns plus `"prompt"`), the program comes from
    there instead. Rows whose test cells are missing (`None`) score `None`. The results of the last call are kept
    in `last_results` (one [`ExecutionResult`] per completion, `None` where not run) for feedback.

    Args:
        limits (`SandboxLimits`, *optional*): Sandbox limits (defaults if `None`).
        partial_credit (`bool`): Reward the fraction of tests passed; `False` gives 1 only when all pass, else 0.
        max_workers (`int`, *optional*): Programs run at the same time (default `os.cpu_count()`).
        test_column, entry_point_column, prompt_column (`str`): HumanEval's columns.
        test_list_column, setup_column (`str`): MBPP's columns.
        code_column (`str`, *optional*): A column of complete programs to run instead of the completions.
        program_builder (`Callable[[str, dict], str]`, *optional*): Builds the program from the completion's code
            and the row.
        agent_index (`int`, `"concat"` or `None`): Which completion is scored (see `AgentSelector`).

    Example:

    ```python
    reward = UnitTestReward(limits=SandboxLimits(wall_time=2))
    reward(prompts=["def add(a, b):\\n"], completions=["    return a + b\\n"],
           test=["def check(candidate):\\n    assert candidate(1, 2) == 3\\n"], entry_point=["add"])  # [1.0]
    ```
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        partial_credit: bool = True,
        max_workers: int | None = None,
        test_column: str = "test",
        entry_point_column: str = "entry_point",
        prompt_column: str = "prompt",
        test_list_column: str = "test_list",
        setup_column: str = "test_setup_code",
        code_column: str | None = None,
        program_builder: Callable[[str, dict[str, Any]], str] | None = None,
        agent_index: AgentSelector = None,
    ) -> None:
        self.name = "unit_tests"
        self.__name__ = "unit_tests"
        self.limits = limits if limits is not None else SandboxLimits()
        self.partial_credit = partial_credit
        self.max_workers = max_workers
        self.test_column = test_column
        self.entry_point_column = entry_point_column
        self.prompt_column = prompt_column
        self.test_list_column = test_list_column
        self.setup_column = setup_column
        self.code_column = code_column
        self.program_builder = program_builder
        self.agent_index = agent_index
        self.last_results: list[ExecutionResult | None] = []

    def _check_columns(self, kwargs: Mapping[str, Any]) -> None:
        humaneval = self.test_column in kwargs and self.entry_point_column in kwargs
        if humaneval or self.test_list_column in kwargs:
            return
        if self.test_column in kwargs:
            missing = f"{self.entry_point_column!r} (HumanEval rows need it besides {self.test_column!r})"
        else:
            missing = (f"{self.test_column!r} and {self.entry_point_column!r} (HumanEval) or "
                       f"{self.test_list_column!r} (MBPP)")
        available = sorted(k for k in kwargs if k not in MULTI_AGENT_KWARGS)
        raise KeyError(f"{type(self).__name__} needs the dataset column {missing}; the reward function received "
                       f"the columns {available}. Pass the column names to the reward if they differ "
                       "(e.g. `test_column=...`).")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion by the unit tests of its row.

        Args:
            prompts (`Sequence`): The prompts (HumanEval's prompt when it is a string and no `prompt_column`).
            completions (`Sequence`): The completions (strings or chat messages).
            **kwargs: The dataset columns and trl-marl's multi-agent arguments.

        Returns:
            `list[float | None]`: Fraction of tests passed (or 1/0 without partial credit); `None` for rows
            without tests.

        Raises:
            KeyError: The call has neither HumanEval's nor MBPP's test columns (the message names them).
        """
        owner = type(self).__name__
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", owner)
        n = len(texts)
        self._check_columns(kwargs)

        def optional(name: str | None) -> list[Any]:
            return column(kwargs, name, owner, n) if name and name in kwargs else [None] * n

        he_tests, entries = optional(self.test_column), optional(self.entry_point_column)
        mbpp_tests, setups = optional(self.test_list_column), optional(self.setup_column)
        codes = column(kwargs, self.code_column, owner, n) if self.code_column else None
        if self.prompt_column in kwargs:
            row_prompts = column(kwargs, self.prompt_column, owner, n)
        else:
            row_prompts = [p if isinstance(p, str) else "" for p in (list(prompts) + [""] * n)[:n]]

        programs: list[str] = []
        specs: list[TestSpec] = []
        todo: list[int] = []
        for i, text in enumerate(texts):
            prompt = "" if is_missing(row_prompts[i]) else str(row_prompts[i])
            entry: str | None = None
            if not is_missing(he_tests[i]) and not is_missing(entries[i]):
                entry = str(entries[i])
                spec = TestSpec.humaneval(he_tests[i], entry, prompt=prompt)
            elif not is_missing(mbpp_tests[i]):
                spec = TestSpec.mbpp(mbpp_tests[i], None if is_missing(setups[i]) else setups[i])
            else:
                continue
            if codes is not None:
                program = completion_text(codes[i])
            elif self.program_builder is not None:
                row = {key: _cell(value, i) for key, value in kwargs.items() if key not in MULTI_AGENT_KWARGS}
                row.setdefault("prompt", prompt)
                program = self.program_builder(extract_code(text, entry), row)
            elif entry is not None:
                program = build_humaneval_program(prompt, text, entry)
            else:
                program = extract_code(text)
            programs.append(program)
            specs.append(spec)
            todo.append(i)
        results = run_programs(programs, specs, self.limits, self.max_workers) if programs else []
        self.last_results = [None] * n
        rewards: list[float | None] = [None] * n
        for i, result in zip(todo, results):
            self.last_results[i] = result
            rewards[i] = result.fraction if self.partial_credit else float(result.all_passed)
        return rewards


def _cell(values: Any, index: int) -> Any:
    try:
        return values[index]
    except (TypeError, IndexError, KeyError):
        return values
