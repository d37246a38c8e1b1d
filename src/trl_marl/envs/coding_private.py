"""Cooperative coding with private information: only the helper agent knows the rule the program needs.

MAGRPO's coding task ([`~trl_marl.envs.coding.CooperativeCodingEnv`]) with the helper's contract stated to both
agents lets the main agent inline the helper: on SmolLM2-135M the main function called `aux` in 0 of 64 held-out
answers. Here the helper agent reads a rule ("multiply `x` by 3, then add 4") that the main agent never sees: the main
agent is told only that `aux(x)` returns the code of `x`, so it must call its partner's function, and the helper's
function is worth something only if the main agent calls it. The partner is necessary by construction; each agent's
useful action pays only through what the other does (`trl_marl.teamwork` measures both).

Each answer is prefilled up to its function's `return ` (the helper: `def aux(x):`; the main agent: the row's
signature), so both agents write one expression: `x * 3 + 4` and `sum(aux(x) for x in numbers)`.

Example:

```python
from trl_marl.data.team_coding import private_rule_rows
from trl_marl.envs.coding_private import PrivateRuleCodingEnv
from trl_marl.rewards.coding import CodingTeamReward

env = PrivateRuleCodingEnv(chat=True)
reward = CodingTeamReward(env)
rows = private_rule_rows("train")
```
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..utils.code import first_definition_of, function_parts, parse_or_none, prompt_preamble
from ..utils.text import completion_text
from .base import Prompt, Transcript
from .coding import HELPER_AGENT, MAIN_AGENT, CooperativeCodingEnv
from .coding_analysis import CodingSolution, analyze_solution

PRIVATE_HELPER_TEMPLATE = """\
Write a Python function `{helper_name}(x: int) -> int` that returns the code of the number `x`: {rule}. Your \
partner will call it. Reply with only the code."""
"""The helper agent's prompt (format fields `{helper_name}`, `{rule}`)."""

PRIVATE_MAIN_TEMPLATE = """\
Write a Python function `{entry_signature}`. {description}

Every number has a secret code that only your partner knows. Your partner writes `{helper_name}(x)`, which returns \
the code of `x`: call it, do not write it. Reply with only the code."""
"""The main agent's prompt (format fields `{entry_signature}`, `{description}`, `{helper_name}`)."""

MAIN_EXAMPLES: tuple[tuple[str, str, str], ...] = (
    ("code_of_last(numbers: list) -> int", "Return the code of the last number in `numbers`.",
     "def code_of_last(numbers: list):\n    return {helper_name}(numbers[-1])"),
    ("product_of_codes(numbers: list) -> int", "Return the product of the codes of the numbers in `numbers`.",
     "def product_of_codes(numbers: list):\n    result = 1\n    for x in numbers:\n"
     "        result *= {helper_name}(x)\n    return result"),
)
"""Worked exchanges shown to the main agent before its task, in chat mode (signature, description, answer): how a
function calls a partner's `aux`. None of them is one of the tasks' functions. Without them the untrained SmolLM2-135M
main agent called `aux` correctly in 0 of 128 answers on training rows (the pilot record)."""


