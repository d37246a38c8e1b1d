"""Joint rollouts over turns: environment + team + rewards -> a tree of scored samples.

One call of [`JointRollout.run`] plays the episodes of a batch of dataset rows:

1. turn 1 has one *node* per row; every agent samples `G = num_generations` completions per node, all agents in
   one batched generation call;
2. the agents' samples form joint actions: `aligned` (sample g of every agent forms joint action g, G joint
   actions) or `cross` (the Cartesian product, G^n joint actions);
3. the reward functions score every joint action (one centralized team reward per joint action; the reward contract
   of `trl_marl.reward_contract`: each joint action's transcript, which includes it, is what the functions see);
4. with several turns, each joint action (or `max_branches` of them, chosen at random) becomes a child node whose
   transcript holds that joint action; the environment's feedback is appended and the next turn is sampled.
   A node stops early when its mean reward reaches `early_stop_threshold` (its success is then taken to persist
   for the turns it skips: `trl_marl.core.early_stop_returns`), or when the environment says so (a terminal state);
5. returns are backed up from the leaves: R_t = r_t + gamma * mean(R_{t+1} of the child's joint actions), and
   credited to each agent's samples (`TurnResult.agent_returns`; `trl_marl.core.returns`). With a
   [`~trl_marl.reward_contract.LocalReward`] each agent's local reward is scored too and backed up the same way, per
   agent (`TurnResult.local_returns`), for the estimators that mix it in (AT-GRPO's `"agent_turn"`).

The engine stops at returns: which advantage estimator turns them into advantages is the trainer's choice
(`MAGRPOConfig.advantage_mode`): [`rollout_advantages`] gives the estimator (`trl_marl.core.advantages`) every
turn of the tree in one call, and [`assign_advantages`] sets them on the turns.

The same engine serves every trainer: MAGRPO as above; PPO and evaluation with `num_generations=1` (one joint action
per node: plain episodes), PPO scoring each (turn, agent) response once the episode is over (`run(score=False)`).

A joint action that is not continued only because of the branching cap is credited the mean future value of its
continued siblings, so the cap changes the variance of the return estimate but not which sibling looks better.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from transformers import GenerationConfig

from .core import (
    AdvantageContext,
    advantage_estimator,
    agent_local_returns_from_joint,
    agent_returns_from_joint,
    early_stop_returns,
    joint_action_indices,
    tree_returns,
)
from .core.advantages import no_signal_nodes
from .envs.base import MultiAgentEnv, Prompt, Transcript
from .reward_contract import (
    LocalReward,
    RewardFunctionError,  # noqa: F401 - re-exported (the reward contract lives in `reward_contract`)
    RewardSet,
)
from .reward_contract.sets import AgentToolMessages, tool_keywords
from .team import AgentTeam, Generation
from .tools.loop import ToolLoop, ToolTurn, ToolTurnStats

if TYPE_CHECKING:
    from transformers import TrainerState


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
    advantages: torch.Tensor | None = None  # (K, n, G), set by the trainer ([`assign_advantages`])
    # this turn's team returns on every process, flat (set when the engine has a `gather`): batch statistics' batch
    pooled_returns: torch.Tensor | None = None
    transcripts: list[Transcript] = field(default_factory=list)  # (K * J) each joint action's, including it
    # [agent][K * G] the generation backend's log-probability of every completion token (vLLM), else None
    sampling_logps: list[list[list[float]]] | None = None
    # [agent] the policy version (optimizer steps taken) of the member that sampled this turn's completions, set by
    # MAGRPO's asynchronous rollouts (`max_staleness > 0`; one version for the whole episode), else None
    policy_versions: list[int] | None = None
    # with a `LocalReward`: (K, J, n) each agent's local reward per joint action (NaN: non-finite), its functions'
    # scores per agent ([agent] (K * J, F_a), None for an agent without any), and (K, n, G) the local returns
    local_rewards: torch.Tensor | None = None
    local_rewards_per_func: list[torch.Tensor | None] | None = None
    local_returns: torch.Tensor | None = None
    # with tools ([`ToolLoop`]): [agent] None for an agent without tools, else [K * G] per sample: its tool mask (1 on
    # generated tokens, 0 on tool results), its turn as chat messages, and the agent's counts of tool use
    tool_masks: list[list[list[int]] | None] | None = None
    tool_messages: AgentToolMessages | None = None
    tool_stats: list[ToolTurnStats | None] | None = None


@dataclass
class Rollout:
    """The result of playing a batch of episodes: one [`TurnResult`] per turn reached."""

    turns: list[TurnResult]
    generation_time: float
    generated_tokens: int
    nonfinite_rewards: int

    def episode_transcripts(self, num_rows: int) -> list[Transcript]:
        """The transcript of each row's episode (one sample per agent: the last joint action it reached)."""
        out = [Transcript() for _ in range(num_rows)]
        for t in self.turns:
            J = len(t.transcripts) // max(1, len(t.nodes))
            for k, node in enumerate(t.nodes):
                out[node.row_index] = t.transcripts[k * J]
        return out


ScoreFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
"""`score(prompts, texts, rows, transcripts, turn, trainer_state) -> (rewards_per_func, nonfinite)`."""


class JointRollout:
    """Plays batches of episodes of a [`MultiAgentEnv`] with an [`AgentTeam`] (see the module docstring).

    The one rollout engine of trl-marl: MAGRPO plays `G = num_generations` samples per agent per node (a tree), PPO
    plays one sample per agent (`num_generations=1`, one joint action per node: a plain episode) and scores it
    afterwards (`run(..., score=False)`), evaluation plays one sample per agent and scores every turn.

    Args:
        env: The environment.
        team: The policies. A team with one member per (turn, agent) (`AgentTeam.slot`) is played slot by slot.
        reward: The reward functions (a [`~trl_marl.reward_contract.RewardSet`]), called at every turn by `score`.
        generation_config: Sampling settings.
        num_generations: Samples per agent per node (G).
        joint_mode: `"aligned"` or `"cross"`.
        discount: gamma of the tree returns.
        max_branches: The branching cap (joint actions of a node continued at the next turn).
        early_stop_threshold: A node whose mean reward reaches it stops (its success persists).
        chat_template_kwargs: Passed to the chat template.
        seed: A private generator for the branch choice (default: torch's global one).
        stop_token_ids: Completions are cut after the first of these tokens (default: the EOS tokens).
        score: Overrides `reward.score` (a trainer's `compute_rewards` hook).
        gather: Concatenates a `(N, C)` float tensor over every process, in process order (N may differ between
            processes; a trainer's all-gather, e.g. `trl_marl.trainers.distributed.gathered_rows`). With it, every
            turn's `pooled_returns` holds that turn's team returns on every process, so that batch statistics
            (the `"batch"` estimator) are those of the whole batch, as TRL's `GRPOTrainer` gathers its rewards before
            taking them. It is called once per scored `run` on every process (a collective), however many turns
            each process played. None: this process's batch is the whole batch.
        local_reward: Per-agent local rewards ([`~trl_marl.reward_contract.LocalReward`]), scored at every scored turn
            and backed up per agent into `TurnResult.local_returns`. None: no local reward.
        tool_loop: The tools of the team's members ([`~trl_marl.tools.ToolLoop`], indexed like the team): within a
            turn a member with tools calls them and generates again until it answers; its answer (the content of
            its last message) is what the rewards and the other agents see, and its tool results are masked
            (`TurnResult.tool_masks`). None: no tools.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        team: AgentTeam,
        reward: RewardSet | None,
        generation_config: GenerationConfig,
        num_generations: int,
        joint_mode: str = "aligned",
        discount: float = 1.0,
        max_branches: int | None = None,
        early_stop_threshold: float | None = None,
        chat_template_kwargs: dict | None = None,
        seed: int | None = None,
        stop_token_ids: set[int] | None = None,
        score: ScoreFn | None = None,
        gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
        local_reward: LocalReward | None = None,
        tool_loop: ToolLoop | None = None,
    ) -> None:
        self.env = env
        self.team = team
        self.reward = reward
        self.generation_config = generation_config
        self.num_generations = num_generations
        self.joint_mode = joint_mode
        self.discount = discount
        self.max_branches = max_branches
        self.early_stop_threshold = early_stop_threshold
        self.chat_template_kwargs = chat_template_kwargs
        self.stop_token_ids = stop_token_ids
        self.score_fn = score if score is not None else (reward.score if reward is not None else None)
        self.gather = gather
        self.local_reward = local_reward
        self.tool_loop = tool_loop if tool_loop is not None and tool_loop.active else None
        # Branch choice draws from torch's global generator by default, so that it follows the trainer's seed and
        # is saved in (and restored from) a checkpoint's RNG state like sampling; `seed` gives the rollout a private
        # generator instead (e.g. for an evaluation that must not disturb training's random stream).
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.joint_indices = joint_action_indices(env.num_agents, num_generations, joint_mode)
        self.num_slots = getattr(team, "num_agents", env.num_agents)  # team members (policies)

    def slot(self, turn: int, agent_index: int) -> int:
        """The team member that plays agent `agent_index` at turn `turn` (1-based)."""
        if self.num_slots == self.env.num_agents:
            return agent_index
        return self.team.slot(turn, agent_index)

    # ------------------------------------------------------------------ sampling
    def run(self, rows: Sequence[Mapping[str, Any]], trainer_state: TrainerState | None = None,
            generation_config: GenerationConfig | None = None, score: bool = True) -> Rollout:
        """Play one episode tree per row; with `score`, score every turn and back up the returns (no advantages)."""
        n, G = self.env.num_agents, self.num_generations
        J = self.joint_indices.size(0)
        index = self.joint_indices.tolist()
        config = generation_config if generation_config is not None else self.generation_config
        extra = {"stop_token_ids": self.stop_token_ids} if self.stop_token_ids is not None else {}
        nodes = [Node(i, Transcript()) for i in range(len(rows))]
        turns: list[TurnResult] = []
        gen_time, gen_tokens, nonfinite = 0.0, 0, 0
        turn = 1
        lockstep = getattr(self.team, "lockstep", None)
        while lockstep(bool(nodes)) if lockstep is not None else nodes:
            if not nodes:  # other processes play this turn: generate as they do (sharded weights), discard it
                self._idle_turn(rows[0] if rows else None, turn, config, extra)
                # and the rounds of generation after their tool results (`lockstep` is set: a process without
                # nodes only gets here through it)
                if self.tool_loop is not None and lockstep is not None:
                    self.tool_loop.follow(lockstep, functools.partial(self._idle_turn, rows[0] if rows else None,
                                                                      turn, config, extra))
                turn += 1
                continue
            prompts = [[self.env.agent_prompt(rows[node.row_index], a, node.transcript)
                        for node in nodes for _ in range(G)] for a in range(n)]
            slots = [self.slot(turn, a) for a in range(n)]
            by_slot: list[Sequence[Prompt]] = [[] for _ in range(self.num_slots)]
            for a in range(n):
                by_slot[slots[a]] = prompts[a]
            start = time.perf_counter()
            tool_turn = None
            if self.tool_loop is not None:  # members with tools: prompts that describe them; calls run in between
                sample_rows = [rows[node.row_index] for node in nodes for _ in range(G)]
                by_slot = self.tool_loop.prepare(by_slot, [sample_rows] * self.num_slots, self.chat_template_kwargs)
            generated = self.team.generate(by_slot, config, self.chat_template_kwargs, **extra)
            if self.tool_loop is not None:
                tool_turn = self._tool_turn(generated, config, extra, rows[nodes[0].row_index], turn, lockstep)
                generated = tool_turn.generation
            gen_time += time.perf_counter() - start
            prompt_ids = [generated.prompt_ids[slots[a]] for a in range(n)]
            completion_ids = [generated.completion_ids[slots[a]] for a in range(n)]
            engine_logps = generated.sampling_logps
            texts = [self.team.tokenizers[slots[a]].batch_decode(completion_ids[a], skip_special_tokens=True)
                     for a in range(n)]
            tool_masks = None if tool_turn is None else [tool_turn.tool_masks[s] for s in slots]
            for a in range(n):
                mask = None if tool_masks is None else tool_masks[a]
                gen_tokens += sum(len(c) for c in completion_ids[a]) if mask is None else sum(map(sum, mask))
                if tool_turn is not None and tool_turn.answers[slots[a]] is not None:
                    texts[a] = tool_turn.answers[slots[a]]
            # joint action j of node k takes sample k*G + joint_indices[j, a] of agent a
            sample = [[k * G + index[j][a] for k in range(len(nodes)) for j in range(J)] for a in range(n)]
            joint_texts = [[texts[a][i] for i in sample[a]] for a in range(n)]
            # each joint action's transcript includes it (what the reward functions see, and the child's history)
            transcripts = [node.transcript.extend([joint_texts[a][k * J + j] for a in range(n)])
                           for k, node in enumerate(nodes) for j in range(J)]
            local = None  # with a LocalReward: (rewards (K*J, n), per function, non-finite count)
            if score and self.score_fn is not None:
                joint_prompts = [[prompts[a][i] for i in sample[a]] for a in range(n)]
                joint_rows = [rows[node.row_index] for node in nodes for _ in range(J)]
                # with tools, the rewards also read each agent's turn as messages (its calls and their results)
                tool_messages = None if tool_turn is None else joint_tool_messages(tool_turn, slots, sample)
                rewards_per_func, bad = self.score_fn(joint_prompts, joint_texts, joint_rows, transcripts, turn,
                                                      trainer_state, **tool_keywords(tool_messages))
                if self.reward is None:  # a `score` of its own still needs the RewardSet's weights
                    raise ValueError("Scoring the turns needs the `reward` (a RewardSet) to combine the scores.")
                rewards = self.reward.combine(rewards_per_func, bad)
                nonfinite += int(bad.sum())
                if self.local_reward is not None:
                    local = self.local_reward.score(joint_prompts, joint_texts, joint_rows, transcripts, turn,
                                                    trainer_state, tool_messages=tool_messages)
                    nonfinite += local[2]
            else:
                rewards_per_func = torch.full((len(nodes) * J, 0), float("nan"))
                rewards = torch.full((len(nodes) * J,), float("nan"))
            result = TurnResult(turn, nodes, prompts, prompt_ids, completion_ids, texts, self.joint_indices,
                                rewards_per_func, rewards.view(len(nodes), J), transcripts=transcripts,
                                sampling_logps=None if engine_logps is None else [engine_logps[s] for s in slots])
            if local is not None:
                result.local_rewards, result.local_rewards_per_func = local[0].view(len(nodes), J, n), local[1]
            if tool_turn is not None:
                result.tool_masks = tool_masks
                result.tool_messages = [tool_turn.messages[s] for s in slots]
                result.tool_stats = [tool_turn.stats[s] for s in slots]
            turns.append(result)
            nodes = self._expand(result, rows) if turn < self.env.num_turns else []
            turn += 1
        if score and self.score_fn is not None:
            self._backup(turns)
        return Rollout(turns, gen_time, gen_tokens, nonfinite)

    def _tool_turn(self, generated: Generation, config: GenerationConfig, extra: dict[str, Any],
                   row: Mapping[str, Any], turn: int, lockstep: Callable[[bool], bool] | None) -> ToolTurn:
        """The tool calls of one turn's first generation, and the generations after their results."""
        assert self.tool_loop is not None

        def generate(prompt_ids: list[list[list[int]]], step_config: GenerationConfig) -> Generation:
            return self.team.generate(prompt_ids, step_config, self.chat_template_kwargs, **extra)

        idle = functools.partial(self._idle_turn, row, turn, config, extra)
        return self.tool_loop.run(generate, generated, config, self.chat_template_kwargs, keep_going=lockstep,
                                  idle=idle)

    def _idle_turn(self, row: Mapping[str, Any] | None, turn: int, config: GenerationConfig,
                   extra: dict[str, Any]) -> None:
        """Generate what a process without episodes left must, while other processes play turn `turn`.

        With sharded weights (FSDP2, DeepSpeed ZeRO-3) every forward is a collective: every process must run the
        same generations. This one samples a turn that it then discards (the turn-1 prompts of `row`), with the random
        state restored afterwards, so that its own later samples are those it would have drawn without it.
        """
        if row is None:
            raise RuntimeError("A process with no rows cannot follow the others' turns: give every process rows.")
        by_slot: list[list[Prompt]] = [[] for _ in range(self.num_slots)]
        for a in range(self.env.num_agents):
            by_slot[self.slot(turn, a)] = [self.env.agent_prompt(row, a, Transcript())]
        devices = [self.team.device] if self.team.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            self.team.generate(by_slot, config, self.chat_template_kwargs, **extra)

    def _expand(self, result: TurnResult, rows: Sequence[Mapping[str, Any]]) -> list[Node]:
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
                transcript = result.transcripts[k * J + j]
                feedback = self.env.feedback(row, transcript)
                if feedback is not None:
                    transcript = node.transcript.extend(transcript[-1].responses, feedback)
                if self.env.is_done(row, transcript):
                    continue
                result.children[(k, j)] = len(children)
                children.append(Node(node.row_index, transcript, parent=(k, j)))
        return children

    # ------------------------------------------------------------------ credit assignment
    def _backup(self, turns: list[TurnResult]) -> None:
        """Returns from the leaves up: every turn's `returns`, `agent_returns` (`pooled_returns` with a `gather`),
        and with local rewards `local_returns`."""
        G = self.num_generations
        team = self._backed_up(turns, [t.rewards.unsqueeze(1) for t in turns])  # (K, 1, J) per turn
        for result, returns in zip(turns, team):
            result.returns = returns.squeeze(1)
            result.agent_returns = agent_returns_from_joint(result.returns, self.joint_indices, G)  # (K, n, G)
        if any(t.local_rewards is not None for t in turns):  # each agent's local reward, backed up as the team's
            local = self._backed_up(turns, [_required(t, "local_rewards", t.local_rewards).permute(0, 2, 1)
                                            for t in turns])  # (K, n, J) per turn
            for result, returns in zip(turns, local):
                result.local_returns = agent_local_returns_from_joint(returns, self.joint_indices, G)  # (K, n, G)
        if self.gather is not None:  # every process's returns, for batch statistics (one collective per rollout)
            pool_turn_returns(turns, self.gather)

    def _backed_up(self, turns: list[TurnResult], rewards: list[torch.Tensor]) -> list[torch.Tensor]:
        """The tree returns of per-turn rewards `(K, A, J)` (A reward channels: 1 for the team, n for local rewards).

        Per channel: R_t(j) = r_t(j) + gamma * mean over the child node's joint actions of R_{t+1}
        (`core.tree_returns`); a capped joint action (not continued) is bootstrapped from its continued siblings; an
        early-stopped node keeps its achieved reward for the turns it skips (`core.early_stop_returns`).
        """
        out: list[torch.Tensor] = [torch.empty(0)] * len(turns)
        next_values: torch.Tensor | None = None  # (K_{t+1}, A): each child node's mean return per channel
        for i in reversed(range(len(turns))):
            result, reward = turns[i], rewards[i]
            K, A, J = reward.shape
            if next_values is None:
                returns = tree_returns(reward, None, self.discount)
            else:
                child_value = torch.full((K, A, J, 1), float("nan"))
                for (k, j), c in result.children.items():
                    child_value[k, :, j, 0] = next_values[c]
                mask = torch.isfinite(child_value)
                for k, j in result.capped:  # bootstrap from the continued siblings
                    for a in range(A):
                        siblings = child_value[k, a, :, 0][mask[k, a, :, 0]]
                        if siblings.numel():
                            child_value[k, a, j, 0] = siblings.mean()
                            mask[k, a, j, 0] = True
                returns = tree_returns(reward, child_value, self.discount, mask)
            if result.stopped:  # an early stop keeps the achieved reward for the turns it skips
                stopped = sorted(result.stopped)
                returns[stopped] = early_stop_returns(reward[stopped], self.env.num_turns - result.turn, self.discount)
            next_values = returns.nanmean(dim=-1)
            out[i] = returns
        return out


