"""Input checks shared by every trl-marl trainer: bad input fails before the first step, naming the field and the fix.

Both trainers (and the drop-in `PPOTrainer`) call these functions; nothing here is specific to one algorithm.

- [`check_env_protocol`]: an environment implements `agent_prompt` (the method the trainers call).
- [`check_dataset_prompts`]: the environment turns the first rows of a dataset into one valid prompt per agent.
- [`check_prompt_lengths`]: every row's prompt + completion fit in each agent's context window.
- [`check_mixed_precision`]: `fp16`/`bf16` are only set where they take effect.
- [`call_reward_function`] and [`reward_value`]: the reward contract, one rule for every trainer.

The reward contract: a reward function returns one entry per completion (a joint action in MAGRPO, one agent's
response in PPO). An entry is a real number: a Python `int`, `float` or `bool`, a NumPy scalar, or a one-element
torch tensor or NumPy array. `None` means "this function does not apply here" and is skipped; a completion that
every function skips is *unscorable*. Anything else, a string such as `"1.0"` included, is a
[`RewardFunctionError`] naming the function and the value (numbers are never parsed from text).
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .envs.base import MultiAgentEnv, Prompt, Transcript, prompt_problem
from .utils.bounded import ChildDied, ForkFailed, Overran, call_in_child, call_in_thread, exception_text, fork_obstacle

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


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something other than one score (or `None`) per completion."""


class RewardTimeoutError(RewardFunctionError):
    """A reward function call took longer than the config's `reward_timeout` (its worker process was killed, or
    its thread abandoned; see [`call_reward_function`])."""


class RewardTimeoutWarning(UserWarning):
    """A reward function runs without `reward_timeout`: it sets signal handlers, so it must run in the main thread."""


class RewardIsolationWarning(UserWarning):
    """A reward function meant for a worker process (`reward_isolation='process'`) runs in a thread (said once)."""


REWARD_ISOLATIONS = ("process", "thread")
"""The choices of the configs' `reward_isolation` field (and of a function's own `reward_isolation` attribute)."""

DEFAULT_REWARD_TIMEOUT = 600.0
"""The configs' default `reward_timeout` (seconds per reward function call; see [`call_reward_function`])."""


# ---------------------------------------------------------------------------------------------- reward contract
def reward_value(value: Any, name: str, index: int) -> float | None:
    """One entry of a reward function's output as a float, or `None` for "skip" (see the module docstring).

    NaN and infinity are returned as they are: each trainer decides what a non-finite score means.

    Raises:
        RewardFunctionError: for a string or any other value that is not a real number.
    """
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.item())
    if isinstance(value, np.ndarray) and value.size == 1:
        return reward_value(value.item(), name, index)
    if isinstance(value, (numbers.Real, np.bool_)):
        return float(value)
    hint = (
        " Strings are not parsed: return the number itself (e.g. `float(text)` inside the function)."
        if isinstance(value, (str, bytes))
        else ""
    )
    raise RewardFunctionError(
        f"Reward function `{name}` returned {value!r} ({type(value).__name__}) for completion {index}; each entry "
        f"must be a number (int, float, bool, a NumPy scalar or a one-element tensor) or None to skip.{hint}"
    )


