"""The team reward of the centralised single-policy baseline ([`~trl_marl.envs.centralized.CentralizedEnv`]).

[`CentralizedReward`] splits the single policy's completion into the agents' parts and calls the team reward
exactly as a team's joint action is scored (the reward contract of `trl_marl.reward_contract`): `agent_completions` one
list per agent, `agent_prompts` the prompt each agent would have seen, `transcript` the team's transcript, and
`prompts`/`completions` agent 0's. A missing or malformed section is an empty part, which the team reward scores as
it scores an empty answer (e.g. `TargetSumReward`'s invalid penalty).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ..envs.base import Transcript
from ..envs.centralized import CentralizedEnv

_CONTRACT_KEYS = ("prompts", "completions", "agent_prompts", "agent_completions", "agent_index", "turn",
                  "transcript", "trainer_state")


class CentralizedReward:
    """A team reward applied to the parts of a centralised completion (one policy writing every agent's part).

    Called on the one-agent episodes of `env`, it returns, for each completion, what `team_reward` returns for the
    joint action made of its sections. An agent reward (`reward_kind = "agent"`) is called once per agent and its
    scores averaged over the agents that got one, as MAGRPO combines agent rewards.

    Args:
        env (`CentralizedEnv`): The centralised environment the completions come from (its tags and wrapped env).
        team_reward (`Callable`): The team's reward function, with TRL's signature.

    Example:

    ```python
    >>> from trl_marl.envs import CentralizedEnv, TargetSumEnv
    >>> from trl_marl.rewards import CentralizedReward, TargetSumReward
    >>> reward = CentralizedReward(CentralizedEnv(TargetSumEnv(2)), TargetSumReward())
    >>> reward(["..."] * 2, ["<agent_0>3</agent_0><agent_1>7</agent_1>", "<agent_0>3</agent_0>"], target=[10, 10])
    [1.0, -0.5]
    ```
    """

    reward_kind = "team"

    def __init__(self, env: CentralizedEnv, team_reward: Callable[..., Sequence[Any]]) -> None:
        if not isinstance(env, CentralizedEnv):
            raise TypeError(f"`env` must be the CentralizedEnv the completions come from, got {type(env).__name__}.")
        if not callable(team_reward):
            raise TypeError(f"`team_reward` must be a reward function, got {team_reward!r}.")
        self.env = env
        self.team_reward = team_reward
        inner = (getattr(team_reward, "name", None) or getattr(team_reward, "__name__", None)
                 or type(team_reward).__name__)
        self.name = f"centralized_{inner}"

    def team_arguments(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        """The keyword arguments of the team reward's call for these centralised completions.

        The parts of the scored turn come from `completions`; the earlier turns (and, in PPO, the later ones) from
        the centralised `transcript`, split the same way. Without a `transcript` (a call outside a trainer), the
        team transcript is the scored turn alone and every agent's prompt is the centralised prompt.
        """
        env, n = self.env, self.env.env.num_agents
        columns = {k: v for k, v in kwargs.items() if k not in _CONTRACT_KEYS}
        turn = kwargs.get("turn") or 1
        transcripts = kwargs.get("transcript")
        size = len(completions)
        chat = [isinstance(c, list) for c in completions]
        parts = [env.split(c) for c in completions]  # parts[i][a]
        agent_prompts: list[list[Any]] = [[] for _ in range(n)]
        team_transcripts = []
        for i in range(size):
            if transcripts is None:
                team = Transcript().extend(parts[i])
                seen = [prompts[i]] * n
            else:
                team = env.team_transcript(transcripts[i])
                row = {k: v[i] for k, v in columns.items()}
                seen = env.env.prompts(row, Transcript(team.turns[: turn - 1]))
            team_transcripts.append(team)
            for a in range(n):
                agent_prompts[a].append(seen[a])
        agent_completions = [[[{"role": "assistant", "content": parts[i][a]}] if chat[i] else parts[i][a]
                              for i in range(size)] for a in range(n)]
        return dict(columns, prompts=agent_prompts[0], completions=agent_completions[0], agent_prompts=agent_prompts,
                    agent_completions=agent_completions, agent_index=None, turn=turn, transcript=team_transcripts,
                    trainer_state=kwargs.get("trainer_state"))

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        arguments = self.team_arguments(prompts, completions, **kwargs)
        if getattr(self.team_reward, "reward_kind", "team") != "agent":
            return list(self.team_reward(**arguments))
        per_agent = []
        for a in range(self.env.env.num_agents):
            call = dict(arguments, agent_index=a, prompts=arguments["agent_prompts"][a],
                        completions=arguments["agent_completions"][a])
            per_agent.append(list(self.team_reward(**call)))
        means: list[float | None] = []
        for scores in zip(*per_agent):
            given = [float(s) for s in scores if s is not None and not math.isnan(float(s))]
            means.append(sum(given) / len(given) if given else None)
        return means
