"""Cooperative coding with a division of labour the two agents must agree on: two rules, two functions, one each.

The division designs of [`~trl_marl.envs.coding_division`] ask each programmer to write the helper or the main
function; at 135M the model rarely writes only one of them, and a split team's code still fails. Here both parts are
one-expression functions of the same kind: the program's main function (given, in the row's prompt) returns
`[aux1(x), aux2(x)]`, `aux1` codes a number by one rule and `aux2` by another, and each of the two programmers writes
exactly one of them, without seeing the other's code. Both get the same prompt but for "programmer 1" or "2", and
each answer is prefilled up to `def aux`, so the first token an agent writes (`1` or `2`) is its choice, as the number
is in the split game. If both choose the same function the other is missing and no test passes: the team succeeds
only by a convention, which agents trained against a frozen partner with the same bias as themselves cannot find
(each learns the function its partner rarely writes, and paired they collide), and each partner is necessary.

Example:

```python
from trl_marl.data.team_coding import rule_pair_rows
from trl_marl.envs.coding_rule_division import RuleDivisionCodingEnv
from trl_marl.rewards.coding import PassRateReward

env = RuleDivisionCodingEnv(chat=True)
reward = PassRateReward(env)  # half the tests check aux1, half aux2
rows = rule_pair_rows("train")
```
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..utils.code import (
    definitions_of,
    extract_code,
    first_definition_of,
    parse_or_none,
    prompt_preamble,
    top_level_function,
)
from ..utils.text import completion_text
from .base import Prompt, Transcript
from .centralized import CentralizedEnv
from .coding import CooperativeCodingEnv
from .coding_analysis import CodingSolution, analyze_solution

RULE_DIVISION_TEMPLATE = """\
You and a partner write two Python functions of one program:
1. `{first}(x: int) -> int` returns the code of `x`: {rule1}.
2. `{second}(x: int) -> int` returns the code of `x`: {rule2}.
Each of you writes exactly one of the two functions; your partner writes the other, and you cannot see each other's \
code. If you both write the same one, the program fails. You are programmer {programmer}. Reply with only the code \
of your function."""
"""The prompt of both agents (format fields `{first}`, `{second}`, `{rule1}`, `{rule2}`, `{programmer}`)."""

RULE_DIVISION_DECIDE_TEMPLATE = RULE_DIVISION_TEMPLATE.replace(" You are programmer {programmer}.", "") + (
    " You are programmer {programmer} of 2: decide which function you write.")
"""The same task with the programmer's number last and asked to decide: on 8 training rows the untrained SmolLM2-135M
programmers' next-token probability of `2` after `def aux` was 0.20 and 0.22 (0.15 and 0.17 with
[`RULE_DIVISION_TEMPLATE`]), a less one-sided start for a convention to grow from."""

RULE_DIVISION_DECIDE_2OR1_TEMPLATE = RULE_DIVISION_DECIDE_TEMPLATE.replace(
    "decide which function you write.", "decide whether you write function 2 or function 1.")
"""[`RULE_DIVISION_DECIDE_TEMPLATE`] with the decision naming the second function first: on 16 training rows the
untrained SmolLM2-135M programmers' next-token probability of `2` after `def aux` was 0.27 and 0.27 of the two digits'
(0.20 and 0.22 with [`RULE_DIVISION_DECIDE_TEMPLATE`]; naming the functions `aux2` then `aux1` instead gave 0.44
and 0.41, too weak a shared lean for agents trained alone to collide)."""

RULE_DIVISION_DECIDE_2OR1_NAMED_TEMPLATE = RULE_DIVISION_DECIDE_TEMPLATE.replace(
    "decide which function you write.", "decide whether you write function 2 (`{second}`) or function 1 (`{first}`).")
"""[`RULE_DIVISION_DECIDE_2OR1_TEMPLATE`] with each function's name beside its number: on 16 training rows the
untrained programmers' next-token probability of `2` after `def aux` was 0.37 and 0.39 of the two digits' (chosen
after [`RULE_DIVISION_DECIDE_2OR1_TEMPLATE`]'s pilot found the other function in 0.10 and 0.086 of answers)."""


