"""Cooperative coding (MAGRPO, arXiv 2508.04652): a helper agent and a main agent write one program together.

Agent 0 (the *helper agent*) writes an auxiliary function, `aux` by default; agent 1 (the *main agent*) writes the
function the task asks for (the row's `entry_point`), which may call the helper. Neither sees the other's code
at turn 1. The *combined program* is::

    <the task prompt's imports and other definitions>
    <helper code>
    <main code>

(each part with its Markdown code fences stripped), and is run against the row's unit tests in a sandbox
([`trl_marl.sandbox.run_programs`]: separate processes with time and memory limits; model code never
runs in this process). With several turns, the environment's feedback on the combined program (a syntax error,
the first failing test and its error, or "All 3 tests passed.") is shown to both agents together with their own and
their partner's last code, and both revise.

Rows follow HumanEval's schema: `prompt` (signature and docstring of the function to write), `entry_point` (its
name), `test` (a `check(candidate)` function) and, for CodeBLEU, `canonical_solution`. [`load_humaneval`] loads
HumanEval, [`load_mbpp`] maps MBPP onto the same schema.

Rewards (each a TRL reward function reading the team's completions from `agent_completions`):

| term | value | class |
|---|---|---|
| `helper_defined` | 1 if the helper code parses and defines `aux` at top level, else 0 | [`HelperDefinedReward`] |
| `main_defined` | 1 if the main code parses and defines `entry_point` at top level, else 0 | [`MainDefinedReward`] |
| `syntax` | 1 if the combined program parses, else 0 | [`CombinedSyntaxReward`] |
| `tests` | passed / total unit tests of the combined program (0 if it does not parse) | [`PassRateReward`] |
| `helper_used` | 1 if `entry_point` refers to `aux` (and the main code does not rebind it) | [`HelperUsedReward`] |
| `nontrivial` | 1 if `entry_point` is defined, not a mere `return aux(...)` | [`NonTrivialMainReward`] |
| `codebleu` | CodeBLEU of helper + main against the reference solution | [`CodeBLEUTermReward`] |

[`CodingTeamReward`] is their weighted sum, r = sum_k w_k * term_k (defaults in `DEFAULT_CODING_WEIGHTS`); its
[`~CodingTeamReward.reward_funcs`] gives the terms as separate reward functions, so that a trainer logs each.

Programs are executed once: a [`ProgramExecutor`] caches results per (program, tests), so the reward of a joint
action and the feedback the rollout asks for right after it share one sandbox run.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ..sandbox.executor import ExecutionResultLike, ProgramExecutor, Runner, shared_executor
from ..sandbox.feedback import describe_result
from ..utils.code import extract_code, parse_or_none, prompt_preamble, syntax_error
from ..utils.text import completion_text
from .base import MultiAgentEnv, Prompt, Transcript

if TYPE_CHECKING:
    import datasets

HELPER_AGENT = 0
"""Index of the agent that writes the helper function."""
MAIN_AGENT = 1
"""Index of the agent that writes the main function (the row's `entry_point`)."""

HELPER_TEMPLATE = """\
You are the helper agent in a team of two Python programmers. Your partner will implement the function \
`{entry_point}` below, and it can call one helper function that you write.

Problem:
```python
{prompt}
```

Write a helper function named `{helper_name}` that does a useful part of the work. Write only \
`def {helper_name}(...)` and the imports it needs, in one ```python code block. Do not write `{entry_point}`."""
"""Turn-1 prompt of the helper agent. Placeholders: `{prompt}`, `{entry_point}`, `{helper_name}`."""

MAIN_TEMPLATE = """\
You are the main agent in a team of two Python programmers. Implement the function `{entry_point}` below. \
Your partner writes a helper function `{helper_name}(...)` that is defined before your code.

Problem:
```python
{prompt}
```

Call `{helper_name}(...)` where it helps, and do not define `{helper_name}` yourself. Write the complete function \
`def {entry_point}(...)` and the imports it needs, in one ```python code block."""
"""Turn-1 prompt of the main agent. Placeholders: `{prompt}`, `{entry_point}`, `{helper_name}`."""

REVISION_TEMPLATE = """\
Turn {turn}. Your previous {own_role}:
```python
{own_code}
```

Your partner's previous {partner_role}:
```python
{partner_code}
```

Feedback on the combined program:
{feedback}

Revise your {own_role} and write it again in one ```python code block."""
"""Appended (after a blank line) to the turn-1 prompt at later turns, in string mode. Placeholders: `{turn}`
(1-based number of the coming turn), `{own_role}`, `{partner_role}` (e.g. "helper function `aux`"),
`{own_code}`, `{partner_code}` (fences stripped), `{feedback}`."""

CHAT_REVISION_TEMPLATE = """\
Turn {turn}. Your partner's previous {partner_role}:
```python
{partner_code}
```

Feedback on the combined program:
{feedback}

Revise your {own_role} and write it again in one ```python code block."""
"""The last user message at later turns in chat mode (the agent's own previous answer is the assistant message
before it). Same placeholders as `REVISION_TEMPLATE`."""

NO_CODE = "# (no code)"
"""Shown in prompts in place of an empty piece of code."""

DEFAULT_CODING_WEIGHTS: dict[str, float] = {
    "helper_defined": 0.25,
    "main_defined": 0.25,
    "syntax": 0.5,
    "tests": 2.0,
    "helper_used": 0.5,
    "nontrivial": 0.5,
    "codebleu": 0.0,
}
"""Default weights of [`CodingTeamReward`]: structure (0.25 + 0.25), syntax (0.5), tests (2.0), cooperation
(0.5 + 0.5); CodeBLEU off. The maximum team reward is 4.0."""


# ---------------------------------------------------------------------------------------------------- code analysis
def _top_level_function(tree: ast.Module | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last top-level definition of function `name` (the one Python keeps), or `None`."""
    found = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found = node
    return found


def _binds(tree: ast.AST, name: str) -> bool:
    """Whether `tree` binds `name` (a def, class, assignment, import, parameter or loop variable of that name)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name:
            return True
        if isinstance(node, ast.arg) and node.arg == name:
            return True
    return False


def _refers_to(func: ast.AST, name: str) -> bool:
    """Whether the body of `func` reads the name `name` (a call `name(...)`, or passing `name` as a value)."""
    return any(isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
               for node in ast.walk(func))


def _calls(node: ast.AST | None, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def is_trivial_body(func: ast.FunctionDef | ast.AsyncFunctionDef, helper_name: str) -> bool:
    """Whether a function does no work of its own: after its docstring and `pass`/`...` statements, its body is

    - empty, or a single `raise`;
    - a single `return helper(...)` or `helper(...)` (a wrapper that only forwards to the helper);
    - `x = helper(...)` followed by `return x`.

    Args:
        func (`ast.FunctionDef`): The function.
        helper_name (`str`): The helper's name.
    """
    body = [
        stmt for stmt in func.body
        if not (isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)))
    ]
    if not body:
        return True
    if len(body) == 1:
        stmt = body[0]
        if isinstance(stmt, ast.Raise):
            return True
        return isinstance(stmt, (ast.Return, ast.Expr)) and _calls(stmt.value, helper_name)
    if len(body) == 2:
        first, second = body
        return (
            isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)
            and _calls(first.value, helper_name) and isinstance(second, ast.Return)
            and isinstance(second.value, ast.Name) and second.value.id == first.targets[0].id
        )
    return False


