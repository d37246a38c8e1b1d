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
- `agent`: the agent's 1-based number; `turn`: the turn being answered (1-based).

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

FIRST_TURN_TEMPLATE = "Question: {question}\n\n{answer_format}"
"""Turn 1, every agent, string and chat prompts."""

REVISION_TEMPLATE = (
    "Question: {question}\n\n"
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
                                    "agent", "turn")
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
        self.required_columns = (question_column, answer_column) if show_verifier_scores else (question_column,)

    # ------------------------------------------------------------------ prompt pieces
    def question(self, row: Mapping[str, Any]) -> str:
        """The question of `row` (its question column, surrounding whitespace removed)."""
        self.validate_row(row, where="the row")
        return str(row[self.question_column]).strip()

    def _fields(self, row: Mapping[str, Any], agent_index: int, turn: int, **pieces: str) -> dict[str, Any]:
        return {
            "question": self.question(row),
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

    def own_answers(self, agent_index: int, transcript: Transcript, turns: Sequence[int]) -> str:
        """The `own_answers` field: `"Turn <t>: <answer>"` for each shown turn, separated by blank lines."""
        return "\n\n".join(f"Turn {t + 1}: {transcript[t].responses[agent_index].strip()}" for t in turns)

    def other_answers(self, agent_index: int, transcript: Transcript, turns: Sequence[int], with_turn: bool) -> str:
        """The `other_answers` field: `"Agent <j> (turn <t>): <answer>"` (or `"Agent <j>: <answer>"`) per answer."""
        items = []
        for t in turns:
            for j in self._others(agent_index):
                label = f"Agent {j + 1} (turn {t + 1})" if with_turn else f"Agent {j + 1}"
                items.append(f"{label}: {transcript[t].responses[j].strip()}")
        return "\n\n".join(items)

    def feedback_text(self, agent_index: int, transcript: Transcript, turns: Sequence[int]) -> str:
        """The `feedback` field: this agent's feedback after each shown turn, one per line, then a blank line."""
        lines = [transcript[t].feedback_for(agent_index) for t in turns]
        lines = [line.strip() for line in lines if line is not None and line.strip()]
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
                    own_answers=self.own_answers(agent_index, transcript, shown),
                    other_answers=self.other_answers(agent_index, transcript, shown, with_turn=True),
                    feedback=self.feedback_text(agent_index, transcript, shown),
                )
            )
        return f"{self.system_prompt}\n\n{text}" if self.system_prompt else text

    def _chat_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        first = self.first_turn_template.format(**self._fields(row, agent_index, 1))
        messages.append({"role": "user", "content": first})
        for t in self._shown_turns(transcript):
            messages.append({"role": "assistant", "content": transcript[t].responses[agent_index].strip()})
            content = self.revision_template.format(
                **self._fields(
                    row,
                    agent_index,
                    t + 2,
                    own_answers=self.own_answers(agent_index, transcript, range(t + 1) if self.history == "all"
                                                 else [t]),
                    other_answers=self.other_answers(agent_index, transcript, [t], with_turn=False),
                    feedback=self.feedback_text(agent_index, transcript, [t]),
                )
            )
            messages.append({"role": "user", "content": content})
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
        scores = [float(self.verifier.score(response, gold)) for response in responses]  # type: ignore[union-attr]
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
