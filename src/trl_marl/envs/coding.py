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
name), `test` (a `check(candidate)` function) and, for CodeBLEU, `canonical_solution`.
[`~trl_marl.data.load_humaneval`] loads HumanEval, [`~trl_marl.data.load_mbpp`] maps MBPP onto the same schema.

The team reward (seven terms and their weighted sum, [`~trl_marl.rewards.coding.CodingTeamReward`]) is in
`trl_marl.rewards.coding`, the static analysis of a helper + main pair in `trl_marl.envs.coding_analysis`, and the
HumanEval/MBPP loaders in `trl_marl.data.coding`.

Programs are executed once: a [`~trl_marl.sandbox.ProgramExecutor`] caches results per (program, tests), so the
reward of a joint action and the feedback the rollout asks for right after it share one sandbox run.
"""


from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..sandbox.executor import ExecutionResultLike, ProgramExecutor, Runner, shared_executor
from ..sandbox.feedback import describe_result
from ..utils.code import definitions_of, definitions_only, extract_code, function_parts, prompt_preamble
from ..utils.text import completion_text
from .base import MultiAgentEnv, Prompt, Transcript
from .coding_analysis import CodingSolution, analyze_solution

if TYPE_CHECKING:
    pass

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

SPEC_HELPER_TEMPLATE = """\
Write a Python function `{helper_signature}`. {helper_doc} Your partner will call it to write `{entry_point}`. \
Reply with only the code."""
"""Turn-1 prompt of the helper agent when the row states the helper's contract (`helper_signature` and
`helper_doc`; see the class docstring). Placeholders: `{helper_signature}` (`"aux(word: str) -> int"`),
`{helper_doc}`, `{entry_signature}` (the main function's signature), `{description}` (its docstring),
`{helper_prompt}` (the helper's `def` line and docstring as code), `{prompt}`, `{entry_point}`, `{helper_name}`.
The tasks are stated in prose, not as code to complete: shown a signature and docstring in a code block, small
models copy the docstring and run out of tokens before the body."""

SPEC_MAIN_TEMPLATE = """\
Write a Python function `{entry_signature}`. {description}

You can call `{helper_signature}`, which your partner writes (do not write it yourself): {helper_doc}

Reply with only the code."""
"""Turn-1 prompt of the main agent when the row states the helper's contract (same placeholders as
`SPEC_HELPER_TEMPLATE`)."""

NO_CODE = "# (no code)"
"""Shown in prompts in place of an empty piece of code."""

STUB_MODES = ("every_call", "alternate_calls")
"""How [`CooperativeCodingEnv.with_stub_helper`] corrupts the helper's results: every call's result, or every other
call's (which also changes what an order-only use of the results sees, such as `max(xs, key=aux)`)."""

HELPER_STUB_TEMPLATE = """\
def _trl_marl_wrong(value, far):
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return -value - 1 if far else value + 1
    if isinstance(value, float):
        return -value - 1.5 if far else value + 1.5
    if isinstance(value, str):
        return (value[::-1] if far else value) + "#"
    if isinstance(value, (list, tuple)):
        items = [_trl_marl_wrong(v, far) for v in value] + [value[0] if value else 0]
        return type(value)(items[::-1] if far else items)
    if isinstance(value, dict):
        return {{k: _trl_marl_wrong(v, far) for k, v in value.items()}}
    if value is None:
        return 0
    return object()


_trl_marl_helper = {helper_name}
_trl_marl_calls = [0]


def {helper_name}(*args, **kwargs):
    value = _trl_marl_helper(*args, **kwargs)
    _trl_marl_calls[0] += 1
    if {alternate} and _trl_marl_calls[0] % 2 == 0:
        return value
    return _trl_marl_wrong(value, {alternate})"""
"""Appended to the helper's code by [`CooperativeCodingEnv.with_stub_helper`]: the helper, called under its own name,
returns a wrong value of the right type. On every call (`{alternate}` False): a number off by one, a string with a
character more, a list with an element more, ...; on every other call (`{alternate}` True), far from the true value (a
number negated, a string or list reversed as well), so that a use of the results that keeps only their order changes
too. Placeholders: `{helper_name}`, `{alternate}`."""

WRAPPER_MAIN_TEMPLATE = """\
def {entry_point}(*args, **kwargs):
    return {helper_name}(*args, **kwargs)"""
"""The main function that does nothing but call the helper ([`CooperativeCodingEnv.with_wrapper_main`])."""

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
    test line of `sandbox.describe_result` (`All 3 tests passed.`, or `Tests passed: 1/3. First failure: <assert> ->
    <error>`, a timeout, ...) or why the tests did not run. Both agents get the same feedback.

    **Stated helper contracts.** When a row has a non-empty `helper_signature` (e.g. `"(word: str) -> int"`) and
    `helper_doc` (one sentence), the agents agree on the helper before they write: agent 0 gets
    `spec_helper_template`, which asks for exactly that function, and agent 1 `spec_main_template`, which shows the
    helper's `def` line and docstring as something it may call. The team still has to make the two parts work
    together (the helper must do what its docstring says, the main function must call it correctly and not redefine
    it). Small models need this: from the open-ended prompts SmolLM2-135M-Instruct wrote no working pair in 64
    sampled joint actions on [`~trl_marl.data.load_team_coding`]'s problems, whose rows carry both columns.

    **Code prefill.** In chat mode, `code_prefill` (e.g. ```` "```python\n" ````) is an assistant message that the
    model continues; the code is read from the prefill followed by the completion, so a completion `"def f(): ..."`
    after the prefill ```` "```python\n" ```` is the block it closes.

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
        spec_helper_template (`str`): Turn-1 prompt of the helper agent for rows that state the helper's contract.
        spec_main_template (`str`): Turn-1 prompt of the main agent for such rows.
        code_prefill (`str`): Chat mode only: the start of each agent's answer, which the model continues (`""`: none).
        keep_definitions_only (`bool`): Keep only each agent's top-level definitions (imports, functions, classes,
            literal constants) and drop other top-level statements such as example calls
            ([`~trl_marl.utils.code.definitions_only`]).
        keep_helper_only (`bool`): Keep only the helper function (and the imports and literal constants) of the
            helper agent's code ([`~trl_marl.utils.code.definitions_of`]), as MAGRPO's authors do: a helper agent that
            also writes the main function cannot pass the tests without its partner.
        prompt_column (`str`): Column of the task prompt (signature and docstring).
        entry_point_column (`str`): Column of the name of the function to write.
        test_column (`str`): Column of the unit tests (HumanEval's `check(candidate)` code).
        helper_signature_column (`str`): Column of the helper's parameters and return annotation (optional per row).
        helper_doc_column (`str`): Column of the helper's one-sentence docstring (optional per row).
        executor (`ProgramExecutor`, *optional*): Runs programs; by default `sandbox.shared_executor` (the sandbox with
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
        spec_helper_template: str = SPEC_HELPER_TEMPLATE,
        spec_main_template: str = SPEC_MAIN_TEMPLATE,
        code_prefill: str = "",
        keep_definitions_only: bool = True,
        keep_helper_only: bool = True,
        prompt_column: str = "prompt",
        entry_point_column: str = "entry_point",
        test_column: str = "test",
        helper_signature_column: str = "helper_signature",
        helper_doc_column: str = "helper_doc",
        executor: ProgramExecutor | None = None,
        runner: Runner | None = None,
        limits: Any = None,
    ) -> None:
        super().__init__(num_agents=2, num_turns=num_turns)
        if not helper_name.isidentifier():
            raise ValueError(f"`helper_name` must be a Python identifier, got {helper_name!r}.")
        if executor is not None and (runner is not None or limits is not None):
            raise ValueError("Pass either `executor` or `runner`/`limits`, not both.")
        if code_prefill and not chat:
            raise ValueError("`code_prefill` needs chat prompts (`chat=True`): it is an assistant message the model "
                             "continues.")
        self.helper_name = helper_name
        self.chat = chat
        self.helper_template = helper_template
        self.main_template = main_template
        self.revision_template = revision_template
        self.chat_revision_template = chat_revision_template
        self.spec_helper_template = spec_helper_template
        self.spec_main_template = spec_main_template
        self.code_prefill = code_prefill
        self.keep_definitions_only = keep_definitions_only
        self.keep_helper_only = keep_helper_only
        self.helper_signature_column = helper_signature_column
        self.helper_doc_column = helper_doc_column
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
        """What the sandbox needs to test a program of this row: `{"test", "entry_point", "prompt"}` (HumanEval
        style; the prompt's own helpers are the ones the tests see, whatever the team redefines)."""
        return {"test": self._value(row, self.test_column), "entry_point": self.entry_point(row),
                "prompt": self._value(row, self.prompt_column)}

    def assemble(self, row: Mapping[str, Any], helper_completion: Any, main_completion: Any) -> CodingSolution:
        """The joint action (helper agent's and main agent's completions) as a `CodingSolution`.

        Args:
            row (`Mapping`): The dataset row.
            helper_completion (`str` or `list[dict]`): Agent 0's completion.
            main_completion (`str` or `list[dict]`): Agent 1's completion.
        """
        self.check_row(row)
        entry_point = self.entry_point(row)
        preamble = prompt_preamble(self._value(row, self.prompt_column), entry_point)
        helper_code = self.code_of(helper_completion)
        if self.keep_helper_only:
            helper_code = definitions_of(helper_code, {self.helper_name})
        return analyze_solution(helper_code, self.code_of(main_completion), entry_point, self.helper_name, preamble)

    @property
    def helper_names(self) -> tuple[str, ...]:
        """The names the helper's function may have (here `helper_name` only; see
        [`~trl_marl.envs.coding_private.NamingCodingEnv`])."""
        return (self.helper_name,)

    def code_of(self, completion: Any) -> str:
        """The code of an agent's answer (`code_prefill` + completion): the fenced Python, reduced to its top-level
        definitions when `keep_definitions_only` is set."""
        code = extract_code(self.answer_text(completion))
        return definitions_only(code) if self.keep_definitions_only else code

    def answer_text(self, completion: Any) -> str:
        """An agent's whole answer: `code_prefill` (which the model continued) followed by the completion's text."""
        return self.code_prefill + completion_text(completion)

    def helper_prompt(self, row: Mapping[str, Any]) -> str | None:
        """The helper's `def` line and docstring when the row states its contract (`helper_signature` and
        `helper_doc`, both non-empty), else `None`."""
        signature, doc = row.get(self.helper_signature_column), row.get(self.helper_doc_column)
        if not (isinstance(signature, str) and signature.strip() and isinstance(doc, str) and doc.strip()):
            return None
        return f'def {self.helper_name}{signature.strip()}:\n    """{doc.strip()}"""'


    def without_helper(self, row: Mapping[str, Any], solution: CodingSolution) -> CodingSolution:
        """`solution` with the helper's code left out (the prompt's preamble and the main code only)."""
        preamble = prompt_preamble(self._value(row, self.prompt_column), solution.entry_point)
        return analyze_solution("", solution.main_code, solution.entry_point, solution.helper_name, preamble)

    def with_stub_helper(self, row: Mapping[str, Any], solution: CodingSolution,
                         mode: str = "every_call") -> CodingSolution:
        """`solution` with the helper's results corrupted: the helper's own code runs, then a wrong value of the same
        type is returned ([`HELPER_STUB_TEMPLATE`]; `mode` is one of [`STUB_MODES`]). If the team passes as many tests
        with it, the main function does not depend on what the helper computes: a call whose result is discarded, a
        bare reference to `aux`, or a call on a branch no test reaches. (Leaving the helper out instead would credit
        every such call: the program then fails with a `NameError`.)"""
        if mode not in STUB_MODES:
            raise ValueError(f"`mode` must be one of {STUB_MODES}, got {mode!r}.")
        preamble = prompt_preamble(self._value(row, self.prompt_column), solution.entry_point)
        stub = HELPER_STUB_TEMPLATE.format(helper_name=solution.helper_name, alternate=mode == "alternate_calls")
        helper = (solution.helper_code.rstrip("\n") + "\n\n\n" + stub) if solution.helper_code.strip() else ""
        return analyze_solution(helper, solution.main_code, solution.entry_point, solution.helper_name, preamble)

    def with_wrapper_main(self, row: Mapping[str, Any], solution: CodingSolution) -> CodingSolution:
        """`solution` with the main function replaced by one that only returns the helper's result for the same
        arguments ([`WRAPPER_MAIN_TEMPLATE`]). If that program passes as many tests as the team's, the main function
        adds nothing to the helper, whatever its text looks like (`return aux(x) + 0`, a renamed variable, ...)."""
        preamble = prompt_preamble(self._value(row, self.prompt_column), solution.entry_point)
        wrapper = WRAPPER_MAIN_TEMPLATE.format(entry_point=solution.entry_point, helper_name=solution.helper_name)
        return analyze_solution(solution.helper_code, wrapper, solution.entry_point, solution.helper_name, preamble)

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
        prompt = self._value(row, self.prompt_column).strip("\n")
        task = {"prompt": prompt, "entry_point": entry_point, "helper_name": self.helper_name}
        helper_prompt = self.helper_prompt(row)
        if helper_prompt is None:
            template = self.helper_template if agent_index == HELPER_AGENT else self.main_template
        else:
            template = self.spec_helper_template if agent_index == HELPER_AGENT else self.spec_main_template
            entry_signature, description = function_parts(prompt, entry_point) or (entry_point + "(...)", "")
            helper_signature, helper_doc = function_parts(helper_prompt, self.helper_name) or ("", "")
            task.update(helper_prompt=helper_prompt, helper_signature=helper_signature, helper_doc=helper_doc,
                        entry_signature=entry_signature, description=description)
        first = template.format(**task)
        prefill = [{"role": "assistant", "content": self.code_prefill}] if self.code_prefill else []
        if len(transcript) == 0:
            return [{"role": "user", "content": first}, *prefill] if self.chat else first
        last = transcript[-1]
        partner = MAIN_AGENT if agent_index == HELPER_AGENT else HELPER_AGENT
        feedback = last.feedback_for(agent_index)
        if feedback is None:  # a transcript built without the env's feedback
            feedback = self.feedback(row, transcript)
        fields = {
            "turn": len(transcript) + 1,
            "own_role": self._role(agent_index, entry_point),
            "partner_role": self._role(partner, entry_point),
            "own_code": self.code_of(last.responses[agent_index]) or NO_CODE,
            "partner_code": self.code_of(last.responses[partner]) or NO_CODE,
            "feedback": feedback,
        }
        if self.chat:
            return [
                {"role": "user", "content": first},
                {"role": "assistant", "content": self.answer_text(last.responses[agent_index])},
                {"role": "user", "content": self.chat_revision_template.format(**fields)},
                *prefill,
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