def joint_tool_messages(tool_turn: ToolTurn, slots: Sequence[int],
                        sample: Sequence[Sequence[int]]) -> AgentToolMessages:
    """What the rewards read as `agent_tool_messages`: `[a][i]` agent a's turn in joint action i as chat messages
    (its tool calls, their results, its answer), None for an agent without tools; `sample[a][i]` is the sample of
    agent a in joint action i, `slots[a]` the member that played it."""
    out: AgentToolMessages = []
    for a, slot in enumerate(slots):
        messages = tool_turn.messages[slot]
        out.append(None if messages is None else [messages[i] for i in sample[a]])
    return out


def pool_turn_returns(turns: Sequence[TurnResult], gather: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Set every turn's `pooled_returns`: the team returns of that turn on every process.

    Each process sends one `(turn, return)` row per joint action of every turn it played, in one call of `gather`
    (so the call is the same collective on every process, whatever turns each played); a turn that only some
    processes reached pools the returns of those. Unscorable (NaN) returns are kept: the statistics leave them out.

    Args:
        turns: The turns of one rollout, with `returns` set.
        gather: Concatenates a `(N, 2)` tensor over the processes (see [`JointRollout`]).
    """
    rows = [torch.stack([torch.full_like(flat, float(t.turn)), flat], dim=1)
            for t in turns for flat in [_required(t, "returns", t.returns).reshape(-1).double()]]
    pooled = gather(torch.cat(rows) if rows else torch.zeros((0, 2), dtype=torch.float64))
    for t in turns:
        t.pooled_returns = pooled[pooled[:, 0] == t.turn, 1].to(_required(t, "returns", t.returns).dtype)


def advantage_context(result: TurnResult, turns: Sequence[TurnResult] = (), team_weight: float = 1.0,
                      ) -> AdvantageContext:
    """What an advantage estimator reads besides one turn's returns (`trl_marl.core.AdvantageContext`).

    Args:
        result: A turn whose `returns` and `agent_returns` are set.
        turns: Every turn of the rollout `result` belongs to (estimators that pool over turns read them, e.g.
            `"agent_norm"`); empty: `result` alone.
        team_weight: alpha, the team return's weight against the local one (`MAGRPOConfig.team_reward_weight`).

    Returns:
        The context: the turn's team returns over the batch (`pooled_returns`, every process's, when the engine has a
        `gather`; else the turn's own), each node's dataset row, every turn's `(rows, agent_returns)`, and the turn's
        `local_returns` (None without a local reward) with `team_weight`.
    """
    team = result.pooled_returns if result.pooled_returns is not None else _required(result, "returns", result.returns)
    tree = tuple((_node_rows(t), _required(t, "agent_returns", t.agent_returns)) for t in (turns or [result]))
    return AdvantageContext(team_returns=team, rows=_node_rows(result), tree=tree, local_returns=result.local_returns,
                            team_weight=team_weight)


def _required(result: TurnResult, name: str, value: torch.Tensor | None) -> torch.Tensor:
    """`value`, the field `name` of `result`, which the rollout sets when it backs the returns up."""
    if value is None:
        raise ValueError(f"Turn {result.turn} has no `{name}`: the rollout backs its returns up first.")
    return value


def _node_rows(result: TurnResult) -> torch.Tensor:
    return torch.tensor([node.row_index for node in result.nodes], dtype=torch.long)


def rollout_advantages(turns: Sequence[TurnResult], mode: str, team_weight: float = 1.0) -> list[torch.Tensor]:
    """Every turn's advantages from its returns: the estimator registered as `mode`, given the whole tree.

    Each turn's `(K, n, G)` `agent_returns` go to the estimator with [`advantage_context`] over every turn of
    `turns` (the tree estimators that pool over turns read, e.g. `"agent_norm"`), so one call credits the rollout.

    Args:
        turns: The turns of one scored rollout (`Rollout.turns`), returns backed up.
        mode: A registered group estimator's name (`MAGRPOConfig.advantage_mode`; `trl_marl.core.advantages`).
        team_weight: alpha of the local-reward estimators (see [`advantage_context`]).

    Returns:
        One `(K, n, G)` tensor per turn.

    Raises:
        ValueError: No group estimator is registered as `mode` (before any turn is estimated).
    """
    estimator = advantage_estimator(mode)
    return [estimator(_required(t, "agent_returns", t.agent_returns), advantage_context(t, turns, team_weight))
            for t in turns]


def assign_advantages(turns: Sequence[TurnResult], advantages: str | Sequence[torch.Tensor],
                      team_weight: float = 1.0) -> None:
    """Set every turn's `advantages`; a NaN advantage (an unscorable sample) becomes 0.

    Args:
        turns: The turns of one scored rollout (`Rollout.turns`).
        advantages: An estimator's name (`MAGRPOConfig.advantage_mode`: [`rollout_advantages`] of `turns`), or one
            `(K, n, G)` tensor per turn (e.g. what a trainer's `compute_advantages` returned).
        team_weight: alpha of the local-reward estimators, with a name (see [`advantage_context`]).

    Raises:
        ValueError: Not one tensor per turn, or a tensor whose shape is not its turn's `agent_returns`'.
    """
    values = rollout_advantages(turns, advantages, team_weight) if isinstance(advantages, str) else list(advantages)
    if len(values) != len(turns):
        raise ValueError(f"Got advantages for {len(values)} turns, but the rollout has {len(turns)}: give one "
                         "`(K, n, G)` tensor per turn.")
    for result, value in zip(turns, values):
        expected = _required(result, "agent_returns", result.agent_returns).shape
        if value.shape != expected:
            raise ValueError(f"Turn {result.turn}'s advantages have shape {tuple(value.shape)}, its returns "
                             f"{tuple(expected)}: give one advantage per sample, `(K, n, G)`.")
        result.advantages = value if torch.isfinite(value).all() else torch.nan_to_num(value, nan=0.0)


def reward_std_is_zero(rewards: torch.Tensor) -> float:
    """Fraction of nodes whose joint actions all got the same reward (no learning signal there)."""
    if rewards.numel() == 0:
        return 0.0
    spread = rewards.nan_to_num(0.0).amax(dim=1) - rewards.nan_to_num(0.0).amin(dim=1)
    return float((spread.abs() < 1e-8).float().mean().item())


def flat_group_fraction(turns: Sequence[TurnResult]) -> float:
    """Fraction of the groups (nodes, over every turn) whose joint actions all got the same return.

    A fact about the returns, not about the learning signal: a flat group gives advantage 0 under the group-relative
    estimators (`"mean"`, `"std"`, ...), not under `"raw"` (A = R) or `"agent_norm"` (an agent's statistics over
    the episode); ask [`no_signal_fraction`] for that. Unscorable (NaN) returns are left out; a node with fewer than
    two scorable joint actions is flat. With local rewards a node is flat only when every agent's local returns are
    flat too.
    """
    flat, total = 0, 0
    for t in turns:
        returns = t.returns if t.returns is not None else t.rewards
        for k, node in enumerate(returns):
            total += 1
            groups = [node] if t.local_returns is None else [node, *t.local_returns[k]]
            flat += int(all(_is_flat(group) for group in groups))
    return flat / total if total else 0.0


def no_signal_fraction(turns: Sequence[TurnResult], mode: str | None = None, team_weight: float = 1.0) -> float:
    """Fraction of the nodes (over every turn) where every sample's advantage is 0: no gradient comes from them.

    Args:
        turns: The turns of one rollout, returns set (and `advantages`, without `mode`).
        mode: The registered estimator the advantages came from: it is asked on every turn (in float64:
            `trl_marl.core.no_signal_nodes`). None (advantages of a custom `compute_advantages`): the turns'
            `advantages` are read, a node silent when each is within 1e-8 of 0.
        team_weight: alpha of the local-reward estimators (see [`advantage_context`]).
    """
    silent: list[torch.Tensor] = []
    for t in turns:
        if mode is not None:
            silent.append(no_signal_nodes(mode, _required(t, "agent_returns", t.agent_returns),
                                          advantage_context(t, turns, team_weight)))
        elif t.advantages is None:
            raise ValueError(f"Turn {t.turn} has no advantages: assign them first (`assign_advantages`).")
        else:
            silent.append((t.advantages.reshape(len(t.nodes), -1).abs() <= 1e-8).all(dim=-1).cpu())
    nodes = torch.cat(silent) if silent else torch.zeros(0, dtype=torch.bool)
    return float(nodes.double().mean()) if nodes.numel() else 0.0


def _is_flat(values: torch.Tensor) -> bool:
    finite = values[torch.isfinite(values)]
    return finite.numel() < 2 or float(finite.max() - finite.min()) < 1e-8


def finite_mean(values: torch.Tensor) -> float:
    """Mean over the finite entries (NaN when there are none)."""
    finite = values[torch.isfinite(values)]
    return float(finite.mean().item()) if finite.numel() else math.nan
