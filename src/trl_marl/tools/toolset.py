"""Which tools each agent of a team has: TRL's `tools` and `environment_factory`, for the whole team or per agent.

TRL's `GRPOTrainer` takes `tools` (plain Python functions with type hints and a Google-style docstring, described to
the model through the chat template) and `environment_factory` (a callable returning a stateful environment whose
public methods are tools as well, with a `reset(**row)` before each rollout). A team takes the same arguments:

- `tools=[f, g]` or `environment_factory=make_env`: every agent has them;
- `tools=[[f], None]`, `environment_factory=[make_env, None]`: one entry per agent (None: no tools; that agent
  behaves as an agent of a team without tools).

An environment lives for one agent's turn: each sample of the agent draws an instance from a pool (instances are
built once and reset often) and its `reset(**row)` runs with the dataset row before the turn; a string it returns is
appended to the agent's last prompt message, as in TRL.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from transformers.utils import get_json_schema


@dataclass
class AgentTools:
    """The tools of one agent: standalone functions and an environment factory (either may be empty).

    Attributes:
        tools: Functions the agent may call, by their `__name__`.
        environment_factory: Builds an environment whose public methods (not `reset`, not starting with `_`) are
            tools too; None: no environment.
    """

    tools: tuple[Callable[..., Any], ...] = ()
    environment_factory: Callable[[], Any] | None = None
    _pool: list[Any] = field(default_factory=list, repr=False)

    def environments(self, count: int) -> list[Any]:
        """`count` environment instances for one turn's samples (reused from the pool, built when it runs short)."""
        if self.environment_factory is None:
            return [None] * count
        while len(self._pool) < count:
            self._pool.append(self.environment_factory())
        return self._pool[:count]

    def callables(self, environment: Any = None) -> list[Callable[..., Any]]:
        """The agent's tools with `environment`'s methods (what the chat template describes, in that order)."""
        return [*self.tools, *environment_methods(environment)] if environment is not None else list(self.tools)

    def by_name(self, environment: Any = None) -> dict[str, Callable[..., Any]]:
        """`{name: tool}` of [`AgentTools.callables`]."""
        return {tool.__name__: tool for tool in self.callables(environment)}


def environment_methods(environment: Any) -> list[Callable[..., Any]]:
    """The tools of an environment instance: its class's public functions, except `reset`, bound to it."""
    return [getattr(environment, name) for name, _ in inspect.getmembers(type(environment), inspect.isfunction)
            if name != "reset" and not name.startswith("_")]


def team_tools(tools: Sequence[Any] | None, environment_factory: Any, num_agents: int,
               ) -> list[AgentTools | None]:
    """Each agent's [`AgentTools`] (None for an agent without tools), from a trainer's `tools` and
    `environment_factory` (see the module docstring). Every tool is checked: a callable with a name and a schema
    that transformers can build from its signature and docstring, no two tools of an agent with one name.

    Raises:
        ValueError: A malformed argument: the message names it and says what to pass.
    """
    per_agent_tools = _per_agent("tools", tools, num_agents, _is_tool_list)
    factories = _per_agent("environment_factory", environment_factory, num_agents, _is_factory)
    out: list[AgentTools | None] = []
    for agent, (agent_tools, factory) in enumerate(zip(per_agent_tools, factories)):
        listed = tuple(agent_tools or ())
        if not listed and factory is None:
            out.append(None)
            continue
        entry = AgentTools(tools=listed, environment_factory=factory)
        probe = entry.environments(1)[0] if factory is not None else None
        if probe is not None:
            _check_environment(probe, agent)
        _check_tools(entry.callables(probe), agent)
        out.append(entry)
    return out


def _is_tool_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and all(callable(t) for t in value)


def _is_factory(value: Any) -> bool:
    return callable(value)


def _per_agent(name: str, value: Any, num_agents: int, is_entry: Callable[[Any], bool]) -> list[Any]:
    """`value` for the whole team, or one entry per agent (None entries: nothing for that agent)."""
    if value is None:
        return [None] * num_agents
    if isinstance(value, Mapping):
        raise ValueError(f"`{name}` as a dict (TRL's several named environments) is not supported by teams: pass one "
                         f"factory for every agent, or a list with one factory (or None) per agent.")
    if is_entry(value):
        return [value] * num_agents
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != num_agents or not all(v is None or is_entry(v) for v in value):
            kind = "a list of tools" if name == "tools" else "a factory"
            raise ValueError(f"`{name}` must be {kind} for the whole team, or a list of {num_agents} entries (one per "
                             f"agent: {kind} or None); got {len(value)} entries: {value!r}.")
        return list(value)
    raise ValueError(f"`{name}` must be {'a list of callables' if name == 'tools' else 'a callable'} for the whole "
                     f"team or one entry per agent; got {type(value).__name__}.")


def _check_environment(environment: Any, agent: int) -> None:
    if not callable(getattr(environment, "reset", None)):
        raise ValueError(f"Agent {agent}'s `environment_factory` built a {type(environment).__name__} without a "
                         "callable `reset`: define `reset(self, **row)` (it may return a string to append to the "
                         "prompt, or None).")
    if callable(getattr(environment, "get_reward", None)):
        raise ValueError(f"Agent {agent}'s environment {type(environment).__name__} defines `get_reward`: a team is "
                         "scored by its team reward (`reward_funcs`, on the agents' answers), not by one agent's "
                         "environment. Remove `get_reward` and compute the reward in a reward function.")


def _check_tools(tools: list[Callable[..., Any]], agent: int) -> None:
    seen: set[str] = set()
    for tool in tools:
        name = getattr(tool, "__name__", None)
        if not name or name == "<lambda>":
            raise ValueError(f"Agent {agent} has a tool without a name ({tool!r}): tools are called by their "
                             "function name; use a `def` function with a docstring.")
        if name in seen:
            raise ValueError(f"Agent {agent} has two tools named {name!r}: tool names must be unique per agent.")
        seen.add(name)
        try:
            get_json_schema(tool)
        except Exception as error:
            raise ValueError(f"Agent {agent}'s tool {name!r} cannot be described to the model ({error}): give it type "
                             "hints and a Google-style docstring with an `Args:` entry per argument.") from error
