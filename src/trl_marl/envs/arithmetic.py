"""Synthetic arithmetic tasks for the offline demo and the tests.

`TargetSumEnv` is the smallest task where a team must *coordinate*: each agent sees only the target `T` (never
its partners' answers at turn 1) and writes a number; the team is rewarded when the numbers add up to `T`.
Untrained agents that answer a random valid number rarely succeed; a team trained with a centralized reward
learns a convention ("I say 3, you say T-3") that no single agent can find alone.

`ChatTargetSumEnv` is the same game for a real instruct model: a chat prompt per agent (a short system message, the
rules with the agent's role, and an assistant prefill `"My number is"` that the model continues), scored with
`TargetSumReward(leading=True)` (the leading integer of each completion).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import MultiAgentEnv, Prompt, Transcript


class TargetSumEnv(MultiAgentEnv):
    """Agents must write numbers that add up to the row's `target`.

    Turn 1: every agent sees `T=<target as two digits>:` (the format `trl_marl.toy`'s `TargetNumberTask` is
    pretrained on). Later turns: agent i sees `T=<target>:<its own last answer>+<the others' last answers>:`,
    so a multi-turn team can repair a failed attempt.

    Args:
        num_agents (`int`): Number of agents.
        num_turns (`int`): Number of turns.
        target_column (`str`): The dataset column holding the target.
    """

    def __init__(self, num_agents: int = 2, num_turns: int = 1, target_column: str = "target") -> None:
        super().__init__(num_agents, num_turns)
        self.target_column = target_column
        self.required_columns = (target_column,)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        head = f"T={int(row[self.target_column]):02d}:"
        if len(transcript) == 0:
            return head
        last = transcript[-1].responses
        order = [agent_index] + [a for a in range(self.num_agents) if a != agent_index]
        return head + "+".join(last[a].strip() for a in order) + ":"


CHAT_TARGET_SUM_SYSTEM_PROMPT = "Answer with one number."
"""The default system message of [`ChatTargetSumEnv`]: short, and it replaces the chat template's default one (e.g.
SmolLM2's 20-token "You are a helpful AI assistant named SmolLM, trained by Hugging Face")."""

CHAT_TARGET_SUM_TEMPLATE = (
    "You and a partner each pick a whole number from 0 to {target} without seeing each other's pick. "
    "You both win if the two numbers add up to exactly {target}. You are player {player}."
)
"""The default user message of [`ChatTargetSumEnv`] (fields `target` and `player`, the 1-based agent number)."""

CHAT_TARGET_SUM_RETRY = "Your partner picked {others}. Pick again: the two numbers must add up to exactly {target}."
"""The user message of [`ChatTargetSumEnv`]'s later turns (fields `others`, `target`)."""


class ChatTargetSumEnv(MultiAgentEnv):
    """The target-sum coordination game as chat prompts for a real instruct model, with an assistant prefill.

    Turn 1, agent i: `[system, user (the rules, "You are player i+1."), assistant prefill]`. The last message is the
    assistant's (`"My number is"` by default): trl-marl renders such a prompt with the chat template's
    `continue_final_message`, so the completion continues that sentence (`" 7."`) with no end-of-turn marker in
    between, and a weak model answers with a number far more often than when asked to (SmolLM2-135M-Instruct at
    T=1: 82% of completions start with an integer with the prefill, 10-25% without). Score it with
    `TargetSumReward(leading=True)`, which reads the leading integer of each completion.

    Later turns (`num_turns > 1`): the agent's previous answer (prefill + completion) as an assistant message, then
    a user message with the partners' previous answers, then the prefill again.

    Args:
        num_agents (`int`): Number of agents.
        num_turns (`int`): Number of turns.
        target_column (`str`): The dataset column holding the target.
        system_prompt (`str`, *optional*): The system message; `None` leaves it out (the chat template may then add
            its own default one).
        template (`str`): The user message, a format string over `target` and `player`.
        prefill (`str`): The start of the assistant's answer that the model continues; `""` gives no prefill (a new
            assistant turn).

    Example:

    ```python
    >>> from trl_marl.envs.base import Transcript
    >>> env = ChatTargetSumEnv(2)
    >>> [m["role"] for m in env.agent_prompt({"target": 8}, 1, Transcript())]
    ['system', 'user', 'assistant']
    >>> env.agent_prompt({"target": 8}, 1, Transcript())[-1]["content"]
    'My number is'
    ```
    """

    def __init__(self, num_agents: int = 2, num_turns: int = 1, target_column: str = "target",
                 system_prompt: str | None = CHAT_TARGET_SUM_SYSTEM_PROMPT, template: str = CHAT_TARGET_SUM_TEMPLATE,
                 prefill: str = "My number is") -> None:
        super().__init__(num_agents, num_turns)
        try:
            template.format(target=0, player=1)
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"ChatTargetSumEnv: `template` may only use the fields {{target}} and {{player}}, got "
                             f"{template!r} ({error!r}).") from error
        self.target_column = target_column
        self.system_prompt = system_prompt
        self.template = template
        self.prefill = prefill
        self.required_columns = (target_column,)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        target = int(row[self.target_column])
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        messages.append({"role": "user", "content": self.template.format(target=target, player=agent_index + 1)})
        for turn in transcript.turns:
            own = f"{self.prefill}{turn.responses[agent_index]}".strip()
            others = ", ".join(turn.responses[a].strip() for a in range(self.num_agents) if a != agent_index)
            messages.append({"role": "assistant", "content": own})
            messages.append({"role": "user", "content": CHAT_TARGET_SUM_RETRY.format(others=others, target=target)})
        if self.prefill:
            messages.append({"role": "assistant", "content": self.prefill})
        return messages
