"""Model cards for trained teams: what was trained, how, and with which rewards."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .utils.model_names import resolve_model_name

if TYPE_CHECKING:
    from .team.policies import AgentTeam

OFFLINE_MARKER_FILE = "trl_marl_real.json"
"""The file in the folder of an offline real model (`offline_models.smollm2`) that records its Hub id (`hub_id`)."""


def _base_name(model: Any) -> str:
    """The name the user passed for the base model (e.g. "toy"), else its config's name or path, else its class."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    passed = getattr(base, "trl_marl_model_name", None) or getattr(model, "trl_marl_model_name", None)
    return passed or getattr(base.config, "_name_or_path", "") or type(base).__name__


def base_model_source(name: str) -> tuple[str | None, str | None]:
    """What the card says of the base model `name`: its Hub id for the `base_model:` metadata (None when it has
    none) and, for an offline name of trl-marl, a sentence on how to load an agent without the Hub (None otherwise).

    Example: `base_model_source("smollm2-135m-instruct")[0] == "HuggingFaceTB/SmolLM2-135M-Instruct"`;
    `base_model_source("toy")[0] is None` (a toy model, on no Hub); `base_model_source("gpt2") == ("gpt2", None)`.
    """
    resolved = resolve_model_name(name) if name else name
    if not name or resolved == name:  # a Hub id, a local folder, or a class name
        hub_like = bool(name) and name.count("/") <= 1 and not os.path.exists(name) and not name.startswith((".", "/"))
        return (name if hub_like and "/" in name else None), None
    hub_id = None
    try:
        with open(os.path.join(resolved, OFFLINE_MARKER_FILE)) as f:
            hub_id = json.load(f).get("hub_id")
    except (OSError, ValueError, AttributeError):
        pass
    what = (f"trl-marl's offline copy of `{hub_id}` (no Hub)" if hub_id else
            "a toy model of trl-marl (`trl_marl.toy`, for tests and demos; on no Hub)")
    route = (f"The base model `{name}` is {what}. Its adapters record the folder trl-marl built it in on the machine "
             "that saved them, where `AutoPeftModelForCausalLM` loads an agent offline; on any machine with trl-marl, "
             "load an agent with its base from the folder trl-marl gives the name:\n\n"
             "```py\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM\n"
             "from trl_marl.utils.model_names import resolve_model_name\n\n"
             f'base = AutoModelForCausalLM.from_pretrained(resolve_model_name("{name}"))\n'
             'model = PeftModel.from_pretrained(base, "agent_0")  # the agent\'s folder\n```')
    return hub_id, route


