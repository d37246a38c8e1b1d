"""Two-agent cooperative writing, the writing task of MAGRPO (Liu et al., arXiv 2508.04652).

Two agents read the same source text (a Reddit post of TL;DR, an abstract, ...). Agent 0 writes a *short summary*
(one or two sentences), agent 1 a *detailed summary* that expands on it. Neither sees the other's text at turn 1
(decentralized execution); the team is paid one centralized reward for the pair, so the agents must agree on who
writes what: different lengths (a length ratio), the same facts and vocabulary, and a readable expansion.

- [`CooperativeWritingEnv`]: the prompts (fixed templates, below), the length feedback between turns.
- [`CentralizedWritingEnv`]: the single-policy baseline, one completion with both texts after their labels.
- [`SymmetricWritingEnv`]: the same task with unassigned roles: both writers get the same instruction ("one of you
  writes the summary, the other the paragraph; you are writer 1/2"), so the team must agree who writes which.
- [`writing_text`]: the text of an agent's answer that the rewards and the feedback read, without the label or
  markdown a chat model puts around it ("**Short summary:** ...").
- The team reward terms and their weighted sum ([`~trl_marl.rewards.writing.WritingTeamReward`]) are in
  `trl_marl.rewards.writing` (the source gate in `rewards.writing_source`, the symmetric-roles reward in
  `rewards.writing_variants`); the TL;DR loader ([`~trl_marl.data.load_tldr`]) is in `trl_marl.data.writing`.

Prompt templates (turn 1; `{text}` is the row's text with surrounding whitespace removed):

```text
<SUMMARY_INSTRUCTION or DETAILED_INSTRUCTION>

Text:
{text}

<"Short summary:" or "Detailed summary:">
```

Later turns add the agent's own previous text, its partner's, and the environment's feedback
([`REVISION_TEMPLATE`]).
"""


from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..utils.text import completion_text, words
from .base import MultiAgentEnv, Prompt, Transcript
from .centralized import CentralizedEnv

if TYPE_CHECKING:
    pass


# ----------------------------------------------------------------------------------------------------------------
# Answers
# ----------------------------------------------------------------------------------------------------------------

LABEL_WORDS: frozenset[str] = frozenset(
    {"summary", "summarization", "text", "output", "answer", "response", "expansion", "paragraph", "version",
     "dr", "tldr", "explanation"}
)
"""Words that make a leading "...:" a label (see [`writing_text`])."""

_LEADING_LABEL = re.compile(r"^\W*((?:[A-Za-z;']+[ \t]+){0,7}[A-Za-z;']+)[*_ \t]*:[*_]*[ \t]*")
_MARKDOWN = re.compile(r"(\*\*|__|^[ \t]*#+[ \t]*|^[ \t]*>[ \t]?)", re.MULTILINE)
_DOUBLE_QUOTES = "\"\u201c\u201d"


def _is_label(label: str) -> bool:
    tokens = words(label)
    return bool(tokens) and tokens[0] != "in" and (tokens[-1] in LABEL_WORDS or "summary" in tokens)


def writing_text(completion: Any) -> str:
    """The text of an agent's answer as the writing rewards and the length feedback read it.

    A chat model often frames its answer: a label ("Short summary:", "**Detailed Summary:**", "## Summary:",
    "Output:", "TL;DR:", "Here is a short summary of the text:"), markdown bold and headers, or double quotes around
    the whole answer. This removes, in order: surrounding whitespace; one leading label (one to eight words and a
    colon, with any markdown around them, where the last word is in [`LABEL_WORDS`] or a word is "summary", and the
    first is not "in", so "In summary: ..." keeps its transition); markdown `**`, `__`, line-leading `#` and `>`;
    one pair of double quotes around the whole text (none inside); surrounding whitespace. Nothing else changes,
    so every word the agent wrote after the label counts, and a colon inside the text ("The module has two parts:
    ...") stays.

    Example:

    ```python
    >>> writing_text("**Short summary:** The cat ate my homework.")
    'The cat ate my homework.'
    >>> writing_text('Summary: "Open a file."')
    'Open a file.'
    ```
    """
    text = completion_text(completion).strip()
    match = _LEADING_LABEL.match(text)
    if match and _is_label(match.group(1)):
        text = text[match.end():]
    text = _MARKDOWN.sub("", text).strip()
    if (len(text) >= 2 and text[0] in _DOUBLE_QUOTES and text[-1] in _DOUBLE_QUOTES
            and not any(q in text[1:-1] for q in _DOUBLE_QUOTES)):
        text = text[1:-1]
    return text.strip()