class PrivateRuleCodingEnv(CooperativeCodingEnv):
    """Cooperative coding where only the helper agent reads the rule (`rule_column`) that the helper implements.

    Agent 0 gets `helper_template` with the row's rule, agent 1 `main_template` with the main function's signature
    and description and nothing of the rule, after the worked exchanges `main_examples` (chat mode). The answers are
    prefilled ([`~PrivateRuleCodingEnv.prefill`]): the helper's up to `return `, the main agent's with a code fence;
    in string mode the prompts end with them. One turn. Rows: [`~trl_marl.data.team_coding.private_rule_rows`].

    The joint action is assembled as in [`~trl_marl.envs.coding.CooperativeCodingEnv`] (the helper agent's `aux`
    only), so [`~trl_marl.rewards.coding.CodingTeamReward`] scores it unchanged: its cooperation terms are decided by
    running the program with the helper's results corrupted.

    Args:
        rule_column (`str`): The column of the rule's words (shown to the helper agent only).
        helper_template (`str`): The helper agent's prompt.
        main_template (`str`): The main agent's prompt.
        main_examples (`Sequence[tuple[str, str, str]]`): Worked exchanges shown to the main agent first, in chat
            mode ([`MAIN_EXAMPLES`]; `()` for none).
        **kwargs: [`~trl_marl.envs.coding.CooperativeCodingEnv`]'s other arguments (`chat`, the columns, the
            executor, ...); `num_turns` must be 1 and `code_prefill` is set per agent.
    """

    def __init__(self, rule_column: str = "rule", helper_template: str = PRIVATE_HELPER_TEMPLATE,
                 main_template: str = PRIVATE_MAIN_TEMPLATE,
                 main_examples: Sequence[tuple[str, str, str]] = MAIN_EXAMPLES, **kwargs: Any) -> None:
        if kwargs.get("num_turns", 1) != 1:
            raise ValueError(f"PrivateRuleCodingEnv has one turn (num_turns=1), got {kwargs['num_turns']}.")
        if kwargs.get("code_prefill"):
            raise ValueError("PrivateRuleCodingEnv prefills each agent's own function: do not pass `code_prefill`.")
        super().__init__(**kwargs)
        self.rule_column = rule_column
        self.private_helper_template = helper_template
        self.private_main_template = main_template
        self.main_examples = tuple(main_examples)

    def prefill(self, row: Mapping[str, Any], agent_index: int) -> str:
        """The start of agent `agent_index`'s answer: for the helper, a code fence and `def aux(x):` up to `return `
        (it writes one expression); for the main agent, the code fence only. (Prefilled up to its `return`, the
        untrained SmolLM2-135M main agent wrote arithmetic on the numbers and never called `aux` correctly, 0 of 64;
        prefilled with its `def` line alone, it closed the fence at once.)"""
        if agent_index == HELPER_AGENT:
            return f"```python\ndef {self.helper_name}(x):\n    return "
        return "```python\n"

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """Agent 0 (helper): the rule; agent 1 (main): the function to write and that `aux` codes a number."""
        if agent_index not in (HELPER_AGENT, MAIN_AGENT):
            raise IndexError(f"{type(self).__name__} has agents 0 (helper) and 1 (main), got {agent_index}.")
        self.check_row(row)
        if agent_index == HELPER_AGENT:
            text = self.private_helper_template.format(rule=self._value(row, self.rule_column).strip(),
                                                       **self.name_fields(HELPER_AGENT))
        else:
            entry_point = self.entry_point(row)
            prompt = self._value(row, self.prompt_column).strip("\n")
            signature, description = function_parts(prompt, entry_point) or (entry_point + "(...)", "")
            text = self.private_main_template.format(entry_signature=signature, description=description,
                                                     **self.name_fields(MAIN_AGENT))
        prefill = self.prefill(row, agent_index)
        if not self.chat:
            return text + "\n\n" + prefill
        shots: list[dict[str, str]] = []
        if agent_index == MAIN_AGENT:
            called = self.example_call_name()
            for signature, description, answer in self.main_examples:
                shots += [{"role": "user", "content": self.private_main_template.format(
                              entry_signature=signature, description=description, **self.name_fields(MAIN_AGENT))},
                          {"role": "assistant", "content": f"```python\n{answer.format(helper_name=called)}\n```"}]
        return [*shots, {"role": "user", "content": text}, {"role": "assistant", "content": prefill}]

    def name_fields(self, agent_index: int) -> dict[str, str]:
        """The format fields that name the helper's function in agent `agent_index`'s prompt (`{helper_name}`)."""
        return {"helper_name": self.helper_name}

    def example_call_name(self) -> str:
        """The name the main agent's worked exchanges call."""
        return self.helper_name

    def assemble(self, row: Mapping[str, Any], helper_completion: Any, main_completion: Any) -> CodingSolution:
        """The joint action, each completion read after its own prefill."""
        return super().assemble(row, self.prefill(row, HELPER_AGENT) + completion_text(helper_completion),
                                self.prefill(row, MAIN_AGENT) + completion_text(main_completion))


NAMING_HELPER_TEMPLATE = """\
Write a Python function that returns the code of the number `x`: {rule}. Name it `{first}` or `{second}`: your \
partner calls it by one of these two names and cannot see your code, so the program works only if you choose the \
name your partner calls. Reply with only the code."""
"""The helper agent's prompt in [`NamingCodingEnv`] (format fields `{rule}`, `{first}`, `{second}`: the helper's
own order of the two names)."""

NAMING_MAIN_TEMPLATE = """\
Write a Python function `{entry_signature}`. {description}

Every number has a secret code that only your partner knows. Your partner writes the function that returns the code \
of `x` and names it `{first}` or `{second}`; you cannot see its code, so call it by the name you think your partner \
chose, and do not write it. Reply with only the code."""
"""The main agent's prompt in [`NamingCodingEnv`] (format fields `{entry_signature}`, `{description}`, `{first}`,
`{second}`: the main agent's own order of the two names)."""


