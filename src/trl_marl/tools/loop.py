"""An agent's turn with tools: generate, run the tools it calls, append their results, generate again.

This is TRL's tool loop (`GRPOTrainer._tool_call_loop`, 1.16) for every agent of a team at once:

1. every agent samples its completion (one batched call for the team, as without tools);
2. the completions of agents with tools are parsed ([`parse_completion`]: whatever the model wrote, a message, its
   text encodable); each tool call runs through [`call_tool`] (an exception, a timeout or a huge result becomes the
   tool's message, and the run goes on), within the sample's time for tool calls in this turn (below);
3. each result is a `tool` message; its tokens as the chat template renders them, with the next assistant header
   ([`tool_suffix_ids`]), are appended to the completion, and the rows that called tools generate again, all agents'
   rows in one batched call;
4. until no row calls a tool or `max_iterations` rounds have run. A row whose results would push its completion past
   `max_new_tokens` (or the model's context) stops with its completion as it was, its calls unanswered.

Time: the calls of a sample run one after another (as TRL runs synchronous tools), each within `timeout` seconds,
and all the calls of one sample in one turn, over every round, within `turn_timeout` seconds together (by default as
long as one call's `timeout`). A call that would start after that time is spent is not run: the model reads
`{'error': "tool 'f' was not called: ..."}`, a failed call. So a policy that writes ten calls that each hang costs one
`timeout` per sample and turn, not ten. All the calls of one turn, over every sample and agent, run within
`total_timeout` seconds (by default 4 x `timeout`): once spent, the turn's remaining calls are not run either, so a
policy whose every sample calls a hanging tool costs one `total_timeout` per turn, not `turn_timeout` times the
samples (plus what a tool stuck in C code holding the GIL overruns, see [`call_tool`]).

The completion of a row is then `generated + results + generated + ...`; its tool mask is 1 on the tokens the model
generated and 0 on the results and formatting the template wrote, which never enter the loss or the log-probability
statistics (`AgentBatch.loss_mask`). The agent's answer, which the team reward and the other agents see, is the
content of its last assistant message.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig

from ..team.generation.base import Generation
from ..utils.tokens import tokenize_prompts
from .calling import ToolOutcome, call_tool
from .templates import ToolFormat, parse_completion, resolve_tool_format, tool_suffix_ids
from .toolset import AgentTools

if TYPE_CHECKING:
    from ..team import AgentTeam

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


@dataclass
class _Sample:
    """One agent's sample in a turn with tools: its prompt, its completion so far and what the tool mask says of each
    token, its engine log-probabilities (vLLM) and its messages (assistant, tool, assistant, ...)."""

    slot: int
    index: int
    prompt: list[int]
    ids: list[int]
    logps: list[float] | None
    mask: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_seconds: float = 0.0  # time its tool calls took in this turn

    def __post_init__(self) -> None:
        self.ids = list(self.ids)
        self.logps = None if self.logps is None else list(self.logps)
        self.mask = [1] * len(self.ids)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The tool calls of the last message (empty: the sample has answered)."""
        return (self.messages[-1].get("tool_calls") or []) if self.messages else []

    def append(self, tokens: list[int], generated: bool, logps: list[float] | None = None) -> None:
        """Append tokens: generated ones (tool mask 1, their engine log-probs) or written by the template (0)."""
        self.ids += tokens
        self.mask += [int(generated)] * len(tokens)
        if self.logps is not None:
            self.logps += logps if logps is not None else [0.0] * len(tokens)


