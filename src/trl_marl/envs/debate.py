"""Collaborative debate (Du et al. 2024), the multi-agent system that MAPoRL (Park et al., arXiv 2502.18439) trains.

A agents answer the same question over T turns. At turn 1 every agent answers the question alone; at turn t + 1
agent i sees the question again together with the answers of the debate so far and revises its answer (MAPoRL,
Section 3.1)::

    s_{1,i} = LLM_i(q),        s_{t+1,i} = LLM_i(q + all answers s_{t',j} of all agents j at turns t' <= t)

With one agent (A = 1) this is self-correction (Madaan et al., 2024): the prompt has no "other agents" section and
asks the agent to review its own answer instead.

- [`DebateEnv`]: the debate for real LLMs, with plain-string prompts or chat messages, configurable templates, and
  optionally the scores of a verifier shown between turns.
- [`ToyDebateEnv`]: the same protocol in the toy tokenizer's alphabet (`trl_marl.toy`) for offline tests and
  demos: `Q:12+34=A:` at turn 1, `Q:12+34=46 45 47?A:` later.

**History.** By default (`history="all"`) an agent conditions on *every* answer of *every* agent at turns <= t,
exactly as MAPoRL's equation above: its own previous answers (all turns) and each other agent's answers (all
turns). `history="last"` keeps only the previous turn's answers (Du et al.'s prompt; shorter prompts).

**String prompts** (`chat=False`). Turn 1 is [`FIRST_TURN_TEMPLATE`]; later turns are [`REVISION_TEMPLATE`]
(A >= 2) or [`SELF_CORRECTION_TEMPLATE`] (A = 1), formatted with the fields

- `question`: the row's question (surrounding whitespace removed);
- `answer_format`: the answer-format instruction (e.g. [`GSM8K_ANSWER_FORMAT`]);
- `own_answers`: the agent's own answers of the turns shown, `"Turn 1: ...\\n\\nTurn 2: ..."`;
- `other_answers`: the other agents' answers of the turns shown, turn by turn and in agent order, labelled with the
  agent's (1-based) number and the turn: `"Agent 2 (turn 1): ...\\n\\nAgent 3 (turn 1): ..."`;
- `feedback`: the environment's feedback for this agent after the turns shown (one line per turn, e.g. the verifier
  scores), followed by a blank line; empty without feedback;
- `agent`: the agent's 1-based number; `turn`: the turn being answered (1-based);
- `private`: what only this agent knows (its private column, below), followed by a blank line; empty without
  private context, so the default templates give the prompts above unchanged.

Every field is available to every template; a template may use any subset. Answers are stripped of surrounding
whitespace. With a `system_prompt`, it is put before the prompt, followed by a blank line.

**Chat prompts** (`chat=True`), Du et al.'s conversation: an optional system message, the first-turn prompt as the
user message, then, for every turn shown, the agent's own answer as an assistant message and a user message made
from [`CHAT_REVISION_TEMPLATE`] (A >= 2) or [`CHAT_SELF_CORRECTION_TEMPLATE`] (A = 1), whose `other_answers` are the
other agents' answers *of that turn* labelled `"Agent 2: ..."` and whose `feedback` is this agent's feedback after
that turn. With `history="all"` the conversation holds every turn (so again all answers of all agents at turns
<= t); with `history="last"` only the first question and the last exchange.

For example, with three agents at turn 2 (`history="all"`), agent 1 (`agent_index=0`) sees the string prompt below
(default templates, `answer_format=GSM8K_ANSWER_FORMAT`; the two long lines are shortened here with "...")::

    Question: Ann has 3 apples and buys 4 more. How many apples does she have?

    Your previous answers:

    Turn 1: 3 + 4 = 7. \\boxed{7}

    Answers from the other agents:

    Agent 2 (turn 1): She has 3 + 4 = 7 apples. \\boxed{7}

    Agent 3 (turn 1): 3 * 4 = 12. \\boxed{12}

    Using the answers from the other agents as ... The original question is: Ann has 3 apples and buys ...

    Explain your reasoning step by step. Your final answer should be a single number, in the form ...

**Private context** (`private_columns`). Agents may hold different information, as in a debate where each agent
knows one of the facts that the answer needs: `private_columns=["context_0", "context_1"]` names one dataset column
per agent, and agent i's prompts show row["context_<i>"] in their `private` field and never another agent's. The
default templates show it after the question at turn 1 (string and chat prompts; a conversation keeps that first
message) and again in the string prompts of later turns. What agent j knows reaches agent i only through j's
answers, which later turns show as above; so the prompts should ask each agent to say what it knows. A row whose
private column is missing, not a string or empty is refused with the column's name.

**Prefilled answers** (`prefill_columns`). One dataset column per agent holding the start of that agent's every
answer, which the model continues: the last assistant message of a chat prompt (rendered with the chat template's
`continue_final_message`), or the end of a string prompt after a blank line. The transcript holds what the model
wrote; wherever an answer is shown (the agent's own, the others') it is shown with its start, so a prefill such as
"I know that a = 7. So a + b =" makes every answer state the agent's private fact. The verifier scores what the
model wrote only.

For example, with `private_columns=["context_0", "context_1"]`, `prefill_columns=["prefill_0", "prefill_1"]`, chat
prompts and the row `{"question": "What is a + b?", "context_0": "You know that a = 7.", "context_1": "You know that
b = 5.", "prefill_0": "I know that a = 7. So a + b =", "prefill_1": "I know that b = 5. So a + b =", ...}`, agent 1
(`agent_index=0`) at turn 2, after the answers " 9." and " 11.", reads (answer format shortened to "...")::

    user:      Question: What is a + b?\n\nYou know that a = 7.\n\n...
    assistant: I know that a = 7. So a + b = 9.
    user:      Answers from the other agents:\n\nAgent 2: I know that b = 5. So a + b = 11.\n\nUsing the answers ...
    assistant: I know that a = 7. So a + b =

**Verifier scores in the transcript.** With `show_verifier_scores=True` and a `verifier` (any object with
`score(response, gold) -> float`, e.g. `trl_marl.rewards.verifier.AnswerVerifier`), [`DebateEnv.feedback`] scores
every answer of the turn just played against the row's gold answer and tells each agent its own score and the
others', e.g. `"Verifier scores after turn 1: your answer 1.00, Agent 2 0.00, Agent 3 1.00."`; the next prompts
show it in their `feedback` field. Off by default (MAPoRL shows no scores).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from .base import MultiAgentEnv, Prompt, Transcript

# ----------------------------------------------------------------------------------------------------------------
# Templates
# ----------------------------------------------------------------------------------------------------------------

GSM8K_ANSWER_FORMAT = (
    "Explain your reasoning step by step. Your final answer should be a single number, in the form \\boxed{answer}, "
    "at the end of your response."
)
"""Answer-format instruction for math word problems (GSM8K, TinyGSM): a number in `\\boxed{}` at the end."""

ANLI_ANSWER_FORMAT = (
    "Explain your reasoning step by step. Your final answer should be a single word, entailment, neutral or "
    "contradiction, in the form \\boxed{answer}, at the end of your response."
)
"""Answer-format instruction for natural language inference (ANLI): one label in `\\boxed{}` at the end."""

DEFAULT_ANSWER_FORMAT = GSM8K_ANSWER_FORMAT
"""The default `answer_format` of [`DebateEnv`]."""

FIRST_TURN_TEMPLATE = "Question: {question}\n\n{private}{answer_format}"
"""Turn 1, every agent, string and chat prompts (`{private}` is empty without private context)."""

REVISION_TEMPLATE = (
    "Question: {question}\n\n"
    "{private}"
    "Your previous answers:\n\n{own_answers}\n\n"
    "Answers from the other agents:\n\n{other_answers}\n\n"
    "{feedback}"
    "Using the answers from the other agents as additional information, give an updated answer. "
    "The original question is: {question}\n\n"
    "{answer_format}"
)
"""Turns 2+ of a string prompt with two or more agents."""

SELF_CORRECTION_TEMPLATE = (
    "Question: {question}\n\n"
    "{private}"
    "Your previous answers:\n\n{own_answers}\n\n"
    "{feedback}"
    "Review your previous answers, find any mistakes in them, and give an improved answer. "
    "The original question is: {question}\n\n"
    "{answer_format}"
)
"""Turns 2+ of a string prompt with one agent (self-correction)."""

CHAT_REVISION_TEMPLATE = (
    "Answers from the other agents:\n\n{other_answers}\n\n"
    "{feedback}"
    "Using the answers from the other agents as additional information, give an updated answer. "
    "The original question is: {question}\n\n"
    "{answer_format}"
)
"""The user message after each of the agent's answers in a chat prompt with two or more agents."""