class NamingCodingEnv(PrivateRuleCodingEnv):
    """Cooperative coding with private information and an interface the two agents must agree on (issue 55): the
    helper agent names its function one of two names, the main agent calls one of them, and neither sees the other's
    code, so the program works only if they chose the same name: a convention.

    Each agent's prompt lists the two names in its own order (`helper_order`, `main_order`), and the main agent's
    worked exchanges call its first name. With the default opposite orders each untrained agent leans to a different
    name, so an agent trained against its untrained partner learns the partner's habit, and two agents trained that
    way cross (the helper learns the main agent's first name, the main agent the helper's); a team trained together
    settles on one name. The helper's answer is prefilled up to `def ` (its first word is the name), the main agent's
    with the code fence. The joint action keeps the helper's first function called one of the names
    ([`~trl_marl.utils.code.first_definition_of`]): a helper that also defines the other name, or an alias, has chosen
    the first one. `CodingSolution.helper_name` is the name the helper chose; if it chose neither, the program has
    no helper.

    Example:

    ```python
    from trl_marl.data.team_coding import private_rule_rows
    from trl_marl.envs.coding_private import NamingCodingEnv
    from trl_marl.rewards.coding import CodingTeamReward

    env = NamingCodingEnv(chat=True)          # names ("aux", "code"): the helper lists `aux` first, the main `code`
    reward = CodingTeamReward(env)
    rows = private_rule_rows("train")
    ```

    Args:
        names (`tuple[str, str]`): The two names the helper may give its function.
        helper_order (`tuple[int, int]`): The order in which the helper's prompt lists `names`.
        main_order (`tuple[int, int]`): The order in which the main agent's prompt lists `names`; its worked
            exchanges call the first.
        helper_template (`str`): The helper agent's prompt ([`NAMING_HELPER_TEMPLATE`]).
        main_template (`str`): The main agent's prompt ([`NAMING_MAIN_TEMPLATE`]).
        **kwargs: [`PrivateRuleCodingEnv`]'s other arguments; `helper_name` defaults to `names[0]` (the name the
            rows' reference code uses).
    """

    def __init__(self, names: tuple[str, str] = ("aux", "code"), helper_order: tuple[int, int] = (0, 1),
                 main_order: tuple[int, int] = (1, 0), helper_template: str = NAMING_HELPER_TEMPLATE,
                 main_template: str = NAMING_MAIN_TEMPLATE, **kwargs: Any) -> None:
        if len(names) != 2 or len(set(names)) != 2 or not all(isinstance(n, str) and n.isidentifier() for n in names):
            raise ValueError(f"`names` must be two different Python identifiers, got {names!r}.")
        for field, order in (("helper_order", helper_order), ("main_order", main_order)):
            if sorted(order) != [0, 1]:
                raise ValueError(f"`{field}` must be (0, 1) or (1, 0), got {order!r}.")
        kwargs.setdefault("helper_name", names[0])
        super().__init__(helper_template=helper_template, main_template=main_template, **kwargs)
        self.names: tuple[str, str] = (names[0], names[1])
        self.helper_order: tuple[int, int] = (helper_order[0], helper_order[1])
        self.main_order: tuple[int, int] = (main_order[0], main_order[1])

    @property
    def helper_names(self) -> tuple[str, ...]:
        """The names the helper may choose."""
        return self.names

    def name_fields(self, agent_index: int) -> dict[str, str]:
        """The two names in agent `agent_index`'s own order (`{first}`, `{second}`)."""
        order = self.helper_order if agent_index == HELPER_AGENT else self.main_order
        return {"first": self.names[order[0]], "second": self.names[order[1]]}

    def example_call_name(self) -> str:
        """The main agent's worked exchanges call its first name."""
        return self.names[self.main_order[0]]

    def prefill(self, row: Mapping[str, Any], agent_index: int) -> str:
        """The helper's answer starts at its function's name (`def `), the main agent's with the code fence."""
        return "```python\ndef " if agent_index == HELPER_AGENT else "```python\n"

    def assemble(self, row: Mapping[str, Any], helper_completion: Any, main_completion: Any) -> CodingSolution:
        """The joint action: the helper's first function called one of `names` (and its imports), under the name it
        chose, with the main agent's code."""
        self.check_row(row)
        entry_point = self.entry_point(row)
        preamble = prompt_preamble(self._value(row, self.prompt_column), entry_point)
        helper_code = self.code_of(self.prefill(row, HELPER_AGENT) + completion_text(helper_completion))
        chosen, helper_code = first_definition_of(helper_code, self.names)
        if chosen is None:  # no function with either name (or code that does not parse): no helper
            chosen = self.helper_name
            helper_code = "" if parse_or_none(helper_code) is not None else helper_code
        main_code = self.code_of(self.prefill(row, MAIN_AGENT) + completion_text(main_completion))
        return analyze_solution(helper_code, main_code, entry_point, chosen, preamble)
