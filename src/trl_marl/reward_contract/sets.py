"""The reward functions of a trainer as one object: [`RewardSet`] (the team's, or an agent's), [`TeamReward`]
(MAGRPO's) and [`LocalReward`] (each agent's own local reward), called under the reward contract of
`trl_marl.reward_contract`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..envs.base import Prompt, Transcript
from ..team import is_chat
from .calls import REWARD_ISOLATIONS, call_reward_function
from .errors import RewardFunctionError, unscorable_message
from .signature import (
    REWARD_KEYWORDS,
    TOOL_REWARD_KEYWORDS,
    RewardFunc,
    check_reward_signature,
    missing_keywords,
    reward_kind,
)

if TYPE_CHECKING:
    from transformers import TrainerState

AgentToolMessages = list[list[list[dict[str, Any]]] | None]
"""`agent_tool_messages` of a turn with tools: `[a][i]`, agent a's turn in joint action (or episode) i as chat
messages (its calls, their results, its answer); None for an agent without tools."""


def completion_objects(prompts: Sequence[Prompt], texts: Sequence[str]) -> list[Any]:
    """TRL's convention: a conversational prompt gets a conversational completion, a plain one a string."""
    return [[{"role": "assistant", "content": t}] if is_chat(p) else t for p, t in zip(prompts, texts)]