CENTRAL_RULE_DIVISION_TEMPLATE = """\
Write two Python functions of one program:
1. `{first}(x: int) -> int` returns the code of `x`: {rule1}.
2. `{second}(x: int) -> int` returns the code of `x`: {rule2}.
Reply with only the code of both functions."""
"""The single policy's prompt of [`CentralizedRuleDivisionCodingEnv`] (format fields as [`RULE_DIVISION_TEMPLATE`]'s,
without `{programmer}`): the two programmers' task with nothing to divide."""

FORBIDDEN_NODES = (ast.Call, ast.Attribute, ast.Import, ast.ImportFrom, ast.Global, ast.Nonlocal, ast.Lambda)
"""What a function of [`RuleDivisionCodingEnv`] may not contain (its arguments' defaults included)."""


class RuleDivisionCodingEnv(CooperativeCodingEnv):
    """Two programmers, two rules, two functions `aux1` and `aux2`: each writes one, chosen by its first token.

    Both agents get `template` with the row's two rules (`rule1`, `rule2`) and their programmer number (1 for agent
    0, 2 for agent 1); each answer is prefilled up to `def aux`. From each answer the first function called `aux1` or
    `aux2` is kept ([`~trl_marl.utils.code.first_definition_of`]): one agent cannot write both. When both wrote the
    same function, agent 0's is kept and the other is missing. The main function is the row's prompt (whole), so
    [`~trl_marl.rewards.coding.PassRateReward`] scores the joint action; rows:
    [`~trl_marl.data.team_coding.rule_pair_rows`]. One turn.

    Args:
        names (`tuple[str, str]`): The two functions' names, in the prompt's order.
        template (`str`): The prompt of both agents.
        **kwargs: [`~trl_marl.envs.coding.CooperativeCodingEnv`]'s other arguments (`chat`, the columns, the
            executor, ...); `num_turns` must be 1, and `code_prefill` is set here.
    """

    def __init__(self, names: tuple[str, str] = ("aux1", "aux2"), template: str = RULE_DIVISION_TEMPLATE,
                 **kwargs: Any) -> None:
        if kwargs.get("num_turns", 1) != 1:
            raise ValueError(f"RuleDivisionCodingEnv has one turn (num_turns=1), got {kwargs['num_turns']}.")
        if kwargs.get("code_prefill"):
            raise ValueError("RuleDivisionCodingEnv prefills each answer up to the shared start of the two names: "
                             "do not pass `code_prefill`.")
        if len(names) != 2 or names[0] == names[1] or not all(n.isidentifier() for n in names):
            raise ValueError(f"`names` must be two different Python identifiers, got {names!r}.")
        super().__init__(helper_name=names[0], **kwargs)
        self.names: tuple[str, str] = (names[0], names[1])
        self.template = template

    def prefill(self) -> str:
        """The start of each answer: a code fence and `def ` with the names' common start (`aux`)."""
        common = ""
        for a, b in zip(*self.names):
            if a != b:
                break
            common += a
        return "```python\ndef " + common

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index` (programmer `agent_index + 1`): the same for both but the number."""
        if agent_index not in (0, 1):
            raise IndexError(f"{type(self).__name__} has agents 0 and 1, got {agent_index}.")
        self.check_row(row)
        text = self.template.format(first=self.names[0], second=self.names[1], rule1=self._value(row, "rule1").strip(),
                                    rule2=self._value(row, "rule2").strip(), programmer=agent_index + 1)
        if not self.chat:
            return text + "\n\n" + self.prefill()
        return [{"role": "user", "content": text}, {"role": "assistant", "content": self.prefill()}]

    def part(self, completion: Any) -> tuple[str | None, str]:
        """The function an answer wrote first (one of `names`, or `None`) and the answer's code reduced to it.

        The functions are arithmetic on `x`: one that calls anything, reaches an attribute, imports, declares a global
        or has a decorator is not kept (`(None, "")`), since run first it could define its partner's function as a
        side effect (`builtins.aux2 = ...`) and let one programmer pass a collision alone."""
        name, code = first_definition_of(extract_code(self.prefill() + completion_text(completion)), self.names)
        tree = parse_or_none(code) if name is not None else None
        function = top_level_function(tree, name) if tree is not None and name is not None else None
        if function is not None and (function.decorator_list or any(
                isinstance(node, FORBIDDEN_NODES) for node in ast.walk(function))):
            return None, ""
        return name, code

    def assemble(self, row: Mapping[str, Any], first_completion: Any, second_completion: Any) -> CodingSolution:
        """The joint action: the two agents' functions (agent 0's alone when both chose the same one, or when agent 1
        chose neither) and the row's main function."""
        self.check_row(row)
        entry_point = self.entry_point(row)
        prompt = self._value(row, self.prompt_column)
        (first, first_code), (second, second_code) = self.part(first_completion), self.part(second_completion)
        codes = [code for choice, code in ((first, first_code), (second, second_code)) if choice is not None]
        if first is not None and first == second:
            codes = [first_code]
        if not codes:  # neither wrote either function: keep agent 0's text, so a syntax error is reported
            codes = [first_code]
        main = definitions_of(prompt, {entry_point})
        return analyze_solution("\n\n\n".join(codes), main, entry_point, self.helper_name,
                                prompt_preamble(prompt, entry_point))


class CentralizedRuleDivisionCodingEnv(CentralizedEnv):
    """One policy writes both functions of a [`RuleDivisionCodingEnv`] row (the single-policy arm of the rule
    division): the two rules, no programmer number, one code block, prefilled as the team's answers (`def aux`).

    [`split`] gives the function `names[0]` to agent 0 and `names[1]` to agent 1, each written as a team agent's
    answer would be (the code after the prefill), so the team's rewards score the program unchanged through
    [`~trl_marl.rewards.centralized.CentralizedReward`], with the same checks (a function that calls anything is not
    kept). A block that does not parse gives both agents nothing: the program would not run. One turn.

    Args:
        env (`RuleDivisionCodingEnv`): The team's environment (its names, chat or plain prompts, columns).
        template (`str`): The prompt; [`CENTRAL_RULE_DIVISION_TEMPLATE`] by default.

    Example:

    ```python
    >>> from trl_marl.envs.coding_rule_division import CentralizedRuleDivisionCodingEnv, RuleDivisionCodingEnv
    >>> env = CentralizedRuleDivisionCodingEnv(RuleDivisionCodingEnv(chat=True))
    >>> env.split("2(x):\\n    return x - 4\\n\\ndef aux1(x):\\n    return 3 * x\\n```")
    ['1(x):\\n    return 3 * x', '2(x):\\n    return x - 4']
    ```
    """

    env: RuleDivisionCodingEnv  # the wrapped environment (`__init__` checks its type)
    wraps = RuleDivisionCodingEnv

    def __init__(self, env: RuleDivisionCodingEnv, template: str = CENTRAL_RULE_DIVISION_TEMPLATE) -> None:
        self.check_wrapped(env)  # before its `names` and prefill are read
        super().__init__(env, tags=env.names, prefill=env.prefill())
        self.template = template

    def split(self, text: Any) -> list[str]:
        """Each function of one completion as the team's agent writing it would have answered: its source after
        the shared prefill (`""` for a function the completion does not define, or when its code does not parse)."""
        code = extract_code(self.prefill + completion_text(text))
        tree = parse_or_none(code)
        start = self.prefill.removeprefix("```python\n")  # `def aux`: what a team answer continues
        parts = []
        for name in self.env.names:
            function = top_level_function(tree, name)
            source = ast.get_source_segment(code, function) if function is not None else None
            parts.append(source.removeprefix(start) if source is not None and source.startswith(start) else "")
        return parts

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        env = self.env
        env.check_row(row)
        text = self.template.format(first=env.names[0], second=env.names[1], rule1=env._value(row, "rule1").strip(),
                                    rule2=env._value(row, "rule2").strip())
        if not env.chat:
            return text + "\n\n" + self.prefill
        return [{"role": "user", "content": text}, {"role": "assistant", "content": self.prefill}]
