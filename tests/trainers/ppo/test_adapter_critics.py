"""Critics as adapters (`value_adapter=True`, issue 51): each critic a LoRA adapter and a head on the policies' base.

The claim: an adapter critic computes what a separate value model computes when that model is the same base as a
sequence classifier with the same LoRA adapter and the same head, and a PPO run trains it the same way (values, GAE,
value loss, gradients, every backward layout); it saves as a PEFT adapter, resumes and loads; its memory is adapters
and heads only.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from helpers import StopAfter
from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.trainers.ppo.adapter_critic import HEAD_KEY, AdapterCritic
from trl_marl.trainers.ppo.value import load_value_model, response_values

warnings.filterwarnings("ignore")

LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def spread_reward(prompts: Any, completions: list[str], **kwargs: Any) -> list[float]:
    """A score that separates responses (a different length scores differently)."""
    return [float(len(c) % 3) for c in completions]


def config(tmp_path: Path, **overrides: Any) -> MultiAgentPPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_turns=2, per_device_train_batch_size=4,
        gradient_accumulation_steps=1, num_mini_batches=1, num_ppo_epochs=1, total_episodes=8, response_length=4,
        stop_token="eos", learning_rate=1e-2, report_to="none", save_strategy="no", logging_steps=1,
        num_sample_generations=0, disable_tqdm=True, seed=0, temperature=1.0, activation_checkpointing=False,
        kl_coef=0.05, team_mode="adapters", value_adapter=True,
    )
    kwargs.update(overrides)
    return MultiAgentPPOConfig(**kwargs)


def build(model_dir: Any, tmp_path: Path, value_model: Any = None, peft: Any = LORA, cls: type = MultiAgentPPOTrainer,
          **overrides: Any) -> MultiAgentPPOTrainer:
    args = config(tmp_path, **overrides)
    return cls(args=args, model=model_dir, env=TargetSumEnv(args.num_agents, num_turns=args.num_turns),
               reward_funcs=spread_reward, train_dataset=Dataset.from_dict({"target": [10] * 16}),
               peft_config=peft, value_model=value_model)


def perturb_critics(trainer: MultiAgentPPOTrainer, seed: int = 1) -> None:
    """Give every critic adapter a nonzero LoRA B (at init B = 0 hides whether the adapter is used at all)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in trainer.team.named_parameters():
            if ".critic_" in name and "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.5)


def separate_value_model(model_dir: str, critic: AdapterCritic) -> PeftModel:
    """The critic as a separate model: the same base as a one-label sequence classifier, LoRA with the same config,
    the critic's adapter and head loaded."""
    classifier = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    peft_model = get_peft_model(classifier, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      lora_dropout=0.0, task_type="SEQ_CLS"))
    state = critic.adapter_state()  # the LoRA tensors and the head, keyed as PEFT keys a classifier's adapter
    assert HEAD_KEY in state
    set_peft_model_state_dict(peft_model, {k: v.detach().clone() for k, v in state.items()})
    head = peft_model.base_model.model.score.modules_to_save["default"].weight
    torch.testing.assert_close(head, critic.score.weight)
    return peft_model


def rows(trainer: MultiAgentPPOTrainer, batch: int = 3, length: int = 9) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    vocab = trainer.team.tokenizers[0].vocab_size
    return torch.randint(3, vocab, (batch, length), generator=generator)


def test_values_and_value_loss_gradients_equal_a_separate_value_model(target_model_dir, tmp_path):
    trainer = build(target_model_dir, tmp_path)
    critics = trainer.wrapper.value_models
    assert [type(c) for c in critics] == [AdapterCritic, AdapterCritic]
    perturb_critics(trainer)
    pad = trainer.team.tokenizers[0].pad_token_id
    qr = rows(trainer)
    for index, critic in enumerate(critics):
        separate = separate_value_model(target_model_dir, critic)
        ours = response_values(critic, qr, pad, 4)
        theirs = response_values(separate, qr, pad, 4)
        assert ours.shape == (3, 5)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
        # and not the other critic's, nor the bare base's: the adapter is what this critic reads
        other = response_values(critics[1 - index], qr, pad, 4)
        assert (other - ours).abs().max() > 1e-3
        # the value loss's gradients: the critic's adapter and head against the separate model's
        trainer.team.zero_grad(set_to_none=True)
        critic.zero_grad(set_to_none=True)
        target = torch.linspace(-1, 1, ours.numel()).reshape(ours.shape)
        ((response_values(critic, qr, pad, 4) - target) ** 2).mean().backward()
        ((response_values(separate, qr, pad, 4) - target) ** 2).mean().backward()
        mine = {n.replace(f".{critic.adapter_name}.", "."): p.grad
                for n, p in trainer.team.models[0].named_parameters() if f".{critic.adapter_name}." in n}
        theirs_grads = {n.replace(".default.", "."): p.grad for n, p in separate.named_parameters()
                        if "lora_" in n}
        assert len(mine) == len(theirs_grads) == 4
        for name, grad in mine.items():
            assert grad is not None and grad.abs().max() > 0, name
            torch.testing.assert_close(grad, theirs_grads[name], rtol=1e-5, atol=1e-7, msg=name)
        torch.testing.assert_close(critic.score.weight.grad,
                                   separate.base_model.model.score.modules_to_save["default"].weight.grad,
                                   rtol=1e-5, atol=1e-7)
        # the policies' adapters got nothing from a value loss
        assert all(p.grad is None for n, p in trainer.team.named_parameters() if ".agent_" in n)


