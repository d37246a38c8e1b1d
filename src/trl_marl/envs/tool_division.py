"""The tool division (issue 55): two agents with calculators, two products, and they must agree who computes which.

Both agents have the `calculator` tool (`MAGRPOTrainer(tools=[[calculator], [calculator]])`) and the same prompt but
for their number: the two worked exchanges of the tool relay ([`~trl_marl.envs.tool_relay.WORKED_EXCHANGES`], one
product each), then "Your team needs two products: product 1 is a * b and product 2 is c * d", each agent to compute
and state exactly one of them, without seeing its partner's answer. The team reward
([`~trl_marl.rewards.tool_division.ToolDivisionReward`]) pays each product stated by exactly one agent: if both state
the same one, neither product counts. So the team succeeds only by a convention (agent 1 computes one product, agent
2 the other), as in the split game, and a two-digit product needs the calculator (a 135M model cannot multiply in its
head). Agents trained against a frozen partner with the same lean as themselves each learn the product their partner
rarely states, and paired they collide: what joint training can find and separate training cannot.

One turn. Rows: [`~trl_marl.data.tool_relay.tool_division_rows`] (`a`, `b`, `c`, `d`, `answer1`, `answer2`).

Example:

```python
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.data.tool_relay import tool_division_rows, tool_relay_split
from trl_marl.envs.tool_division import ToolDivisionEnv
from trl_marl.rewards.tool_division import ToolDivisionReward
from trl_marl.tools import calculator

rows = tool_division_rows(tool_relay_split()[0], 64, seed=0)
trainer = MAGRPOTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct", env=ToolDivisionEnv(),
                        reward_funcs=ToolDivisionReward(), tools=[[calculator], [calculator]],
                        args=MAGRPOConfig(output_dir="out", num_agents=2, max_tool_calling_iterations=2),
                        train_dataset=Dataset.from_list(rows))
```
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript
from .tool_relay import WORKED_EXCHANGES

DIVISION_SYSTEM = "You are one of the two calculators of a team. Always use the calculator tool for arithmetic."
"""Both agents' system message (the chat template appends the tool's description)."""

TOOL_DIVISION_TEMPLATE = (
    "Your team needs two products: product 1 is {a} * {b} and product 2 is {c} * {d}. You and your partner each "
    "compute exactly one of them with the calculator and state it; you cannot see each other's answer, and if you "
    "both state the same product, the team fails. You are agent {agent} of 2: decide whether you compute product 2 "
    "({c} * {d}) or product 1 ({a} * {b}).")
"""Both agents' question (format fields `{a}`, `{b}`, `{c}`, `{d}`, `{agent}`): the decision names product 2 first,
each with its factors, the wording of the coding division's ninth design, the first of its candidates to pass its
pilot gates."""


class ToolDivisionEnv(MultiAgentEnv):
    """Two agents with calculators state one product each of a row's two (module docstring).

    Args:
        template (`str`): Both agents' question, formatted with the row's `a`, `b`, `c`, `d` and the agent's number
            (`agent`: 1 for agent 0, 2 for agent 1).
    """

    required_columns = ("a", "b", "c", "d")

    def __init__(self, template: str = TOOL_DIVISION_TEMPLATE) -> None:
        super().__init__(num_agents=2, num_turns=1)
        self.template = template

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """Agent `agent_index`'s prompt: the system message, the worked exchanges and the question with its number."""
        if agent_index not in (0, 1):
            raise IndexError(f"{type(self).__name__} has agents 0 and 1, got {agent_index}.")
        question = self.template.format(a=row["a"], b=row["b"], c=row["c"], d=row["d"], agent=agent_index + 1)
        return [{"role": "system", "content": DIVISION_SYSTEM}, *(dict(m) for m in WORKED_EXCHANGES),
                {"role": "user", "content": question}]