def call_reward_function(func: Callable[..., Any], name: str, size: int, /, timeout: float | None = None,
                         timeout_field: str = "reward_timeout", *, isolation: str = "process",
                         isolation_field: str = "reward_isolation", arguments: Mapping[str, Any] | None = None,
                         **kwargs: Any) -> list[float | None]:
    """Call one reward function on `size` completions and check its output against the reward contract.

    Without a `timeout` the function is called directly. With one, `isolation` says where (docs/extending.md):

    - `"process"` (the default): in a child process forked for the call ([`~trl_marl.utils.bounded`]); it inherits
      the function and its arguments (nothing is pickled) and sends back only the checked scores. A call that
      overruns is *killed* at the limit, even in C code that holds the GIL (a backtracking regular expression); a
      crash or `os._exit` is a [`RewardFunctionError`]. What the function changes in its own memory stays in the
      child: a function whose side effects the caller reads must run in `"thread"` mode. A function that holds a
      model or tensor on a GPU, or fails in the child because CUDA cannot be used after a fork, runs in a thread,
      as every function does where `os.fork` is missing (Windows), with a [`RewardIsolationWarning`] once.
    - `"thread"`: in a daemon thread, awaited at most `timeout` seconds. A call that overruns is *abandoned* (Python
      cannot kill a thread), and a result that comes back after the limit (C code holding the GIL keeps the caller
      from noticing the limit on time) is refused. The thread gets the caller's context variables, autograd mode
      and CUDA device. A function that fails there because it sets signal handlers (main thread only) is called
      again directly, without the limit, with a [`RewardTimeoutWarning`].

    A `SystemExit` or `KeyboardInterrupt` from the function (or a Ctrl-C while it runs here) is a
    [`RewardFunctionError`] too: a reward cannot end training without its checkpoint.

    Args:
        func: The reward function, called as `func(**arguments, **kwargs)`.
        name: Its name, for messages.
        size: The number of completions it must score.
        timeout: Seconds one call may take; `None` waits as long as it takes.
        timeout_field: The config field that holds `timeout`, for the message (e.g. `"MAGRPOConfig.reward_timeout"`).
        isolation: `"process"` or `"thread"` (see above; [`REWARD_ISOLATIONS`]).
        isolation_field: The config field that holds `isolation`, for messages.
        arguments: What the function receives (`prompts`, `completions` and the keyword arguments), as a mapping,
            so that a dataset column may have any name (`timeout`, `name`, ...).
        **kwargs: More arguments for the function.

    Returns:
        One float (possibly NaN or infinite) or `None` per completion.

    Raises:
        RewardTimeoutError: when the call did not return within `timeout` seconds.
        RewardFunctionError: when the function raises, returns something that is not a list of `size` entries,
            or an entry that is not a number or `None`.
    """
    kwargs = {**(arguments or {}), **kwargs}
    if timeout is not None and isolation == "process":
        reason = _CUDA_REASON if _THREAD_ONLY.get(id(func)) is func else fork_obstacle(func)
        try:
            if reason is None:
                return _call_in_process(func, name, size, kwargs, timeout, timeout_field, isolation_field)
        except _NeedsCuda:
            _THREAD_ONLY[id(func)] = func
            reason = _CUDA_REASON
        except ForkFailed as exc:
            reason = f"no worker process could be started ({exc})"
        _warn_once(name, f"Reward function `{name}` runs in a thread, not in a worker process (`{isolation_field}="
                   f"'process'`), because {reason}. A call stuck in C code that holds the GIL (e.g. a backtracking "
                   f"regular expression) cannot be stopped at `{timeout_field}` there (its late result is refused). "
                   f"Set `{isolation_field}='thread'` (or the function's `reward_isolation`) to silence this.")
    try:
        if timeout is None:
            values = func(**kwargs)
        else:
            values, seconds = call_in_thread(func, kwargs, timeout)
            if seconds > timeout:
                raise RewardTimeoutError(
                    f"Reward function `{name}` returned after {seconds:.1f} s, past `{timeout_field}` ({timeout:g} s)"
                    f", while scoring {size} completions: its result is refused. It ran in a thread "
                    f"(`{isolation_field}='thread'`) and held the GIL (C code such as a backtracking regular "
                    f"expression), so the limit could not stop it; `{isolation_field}='process'` kills such a call at "
                    "the limit."
                )
    except Overran:
        raise RewardTimeoutError(
            f"Reward function `{name}` did not return within {timeout:g} s (`{timeout_field}`) while scoring {size} "
            "completions; it may hang (a dead server, a deadlock, an endless loop). Its thread was abandoned "
            f"(`{isolation_field}='thread'`; Python cannot kill it). Fix the function, or raise `{timeout_field}` "
            "if such calls are legitimately slow (`None` disables the limit)."
        ) from None
    except RewardFunctionError:
        raise
    except Exception as exc:  # noqa: BLE001 - re-raised with the function's name
        if timeout is not None and isinstance(exc, ValueError) and "main thread" in str(exc):  # `signal.signal`
            warnings.warn(
                f"Reward function `{name}` sets signal handlers (e.g. a `signal.alarm` time limit), which Python "
                f"allows in the main thread only, so it runs there, without `{timeout_field}`: a hang in it is not "
                f"caught. Give it a time limit of its own, avoid signals in it, or run it with "
                f"`{isolation_field}='process'` (in a worker process, whose main thread it gets).",
                RewardTimeoutWarning, stacklevel=2,
            )
            return call_reward_function(func, name, size, None, timeout_field, isolation=isolation,
                                        isolation_field=isolation_field, arguments=kwargs)
        raise RewardFunctionError(f"Reward function `{name}` raised {type(exc).__name__}: {exc}") from exc
    except BaseException as exc:  # SystemExit, KeyboardInterrupt: never end training without its checkpoint
        raise RewardFunctionError(_ended_message(name, type(exc).__name__, exception_text(exc))) from exc
    return checked_reward_values(values, name, size)


