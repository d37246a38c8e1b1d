"""The centralised single-policy baseline: one model writes every agent's part in one completion.

Does a task need several agents at all? The fair comparison keeps everything but the team: the same environment,
the same team reward, the same budget, and *one* policy that writes all the agents' parts at once, each in its own
tagged section. [`CentralizedEnv`] turns any text [`MultiAgentEnv`] into that one-agent task:

- its prompt shows what each agent would see (the wrapped env's `agent_prompt` of every agent, on the transcript
  the team would have), and asks for one section per agent, `<agent_0>...</agent_0>`, `<agent_1>...</agent_1>`
  (or the role names given as `tags`);
- the single completion is split back into the agents' parts with [`split_sections`] (a missing or malformed
  section is the empty string), which become the wrapped env's transcript: the feedback, the end of the episode
  and the next turn's prompts are the wrapped env's, as if the team had written those parts;
- [`~trl_marl.rewards.centralized.CentralizedReward`] scores the parts with the *team* reward, called exactly as a
  team's joint action is scored (`agent_completions` one list per agent, the agents' own prompts, the team's
  transcript).

Example:

```python
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import CentralizedEnv, CooperativeWritingEnv
from trl_marl.rewards import CentralizedReward, WritingTeamReward

env = CentralizedEnv(CooperativeWritingEnv(), tags=("summary", "detailed"))
trainer = MAGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", env=env,
                        reward_funcs=CentralizedReward(env, WritingTeamReward()),
                        args=MAGRPOConfig(num_agents=1, ...), train_dataset=...)
```
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from .base import MultiAgentEnv, Prompt, Transcript, Turn

PromptFormatter = Callable[[Sequence[str], Sequence[str]], str]
"""`format_prompt(agent_texts, tags) -> str`: the single policy's prompt from the text each agent would see."""


def split_sections(text: str, tags: Sequence[str]) -> list[str]:
    """The part of each agent in a centralised completion: the text of its `<tag>...</tag>` section.

    For each tag, the first section opened by `<tag>` and closed by the next `</tag>` is taken, with surrounding
    whitespace removed. A part is the empty string when its section is missing, unclosed, empty or malformed (it
    holds a tag of any agent, e.g. crossed sections); sections may come in any order, text outside the sections
    is ignored, and later duplicates are ignored. Linear in the length of `text`: a completion of many unclosed
    opening tags costs one scan, not one per tag.

    Example:

    ```python
    >>> split_sections("<agent_0> 3 </agent_0>junk<agent_1>7</agent_1>", ["agent_0", "agent_1"])
    ['3', '7']
    >>> split_sections("<agent_1>7", ["agent_0", "agent_1"])
    ['', '']
    ```
    """
    markers = [m for t in tags for m in (f"<{t}>", f"</{t}>")]
    parts = []
    for tag in tags:  # one scan per marker: linear in the length of `text` (a regular expression was quadratic)
        opening, closing = f"<{tag}>", f"</{tag}>"
        start = text.find(opening)
        end = -1 if start < 0 else text.find(closing, start + len(opening))
        part = text[start + len(opening):end].strip() if end >= 0 else ""
        parts.append("" if any(m in part for m in markers) else part)
    return parts


def _prompt_text(prompt: Prompt, agent_index: int) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(m, Mapping) for m in prompt):
        return "\n\n".join(str(m["content"]) for m in prompt if isinstance(m, Mapping))  # (every one is)
    raise TypeError(
        f"CentralizedEnv can only combine text prompts, but agent {agent_index}'s prompt is "
        f"{type(prompt).__name__} {prompt!r:.60} (token ids?). Wrap an environment whose `agent_prompt` returns "
        "strings or chat messages."
    )


def default_prompt(agent_texts: Sequence[str], tags: Sequence[str]) -> str:
    """The default prompt of [`CentralizedEnv`]: the instruction, then what each agent sees (once if all see the same).

    Example:

    ```python
    >>> print(default_prompt(["T=10:", "T=10:"], ["a", "b"]))
    You write the parts of all 2 agents of a team, each inside its own tags: <a>...</a> <b>...</b>
    <BLANKLINE>
    Every agent sees:
    T=10:
    ```
    """
    sections = " ".join(f"<{t}>...</{t}>" for t in tags)
    head = f"You write the parts of all {len(tags)} agents of a team, each inside its own tags: {sections}\n\n"
    if len(set(agent_texts)) == 1:
        return head + f"Every agent sees:\n{agent_texts[0]}"
    return head + "\n\n".join(f"<{t}> sees:\n{text}" for t, text in zip(tags, agent_texts))


