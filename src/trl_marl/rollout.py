"""Joint rollouts over turns: environment + team + rewards -> a tree of scored samples.

One call of [`JointRollout.run`] plays the episodes of a batch of dataset rows:

1. turn 1 has one *node* per row; every agent samples `G = num_generations` completions per node, all agents in
   one batched generation call;
2. the agents' samples form joint actions: `aligned` (sample g of every agent forms joint action g, G joint
   actions) or `cross` (the Cartesian product, G^n joint actions);
3. the reward functions score every joint action (one centralized team reward per joint action);
4. with several turns, each joint action (or `max_branches` of them, chosen at random) becomes a child node whose
   transcript holds that joint action; the environment's feedback is appended and the next turn is sampled.
   A node stops early when its mean reward reaches `early_stop_threshold` (its success is then taken to persist
   for the turns it skips: `trl_marl.core.early_stop_returns`), or when the environment says so (a terminal state);
5. returns are backed up from the leaves: R_t = r_t + gamma * mean(R_{t+1} of the child's joint actions), and
   turned into per-agent group-relative advantages among the G samples of each agent at each node
   (`trl_marl.core`).

A joint action that is not continued only because of the branching cap is credited the mean future value of its
continued siblings, so the cap changes the variance of the return estimate but not which sibling looks better.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import GenerationConfig

from .core import (
    agent_returns_from_joint,
    batch_scaled_advantages,
    early_stop_returns,
    group_relative_advantages,
    joint_action_indices,
    tree_returns,
)
from .envs.base import MultiAgentEnv, Prompt, Transcript
from .team import AgentTeam, _is_chat
from .validation import RewardFunctionError, call_reward_function, unscorable_message


@dataclass
class Node:
    """One state of an episode: a dataset row and the transcript so far."""

    row_index: int
    transcript: Transcript
    parent: tuple[int, int] | None = None  # (node index at the previous turn, joint action index)


@dataclass
class TurnResult:
    """Everything sampled and scored at one turn of a batch of episodes.

    Shapes use K = number of nodes at this turn, G = samples per agent per node, J = joint actions per node,
    n = agents, F = reward functions.
    """

    turn: int
    nodes: list[Node]
    prompts: list[list[Prompt]]  # [agent][K * G]
    prompt_ids: list[list[list[int]]]  # [agent][K * G]
    completion_ids: list[list[list[int]]]  # [agent][K * G]
    completions: list[list[str]]  # [agent][K * G]
    joint_indices: torch.Tensor  # (J, n)
    rewards_per_func: torch.Tensor  # (K * J, F), NaN where a function gave None
    rewards: torch.Tensor  # (K, J) weighted sum; NaN for unscorable joint actions
    children: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, joint) -> child node index
    capped: set[tuple[int, int]] = field(default_factory=set)  # joint actions not continued because of the cap
    stopped: set[int] = field(default_factory=set)  # nodes that stopped early (mean reward >= early_stop_threshold)
    returns: torch.Tensor | None = None  # (K, J)
    agent_returns: torch.Tensor | None = None  # (K, n, G)
    advantages: torch.Tensor | None = None  # (K, n, G)


@dataclass
class Rollout:
    """The result of playing a batch of episodes: one [`TurnResult`] per turn reached."""

    turns: list[TurnResult]
    generation_time: float
    generated_tokens: int
    nonfinite_rewards: int


class TeamReward:
    """Calls TRL-style reward functions on joint actions and combines them with `reward_weights`.

    Each function is called as `f(prompts, completions, **kwargs)` with one entry per joint action, where
    `prompts`/`completions` are agent 0's (so a plain TRL reward function works unchanged with one agent), and
    the keyword arguments hold the multi-agent view: `agent_prompts` and `agent_completions` (one list per
    agent), `agent_index=None` (a team reward), `turn` (1-based), `transcript` (the episode before this turn),
    every dataset column, and `trainer_state`.

    The reward contract (the same for every trl-marl trainer, see `trl_marl.validation`): a function returns a list
    with one entry per joint action. An entry is a real number (`int`, `float`, `bool`, a NumPy scalar or a
    one-element tensor), or `None` when the function does not apply to that joint action. Strings (even `"1.0"`)
    and other types raise a [`RewardFunctionError`] naming the function and the value, as do a function that raises
    and a list of the wrong length. A joint action that every function skips is *unscorable*: its advantage is 0
    in MAGRPO. When *no* joint action of a whole rollout (every turn of every episode of an optimizer step) got a
    score, [`TeamReward.require_some_score`] raises: such a step cannot learn anything, and a function that always
    returns `None` is a bug. (PPO scores every response on its own and has no group baseline, so for PPO an
    unscorable response is an error at once.) NaN or infinite scores are skipped and counted against
    `max_nonfinite`, never replaced.
    """

    def __init__(self, funcs: Sequence[Callable[..., Any]], weights: Sequence[float] | None = None) -> None:
        if not funcs:
            raise ValueError("Pass at least one reward function in `reward_funcs`.")
        for f in funcs:
            if not callable(f):
                raise TypeError(
                    f"Reward function {f!r} is not callable. trl-marl takes callables "
                    "`f(prompts, completions, **kwargs) -> list[float | None]`; wrap a reward model in a function."
                )
        self.funcs = list(funcs)
        self.names = [getattr(f, "name", None) or getattr(f, "__name__", None) or type(f).__name__ for f in funcs]
        if weights is None:
            weights = [1.0] * len(funcs)
        if len(weights) != len(funcs):
            raise ValueError(
                f"`reward_weights` has {len(weights)} entries but there are {len(funcs)} reward functions."
            )
        self.weights = torch.tensor(list(weights), dtype=torch.float32)

    def __call__(self, prompts: list[list[Prompt]], completions: list[list[Any]], rows: list[Mapping[str, Any]],
                 transcripts: list[Transcript], turn: int,
                 trainer_state: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Score joint actions; `prompts[a][i]`/`completions[a][i]` are agent a's part of joint action i.

        Returns:
            `(rewards_per_func, nonfinite)`: a `(size, F)` tensor with NaN where a function returned `None`, and a
            bool `(size,)` tensor marking joint actions for which some function returned NaN or infinity.
        """
        size = len(rows)
        columns = {key: [row.get(key) for row in rows] for key in (rows[0] if rows else ())}
        out = torch.full((size, len(self.funcs)), float("nan"))
        nonfinite = torch.zeros(size, dtype=torch.bool)
        for f_index, (func, name) in enumerate(zip(self.funcs, self.names)):
            kwargs = dict(columns)
            kwargs.update(agent_prompts=prompts, agent_completions=completions, agent_index=None, turn=turn,
                          transcript=transcripts, trainer_state=trainer_state)
            kwargs.update(prompts=prompts[0], completions=completions[0])
            values = call_reward_function(func, name, size, **kwargs)
            for i, value in enumerate(values):
                if value is None:
                    continue
                if math.isfinite(value):
                    out[i, f_index] = value
                else:
                    nonfinite[i] = True
        return out, nonfinite

    def require_some_score(self, rewards_per_func: Sequence[torch.Tensor], nonfinite: int) -> None:
        """Raise when no joint action of a rollout got a score because every function returned `None` for all.

        Args:
            rewards_per_func: The `(size, F)` scores of each turn of the rollout (NaN where a function skipped).
            nonfinite: How many joint actions got a NaN or infinite score (those are handled by `max_nonfinite`).

        Raises:
            RewardFunctionError: when every entry is `None` and none is non-finite.
        """
        if nonfinite or any(bool((~torch.isnan(r)).any()) for r in rewards_per_func):
            return
        count = sum(int(r.size(0)) for r in rewards_per_func)
        raise RewardFunctionError(unscorable_message(
            self.names, f"all {count} joint actions of this step",
            "a step in which no joint action is scored gives every advantage 0 (`reward` is logged as nan)."))

    def combine(self, rewards_per_func: torch.Tensor, nonfinite: torch.Tensor) -> torch.Tensor:
        """The weighted sum of the scores of each joint action (`None`s left out).

        A joint action is unscorable (NaN, hence advantage 0) when every function returned `None` for it, or when a
        function returned NaN or infinity: such a score is skipped and counted by the caller, never replaced.
        """
        scored = ~torch.isnan(rewards_per_func)
        total = torch.where(scored, rewards_per_func * self.weights, torch.zeros_like(rewards_per_func)).sum(dim=1)
        unscorable = nonfinite | ~scored.any(dim=1)
        return torch.where(unscorable, torch.full_like(total, float("nan")), total)


