"""Cooperative coding with unassigned roles: two programmers, the same task, two functions, one each.

In MAGRPO's coding task ([`~trl_marl.envs.coding.CooperativeCodingEnv`]) the roles are given: agent 0 writes the
helper, agent 1 the main function. Here both agents get the same prompt, apart from "You are programmer 1" or "2":
the program needs a helper `aux` and the main function, each programmer writes exactly one of them, and neither sees
the other's code. Only the first of the two functions in each answer is kept
([`~trl_marl.utils.code.first_definition_of`]), so one agent cannot write both; the tests check both functions
([`~trl_marl.data.team_coding.division_coding_rows`]).

Why this task: the team succeeds only if the two agents agree who writes what, a convention that training them
together can find and training each against a frozen partner cannot. Both start with the same bias (a small model
writes `aux` first); an agent trained alone against that partner learns to write the main function, and so does
its partner trained alone against it: paired, they collide. The partner is also necessary by construction: without
its function the program lacks one of the two. (`trl_marl.teamwork` measures both properties.)

Example:

```python
from trl_marl.data.team_coding import division_coding_rows
from trl_marl.envs.coding_division import DivisionCodingEnv
from trl_marl.rewards.coding import CodingTeamReward

env = DivisionCodingEnv(chat=True, code_prefill="```python\\n")
reward = CodingTeamReward(env)  # the coding reward, on the assembled helper + main
rows = division_coding_rows("train")
```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..utils.code import extract_code, first_definition_of, function_parts, prompt_preamble
from .base import Prompt, Transcript
from .coding import CooperativeCodingEnv
from .coding_analysis import CodingSolution, analyze_solution

DIVISION_TEMPLATE = """\
You and a partner write one Python program together. It needs two functions:
1. `{helper_signature}`: {helper_doc}
2. `{entry_signature}`: {description} It calls `{helper_name}`.
Each of you writes exactly one of the two functions; your partner writes the other, and you cannot see each other's \
code. You are programmer {programmer}. Reply with only the code of your function."""
"""The prompt of both agents (format fields `{helper_signature}`, `{helper_doc}`, `{entry_signature}`,
`{description}`, `{helper_name}`, `{programmer}`: 1 or 2)."""

STUBS_DIVISION_TEMPLATE = """\
You and a partner write one Python program together. It needs these two functions:
```python
def {helper_signature}:
    \"\"\"{helper_doc}\"\"\"

def {entry_signature}:
    \"\"\"{description} It calls `{helper_name}`.\"\"\"
```
Each of you writes exactly one of the two functions; your partner writes the other, and you cannot see each other's \
code. You are programmer {programmer}. Reply with the code of your function only."""
"""The same task with both functions shown as stubs (their `def` lines and docstrings), helper first; meant for an
answer prefilled up to `def` (`code_prefill="```python\\ndef"`), so the first word an agent writes names the
function it chose. On SmolLM2-135M (16 training rows x 8, T = 0.7) the two programmers wrote `aux` first in 0.30 and
0.22 of their answers and the main function in 0.055 and 0.063: a shared bias, but a minority choice too rare to
explore (`benchmarks/learning/coding_pilot.py --task coding_division_stubs`)."""

CHOICES = ("helper", "main")
"""What an agent can choose to write ([`DivisionCodingEnv.choice`]); `None` when it wrote neither."""