def checked_reward_values(values: Any, name: str, size: int) -> list[float | None]:
    """A reward function's output checked against the contract: one float (or `None`) per completion; a
    [`RewardFunctionError`] for anything else (not a list of `size` entries, an entry that is not a number)."""
    if values is None or isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__len__"):
        raise RewardFunctionError(
            f"Reward function `{name}` returned {type(values).__name__}; it must return a list with one float "
            f"(or None) per completion ({size} here)."
        )
    if len(values) != size:
        raise RewardFunctionError(
            f"Reward function `{name}` returned {len(values)} values for {size} completions; it must return one "
            "float (or None) per completion."
        )
    return [reward_value(v, name, i) for i, v in enumerate(values)]


class RewardWorkerTraceback(Exception):
    """The traceback of an exception raised by a reward function in its worker process (the error's cause)."""


class _NeedsCuda(Exception):
    """A reward function failed in its worker process because CUDA cannot be used after a fork."""


_CUDA_REASON = "it uses CUDA, which a forked process cannot"
_THREAD_ONLY: dict[int, Any] = {}  # functions that failed in a worker process for want of CUDA (kept: ids stay theirs)
_WARNED: set[str] = set()  # the functions warned about (by name), once each per process

def _warn_once(name: str, message: str) -> None:
    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(message, RewardIsolationWarning, stacklevel=3)


def _ended_message(name: str, kind: str, text: str) -> str:
    return (f"Reward function `{name}` raised {kind}: {text} (or was interrupted). A reward function may not end or "
            "interrupt training: raise an ordinary exception, or return None for what it cannot score.")


def _call_in_process(func: Callable[..., Any], name: str, size: int, kwargs: dict[str, Any], timeout: float,
                     timeout_field: str, isolation_field: str) -> list[float | None]:
    """One call in a forked worker process (see [`call_reward_function`]): the checked scores, or the error."""

    def work() -> list[float | None]:
        return checked_reward_values(func(**kwargs), name, size)

    try:
        reply = call_in_child(work, timeout)
    except Overran:
        raise RewardTimeoutError(
            f"Reward function `{name}` did not return within {timeout:g} s (`{timeout_field}`) while scoring {size} "
            "completions; it may hang (a dead server, a deadlock, an endless loop, C code such as a backtracking "
            "regular expression). Its worker process was killed. Fix the function, or raise "
            f"`{timeout_field}` if such calls are legitimately slow (`None` disables the limit)."
        ) from None
    except ChildDied as exc:
        raise RewardFunctionError(f"Reward function `{name}` ran in a worker process (`{isolation_field}='process'`) "
                                  f"that ended without its scores: {exc}. Fix the function.") from None
    reply = reply if isinstance(reply, dict) else {}
    if "raised" in reply:
        kind, text = str(reply.get("raised")), str(reply.get("message", ""))
        cause = RewardWorkerTraceback(str(reply.get("traceback", "")))
        if kind == "RewardFunctionError":  # the contract check, run in the worker
            raise RewardFunctionError(text) from cause
        if "Cannot re-initialize CUDA in forked subprocess" in text:
            raise _NeedsCuda
        if kind in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
            raise RewardFunctionError(_ended_message(name, kind, text)) from cause
        raise RewardFunctionError(f"Reward function `{name}` raised {kind}: {text}") from cause
    values = reply.get("value")
    if (not isinstance(values, list) or len(values) != size
            or not all(v is None or type(v) is float for v in values)):
        raise RewardFunctionError(
            f"Reward function `{name}`'s worker process sent {str(values)[:200]!r}, not {size} scores (float or None)."
        )
    return values


def unscorable_message(names: Sequence[str], what: str, fix: str) -> str:
    """The message for completions that every reward function skipped (returned `None` for)."""
    return (
        f"Every reward function ({', '.join(f'`{n}`' for n in names)}) returned None for {what}, so there is "
        f"nothing to learn from. None means \"this function does not apply to this completion\"; {fix} Return a "
        "number instead where a completion should be scored (e.g. 0.0, or a penalty for an invalid output)."
    )


