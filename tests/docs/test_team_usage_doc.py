"""The "Using a trained team" snippet of docs/magrpo.md runs as written, on a team saved where it looks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM

from trl_marl import AgentTeam

ROOT = Path(__file__).resolve().parents[2]


def usage_block() -> str:
    page = (ROOT / "docs" / "magrpo.md").read_text(encoding="utf-8")
    section = page.split("## Using a trained team", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "the section has one Python snippet"
    return blocks[0]


def test_the_snippet_loads_a_saved_team_answers_and_merges(target_model_dir: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    saved = AgentTeam.build(target_model_dir, 2, peft_config=lora).eval()
    monkeypatch.chdir(tmp_path)
    saved.save_pretrained("my-team")
    scope: dict = {}
    exec(compile(usage_block(), "docs/magrpo.md[Using a trained team]", "exec"), scope)  # noqa: S102
    prompts = ["What is 2 + 3?", "Name a prime."]
    assert scope["answers"] == saved.chat_team(prompts, max_new_tokens=32)
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "my-team-agent1").eval()
    ids = torch.tensor([[4, 8, 15, 16]])
    saved.models[0].set_adapter("agent_1")
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, saved.models[0](input_ids=ids).logits,
                                   atol=1e-5, rtol=1e-4)
