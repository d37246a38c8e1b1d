"""The tool division (issue 55): two agents with calculators, two products, and they must agree who computes which.

Both agents have the `calculator` tool (`MAGRPOTrainer(tools=[[calculator], [calculator]])`) and the same prompt but
for their number: a system message with the team's rule ("your partner computes one and you the other") and the
agent's number ([`DIVISION_SYSTEM`]), two worked exchanges that each compute one of two products
([`DIVISION_EXCHANGES`]), then the row's question, "Product 1 is a * b and product 2 is c * d. Compute one of them."
Neither agent sees its partner's answer. The team reward
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

from collections.abc import Mapping, Sequence
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript
from .tool_relay import calculator_call

DIVISION_SYSTEM = (
    "You are agent {agent} of a team of two calculators. Always use the calculator tool for arithmetic. Each question "
    "has two products: your partner computes one and you the other; if you both compute the same one, the team fails.")
"""Both agents' system message (format field `{agent}`; the chat template appends the tool's description): the
team's rule and the agent's number."""

DIVISION_QUESTION = "Product 1 is {a} * {b} and product 2 is {c} * {d}. Compute one of them."
"""Both agents' question (format fields `{a}`, `{b}`, `{c}`, `{d}`), in the form of the worked exchanges."""


DIVISION_EXCHANGES: tuple[dict[str, Any], ...] = (
    {"role": "user", "content": DIVISION_QUESTION.format(a=12, b=34, c=56, d=78)},
    {"role": "assistant", "content": "", "tool_calls": calculator_call("56*78")},
    {"role": "tool", "name": "calculator", "content": "4368"},
    {"role": "assistant", "content": "56 * 78 = 4368"},
    {"role": "user", "content": DIVISION_QUESTION.format(a=23, b=45, c=67, d=89)},
    {"role": "assistant", "content": "", "tool_calls": calculator_call("23*45")},
    {"role": "tool", "name": "calculator", "content": "1035"},
    {"role": "assistant", "content": "23 * 45 = 1035"},
)
"""Two worked exchanges of [`DIVISION_QUESTION`], the first computing product 2 and the second product 1 (no agent
number: the division is left to the team). With them and [`DIVISION_SYSTEM`], on 16 training rows the untrained
SmolLM2-135M-Instruct began its answer with a tool call with probability 0.73, and the call's first factor was
product 1's with probability 0.82 and product 2's with 0.15 for both agents (next-token probes, 2026-12-04)."""

FIRST_SYSTEM = "You are one of the two calculators of a team. Always use the calculator tool for arithmetic."
"""The first design's system message (with the tool relay's worked exchanges and [`FIRST_TEMPLATE`])."""

FIRST_TEMPLATE = (
    "Your team needs two products: product 1 is {a} * {b} and product 2 is {c} * {d}. You and your partner each "
    "compute exactly one of them with the calculator and state it; you cannot see each other's answer, and if you "
    "both state the same product, the team fails. You are agent {agent} of 2: decide whether you compute product 2 "
    "({c} * {d}) or product 1 ({a} * {b}).")
"""The first design's question (format fields `{a}`, `{b}`, `{c}`, `{d}`, `{agent}`), after the tool relay's worked
exchanges of one product each: its pilot failed (the untrained model discussed the instruction instead of calling the
calculator; a tool call began its answer with probability 0.026)."""


class ToolDivisionEnv(MultiAgentEnv):
    """Two agents with calculators state one product each of a row's two (module docstring).

    Args:
        template (`str`): Both agents' question, formatted with the row's `a`, `b`, `c`, `d` and the agent's number
            (`agent`: 1 for agent 0, 2 for agent 1).
        system (`str`): Both agents' system message, formatted with the agent's number (`agent`).
        exchanges (`Sequence[dict]`): The worked exchanges between the system message and the question.
    """

    required_columns = ("a", "b", "c", "d")

    def __init__(self, template: str = DIVISION_QUESTION, system: str = DIVISION_SYSTEM,
                 exchanges: Sequence[Mapping[str, Any]] = DIVISION_EXCHANGES) -> None:
        super().__init__(num_agents=2, num_turns=1)
        self.template = template
        self.system = system
        self.exchanges = tuple(dict(m) for m in exchanges)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """Agent `agent_index`'s prompt: the system message, the worked exchanges and the question with its number."""
        if agent_index not in (0, 1):
            raise IndexError(f"{type(self).__name__} has agents 0 and 1, got {agent_index}.")
        question = self.template.format(a=row["a"], b=row["b"], c=row["c"], d=row["d"], agent=agent_index + 1)
        return [{"role": "system", "content": self.system.format(agent=agent_index + 1)},
                *(dict(m) for m in self.exchanges), {"role": "user", "content": question}]