def _completion_objects(prompts: Sequence[Prompt], texts: Sequence[str]) -> list[Any]:
    """TRL's convention: a conversational prompt gets a conversational completion."""
    return [[{"role": "assistant", "content": t}] if _is_chat(p) else t for p, t in zip(prompts, texts)]


class JointRollout:
    """Plays batches of episodes of a [`MultiAgentEnv`] with an [`AgentTeam`] (see the module docstring)."""

    def __init__(
        self,
        env: MultiAgentEnv,
        team: AgentTeam,
        reward: TeamReward,
        generation_config: GenerationConfig,
        num_generations: int,
        joint_mode: str = "aligned",
        discount: float = 1.0,
        advantage_mode: str = "mean",
        max_branches: int | None = None,
        early_stop_threshold: float | None = None,
        chat_template_kwargs: dict | None = None,
        seed: int | None = None,
    ) -> None:
        self.env = env
        self.team = team
        self.reward = reward
        self.generation_config = generation_config
        self.num_generations = num_generations
        self.joint_mode = joint_mode
        self.discount = discount
        self.advantage_mode = advantage_mode
        self.max_branches = max_branches
        self.early_stop_threshold = early_stop_threshold
        self.chat_template_kwargs = chat_template_kwargs
        # Branch choice draws from torch's global generator by default, so that it follows the trainer's seed and
        # is saved in (and restored from) a checkpoint's RNG state like sampling; `seed` gives the rollout a private
        # generator instead (e.g. for an evaluation that must not disturb training's random stream).
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.joint_indices = joint_action_indices(env.num_agents, num_generations, joint_mode)

    # ------------------------------------------------------------------ sampling
    def run(self, rows: Sequence[Mapping[str, Any]], trainer_state: Any = None) -> Rollout:
        """Play one episode tree per row and compute returns and advantages."""
        n, G = self.env.num_agents, self.num_generations
        J = self.joint_indices.size(0)
        nodes = [Node(i, Transcript()) for i in range(len(rows))]
        turns: list[TurnResult] = []
        gen_time, gen_tokens, nonfinite = 0.0, 0, 0
        turn = 1
        while nodes:
            prompts = [[self.env.agent_prompt(rows[node.row_index], a, node.transcript)
                        for node in nodes for _ in range(G)] for a in range(n)]
            start = time.perf_counter()
            generated = self.team.generate(prompts, self.generation_config, self.chat_template_kwargs)
            gen_time += time.perf_counter() - start
            prompt_ids = [g[0] for g in generated]
            completion_ids = [g[1] for g in generated]
            gen_tokens += sum(len(c) for agent in completion_ids for c in agent)
            texts = [self.team.tokenizers[a].batch_decode(completion_ids[a], skip_special_tokens=True)
                     for a in range(n)]
            # joint action j of node k takes sample k*G + joint_indices[j, a] of agent a
            index = self.joint_indices.tolist()
            sample = [[k * G + index[j][a] for k in range(len(nodes)) for j in range(J)] for a in range(n)]
            joint_prompts = [[prompts[a][i] for i in sample[a]] for a in range(n)]
            joint_texts = [[texts[a][i] for i in sample[a]] for a in range(n)]
            joint_rows = [rows[node.row_index] for node in nodes for _ in range(J)]
            joint_transcripts = [node.transcript for node in nodes for _ in range(J)]
            rewards_per_func, bad = self.reward(
                joint_prompts,
                [_completion_objects(joint_prompts[a], joint_texts[a]) for a in range(n)],
                joint_rows, joint_transcripts, turn, trainer_state,
            )
            rewards = self.reward.combine(rewards_per_func, bad)
            nonfinite += int(bad.sum())
            result = TurnResult(turn, nodes, prompts, prompt_ids, completion_ids, texts, self.joint_indices,
                                rewards_per_func, rewards.view(len(nodes), J))
            turns.append(result)
            nodes = self._expand(result, rows, joint_texts) if turn < self.env.num_turns else []
            turn += 1
        self._backup(turns)
        return Rollout(turns, gen_time, gen_tokens, nonfinite)

    def _expand(self, result: TurnResult, rows: Sequence[Mapping[str, Any]],
                joint_texts: list[list[str]]) -> list[Node]:
        """Child nodes for the next turn (branching cap, early stop and the env's end condition applied)."""
        J = self.joint_indices.size(0)
        children: list[Node] = []
        for k, node in enumerate(result.nodes):
            if self.early_stop_threshold is not None:
                node_rewards = result.rewards[k]
                if torch.isfinite(node_rewards).any() and node_rewards.nanmean() >= self.early_stop_threshold:
                    result.stopped.add(k)
                    continue
            chosen = list(range(J))
            if self.max_branches is not None and self.max_branches < J:
                picked = torch.randperm(J, generator=self.generator)[: self.max_branches]
                chosen = sorted(int(j) for j in picked)
                result.capped.update((k, j) for j in range(J) if j not in chosen)
            row = rows[node.row_index]
            for j in chosen:
                responses = [joint_texts[a][k * J + j] for a in range(self.env.num_agents)]
                transcript = node.transcript.extend(responses)
                feedback = self.env.feedback(row, transcript)
                if feedback is not None:
                    transcript = node.transcript.extend(responses, feedback)
                if self.env.is_done(row, transcript):
                    continue
                result.children[(k, j)] = len(children)
                children.append(Node(node.row_index, transcript, parent=(k, j)))
        return children

    # ------------------------------------------------------------------ credit assignment
    def _backup(self, turns: list[TurnResult]) -> None:
        """Returns from the leaves up, then per-agent group-relative advantages at every turn."""
        G = self.num_generations
        J = self.joint_indices.size(0)
        next_values: torch.Tensor | None = None  # value of each node at turn t+1: mean return of its joint actions
        for result in reversed(turns):
            K = len(result.nodes)
            if next_values is None:
                result.returns = tree_returns(result.rewards, None, self.discount)
            else:
                child_value = torch.full((K, J, 1), float("nan"))
                mask = torch.zeros((K, J, 1), dtype=torch.bool)
                for (k, j), c in result.children.items():
                    child_value[k, j, 0] = next_values[c]
                    mask[k, j, 0] = bool(torch.isfinite(next_values[c]))
                for k, j in result.capped:  # bootstrap from the continued siblings
                    siblings = child_value[k, :, 0][mask[k, :, 0]]
                    if siblings.numel():
                        child_value[k, j, 0] = siblings.mean()
                        mask[k, j, 0] = True
                result.returns = tree_returns(result.rewards, child_value, self.discount, mask)
            if result.stopped:  # an early stop keeps the achieved team reward for the turns it skips
                stopped = sorted(result.stopped)
                result.returns[stopped] = early_stop_returns(
                    result.rewards[stopped], self.env.num_turns - result.turn, self.discount)
            next_values = result.returns.nanmean(dim=1)
            result.agent_returns = agent_returns_from_joint(result.returns, self.joint_indices, G)  # (K, n, G)
            if self.advantage_mode == "batch":  # the scale is the std of the team's returns, not of every agent's copy
                result.advantages = batch_scaled_advantages(result.agent_returns, team_returns=result.returns)
            else:
                result.advantages = group_relative_advantages(result.agent_returns, mode=self.advantage_mode)
            if not torch.isfinite(result.advantages).all():
                result.advantages = torch.nan_to_num(result.advantages, nan=0.0)