# ---------------------------------------------------------------------------------------------------- solutions
@dataclass(frozen=True)
class CodingSolution:
    """A joint action of the coding team, assembled and statically analysed (nothing is executed).

    Args:
        helper_code (`str`): The helper agent's code (fences stripped).
        main_code (`str`): The main agent's code (fences stripped).
        program (`str`): The combined program: prompt preamble, helper code, main code.
        helper_name (`str`): The name the helper function must have.
        entry_point (`str`): The name of the function the main agent writes.
        helper_error (`str` or `None`): The helper code's syntax error, if any.
        main_error (`str` or `None`): The main code's syntax error, if any.
        program_error (`str` or `None`): The combined program's syntax error, if any.
        helper_defined (`bool`): The helper code defines `helper_name` at top level.
        main_defined (`bool`): The main code defines `entry_point` at top level.
        helper_used (`bool`): `entry_point` refers to `helper_name`, and the main code does not rebind that name.
        main_trivial (`bool`): `entry_point` is missing or is a trivial wrapper (see [`is_trivial_body`]).
    """

    helper_code: str
    main_code: str
    program: str
    helper_name: str
    entry_point: str
    helper_error: str | None
    main_error: str | None
    program_error: str | None
    helper_defined: bool
    main_defined: bool
    helper_used: bool
    main_trivial: bool

    @property
    def parses(self) -> bool:
        """Whether the combined program parses."""
        return self.program_error is None


