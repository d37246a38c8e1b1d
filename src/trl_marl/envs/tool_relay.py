"""The tool relay (issue 38): one agent has a calculator, the other must answer from what the first one says.

Two agents, two turns, question "What is a * b?" (two-digit factors: beyond a 135M model's mental arithmetic).

- Agent 0, the *calculator agent*, is given the `calculator` tool (`trl_marl.tools.calculator`) by the trainer
  (`MAGRPOTrainer(tools=[[calculator], None])`). Its prompt shows two worked exchanges (a call, its result, the
  stated product), then asks the question. At turn 2 it sees its own answer and is asked to restate the product.
- Agent 1, the *reporter*, has no tools. At turn 1 it is told that its partner is computing the product and gives
  its own guess; at turn 2 it reads its partner's turn-1 answer and gives the final answer as `Answer: <number>`.

The team reward ([`~trl_marl.rewards.tool_relay.ToolRelayReward`]) is 1 at turn 1 when the calculator agent's answer
ends with the product, and 1 at turn 2 when the reporter's final answer is the product: the team wins only when the
tool is called right *and* its result is passed on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript

CALCULATOR_SYSTEM = "You are the calculator of a team. Always use the calculator tool for arithmetic."
"""The calculator agent's system message (the chat template appends the tool's description)."""


def calculator_call(expression: str) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`: one call of the `calculator` on `expression` (for worked exchanges)."""
    return [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}]


WORKED_EXCHANGES: tuple[dict[str, Any], ...] = (
    {"role": "user", "content": "What is 12 * 34?"},
    {"role": "assistant", "content": "", "tool_calls": calculator_call("12*34")},
    {"role": "tool", "name": "calculator", "content": "408"},
    {"role": "assistant", "content": "12 * 34 = 408"},
    {"role": "user", "content": "What is 56 * 78?"},
    {"role": "assistant", "content": "", "tool_calls": calculator_call("56*78")},
    {"role": "tool", "name": "calculator", "content": "4368"},
    {"role": "assistant", "content": "56 * 78 = 4368"},
)
"""The calculator agent's two worked exchanges (SmolLM2-135M-Instruct calls the tool in about half of its samples
with them, and never without: measured 0 of 24 with an instruction alone, 14 of 24 with these two)."""


class ToolRelayEnv(MultiAgentEnv):
    """The tool relay: agent 0 computes with a calculator, agent 1 answers from what agent 0 said (module docstring).

    Rows: `question` ("What is a * b?"), `a`, `b` (`trl_marl.data.tool_relay`).
    """

    required_columns = ("question", "a", "b")

    def __init__(self) -> None:
        super().__init__(num_agents=2, num_turns=2)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        question = row["question"]
        if agent_index == 0:
            messages = [{"role": "system", "content": CALCULATOR_SYSTEM}, *(dict(m) for m in WORKED_EXCHANGES),
                        {"role": "user", "content": question}]
            if len(transcript):
                messages += [{"role": "assistant", "content": transcript[0].responses[0]},
                             {"role": "user", "content": "Your partner read your answer. State the product again."}]
            return messages
        if not len(transcript):
            text = (f"Your partner has a calculator and is computing {question[8:-1]}. Until you hear from them, "
                    "give your best guess as 'Answer: <number>'.")
        else:
            said = transcript[0].responses[0].strip() or "(nothing)"
            text = (f"{question} Your partner used a calculator and said: \"{said}\". Give the final answer as "
                    "'Answer: <number>'.")
        return [{"role": "user", "content": text}]