CHAT_SELF_CORRECTION_TEMPLATE = (
    "{feedback}"
    "Review your previous answer, find any mistakes in it, and give an improved answer. "
    "The original question is: {question}\n\n"
    "{answer_format}"
)
"""The user message after each of the agent's answers in a chat prompt with one agent (self-correction)."""

TEMPLATE_FIELDS: tuple[str, ...] = ("question", "answer_format", "own_answers", "other_answers", "feedback",
                                    "agent", "turn", "private")
"""The named fields every [`DebateEnv`] template may use."""


@runtime_checkable
class AnswerScorer(Protocol):
    """What [`DebateEnv`] needs of a verifier to show its scores: `score(response, gold) -> float` in [0, 1]."""

    def score(self, response: str, gold: Any) -> float:
        """The verifier's score of `response` against the gold answer `gold`."""
        ...


def _check_template(template: str, name: str) -> str:
    """Raise a clear error if `template` is not a format string over [`TEMPLATE_FIELDS`]."""
    if not isinstance(template, str):
        raise TypeError(f"DebateEnv: `{name}` must be a format string, got {type(template).__name__}.")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise ValueError(f"DebateEnv: `{name}` is not a valid format string ({error}).") from error
    for _, field_name, _, _ in parsed:
        if field_name is None:
            continue
        if field_name == "" or field_name.isdigit():
            raise ValueError(f"DebateEnv: `{name}` must use named fields only ({{question}}, ...), not {{}}.")
        base = re.split(r"[.\[]", field_name, maxsplit=1)[0]
        if base not in TEMPLATE_FIELDS:
            raise ValueError(
                f"DebateEnv: `{name}` uses the unknown field {{{field_name}}}; the fields are {list(TEMPLATE_FIELDS)}."
            )
    return template


