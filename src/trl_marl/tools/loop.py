"""An agent's turn with tools: generate, run the tools it calls, append their results, generate again.

This is TRL's tool loop (`GRPOTrainer._tool_call_loop`, 1.16) for every agent of a team at once:

1. every agent samples its completion (one batched call for the team, as without tools);
2. the completions of agents with tools are parsed ([`parse_completion`]); each tool call runs through
   [`call_tool`] (an exception, a timeout or a huge result becomes the tool's message, and the run goes on);
3. each result is a `tool` message; its tokens as the chat template renders them, with the next assistant header
   ([`tool_suffix_ids`]), are appended to the completion, and the rows that called tools generate again, all agents'
   rows in one batched call;
4. until no row calls a tool or `max_iterations` rounds have run. A row whose results would push its completion past
   `max_new_tokens` (or the model's context) stops with its completion as it was, its calls unanswered.

The completion of a row is then `generated + results + generated + ...`; its tool mask is 1 on the tokens the model
generated and 0 on the results and formatting the template wrote, which never enter the loss or the log-probability
statistics (`AgentBatch.loss_mask`). The agent's answer, which the team reward and the other agents see, is the
content of its last assistant message.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import GenerationConfig

from ..team.generation.base import Generation
from ..utils.tokens import tokenize_prompts
from .calling import call_tool
from .templates import ToolFormat, parse_completion, resolve_tool_format, tool_suffix_ids
from .toolset import AgentTools

GenerateFn = Callable[[list[list[list[int]]], GenerationConfig], Generation]
"""`generate(prompt_ids_by_agent, generation_config) -> Generation`: the team's batched sampling of token-id rows."""


@dataclass
class ToolTurnStats:
    """Counts of one agent's tool use over one turn's samples."""

    samples: int = 0
    calls: int = 0
    failed_calls: int = 0
    rounds: int = 0  # generations after a tool result, summed over the samples
    cut_by_budget: int = 0  # samples whose last results did not fit `max_new_tokens`


@dataclass
class ToolTurn:
    """One turn of a team with tools, per agent `a` (None entries: an agent without tools).

    Attributes:
        generation: The completions with their tool results (`completion_ids[a][i]`), as `team.generate` returns.
        tool_masks: `[a][i]` 1 on generated tokens, 0 on tokens written by the template (tool results).
        answers: `[a][i]` the content of the agent's last assistant message: its answer.
        messages: `[a][i]` the turn as chat messages (assistant, tool, assistant, ...).
        stats: Per agent, counts of calls, failed calls and rounds.
    """

    generation: Generation
    tool_masks: list[list[list[int]] | None]
    answers: list[list[str] | None]
    messages: list[list[list[dict[str, Any]]] | None]
    stats: list[ToolTurnStats | None] = field(default_factory=list)