# ----------------------------------------------------------------------------------------------------------------
# Environment
# ----------------------------------------------------------------------------------------------------------------

SUMMARY_INSTRUCTION = (
    "Summarize the text below in one or two sentences. Keep only the main point. "
    "A partner writes a longer, detailed summary of the same text."
)
"""Agent 0's task: the short summary."""

DETAILED_INSTRUCTION = (
    "Write a detailed summary of the text below in one paragraph, two to three times as long as a short summary. "
    "Explain the main point and the important details, and connect your sentences with transition words. "
    "A partner writes a short summary of the same text."
)
"""Agent 1's task: the detailed summary (the expansion)."""

FIRST_TURN_TEMPLATE = "{instruction}\n\nText:\n{text}\n\n{cue}:"
"""Turn 1: `instruction` is [`SUMMARY_INSTRUCTION`] or [`DETAILED_INSTRUCTION`], `cue` "Short summary" or
"Detailed summary"."""

REVISION_TEMPLATE = (
    "{instruction}\n\nText:\n{text}\n\nYour previous {role}:\n{own}\n\nYour partner's {partner_role}:\n{partner}"
    "\n\n{feedback}Revise your {role} so that the two fit together. Write only the revised {role}.\n\n{cue}:"
)
"""Turns 2+: `role`/`partner_role` are "short summary"/"detailed summary", `own`/`partner` the two agents' texts of
the previous turn (stripped), `feedback` `"Feedback: <the environment's feedback>\\n\\n"` or empty."""

_ROLES = ("short summary", "detailed summary")
_CUES = ("Short summary", "Detailed summary")
_INSTRUCTIONS = (SUMMARY_INSTRUCTION, DETAILED_INSTRUCTION)