class CentralizedEnv(MultiAgentEnv):
    """A one-agent view of `env`: a single policy writes every agent's part, in tagged sections, in one completion.

    The wrapped env keeps its meaning: at each turn the prompt is built from the wrapped env's `agent_prompt` of
    every agent on the team transcript (the parts of the previous turns, split with [`split_sections`]); feedback
    and the end of an episode are the wrapped env's on that transcript (the feedback is stored unchanged, per agent
    when the wrapped env gives one entry per agent). Train it with `num_agents=1` and score it with
    [`~trl_marl.rewards.centralized.CentralizedReward`] around the team reward.

    Args:
        env (`MultiAgentEnv`): The team environment, whose prompts are text (strings or chat messages).
        tags (`Sequence[str]`, *optional*): One section name per agent (e.g. `("summary", "detailed")`); default
            `agent_0`, `agent_1`, ... Names are unique and made of letters, digits, `_`, `-` or `.`.
        format_prompt (`Callable`, *optional*): `format_prompt(agent_texts, tags) -> str`, the single prompt from the
            text each agent would see; default [`default_prompt`]. When the wrapped env's prompts are chat messages,
            the result becomes one user message.
        prefill (`str`): The start of the single completion, which the policy continues, e.g. `"<agent_0>"` (default
            `""`: none). With chat prompts it is an assistant message after the user message (rendered with the
            chat template's `continue_final_message`); with string prompts it is appended to the prompt. The parts
            are split from `prefill + completion`, so a prefilled opening tag counts as written. A weak model that
            never writes the tagged format from the instruction alone gets rewards, hence a learning signal, this
            way.

    Example:

    ```python
    >>> from trl_marl.envs import CentralizedEnv, TargetSumEnv
    >>> env = CentralizedEnv(TargetSumEnv(2))
    >>> env.num_agents, env.split("<agent_0>3</agent_0><agent_1>7</agent_1>")
    (1, ['3', '7'])
    ```
    """

    wraps: ClassVar[type[Any]] = MultiAgentEnv
    """The team environments this view wraps (a view of one task narrows it to the task's env)."""

    one_turn: ClassVar[bool] = False
    """Whether this view plays one turn only (it then refuses a wrapped env of more)."""

    def __init__(self, env: MultiAgentEnv, tags: Sequence[str] | None = None,
                 format_prompt: PromptFormatter | None = None, prefill: str = "") -> None:
        self.check_wrapped(env)
        super().__init__(num_agents=1, num_turns=env.num_turns)
        tags = tuple(tags) if tags is not None else tuple(f"agent_{a}" for a in range(env.num_agents))
        if len(tags) != env.num_agents:
            raise ValueError(f"`tags` has {len(tags)} names but the wrapped env has {env.num_agents} agents: give one "
                             "section name per agent.")
        bad = [t for t in tags if not isinstance(t, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", t)]
        if bad or len(set(tags)) != len(tags):
            raise ValueError(f"`tags` must be unique names of letters, digits, '_', '-' or '.', got {list(tags)}.")
        self.env = env
        self.tags = tags
        self.format_prompt = format_prompt or default_prompt
        if not isinstance(prefill, str):
            raise TypeError(f"`prefill` must be a string (\"\" for none), got {type(prefill).__name__}.")
        self.prefill = prefill
        self.required_columns = tuple(env.required_columns)

    @classmethod
    def check_wrapped(cls, env: Any) -> None:
        """Refuse an `env` this view cannot wrap: not a [`wraps`], or (with [`one_turn`]) of more than one turn.
        `__init__` calls it; a subclass that reads the env's attributes before `super().__init__` calls it first."""
        if not isinstance(env, cls.wraps):
            raise TypeError(f"`env` must be a {cls.wraps.__name__}, got {type(env).__name__}.")
        if cls.one_turn and env.num_turns != 1:
            raise ValueError(f"{cls.__name__} plays one turn; the wrapped env has num_turns={env.num_turns}: build it "
                             "with num_turns=1.")

    # ----- the team's view of a centralised episode -----
    def split(self, text: Any) -> list[str]:
        """Each agent's part of one centralised completion (a string or TRL's conversational completion)."""
        if isinstance(text, list):
            text = text[-1]["content"] if text else ""
        return split_sections(self.prefill + str(text), self.tags)

    def team_transcript(self, transcript: Transcript) -> Transcript:
        """The wrapped env's transcript of a centralised one: each turn's response split into the agents' parts."""
        return Transcript(tuple(Turn(tuple(self.split(t.responses[0])), t.feedback) for t in transcript.turns))

    def agent_prompts(self, row: Mapping[str, Any], transcript: Transcript) -> list[Prompt]:
        """What each agent of the team would see at the next turn of the centralised episode `transcript`."""
        team = self.team_transcript(transcript)
        return [self.env.agent_prompt(row, a, team) for a in range(self.env.num_agents)]

    # ----- MultiAgentEnv -----
    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        prompts = self.agent_prompts(row, transcript)
        text = self.format_prompt([_prompt_text(p, a) for a, p in enumerate(prompts)], self.tags)
        if any(isinstance(p, list) for p in prompts):
            messages = [{"role": "user", "content": text}]
            return messages + [{"role": "assistant", "content": self.prefill}] if self.prefill else messages
        return text + self.prefill

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str | Sequence[str | None] | None:
        return self.env.feedback(row, self.team_transcript(transcript))

    def is_done(self, row: Mapping[str, Any], transcript: Transcript) -> bool:
        return self.env.is_done(row, self.team_transcript(transcript))

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        self.env.check_row_values(row, dataset_name, index)
        for a in range(self.env.num_agents):  # the first prompts must be text to be combined
            _prompt_text(self.env.agent_prompt(row, a, Transcript()), a)

    def validate_row(self, row: Mapping[str, Any], where: str = "the dataset") -> None:
        self.env.validate_row(row, where)
