"""The `MultiAgentEnv` protocol shared by every trl-marl trainer.

An environment is a *pure description* of a multi-agent interaction: given a dataset row and the transcript of
the episode so far, it says what each agent sees, what feedback (if any) comes back between turns, and when the
episode ends. It never calls a model and never trains, so a rollout can branch (MAGRPO's tree of joint actions),
be batched across many episodes, and be replayed in tests.

A transcript is a list of turns; each turn holds one response per agent and, optionally, the feedback the
environment gave after that turn::

    transcript = [
        Turn(responses=["3", "7"], feedback=None),     # turn 1: agent 0 said "3", agent 1 said "7"
        Turn(responses=["4", "6"], feedback="ok"),     # turn 2
    ]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..utils.tokens import Prompt  # what an agent sees: text, chat messages or token ids


def prompt_problem(prompt: Any) -> str | None:
    """What is wrong with `prompt` as one agent's [`Prompt`], in words (`None` when it is valid).

    Valid: a string; a non-empty list of chat messages, each a mapping with `role` and `content`; a non-empty list
    (or tuple) of integer token ids.
    """
    if isinstance(prompt, str):
        return None
    if isinstance(prompt, (list, tuple)):
        if len(prompt) == 0:
            return "an empty list"
        if all(isinstance(m, Mapping) for m in prompt):
            if not isinstance(prompt, list):
                return "a tuple of chat messages (chat messages must be a list)"
            for m in prompt:
                if "role" not in m or "content" not in m:
                    return f"chat messages with a message lacking 'role' or 'content' ({dict(m)!r:.80})"
            return None
        if all(isinstance(t, (int, np.integer)) and not isinstance(t, (bool, np.bool_)) for t in prompt):
            return None
        if all(isinstance(t, str) for t in prompt):
            return (f"a list of {len(prompt)} strings (one prompt per agent? `agent_prompt` returns the prompt of the "
                    "agent `agent_index` only)")
        kinds = sorted({type(t).__name__ for t in prompt})
        return f"a list of {', '.join(kinds)} (neither chat messages nor token ids)"
    return f"{type(prompt).__name__} {prompt!r:.60}"


@dataclass(frozen=True)
class Turn:
    """One turn of an episode: the response of every agent, and the environment's feedback after it.

    Args:
        responses (`tuple[str, ...]`): The text each agent produced at this turn, indexed by agent.
        feedback (`str` or `tuple[str | None, ...]`, *optional*): What the environment reports after the turn:
            one string for every agent, or one entry per agent (`None` for nothing).
    """

    responses: tuple[str, ...]
    feedback: str | tuple[str | None, ...] | None = None

    def feedback_for(self, agent_index: int) -> str | None:
        """The feedback that agent `agent_index` sees after this turn."""
        if self.feedback is None or isinstance(self.feedback, str):
            return self.feedback
        return self.feedback[agent_index]


@dataclass(frozen=True)
class Transcript:
    """The episode so far: an immutable sequence of [`Turn`]s (turns x agents of responses)."""

    turns: tuple[Turn, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, index: int) -> Turn:
        return self.turns[index]

    if TYPE_CHECKING:  # iterated through `__getitem__`, turn by turn

        def __iter__(self) -> Iterator[Turn]: ...

    def extend(self, responses: Sequence[str], feedback: str | Sequence[str | None] | None = None) -> Transcript:
        """A new transcript with one more turn (transcripts are shared between branches, so never mutated)."""
        if feedback is not None and not isinstance(feedback, str):
            feedback = tuple(feedback)
        return Transcript(self.turns + (Turn(tuple(responses), feedback),))

    def responses_of(self, agent_index: int) -> list[str]:
        """Everything agent `agent_index` said, turn by turn."""
        return [turn.responses[agent_index] for turn in self.turns]


class MultiAgentEnv(ABC):
    """Base class of the environments that trl-marl trainers run.

    Subclasses implement [`~MultiAgentEnv.agent_prompt`] and may override [`~MultiAgentEnv.feedback`] and
    [`~MultiAgentEnv.is_done`]. Set `num_agents` and `num_turns` (the maximum number of turns), and list the
    dataset columns the environment reads in `required_columns`, so that a bad dataset is rejected before the
    first training step.

    Example:

    ```python
    from trl_marl.envs import MultiAgentEnv

    class EchoEnv(MultiAgentEnv):
        required_columns = ("question",)

        def agent_prompt(self, row, agent_index, transcript):
            if len(transcript) == 0:
                return f"Agent {agent_index}, answer: {row['question']}"
            partner = transcript[-1].responses[1 - agent_index]
            return f"Your partner said {partner}. Answer again: {row['question']}"

    env = EchoEnv(num_agents=2, num_turns=2)
    ```
    """

    required_columns: tuple[str, ...] = ()

    def __init__(self, num_agents: int = 2, num_turns: int = 1) -> None:
        if num_agents < 1:
            raise ValueError(f"`num_agents` must be >= 1, got {num_agents}.")
        if num_turns < 1:
            raise ValueError(f"`num_turns` must be >= 1, got {num_turns}.")
        self.num_agents = num_agents
        self.num_turns = num_turns

    # ----- what subclasses implement -----
    @abstractmethod
    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt agent `agent_index` sees at turn `len(transcript) + 1` of the episode of `row`."""

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str | Sequence[str | None] | None:
        """Feedback after the last turn of `transcript` (e.g. test results); shown in the next turn's prompts."""
        return None

    def is_done(self, row: Mapping[str, Any], transcript: Transcript) -> bool:
        """Whether the episode ends after `transcript` (by default after `num_turns` turns)."""
        return len(transcript) >= self.num_turns

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        """Raise a clear error if the values of `row` (row `index` of `dataset_name`) cannot become prompts.

        Trainers call this on the first rows of each dataset when they are built, before calling `agent_prompt`
        on those rows (whose results are then checked too). Override it to check the types of the columns that
        your environment reads, naming the column and the fix. The default checks nothing.
        """
        return None

    # ----- shared helpers -----
    def prompts(self, row: Mapping[str, Any], transcript: Transcript) -> list[Prompt]:
        """Every agent's prompt for the next turn (a helper built on `agent_prompt`).

        The trainers never call this method: they call `agent_prompt` once per agent (rollouts batch and branch
        per agent). Override `agent_prompt`, not this; a trainer refuses an environment that overrides `prompts`.
        """
        return [self.agent_prompt(row, agent_index, transcript) for agent_index in range(self.num_agents)]

    def validate_row(self, row: Mapping[str, Any], where: str = "the dataset") -> None:
        """Raise a clear error if `row` lacks a column this environment needs."""
        missing = [c for c in self.required_columns if c not in row]
        if missing:
            raise KeyError(
                f"{type(self).__name__} needs the column(s) {missing} but {where} has only {sorted(row)}. "
                "Rename your dataset's columns (`dataset.rename_column(old, new)`) or configure the environment "
                "to read the columns you have."
            )


