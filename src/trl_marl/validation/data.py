"""Data checks shared by every trl-marl trainer: the environment, the dataset's prompts and their lengths.

Each check raises (or warns) before the first step, naming the row, the field and the fix; nothing here is specific
to one algorithm. The configs' own checks are in [`~trl_marl.validation.config`]; the reward contract is in
`trl_marl.reward_contract`.

- [`check_env_protocol`]: an environment implements `agent_prompt` (the method the trainers call).
- [`check_dataset_prompts`]: the environment turns the first rows of a dataset into one valid prompt per agent.
- [`check_prompt_lengths`]: every row's prompt + completion fit in each agent's context window.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ..envs.base import MultiAgentEnv, Prompt, Transcript, prompt_problem

ROWS_CHECKED = 64
"""How many leading rows of a dataset are turned into prompts (and measured) when a trainer is built."""

PROMPT_LENGTH_CHECKS = ("warn", "error", "ignore")
"""The choices of the configs' `prompt_length_check` field."""

CONTEXT_OVERRUN_LIMIT = 4
"""A turn-1 prompt longer than this many context windows (and than [`MIN_OVERRUN_TOKENS`]) cannot fit: refused unless
`prompt_length_check='ignore'`."""

MIN_OVERRUN_TOKENS = 4096
"""The refusal bound never falls below this many tokens: a rotary model with a tiny window (the toy models: 128) runs
prompts of a few thousand tokens (degraded, as the user may mean), which take little memory; the bound is there for
prompts whose attention alone cannot fit (a 1 MB prompt)."""


def overrun_limit(context_window: int) -> int:
    """The prompt length (tokens) past which a turn-1 prompt cannot fit a model with this context window."""
    return max(CONTEXT_OVERRUN_LIMIT * context_window, MIN_OVERRUN_TOKENS)

ROWS_PER_CHUNK = 1024
"""[`check_prompt_lengths`] builds and measures the prompts of this many rows at a time."""

SPECIAL_TOKENS_SLACK = 16
"""Tokens allowed for the special tokens a tokenizer adds to a text (or a chat template adds per message) in the
bound of [`check_prompt_lengths`]."""


class ContextLengthWarning(UserWarning):
    """A prompt plus the completion length exceeds the model's context window (`prompt_length_check='warn'`)."""


def check_env_protocol(env: MultiAgentEnv) -> None:
    """Refuse an environment that overrides `prompts()`: the trainers call `agent_prompt` for each agent.

    `MultiAgentEnv.prompts` is a convenience helper built on `agent_prompt`; rollouts build each agent's prompt
    separately (they batch and branch per agent), so an override of `prompts` would be silently ignored.
    """
    if type(env).prompts is not MultiAgentEnv.prompts:
        raise TypeError(
            f"{type(env).__name__} overrides `prompts()`, which the trainers never call: they build each agent's "
            "prompt with `agent_prompt(row, agent_index, transcript)`. Override `agent_prompt` instead (and drop "
            "the `prompts` override, or make it call `agent_prompt`)."
        )


def check_dataset_prompts(env: MultiAgentEnv, dataset: Any, where: str, rows: int = ROWS_CHECKED,
                          start: int = 0) -> tuple[list[int], list[list[Prompt]]]:
    """Build the turn-1 prompt of every agent for rows `start` to `rows - 1` of `dataset`, checking each one.

    Each row is first checked by the environment (`env.check_row_values`, e.g. the types of `PromptEnv`'s
    columns), then `env.agent_prompt(row, agent_index, Transcript())` must return a string, chat messages or token
    ids.

    Args:
        env: The environment.
        dataset: The dataset (a `datasets.Dataset` or a sequence of dicts).
        where: Its name in messages, e.g. `"train_dataset"`.
        rows: The row after the last one checked (default: the first [`ROWS_CHECKED`] rows).
        start: The first row checked.

    Returns:
        `(row_indices, prompts)` with `prompts[agent][i]` the prompt of agent `agent` for row `row_indices[i]`.

    Raises:
        TypeError: a column or a prompt has the wrong type.
        ValueError: a value is wrong (e.g. the wrong number of `agent_prompts`), or `agent_prompt` raised.
    """
    check_env_protocol(env)
    name = type(env).__name__
    indices = list(range(start, min(len(dataset), rows)))
    prompts: list[list[Prompt]] = [[] for _ in range(env.num_agents)]
    for i in indices:
        row = dataset[i]
        env.check_row_values(row, where, i)
        for a in range(env.num_agents):
            try:
                prompt = env.agent_prompt(row, a, Transcript())
            except Exception as exc:  # noqa: BLE001 - re-raised with the row, the agent and the environment
                raise ValueError(
                    f"{name}.agent_prompt(row {i} of `{where}`, agent_index={a}, empty transcript) raised "
                    f"{type(exc).__name__}: {exc}. Fix that row (or the environment) before training."
                ) from exc
            problem = prompt_problem(prompt)
            if problem is not None:
                raise TypeError(
                    f"{name}.agent_prompt(row {i} of `{where}`, agent_index={a}) returned {problem}. It must return "
                    "ONE agent's prompt: a string, a list of chat messages [{'role': ..., 'content': ...}], or a list "
                    "of token ids (one call per agent: the trainers call it for every agent_index)."
                )
            prompts[a].append(prompt)
    return indices, prompts