def _uses_field(template: str, field: str) -> bool:
    """Whether the (checked) format string `template` uses the named field `field`."""
    return any(name is not None and re.split(r"[.\[]", name, maxsplit=1)[0] == field
               for _, name, _, _ in string.Formatter().parse(template))


def _check_agent_columns(columns: Sequence[str] | None, name: str, num_agents: int,
                         distinct: bool = True) -> tuple[str, ...]:
    """`columns` as a tuple of one distinct column name per agent (empty for `None`), or a clear error."""
    if columns is None:
        return ()
    if isinstance(columns, str) or not isinstance(columns, Sequence):
        raise TypeError(
            f"DebateEnv: `{name}` must be a list of column names, one per agent (e.g. "
            f"{[f'context_{i}' for i in range(num_agents)]}), got {columns!r}."
        )
    columns = tuple(columns)
    if len(columns) != num_agents:
        raise ValueError(
            f"DebateEnv: `{name}` needs one column per agent ({num_agents}), got {len(columns)}: {list(columns)}."
        )
    bad = [c for c in columns if not isinstance(c, str) or not c]
    if bad:
        raise ValueError(f"DebateEnv: `{name}` must hold non-empty column names, got {bad}.")
    if distinct and len(set(columns)) != len(columns):
        raise ValueError(
            f"DebateEnv: `{name}` names a column twice ({list(columns)}): each agent needs its own column (the "
            "same text for every agent is part of the question)."
        )
    return columns


# ----------------------------------------------------------------------------------------------------------------
# Environments
# ----------------------------------------------------------------------------------------------------------------