# ---------------------------------------------------------------------------------------------- environments
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
                         on_long: str = "warn") -> None:
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
        if limit is not None:
            limits[a] = (team.tokenizers[slot], limit)
    if not limits:
        return
    config_name = field.split(".")[0]
    first_long: str | None = None
    long_rows: set[int] = set()
    overheads: dict[Any, int] = {}
    for start in range(0, len(dataset), ROWS_PER_CHUNK):
        indices, prompts = check_dataset_prompts(env, dataset, where, rows=start + ROWS_PER_CHUNK, start=start)
        for a, (tokenizer, limit) in limits.items():
            lengths = _prompt_lengths(tokenizer, prompts[a], limit - completion_length, overrun_limit(limit),
                                      chat_template_kwargs, overheads)
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
    from .utils.tokens import is_chat, is_token_ids, tokenize_prompts

    out: list[_Length | None] = [None] * len(prompts)
    exact: list[int] = []
    for k, prompt in enumerate(prompts):
        size = None
        if isinstance(prompt, str):
            size = len(prompt.encode("utf-8", "surrogatepass"))
            bound = size + SPECIAL_TOKENS_SLACK
        elif is_chat(prompt) and all(isinstance(m.get("content"), str) for m in prompt):  # type: ignore[union-attr]
            roles = tuple((m.get("role"), tuple(sorted(m))) for m in prompt)  # type: ignore[union-attr]
            if roles not in overheads:
                empty = [{**m, "content": ""} for m in prompt]  # type: ignore[union-attr]
                try:
                    overheads[roles] = len(tokenize_prompts(tokenizer, [empty], chat_template_kwargs)[0])
                except Exception:  # noqa: BLE001 - a template that refuses empty messages: tokenize instead
                    overheads[roles] = budget + 1
            size = sum(len(m["content"].encode("utf-8", "surrogatepass")) for m in prompt)  # type: ignore[union-attr]
            bound = overheads[roles] + size + SPECIAL_TOKENS_SLACK * len(prompt)
        elif is_token_ids(prompt):
            out[k] = _Length(len(prompt))  # type: ignore[arg-type]
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


# ---------------------------------------------------------------------------------------------- configuration
def has_accelerator() -> bool:
    """Whether a CUDA (or XPU) device is available."""
    return torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())


def use_cpu_for_cpu_processes(config: Any) -> None:
    """Set `use_cpu=True` when the config is built in one of several processes (`WORLD_SIZE` > 1: `accelerate
    launch --multi_gpu`, `torchrun`) on a machine without GPU: accelerate then runs them as CPU processes over gloo
    (DDP, or FSDP2). Without it, accelerate runs each process alone, each training a copy on all the data."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and not has_accelerator():
        config.use_cpu = True


def check_mixed_precision(config: Any) -> None:
    """Refuse `fp16=True` (and `bf16=True` without `use_cpu`) where no GPU runs them.

    transformers accepts `fp16=True` on a CPU-only machine and then trains in float32 without a word; `bf16=True`
    fails there with a message that does not name the config class. Both are refused here with the fix.
    """
    cls = type(config).__name__
    on_cpu = bool(getattr(config, "use_cpu", False)) or not has_accelerator()
    if getattr(config, "fp16", False) and on_cpu:
        raise ValueError(
            f"`{cls}.fp16=True` needs a CUDA GPU, but training runs on the CPU here (no GPU, or `use_cpu=True`), "
            "where fp16 mixed precision would be silently ignored. Set `fp16=False` (CPU training runs in float32)."
        )
    if getattr(config, "bf16", False) and not has_accelerator() and not getattr(config, "use_cpu", False):
        raise ValueError(
            f"`{cls}.bf16=True` needs a GPU with bfloat16 support, and none is available. Set `bf16=False` (CPU "
            "training runs in float32), or also set `use_cpu=True` for bfloat16 autocast on the CPU."
        )


def check_choice(config: Any, field: str, choices: Sequence[str]) -> None:
    """Refuse a config field whose value is not one of `choices`."""
    value = getattr(config, field)
    if value not in choices:
        raise ValueError(f"`{type(config).__name__}.{field}` must be one of {tuple(choices)}, got {value!r}.")


def check_timeout(config: Any, field: str) -> None:
    """Refuse a timeout field that is neither `None` (no limit) nor a number of seconds > 0."""
    value = getattr(config, field)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < float("inf"):
        raise ValueError(
            f"`{type(config).__name__}.{field}` must be a number of seconds > 0, or None for no limit, got {value!r}."
        )


def check_positive(config: Any, field: str, meaning: str) -> None:
    """Refuse a config field that must be an integer >= 1 (e.g. a completion length)."""
    value = getattr(config, field)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{type(config).__name__}.{field}` must be an integer >= 1 ({meaning}), got {value!r}.")