class PromptEnv(MultiAgentEnv):
    """The simplest environment: every agent answers a `prompt` column, once or over several turns.

    With several turns, each agent sees the original prompt followed by the previous turn's responses of all
    agents, labelled `Agent <i>:` (its own included), then answers again. Per-agent prompts can be given as a list
    column `agent_prompts` (one entry per agent, exactly as many entries as agents). Plain TRL prompt datasets
    therefore work unchanged with one agent and one turn.

    Args:
        num_agents (`int`): Number of agents.
        num_turns (`int`): Number of turns.
        prompt_column (`str`): The column holding the prompt (a string or chat messages).
        separator (`str`): Text inserted between the prompt and the previous turn's responses.
    """

    def __init__(
        self, num_agents: int = 1, num_turns: int = 1, prompt_column: str = "prompt", separator: str = "\n"
    ) -> None:
        super().__init__(num_agents, num_turns)
        self.prompt_column = prompt_column
        self.separator = separator
        self.required_columns = (prompt_column,)

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        """The `prompt` column (or `agent_prompts`, when a row has it) must hold one valid prompt per agent."""
        agent_prompts = row.get("agent_prompts")
        if agent_prompts is None:
            problem = prompt_problem(row[self.prompt_column])
            if problem is not None:
                raise TypeError(
                    f'`{dataset_name}["{self.prompt_column}"]` at row {index} is {problem}; each prompt must be a '
                    "string, a list of chat messages [{'role': ..., 'content': ...}] or a list of token ids. Fix "
                    f"or drop such rows (e.g. `{dataset_name}.filter(lambda r: isinstance(r[{self.prompt_column!r}], "
                    "str))`, or `.map` them to strings)."
                )
            return
        field = f'`{dataset_name}["agent_prompts"]`'
        if isinstance(agent_prompts, (str, bytes)) or not isinstance(agent_prompts, Sequence):
            raise TypeError(
                f"{field} at row {index} is a {type(agent_prompts).__name__}, but it must be a list with one prompt "
                f"per agent ({self.num_agents} here), e.g. [\"You write the intro.\", \"You write the ending.\"]. "
                f"To give every agent the same prompt, use the `{self.prompt_column}` column and drop `agent_prompts`."
            )
        if len(agent_prompts) != self.num_agents:
            raise ValueError(
                f"{field} at row {index} has {len(agent_prompts)} entries but the team has {self.num_agents} agents: "
                "give exactly one prompt per agent (or change `num_agents`)."
            )
        for a, prompt in enumerate(agent_prompts):
            problem = prompt_problem(prompt)
            if problem is not None:
                raise TypeError(
                    f"{field}[{a}] at row {index} (agent {a}'s prompt) is {problem}; each prompt must be a string, "
                    "a list of chat messages or a list of token ids."
                )

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        prompt = row[self.prompt_column]
        agent_prompts = row.get("agent_prompts")
        if agent_prompts is not None:
            prompt = agent_prompts[agent_index]
        if len(transcript) == 0:
            return prompt
        history = self.separator.join(f"Agent {i}: {r}" for i, r in enumerate(transcript[-1].responses))
        if isinstance(prompt, str):
            return prompt + self.separator + history + self.separator
        return [*prompt, {"role": "user", "content": history}]