def context_window(config: Any) -> int | None:
    """The longest sequence a model's config allows (`max_position_embeddings` or an alias), if it says."""
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_prompt_lengths(team: Any, env: MultiAgentEnv, dataset: Any, where: str, completion_length: int, field: str,
                         slots: Sequence[int] | None = None, chat_template_kwargs: dict | None = None,
                         on_long: str = "warn", member_template_kwargs: Sequence[dict | None] | None = None) -> None:
    """Check the turn-1 prompt of every agent for *every* row of a dataset against each agent's context window.

    Each row is measured once, before the first step, in chunks of [`ROWS_PER_CHUNK`] rows (so a large dataset is
    never held as prompts at once): first a bound that needs no tokenizer (the prompt's UTF-8 bytes, plus the chat
    template's own tokens for chat prompts; no tokenizer makes more tokens than bytes), and only where that bound
    does not show that the prompt fits, the prompt is tokenized as generation will tokenize it.

    - A prompt longer than [`overrun_limit`] (4 context windows, and at least 4,096 tokens) cannot fit: a
      `ValueError` naming the row, the agent and the row's longest field (unless `on_long="ignore"`). No model uses
      that much context (learned positions end at the window, rotary models degrade past it) and its attention alone
      may not fit in memory (a 1 MB prompt asks for a 10^12-byte attention mask).
    - A prompt that leaves no room for `completion_length` tokens: a model with learned absolute positions fails
      on it; a rotary one (Qwen, Llama) runs past its context with degraded output. Since a user may mean that (e.g.
      a toy model), `on_long` (the configs' `prompt_length_check`) chooses between one warning naming the first
      such row and their count (the default), an error, and silence.

    Args:
        team: The [`~trl_marl.AgentTeam`].
        env: The environment that turns a row into each agent's prompt.
        dataset: The dataset (a `datasets.Dataset` or a sequence of dicts).
        where: The dataset's name in messages.
        completion_length: How many tokens each agent may generate.
        field: The config field holding `completion_length`, e.g. `"MAGRPOConfig.max_completion_length"`.
        slots: The team member that plays each agent at turn 1 (default: agent `a` is member `a`).
        chat_template_kwargs: Passed to the chat template, as in generation.
        on_long: `"error"` (raise), `"warn"` (one [`ContextLengthWarning`]) or `"ignore"` (no check at all).
        member_template_kwargs: Per team member, the chat template arguments its first generation uses instead of
            `chat_template_kwargs` (None: those): e.g. a member with tools, whose prompt carries their schemas
            (`ToolLoop.template_kwargs`).

    Raises:
        ValueError: a prompt that cannot fit, or with `on_long="error"` one that leaves no room for the completion,
            naming the row, the agent, the lengths and the fixes; or `env.agent_prompt` raised on a row.
        TypeError: `env.agent_prompt` returned something that is not a prompt (see [`check_dataset_prompts`]).
    """
    if on_long == "ignore":
        return
    limits = {}
    for a in range(env.num_agents):
        slot = slots[a] if slots is not None else a
        limit = context_window(team.base_model_of(slot).config)
        own = member_template_kwargs[slot] if member_template_kwargs is not None else None
        if limit is not None:
            limits[a] = (team.tokenizers[slot], limit, own if own is not None else chat_template_kwargs)
    if not limits:
        return
    config_name = field.split(".")[0]
    first_long: str | None = None
    long_rows: set[int] = set()
    overheads: dict[int, dict[Any, int]] = {a: {} for a in limits}  # per agent: its own template and arguments
    for start in range(0, len(dataset), ROWS_PER_CHUNK):
        indices, prompts = check_dataset_prompts(env, dataset, where, rows=start + ROWS_PER_CHUNK, start=start)
        for a, (tokenizer, limit, template_kwargs) in limits.items():
            lengths = _prompt_lengths(tokenizer, prompts[a], limit - completion_length, overrun_limit(limit),
                                      template_kwargs, overheads[a])
            for i, length in zip(indices, lengths):
                if length is None or length + completion_length <= limit:
                    continue
                if length > overrun_limit(limit):
                    name, size = _longest_field(dataset[i])
                    count = f"{length}" if length.exact else f"at least {length} (from its size)"
                    raise ValueError(
                        f"The turn-1 prompt of agent {a} for row {i} of `{where}` is {count} tokens, more than "
                        f"{overrun_limit(limit)} (4 times the model's context window, "
                        f"max_position_embeddings={limit}, and at least {MIN_OVERRUN_TOKENS}): it cannot fit. The "
                        f"row's longest field is `{name}` ({size} characters). Remove or shorten that row (e.g. "
                        f"`{where}.filter(...)`) or use a model with a longer context; "
                        f"`{config_name}.prompt_length_check='ignore'` skips every prompt length check."
                    )
                message = (
                    f"The turn-1 prompt of agent {a} for row {i} of `{where}` is {length} tokens; with "
                    f"`{field}={completion_length}` that makes {length + completion_length} tokens, more than the "
                    f"model's context window (max_position_embeddings={limit}). Shorten or filter the long prompts "
                    f"(e.g. `{where}.filter(...)`), lower `{field}`, or use a model with a longer context; set "
                    f"`{config_name}.prompt_length_check` to 'error' to refuse such prompts or 'ignore' to run anyway."
                )
                if on_long == "error":
                    raise ValueError(message)
                long_rows.add(i)
                first_long = first_long or message
    if first_long is not None:
        warnings.warn(f"{first_long} ({len(long_rows)} of the {len(dataset)} rows have a turn-1 prompt this long.)",
                      ContextLengthWarning, stacklevel=3)