class DebateEnv(MultiAgentEnv):
    """Collaborative debate (Du et al. 2024) as trained by MAPoRL: answer, then revise using the others' answers.

    See the module docstring for the exact prompts. Turn 1: the question with the answer-format instruction. Turns
    2+: the question, the agent's own previous answers, every other agent's answers labelled `Agent <j>`, the
    environment's feedback if any, and a request to revise with the question restated. With `num_agents=1` the
    "other agents" part is left out and the agent is asked to review its own answer (self-correction).

    Args:
        num_agents (`int`): Number of agents A (MAPoRL: 2 or 3; 1 is self-correction).
        num_turns (`int`): Number of turns T.
        question_column (`str`): The dataset column holding the question.
        first_turn_template (`str`): The turn-1 prompt (a format string over [`TEMPLATE_FIELDS`]).
        revision_template (`str`, *optional*): The later-turn prompt (string mode) or user message (chat mode).
            Default: [`REVISION_TEMPLATE`] / [`SELF_CORRECTION_TEMPLATE`] (A = 1), or with `chat=True`
            [`CHAT_REVISION_TEMPLATE`] / [`CHAT_SELF_CORRECTION_TEMPLATE`].
        chat (`bool`): Return chat messages (a conversation; see the module docstring) instead of strings.
        system_prompt (`str`, *optional*): A system message (chat) or a preamble followed by a blank line (string).
        show_verifier_scores (`bool`): Show every answer's verifier score to the agents after each turn.
        verifier (`AnswerScorer`, *optional*): The verifier whose scores are shown (required with
            `show_verifier_scores`): any object with `score(response, gold) -> float`.
        answer_format (`str`): The answer-format instruction filled into the `answer_format` field.
        answer_column (`str`): The dataset column holding the gold answer (read only to show verifier scores).
        history (`"all"` or `"last"`): Show the answers of every previous turn (MAPoRL) or of the last one only.
        private_columns (`list[str]`, *optional*): One dataset column per agent holding what only that agent knows
            (e.g. `["context_0", "context_1"]`): agent i's prompts show its own column in the `private` field, never
            the others' (see "Private context" in the module docstring). The templates that agents read first
            (`first_turn_template`, and `revision_template` in string mode) must use `{private}`.
        prefill_columns (`list[str]`, *optional*): One dataset column per agent holding the start of that agent's
            every answer, which the model continues (e.g. "I know that a = 7. So a + b ="); wherever an answer is
            shown it is shown with its start (see "Prefilled answers" in the module docstring). The same column may
            serve several agents.

    Example:

    ```python
    from trl_marl.envs.base import Transcript
    from trl_marl.envs.debate import DebateEnv

    env = DebateEnv(num_agents=3, num_turns=3)
    row = {"question": "What is 3 + 4?", "answer": "7"}
    first = env.agent_prompt(row, 0, Transcript())
    second = env.agent_prompt(row, 0, Transcript().extend(["\\\\boxed{7}", "\\\\boxed{7}", "\\\\boxed{12}"]))
    ```
    """

    def __init__(
        self,
        num_agents: int = 3,
        num_turns: int = 3,
        question_column: str = "question",
        first_turn_template: str = FIRST_TURN_TEMPLATE,
        revision_template: str | None = None,
        chat: bool = False,
        system_prompt: str | None = None,
        show_verifier_scores: bool = False,
        verifier: AnswerScorer | None = None,
        answer_format: str = DEFAULT_ANSWER_FORMAT,
        answer_column: str = "answer",
        history: Literal["all", "last"] = "all",
        private_columns: Sequence[str] | None = None,
        prefill_columns: Sequence[str] | None = None,
    ) -> None:
        super().__init__(num_agents, num_turns)
        if history not in ("all", "last"):
            raise ValueError(f"DebateEnv: `history` must be 'all' or 'last', got {history!r}.")
        if show_verifier_scores:
            if verifier is None:
                raise ValueError("DebateEnv: `show_verifier_scores=True` needs a `verifier` with a `score` method.")
            if not callable(getattr(verifier, "score", None)):
                raise TypeError(
                    f"DebateEnv: the verifier ({type(verifier).__name__}) has no `score(response, gold)` method."
                )
        if revision_template is None:
            if chat:
                revision_template = CHAT_REVISION_TEMPLATE if num_agents > 1 else CHAT_SELF_CORRECTION_TEMPLATE
            else:
                revision_template = REVISION_TEMPLATE if num_agents > 1 else SELF_CORRECTION_TEMPLATE
        self.question_column = question_column
        self.answer_column = answer_column
        self.first_turn_template = _check_template(first_turn_template, "first_turn_template")
        self.revision_template = _check_template(revision_template, "revision_template")
        self.chat = chat
        self.system_prompt = system_prompt
        self.show_verifier_scores = show_verifier_scores
        self.verifier = verifier
        self.answer_format = answer_format
        self.history = history
        self.private_columns = _check_agent_columns(private_columns, "private_columns", num_agents)
        self.prefill_columns = _check_agent_columns(prefill_columns, "prefill_columns", num_agents, distinct=False)
        if self.private_columns:
            first_read = [("first_turn_template", self.first_turn_template)]
            if not chat:  # a string prompt is rebuilt at every turn; a conversation keeps its first user message
                first_read.append(("revision_template", self.revision_template))
            for name, template in first_read:
                if not _uses_field(template, "private"):
                    raise ValueError(
                        f"DebateEnv: `private_columns` is given but `{name}` does not use the field {{private}}, so "
                        "the agents would never see their private context: add {private} to the template."
                    )
        required = (question_column, answer_column) if show_verifier_scores else (question_column,)
        agent_columns = [c for c in (*self.private_columns, *self.prefill_columns) if c not in required]
        self.required_columns = required + tuple(dict.fromkeys(agent_columns))

    # ------------------------------------------------------------------ prompt pieces
    def question(self, row: Mapping[str, Any]) -> str:
        """The question of `row` (its question column, surrounding whitespace removed)."""
        self.validate_row(row, where="the row")
        return str(row[self.question_column]).strip()

    def _agent_text(self, row: Mapping[str, Any], column: str, what: str) -> str:
        """The text of `row[column]` (surrounding whitespace removed), or a clear error naming the column."""
        self.validate_row(row, where="the row")
        value = row[column]
        if not isinstance(value, str):
            raise TypeError(
                f"DebateEnv: the column {column!r} ({what}) must hold a string, got {type(value).__name__} "
                f"({value!r}): write the text as a string."
            )
        if not value.strip():
            raise ValueError(
                f"DebateEnv: the column {column!r} ({what}) is empty in this row: every agent needs a non-empty "
                "text there."
            )
        return value.strip()

    def private_context(self, row: Mapping[str, Any], agent_index: int) -> str:
        """What only agent `agent_index` knows: its private column's text (`""` without `private_columns`)."""
        if not self.private_columns:
            return ""
        return self._agent_text(row, self.private_columns[agent_index], f"agent {agent_index}'s private context")

    def prefill(self, row: Mapping[str, Any], agent_index: int) -> str:
        """The start of agent `agent_index`'s answers: its prefill column's text (`""` without `prefill_columns`)."""
        if not self.prefill_columns:
            return ""
        return self._agent_text(row, self.prefill_columns[agent_index], f"agent {agent_index}'s answer prefill")

    def answer(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript, turn_index: int) -> str:
        """Agent `agent_index`'s answer at (0-based) turn `turn_index` as prompts show it: its prefill (if any)
        followed by what the agent wrote, surrounding whitespace removed."""
        return (self.prefill(row, agent_index) + transcript[turn_index].responses[agent_index]).strip()

    def check_row_values(self, row: Mapping[str, Any], dataset_name: str, index: int) -> None:
        """Refuses a row whose private or prefill column is not a non-empty string, naming the column."""
        for agent in range(self.num_agents):
            try:
                self.private_context(row, agent)
                self.prefill(row, agent)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{dataset_name}, row {index}: {error}") from error

    def _fields(self, row: Mapping[str, Any], agent_index: int, turn: int, **pieces: str) -> dict[str, Any]:
        private = self.private_context(row, agent_index)
        return {
            "question": self.question(row),
            "private": f"{private}\n\n" if private else "",
            "answer_format": self.answer_format,
            "own_answers": "",
            "other_answers": "",
            "feedback": "",
            "agent": agent_index + 1,
            "turn": turn,
            **pieces,
        }

    def _shown_turns(self, transcript: Transcript) -> range:
        """The (0-based) indices of the previous turns a prompt shows."""
        return range(len(transcript)) if self.history == "all" else range(max(0, len(transcript) - 1), len(transcript))

    def _others(self, agent_index: int) -> list[int]:
        return [j for j in range(self.num_agents) if j != agent_index]

    def own_answers(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript,
                    turns: Sequence[int]) -> str:
        """The `own_answers` field: `"Turn <t>: <answer>"` for each shown turn, separated by blank lines."""
        return "\n\n".join(f"Turn {t + 1}: {self.answer(row, agent_index, transcript, t)}" for t in turns)

    def other_answers(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript, turns: Sequence[int],
                      with_turn: bool) -> str:
        """The `other_answers` field: `"Agent <j> (turn <t>): <answer>"` (or `"Agent <j>: <answer>"`) per answer."""
        items = []
        for t in turns:
            for j in self._others(agent_index):
                label = f"Agent {j + 1} (turn {t + 1})" if with_turn else f"Agent {j + 1}"
                items.append(f"{label}: {self.answer(row, j, transcript, t)}")
        return "\n\n".join(items)

    def feedback_text(self, agent_index: int, transcript: Transcript, turns: Sequence[int]) -> str:
        """The `feedback` field: this agent's feedback after each shown turn, one per line, then a blank line."""
        feedback = [transcript[t].feedback_for(agent_index) for t in turns]
        lines = [line.strip() for line in feedback if line is not None and line.strip()]
        return "\n".join(lines) + "\n\n" if lines else ""

    def _check_transcript(self, agent_index: int, transcript: Transcript) -> None:
        if not 0 <= agent_index < self.num_agents:
            raise ValueError(f"DebateEnv has agents 0..{self.num_agents - 1}, got agent_index={agent_index}.")
        for t, turn in enumerate(transcript.turns):
            if len(turn.responses) != self.num_agents:
                raise ValueError(
                    f"DebateEnv: turn {t + 1} of the transcript has {len(turn.responses)} responses for "
                    f"{self.num_agents} agents."
                )

    # ------------------------------------------------------------------ protocol
    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """The prompt of agent `agent_index` at turn `len(transcript) + 1` (a string, or messages with `chat`)."""
        self._check_transcript(agent_index, transcript)
        turn = len(transcript) + 1
        if self.chat:
            return self._chat_prompt(row, agent_index, transcript)
        if turn == 1:
            text = self.first_turn_template.format(**self._fields(row, agent_index, 1))
        else:
            shown = self._shown_turns(transcript)
            text = self.revision_template.format(
                **self._fields(
                    row,
                    agent_index,
                    turn,
                    own_answers=self.own_answers(row, agent_index, transcript, shown),
                    other_answers=self.other_answers(row, agent_index, transcript, shown, with_turn=True),
                    feedback=self.feedback_text(agent_index, transcript, shown),
                )
            )
        prefill = self.prefill(row, agent_index)
        if prefill:
            text = f"{text}\n\n{prefill}"
        return f"{self.system_prompt}\n\n{text}" if self.system_prompt else text

    def _chat_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        first = self.first_turn_template.format(**self._fields(row, agent_index, 1))
        messages.append({"role": "user", "content": first})
        for t in self._shown_turns(transcript):
            messages.append({"role": "assistant", "content": self.answer(row, agent_index, transcript, t)})
            content = self.revision_template.format(
                **self._fields(
                    row,
                    agent_index,
                    t + 2,
                    own_answers=self.own_answers(row, agent_index, transcript,
                                                 range(t + 1) if self.history == "all" else [t]),
                    other_answers=self.other_answers(row, agent_index, transcript, [t], with_turn=False),
                    feedback=self.feedback_text(agent_index, transcript, [t]),
                )
            )
            messages.append({"role": "user", "content": content})
        prefill = self.prefill(row, agent_index)
        if prefill:  # the conversation ends with the assistant's started answer, which the model continues
            messages.append({"role": "assistant", "content": prefill})
        return messages

    def feedback(self, row: Mapping[str, Any], transcript: Transcript) -> tuple[str, ...] | None:
        """The verifier's scores of the last turn's answers, per agent (`None` unless `show_verifier_scores`).

        Agent i's text names its own score first, then the others' in agent order: `"Verifier scores after turn 1:
        your answer 1.00, Agent 2 0.00, Agent 3 1.00."` (one agent: `"Verifier score after turn 1: your answer
        1.00."`).
        """
        if not self.show_verifier_scores or len(transcript) == 0:
            return None
        self.validate_row(row, where="the row")
        gold = row[self.answer_column]
        responses = transcript[-1].responses
        if self.verifier is None:  # `__init__` refuses `show_verifier_scores` without one
            raise ValueError("DebateEnv: `show_verifier_scores=True` needs a `verifier` with a `score` method.")
        scores = [float(self.verifier.score(response, gold)) for response in responses]
        t = len(transcript)
        texts = []
        for i in range(self.num_agents):
            if self.num_agents == 1:
                texts.append(f"Verifier score after turn {t}: your answer {scores[0]:.2f}.")
                continue
            others = ", ".join(f"Agent {j + 1} {scores[j]:.2f}" for j in self._others(i))
            texts.append(f"Verifier scores after turn {t}: your answer {scores[i]:.2f}, {others}.")
        return tuple(texts)