class DivisionCodingEnv(CooperativeCodingEnv):
    """Cooperative coding where the two agents choose who writes the helper and who the main function.

    Both agents get `division_template` with the row's helper contract (`helper_signature`, `helper_doc`) and the
    main function's signature and description, and their programmer number (1 for agent 0, 2 for agent 1). From each
    answer the first function named `aux` or `entry_point` is kept, with the imports and constants before it; the
    agent that wrote `aux` is the team's helper, the other the main. When both wrote the same function, agent 0's is
    used and the other function is missing. One turn.

    The joint action is then a [`~trl_marl.envs.coding_analysis.CodingSolution`] like the one of
    [`~trl_marl.envs.coding.CooperativeCodingEnv`], so [`~trl_marl.rewards.coding.CodingTeamReward`] and its terms
    score it unchanged; with [`~trl_marl.data.team_coding.division_coding_rows`] the tests check both functions.

    Args:
        division_template (`str`): The prompt of both agents.
        **kwargs: [`~trl_marl.envs.coding.CooperativeCodingEnv`]'s arguments (`chat`, `code_prefill`, the columns, the
            executor, ...); `num_turns` must be 1.
    """

    def __init__(self, division_template: str = DIVISION_TEMPLATE, **kwargs: Any) -> None:
        if kwargs.get("num_turns", 1) != 1:
            raise ValueError(f"DivisionCodingEnv has one turn (num_turns=1), got num_turns={kwargs['num_turns']}.")
        super().__init__(**kwargs)
        self.division_template = division_template

    def _check_contract(self, row: Mapping[str, Any]) -> None:
        """The prompts need the helper's contract (`helper_signature`, `helper_doc`): both agents must know what each
        function does. (The rewards read only `prompt`, `entry_point` and `test`.)"""
        if self.helper_prompt(row) is None:
            raise ValueError(
                f"{type(self).__name__} needs the helper's contract in the columns {self.helper_signature_column!r} "
                f"and {self.helper_doc_column!r} (row {row.get('task_id', '')!r}); division_coding_rows() has them."
            )

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index` (programmer `agent_index + 1`): the same for both but the number."""
        if agent_index not in (0, 1):
            raise IndexError(f"{type(self).__name__} has agents 0 and 1, got {agent_index}.")
        self.check_row(row)
        self._check_contract(row)
        entry_point = self.entry_point(row)
        prompt = self._value(row, self.prompt_column).strip("\n")
        entry_signature, description = function_parts(prompt, entry_point) or (entry_point + "(...)", "")
        helper_signature, helper_doc = function_parts(self.helper_prompt(row) or "", self.helper_name) or ("", "")
        text = self.division_template.format(
            helper_signature=helper_signature, helper_doc=helper_doc, entry_signature=entry_signature,
            description=description.split("\n\n")[0].strip(), helper_name=self.helper_name,
            programmer=agent_index + 1,
        )
        if not self.chat:
            return text
        prefill = [{"role": "assistant", "content": self.code_prefill}] if self.code_prefill else []
        return [{"role": "user", "content": text}, *prefill]

    def part(self, row: Mapping[str, Any], completion: Any) -> tuple[str | None, str]:
        """Which function an answer wrote first (`"helper"`, `"main"` or `None`) and the answer's code reduced to
        it (see [`~trl_marl.utils.code.first_definition_of`])."""
        entry_point = self.entry_point(row)
        code = extract_code(self.answer_text(completion))
        name, kept = first_definition_of(code, [self.helper_name, entry_point])
        if name is None:
            return None, kept
        return ("helper" if name == self.helper_name else "main"), kept

    def choice(self, row: Mapping[str, Any], completion: Any) -> str | None:
        """Which of the two functions an answer wrote first: `"helper"`, `"main"` or `None`."""
        return self.part(row, completion)[0]

    def assemble(self, row: Mapping[str, Any], first_completion: Any, second_completion: Any) -> CodingSolution:
        """The joint action as a helper + main `CodingSolution`: the agent whose first function is `aux` is the
        helper, the other the main; when both wrote the same function, agent 0's is kept and the other is missing.

        Args:
            row (`Mapping`): The dataset row.
            first_completion, second_completion: The answers of agent 0 (programmer 1) and agent 1 (programmer 2).
        """
        self.check_row(row)
        entry_point = self.entry_point(row)
        preamble = prompt_preamble(self._value(row, self.prompt_column), entry_point)
        parts = [self.part(row, first_completion), self.part(row, second_completion)]
        helper = next((code for choice, code in parts if choice == "helper"), "")
        main = next((code for choice, code in parts if choice == "main"), "")
        if not helper and not main:  # neither wrote either function: keep the text, so syntax errors are reported
            helper = parts[0][1]
        return analyze_solution(helper, main, entry_point, self.helper_name, preamble)
