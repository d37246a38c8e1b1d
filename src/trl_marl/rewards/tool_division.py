"""The team reward of the tool division ([`~trl_marl.envs.tool_division.ToolDivisionEnv`], issue 55), and the
cooperation metrics of its teamwork evaluation.

An agent *states* product k when the last number of its answer (the content of its last assistant message) is the
row's product k (`answer1`, `answer2`), read as the tool relay reads answers
([`~trl_marl.rewards.tool_relay.last_integer`]): writing both products states only the last one, and an answer that
goes on past the product states nothing. The team reward pays 0.5 for each product stated by exactly one agent:

| agent 1 states | agent 2 states | reward |
|---|---|---|
| product 1 | product 2 (or the reverse) | 1.0 (success) |
| product 1 | nothing (or a wrong number) | 0.5 |
| product 1 | product 1 (a collision) | 0.0 |
| nothing | nothing | 0.0 |

A collision pays nothing, so an agent cannot earn alone more than its share, and a team earns 1.0 only when the two
agents stated different products: by a division they agreed on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..utils.text import completion_text
from .tool_relay import last_integer


def stated_product(completion: Any, answer1: Any, answer2: Any) -> int | None:
    """Which product an answer states: 1 or 2 when its last number is the row's product 1 or 2, else None."""
    number = last_integer(completion_text(completion))
    if number is None:
        return None
    return 1 if number == int(answer1) else 2 if number == int(answer2) else None


def stated_pairs(agent_completions: Sequence[Sequence[Any]], answer1: Sequence[Any],
                 answer2: Sequence[Any]) -> list[tuple[int | None, int | None]]:
    """Per joint action, the product each of the two agents states ([`stated_product`])."""
    return [(stated_product(first, gold1, gold2), stated_product(second, gold1, gold2))
            for first, second, gold1, gold2 in zip(agent_completions[0], agent_completions[1], answer1, answer2)]


class ToolDivisionReward:
    """0.5 per product of the row stated by exactly one of the two agents (module docstring); one value per joint
    action. Called as a MAGRPO team reward (`agent_completions[a][i]`: agent `a`'s answer in joint action `i`).

    Example:

    ```python
    >>> from trl_marl.rewards.tool_division import ToolDivisionReward
    >>> ToolDivisionReward()(None, None, agent_completions=[["12 * 34 = 408", "408"], ["56 * 78 = 4368", "408"]],
    ...                      answer1=["408", "408"], answer2=["4368", "4368"])
    [1.0, 0.0]
    ```
    """

    __name__ = "tool_division"

    def __call__(self, prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                 answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
        if len(agent_completions) != 2:
            raise ValueError(f"ToolDivisionReward scores two agents' answers, got {len(agent_completions)} agents.")
        return [0.5 * sum(1 for k in (1, 2) if pair.count(k) == 1)
                for pair in stated_pairs(agent_completions, answer1, answer2)]


def tool_division_metrics() -> dict[str, Callable[..., list[float]]]:
    """The task's cooperation metrics, name -> function with the reward's signature (per joint action):
    `agent_<a>_product<k>` (agent `a` states product k), `agent_<a>_states` (it states either product) and
    `collision` (both state the same product). For [`~trl_marl.teamwork.evaluate_teamwork`]'s `metrics`."""

    def states(agent: int, wanted: int | None) -> Callable[..., list[float]]:
        def metric(prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                   answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
            stated = [pair[agent] for pair in stated_pairs(agent_completions, answer1, answer2)]
            return [float(s is not None if wanted is None else s == wanted) for s in stated]
        return metric

    def collision(prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                  answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
        return [float(a is not None and a == b) for a, b in stated_pairs(agent_completions, answer1, answer2)]

    metrics: dict[str, Callable[..., list[float]]] = {"collision": collision}
    for agent in (0, 1):
        for k in (1, 2):
            metrics[f"agent_{agent}_product{k}"] = states(agent, k)
        metrics[f"agent_{agent}_states"] = states(agent, None)
    return metrics