def reward_std_is_zero(rewards: torch.Tensor) -> float:
    """Fraction of nodes whose joint actions all got the same reward (no learning signal there)."""
    if rewards.numel() == 0:
        return 0.0
    spread = rewards.nan_to_num(0.0).amax(dim=1) - rewards.nan_to_num(0.0).amin(dim=1)
    return float((spread.abs() < 1e-8).float().mean().item())


def flat_group_fraction(turns: Sequence[TurnResult]) -> float:
    """Fraction of the groups (nodes, over every turn) whose joint actions all got the same return.

    Such a group gives every sample advantage 0 (in every advantage mode), so it contributes no gradient; when
    (nearly) every group is flat, the team has stopped learning. Unscorable (NaN) returns are left out; a node with
    fewer than two scorable joint actions is flat.
    """
    flat, total = 0, 0
    for t in turns:
        returns = t.returns if t.returns is not None else t.rewards
        for node in returns:
            finite = node[torch.isfinite(node)]
            total += 1
            flat += int(finite.numel() < 2 or float(finite.max() - finite.min()) < 1e-8)
    return flat / total if total else 0.0


def finite_mean(values: torch.Tensor) -> float:
    """Mean over the finite entries (NaN when there are none)."""
    finite = values[torch.isfinite(values)]
    return float(finite.mean().item()) if finite.numel() else math.nan