def _engine_logps(sample: _Sample) -> list[float]:
    """`sample`'s engine log-probabilities (it has them whenever its generation had them)."""
    if sample.logps is None:
        raise ValueError(f"Sample {sample.index} of team member {sample.slot} has no engine log-probabilities.")
    return sample.logps


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
        turn_timeout: Seconds all the tool calls of one sample in one turn may take together (module docstring);
            None: as long as `timeout` (so, with `timeout=None`, no limit).
        total_timeout: Seconds all the tool calls of one turn may take together, over every sample (module
            docstring); None: 4 x `timeout` (with `timeout=None`, no limit).

    Raises:
        ValueError: `turn_timeout` or `total_timeout` is not a positive number or None.
    """

    def __init__(self, agent_tools: Sequence[AgentTools | None], tokenizers: Sequence[Any],
                 max_iterations: int | None = None, timeout: float | None = 30.0,
                 max_result_chars: int | None = 4000, context_limits: Sequence[int | None] | None = None,
                 turn_timeout: float | None = None, total_timeout: float | None = None) -> None:
        for name, value in (("turn_timeout", turn_timeout), ("total_timeout", total_timeout)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
                raise ValueError(f"ToolLoop's {name} must be a positive number of seconds or None, got {value!r}.")
        self.agent_tools = list(agent_tools)
        self.tokenizers = list(tokenizers)
        self.max_iterations = max_iterations
        self.timeout = timeout
        self.turn_timeout = timeout if turn_timeout is None else float(turn_timeout)
        default_total = None if timeout is None else 4 * timeout
        self.total_timeout = default_total if total_timeout is None else float(total_timeout)
        self._turn_seconds = 0.0  # the tool time of the turn that `run` is running, over every sample
        self.max_result_chars = max_result_chars
        self.context_limits = list(context_limits) if context_limits is not None else [None] * len(self.agent_tools)
        self.formats: list[ToolFormat | None] = [
            None if t is None else resolve_tool_format(self.tokenizers[s], s) for s, t in enumerate(self.agent_tools)]
        self._environments: list[list[Any]] = [[] for _ in self.agent_tools]

    @classmethod
    def for_team(cls, agent_tools: Sequence[AgentTools | None], team: AgentTeam, args: Any) -> ToolLoop | None:
        """The [`ToolLoop`] of an [`AgentTeam`] whose agents have `agent_tools` (None when no agent has tools), with
        the limits of a trainer config `args` (`max_tool_calling_iterations`, `tool_call_timeout`,
        `max_tool_result_chars`) and each member's context window.

        A team with one member per (turn, agent) (`AgentTeam.agents_per_turn` agents) gives each member the tools of
        the agent it plays: member `s` plays agent `s % agents_per_turn`.

        Raises:
            ValueError: The team's members do not map onto the agents (neither one per agent nor one per (turn,
                agent)).
        """
        if all(t is None for t in agent_tools):
            return None
        n = len(agent_tools)
        if team.num_agents != n:
            if getattr(team, "agents_per_turn", None) != n or team.num_agents % n:
                raise ValueError(f"`tools` / `environment_factory` are given for {n} agents, but the team has "
                                 f"{team.num_agents} members that are neither one per agent nor one per (turn, "
                                 "agent): give tools to a team built for these agents.")
            agent_tools = [agent_tools[s % n] for s in range(team.num_agents)]
        limits = [getattr(team.base_model_of(s).config, "max_position_embeddings", None)
                  for s in range(team.num_agents)]
        return cls(agent_tools, team.tokenizers, max_iterations=args.max_tool_calling_iterations,
                   timeout=args.tool_call_timeout, max_result_chars=args.max_tool_result_chars, context_limits=limits,
                   total_timeout=args.tool_turn_timeout)

    def for_another_thread(self) -> ToolLoop:
        """A copy that another thread plays with while this one is in use (the rollout worker of asynchronous
        rollouts): the same tools, limits and formats, its own environment instances (each agent's
        `environment_factory` builds a pool of its own) and its own per-turn state. Standalone tools are the same
        functions in both threads, so they must be thread-safe (plain functions of their arguments are)."""
        other = copy.copy(self)
        other.agent_tools = [None if t is None else replace(t, _pool=[]) for t in self.agent_tools]
        other._environments = [[] for _ in self.agent_tools]
        other._turn_seconds = 0.0
        return other

    @property
    def active(self) -> bool:
        """Whether any team member has tools."""
        return any(t is not None for t in self.agent_tools)

    def has_tools(self, slot: int) -> bool:
        return self.agent_tools[slot] is not None

    def _tools_of(self, slot: int) -> tuple[AgentTools, ToolFormat]:
        """The tools and the tool format of member `slot`, one with tools (every sample of the loop's is)."""
        tools, tool_format = self.agent_tools[slot], self.formats[slot]
        if tools is None or tool_format is None:
            raise ValueError(f"Team member {slot} has no tools.")
        return tools, tool_format

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
                ids.extend(tokenize_prompts(self.tokenizers[slot], [prompt],
                                            self.template_kwargs(slot, chat_template_kwargs, environment)))
            out.append(ids)
        return out

    def member_template_kwargs(self, chat_template_kwargs: dict | None = None) -> list[dict[str, Any] | None]:
        """[`ToolLoop.template_kwargs`] of every team member (None for those without tools)."""
        return [self.template_kwargs(slot, chat_template_kwargs) for slot in range(len(self.agent_tools))]

    def template_kwargs(self, slot: int, chat_template_kwargs: dict | None = None,
                        environment: Any = None) -> dict[str, Any] | None:
        """The chat template arguments that member `slot`'s prompts are tokenized with: its [`ToolFormat`]'s template
        and its tools (with `environment`'s methods; without one, those of a fresh environment from its factory, as
        the prompt-length check measures them), or None for a member without tools."""
        tools = self.agent_tools[slot]
        if tools is None:
            return None
        if environment is None and tools.environment_factory is not None:
            environment = tools.environments(1)[0]
        kwargs = self._tools_of(slot)[1].template_kwargs(chat_template_kwargs)
        kwargs["tools"] = tools.callables(environment)
        return kwargs

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
        budget = int(config.max_new_tokens) if config.max_new_tokens is not None else None
        self._turn_seconds = 0.0
        stats: list[ToolTurnStats | None] = [None] * n
        member_stats: dict[int, ToolTurnStats] = {}  # the same, of the members with tools
        samples: list[list[_Sample] | None] = [None] * n
        for s in range(n):
            if self.agent_tools[s] is None:
                continue
            stats[s] = member_stats[s] = ToolTurnStats(samples=len(generation.completion_ids[s]))
            samples[s] = member_samples = [
                _Sample(s, i, list(prompt), generation.completion_ids[s][i],
                        None if generation.sampling_logps is None else generation.sampling_logps[s][i])
                for i, prompt in enumerate(generation.prompt_ids[s])]
            for sample in member_samples:
                sample.messages.append(self._parse(sample, sample.ids, sample.prompt))
        pending = [x for rows in samples if rows is not None for x in rows if x.calls]
        rounds = 0
        while self._continue(bool(pending), keep_going, rounds):
            # the calls run; their results join the completions that have room for them (TRL's rule)
            answered = [x for x in pending if self._append_results(x, member_stats[x.slot], budget,
                                                                    chat_template_kwargs)]
            live = [x for x in answered if budget is None or len(x.ids) < budget]
            if live:  # the rows with room left generate again: every member's rows in one call
                self._generate_after(generate, live, config, budget, member_stats)
            elif keep_going is not None and idle is not None:  # other processes may generate: so must this one
                idle()
            pending = [x for x in live if x.calls]
            rounds += 1
        completion_ids = [rows if member is None else [x.ids for x in member]
                          for member, rows in zip(samples, generation.completion_ids, strict=True)]
        logps = None if generation.sampling_logps is None else [
            rows if member is None else [_engine_logps(x) for x in member]
            for member, rows in zip(samples, generation.sampling_logps, strict=True)]
        out = Generation(prompt_ids=generation.prompt_ids, completion_ids=completion_ids, sampling_logps=logps)
        return ToolTurn(out, [None if rows is None else [x.mask for x in rows] for rows in samples],
                        [None if rows is None else [_answer(x.messages) for x in rows] for rows in samples],
                        [None if rows is None else [x.messages for x in rows] for rows in samples], stats)

    def _append_results(self, sample: _Sample, stats: ToolTurnStats, budget: int | None,
                        chat_template_kwargs: dict | None) -> bool:
        """Run `sample`'s calls and append their results (masked) to its completion; False, with nothing appended,
        when they do not fit the budget or the model's context (the sample then ends with its calls unanswered)."""
        results = self._call(sample, sample.calls, stats)
        suffix = tool_suffix_ids(self.tokenizers[sample.slot], self._tools_of(sample.slot)[1], results,
                                 chat_template_kwargs)
        used = len(sample.ids) + len(suffix)
        limit = self.context_limits[sample.slot]
        if (budget is not None and used > budget) or (limit is not None and len(sample.prompt) + used >= limit):
            stats.cut_by_budget += 1
            return False
        sample.messages.extend(results)
        sample.append(suffix, generated=False)
        return True

    def _generate_after(self, generate: GenerateFn, samples: list[_Sample], config: GenerationConfig,
                        budget: int | None, stats: dict[int, ToolTurnStats]) -> None:
        """One generation after the tool results of `samples`, each cut to its own room; the new messages parsed."""
        by_slot: list[list[list[int]]] = [[] for _ in self.agent_tools]
        contexts = [x.prompt + x.ids for x in samples]
        for sample, context in zip(samples, contexts):
            by_slot[sample.slot].append(context)
        step_config = copy.deepcopy(config)
        if budget is not None:  # the longest room of the call; each row is cut to its own below
            step_config.max_new_tokens = max(budget - len(x.ids) for x in samples)
        more = generate(by_slot, step_config)
        cursor = [0] * len(self.agent_tools)
        for sample, context in zip(samples, contexts):
            row = cursor[sample.slot]
            cursor[sample.slot] += 1
            new = list(more.completion_ids[sample.slot][row])
            new_logps = None if more.sampling_logps is None else list(more.sampling_logps[sample.slot][row])
            if budget is not None:
                new = new[: budget - len(sample.ids)]
            sample.append(new, generated=True, logps=None if new_logps is None else new_logps[: len(new)])
            stats[sample.slot].rounds += 1
            if new:
                sample.messages.append(self._parse(sample, new, context))

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

    def _parse(self, sample: _Sample, ids: list[int], prefix: list[int]) -> dict[str, Any]:
        """The assistant message of `ids`, generated after `prefix` by `sample`'s agent, read with its tools."""
        tools, tool_format = self._tools_of(sample.slot)
        return parse_completion(self.tokenizers[sample.slot], tool_format, ids, prefix,
                                tools.callables(self._environment(sample.slot, sample.index)))

    def _environment(self, slot: int, row: int) -> Any:
        environments = self._environments[slot]
        return environments[row] if row < len(environments) else None

    def _call(self, sample: _Sample, calls: list[dict[str, Any]], stats: ToolTurnStats) -> list[dict[str, Any]]:
        """Run one message's tool calls, counted in `stats`, within what is left of `sample`'s time for tool calls in
        this turn; each result as a `tool` message (named after the called tool)."""
        tools = self._tools_of(sample.slot)[0].by_name(self._environment(sample.slot, sample.index))
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
            outcome = self._timed_call(sample, name, tool, function.get("arguments", {}))
            stats.failed_calls += int(outcome.failed)
            results.append({"role": "tool", "name": name, "content": outcome.content})
        return results

    def _timed_call(self, sample: _Sample, name: str, tool: Callable[..., Any], arguments: Any) -> ToolOutcome:
        """[`call_tool`] within `timeout` and what is left of the sample's `turn_timeout` and of the turn's
        `total_timeout`; its time is charged to both. A call with no time left is not run."""
        timeout = self.timeout
        for limit, spent, whose in ((self.turn_timeout, sample.tool_seconds, "this turn's"),
                                    (self.total_timeout, self._turn_seconds, "the team's turn")):
            if limit is None:
                continue
            left = limit - spent
            if left <= 0:
                message = (f"tool {name!r} was not called: {whose} {limit:g} seconds for tool calls are spent; "
                           "answer with what you have")
                return ToolOutcome(content=str({"error": message}), failed=True)
            timeout = left if timeout is None else min(timeout, left)
        start = time.monotonic()
        try:
            return call_tool(tool, arguments, timeout=timeout, max_chars=self.max_result_chars)
        finally:
            took = time.monotonic() - start
            sample.tool_seconds += took
            self._turn_seconds += took


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