class CooperativeWritingEnv(MultiAgentEnv):
    """MAGRPO's cooperative writing task: agent 0 summarizes, agent 1 writes the detailed version.

    Turn 1: each agent sees only its own instruction and the source text ([`FIRST_TURN_TEMPLATE`]). With
    `num_turns > 1`, each agent then sees its own previous text, its partner's, and (with `length_feedback`) the
    length check of the previous turn, and revises its text ([`REVISION_TEMPLATE`]). The length check reports the
    word counts and the ratio |d| / |s| against `ratio_range`, e.g. "The short summary has 10 words and the
    detailed summary has 15 words: 1.50 times as long (target: 2 to 3 times). Make the detailed summary longer or the
    short summary shorter."

    Args:
        num_turns (`int`): Number of turns (1: write once; more: write, then revise).
        text_column (`str`): The dataset column holding the source text.
        chat (`bool`): Return chat messages (`[{"role": "user", "content": ...}]`) instead of plain strings.
        system_prompt (`str`, *optional*): With `chat=True`, a system message put before the user message.
        length_feedback (`bool`): Give the length check as feedback between turns.
        ratio_range (`tuple[float, float]`): The target range of |d| / |s| named in the feedback (keep it equal to
            [`LengthRatioReward`]'s `low`/`high`).
        first_turn_template (`str`): Turn-1 prompt (placeholders `{instruction}`, `{text}`, `{cue}`).
        revision_template (`str`): Prompt of later turns (also `{role}`, `{partner_role}`, `{own}`, `{partner}`,
            `{feedback}`). The offline toy model uses shorter ones (`trl_marl.toy.TOY_WRITING_PROMPTS`).

    Example:

    ```python
    env = CooperativeWritingEnv(num_turns=2)
    env.agent_prompt({"text": "My cat ate my homework."}, 0, Transcript())
    ```
    """

    def __init__(
        self,
        num_turns: int = 1,
        text_column: str = "text",
        chat: bool = False,
        system_prompt: str | None = None,
        length_feedback: bool = True,
        ratio_range: tuple[float, float] = (2.0, 3.0),
        first_turn_template: str = FIRST_TURN_TEMPLATE,
        revision_template: str = REVISION_TEMPLATE,
    ) -> None:
        super().__init__(num_agents=2, num_turns=num_turns)
        if not 0 < ratio_range[0] <= ratio_range[1]:
            raise ValueError(f"`ratio_range` must satisfy 0 < low <= high, got {ratio_range}.")
        self.text_column = text_column
        self.chat = chat
        self.system_prompt = system_prompt
        self.length_feedback = length_feedback
        self.ratio_range = (float(ratio_range[0]), float(ratio_range[1]))
        self.first_turn_template = first_turn_template
        self.revision_template = revision_template
        self.required_columns = (text_column,)

    def render(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> str:
        """The prompt text of agent `agent_index` at turn `len(transcript) + 1` (before wrapping it as chat).

        Raises:
            KeyError: `row` lacks the text column (the message names it).
            ValueError: The text column of `row` does not hold a string, or `agent_index` is not 0 or 1.
        """
        self._check_text(row)
        if agent_index not in (0, 1):
            raise ValueError(f"{type(self).__name__} has agents 0 (short summary) and 1 (detailed summary), got "
                             f"{agent_index}.")
        fields = {
            "instruction": _INSTRUCTIONS[agent_index],
            "text": row[self.text_column].strip(),
            "cue": _CUES[agent_index],
        }
        if len(transcript) == 0:
            return self.first_turn_template.format(**fields)
        last = transcript[-1]
        feedback = last.feedback_for(agent_index)
        return self.revision_template.format(
            **fields,
            role=_ROLES[agent_index],
            partner_role=_ROLES[1 - agent_index],
            own=writing_text(last.responses[agent_index]),
            partner=writing_text(last.responses[1 - agent_index]),
            feedback=f"Feedback: {feedback}\n\n" if feedback else "",
        )

    def _check_text(self, row: Mapping[str, Any]) -> None:
        """Raise a clear error when `row` lacks the text column or holds no string there."""
        self.validate_row(row, where="the row")
        if not isinstance(row[self.text_column], str):
            raise ValueError(
                f"{type(self).__name__} needs text in the column {self.text_column!r}, but the row holds a "
                f"{type(row[self.text_column]).__name__} there."
            )

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index`: [`render`]'s text, as a string or as chat messages."""
        content = self.render(row, agent_index, transcript)
        if not self.chat:
            return content
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*messages, {"role": "user", "content": content}]

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str | None:
        """The length check of the last turn of `transcript` (the same text for both agents), or `None`."""
        if not self.length_feedback or len(transcript) == 0:
            return None
        short, detailed = (len(words(writing_text(r))) for r in transcript[-1].responses[:2])
        low, high = self.ratio_range
        target = f"target: {low:g} to {high:g} times"
        if short == 0:
            return (f"The short summary is empty and the detailed summary has {detailed} words ({target} as long as "
                    "the short summary). Write a short summary.")
        ratio = detailed / short
        if ratio < low:
            advice = "Make the detailed summary longer or the short summary shorter."
        elif ratio > high:
            advice = "Make the detailed summary shorter or the short summary longer."
        else:
            advice = "Keep these lengths."
        return (f"The short summary has {short} words and the detailed summary has {detailed} words: "
                f"{ratio:.2f} times as long ({target}). {advice}")


# ----------------------------------------------------------------------------------------------------------------
# One policy writing both texts
# ----------------------------------------------------------------------------------------------------------------

CENTRAL_WRITING_TEMPLATE = (
    "Summarize the text below twice. First write \"Short summary:\" and the main point in one or two sentences. "
    "Then write \"Detailed summary:\" and one paragraph, two to three times as long, that explains the main point "
    "and the important details and connects its sentences with transition words.\n\nText:\n{text}"
)
"""The single policy's prompt (`{text}`: the row's text, stripped); its answer continues "Short summary:"."""

_DETAILED_LABEL = re.compile(r"[*#_ \t]*\bdetailed summary\b[*_ \t]*:", re.IGNORECASE)


class CentralizedWritingEnv(CentralizedEnv):
    """One policy writes both texts of a [`CooperativeWritingEnv`] row in one completion (the single-policy arm of
    MAGRPO's writing comparison).

    [`CentralizedEnv`] asks for tagged sections; SmolLM2-135M-Instruct wrote none that parsed in 8 samples (its
    untrained team reward was 0.12 of 4.0), while chat models write labels readily. So this view asks for
    "Short summary: ..." then "Detailed summary: ..." ([`CENTRAL_WRITING_TEMPLATE`]), prefills "Short summary:",
    and [`split`] gives the text before the first "Detailed summary:" label (any case, markdown around it) to agent 0
    and the text after it to agent 1; without that label the detailed part is empty (no credit for a text the
    policy did not mark). The team's writing rewards score the parts through
    [`~trl_marl.rewards.centralized.CentralizedReward`]. One turn only.

    Args:
        env (`CooperativeWritingEnv`): The team's writing environment (its text column, chat or plain prompts).
        template (`str`): The prompt, with the placeholder `{text}`.
        prefill (`str`): The start of the answer, which the policy continues.

    Example:

    ```python
    >>> env = CentralizedWritingEnv(CooperativeWritingEnv(chat=True))
    >>> env.split(" Open a file.\\n\\n**Detailed Summary:** The function opens the file and returns it.")
    ['Open a file.', 'The function opens the file and returns it.']
    ```
    """

    env: CooperativeWritingEnv  # the wrapped environment (`__init__` checks its type)
    wraps = CooperativeWritingEnv
    one_turn = True

    def __init__(self, env: CooperativeWritingEnv, template: str = CENTRAL_WRITING_TEMPLATE,
                 prefill: str = "Short summary:") -> None:
        super().__init__(env, tags=("short", "detailed"), prefill=prefill)
        self.template = template

    def split(self, text: Any) -> list[str]:
        """The short and the detailed text of one completion (the prefill, then the completion), read by
        [`writing_text`]."""
        if isinstance(text, list):
            text = text[-1]["content"] if text else ""
        full = self.prefill + completion_text(text)
        match = _DETAILED_LABEL.search(full)
        if match is None:
            return [writing_text(full), ""]
        return [writing_text(full[:match.start()]), writing_text(full[match.end():])]

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        env: CooperativeWritingEnv = self.env
        env.render(row, 0, Transcript())  # the row's checks (its text column holds a string)
        text = self.template.format(text=row[env.text_column].strip())
        if not env.chat:
            return f"{text}\n\n{self.prefill}"
        messages = [{"role": "system", "content": env.system_prompt}] if env.system_prompt else []
        return [*messages, {"role": "user", "content": text}, {"role": "assistant", "content": self.prefill}]


# ----------------------------------------------------------------------------------------------------------------
# Symmetric roles: the writers decide who writes which text
# ----------------------------------------------------------------------------------------------------------------

SUMMARY_MAX_WORDS = 15
"""The longest one-sentence summary [`SymmetricWritingEnv`] asks for, in words."""

PARAGRAPH_WORDS: tuple[int, int] = (30, 60)
"""The length of the detailed paragraph [`SymmetricWritingEnv`] asks for, in words (inclusive)."""

SYMMETRIC_INSTRUCTION = (
    "Two writers summarize the text below, and neither can see the other's text. One of you writes a one-sentence "
    "summary of at most {summary_max} words; the other writes a detailed paragraph of {paragraph_min} to "
    "{paragraph_max} words that explains the main point and the important details. You are writer {writer}. "
    "Write only your own text."
)
"""The instruction of both writers of [`SymmetricWritingEnv`]; only `{writer}` (1 or 2) differs between them."""

SYMMETRIC_TEMPLATE = "{instruction}\n\nText:\n{text}\n\nYour text:"
"""The prompt of [`SymmetricWritingEnv`] (`{text}`: the row's text, stripped)."""


class SymmetricWritingEnv(CooperativeWritingEnv):
    """MAGRPO's writing task with symmetric roles: the writers themselves must agree who writes which text.

    Both agents read the same source and the same instruction ([`SYMMETRIC_INSTRUCTION`]): one of the two writes a
    one-sentence summary of at most [`SUMMARY_MAX_WORDS`] words, the other a detailed paragraph of
    [`PARAGRAPH_WORDS`] words; the prompts differ only in "You are writer 1" / "You are writer 2", and neither sees
    the other's text. Nothing assigns the roles, so a team is paid only if its two writers choose different length
    classes: [`~trl_marl.rewards.writing_variants.SymmetricWritingTeamReward`] scores the shorter text as the
    summary and the longer as the paragraph, and pays nothing on the structure terms when both texts fall in the
    same class. Two agents trained alone against the same frozen partner best-respond to the same bias and collide
    (the design of the split game; docs/magrpo.md, "Symmetric roles"). The cooperation metrics, which class each
    writer chose and whether they collided, are [`~trl_marl.rewards.writing_variants.WroteShortText`] and
    [`~trl_marl.rewards.writing_variants.SameLengthClass`]. One turn only.

    Args:
        text_column (`str`): The dataset column holding the source text.
        chat (`bool`): Return chat messages (`[{"role": "user", "content": ...}]`) instead of plain strings.
        system_prompt (`str`, *optional*): With `chat=True`, a system message put before the user message.
        summary_max (`int`): The summary's word limit named in the instruction.
        paragraph_words (`tuple[int, int]`): The paragraph's word range named in the instruction.
        instruction (`str`): The instruction (format fields `{summary_max}`, `{paragraph_min}`, `{paragraph_max}`,
            `{writer}`).
        template (`str`): The prompt (format fields `{instruction}`, `{text}`).

    Example:

    ```python
    >>> env = SymmetricWritingEnv()
    >>> [env.render({"text": "My cat ate my homework."}, i, Transcript()).count("You are writer") for i in (0, 1)]
    [1, 1]
    ```
    """

    def __init__(
        self,
        text_column: str = "text",
        chat: bool = False,
        system_prompt: str | None = None,
        summary_max: int = SUMMARY_MAX_WORDS,
        paragraph_words: tuple[int, int] = PARAGRAPH_WORDS,
        instruction: str = SYMMETRIC_INSTRUCTION,
        template: str = SYMMETRIC_TEMPLATE,
        num_turns: int = 1,
    ) -> None:
        if num_turns != 1:
            raise ValueError(f"SymmetricWritingEnv plays one turn (the writers never see each other), got "
                             f"num_turns={num_turns}.")
        if not 0 < summary_max < paragraph_words[0] <= paragraph_words[1]:
            raise ValueError(f"SymmetricWritingEnv needs 0 < summary_max < paragraph_min <= paragraph_max, got "
                             f"summary_max={summary_max}, paragraph_words={paragraph_words}.")
        super().__init__(num_turns=1, text_column=text_column, chat=chat, system_prompt=system_prompt,
                         length_feedback=False)
        self.summary_max = int(summary_max)
        self.paragraph_words = (int(paragraph_words[0]), int(paragraph_words[1]))
        self.instruction = instruction
        self.template = template

    def render(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> str:
        """Writer `agent_index + 1`'s prompt: the shared instruction with its writer number, and the text.

        Raises:
            KeyError: `row` lacks the text column.
            ValueError: The text column does not hold a string, `agent_index` is not 0 or 1, or `transcript` is
                not empty (one turn).
        """
        self._check_text(row)
        if agent_index not in (0, 1):
            raise ValueError(f"{type(self).__name__} has writers 0 and 1, got {agent_index}.")
        if len(transcript) != 0:
            raise ValueError(f"{type(self).__name__} plays one turn; got a transcript of {len(transcript)} turn(s).")
        instruction = self.instruction.format(summary_max=self.summary_max, paragraph_min=self.paragraph_words[0],
                                              paragraph_max=self.paragraph_words[1], writer=agent_index + 1)
        return self.template.format(instruction=instruction, text=row[self.text_column].strip())

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> str | None:
        """No feedback: the task has one turn."""
        return None
