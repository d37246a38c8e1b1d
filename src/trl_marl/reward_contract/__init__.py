"""The reward contract of every trl-marl trainer, written once.

A reward function has TRL's signature, `f(prompts, completions, **kwargs) -> list[float | None]`, and is one of two
kinds (its `reward_kind` attribute, set by [`team_reward`] / [`agent_reward`] or by the class):

- a **team reward** (`"team"`) scores a *joint action* (what every agent wrote at one turn of one episode): it is
  called once per turn with one entry per joint action, `agent_index=None`, and `prompts`/`completions` are agent
  0's (so a plain TRL reward function works unchanged with one agent);
- an **agent reward** (`"agent"`) scores one agent's response: it is called once per (turn, agent) with one entry
  per joint action, `agent_index=a`, and `prompts`/`completions` are agent `a`'s.

A function without `reward_kind` takes its trainer's kind: `"team"` in MAGRPO (a centralized reward),
`"agent"` in (multi-agent) PPO (each response its own score). A declared kind means the same in every trainer:

| trainer | team reward | agent reward |
|---|---|---|
| MAGRPO | the joint action's reward | the mean over the agents of their scores is the joint action's reward |
| PPO | computed once per joint action; every agent's response gets it | each response gets its own score |

Every call receives the same keyword arguments in every trainer: every dataset column (one entry per joint
action), `agent_prompts` and `agent_completions` (one list per agent), `agent_index`, `turn` (1-based),
`transcript` (one [`~trl_marl.envs.base.Transcript`] per joint action that *includes* the scored turn:
`transcript[i][turn - 1].responses` are the responses scored; MAGRPO scores right after each turn, so it ends
there, while PPO scores once the episode is over, so it also holds the later turns, which is what MAPoRL's
influence-aware reward reads; the environment's feedback on the scored turn may be absent) and `trainer_state`.
A completion is a string, or `[{"role": "assistant", "content": ...}]` when its prompt is conversational (TRL's
convention).

Entries: a real number (`int`, `float`, `bool`, a NumPy scalar or a one-element tensor), or `None` when the function
does not apply. A string (even `"1.0"`), any other type, a list of the wrong length and an exception in the function
raise a [`RewardFunctionError`] naming the function; so does a call that takes longer than the config's
`reward_timeout` (a [`RewardTimeoutError`]; default 600 s, `None` disables; a function's own `reward_timeout`
attribute wins). A call with a limit runs in the function's own long-lived worker process (its state kept between
calls), killed at the limit (`reward_isolation="process"`, the default), or in a thread of the trainer's process
(`"thread"`, for a function whose side effects the caller reads; a late result is refused); see
[`call_reward_function`]. A `SystemExit` or `KeyboardInterrupt` from a function is a `RewardFunctionError` too.
Training stops on such an error: a single-process run first saves a checkpoint of the last completed step
(`TeamTrainer.stop_after_reward_error`).
Scores are combined with `reward_weights` (a weighted sum over the functions that gave a number). A completion that
every function skips is *unscorable*, and so is one for which a function returned NaN or infinity (never replaced by
a number; such scores are counted against `max_nonfinite`, beyond which a [`NonFiniteError`] stops training). An
unscorable completion teaches nothing: advantage 0 in MAGRPO, left out of the policy and value losses in PPO. A step
in which *nothing* is scorable raises a `RewardFunctionError`: a function that always returns `None` is a bug.

Where each part lives (every name below is also importable from `trl_marl.reward_contract` itself):

- `reward_contract.signature`: what a function declares: the keywords it must accept ([`check_reward_signature`])
  and its kind ([`team_reward`], [`agent_reward`], [`reward_kind`]);
- `reward_contract.calls`: one call of one function: its time limit, where it runs, the check of its output
  ([`call_reward_function`], [`reward_value`]);
- `reward_contract.errors`: the errors and warnings above, and the count of non-finite scores ([`NonFiniteCounter`]);
- `reward_contract.sets`: a trainer's functions as one object: [`RewardSet`], MAGRPO's [`TeamReward`] and per-agent
  [`LocalReward`];
- `reward_contract.settings`: the configs' `reward_timeout` and `reward_isolation` fields, written once
  ([`reward_timeout_field`], [`reward_isolation_field`]).
"""

from __future__ import annotations

from .calls import (
    DEFAULT_REWARD_TIMEOUT,
    REWARD_ISOLATIONS,
    call_reward_function,
    checked_reward_values,
    reward_value,
)
from .errors import (
    NonFiniteCounter,
    NonFiniteError,
    RewardFunctionError,
    RewardIsolationWarning,
    RewardTimeoutError,
    RewardTimeoutWarning,
    RewardWorkerTraceback,
    unscorable_message,
)
from .sets import LocalReward, RewardSet, TeamReward, completion_objects
from .settings import reward_isolation_field, reward_timeout_field
from .signature import (
    REWARD_KEYWORDS,
    REWARD_KINDS,
    RewardFunc,
    agent_reward,
    check_reward_signature,
    reward_kind,
    team_reward,
)

__all__ = [
    "DEFAULT_REWARD_TIMEOUT",
    "REWARD_ISOLATIONS",
    "REWARD_KEYWORDS",
    "REWARD_KINDS",
    "LocalReward",
    "NonFiniteCounter",
    "NonFiniteError",
    "RewardFunc",
    "RewardFunctionError",
    "RewardIsolationWarning",
    "RewardSet",
    "RewardTimeoutError",
    "RewardTimeoutWarning",
    "RewardWorkerTraceback",
    "TeamReward",
    "agent_reward",
    "call_reward_function",
    "check_reward_signature",
    "checked_reward_values",
    "completion_objects",
    "reward_isolation_field",
    "reward_kind",
    "reward_timeout_field",
    "reward_value",
    "team_reward",
    "unscorable_message",
]
