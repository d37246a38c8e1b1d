"""Model cards for trained teams: what was trained, how, and with which rewards."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any


def _base_name(model: Any) -> str:
    """The name the user passed for the base model (e.g. "toy"), else its config's name or path, else its class."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    passed = getattr(base, "trl_marl_model_name", None) or getattr(model, "trl_marl_model_name", None)
    return passed or getattr(base.config, "_name_or_path", "") or type(base).__name__


def write_team_model_card(
    output_dir: str,
    team: Any,
    algorithm: str,
    paper: Mapping[str, str],
    reward_names: Sequence[str],
    env_name: str,
    config_summary: Mapping[str, Any],
    model_name: str | None = None,
    dataset_name: str | None = None,
    tags: Sequence[str] = (),
) -> str:
    """Write `README.md` (a Hugging Face model card with YAML metadata) describing a trained team.

    Returns:
        The path of the card.
    """
    os.makedirs(output_dir, exist_ok=True)
    agents = []
    for a in range(team.num_agents):
        adapter = team.agent_adapter[a]
        kind = f"LoRA adapter `{adapter}`" if adapter is not None else "full weights"
        agents.append(f"| {a} | `agent_{a}/` | {_base_name(team.policy(a))} | {kind} |")
    settings = "\n".join(f"- `{k}`: {v}" for k, v in config_summary.items())
    rewards = ", ".join(f"`{r}`" for r in reward_names)
    unique_tags = sorted(set(tags))
    title = model_name or os.path.basename(os.path.abspath(output_dir))
    lines = [
        "---",
        "library_name: trl-marl",
        "tags:",
        *[f"- {t}" for t in unique_tags],
        *([f"datasets:\n- {dataset_name}"] if dataset_name else []),
        "---",
        "",
        f"# {title}",
        "",
        f"A team of {team.num_agents} LLM agents trained together with **{algorithm}** using "
        f"[trl-marl](https://github.com/trl-marl/trl-marl), on the `{env_name}` environment"
        + (f" and the `{dataset_name}` dataset." if dataset_name else "."),
        "",
        f"Paper: [{paper.get('title', '')}](https://arxiv.org/abs/{paper.get('id', '')}) "
        f"(arXiv {paper.get('id', '')}).",
        "",
        f"## Agents (team mode `{team.mode}`)",
        "",
        "| agent | folder | base model | trained weights |",
        "|---|---|---|---|",
        *agents,
        "",
        f"## Rewards\n\n{rewards}",
        "",
        f"## Training settings\n\n{settings}",
        "",
        "## Loading",
        "",
        "```python",
        "from trl_marl import AgentTeam",
        "",
        f'team = AgentTeam.from_pretrained("{title}")',
        "```",
        "",
    ]
    path = os.path.join(output_dir, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