class _Length(int):
    """A prompt's token count: `exact`, or a lower bound from its size (`exact=False`)."""

    exact: bool = True


def _lower_bound(size: int, tokenizer: Any) -> _Length:
    """At least how many tokens a text of `size` UTF-8 bytes makes: no token of the vocabulary is longer than its
    longest entry, divided by 4 more for normalizers that shrink text (e.g. NFKC maps a 3-byte full-width letter to
    one byte)."""
    longest = getattr(tokenizer, "_trl_marl_longest_token", None)
    if longest is None:
        try:
            longest = max((len(str(t).encode("utf-8", "surrogatepass")) for t in tokenizer.get_vocab()), default=1)
        except Exception:  # noqa: BLE001 - a tokenizer without a readable vocabulary: no bound
            longest = size + 1
        try:
            tokenizer._trl_marl_longest_token = longest
        except Exception:  # noqa: BLE001 - a tokenizer that takes no attributes is measured again
            pass
    bound = _Length(size // (4 * max(longest, 1)))
    bound.exact = False
    return bound


def _prompt_lengths(tokenizer: Any, prompts: Sequence[Prompt], budget: int, ceiling: int,
                    chat_template_kwargs: dict | None, overheads: dict[Any, int]) -> list[_Length | None]:
    """Each prompt's token count, `None` where a bound without tokenizing shows it is at most `budget` tokens, or a
    lower bound where that alone is above `ceiling` (so a 1 MB prompt is refused without tokenizing it).

    The upper bound: a string's UTF-8 bytes (a token covers at least one byte) plus [`SPECIAL_TOKENS_SLACK`] for the
    special tokens the tokenizer adds; for chat messages of plain strings, the contents' bytes plus the template's
    own tokens for the same roles with empty contents (measured once per sequence of roles, cached in `overheads`)
    plus the slack per message. The lower bound: [`_lower_bound`]. Token ids are counted exactly. Everything else
    is tokenized.
    """
    from ..utils.tokens import is_chat, is_token_ids, tokenize_prompts

    out: list[_Length | None] = [None] * len(prompts)
    exact: list[int] = []
    for k, prompt in enumerate(prompts):
        size = None
        if isinstance(prompt, str):
            size = len(prompt.encode("utf-8", "surrogatepass"))
            bound = size + SPECIAL_TOKENS_SLACK
        elif is_chat(prompt) and all(isinstance(m.get("content"), str) for m in prompt):
            roles = tuple((m.get("role"), tuple(sorted(m))) for m in prompt)
            if roles not in overheads:
                empty = [{**m, "content": ""} for m in prompt]
                try:
                    overheads[roles] = len(tokenize_prompts(tokenizer, [empty], chat_template_kwargs)[0])
                except Exception:  # noqa: BLE001 - a template that refuses empty messages: tokenize instead
                    overheads[roles] = budget + 1
            size = sum(len(m["content"].encode("utf-8", "surrogatepass")) for m in prompt)
            bound = overheads[roles] + size + SPECIAL_TOKENS_SLACK * len(prompt)
        elif is_token_ids(prompt):
            out[k] = _Length(len(prompt))
            continue
        else:
            bound = budget + 1
        if bound <= budget:
            continue
        if size is not None and size > ceiling and (lower := _lower_bound(size, tokenizer)) > ceiling:
            out[k] = lower
            continue
        exact.append(k)
    if exact:
        for k, ids in zip(exact, tokenize_prompts(tokenizer, [prompts[k] for k in exact], chat_template_kwargs)):
            out[k] = _Length(len(ids))
    return out


def _longest_field(row: Mapping[str, Any]) -> tuple[str, int]:
    """The column of a row with the longest value (by `len`, or the length of its text), and that length."""
    best, size = "?", -1
    for key, value in row.items():
        try:
            length = len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else len(str(value))
        except Exception:  # noqa: BLE001 - an object without a length says nothing
            continue
        if isinstance(value, (list, tuple)):
            length = max(length, len(str(value)))
        if length > size:
            best, size = str(key), length
    return best, size
