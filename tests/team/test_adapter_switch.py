"""`trl_marl.team.adapters.AdapterSwitch`: the same state as PEFT's `set_adapter`, without walking the module tree."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import PreTrainedTokenizerBase

from trl_marl.team import AgentTeam
from trl_marl.team.adapters import AdapterSwitch
from trl_marl.toy import build_toy_model

NAMES = ["agent_0", "agent_1", "agent_2"]


def three_adapters(tokenizer: PreTrainedTokenizerBase, **lora: object) -> torch.nn.Module:
    torch.manual_seed(0)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False, **lora)
    model = get_peft_model(build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0), config,
                           adapter_name=NAMES[0])
    for name in NAMES[1:]:
        model.add_adapter(name, config)
    model.set_requires_grad(NAMES, requires_grad=True)
    return model


def grad_flags(model: torch.nn.Module) -> dict[str, bool]:
    return {name: p.requires_grad for name, p in model.named_parameters()}


def logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_switch_gives_the_state_of_peft_set_adapter(tokenizer: PreTrainedTokenizerBase) -> None:
    fast, slow = three_adapters(tokenizer), three_adapters(tokenizer)
    switch = AdapterSwitch(fast)
    assert switch.fast and len(switch.layers) == 4  # q and v of two layers
    for name in ["agent_2", "agent_0", "agent_1", "agent_1"]:
        switch.activate(name, NAMES)
        slow.set_adapter(name)
        slow.set_requires_grad(NAMES, requires_grad=True)
        assert fast.active_adapter == slow.active_adapter == name
        assert fast.active_adapters == [name]
        assert all(layer.active_adapters == [name] for layer in switch.layers)
        assert grad_flags(fast) == grad_flags(slow)
        torch.testing.assert_close(logits(fast), logits(slow), rtol=0, atol=0)
    # the three adapters really differ (init_lora_weights=False), so the logits above tell them apart
    switch.activate("agent_0", NAMES)
    first = logits(fast)
    switch.activate("agent_2", NAMES)
    assert not torch.equal(first, logits(fast))


def test_only_the_trainable_adapters_require_gradients(tokenizer: PreTrainedTokenizerBase) -> None:
    model = three_adapters(tokenizer)
    switch = AdapterSwitch(model)
    switch.activate("agent_1", ["agent_0", "agent_2"])  # agent_1 frozen: stays frozen while active
    for name, flag in grad_flags(model).items():
        expected = "lora_" in name and (".agent_0." in name or ".agent_2." in name)
        assert flag == expected, name


def test_unknown_adapter_is_refused(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="agent_9"):
        AdapterSwitch(three_adapters(tokenizer)).activate("agent_9", NAMES)


def test_models_peft_cannot_switch_fast_take_peft_path(tokenizer: PreTrainedTokenizerBase) -> None:
    fast, slow = (three_adapters(tokenizer, modules_to_save=["lm_head"]) for _ in range(2))
    switch = AdapterSwitch(fast)
    assert not switch.fast  # `modules_to_save` wraps lm_head in an auxiliary module with its own active adapter
    switch.activate("agent_2", NAMES)
    slow.set_adapter("agent_2")
    slow.set_requires_grad(NAMES, requires_grad=True)
    assert fast.active_adapter == "agent_2"
    assert grad_flags(fast) == grad_flags(slow)
    torch.testing.assert_close(logits(fast), logits(slow), rtol=0, atol=0)


def test_team_switches_without_walking_the_module_tree(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    team = AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=0), 3, mode="adapters",
                           peft_config=lora, processing_class=tokenizer)
    model = team.models[0]
    team.adapter_control.activate(1)  # builds the switch
    walks = []
    original = torch.nn.Module.modules
    monkeypatch.setattr(torch.nn.Module, "modules", lambda self: walks.append(self) or original(self))
    for agent in (2, 0, 1):
        assert team.adapter_control.activate(agent) is model
        assert model.active_adapter == f"agent_{agent}"
    assert walks == []
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-2] for n in trainable} == {"agent_0", "agent_1", "agent_2"}