class RewardSet:
    """Reward functions with their weights, names and kinds, called by the reward contract
    (`trl_marl.reward_contract`).

    Args:
        funcs: The reward functions (callables).
        weights: One weight per function (`reward_weights`); default 1 each.
        default_kind: The kind of a function that does not declare one: `"team"` or `"agent"`.
    """

    def __init__(
        self, funcs: Sequence[RewardFunc], weights: Sequence[float] | None = None, default_kind: str = "team"
    ) -> None:
        if not funcs:
            raise ValueError("Pass at least one reward function in `reward_funcs`.")
        for f in funcs:
            if not callable(f):
                raise TypeError(
                    f"Reward function {f!r} is not callable. trl-marl takes callables "
                    "`f(prompts, completions, **kwargs) -> list[float | None]`; wrap a reward model in a function."
                )
        self.names = [getattr(f, "name", None) or getattr(f, "__name__", None) or type(f).__name__ for f in funcs]
        for f, name in zip(funcs, self.names):
            check_reward_signature(f, name)  # now, not at the first reward call
        self.funcs = list(funcs)
        self.kinds = [reward_kind(f, default_kind) for f in funcs]
        if weights is None:
            weights = [1.0] * len(funcs)
        if len(weights) != len(funcs):
            raise ValueError(
                f"`reward_weights` has {len(weights)} entries but there are {len(funcs)} reward functions."
            )
        self.weights = torch.tensor(list(weights), dtype=torch.float32)
        self.timeout: float | None = None
        self.timeout_field = "reward_timeout"
        self.isolation = "process"
        self.isolation_field = "reward_isolation"

    def set_timeout(
        self, seconds: float | None, field: str, isolation: str = "process", isolation_field: str | None = None
    ) -> None:
        """Limit every call of a reward function to `seconds` (`None`: no limit); `field` names the config field.

        A function with its own `reward_timeout` attribute (seconds, or `None` for no limit) keeps it instead, e.g.
        a remote verifier whose retry budget is longer than the run's limit. A call that overruns raises a
        [`RewardTimeoutError`]. `isolation` says where a call with a limit runs: `"process"` (a worker process,
        killed at the limit) or `"thread"` (see [`call_reward_function`]); a function's own `reward_isolation`
        attribute wins, e.g. `"thread"` for one whose side effects the caller reads.

        Raises:
            ValueError: an `isolation` (the config's or a function's) that is not one of [`REWARD_ISOLATIONS`].
        """
        isolation_field = isolation_field or field.replace("reward_timeout", "reward_isolation")
        if isolation not in REWARD_ISOLATIONS:
            raise ValueError(f"`{isolation_field}` must be one of {REWARD_ISOLATIONS}, got {isolation!r}.")
        for f, name in zip(self.funcs, self.names):
            own = getattr(f, "reward_isolation", isolation)
            if own not in REWARD_ISOLATIONS:
                raise ValueError(
                    f"Reward function `{name}` has `reward_isolation={own!r}`; it must be one of "
                    f"{REWARD_ISOLATIONS} (or no such attribute, to take `{isolation_field}`)."
                )
        self.timeout = seconds
        self.timeout_field = field
        self.isolation = isolation
        self.isolation_field = isolation_field

    def timeout_of(self, f_index: int) -> float | None:
        """The time limit of one call of function `f_index` (its own `reward_timeout`, else the set's)."""
        return getattr(self.funcs[f_index], "reward_timeout", self.timeout)

    # ------------------------------------------------------------------ calls
    def _call(
        self,
        f_index: int,
        prompts: list[list[Prompt]],
        completions: list[list[Any]],
        columns: dict[str, list[Any]],
        transcripts: Sequence[Transcript],
        turn: int,
        trainer_state: TrainerState | None,
        agent_index: int | None,
        tool_messages: AgentToolMessages | None = None,
    ) -> list[float | None]:
        shown = 0 if agent_index is None else agent_index
        kwargs: dict[str, Any] = dict(columns)  # the multi-agent keywords win over dataset columns of the same name
        kwargs.update(
            agent_prompts=prompts,
            agent_completions=completions,
            agent_index=agent_index,
            turn=turn,
            transcript=list(transcripts),
            trainer_state=trainer_state,
            prompts=prompts[shown],
            completions=completions[shown],
        )
        if tool_messages is not None:  # a turn with tools: each agent's calls and their results, as chat messages
            kwargs["agent_tool_messages"] = tool_messages
        func, name = self.funcs[f_index], self.names[f_index]
        field = self.timeout_field if not hasattr(func, "reward_timeout") else f"{name}.reward_timeout"
        isolation_field = (
            self.isolation_field if not hasattr(func, "reward_isolation") else (f"{name}.reward_isolation")
        )
        return call_reward_function(
            func,
            name,
            len(transcripts),
            timeout=self.timeout_of(f_index),
            timeout_field=field,
            isolation=getattr(func, "reward_isolation", self.isolation),
            isolation_field=isolation_field,
            arguments=kwargs,
        )

    def score(
        self,
        prompts: list[list[Prompt]],
        texts: list[list[str]],
        rows: Sequence[Mapping[str, Any]],
        transcripts: Sequence[Transcript],
        turn: int,
        trainer_state: TrainerState | None = None,
        per_agent: bool = False,
        agents: Sequence[int] | None = None,
        tool_messages: AgentToolMessages | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Score the joint actions of one turn; `prompts[a][i]`/`texts[a][i]` are agent a's part of joint action i.

        Args:
            per_agent: `False` for one score per joint action (MAGRPO), `True` for one per (joint action, agent)
                (PPO). A team reward is called once either way.
            agents: The agents an agent reward is called for (default: every agent); the others' scores stay NaN
                (a [`LocalReward`] of one agent's own functions).
            tool_messages: In a turn with tools, `[a][i]` agent a's turn in joint action i as chat messages (its
                tool calls, their results and its answer; None for an agent without tools), passed to every
                function as `agent_tool_messages` (not passed otherwise).

        Returns:
            `(rewards_per_func, nonfinite)`: `(N, F)` (or `(N, A, F)` with `per_agent`) scores, NaN where a function
            gave `None`, and a bool `(N,)` (or `(N, A)`) tensor marking entries with a NaN or infinite score.
        """
        size, n = len(rows), len(prompts)
        columns = {key: [row.get(key) for row in rows] for key in (rows[0] if rows else ())}
        completions = [completion_objects(prompts[a], texts[a]) for a in range(n)]
        F = len(self.funcs)
        out = torch.full((size, n, F), float("nan"))  # per (joint action, agent); a team score is copied to all
        bad = torch.zeros(size, n, F, dtype=torch.bool)
        for f_index, kind in enumerate(self.kinds):
            called: list[int | None] = [None] if kind == "team" else list(range(n) if agents is None else agents)
            for a in called:
                values = self._call(f_index, prompts, completions, columns, transcripts, turn, trainer_state, a,
                                    tool_messages)
                cells = slice(None) if a is None else a
                for i, value in enumerate(values):
                    if value is None:
                        continue
                    if math.isfinite(value):
                        out[i, cells, f_index] = value
                    else:
                        bad[i, cells, f_index] = True
        if per_agent:
            return out, bad.any(dim=-1)
        # one score per joint action: a team reward's own score (exactly), an agent reward's mean over the agents
        joint = out[:, 0, :].clone()
        for f_index, kind in enumerate(self.kinds):
            if kind == "agent":
                joint[:, f_index] = out[:, :, f_index].nanmean(dim=1)
        return joint, bad.any(dim=(1, 2))

    # ------------------------------------------------------------------ combination
    def combine(self, rewards_per_func: torch.Tensor, nonfinite: torch.Tensor) -> torch.Tensor:
        """The weighted sum over the functions that scored (`None`s left out); NaN where unscorable.

        Works on `(N, F)` and `(N, A, F)` scores alike. An entry is unscorable when every function returned `None`
        for it, or when a function returned NaN or infinity (skipped and counted by the caller, never replaced).
        """
        scored = ~torch.isnan(rewards_per_func)
        weighted = torch.where(scored, rewards_per_func * self.weights, torch.zeros_like(rewards_per_func))
        total = weighted.sum(dim=-1)
        unscorable = nonfinite | ~scored.any(dim=-1)
        return torch.where(unscorable, torch.full_like(total, float("nan")), total)

    def require_some_score(self, rewards_per_func: Sequence[torch.Tensor], nonfinite: int) -> None:
        """Raise when nothing of a step got a score because every function returned `None` for everything.

        Args:
            rewards_per_func: The scores of each turn of the step (NaN where a function skipped).
            nonfinite: How many entries got a NaN or infinite score (those are handled by `max_nonfinite`).

        Raises:
            RewardFunctionError: when every entry is `None` and none is non-finite.
        """
        if nonfinite or any(bool((~torch.isnan(r)).any()) for r in rewards_per_func):
            return
        count = sum(int(r.size(0)) for r in rewards_per_func)
        raise RewardFunctionError(
            unscorable_message(
                self.names,
                f"all {count} joint actions of this step",
                "a step in which nothing is scored gives every advantage 0 (`reward` is logged as nan).",
            )
        )


class TeamReward(RewardSet):
    """The reward functions of MAGRPO: a [`RewardSet`] whose functions score joint actions as team rewards unless
    they declare themselves agent rewards (the contract, documented once: `trl_marl.reward_contract`).

    In short: each entry is a number or `None` (the function does not apply); anything else raises a
    [`RewardFunctionError`]. Calling it scores joint actions whose completions are texts, or TRL's conversational
    messages.
    """

    def __init__(self, funcs: Sequence[Callable[..., Any]], weights: Sequence[float] | None = None) -> None:
        super().__init__(funcs, weights, default_kind="team")

    def __call__(self, prompts: list[list[Prompt]], completions: list[list[Any]], rows: list[Mapping[str, Any]],
                 transcripts: list[Transcript], turn: int,
                 trainer_state: TrainerState | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Score joint actions; `prompts[a][i]`/`completions[a][i]` are agent a's part of joint action i (texts)."""
        texts = [[c[0]["content"] if isinstance(c, list) else c for c in agent] for agent in completions]
        return self.score(prompts, texts, rows, transcripts, turn, trainer_state)


class LocalReward:
    """Per-agent *local* rewards (MAGRPO's `local_reward_funcs`): each agent's own completion scored on its own.

    A team's reward is one number per joint action; a local reward is one per (joint action, agent), read by
    advantage estimators that mix it with the team's (AT-GRPO's ``r_i = alpha * r^team + r^loc_i``, the
    ``"agent_turn"`` estimator). Local functions follow the agent-reward contract of this module: called once per
    (turn, agent) with one entry per joint action, `agent_index=a`, and `prompts`/`completions` agent `a`'s. Entries:
    a number, or `None` where the function does not apply (it then adds nothing: a sample whose every local function
    says `None` has local reward 0, and still its team reward); NaN or infinity makes the sample's local reward NaN
    (advantage 0) and is counted against `max_nonfinite`. Scores are combined with `local_reward_weights`.

    Args:
        funcs: One list of functions for every agent, or one list per agent (`[[f], [g, h]]`: agent 0 is scored by
            `f`, agent 1 by `g` and `h`; an empty list: that agent has no local reward).
        num_agents: The agents of the team.
        weights: One weight per function, in order (with one list per agent: agent 0's functions, then agent 1's,
            ...); default 1 each.
        field: The name of the argument that gave `funcs`, for error messages.
        weights_field: The name of the argument that gave `weights`.

    Raises:
        ValueError: `funcs` is empty, a list per agent whose length is not `num_agents`, a function declared a team
            reward, or `weights` of the wrong length.
        TypeError: a function that is not callable.
    """

    def __init__(self, funcs: Sequence[Any], num_agents: int, weights: Sequence[float] | None = None,
                 field: str = "local_reward_funcs", weights_field: str = "local_reward_weights") -> None:
        funcs = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
        nested = [isinstance(f, (list, tuple)) for f in funcs]
        if not funcs:
            raise ValueError(f"`{field}` is empty: pass local reward functions, or leave `{field}` out (None).")
        if any(nested) and not all(nested):
            raise ValueError(f"`{field}` mixes functions and lists: pass one list of functions for every agent, or "
                             f"one list per agent ({num_agents} lists).")
        per_agent = [list(f) for f in funcs] if all(nested) else [funcs] * num_agents
        if len(per_agent) != num_agents:
            raise ValueError(f"`{field}` has {len(per_agent)} lists for a team of {num_agents} agents: pass one "
                             f"list per agent (`[]` for an agent without a local reward), or one flat list for all.")
        flat = [f for agent in per_agent for f in agent] if all(nested) else funcs
        if weights is not None and len(weights) != len(flat):
            raise ValueError(f"`{weights_field}` has {len(weights)} entries but `{field}` has {len(flat)} functions: "
                             "give one weight per function, in order (with one list per agent: agent 0's first).")
        if not flat:
            raise ValueError(f"`{field}` gives no agent a function: leave `{field}` out (None) instead.")
        for f in flat:
            if callable(f) and getattr(f, "reward_kind", "agent") != "agent":
                name = getattr(f, "name", None) or getattr(f, "__name__", type(f).__name__)
                raise ValueError(f"`{field}` holds `{name}`, declared a team reward (`reward_kind="
                                 f"{f.reward_kind!r}`): a local reward scores one agent's completion. Pass it in "
                                 "`reward_funcs` (the team reward) instead.")
        self.num_agents = num_agents
        self.sets: list[RewardSet | None] = []
        start = 0
        for agent_funcs in per_agent:
            count = len(agent_funcs)
            agent_weights = None if weights is None else list(weights)[start:start + count]
            if all(nested):
                start += count
            self.sets.append(RewardSet(agent_funcs, agent_weights, default_kind="agent") if agent_funcs else None)

    def names(self, agent: int) -> list[str]:
        """The names of agent `agent`'s local reward functions (for the logs)."""
        found = self.sets[agent]
        return [] if found is None else list(found.names)

    def set_timeout(self, seconds: float | None, field: str, isolation: str = "process") -> None:
        """As [`RewardSet.set_timeout`], for every agent's functions."""
        for reward_set in self.sets:
            if reward_set is not None:
                reward_set.set_timeout(seconds, field, isolation)

    def score(self, prompts: list[list[Prompt]], texts: list[list[str]], rows: Sequence[Mapping[str, Any]],
              transcripts: Sequence[Transcript], turn: int, trainer_state: TrainerState | None = None,
              tool_messages: AgentToolMessages | None = None,
              ) -> tuple[torch.Tensor, list[torch.Tensor | None], int]:
        """Score every agent's part of the joint actions of one turn (arguments as [`RewardSet.score`]).

        Returns:
            `(local, per_func, nonfinite)`: `(N, n)` local rewards (0 where every function of the agent returned
            `None` or the agent has none; NaN where one returned NaN or infinity), each agent's `(N, F_a)` scores
            (NaN where a function skipped; `None` for an agent without functions), and the count of non-finite
            entries.
        """
        size = len(rows)
        local = torch.zeros(size, self.num_agents)
        per_func: list[torch.Tensor | None] = []
        nonfinite = 0
        for a, reward_set in enumerate(self.sets):
            if reward_set is None:
                per_func.append(None)
                continue
            scores, bad = reward_set.score(prompts, texts, rows, transcripts, turn, trainer_state, per_agent=True,
                                           agents=[a], tool_messages=tool_messages)
            scores, bad = scores[:, a, :], bad[:, a]
            scored = ~torch.isnan(scores)
            total = torch.where(scored, scores * reward_set.weights, torch.zeros_like(scores)).sum(dim=-1)
            local[:, a] = torch.where(bad, torch.full_like(total, float("nan")), total)
            per_func.append(scores)
            nonfinite += int(bad.sum())
        return local, per_func, nonfinite


def tool_keywords(tool_messages: AgentToolMessages | None) -> dict[str, Any]:
    """The keyword a `compute_rewards` call gets in a turn with tools (`tool_messages=`), none otherwise: an override
    written before tools keeps working where no agent has any."""
    return {} if tool_messages is None else {"tool_messages": tool_messages}


def check_tool_scoring(compute_rewards: Callable[..., Any] | None,
                       *reward_sets: RewardSet | LocalReward | None) -> None:
    """In a trainer with tools, before any step: refuse a reward function of `reward_sets` that cannot take
    `agent_tool_messages`, and a `compute_rewards` hook (a subclass's override) that cannot take `tool_messages`;
    each turn with tools passes them, so either would fail at the first reward call instead."""
    for rewards in reward_sets:
        for reward_set in rewards.sets if isinstance(rewards, LocalReward) else [rewards]:
            if reward_set is not None:
                for func, name in zip(reward_set.funcs, reward_set.names):
                    check_reward_signature(func, name, (*REWARD_KEYWORDS, *TOOL_REWARD_KEYWORDS))
    if compute_rewards is not None and missing_keywords(compute_rewards, ["tool_messages"]):
        owner = type(getattr(compute_rewards, "__self__", None)).__name__
        raise TypeError(
            f"`{owner}.compute_rewards` does not take `tool_messages`, but this trainer has tools: each turn with "
            "tools calls it with `tool_messages=` (each agent's calls and their results, for the reward functions' "
            "`agent_tool_messages`). Add `tool_messages=None` to the override's signature and pass it on, e.g. "
            "`self.rewards.score(..., tool_messages=tool_messages)`."
        )
