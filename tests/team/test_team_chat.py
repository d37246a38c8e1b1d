"""Using a trained team: `AgentTeam.chat` / `chat_team` (text in, text out), adapters that plain PEFT loads, and an
agent's adapter merged into a standalone model (`merged_agent`, `save_merged`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import AutoModelForCausalLM

from trl_marl import AgentTeam
from trl_marl.utils.tokens import load_tokenizer

PROMPTS = ["T=10:", "T=7:", "3+4="]


def lora_team(model_dir: str, num_agents: int = 2) -> AgentTeam:
    """A team in `adapters` mode whose agents' adapters are random (not the identity LoRA starts as): every agent
    computes another policy than the base model."""
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False)
    team = AgentTeam.build(model_dir, num_agents, peft_config=lora)
    return team.eval()


def manual_greedy(model: torch.nn.Module, tokenizer, text: str, max_new_tokens: int) -> str:
    """The answer by hand: the chat template over one user message, `generate` greedy, the new tokens decoded."""
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, return_dict=True)["input_ids"]
    out = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)


@pytest.fixture(scope="module")
def team(target_model_dir: str) -> AgentTeam:
    return lora_team(target_model_dir)


def test_chat_answers_as_greedy_generate_with_the_chat_template(team: AgentTeam) -> None:
    tokenizer = team.tokenizers[0]
    peft_model = team.models[0]
    for agent in (0, 1):
        peft_model.set_adapter(f"agent_{agent}")
        expected = [manual_greedy(peft_model, tokenizer, p, max_new_tokens=6) for p in PROMPTS]
        assert team.chat(agent, PROMPTS, max_new_tokens=6) == expected
    # the two agents' adapters differ, so do (some of) their answers; one string is one prompt
    assert team.chat(0, PROMPTS, max_new_tokens=6) != team.chat(1, PROMPTS, max_new_tokens=6)
    assert team.chat(1, "T=7:", max_new_tokens=6) == [team.chat(1, PROMPTS, max_new_tokens=6)[1]]


def test_chat_team_gives_every_agent_the_same_prompts(team: AgentTeam) -> None:
    answers = team.chat_team(PROMPTS, max_new_tokens=6)
    assert answers == [team.chat(0, PROMPTS, max_new_tokens=6), team.chat(1, PROMPTS, max_new_tokens=6)]
    for row in answers:
        assert all(isinstance(text, str) and "</s>" not in text for text in row)  # special tokens removed


def test_chat_samples_reproducibly_with_a_seed(team: AgentTeam) -> None:
    first = team.chat(0, PROMPTS * 4, max_new_tokens=6, do_sample=True, temperature=1.5, seed=3)
    assert team.chat(0, PROMPTS * 4, max_new_tokens=6, do_sample=True, temperature=1.5, seed=3) == first
    assert len(first) == 12


@pytest.mark.parametrize("call, message", [
    (lambda t: t.chat(2, PROMPTS), "`agent` must be one of 0..1"),
    (lambda t: t.chat(0, PROMPTS, max_new_tokens=0), "`max_new_tokens` must be a positive integer"),
    (lambda t: t.chat(0, PROMPTS, do_sample=True, temperature=0.0), "`temperature` must be > 0"),
    (lambda t: t.merged_agent(-1), "`agent` must be one of 0..1"),
])
def test_bad_arguments_name_the_field(team: AgentTeam, call, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        call(team)


def test_saved_adapter_loads_with_auto_peft_model(team: AgentTeam, target_model_dir: str, tmp_path: Path) -> None:
    """A saved agent is a PEFT adapter folder with `task_type` CAUSAL_LM and its base's folder recorded, so that
    `AutoPeftModelForCausalLM.from_pretrained(agent_dir)` alone rebuilds the agent's policy."""
    from peft import AutoPeftModelForCausalLM

    team.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "agent_1" / "adapter_config.json").read_text())
    assert config["task_type"] == "CAUSAL_LM"
    assert config["base_model_name_or_path"] == target_model_dir
    model = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "agent_1").eval()
    ids = torch.tensor([[5, 9, 12, 7, 3]])
    team.models[0].set_adapter("agent_1")
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, team.models[0](input_ids=ids).logits)


def test_offline_base_name_loads_with_plain_peft(tmp_path: Path) -> None:
    """A team built on an offline name ("toy") keeps the name (team_config.json) and records in each adapter the
    folder the name stands for, so that a plain `AutoPeftModelForCausalLM` loads an agent offline (PEFT tried the
    Hub for "toy" before, issue 53)."""
    from peft import AutoPeftModelForCausalLM

    from trl_marl.utils.model_names import resolve_model_name

    team = lora_team("toy")
    team.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "agent_0" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == resolve_model_name("toy") and config["task_type"] == "CAUSAL_LM"
    assert json.loads((tmp_path / "team_config.json").read_text())["base_models"] == ["toy"]
    assert team.models[0].peft_config["agent_0"].base_model_name_or_path == "toy"  # the team keeps the name
    model = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "agent_0").eval()
    assert type(model).__name__ == "PeftModelForCausalLM"
    ids = torch.tensor([[5, 9, 12, 7, 3]])
    team.models[0].set_adapter("agent_0")
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, team.models[0](input_ids=ids).logits)


def test_merged_agent_is_a_plain_model_with_the_agents_policy(target_model_dir: str, tmp_path: Path) -> None:
    team = lora_team(target_model_dir)
    ids = torch.tensor([[5, 9, 12, 7, 3, 4]])
    peft_model = team.models[0]
    with torch.no_grad():
        peft_model.set_adapter("agent_1")
        agent_logits = peft_model(input_ids=ids).logits
        with peft_model.disable_adapter():
            base_logits = peft_model(input_ids=ids).logits
    assert not torch.allclose(agent_logits, base_logits, atol=1e-3)  # the adapter changes the policy

    path = team.save_merged(1, tmp_path / "agent_1_merged")
    files = {p.name for p in Path(path).iterdir()}
    assert "config.json" in files and "adapter_config.json" not in files
    merged = AutoModelForCausalLM.from_pretrained(path).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, agent_logits, atol=1e-5, rtol=1e-4)
        # the team keeps both adapters, unmerged
        assert set(peft_model.peft_config) == {"agent_0", "agent_1"}
        peft_model.set_adapter("agent_1")
        torch.testing.assert_close(peft_model(input_ids=ids).logits, agent_logits)
    assert load_tokenizer(path).get_vocab() == team.tokenizers[1].get_vocab()
    # greedy text through the merged model is the agent's own
    assert manual_greedy(merged, team.tokenizers[1], "T=10:", 6) == team.chat(1, "T=10:", max_new_tokens=6)[0]


def test_merged_agent_of_a_models_team_is_a_copy(target_model_dir: str) -> None:
    team = AgentTeam.build(target_model_dir, 2, mode="models").eval()
    merged = team.merged_agent(1)
    assert merged is not team.policy(1)
    for (name, mine), (_, theirs) in zip(merged.named_parameters(), team.policy(1).named_parameters()):
        assert torch.equal(mine, theirs), name
        assert mine.data_ptr() != theirs.data_ptr()
