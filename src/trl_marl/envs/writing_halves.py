"""Cooperative writing where the writers choose who summarizes which half of the text.

Both writers read the same text, shown as two halves, and the same instruction: one of them summarizes the first
half in one sentence, the other the second half; the prompts differ only in "You are writer 1" / "You are writer 2",
and neither sees the other's summary. Each answer is prefilled with "I summarize the", so the first word the model
writes is its choice ("first" or "second"), as a player of the split game names its number (`ChatSplitItemsEnv`).
[`~trl_marl.rewards.writing_halves.HalvesTeamReward`] pays for each half the best summary written of it, so the team
earns the whole reward only when its writers split the halves and each summary is about its half.

Why this task (issue 55): the team succeeds only by a convention over roles, the division of labour of MAGRPO's
writing jobs made the agents' own choice. A small model prefers one half (the first, as it prefers the first number
of the split game); an agent trained alone against that frozen partner learns to take the other half, and so does
its partner trained alone: paired, they collide. The partner is necessary by construction: without its summary
half of the text is not covered.

Example:

```python
>>> env = HalvesWritingEnv(chat=True)
>>> row = {"text": "Open a file. Return a stream. Raise OSError when the file cannot be opened."}
>>> env.agent_prompt(row, 1, Transcript())[-1]
{'role': 'assistant', 'content': 'I summarize the'}
>>> halves_choice(" second half: Errors raise OSError.")
('second', 'Errors raise OSError.')
```
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..utils.text import completion_text, words
from .base import MultiAgentEnv, Prompt, Transcript
from .centralized import CentralizedEnv

HALVES = ("first", "second")
"""The two choices of [`HalvesWritingEnv`]: which half of the text a writer summarizes."""

HALVES_PREFILL = "I summarize the"
"""The start of every answer; the model continues it with its choice ("first half: ...")."""

HALVES_INSTRUCTION = (
    "Two writers summarize the text below together, and neither can see the other's summary. The text has two "
    "halves. One writer summarizes the first half in one sentence; the other writer summarizes the second half in "
    'one sentence. You are writer {writer}. Start with "I summarize the first half:" or "I summarize the second '
    'half:".'
)
"""The instruction of both writers; only `{writer}` (1 or 2) differs between them."""

HALVES_TEMPLATE = "{instruction}\n\nFirst half:\n{first}\n\nSecond half:\n{second}"
"""The prompt (format fields `{instruction}`, `{first}`, `{second}`)."""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")
_STOP = re.compile(r"[.!?](?=\s|$)")
_CHOICE = re.compile(r"\s*\W*\s*(first|second|1|2)\b(?:\s+half\b)?(?:\s+of\s+the\s+text\b)?"
                     r"\s*[:,.;\-\u2013\u2014]*\s*", re.IGNORECASE)
_NUMBERED = {"1": "first", "2": "second"}  # the parts' numbers (after [`HALVES_NUMBERED_PREFILL`]) are the halves'
_PART_2_HEADING = re.compile(r"[*#_ \t]*\bsummary of part 2\b[*_ \t]*:[*_ \t]*", re.IGNORECASE)

HALVES_NUMBERED_PREFILL = "I summarize part"
"""The start of every answer of the numbered design ([`HALVES_DECIDE_INSTRUCTION`]): the model continues it with
the part's number (" 1: ..."), one token, as a programmer of the coding rule division continues `def aux`."""

HALVES_DECIDE_INSTRUCTION = (
    "Two writers summarize the text below together, and neither can see the other's summary. The text has two "
    "parts: one writer summarizes part 1 in one sentence and the other writer summarizes part 2 in one sentence; if "
    "both summarize the same part, the team fails. You are writer {writer}: decide whether you summarize part 2 or "
    "part 1."
)
"""The numbered design's instruction (issue 55, the coding rule division's decision sentence for the halves): the
parts by number, the decision naming part 2 first; with [`HALVES_NUMBERED_TEMPLATE`] and
[`HALVES_NUMBERED_PREFILL`]."""

HALVES_SUMMARY_PREFILL = "Summary of part"
"""The start of every answer of halves design 7 ([`HALVES_SUMMARY_INSTRUCTION`]): the part's number, then the summary
itself (" 1: ..."), as a heading; design 6's "I summarize part" drew the instruction's words after the number."""

HALVES_SUMMARY_INSTRUCTION = (
    "Two writers summarize the text below together, and neither can see the other's summary. The text has two "
    "parts: one writer summarizes part 1 in one sentence and the other writer summarizes part 2 in one sentence; if "
    "both summarize the same part, the team fails. You are writer {writer}: decide whether you summarize part 2 or "
    "part 1, and answer with \"Summary of part N:\" followed by your one sentence."
)
"""Halves design 7's instruction: design 6's ([`HALVES_DECIDE_INSTRUCTION`]) with the answer's form, which the
prefill [`HALVES_SUMMARY_PREFILL`] starts."""

