"""PPO's samples: the episodes the rollout engine played, tokenized per policy slot ([`AgentRollout`])."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ...core import engine_importance_sampling_ratio
from ...core.ppo import INVALID_LOGPROB, kl_penalty, response_masks, shaped_token_rewards
from ...reward_contract import RewardFunctionError, RewardSet, unscorable_message
from ...reward_contract.sets import tool_keywords
from ...rollout import Rollout
from ...team import AgentTeam, pad_left
from ..engine_correction import corrects_engine_mismatch, padded_logps
from .config import logit_temperature
from .value import first_true_index, in_last_message, response_values, sequence_scores, truncate_after_stop

if TYPE_CHECKING:
    from .config import MultiAgentPPOConfig

__all__ = [
    "AgentRollout",
    "filled",
    "forward_targets",
    "joint_value_prompt",
    "micro_batch_indices",
    "micro_batches",
    "next_turn_values",
    "put_tool_steps_back",
    "score_with_reward_funcs",
    "score_with_reward_model",
    "skip_tool_steps",
    "slot_rollouts",
]


@dataclass
class AgentRollout:
    """The PPO samples of one policy slot in an update (its responses, rows in turn-major order)."""

    query_responses: torch.Tensor  # (N, C + L)
    context_length: int
    responses: torch.Tensor  # (N, L) raw sampled tokens
    postprocessed: torch.Tensor  # (N, L) cut after the stop token
    turns: torch.Tensor  # (N,) 1-based turn of each sample
    texts: list[str]
    prompts: list[Any] | None = None  # the prompt each response answers (what reward functions get)
    agents: torch.Tensor | None = None  # (N,) agent of each sample
    rows: torch.Tensor | None = None  # (N,) episode (row of the batch) of each sample
    value_query_responses: torch.Tensor | None = None  # what the value model reads (see `value_input`)
    value_context_length: int = 0
    logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    values: torch.Tensor | None = None
    scores: torch.Tensor | None = None  # (N,) 0 where unscorable
    scorable: torch.Tensor | None = None  # (N,) bool: False where every reward function skipped (or NaN/inf)
    sequence_lengths: torch.Tensor | None = None
    policy_mask: torch.Tensor | None = None
    value_mask: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    non_score_rewards: torch.Tensor | None = None
    # the generation engine's log-probs of `responses` (vLLM), and the truncated importance weight of its mismatch
    # with `logprobs` that multiplies the policy loss (`engine_correction`); None without them
    sampling_logprobs: torch.Tensor | None = None
    importance_sampling_ratio: torch.Tensor | None = None
    # with tools: (N, L) 0 on the tokens the tool loop wrote into the response (tool results and their formatting),
    # 1 elsewhere (padding included); out of both losses and skipped by GAE. None: no sample of the slot used tools
    tool_mask: torch.Tensor | None = None


def filled(tensor: torch.Tensor | None) -> torch.Tensor:
    """A tensor field of an [`AgentRollout`] that a step of the update filled before it is read: `agents`, `rows` and
    `value_query_responses` ([`slot_rollouts`]), the scores (scoring), the log-probs, values, masks, KL and per-token
    rewards ([`forward_targets`]), the advantages and returns (`compute_advantages`)."""
    if tensor is None:
        raise ValueError("An AgentRollout field was read before the step of the update that fills it.")
    return tensor


def joint_value_prompt(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], agent: int,
                       critic_type: str) -> list[int]:
    """What the centralized critic (MAAC) reads before agent `agent`'s response at one turn of one episode.

    `V`: the joint history, every agent's prompt in agent order, `p_0 + p_1 + ... + p_{n-1}`. `Q`: the joint
    history, then the other agents' responses in agent order, `p_0 + ... + p_{n-1} + c_j (j != agent)`; with the
    agent's own response after it, the critic's value at the response's last token has read the joint action.

    Why the agent's own response is left out of `Q`'s prompt: the value before the response's first token is the
    baseline of the agent's action (turn-level credit takes A = R - V_0). Here V_0 = Q(s, a_-i), the return
    expected from the state and the others' actions, averaged over the agent's own response: it does not depend on
    the action it judges (the agents of a turn answer independently), so R - Q(s, a_-i) is an unbiased advantage of
    the agent's response (COMA's counterfactual baseline, learned directly). CoMLRL's MAAC `critic_type="q"` reads the
    agent's own response too and takes r - Q(s, a): a baseline that depends on the action itself, so that under an
    exact critic every action's expected advantage is 0 and the policy gradient is biased (to 0 in expectation).

    Example:

    ```python
    >>> joint_value_prompt([[1, 2], [3]], [[7], [8, 9]], 0, "V")
    [1, 2, 3]
    >>> joint_value_prompt([[1, 2], [3]], [[7], [8, 9]], 0, "Q")
    [1, 2, 3, 8, 9]
    ```
    """
    ids = [int(t) for p in prompt_ids for t in p]
    if critic_type == "Q":
        ids += [int(t) for j, c in enumerate(completion_ids) if j != agent for t in c]
    return ids


def slot_rollouts(played: Rollout, slot_of: Any, num_slots: int, tokenizers: list[Any], response_length: int,
                  stop_token_id: int | None, train_turns_from: int, value_input: str,
                  device: torch.device, critic: str = "per_agent",
                  critic_type: str | None = None) -> list[AgentRollout | None]:
    """Tokenize the responses of turns >= `train_turns_from` of an episode rollout (one sample per agent) per slot.

    Args:
        played: What the engine played (`num_generations=1`: node k of a turn is row k of the batch).
        slot_of: `slot_of(turn, agent)`, the team member that played it.
        num_slots: The team's members.
        tokenizers: One per member.
        response_length: The widest response window (TRL: as wide as the longest response, at most this).
        stop_token_id: Tokens after it are replaced by padding in `postprocessed`.
        train_turns_from: The first trained turn.
        value_input: `"history"` (the value model reads the agent's prompt) or `"answer"` (the turn-1 prompt).
        device: Where the tensors go.
        critic: `"per_agent"` (IAC: the value model reads what `value_input` says) or `"centralized"` (MAAC: it
            reads [`joint_value_prompt`] of `critic_type`).
        critic_type: `"V"` or `"Q"`, with the centralized critic.

    Returns:
        One [`AgentRollout`] per slot (`None` for a slot without trained samples).
    """
    store: list[dict[str, list[Any]]] = [{} for _ in range(num_slots)]
    first_prompt_ids = played.turns[0].prompt_ids  # [agent][row]
    for t in played.turns:
        if t.turn < train_turns_from:
            continue
        rows = [node.row_index for node in t.nodes]
        for a in range(len(t.prompt_ids)):
            s = store[slot_of(t.turn, a)]
            s.setdefault("prompt_ids", []).extend(t.prompt_ids[a])
            if critic == "centralized":
                n = len(t.prompt_ids)
                s.setdefault("value_prompt_ids", []).extend(
                    joint_value_prompt([t.prompt_ids[b][k] for b in range(n)],
                                       [t.completion_ids[b][k] for b in range(n)], a, critic_type or "V")
                    for k in range(len(rows)))
            elif value_input == "answer":
                s.setdefault("value_prompt_ids", []).extend(first_prompt_ids[a][r] for r in rows)
            s.setdefault("completion_ids", []).extend(t.completion_ids[a])
            tool_masks = t.tool_masks[a] if t.tool_masks is not None else None
            s.setdefault("tool_masks", []).extend(tool_masks if tool_masks is not None else [None] * len(rows))
            if t.sampling_logps is not None:
                s.setdefault("sampling_logps", []).extend(t.sampling_logps[a])
            s.setdefault("texts", []).extend(t.completions[a])
            s.setdefault("prompts", []).extend(t.prompts[a])
            s.setdefault("turns", []).extend([t.turn] * len(rows))
            s.setdefault("agents", []).extend([a] * len(rows))
            s.setdefault("rows", []).extend(rows)
    rollouts: list[AgentRollout | None] = []
    for slot, s in enumerate(store):
        if not s.get("completion_ids"):
            rollouts.append(None)
            continue
        pad = tokenizers[slot].pad_token_id
        queries, _ = pad_left(s["prompt_ids"], pad)
        # as TRL: the response window is as wide as the longest response generated (at most response_length)
        width = max(1, min(response_length, max(len(ids) for ids in s["completion_ids"])))
        responses = torch.full((len(queries), width), pad, dtype=torch.long)
        for i, ids in enumerate(s["completion_ids"]):
            ids = ids[:width]
            responses[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        tool_mask = None
        if any(m is not None and 0 in m[:width] for m in s["tool_masks"]):
            tool_mask = torch.ones_like(responses)
            for i, m in enumerate(s["tool_masks"]):
                if m is not None:
                    tool_mask[i, : len(m[:width])] = torch.tensor(m[:width], dtype=torch.long)
        post = truncate_after_stop(responses, stop_token_id, pad, tool_mask)
        query_responses = torch.cat([queries, responses], 1).to(device)
        value_qr, value_context = query_responses, queries.size(1)
        if "value_prompt_ids" in s:
            value_queries, _ = pad_left(s["value_prompt_ids"], pad)
            value_qr, value_context = torch.cat([value_queries, responses], 1).to(device), value_queries.size(1)
        rollout = AgentRollout(
            query_responses=query_responses, context_length=queries.size(1), responses=responses.to(device),
            postprocessed=post.to(device), turns=torch.tensor(s["turns"]), texts=s["texts"], prompts=s["prompts"],
            agents=torch.tensor(s["agents"]), rows=torch.tensor(s["rows"]), value_query_responses=value_qr,
            value_context_length=value_context, tool_mask=None if tool_mask is None else tool_mask.to(device),
        )
        rollouts.append(rollout)
        if len(s.get("sampling_logps", ())) == len(responses):  # every turn's engine log-probs, in the same order
            rollout.sampling_logprobs = padded_logps([row[:width] for row in s["sampling_logps"]], responses).to(
                device)
    return rollouts


def skip_tool_steps(x: torch.Tensor, tool_mask: torch.Tensor, fill: Any = 0) -> torch.Tensor:
    """The steps of each row without those the tool loop wrote, moved left in order, then `fill`.

    GAE runs over the agent's own tokens: a tool result is the environment's answer between two of its actions,
    not a step of the policy, so the step after a tool call is the first token the agent writes after the result
    (whose value has read the result). [`put_tool_steps_back`] undoes it, with `fill` on the written steps.

    Example:

    ```python
    >>> skip_tool_steps(torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[1, 0, 0, 1, 1]]))
    tensor([[1, 4, 5, 0, 0]])
    ```
    """
    order = torch.argsort((tool_mask == 0).to(torch.int8), dim=1, stable=True)  # kept steps first, in order
    kept = (tool_mask != 0).sum(dim=1, keepdim=True)
    steps = torch.arange(x.size(1), device=x.device).unsqueeze(0)
    return torch.where(steps < kept, x.gather(1, order), torch.full_like(x, fill))


def put_tool_steps_back(y: torch.Tensor, tool_mask: torch.Tensor, fill: Any = 0) -> torch.Tensor:
    """Each row of [`skip_tool_steps`]'s output at its steps again, `fill` on the steps the tool loop wrote.

    Example:

    ```python
    >>> put_tool_steps_back(torch.tensor([[1, 4, 5, 0, 0]]), torch.tensor([[1, 0, 0, 1, 1]]))
    tensor([[1, 0, 0, 4, 5]])
    ```
    """
    order = torch.argsort((tool_mask == 0).to(torch.int8), dim=1, stable=True)
    out = torch.empty_like(y).scatter_(1, order, y)
    return torch.where(tool_mask != 0, out, torch.full_like(out, fill))


def score_with_reward_model(ro: AgentRollout, reward_model: nn.Module, pad: int, step: int) -> None:
    """TRL's PPO score: the reward model's output at the last token of query + (stop-truncated) response."""
    qr = torch.cat([ro.query_responses[:, : ro.context_length], ro.postprocessed], 1)
    chunks = [sequence_scores(reward_model, qr[i : i + step], pad, ro.context_length)[1]
              for i in range(0, qr.size(0), step)]
    ro.scores = torch.cat(chunks).float()
    ro.scorable = torch.ones_like(ro.scores, dtype=torch.bool)


@torch.no_grad()
def forward_targets(ro: AgentRollout, slot: int, team: AgentTeam, value_model: nn.Module,
                    args: MultiAgentPPOConfig) -> None:
    """Fill a slot's old and reference log-probs, values, masks, KL and per-token rewards (in `ro.returns`).

    The per-token reward is `-kl_coef * KL` at every step plus the score at the last one (`shaped_token_rewards`);
    an unscorable response leaves both losses (its masks are cleared).
    """
    step = args.local_rollout_forward_batch_size
    pad = team.tokenizers[slot].pad_token_id
    C, Cv = ro.context_length, ro.value_context_length
    value_query_responses, scores, scorable = filled(ro.value_query_responses), filled(ro.scores), filled(ro.scorable)
    logps, ref_logps, values = [], [], []
    starts = list(range(0, ro.query_responses.size(0), step))
    # sharded weights (`team.lockstep`): every process runs as many chunks as the busiest (extra ones are discarded)
    chunk = 0
    while team.lockstep(chunk < len(starts)) if team.lockstep is not None else chunk < len(starts):
        i = starts[chunk] if chunk < len(starts) else 0
        qr = ro.query_responses[i : i + step]
        resp = ro.responses[i : i + step]
        divisor = logit_temperature(args.temperature)
        logps_now = team.response_logprobs(slot, qr, C, pad, resp, divisor)[0]
        ref_logps_now = team.response_logprobs(slot, qr, C, pad, resp, divisor, reference=True)[0]
        values_now = response_values(value_model, value_query_responses[i : i + step], pad, Cv)
        if chunk < len(starts):
            logps.append(logps_now)
            ref_logps.append(ref_logps_now)
            values.append(values_now)
        chunk += 1
    logprobs, ref_logprobs, value = torch.cat(logps), torch.cat(ref_logps), torch.cat(values).float()
    # the agent's last message ended (with tools, a message with calls ends with an EOS too)
    contains_eos = in_last_message(ro.postprocessed == team.tokenizers[slot].eos_token_id, ro.tool_mask).any(dim=-1)
    if args.missing_eos_penalty is not None:
        ro.scores = scores = scores.clone()
        scores[~contains_eos] -= args.missing_eos_penalty
    ro.sequence_lengths = first_true_index(ro.postprocessed == pad) - 1
    policy_mask, value_mask = response_masks(ro.sequence_lengths, ro.responses.size(1))
    if not bool(scorable.all()):  # an unscorable response teaches nothing: out of both losses
        keep = scorable.to(policy_mask.device).unsqueeze(1)
        policy_mask, value_mask = policy_mask & keep, value_mask & keep
    if ro.tool_mask is not None:  # tool results are not the policy's actions: out of both losses (and of the KL)
        generated = ro.tool_mask.to(policy_mask.device).bool()
        policy_mask, value_mask = policy_mask & generated, value_mask & generated
    logprobs = torch.masked_fill(logprobs, ~policy_mask, INVALID_LOGPROB)
    ref_logprobs = torch.masked_fill(ref_logprobs, ~policy_mask, INVALID_LOGPROB)
    value = torch.masked_fill(value, ~value_mask, 0)
    if ro.sampling_logprobs is not None and corrects_engine_mismatch(args):  # pi_old / pi_engine, bounded
        ro.importance_sampling_ratio = engine_importance_sampling_ratio(
            logprobs.float(), ro.sampling_logprobs, policy_mask, args.vllm_importance_sampling_mode,
            args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max)
    kl = kl_penalty(logprobs, ref_logprobs, args.kl_estimator)
    rewards, non_score = shaped_token_rewards(scores, kl, args.kl_coef, ro.sequence_lengths)
    ro.logprobs, ro.ref_logprobs, ro.values = logprobs, ref_logprobs, value
    ro.policy_mask, ro.value_mask, ro.kl, ro.non_score_rewards = policy_mask, value_mask, kl, non_score
    ro.returns = rewards  # per-token rewards until `compute_advantages` turns them into returns


def next_turn_values(rollouts: list[AgentRollout | None]) -> list[torch.Tensor | None]:
    """Per slot, `(N,)` V(s_{k+1}) of each sample: the value before the first response token of the same agent's
    sample at the next turn of the same episode, whichever slot played it (0 when the episode ended)."""
    where: dict[tuple[int, int, int], tuple[AgentRollout, int]] = {}
    for ro in rollouts:
        if ro is not None:
            for i, key in enumerate(zip(ro.turns.tolist(), filled(ro.agents).tolist(), filled(ro.rows).tolist())):
                where[key] = (ro, i)
    out: list[torch.Tensor | None] = []
    for ro in rollouts:
        if ro is None:
            out.append(None)
            continue
        own = filled(ro.values)
        values = torch.zeros(own.size(0), dtype=own.dtype, device=own.device)
        for i, (t, a, r) in enumerate(zip(ro.turns.tolist(), filled(ro.agents).tolist(), filled(ro.rows).tolist())):
            if (t + 1, a, r) in where:
                following, j = where[(t + 1, a, r)]
                values[i] = filled(following.values)[j, 0].to(values.device)
        out.append(values)
    return out


def score_with_reward_funcs(rollouts: list[AgentRollout | None], played: Rollout, rows: list[dict[str, Any]],
                            compute_rewards: Any, rewards: RewardSet, slot_of: Any, train_turns_from: int) -> int:
    """Score every trained (turn, agent) response after the episode (the whole transcript is known, as MAPoRL's
    influence-aware reward needs) with `compute_rewards(prompts, completions, rows, transcripts, turn)` (and
    `tool_messages=` in a turn with tools).

    Fills `scores` (0 where unscorable) and `scorable` of each slot's samples.

    Returns:
        How many scores were NaN or infinite (to be counted against `max_nonfinite`).

    Raises:
        RewardFunctionError: when no response of the whole update got a score.
    """
    transcripts = played.episode_transcripts(len(rows))
    for ro in rollouts:
        if ro is not None:
            ro.scores = torch.zeros(len(ro.texts), device=ro.responses.device)
            ro.scorable = torch.zeros(len(ro.texts), dtype=torch.bool, device=ro.responses.device)
    scored_any, nonfinite = False, 0
    for t in played.turns:
        if t.turn < train_turns_from:
            continue
        episode_rows = [rows[node.row_index] for node in t.nodes]
        episode_transcripts = [transcripts[node.row_index] for node in t.nodes]
        # with tools, the rewards also read each response's calls and results (one sample per agent and episode)
        per_func, bad = compute_rewards(t.prompts, t.completions, episode_rows, episode_transcripts, t.turn,
                                        **tool_keywords(t.tool_messages))
        total = rewards.combine(per_func, bad)  # (B, A), NaN where unscorable
        nonfinite += int(bad.sum())
        scored_any = scored_any or bool((~torch.isnan(per_func)).any())
        for a in range(total.size(1)):
            ro = rollouts[slot_of(t.turn, a)]
            where = ((ro.turns == t.turn) & (ro.agents == a)).nonzero().squeeze(-1).to(ro.scores.device)
            values = total[:, a].to(ro.scores.device)
            ro.scorable[where] = ~torch.isnan(values)
            ro.scores[where] = values.nan_to_num(0.0)
    if not scored_any and not nonfinite:
        count = sum(len(ro.texts) for ro in rollouts if ro is not None)
        raise RewardFunctionError(unscorable_message(
            rewards.names, f"all {count} responses of this update",
            "an update in which no response is scored cannot learn anything."))
    return nonfinite


SlotBatch = tuple[torch.Tensor, int, torch.Tensor, torch.Tensor, int]
"""A policy slot's micro-batch: `(query_responses, context, responses, value_query_responses, value_context)`."""


def micro_batches(rollouts: Sequence[AgentRollout | None], indices: dict[int, torch.Tensor]) -> list[SlotBatch | None]:
    """Each slot's `(query_responses, context, responses, value_query_responses, value_context)` rows of the
    micro-batch `indices[slot]` (the input of `PolicyValueTeam.forward`); `None` for a slot without samples in it."""
    return [
        None
        if ro is None or slot not in indices
        else (
            ro.query_responses[indices[slot]],
            ro.context_length,
            ro.responses[indices[slot]],
            filled(ro.value_query_responses)[indices[slot]],
            ro.value_context_length,
        )
        for slot, ro in enumerate(rollouts)
    ]


def micro_batch_indices(sizes: dict[int, int], num_mini_batches: int, num_micro: int,
                        micro_share: float = 1.0) -> Iterator[tuple[int, int, dict[int, torch.Tensor]]]:
    """One PPO epoch's micro-batches: `(mini-batch, micro-batch, {slot: sample indices})`, in TRL 1.12's order.

    When every trained slot has the same number of samples (every episode lasted every turn), one permutation
    (`np.random.permutation`, as TRL) orders all of them alike. When episodes ended early (`env.is_done`), slots of
    later turns have fewer samples: each slot is then shuffled and split on its own into the same number of
    mini- and micro-batches (a micro-batch without samples of a slot skips that slot).

    A micro-batch holds `micro_share` of a mini-batch (`per_device_train_batch_size / local_mini_batch_size`,
    rounded up); the last of the `num_micro` micro-batches takes what is left (TRL 1.12 slices a mini-batch into
    `per_device_train_batch_size` rows the same way).
    """
    if len(set(sizes.values())) <= 1:
        order = np.random.permutation(next(iter(sizes.values()), 0))
        orders = dict.fromkeys(sizes, order)
    else:
        orders = {slot: np.random.permutation(size) for slot, size in sizes.items()}
    for mb in range(num_mini_batches):
        for k in range(num_micro):
            batch: dict[int, torch.Tensor] = {}
            for slot, order in orders.items():
                mini = math.ceil(len(order) / num_mini_batches)
                micro = min(mini, max(1, math.ceil(mini * micro_share - 1e-9)))
                end = (k + 1) * micro if k < num_micro - 1 else None
                idx = order[mb * mini : (mb + 1) * mini][k * micro : end]
                if len(idx):
                    batch[slot] = torch.as_tensor(idx)
            if batch:
                yield mb, k, batch