@lru_cache(maxsize=16384)
def analyze_solution(helper_code: str, main_code: str, entry_point: str, helper_name: str = "aux",
                     preamble: str = "") -> CodingSolution:
    """Assemble and statically analyse a helper + main pair (cached; nothing is executed).

    Args:
        helper_code (`str`): The helper agent's code (fences already stripped).
        main_code (`str`): The main agent's code (fences already stripped).
        entry_point (`str`): The name of the function the main agent must define.
        helper_name (`str`): The name of the helper function.
        preamble (`str`): Code put before both (see [`prompt_preamble`]).

    Returns:
        [`CodingSolution`]
    """
    parts = [part for part in (preamble.strip("\n"), helper_code, main_code) if part.strip()]
    program = "\n\n\n".join(parts) + "\n"
    helper_tree, main_tree = parse_or_none(helper_code), parse_or_none(main_code)
    main_func = _top_level_function(main_tree, entry_point)
    helper_used = False
    if main_func is not None and main_tree is not None:
        # a main that (re)defines the helper's name shadows the partner's helper: that is not cooperation
        rebinds = _binds(main_tree, helper_name)
        helper_used = _refers_to(main_func, helper_name) and not rebinds
    return CodingSolution(
        helper_code=helper_code,
        main_code=main_code,
        program=program,
        helper_name=helper_name,
        entry_point=entry_point,
        helper_error=syntax_error(helper_code),
        main_error=syntax_error(main_code),
        program_error=syntax_error(program),
        helper_defined=_top_level_function(helper_tree, helper_name) is not None,
        main_defined=main_func is not None,
        helper_used=helper_used,
        main_trivial=main_func is None or is_trivial_body(main_func, helper_name),
    )