HALVES_SUMMARY_OPTIONS_INSTRUCTION = (
    "Two writers summarize the text below together, and neither can see the other's summary. The text has two "
    "parts: one writer summarizes part 1 in one sentence and the other writer summarizes part 2 in one sentence; if "
    "both summarize the same part, the team fails. You are writer {writer}: decide whether you summarize part 2 or "
    "part 1, and answer with \"Summary of part 2:\" or \"Summary of part 1:\" followed by your one sentence."
)
"""Halves design 8's instruction: design 7's ([`HALVES_SUMMARY_INSTRUCTION`]) with the two headings written out (part 2
first, as the decision names it), because with "Summary of part N:" the untrained model wrote the letter N."""

HALVES_NUMBERED_TEMPLATE = "{instruction}\n\nPart 1:\n{first}\n\nPart 2:\n{second}"
"""The numbered design's prompt (format fields `{instruction}`, `{first}`, `{second}`)."""

HALVES_CENTRAL_INSTRUCTION = (
    "Summarize the text below. The text has two parts: summarize part 1 in one sentence and part 2 in one sentence. "
    "Answer with \"Summary of part 1:\" followed by your sentence about part 1, then \"Summary of part 2:\" "
    "followed by your sentence about part 2."
)
"""The instruction of the single-policy arm ([`CentralizedHalvesEnv`]): one writer, both parts, the headings of halves
design 8 ([`HALVES_SUMMARY_OPTIONS_INSTRUCTION`]) in the parts' order."""

HALVES_CENTRAL_PREFILL = "Summary of part 1:"
"""The start of the single policy's answer: its first heading, written for it as the team's prefill is."""


def split_halves(text: str) -> tuple[str, str]:
    """The two halves of `text`: split at the sentence end nearest to the middle word, or at the middle word when
    the text is one sentence. Both halves are stripped; either may be empty only when `text` has fewer than two
    words.

    Example:

    ```python
    >>> split_halves("One two three. Four five. Six seven eight nine.")
    ('One two three. Four five.', 'Six seven eight nine.')
    ```
    """
    text = " ".join(text.split())
    total = len(words(text))
    ends = [m.start() for m in _SENTENCE_END.finditer(text)]
    if ends:
        cut = min(ends, key=lambda at: (abs(2 * len(words(text[:at])) - total), at))
        return text[:cut].strip(), text[cut:].strip()
    tokens = text.split(" ")
    middle = len(tokens) // 2
    return " ".join(tokens[:middle]).strip(), " ".join(tokens[middle:]).strip()


def first_sentence(text: str) -> str:
    """The first sentence of `text`: its first non-blank line, up to the first ".", "!" or "?" followed by a space
    or the end of the line (the whole line when it has none), stripped.

    `first_sentence("\nOpens a file. Then reads it.\nMore.") == "Opens a file."`
    """
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    end = _STOP.search(line)
    return line[: end.end()].strip() if end else line


def halves_choice(completion: Any) -> tuple[str | None, str]:
    """The half an answer chose and its summary: `("first" | "second", summary)`, or `(None, text)` when the answer
    (which continues [`HALVES_PREFILL`]) does not start with one of the two words. "first half:", "second half of
    the text," and a bare "first" are all read, and so are the parts' numbers ("1:", "2 -": the numbered design,
    [`HALVES_NUMBERED_PREFILL`]); only the first word decides, so an answer cannot choose both. The
    summary is the [`first_sentence`] after the choice: the task asks for one sentence, and what a model writes after
    it (often a second summary, of the other half) is not read.
    """
    text = completion_text(completion)
    match = _CHOICE.match(text)
    if match is None:
        return None, text.strip()
    choice = match.group(1).lower()
    return _NUMBERED.get(choice, choice), first_sentence(text[match.end():])