class ToolLoop:
    """Runs the tool calls of a team's turns (see the module docstring).

    Args:
        agent_tools: Per team member (`AgentTeam` slot), its [`AgentTools`] or None.
        tokenizers: Per team member, its tokenizer.
        max_iterations: Rounds of tool calls per turn (None: until the completion budget is spent), TRL's
            `max_tool_calling_iterations`.
        timeout: Seconds one tool call may take ([`call_tool`]; None: no limit).
        max_result_chars: Longest tool result, in characters (longer ones are cut, with a note; None: no limit).
        context_limits: Per team member, the longest sequence its model takes (None: no limit).
    """

    def __init__(self, agent_tools: Sequence[AgentTools | None], tokenizers: Sequence[Any],
                 max_iterations: int | None = None, timeout: float | None = 30.0,
                 max_result_chars: int | None = 4000, context_limits: Sequence[int | None] | None = None) -> None:
        self.agent_tools = list(agent_tools)
        self.tokenizers = list(tokenizers)
        self.max_iterations = max_iterations
        self.timeout = timeout
        self.max_result_chars = max_result_chars
        self.context_limits = list(context_limits) if context_limits is not None else [None] * len(self.agent_tools)
        self.formats: list[ToolFormat | None] = [
            None if t is None else resolve_tool_format(self.tokenizers[s], s) for s, t in enumerate(self.agent_tools)]
        self._environments: list[list[Any]] = [[] for _ in self.agent_tools]

    @property
    def active(self) -> bool:
        """Whether any team member has tools."""
        return any(t is not None for t in self.agent_tools)

    def has_tools(self, slot: int) -> bool:
        return self.agent_tools[slot] is not None

    # ------------------------------------------------------------------ before sampling
    def prepare(self, prompts: Sequence[Sequence[Any]], rows: Sequence[Sequence[Any]],
                chat_template_kwargs: dict | None = None) -> list[Sequence[Any]]:
        """Every member's prompts for this turn's first generation: those of members with tools tokenized with
        their tools described (and their environments reset with each sample's dataset row, whose returned text
        is appended to the last prompt message); the others unchanged.

        Args:
            prompts: `[slot][i]` the prompts (chat messages for members with tools).
            rows: `[slot][i]` the dataset row of each sample (what `reset(**row)` receives).
            chat_template_kwargs: The trainer's chat template arguments.
        """
        out: list[Sequence[Any]] = []
        for slot, slot_prompts in enumerate(prompts):
            tools = self.agent_tools[slot]
            if tools is None or not slot_prompts:
                out.append(slot_prompts)
                self._environments[slot] = []
                continue
            environments = tools.environments(len(slot_prompts))
            self._environments[slot] = environments
            ids = []
            for prompt, row, environment in zip(slot_prompts, rows[slot], environments):
                if not _is_chat(prompt):
                    raise ValueError(f"Agent {slot} has tools, so its prompts must be chat messages (a list of "
                                     f"{{'role', 'content'}} dicts), got {type(prompt).__name__}: the tools are "
                                     "described to the model through the chat template.")
                if environment is not None:
                    prompt = _with_observation(prompt, environment.reset(**dict(row)))
                kwargs = self.formats[slot].template_kwargs(chat_template_kwargs)  # type: ignore[union-attr]
                kwargs["tools"] = tools.callables(environment)
                ids.extend(tokenize_prompts(self.tokenizers[slot], [prompt], kwargs))
            out.append(ids)
        return out

    # ------------------------------------------------------------------ after sampling
    def run(self, generate: GenerateFn, generation: Generation, config: GenerationConfig,
            chat_template_kwargs: dict | None = None, keep_going: Callable[[bool], bool] | None = None,
            idle: Callable[[], None] | None = None) -> ToolTurn:
        """Run the tool calls of the first generation and the generations after them (module docstring).

        Args:
            generate: The team's batched sampling of token-id rows ([`GenerateFn`]).
            generation: The turn's first generation (from the prompts of [`ToolLoop.prepare`]).
            config: The sampling settings (its `max_new_tokens` is each completion's budget, results included).
            chat_template_kwargs: The trainer's chat template arguments.
            keep_going: With sharded weights, `keep_going(mine)` says whether any process still has rows to
                generate (every process must then generate); None: this process alone decides.
            idle: What a process without rows generates while others do (with `keep_going`).
        """
        n = len(self.agent_tools)
        prompt_ids = [list(p) for p in generation.prompt_ids]
        completion_ids = [[list(c) for c in rows] for rows in generation.completion_ids]
        logps = None if generation.sampling_logps is None else [[list(x) for x in rows]
                                                                 for rows in generation.sampling_logps]
        masks: list[list[list[int]] | None] = [None] * n
        messages: list[list[list[dict[str, Any]]] | None] = [None] * n
        stats: list[ToolTurnStats | None] = [None] * n
        pending: list[tuple[int, int, list[dict[str, Any]]]] = []  # (slot, row, its calls)
        for s in range(n):
            if self.agent_tools[s] is None:
                continue
            masks[s] = [[1] * len(c) for c in completion_ids[s]]
            stats[s] = ToolTurnStats(samples=len(completion_ids[s]))
            messages[s] = []
            for i, ids in enumerate(completion_ids[s]):
                message = self._parse(s, i, ids, prompt_ids[s][i])
                messages[s].append([message])  # type: ignore[index]
                if message.get("tool_calls"):
                    pending.append((s, i, message["tool_calls"]))
        budget = int(config.max_new_tokens) if config.max_new_tokens is not None else None
        rounds = 0
        while self._continue(bool(pending), keep_going, rounds):
            if not pending:
                if idle is not None:
                    idle()
                rounds += 1
                continue
            contexts: list[tuple[int, int, list[int]]] = []  # (slot, row, prompt + completion + results)
            for s, i, calls in pending:
                results = self._call(s, i, calls, stats[s])  # type: ignore[arg-type]
                suffix = tool_suffix_ids(self.tokenizers[s], self.formats[s], results,  # type: ignore[arg-type]
                                         chat_template_kwargs)
                used = len(completion_ids[s][i]) + len(suffix)
                limit = self.context_limits[s]
                if (budget is not None and used > budget) or \
                        (limit is not None and len(prompt_ids[s][i]) + used >= limit):
                    stats[s].cut_by_budget += 1  # type: ignore[union-attr]
                    continue  # the results do not fit: the row ends with its unanswered calls
                messages[s][i].extend(results)  # type: ignore[index]
                completion_ids[s][i] += suffix
                masks[s][i] += [0] * len(suffix)  # type: ignore[index]
                if logps is not None:
                    logps[s][i] += [0.0] * len(suffix)
                contexts.append((s, i, prompt_ids[s][i] + completion_ids[s][i]))
            # rows with room left generate, all members' rows in one call; a row the results filled exactly ends
            rooms = {(s, i): None if budget is None else budget - len(completion_ids[s][i]) for s, i, _ in contexts}
            live = [(s, i, ids) for s, i, ids in contexts if rooms[(s, i)] is None or rooms[(s, i)] > 0]
            by_slot: list[list[list[int]]] = [[] for _ in range(n)]
            for s, _, ids in live:
                by_slot[s].append(ids)
            step_config = copy.deepcopy(config)
            if budget is not None and live:
                step_config.max_new_tokens = max(rooms[(s, i)] for s, i, _ in live)
            more = generate(by_slot, step_config) if live else None
            if not live and keep_going is not None and idle is not None:  # others may generate: so must we
                idle()
            cursor = [0] * n
            pending = []
            for s, i, ids in contexts:
                new: list[int] = []
                new_logps: list[float] | None = None
                if more is not None and (rooms[(s, i)] is None or rooms[(s, i)] > 0):
                    new = list(more.completion_ids[s][cursor[s]])
                    new_logps = None if more.sampling_logps is None else list(more.sampling_logps[s][cursor[s]])
                    cursor[s] += 1
                if budget is not None:  # each row's own room: rows of one call may have had less than its maximum
                    new = new[: max(0, budget - len(completion_ids[s][i]))]
                    new_logps = None if new_logps is None else new_logps[: len(new)]
                completion_ids[s][i] += new
                masks[s][i] += [1] * len(new)  # type: ignore[index]
                if logps is not None:
                    logps[s][i] += new_logps if new_logps is not None else [0.0] * len(new)
                stats[s].rounds += 1  # type: ignore[union-attr]
                if not new:
                    continue
                message = self._parse(s, i, new, ids)
                messages[s][i].append(message)  # type: ignore[index]
                if message.get("tool_calls"):
                    pending.append((s, i, message["tool_calls"]))
            rounds += 1
        answers: list[list[str] | None] = [
            None if messages[s] is None else [_answer(m) for m in messages[s]]  # type: ignore[union-attr]
            for s in range(n)]
        out = Generation(prompt_ids=generation.prompt_ids, completion_ids=completion_ids, sampling_logps=logps)
        return ToolTurn(out, masks, answers, messages, stats)

    def follow(self, keep_going: Callable[[bool], bool], idle: Callable[[], None]) -> None:
        """On a process without rows this turn (sharded weights): generate along with the others' tool rounds."""
        rounds = 0
        while self._continue(False, keep_going, rounds):
            idle()
            rounds += 1

    def _continue(self, mine: bool, keep_going: Callable[[bool], bool] | None, rounds: int) -> bool:
        if self.max_iterations is not None and rounds >= self.max_iterations:
            return False
        return keep_going(mine) if keep_going is not None else mine

    def _parse(self, slot: int, row: int, ids: list[int], prefix: list[int]) -> dict[str, Any]:
        environment = self._environment(slot, row)
        tools = self.agent_tools[slot].callables(environment)  # type: ignore[union-attr]
        return parse_completion(self.tokenizers[slot], self.formats[slot], ids, prefix, tools)  # type: ignore[arg-type]

    def _environment(self, slot: int, row: int) -> Any:
        environments = self._environments[slot]
        return environments[row] if row < len(environments) else None

    def _call(self, slot: int, row: int, calls: list[dict[str, Any]], stats: ToolTurnStats) -> list[dict[str, Any]]:
        """Run one message's tool calls, counted in `stats`; each result as a `tool` message (named after the called
        tool)."""
        tools = self.agent_tools[slot].by_name(self._environment(slot, row))  # type: ignore[union-attr]
        results = []
        for call in calls:
            function = call.get("function", {}) if call.get("type", "function") == "function" else None
            stats.calls += 1
            if function is None:
                stats.failed_calls += 1
                results.append({"role": "tool", "name": str(call.get("name", "unknown")),
                                "content": str({"error": f"Unsupported tool call type: {call.get('type')!r}"})})
                continue
            name = str(function.get("name"))
            tool = tools.get(name)
            if tool is None:
                stats.failed_calls += 1
                known = ", ".join(sorted(tools)) or "none"
                results.append({"role": "tool", "name": name,
                                "content": str({"error": f"Tool {name!r} not found; the tools are: {known}."})})
                continue
            outcome = call_tool(tool, function.get("arguments", {}), timeout=self.timeout,
                                max_chars=self.max_result_chars)
            stats.failed_calls += int(outcome.failed)
            results.append({"role": "tool", "name": name, "content": outcome.content})
        return results


def _is_chat(prompt: Any) -> bool:
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(m, dict) for m in prompt)


def _with_observation(prompt: Sequence[dict[str, Any]], observation: Any) -> list[dict[str, Any]]:
    """`prompt` with `observation` (an environment's `reset` result) appended to its last message, as TRL does."""
    messages = [dict(m) for m in prompt]
    if observation is None:
        return messages
    content = messages[-1].get("content", "")
    if isinstance(content, str):
        messages[-1]["content"] = content + str(observation)
    else:
        messages[-1]["content"] = [*content, {"type": "text", "text": str(observation)}]
    return messages


def _answer(messages: list[dict[str, Any]]) -> str:
    """The content of the last assistant message of a turn."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return str(message.get("content") or "")
    return ""


def tool_masks_tensor(masks: Sequence[Sequence[int]], width: int) -> torch.Tensor:
    """`(B, width)` 0/1 tensor of per-row tool masks, right-padded with 0."""
    out = torch.zeros((len(masks), width), dtype=torch.long)
    for row, mask in enumerate(masks):
        out[row, : len(mask)] = torch.tensor(mask[:width], dtype=torch.long)
    return out