# ---------------------------------------------------------------------------------------------------- environment
class CooperativeCodingEnv(MultiAgentEnv):
    """MAGRPO's cooperative coding task: agent 0 writes a helper function, agent 1 the main function using it.

    Turn 1: agent 0 gets `helper_template`, agent 1 `main_template`, both filled with the row's `prompt`,
    `entry_point` and the helper's name. Later turns: each agent gets its turn-1 prompt followed by
    `revision_template` showing its own code and its partner's code of the *last* turn and the feedback on the
    combined program after that turn (earlier turns are not repeated, so prompts do not grow with the number of
    turns). In chat mode (`chat=True`) turn 1 is one user message; later turns are
    `[user: turn-1 prompt, assistant: the agent's last answer, user: chat_revision_template]`.

    [`~CooperativeCodingEnv.feedback`] runs the combined program in the sandbox (through `executor`, which caches
    results, so the reward's run is reused) and reports, one line each: the helper's and the main function's
    syntax errors or missing definitions, a note when the main function does not call the helper, and then the
    test line of [`describe_result`] (`All 3 tests passed.`, or `Tests passed: 1/3. First failure: <assert> ->
    <error>`, a timeout, ...) or why the tests did not run. Both agents get the same feedback.

    Episodes last `num_turns` turns. To stop a node once the team solves the task, use the trainer's
    `early_stop_threshold` on the team reward (stopping in `is_done` would credit a solved joint action less
    future reward than its unsolved siblings).

    Args:
        num_turns (`int`): Number of turns.
        helper_name (`str`): The name of the helper function agent 0 writes.
        chat (`bool`): Build chat messages instead of strings.
        helper_template (`str`): Turn-1 prompt of the helper agent (placeholders `{prompt}`, `{entry_point}`,
            `{helper_name}`).
        main_template (`str`): Turn-1 prompt of the main agent (same placeholders).
        revision_template (`str`): Text appended at later turns in string mode (placeholders `{turn}`,
            `{own_role}`, `{partner_role}`, `{own_code}`, `{partner_code}`, `{feedback}`).
        chat_revision_template (`str`): The last user message at later turns in chat mode (same placeholders).
        prompt_column (`str`): Column of the task prompt (signature and docstring).
        entry_point_column (`str`): Column of the name of the function to write.
        test_column (`str`): Column of the unit tests (HumanEval's `check(candidate)` code).
        executor (`ProgramExecutor`, *optional*): Runs programs; by default [`shared_executor`] (the sandbox with
            its default limits, one cache for all such environments).
        runner (`Callable`, *optional*): Shortcut for `ProgramExecutor(runner=runner)`.
        limits (`SandboxLimits`, *optional*): Shortcut for `ProgramExecutor(limits=limits)`.
    """

    def __init__(
        self,
        num_turns: int = 1,
        helper_name: str = "aux",
        chat: bool = False,
        helper_template: str = HELPER_TEMPLATE,
        main_template: str = MAIN_TEMPLATE,
        revision_template: str = REVISION_TEMPLATE,
        chat_revision_template: str = CHAT_REVISION_TEMPLATE,
        prompt_column: str = "prompt",
        entry_point_column: str = "entry_point",
        test_column: str = "test",
        executor: ProgramExecutor | None = None,
        runner: Runner | None = None,
        limits: Any = None,
    ) -> None:
        super().__init__(num_agents=2, num_turns=num_turns)
        if not helper_name.isidentifier():
            raise ValueError(f"`helper_name` must be a Python identifier, got {helper_name!r}.")
        if executor is not None and (runner is not None or limits is not None):
            raise ValueError("Pass either `executor` or `runner`/`limits`, not both.")
        self.helper_name = helper_name
        self.chat = chat
        self.helper_template = helper_template
        self.main_template = main_template
        self.revision_template = revision_template
        self.chat_revision_template = chat_revision_template
        self.prompt_column = prompt_column
        self.entry_point_column = entry_point_column
        self.test_column = test_column
        self.required_columns = (prompt_column, entry_point_column, test_column)
        if executor is None:
            executor = shared_executor() if runner is None and limits is None else ProgramExecutor(runner, limits)
        self.executor = executor

    # ----- rows
    def check_row(self, row: Mapping[str, Any]) -> None:
        """Raise a clear error, naming the column, if `row` lacks `prompt`, `entry_point` or `test` (`KeyError`) or
        one of them is not a non-empty string (`ValueError`). (`validate_row`, which trainers call on the column
        names alone, only checks that the columns exist.)"""
        self.validate_row(row)
        for column in self.required_columns:
            self._value(row, column)

    def _value(self, row: Mapping[str, Any], column: str) -> str:
        if column not in row:
            self.validate_row(row)
        value = row[column]
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"{type(self).__name__} needs a non-empty string in the column {column!r}, got {value!r} "
                f"(row {row.get('task_id', '')!r})."
            )
        return value

    def entry_point(self, row: Mapping[str, Any]) -> str:
        """The name of the function the main agent writes."""
        return self._value(row, self.entry_point_column).strip()

    def test_spec(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """What the sandbox needs to test a program of this row: `{"test", "entry_point"}` (HumanEval style)."""
        return {"test": self._value(row, self.test_column), "entry_point": self.entry_point(row)}

    def assemble(self, row: Mapping[str, Any], helper_completion: Any, main_completion: Any) -> CodingSolution:
        """The joint action (helper agent's and main agent's completions) as a [`CodingSolution`].

        Args:
            row (`Mapping`): The dataset row.
            helper_completion (`str` or `list[dict]`): Agent 0's completion.
            main_completion (`str` or `list[dict]`): Agent 1's completion.
        """
        self.check_row(row)
        entry_point = self.entry_point(row)
        preamble = prompt_preamble(self._value(row, self.prompt_column), entry_point)
        return analyze_solution(extract_code(helper_completion), extract_code(main_completion), entry_point,
                                self.helper_name, preamble)

    def execute(self, rows: Sequence[Mapping[str, Any]],
                solutions: Sequence[CodingSolution]) -> list[ExecutionResultLike | None]:
        """Sandbox results of the solutions whose combined program parses (`None` for the others), in one batch."""
        todo = [i for i, s in enumerate(solutions) if s.parses]
        results: list[ExecutionResultLike | None] = [None] * len(solutions)
        if todo:
            ran = self.executor.run([solutions[i].program for i in todo], [self.test_spec(rows[i]) for i in todo])
            for i, result in zip(todo, ran):
                results[i] = result
        return results

    # ----- prompts
    def _role(self, agent_index: int, entry_point: str) -> str:
        if agent_index == HELPER_AGENT:
            return f"helper function `{self.helper_name}`"
        return f"main function `{entry_point}`"

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index` (0: helper, 1: main) at turn `len(transcript) + 1`."""
        if agent_index not in (HELPER_AGENT, MAIN_AGENT):
            raise IndexError(f"{type(self).__name__} has agents 0 (helper) and 1 (main), got {agent_index}.")
        self.check_row(row)
        entry_point = self.entry_point(row)
        template = self.helper_template if agent_index == HELPER_AGENT else self.main_template
        first = template.format(prompt=self._value(row, self.prompt_column).strip("\n"), entry_point=entry_point,
                                helper_name=self.helper_name)
        if len(transcript) == 0:
            return [{"role": "user", "content": first}] if self.chat else first
        last = transcript[-1]
        partner = MAIN_AGENT if agent_index == HELPER_AGENT else HELPER_AGENT
        feedback = last.feedback_for(agent_index)
        if feedback is None:  # a transcript built without the env's feedback
            feedback = self.feedback(row, transcript)
        fields = {
            "turn": len(transcript) + 1,
            "own_role": self._role(agent_index, entry_point),
            "partner_role": self._role(partner, entry_point),
            "own_code": extract_code(last.responses[agent_index]) or NO_CODE,
            "partner_code": extract_code(last.responses[partner]) or NO_CODE,
            "feedback": feedback,
        }
        if self.chat:
            return [
                {"role": "user", "content": first},
                {"role": "assistant", "content": completion_text(last.responses[agent_index])},
                {"role": "user", "content": self.chat_revision_template.format(**fields)},
            ]
        return first + "\n\n" + self.revision_template.format(**fields)

    # ----- feedback
    def describe(self, solution: CodingSolution, result: ExecutionResultLike | None) -> str:
        """The feedback text on a joint action (see the class docstring).

        Args:
            solution (`CodingSolution`): The joint action.
            result (`ExecutionResult` or `None`): Its sandbox result (`None` when the program does not parse).
        """
        lines = []
        if solution.helper_error:
            lines.append(f"Helper code: {solution.helper_error}.")
        elif not solution.helper_defined:
            lines.append(f"Helper code: no function `{solution.helper_name}` is defined.")
        if solution.main_error:
            lines.append(f"Main code: {solution.main_error}.")
        elif not solution.main_defined:
            lines.append(f"Main code: no function `{solution.entry_point}` is defined.")
        elif not solution.helper_used:
            lines.append(f"Main code: `{solution.entry_point}` does not call `{solution.helper_name}`.")
        if not solution.parses:
            if not (solution.helper_error or solution.main_error):
                lines.append(f"Combined program: {solution.program_error}.")
            lines.append("Tests: not run (the combined program does not parse).")
        elif result is None:
            lines.append("Tests: not run.")
        else:
            lines.append(describe_result(result))
        return "\n".join(lines)

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str:
        """Feedback on the combined program of the last turn of `transcript` (run in the sandbox, cached)."""
        responses = transcript[-1].responses
        solution = self.assemble(row, responses[HELPER_AGENT], responses[MAIN_AGENT])
        return self.describe(solution, self.execute([row], [solution])[0])


# ---------------------------------------------------------------------------------------------------- rewards
@dataclass
class CodingBatch:
    """The joint actions a reward function scores, assembled once and executed at most once."""

    env: CooperativeCodingEnv
    rows: list[dict[str, Any]]
    solutions: list[CodingSolution]
    _results: list[ExecutionResultLike | None] | None = field(default=None, repr=False)

    @property
    def results(self) -> list[ExecutionResultLike | None]:
        """Sandbox results (`None` where the program does not parse), computed on first access."""
        if self._results is None:
            self._results = self.env.execute(self.rows, self.solutions)
        return self._results


def coding_batch(env: CooperativeCodingEnv, completions: Sequence[Any], kwargs: Mapping[str, Any],
                 caller: str = "coding reward") -> CodingBatch:
    """Assemble the joint actions of one reward call from its `agent_completions` and dataset columns.

    Args:
        env (`CooperativeCodingEnv`): The environment (helper name, columns, executor).
        completions (`list`): Agent 0's completions (TRL's `completions`; only its length is used).
        kwargs (`Mapping`): The reward call's keyword arguments.
        caller (`str`): Name used in error messages.

    Raises:
        ValueError: Without `agent_completions` for two agents.
        KeyError: When a dataset column the environment reads is missing (the message names it).
    """
    team = kwargs.get("agent_completions")
    if team is None or len(team) < 2:
        raise ValueError(
            f"{caller} scores a helper + main pair: it needs `agent_completions` with one list per agent (helper "
            "first, main second), as trl-marl trainers pass it; got "
            f"{'none' if team is None else f'{len(team)} list(s)'}."
        )
    size = len(team[HELPER_AGENT])
    if len(team[MAIN_AGENT]) != size or (completions is not None and len(completions) != size):
        raise ValueError(f"{caller}: the agents' completion lists have different lengths.")
    columns = (env.prompt_column, env.entry_point_column, env.test_column)
    missing = [c for c in columns if c not in kwargs]
    if missing:
        raise KeyError(
            f"{caller} needs the dataset column(s) {missing}; the reward call got only "
            f"{sorted(k for k in kwargs if k not in ('agent_completions', 'agent_prompts'))}."
        )
    rows = [{c: kwargs[c][i] for c in columns} for i in range(size)]
    solutions = [env.assemble(row, h, m) for row, h, m in zip(rows, team[HELPER_AGENT], team[MAIN_AGENT])]
    return CodingBatch(env, rows, solutions)


class CodingRewardTerm:
    """Base class of the coding reward terms: a TRL reward function scoring helper + main pairs.

    Called as `term(prompts, completions, agent_completions=[helpers, mains], prompt=[...], entry_point=[...],
    test=[...], **kwargs) -> list[float]`, one score per joint action. Subclasses implement `scores(batch)`.

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment whose helper name, columns and executor (with
            its cache) to use; a default one if `None`.
    """

    name = "coding_term"

    def __init__(self, env: CooperativeCodingEnv | None = None) -> None:
        self.env = env if env is not None else CooperativeCodingEnv()
        self.__name__ = self.name

    def scores(self, batch: CodingBatch) -> list[float]:
        """One score per joint action of `batch`."""
        raise NotImplementedError

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return self.scores(coding_batch(self.env, completions, kwargs, type(self).__name__))


class HelperDefinedReward(CodingRewardTerm):
    """1 if the helper agent's code parses and defines the helper function (`aux`) at top level, else 0."""

    name = "helper_defined"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.helper_error is None and s.helper_defined) for s in batch.solutions]


class MainDefinedReward(CodingRewardTerm):
    """1 if the main agent's code parses and defines the row's `entry_point` at top level, else 0."""

    name = "main_defined"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.main_error is None and s.main_defined) for s in batch.solutions]


class CombinedSyntaxReward(CodingRewardTerm):
    """1 if the combined program (prompt preamble + helper + main) parses, else 0."""

    name = "syntax"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.parses) for s in batch.solutions]


class PassRateReward(CodingRewardTerm):
    """Fraction of the unit tests the combined program passes in the sandbox (0 if it does not parse or no test
    ran)."""

    name = "tests"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [0.0 if r is None or r.total <= 0 else float(r.fraction) for r in batch.results]


class HelperUsedReward(CodingRewardTerm):
    """1 if the main function refers to the helper (`aux(...)`, or `aux` passed as a value, anywhere in its body)
    and the main code does not define or assign that name itself, else 0 (static analysis; nothing runs)."""

    name = "helper_used"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.helper_used) for s in batch.solutions]


class NonTrivialMainReward(CodingRewardTerm):
    """1 if the main function is defined and does work of its own, else 0.

    Trivial (0): no `entry_point`, an empty body (docstring, `pass`, `...`, a lone `raise`), or a body that only
    forwards to the helper: `return aux(...)`, `aux(...)`, or `x = aux(...); return x` (see [`is_trivial_body`]).
    A main that solves the task without the helper is non-trivial; [`HelperUsedReward`] scores cooperation.
    """

    name = "nontrivial"

    def scores(self, batch: CodingBatch) -> list[float]:
        return [float(s.main_error is None and not s.main_trivial) for s in batch.solutions]


def reference_code(row: Mapping[str, Any], env: CooperativeCodingEnv, reference_column: str) -> str:
    """The full reference program of a row: `canonical_solution` itself if it defines `entry_point` (MBPP's `code`
    as mapped by [`load_mbpp`]), else `prompt + canonical_solution` (HumanEval's solution is the body only)."""
    reference = row[reference_column]
    if not isinstance(reference, str):
        raise ValueError(f"The column {reference_column!r} must hold strings, got {type(reference).__name__}.")
    entry_point = env.entry_point(row)
    if _top_level_function(parse_or_none(textwrap.dedent(reference)), entry_point) is not None:
        return reference
    return env._value(row, env.prompt_column) + reference


class CodeBLEUTermReward(CodingRewardTerm):
    """CodeBLEU of the team's code (helper code + main code) against the row's reference solution.

    The reference is `prompt + canonical_solution` for HumanEval, or `canonical_solution` when it is a whole
    function (see [`reference_code`]). Scored with `trl_marl.rewards.codebleu.CodeBLEUReward` (imported on first
    use; needs the `rewards` extra).

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment.
        reference_column (`str`): Column of the reference solution.
        scorer (`Callable`, *optional*): A TRL reward function `scorer(prompts, completions, **kwargs)` reading the
            references from the keyword `reference_column`; `CodeBLEUReward(reference_column=...)` if `None`.
    """

    name = "codebleu"

    def __init__(self, env: CooperativeCodingEnv | None = None, reference_column: str = "canonical_solution",
                 scorer: Callable[..., Sequence[float | None]] | None = None) -> None:
        super().__init__(env)
        self.reference_column = reference_column
        self._scorer = scorer

    @property
    def scorer(self) -> Callable[..., Sequence[float | None]]:
        """The CodeBLEU scorer (built on first use)."""
        if self._scorer is None:
            from ..rewards.codebleu import CodeBLEUReward

            self._scorer = CodeBLEUReward(reference_column=self.reference_column)
        return self._scorer

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        if self.reference_column not in kwargs:
            raise KeyError(f"{type(self).__name__} needs the dataset column {self.reference_column!r}.")
        batch = coding_batch(self.env, completions, kwargs, type(self).__name__)
        for row, reference in zip(batch.rows, kwargs[self.reference_column]):
            row[self.reference_column] = reference
        return self.scores(batch)

    def scores(self, batch: CodingBatch) -> list[float]:
        if any(self.reference_column not in row for row in batch.rows):
            raise KeyError(f"{type(self).__name__} needs the dataset column {self.reference_column!r}.")
        references = [reference_code(row, self.env, self.reference_column) for row in batch.rows]
        candidates = ["\n\n\n".join(p for p in (s.helper_code, s.main_code) if p.strip()) for s in batch.solutions]
        values = self.scorer(prompts=[""] * len(candidates), completions=candidates,
                             **{self.reference_column: references})
        return [0.0 if v is None else float(v) for v in values]


class CodingTeamReward:
    """The team reward of [`CooperativeCodingEnv`]: a weighted sum of the coding reward terms.

    r = w_helper_defined * [helper defined] + w_main_defined * [main defined] + w_syntax * [program parses]
        + w_tests * passed/total + w_helper_used * [main calls helper] + w_nontrivial * [main not a trivial wrapper]
        + w_codebleu * CodeBLEU

    Terms with weight 0 are not computed (CodeBLEU is off by default). The programs run once per call, in one
    sandbox batch, through the environment's cached executor. After each call, `last_terms` maps each term's name
    to its scores (for logging).

    Args:
        env (`CooperativeCodingEnv`, *optional*): The environment (helper name, columns, executor); a default one
            if `None`.
        weights (`dict[str, float]`, *optional*): Weights by term name, merged into `DEFAULT_CODING_WEIGHTS`.
        codebleu (`CodeBLEUTermReward`, *optional*): The CodeBLEU term to use (e.g. with a custom scorer).
    """

    name = "coding_team"

    def __init__(self, env: CooperativeCodingEnv | None = None, weights: Mapping[str, float] | None = None,
                 codebleu: CodeBLEUTermReward | None = None) -> None:
        self.env = env if env is not None else CooperativeCodingEnv()
        unknown = set(weights or {}) - set(DEFAULT_CODING_WEIGHTS)
        if unknown:
            raise ValueError(
                f"Unknown reward term(s) {sorted(unknown)}; the terms are {list(DEFAULT_CODING_WEIGHTS)}."
            )
        self.weights = {**DEFAULT_CODING_WEIGHTS, **(weights or {})}
        self.terms: dict[str, CodingRewardTerm] = {
            "helper_defined": HelperDefinedReward(self.env),
            "main_defined": MainDefinedReward(self.env),
            "syntax": CombinedSyntaxReward(self.env),
            "tests": PassRateReward(self.env),
            "helper_used": HelperUsedReward(self.env),
            "nontrivial": NonTrivialMainReward(self.env),
            "codebleu": codebleu if codebleu is not None else CodeBLEUTermReward(self.env),
        }
        self.last_terms: dict[str, list[float]] = {}
        self.__name__ = self.name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        batch = coding_batch(self.env, completions, kwargs, type(self).__name__)
        total = [0.0] * len(batch.solutions)
        self.last_terms = {}
        for name, term in self.terms.items():
            weight = self.weights[name]
            if weight == 0:
                continue
            if isinstance(term, CodeBLEUTermReward):
                if term.reference_column not in kwargs:
                    raise KeyError(f"The CodeBLEU term needs the dataset column {term.reference_column!r}.")
                for row, reference in zip(batch.rows, kwargs[term.reference_column]):
                    row[term.reference_column] = reference
            values = term.scores(batch)
            self.last_terms[name] = values
            total = [t + weight * v for t, v in zip(total, values)]
        return total

    def reward_funcs(self) -> list[CodingRewardTerm]:
        """The terms with a non-zero weight, as separate reward functions (pass with `reward_weights()` to a trainer
        to log each term; the executor's cache keeps the programs from running more than once)."""
        return [term for name, term in self.terms.items() if self.weights[name] != 0]

    def reward_weights(self) -> list[float]:
        """The weights matching [`~CodingTeamReward.reward_funcs`]."""
        return [self.weights[name] for name in self.terms if self.weights[name] != 0]


# ---------------------------------------------------------------------------------------------------- datasets
HUMANEVAL_COLUMNS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
"""The columns of HumanEval, the schema [`CooperativeCodingEnv`] reads."""


def _check_columns(dataset: datasets.Dataset, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise KeyError(f"{name} should have the column(s) {missing}; it has {dataset.column_names}.")


def load_humaneval(split: str = "test", path: str = "openai/openai_humaneval", data_files: str | None = None,
                   **load_kwargs: Any) -> datasets.Dataset:
    """HumanEval (164 Python tasks) with the columns `task_id`, `prompt`, `canonical_solution`, `test`,
    `entry_point`.

    Args:
        split (`str`): The split (HumanEval has only `test`).
        path (`str`): The Hub dataset.
        data_files (`str`, *optional*): A local copy instead (e.g. the original `HumanEval.jsonl.gz`), read with
            the `json` builder; `split` is then ignored.
        **load_kwargs: More arguments for `datasets.load_dataset`.

    Returns:
        `datasets.Dataset`
    """
    import datasets

    if data_files is not None:
        dataset = datasets.load_dataset("json", data_files=data_files, split="train", **load_kwargs)
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
    node = _top_level_function(tree, entry_point)
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


__all__ = [
    "CHAT_REVISION_TEMPLATE",
    "DEFAULT_CODING_WEIGHTS",
    "HELPER_TEMPLATE",
    "MAIN_TEMPLATE",
    "REVISION_TEMPLATE",
    "CodeBLEUTermReward",
    "CodingRewardTerm",
    "CodingSolution",
    "CodingTeamReward",
    "CombinedSyntaxReward",
    "CooperativeCodingEnv",
    "HelperDefinedReward",
    "HelperUsedReward",
    "MainDefinedReward",
    "NonTrivialMainReward",
    "ProgramExecutor",
    "PassRateReward",
    "analyze_solution",
    "extract_code",
    "load_humaneval",
    "load_mbpp",
    "mbpp_to_humaneval",
    "prompt_preamble",
    "shared_executor",
]