class HalvesWritingEnv(MultiAgentEnv):
    """Two writers, one text in two halves, one one-sentence summary each; the writers choose who takes which half.

    Agent i's prompt is [`HALVES_TEMPLATE`] with [`HALVES_INSTRUCTION`] for writer i + 1 and the row's text split by
    [`split_halves`]; with `chat=True` it is a user message followed by the assistant prefill [`HALVES_PREFILL`]
    (plain text: the prefill ends the prompt after a blank line). One turn. Score it with
    [`~trl_marl.rewards.writing_halves.HalvesTeamReward`]; [`halves_choice`] reads an answer's choice.

    Args:
        text_column (`str`): The dataset column holding the source text.
        chat (`bool`): Return chat messages with the prefill as an assistant message instead of one string.
        instruction (`str`): The instruction (format field `{writer}`).
        writers (`tuple[str, str]`): What `{writer}` is for writer 0 and writer 1 (`("1", "2")`: "You are writer
            1"); names without an order (an instruction "Your name is {writer}.") keep the writer's number from
            suggesting a half.
        template (`str`): The prompt (format fields `{instruction}`, `{first}`, `{second}`).
        prefill (`str`): The start of every answer.
    """

    def __init__(self, text_column: str = "text", chat: bool = True, instruction: str = HALVES_INSTRUCTION,
                 template: str = HALVES_TEMPLATE, prefill: str = HALVES_PREFILL,
                 writers: tuple[str, str] = ("1", "2")) -> None:
        super().__init__(num_agents=2, num_turns=1)
        if len(writers) != 2 or len(set(writers)) != 2:
            raise ValueError(f"HalvesWritingEnv: `writers` must be two different labels, got {writers!r}.")
        try:
            template.format(instruction=instruction.format(writer=1), first="a", second="b")
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"HalvesWritingEnv: `instruction` may only use {{writer}} and `template` only "
                             f"{{instruction}}, {{first}} and {{second}} ({error!r}).") from error
        self.text_column = text_column
        self.chat = chat
        self.instruction = instruction
        self.template = template
        self.prefill = prefill
        self.writers = tuple(writers)
        self.required_columns = (text_column,)

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        text = row[self.text_column]
        if not isinstance(text, str) or not all(split_halves(text)):
            raise ValueError(f"{dataset_name} row {index}: column {self.text_column!r} must be a text of at least two "
                             f"words (it is split into two halves), got {text!r:.80}.")

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """Writer `agent_index + 1`'s prompt: the shared instruction with its label (`writers`), the two halves, the
        prefill."""
        if agent_index not in (0, 1):
            raise IndexError(f"{type(self).__name__} has writers 0 and 1, got {agent_index}.")
        if len(transcript) != 0:
            raise ValueError(f"{type(self).__name__} plays one turn; got a transcript of {len(transcript)} turn(s).")
        first, second = split_halves(row[self.text_column])
        text = self.template.format(instruction=self.instruction.format(writer=self.writers[agent_index]), first=first,
                                    second=second)
        if not self.chat:
            return f"{text}\n\n{self.prefill}" if self.prefill else text
        messages: list[dict[str, str]] = [{"role": "user", "content": text}]
        if self.prefill:
            messages.append({"role": "assistant", "content": self.prefill})
        return messages


class CentralizedHalvesEnv(CentralizedEnv):
    """One policy summarizes both parts of a [`HalvesWritingEnv`] row in one completion: the single-policy arm of the
    halves task (issue 55), which has no division to agree on.

    The prompt is the numbered designs' template ([`HALVES_NUMBERED_TEMPLATE`]: "Part 1: ... Part 2: ...") with
    [`HALVES_CENTRAL_INSTRUCTION`], and the answer is prefilled with "Summary of part 1:" ([`HALVES_CENTRAL_PREFILL`]).
    [`split`] gives writer 1 the text before the first "Summary of part 2:" heading (any case, markdown around it) and
    writer 2 the text after it, each as a writer of the numbered design would have answered (" 1: ...", " 2: ...",
    read by [`halves_choice`]), so the team's reward ([`~trl_marl.rewards.writing_halves.HalvesTeamReward`],
    through [`~trl_marl.rewards.centralized.CentralizedReward`]) scores the two sentences exactly as it scores a
    team's. Without that heading the second part is empty: it chose no part, and with `require_split=True` the
    completion earns 0, as a team whose second writer wrote nothing. One turn.

    Args:
        env (`HalvesWritingEnv`): The team's environment (its text column and chat setting).
        instruction (`str`): The instruction, without format fields.
        prefill (`str`): The start of the answer, which the policy continues; it must end with the first heading's
            colon, as the default does.

    Example:

    ```python
    >>> env = CentralizedHalvesEnv(HalvesWritingEnv(chat=True))
    >>> env.split(" Opens a file.\\n**Summary of part 2:** Raises OSError for a missing path.")
    [' 1: Opens a file.', ' 2: Raises OSError for a missing path.']
    ```
    """

    env: HalvesWritingEnv  # the wrapped environment (`__init__` checks its type)
    wraps = HalvesWritingEnv

    def __init__(self, env: HalvesWritingEnv, instruction: str = HALVES_CENTRAL_INSTRUCTION,
                 prefill: str = HALVES_CENTRAL_PREFILL) -> None:
        if not prefill.rstrip().lower().endswith("summary of part 1:"):
            raise ValueError(f"CentralizedHalvesEnv: `prefill` must end with the first heading \"Summary of part 1:\" "
                             f"(the part the answer starts with), got {prefill!r}.")
        super().__init__(env, tags=("part_1", "part_2"), prefill=prefill)
        self.instruction = instruction

    def split(self, text: Any) -> list[str]:
        """Writer 1's and writer 2's answers in one completion (which continues the prefill): " 1: " and the text
        before the "Summary of part 2:" heading, " 2: " and the text after it (`""` without the heading)."""
        body = completion_text(text)
        match = _PART_2_HEADING.search(body)
        if match is None:
            return [f" 1: {body.strip()}", ""]
        return [f" 1: {body[:match.start()].strip()}", f" 2: {body[match.end():].strip()}"]

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        if len(transcript) != 0:
            raise ValueError(f"{type(self).__name__} plays one turn; got a transcript of {len(transcript)} turn(s).")
        first, second = split_halves(row[self.env.text_column])
        text = HALVES_NUMBERED_TEMPLATE.format(instruction=self.instruction, first=first, second=second)
        if not self.env.chat:
            return f"{text}\n\n{self.prefill}"
        return [{"role": "user", "content": text}, {"role": "assistant", "content": self.prefill}]
