"""The model card of a team on an offline base model (issue 53, item 4): `base_model:` names the real Hub id (none for
a toy), the dataset and the steps are in its metadata, and the card gives the route that loads an agent with plain
PEFT without the Hub, which works offline in seconds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from peft import LoraConfig

from trl_marl import AgentTeam
from trl_marl.model_card import base_model_source, write_team_model_card

PAPER = {"title": "LLM Collaboration With Multi-Agent Reinforcement Learning", "id": "2508.04652"}


def card_of(team: AgentTeam, out: Path, **kwargs) -> str:
    team.save_pretrained(out)
    path = write_team_model_card(str(out), team, "MAGRPO", PAPER, ["writing_team"], "CooperativeWritingEnv",
                                 {"learning_rate": 1e-5}, **kwargs)
    return Path(path).read_text()


def metadata(card: str) -> str:
    return card.split("---\n", 2)[1]


def test_hub_ids_and_folders_get_no_offline_route(tmp_path):
    assert base_model_source("HuggingFaceTB/SmolLM2-135M-Instruct") == ("HuggingFaceTB/SmolLM2-135M-Instruct", None)
    assert base_model_source(str(tmp_path)) == (None, None)  # a local folder: no Hub id to name


@pytest.mark.slow
def test_a_toy_team_card_says_toy_names_dataset_and_steps_and_its_route_loads_offline_fast(tmp_path):
    lora = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"])
    team = AgentTeam.build("toy", 2, peft_config=lora)
    out = tmp_path / "team"
    card = card_of(team, out, dataset_name="trl-marl/team_writing", global_step=12)
    head = metadata(card)
    assert "base_model:" not in head  # a toy model is on no Hub
    assert "datasets:\n- trl-marl/team_writing" in head and "training_steps: 12" in head
    assert "- training steps: 12" in card
    assert "toy model of trl-marl" in card and 'resolve_model_name("toy")' in card
    route = re.search(r"### Without the Hub.*?```py\n(.*?)```", card, re.S).group(1)
    script = textwrap.dedent(f"""
        import time
        import peft, transformers, trl_marl.utils.model_names  # the imports are not what is timed
        start = time.perf_counter()
        {textwrap.indent(route, '        ').strip()}
        assert type(model).__name__ == "PeftModelForCausalLM", type(model)
        print(f"LOADED {{time.perf_counter() - start:.2f}}")
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-c", script], cwd=out, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    seconds = float(result.stdout.split("LOADED ")[1])
    assert seconds < 5, seconds  # no Hub retries (they took 68 s)


def test_the_real_models_card_names_its_hub_id(real_model_dir, tmp_path):
    hub_id, route = base_model_source("smollm2-135m-instruct")
    assert hub_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert route is not None and "offline copy of `HuggingFaceTB/SmolLM2-135M-Instruct`" in route
    assert 'resolve_model_name("smollm2-135m-instruct")' in route