class Recording(MultiAgentPPOTrainer):
    """Records the trained parameters' gradients right before each optimizer step."""

    def create_optimizer_and_scheduler(self, num_training_steps: int) -> None:
        super().create_optimizer_and_scheduler(num_training_steps)
        self.grads: list[dict[str, torch.Tensor]] = []
        self.optimizer.register_step_pre_hook(self._record)

    def _record(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self.grads.append({name: p.grad.detach().clone() for name, p in self.wrapper.named_parameters()
                           if p.requires_grad and p.grad is not None})


def critic_key(name: str) -> str:
    """One name for a critic tensor in either run: `critic<i>/<module path>.lora_A` or `critic<i>/head`."""
    if name.startswith("value_models."):
        index = name.split(".")[1]
        if "score" in name:
            return f"critic{index}/head"
        path = name.split(".base_model.model.", 1)[1].replace(".default.", ".")
        return f"critic{index}/{path}"
    if ".critic_" in name:
        index = name.split(".critic_")[1].split(".")[0]
        path = name.split(".base_model.model.", 1)[1].replace(f".critic_{index}.", ".")
        return f"critic{index}/{path}"
    return name  # a policy tensor: the same name in both runs


# every backward layout: the summed loss, one backward per slot, each with every layer recomputed in the backward;
# a centralized critic (MAAC) over three agents; a policy per (turn, agent) with a critic each
LAYOUTS = {
    "summed": dict(backward_per_agent=False),
    "per_slot": dict(backward_per_agent=True),
    "summed-checkpointing": dict(backward_per_agent=False, activation_checkpointing=True),
    "per_slot-checkpointing-ga2": dict(backward_per_agent=True, activation_checkpointing=True,
                                       gradient_accumulation_steps=2, per_device_train_batch_size=2),
    "centralized-Q-3agents": dict(num_agents=3, critic="centralized", critic_type="Q", num_ppo_epochs=2),
    "agent_turn": dict(policy_sharing="agent_turn"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ppo_trains_an_adapter_critic_as_the_separate_value_model(target_model_dir, tmp_path, layout):
    settings = LAYOUTS[layout]
    ours = build(target_model_dir, tmp_path / "ours", cls=Recording, **settings)
    separate = [separate_value_model(target_model_dir, c) for c in ours.wrapper.value_models]
    theirs = build(target_model_dir, tmp_path / "theirs", cls=Recording, value_adapter=False,
                   value_model=separate, **settings)
    for run in (ours, theirs):
        torch.manual_seed(11)  # the same samples: the critics' construction drew from the RNG in one run only
        run.train()
    assert len(ours.grads) == len(theirs.grads) >= 2
    for step, (mine, reference) in enumerate(zip(ours.grads, theirs.grads)):
        mine = {critic_key(n): g for n, g in mine.items()}
        reference = {critic_key(n): g for n, g in reference.items()}
        assert mine.keys() == reference.keys()
        assert any(k.endswith("/head") for k in mine) and any("lora_A" in k and "critic" in k for k in mine)
        for name, grad in reference.items():
            torch.testing.assert_close(mine[name], grad, rtol=1e-4, atol=1e-6, msg=f"step {step}: {name}")
    for a, b in zip(ours.state.log_history, theirs.state.log_history, strict=True):
        for key in ("loss/value_avg", "val/clipfrac_avg", "loss/policy_avg", "objective/scores"):
            if key in b:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key


def saving(model_dir: str, output_dir: Path, **overrides: Any) -> MultiAgentPPOTrainer:
    return build(model_dir, output_dir, output_dir=str(output_dir), total_episodes=16, save_strategy="steps",
                 save_steps=2, **overrides)


def test_save_resume_and_load_value_model(target_model_dir, tmp_path):
    reference = saving(target_model_dir, tmp_path / "whole")
    reference.train()
    stopped = saving(target_model_dir, tmp_path / "cut")
    stopped.add_callback(StopAfter(2))
    stopped.train()
    checkpoint = tmp_path / "cut" / "checkpoint-2"
    folder = checkpoint / "value_model_0"
    # a PEFT adapter of a one-label sequence classifier, LoRA tensors and head only (no base weights)
    assert sorted(os.listdir(folder)) == ["adapter_config.json", "adapter_model.safetensors", "config.json"]
    tensors = load_file(folder / "adapter_model.safetensors")
    assert HEAD_KEY in tensors and all("lora_" in k or k == HEAD_KEY for k in tensors)
    assert sum(t.numel() for t in tensors.values()) < 0.1 * sum(
        p.numel() for p in stopped.team.models[0].get_base_model().parameters())
    resumed = saving(target_model_dir, tmp_path / "cut")
    resumed.train(resume_from_checkpoint=True)
    expected, got = reference.wrapper.state_dict(), resumed.wrapper.state_dict()
    assert expected.keys() == got.keys() and any(".critic_1." in k for k in got)
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=0, msg=name)
    # load_value_model: a PEFT sequence classifier whose values are the trained critic's
    loaded = load_value_model(str(tmp_path / "whole" / "checkpoint-4" / "value_model_1"), base_model=target_model_dir)
    assert isinstance(loaded, PeftModel)
    qr = rows(reference)
    pad = reference.team.tokenizers[0].pad_token_id
    torch.testing.assert_close(response_values(loaded, qr, pad, 4),
                               response_values(reference.wrapper.value_models[1], qr, pad, 4), rtol=0, atol=1e-6)
    # ... which starts another run's critics, as adapters or as a separate value model
    again = build(target_model_dir, tmp_path / "again", value_model=loaded)
    torch.testing.assert_close(response_values(again.wrapper.value_models[0], qr, pad, 4),
                               response_values(loaded, qr, pad, 4), rtol=0, atol=1e-6)
    separate = build(target_model_dir, tmp_path / "separate", value_model=loaded, value_adapter=False)
    assert separate.wrapper.value_models[0] is loaded


def test_a_saved_critic_loads_with_plain_peft(target_model_dir, tmp_path):
    from peft import AutoPeftModelForSequenceClassification

    trainer = build(target_model_dir, tmp_path)
    perturb_critics(trainer)
    trainer.wrapper.save_value_models(str(tmp_path / "saved"))
    config = json.loads((tmp_path / "saved" / "value_model_0" / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS" and config["modules_to_save"] == ["score"]
    assert config["base_model_name_or_path"] == target_model_dir
    plain = AutoPeftModelForSequenceClassification.from_pretrained(str(tmp_path / "saved" / "value_model_0"),
                                                                   num_labels=1)
    qr = rows(trainer)
    pad = trainer.team.tokenizers[0].pad_token_id
    torch.testing.assert_close(response_values(plain, qr, pad, 4),
                               response_values(trainer.wrapper.value_models[0], qr, pad, 4), rtol=0, atol=1e-6)


@pytest.mark.parametrize("settings, critics, models", [
    (dict(policy_sharing="shared", team_mode=None), ["critic_0"], [0]),  # one policy, one critic
    (dict(team_mode="models"), ["critic_0", "critic_1"], [0, 1]),  # one base per agent: each critic on its own
    (dict(team_mode="models", bases=2), ["critic_0", "critic_1"], [0, 1]),  # two different base models
    (dict(critic="centralized"), ["critic_0"], [0]),
    (dict(critic="centralized", team_mode="models", bases=2), ["critic_0"], [0]),  # MAAC on agent 0's base
])
def test_every_team_layout_puts_its_critics_beside_the_policies(target_model_dir, untrained_target_model_dir,
                                                                 tmp_path, settings, critics, models):
    settings = dict(settings)
    model = [target_model_dir, untrained_target_model_dir] if settings.pop("bases", 1) == 2 else target_model_dir
    trainer = build(model, tmp_path, **settings)
    values = trainer.wrapper.value_models
    assert [c.adapter_name for c in values] == critics and [c.model_index for c in values] == models
    before = {n: p.detach().clone() for n, p in trainer.wrapper.named_parameters()}
    trainer.train()
    changed = {n for n, p in trainer.wrapper.named_parameters() if not torch.equal(p.detach(), before[n])}
    for critic in critics:  # every critic's adapter and head trained; no base weight moved
        assert any(f".{critic}." in n for n in changed)
    assert all(n.startswith("value_models.") or "lora_" in n for n in changed)
    assert {f"value_models.{i}.score.weight" for i in range(len(critics))} <= changed


def test_a_frozen_agents_critic_stays_as_it_was(target_model_dir, tmp_path):
    trainer = build(target_model_dir, tmp_path, frozen_agents=[1])
    before = {n: p.detach().clone() for n, p in trainer.wrapper.named_parameters()}
    trainer.train()
    after = dict(trainer.wrapper.named_parameters())
    frozen = [n for n in before if ".critic_1." in n or n.startswith("value_models.1.") or ".agent_1." in n]
    trained = [n for n in before if ".critic_0." in n or n.startswith("value_models.0.")]
    assert frozen and trained
    assert all(torch.equal(after[n].detach(), before[n]) for n in frozen)
    assert any(not torch.equal(after[n].detach(), before[n]) for n in trained)


def test_what_adapter_critics_refuse(target_model_dir, tmp_path):
    with pytest.raises(ValueError, match="pass a `peft_config`"):
        build(target_model_dir, tmp_path, peft=None, team_mode="models")
    with pytest.raises(ValueError, match="value_train_layers"):
        config(tmp_path, value_train_layers=2)
    with pytest.raises(ValueError, match="torch_compile"):
        build(target_model_dir, tmp_path, torch_compile=True, activation_checkpointing=True)
    with pytest.raises(ValueError, match="PEFT sequence classifier"):
        build(target_model_dir, tmp_path, value_model=AutoModelForSequenceClassification.from_pretrained(
            target_model_dir, num_labels=1))


def test_critics_on_a_4bit_base(tmp_path_factory):
    """QLoRA: the frozen base is 4-bit; policies and critics train their adapters (and the heads) on it."""
    # the test extra installs it (through `qlora`); a bare `pip install -e .` does not
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (pip install 'trl-marl[qlora]')")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from trl_marl.toy import make_toy_model

    # hidden 64: bitsandbytes' CPU kernel repacks 4-bit weights in blocks of 64 input features
    path = make_toy_model(tmp_path_factory.mktemp("q4-target"), task="target", hidden_size=64, num_layers=1,
                          pretrain_steps=20, targets=(10,))
    base = AutoModelForCausalLM.from_pretrained(path, quantization_config=BitsAndBytesConfig(load_in_4bit=True),
                                                device_map="cpu")
    trainer = build(base, tmp_path_factory.mktemp("q4-run"))
    quantized = {n: p.detach().clone() for n, p in trainer.team.named_parameters() if p.dtype == torch.uint8}
    assert quantized
    before = {n: p.detach().clone() for n, p in trainer.wrapper.named_parameters() if p.requires_grad}
    trainer.train()
    after = dict(trainer.wrapper.named_parameters())
    assert any(".critic_0." in n and not torch.equal(after[n].detach(), p) for n, p in before.items())
    assert not torch.equal(after["value_models.1.score.weight"].detach(), before["value_models.1.score.weight"])
    for name, tensor in quantized.items():
        assert torch.equal(dict(trainer.team.named_parameters())[name].detach(), tensor), name


def test_value_adapter_rank_sets_the_critics_rank_and_keeps_alpha_over_rank(target_model_dir, tmp_path):
    trainer = build(target_model_dir, tmp_path, value_adapter_rank=2)
    model = trainer.team.models[0]
    assert model.peft_config["critic_0"].r == 2 and model.peft_config["agent_0"].r == 4
    assert model.peft_config["critic_0"].lora_alpha == 4  # 8 * 2 / 4: the policies' alpha / rank of 2
    shapes = {tuple(p.shape) for n, p in model.named_parameters() if "lora_A.critic_1" in n}
    assert shapes and all(rows == 2 for rows, _ in shapes)
    # a config file's rank stays harmless when a command line turns adapter critics off
    assert config(tmp_path, value_adapter=False, value_adapter_rank=2).value_adapter_rank == 2
    with pytest.raises(ValueError, match="integer >= 1"):
        config(tmp_path, value_adapter_rank=0)
