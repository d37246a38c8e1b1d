"""MAGRPO's coding task written by one policy: the helper and the main function in one code block.

The single-policy baseline of [`~trl_marl.envs.coding.CooperativeCodingEnv`]. [`CentralizedEnv`] asks one policy for
every agent's part in tagged sections; for code a small model writes one code block far more readily than tags
around code, so this view asks for both functions in one block and splits the block into the two agents' parts:
the helper's `def` (with the imports before it) is agent 0's code, everything else agent 1's. The team's rewards
(`CodingTeamReward`, `PassRateReward`) then score the split program exactly as they score a team's, through
[`~trl_marl.rewards.centralized.CentralizedReward`].

Example:

```python
>>> from trl_marl.envs.coding_central import split_helper
>>> split_helper("def main(x):\\n    return aux(x) + 1\\n\\ndef aux(x):\\n    return 2 * x", "aux")
('def aux(x):\\n    return 2 * x', 'def main(x):\\n    return aux(x) + 1')
```
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from ..utils.code import extract_code, function_parts, parse_or_none
from ..utils.text import completion_text
from .base import Prompt, Transcript
from .centralized import CentralizedEnv
from .coding import CooperativeCodingEnv

CENTRAL_CODING_TEMPLATE = """\
Write a Python function `{entry_signature}`. {description}

First write a helper function `{helper_signature}`: {helper_doc} Then write `{entry_point}`, which calls \
`{helper_name}`.

Reply with only the code."""
"""The single policy's prompt. Placeholders: `{entry_signature}`, `{description}`, `{entry_point}`,
`{helper_signature}`, `{helper_doc}`, `{helper_name}` (the row's contract, as the team's agents see it)."""

CENTRAL_CODING_FREE_TEMPLATE = """\
Write a Python function `{entry_signature}`. {description}

First write a helper function `{helper_name}` that does one step of the work, then write `{entry_point}`, which \
calls `{helper_name}`.

Reply with only the code."""
"""The single policy's prompt for a row without the helper's contract (HumanEval, MBPP): the policy chooses the
helper, as the team's helper agent does then. Placeholders as [`CENTRAL_CODING_TEMPLATE`]'s, without the helper's
signature and doc."""


def split_helper(code: str, helper_name: str) -> tuple[str, str]:
    """`code` split into the helper's part (its top-level `def helper_name` and the imports before the first
    function) and the rest (every other top-level statement, in order). Code that does not parse is split by lines: a
    line `def helper_name(` at column 0 starts the helper's part, which ends at the next non-blank line at column 0;
    the program built from the two parts then fails to parse as the original did."""
    tree = parse_or_none(code)
    lines = code.splitlines()
    helper: list[str] = []
    rest: list[str] = []
    if tree is not None:
        seen_function = False
        for node in tree.body:
            start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            text = "\n".join(lines[start - 1:node.end_lineno])
            is_helper = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == helper_name
            is_import = isinstance(node, (ast.Import, ast.ImportFrom)) and not seen_function
            seen_function = seen_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            (helper if is_helper or is_import else rest).append(text)
        return "\n\n".join(helper), "\n\n".join(rest)
    target = rest
    block: list[str] = []
    for line in lines:
        if line[:1] not in ("", " ", "\t"):  # a line at column 0 ends the block before it
            target.extend(block)
            block = []
            target = helper if line.startswith((f"def {helper_name}(", f"async def {helper_name}(")) else rest
        block.append(line)
    target.extend(block)
    return "\n".join(helper).strip("\n"), "\n".join(rest).strip("\n")


class CentralizedCodingEnv(CentralizedEnv):
    """One policy writes both functions of a [`CooperativeCodingEnv`] row in one code block (the single-policy arm of
    MAGRPO's coding comparison).

    The prompt states the main function and the helper's contract (the row's `helper_signature` and `helper_doc`;
    for rows without them, such as HumanEval's, the policy chooses the helper) and asks for both, the helper first;
    the completion continues the wrapped env's `code_prefill`. [`split`] gives the helper's `def` to agent 0 and the
    rest to agent 1, so the team's coding rewards score the program unchanged (wrap them in
    [`~trl_marl.rewards.centralized.CentralizedReward`]). One turn only.

    Args:
        env (`CooperativeCodingEnv`): The team's coding environment (chat or plain, its prefill, helper name).
        template (`str`): The prompt; see [`CENTRAL_CODING_TEMPLATE`] for its placeholders.
        free_template (`str`): The prompt of a row without the helper's contract ([`CENTRAL_CODING_FREE_TEMPLATE`]).

    Example:

    ```python
    >>> from trl_marl.envs import CooperativeCodingEnv
    >>> from trl_marl.envs.coding_central import CentralizedCodingEnv
    >>> env = CentralizedCodingEnv(CooperativeCodingEnv(chat=True, code_prefill="```python\\n"))
    >>> env.split("def aux(x):\\n    return x\\n\\ndef f(x):\\n    return aux(x)\\n```")
    ['def aux(x):\\n    return x', 'def f(x):\\n    return aux(x)']
    ```
    """

    env: CooperativeCodingEnv  # the wrapped environment (`__init__` checks its type)
    wraps = CooperativeCodingEnv
    one_turn = True

    def __init__(self, env: CooperativeCodingEnv, template: str = CENTRAL_CODING_TEMPLATE,
                 free_template: str = CENTRAL_CODING_FREE_TEMPLATE) -> None:
        self.check_wrapped(env)  # before its `code_prefill` is read
        super().__init__(env, tags=("helper", "main"), prefill=env.code_prefill)
        self.template = template
        self.free_template = free_template

    def split(self, text: Any) -> list[str]:
        """The helper's code and the main code of one completion (the prefill, then the completion's code block)."""
        if isinstance(text, list):
            text = text[-1]["content"] if text else ""
        code = extract_code(self.prefill + completion_text(text))
        return list(split_helper(code, self.env.helper_name))

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        env: CooperativeCodingEnv = self.env
        env.check_row(row)
        helper_prompt = env.helper_prompt(row)
        entry_point = env.entry_point(row)
        prompt = str(row[env.prompt_column]).strip("\n")
        entry_signature, description = function_parts(prompt, entry_point) or (entry_point + "(...)", "")
        helper_signature, helper_doc = ("", "")
        if helper_prompt is not None:
            helper_signature, helper_doc = function_parts(helper_prompt, env.helper_name) or ("", "")
        template = self.template if helper_prompt is not None else self.free_template
        text = template.format(entry_signature=entry_signature, description=description, entry_point=entry_point,
                               helper_signature=helper_signature, helper_doc=helper_doc,
                               helper_name=env.helper_name)
        if not env.chat:
            return text + "\n\n" + self.prefill
        messages = [{"role": "user", "content": text}]
        return messages + [{"role": "assistant", "content": self.prefill}] if self.prefill else messages
