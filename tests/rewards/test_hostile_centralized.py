"""Tag parsing of centralised completions is linear (issue 54, item 5): a completion of many unclosed opening tags.

Before the fix, `split_sections` searched `<tag>(.*?)</tag>` with a regular expression, which tries every opening tag
and scans to the end from each: 72 KB of `<agent_0>` took 2.9 s, 450 KB about two minutes.
"""

from __future__ import annotations

import random
import re
import time

from trl_marl.envs import CentralizedEnv, TargetSumEnv
from trl_marl.envs.centralized import split_sections
from trl_marl.rewards import CentralizedReward, TargetSumReward

TAGS = ("agent_0", "agent_1")


def regex_sections(text: str, tags: tuple[str, ...]) -> list[str]:
    """The rule of `split_sections` as it was written before (a regular expression per tag): the oracle."""
    markers = [m for t in tags for m in (f"<{t}>", f"</{t}>")]
    parts = []
    for tag in tags:
        match = re.search(f"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", text, flags=re.DOTALL)
        part = match.group(1).strip() if match else ""
        parts.append("" if any(m in part for m in markers) else part)
    return parts


def test_split_sections_reads_what_the_regular_expression_read() -> None:
    pieces = ["<agent_0>", "</agent_0>", "<agent_1>", "</agent_1>", " 3 ", "7", "\n", "<agent_", "x", "</"]
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert split_sections(text, TAGS) == regex_sections(text, TAGS), text


def test_many_unclosed_opening_tags_are_split_in_linear_time() -> None:
    text = "<agent_0>" * 50_000 + "<agent_1>7</agent_1>"  # 450 KB; about two minutes with the regular expression
    start = time.perf_counter()
    assert split_sections(text, TAGS) == ["", "7"]
    assert time.perf_counter() - start < 2.0


def test_centralized_reward_scores_a_flood_of_tags_quickly() -> None:
    env = CentralizedEnv(TargetSumEnv(2))
    reward = CentralizedReward(env, TargetSumReward())
    flood = "<agent_0>" * 50_000 + "</agent_1>" * 50_000
    start = time.perf_counter()
    assert reward(["p"] * 2, [flood, "<agent_0>3</agent_0><agent_1>7</agent_1>"], target=[10, 10]) == [-0.5, 1.0]
    assert time.perf_counter() - start < 2.0