_FIRST_INTEGER = re.compile(r"\d+")


def toy_candidate(response: str) -> str:
    """How [`ToyDebateEnv`] writes an answer into a later prompt: its first run of digits, or `"-"` if it has none."""
    match = _FIRST_INTEGER.search(str(response))
    return match.group(0) if match else "-"


class ToyDebateEnv(MultiAgentEnv):
    """A debate in the toy tokenizer's alphabet (`trl_marl.toy.TOY_CHARS`), for offline tests and demos.

    Rows hold `question` (`"12+34"`) and `answer` (`"46"`). Turn 1: `Q:12+34=A:`. Later turns: `Q:12+34=`, the
    previous turn's answers of all agents separated by spaces (the agent's own answer first, then the others' in
    agent order), and `?A:`, e.g. `Q:12+34=46 45 47?A:`. An answer is written as its first run of digits (`"-"` if it
    has none, [`toy_candidate`]), so the prompt stays in the toy alphabet. This is the format
    `trl_marl.toy.DebateAdditionTask` pretrains a toy model on (1 to 3 candidates).

    Args:
        num_agents (`int`): Number of agents.
        num_turns (`int`): Number of turns.
        question_column (`str`): The dataset column holding the question `"<a>+<b>"`.
    """

    def __init__(self, num_agents: int = 3, num_turns: int = 3, question_column: str = "question") -> None:
        super().__init__(num_agents, num_turns)
        self.question_column = question_column
        self.required_columns = (question_column,)

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        """`Q:<question>=A:` at turn 1, `Q:<question>=<own> <others>?A:` later."""
        self.validate_row(row, where="the row")
        if not 0 <= agent_index < self.num_agents:
            raise ValueError(f"ToyDebateEnv has agents 0..{self.num_agents - 1}, got agent_index={agent_index}.")
        question = str(row[self.question_column]).replace(" ", "")
        if len(transcript) == 0:
            return f"Q:{question}=A:"
        last = transcript[-1].responses
        order = [agent_index] + [j for j in range(self.num_agents) if j != agent_index]
        return f"Q:{question}=" + " ".join(toy_candidate(last[j]) for j in order) + "?A:"


__all__ = [
    "ANLI_ANSWER_FORMAT",
    "CHAT_REVISION_TEMPLATE",
    "CHAT_SELF_CORRECTION_TEMPLATE",
    "DEFAULT_ANSWER_FORMAT",
    "FIRST_TURN_TEMPLATE",
    "GSM8K_ANSWER_FORMAT",
    "REVISION_TEMPLATE",
    "SELF_CORRECTION_TEMPLATE",
    "TEMPLATE_FIELDS",
    "AnswerScorer",
    "DebateEnv",
    "ToyDebateEnv",
    "toy_candidate",
]
