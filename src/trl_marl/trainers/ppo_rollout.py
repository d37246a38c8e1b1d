"""PPO's samples: the episodes the rollout engine played, tokenized per policy slot ([`AgentRollout`])."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core import whiten, whiten_jointly
from ..rollout import Rollout
from ..team import pad_left
from .ppo_value import truncate_after_stop

__all__ = ["AgentRollout", "slot_rollouts", "whiten_group"]


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


def slot_rollouts(played: Rollout, slot_of: Any, num_slots: int, tokenizers: list[Any], response_length: int,
                  stop_token_id: int | None, train_turns_from: int, value_input: str,
                  device: torch.device) -> list[AgentRollout | None]:
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
            if value_input == "answer":
                s.setdefault("value_prompt_ids", []).extend(first_prompt_ids[a][r] for r in rows)
            s.setdefault("completion_ids", []).extend(t.completion_ids[a])
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
        post = truncate_after_stop(responses, stop_token_id, pad)
        query_responses = torch.cat([queries, responses], 1).to(device)
        value_qr, value_context = query_responses, queries.size(1)
        if value_input == "answer":
            value_queries, _ = pad_left(s["value_prompt_ids"], pad)
            value_qr, value_context = torch.cat([value_queries, responses], 1).to(device), value_queries.size(1)
        rollouts.append(AgentRollout(
            query_responses=query_responses, context_length=queries.size(1), responses=responses.to(device),
            postprocessed=post.to(device), turns=torch.tensor(s["turns"]), texts=s["texts"], prompts=s["prompts"],
            agents=torch.tensor(s["agents"]), rows=torch.tensor(s["rows"]), value_query_responses=value_qr,
            value_context_length=value_context,
        ))
    return rollouts


def whiten_group(values: list[torch.Tensor], masks: list[torch.Tensor], shift_mean: bool) -> list[torch.Tensor]:
    """PPO whitening of one group: `whiten` for one slot (TRL's numerics), `whiten_jointly` for several."""
    if len(values) == 1:
        return [whiten(values[0], masks[0], shift_mean=shift_mean)]
    return whiten_jointly(values, masks, shift_mean=shift_mean)