def write_team_model_card(
    output_dir: str,
    team: AgentTeam,
    algorithm: str,
    paper: Mapping[str, str],
    reward_names: Sequence[str],
    env_name: str,
    config_summary: Mapping[str, Any],
    model_name: str | None = None,
    dataset_name: str | None = None,
    tags: Sequence[str] = (),
    global_step: int | None = None,
) -> str:
    """Write `README.md` (a Hugging Face model card with YAML metadata) describing what `output_dir` holds.

    A team saved by `AgentTeam.save_pretrained` (`team_config.json`, `agent_<i>/`) gets a card with one row per agent
    and an `AgentTeam.from_pretrained` snippet; a single policy saved at the top of the folder (the drop-in
    `PPOTrainer`: `config.json`, no `team_config.json`) gets a card with a `transformers` snippet. The snippet loads
    the folder by its name, as written, from the folder's parent directory (or from the Hub once pushed there).

    The YAML metadata names the base model (`base_model:`, the Hub id of an offline name such as
    `smollm2-135m-instruct`; none for the toy models), the dataset and the number of training steps where they are
    known; a base model with an offline name gets the route that loads an agent without the Hub.

    Args:
        global_step: The optimizer steps trained, when known (the card's `training_steps`).

    Returns:
        The path of the card.
    """
    os.makedirs(output_dir, exist_ok=True)
    single = (os.path.exists(os.path.join(output_dir, "config.json"))
              and not os.path.exists(os.path.join(output_dir, "team_config.json")))
    settings = "\n".join(f"- `{k}`: {v}" for k, v in config_summary.items())
    rewards = ", ".join(f"`{r}`" for r in reward_names)
    unique_tags = sorted(set(tags))
    title = model_name or os.path.basename(os.path.abspath(output_dir))
    trained = (f"trained with **{algorithm}** using [trl-marl](https://github.com/trl-marl/trl-marl), on the "
               f"`{env_name}` environment" + (f" and the `{dataset_name}` dataset." if dataset_name else "."))
    after: list[str] = []
    if single:
        policy = team.policy(0)
        adapter = team.agent_adapter[0]
        weights = f"a LoRA adapter on `{_base_name(policy)}`" if adapter is not None else "full weights"
        intro = [f"A language model (base model `{_base_name(policy)}`) {trained}", "",
                 f"The folder holds the policy alone ({weights}), loadable with `transformers`."]
        snippet = ["from transformers import AutoModelForCausalLM, AutoTokenizer", "",
                   f'model = AutoModelForCausalLM.from_pretrained("{title}")',
                   f'tokenizer = AutoTokenizer.from_pretrained("{title}")']
        if adapter is not None:  # a PEFT folder: adapter_config.json names the base model
            snippet = ["from peft import AutoPeftModelForCausalLM", "from transformers import AutoTokenizer", "",
                       f'model = AutoPeftModelForCausalLM.from_pretrained("{title}")',
                       f'tokenizer = AutoTokenizer.from_pretrained("{title}")']
    else:
        agents = []
        for a in range(team.num_agents):
            adapter = team.agent_adapter[a]
            kind = f"LoRA adapter `{adapter}`" if adapter is not None else "full weights"
            agents.append(f"| {a} | `agent_{a}/` | {_base_name(team.policy(a))} | {kind} |")
        who = ("One LLM agent " + trained if team.num_agents == 1 else
               f"A team of {team.num_agents} LLM agents " + trained.replace("trained with", "trained together with"))
        intro = [who,
                 "", f"## Agents (team mode `{team.mode}`)", "",
                 "| agent | folder | base model | trained weights |", "|---|---|---|---|", *agents]
        snippet = ["from trl_marl import AgentTeam", "", f'team = AgentTeam.from_pretrained("{title}")',
                   "# every agent's answer (the chat template applied, greedy); `team.chat(agent, prompts)` for one",
                   'answers = team.chat_team(["Hello! Who are you?"], max_new_tokens=64)',
                   "for agent, texts in enumerate(answers):",
                   '    print(f"agent {agent}: {texts[0]}")']
        merged = "merged into its base model" if any(a is not None for a in team.agent_adapter) else "as one model"
        after = ["", "From the command line:", "", "```bash",
                 f'trl-marl generate --team {title} --prompt "Hello! Who are you?"', "```", "",
                 f"`team.save_merged(agent, path)` saves one agent {merged}, a folder that "
                 "`transformers.AutoModelForCausalLM` (or vLLM) loads on its own."]
    bases = sorted({_base_name(team.policy(a)) for a in range(team.num_agents)})
    sources = [base_model_source(base) for base in bases]
    hub_ids = sorted({hub_id for hub_id, _ in sources if hub_id})
    # a `py` block: the card's one `python` block stays the snippet that loads the whole folder
    routes = [route if not single else route.replace('"agent_0")  # the agent\'s folder', f'"{title}")')
              for _, route in sources if route]
    if routes and any(a is not None for a in team.agent_adapter):
        after += ["", "### Without the Hub", "", *routes]
    if global_step is not None:
        settings += f"\n- training steps: {global_step}"
    lines = [
        "---",
        "library_name: trl-marl",
        *(["base_model:", *[f"- {hub_id}" for hub_id in hub_ids]] if hub_ids else []),
        "tags:",
        *[f"- {t}" for t in unique_tags],
        *([f"datasets:\n- {dataset_name}"] if dataset_name else []),
        *([f"training_steps: {global_step}"] if global_step is not None else []),
        "---",
        "",
        f"# {title}",
        "",
        *intro,
        "",
        f"Paper: [{paper.get('title', '')}](https://arxiv.org/abs/{paper.get('id', '')}) "
        f"(arXiv {paper.get('id', '')}).",
        "",
        f"## Rewards\n\n{rewards}",
        "",
        f"## Training settings\n\n{settings}",
        "",
        "## Loading",
        "",
        "```python",
        *snippet,
        "```",
        *after,
        "",
    ]
    path = os.path.join(output_dir, "README.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
