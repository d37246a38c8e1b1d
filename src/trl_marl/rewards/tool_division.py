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

With `read="calls"` an agent's product is the one its calculator *computed* instead ([`computed_product`]): product
k when a result of its calls is the row's product k and no result is the other product. The answer's text is not
read, so the skill the reward asks for is the call (which product to multiply), not restating its result: the
second design's untrained agents called the calculator but restated the result wrongly. The tool messages are the
tool loop's, never the model's text: an answer that writes a product without computing it states nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..utils.text import completion_text
from .tool_relay import last_integer


def stated_product(completion: Any, answer1: Any, answer2: Any) -> int | None:
    """Which product an answer states: 1 or 2 when its last number is the row's product 1 or 2, else None."""
    number = last_integer(completion_text(completion))
    if number is None:
        return None
    return 1 if number == int(answer1) else 2 if number == int(answer2) else None


def computed_product(messages: Sequence[Mapping[str, Any]] | None, answer1: Any, answer2: Any) -> int | None:
    """Which product an agent's calculator computed in its turn (`messages`: its calls, their results, its answer):
    1 or 2 when the result of one of its calls is the row's product 1 or 2 and no result is the other; None when
    none is, or both are (computing both is not a division), or the agent has no tool messages."""
    results = {str(m.get("content", "")).strip() for m in messages or ()
               if m.get("role") == "tool" and m.get("name") == "calculator"}
    hits = [k for k, gold in ((1, answer1), (2, answer2)) if str(int(gold)) in results]
    return hits[0] if len(hits) == 1 else None


READS = ("answer", "calls")
"""What [`ToolDivisionReward`] reads as an agent's product: its answer's last number, or its calculator's results."""


def _checked(read: str) -> str:
    if read not in READS:
        raise ValueError(f"`read` must be one of {READS}, got {read!r}.")
    return read


def stated_pairs(agent_completions: Sequence[Sequence[Any]], answer1: Sequence[Any], answer2: Sequence[Any],
                 read: str = "answer", agent_tool_messages: Sequence[Sequence[Any] | None] | None = None,
                 ) -> list[tuple[int | None, int | None]]:
    """Per joint action, the product each of the two agents states ([`stated_product`]), or with `read="calls"`
    computes ([`computed_product`], from `agent_tool_messages[a][i]`)."""
    if _checked(read) == "answer":
        return [(stated_product(first, gold1, gold2), stated_product(second, gold1, gold2))
                for first, second, gold1, gold2 in zip(agent_completions[0], agent_completions[1], answer1, answer2)]
    if agent_tool_messages is None or any(messages is None for messages in agent_tool_messages[:2]):
        raise ValueError("`read='calls'` scores the agents' calculator results, but this call has no "
                         "`agent_tool_messages` for both agents: give both agents the calculator "
                         "(`tools=[[calculator], [calculator]]`), or read the answers (`read='answer'`).")
    first_calls, second_calls = agent_tool_messages[0], agent_tool_messages[1]
    assert first_calls is not None and second_calls is not None
    return [(computed_product(first, gold1, gold2), computed_product(second, gold1, gold2))
            for first, second, gold1, gold2 in zip(first_calls, second_calls, answer1, answer2)]


class ToolDivisionReward:
    """0.5 per product of the row stated by exactly one of the two agents (module docstring); one value per joint
    action. Called as a MAGRPO team reward (`agent_completions[a][i]`: agent `a`'s answer in joint action `i`).

    Args:
        read (`str`): `"answer"` (an agent's product is its answer's last number) or `"calls"` (the product its
            calculator computed, from the trainer's `agent_tool_messages`; the answer is not read).

    Example:

    ```python
    >>> from trl_marl.rewards.tool_division import ToolDivisionReward
    >>> ToolDivisionReward()(None, None, agent_completions=[["12 * 34 = 408", "408"], ["56 * 78 = 4368", "408"]],
    ...                      answer1=["408", "408"], answer2=["4368", "4368"])
    [1.0, 0.0]
    >>> def turn(result):  # one agent's turn with the calculator: its call, the result, its answer
    ...     return [{"role": "assistant", "content": ""}, {"role": "tool", "name": "calculator", "content": result},
    ...             {"role": "assistant", "content": "done"}]
    >>> ToolDivisionReward(read="calls")(None, None, agent_completions=[["done"], ["done"]], answer1=["408"],
    ...                                  answer2=["4368"], agent_tool_messages=[[turn("408")], [turn("4368")]])
    [1.0]
    ```
    """

    __name__ = "tool_division"

    def __init__(self, read: str = "answer") -> None:
        self.read = _checked(read)

    def __call__(self, prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                 answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
        if len(agent_completions) != 2:
            raise ValueError(f"ToolDivisionReward scores two agents' answers, got {len(agent_completions)} agents.")
        pairs = stated_pairs(agent_completions, answer1, answer2, self.read, kwargs.get("agent_tool_messages"))
        return [0.5 * sum(1 for k in (1, 2) if pair.count(k) == 1) for pair in pairs]


def tool_division_metrics(read: str = "answer") -> dict[str, Callable[..., list[float]]]:
    """The task's cooperation metrics, name -> function with the reward's signature (per joint action):
    `agent_<a>_product<k>` (agent `a` states product k), `agent_<a>_states` (it states either product) and
    `collision` (both state the same product); `read` as [`ToolDivisionReward`]'s (`"calls"`: the product its
    calculator computed). For [`~trl_marl.teamwork.evaluate_teamwork`]'s `metrics`."""
    _checked(read)

    def pairs_of(agent_completions: Sequence[Sequence[Any]], answer1: Sequence[Any], answer2: Sequence[Any],
                 kwargs: Mapping[str, Any]) -> list[tuple[int | None, int | None]]:
        return stated_pairs(agent_completions, answer1, answer2, read, kwargs.get("agent_tool_messages"))

    def states(agent: int, wanted: int | None) -> Callable[..., list[float]]:
        def metric(prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                   answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
            stated = [pair[agent] for pair in pairs_of(agent_completions, answer1, answer2, kwargs)]
            return [float(s is not None if wanted is None else s == wanted) for s in stated]
        return metric

    def collision(prompts: Any, completions: Any, agent_completions: Sequence[Sequence[Any]],
                  answer1: Sequence[Any], answer2: Sequence[Any], **kwargs: Any) -> list[float]:
        return [float(a is not None and a == b) for a, b in pairs_of(agent_completions, answer1, answer2, kwargs)]

    metrics: dict[str, Callable[..., list[float]]] = {"collision": collision}
    for agent in (0, 1):
        for k in (1, 2):
            metrics[f"agent_{agent}_product{k}"] = states(agent, k)
        metrics[f"agent_{agent}_states"] = states(agent, None)
    return metrics