class TokenizedPromptEnv(MultiAgentEnv):
    """Single-turn environment over an already tokenized prompt column (TRL's PPO datasets: `input_ids`).

    Every agent sees the same token ids. This is the environment of the drop-in [`~trl_marl.PPOTrainer`].

    Args:
        num_agents (`int`): Number of agents.
        column (`str`): The column holding the token ids.
    """

    def __init__(self, num_agents: int = 1, column: str = "input_ids") -> None:
        super().__init__(num_agents, num_turns=1)
        self.column = column
        self.required_columns = (column,)

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        """The token-id column must hold a non-empty list of integers in every row."""
        ids = row[self.column]
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            ids = ids.tolist()
        problem = "a string" if isinstance(ids, str) else prompt_problem(ids)
        if problem is None and _is_chat_messages(ids):
            problem = "chat messages"
        if problem is not None:
            raise TypeError(
                f'`{dataset_name}["{self.column}"]` at row {index} is {problem}, but it must be a non-empty list of '
                f"token ids: tokenize the prompts first, e.g. `{dataset_name}.map(lambda r: tokenizer(r['prompt']))`."
            )

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        return [int(t) for t in row[self.column]]


def _is_chat_messages(prompt: Any) -> bool:
    return isinstance(prompt, list) and bool(prompt) and isinstance(prompt[0], Mapping)
