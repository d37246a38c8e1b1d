"""Tests of `trl_marl.team.AgentTeam`: the three layouts, saving/loading, reference policies and errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from trl_marl.team import AgentBatch, AgentTeam, pad_left, pad_right, tokenize_prompts
from trl_marl.toy import build_toy_model, build_toy_tokenizer

MODES = ("adapters", "models", "shared")
GREEDY = GenerationConfig(do_sample=False, max_new_tokens=4)
# Each agent's prompts (different lengths, so that left padding is exercised).
PROMPTS: list[list[str]] = [["Q:12+3=A:", "T:5?"], ["Q:1+1=A:", "Q:45+67=A:"]]
# Each agent's completions (different lengths, so that right padding and completion masks are exercised).
COMPLETIONS: list[list[str]] = [["15", "7 "], ["2", "112"]]


@pytest.fixture(autouse=True)
def seeded() -> None:
    """LoRA initialisation draws from the global RNG: seed it so that every test is deterministic."""
    torch.manual_seed(0)


# ----------------------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------------------


def lora_config() -> LoraConfig:
    return LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def toy_model(tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> PreTrainedModel:
    return build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=seed)


def make_team(mode: str, tokenizer: PreTrainedTokenizerBase, num_agents: int = 2) -> AgentTeam:
    peft_config = lora_config() if mode == "adapters" else None
    return AgentTeam.build(toy_model(tokenizer), num_agents, mode=mode, peft_config=peft_config,
                           processing_class=tokenizer)


def make_batch(tokenizer: PreTrainedTokenizerBase, prompts: list[str], completions: list[str]) -> AgentBatch:
    prompt_ids, prompt_mask = pad_left(tokenize_prompts(tokenizer, prompts), tokenizer.pad_token_id)
    completion_tokens = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                         for c in completions]
    completion_ids, completion_mask = pad_right(completion_tokens, tokenizer.pad_token_id)
    return AgentBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)


def agent_batches(team: AgentTeam) -> list[AgentBatch]:
    """One batch per agent, each with its own prompts and completions."""
    return [make_batch(team.tokenizers[a], PROMPTS[a], COMPLETIONS[a]) for a in range(team.num_agents)]


def masked_sum(logps: torch.Tensor, batch: AgentBatch) -> torch.Tensor:
    return (logps * batch.completion_mask).sum()


def adapter_params(team: AgentTeam, adapter: str) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in team.named_parameters() if "lora_" in n and f".{adapter}." in n}


def train_steps(team: AgentTeam, steps: int = 3, lr: float = 5e-2) -> None:
    """A few optimizer steps that push each agent towards its own completions, so that the agents differ.

    The optimizer is built the way `transformers.Trainer.create_optimizer` builds it: from the parameters that
    require gradients right now.
    """
    team.train()
    batches = agent_batches(team)
    optimizer = torch.optim.Adam([p for p in team.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        results = team(batches)
        loss = -sum(masked_sum(r[0], b) for r, b in zip(results, batches) if r is not None)
        loss.backward()
        optimizer.step()
    team.eval()


def perturb(team: AgentTeam, seed: int, scale: float = 0.3) -> None:
    """Add Gaussian noise to the team's weights: its LoRA weights only, when it has adapters."""
    generator = torch.Generator().manual_seed(seed)
    only_lora = any(adapter is not None for adapter in team.agent_adapter)
    with torch.no_grad():
        for name, param in team.named_parameters():
            if only_lora and "lora_" not in name:
                continue
            param.add_(torch.randn(param.shape, generator=generator) * scale)


def all_policy_logps(team: AgentTeam, batches: list[AgentBatch]) -> list[torch.Tensor]:
    return [team.policy_logps(a, batches[a]) for a in range(team.num_agents)]


def reference_free_logps(model: PreTrainedModel, batch: AgentBatch) -> torch.Tensor:
    """Per-token log-probabilities of the completions, computed here without any `AgentTeam` code."""
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    width = batch.completion_ids.size(1)
    logits = logits[:, -width - 1: -1, :].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)


def assert_logps_close(actual: torch.Tensor, expected: torch.Tensor, batch: AgentBatch) -> None:
    mask = batch.completion_mask.bool()
    torch.testing.assert_close(actual[mask], expected[mask], atol=1e-5, rtol=1e-5)


def logps_differ(a: torch.Tensor, b: torch.Tensor, batch: AgentBatch, tol: float = 1e-3) -> bool:
    mask = batch.completion_mask.bool()
    return bool((a[mask] - b[mask]).abs().max() > tol)


# ----------------------------------------------------------------------------------------------------------------
# 1. Construction, save_pretrained / from_pretrained round trip in every mode
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_build_layout(mode: str, tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team(mode, tokenizer)
    assert team.mode == mode
    assert team.num_agents == 2
    expected_models = 2 if mode == "models" else 1
    assert len(team.models) == expected_models
    assert team.agent_model == ([0, 1] if mode == "models" else [0, 0])
    assert team.agent_adapter == (["agent_0", "agent_1"] if mode == "adapters" else [None, None])
    if mode == "models":
        # Separate copies of the weights, not two references to one model.
        ptrs = [{p.data_ptr() for p in m.parameters()} for m in team.models]
        assert not ptrs[0] & ptrs[1]
    if mode == "adapters":
        # One base model plus two adapters: every base weight is frozen.
        for name, param in team.named_parameters():
            assert param.requires_grad == ("lora_" in name), name


def test_build_default_mode(tokenizer: PreTrainedTokenizerBase) -> None:
    with_peft = AgentTeam.build(toy_model(tokenizer), 2, peft_config=lora_config(), processing_class=tokenizer)
    assert with_peft.mode == "adapters"
    without_peft = AgentTeam.build(toy_model(tokenizer), 2, processing_class=tokenizer)
    assert without_peft.mode == "models"
    as_list = AgentTeam.build([toy_model(tokenizer), toy_model(tokenizer, seed=1)], 2, processing_class=tokenizer)
    assert as_list.mode == "models"
    assert AgentTeam.build(as_list, 2) is as_list


@pytest.mark.parametrize("mode", MODES)
def test_save_and_from_pretrained_round_trip(mode: str, tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    team = make_team(mode, tokenizer)
    batches = agent_batches(team)
    team.eval()
    before = all_policy_logps(team, batches)
    train_steps(team)
    trained = all_policy_logps(team, batches)
    for a in range(team.num_agents):
        assert logps_differ(trained[a], before[a], batches[a]), f"training did not change agent {a}"
    if mode != "shared":
        # The agents have their own weights now: on the same samples they disagree.
        assert logps_differ(team.policy_logps(0, batches[1]), team.policy_logps(1, batches[1]), batches[1])
    generations = team.generate(PROMPTS, GREEDY)

    out = tmp_path / "team"
    team.save_pretrained(out)
    assert (out / "agent_0").is_dir() and (out / "agent_1").is_dir()
    config = json.loads((out / "team_config.json").read_text())
    assert config["mode"] == mode and config["num_agents"] == 2

    loaded = AgentTeam.from_pretrained(out)
    assert loaded.mode == mode
    assert loaded.num_agents == 2
    assert len(loaded.models) == len(team.models)
    assert loaded.agent_adapter == team.agent_adapter
    loaded.eval()
    for a in range(team.num_agents):
        assert_logps_close(loaded.policy_logps(a, batches[a]), trained[a], batches[a])
        assert loaded.tokenizers[a].get_vocab() == tokenizer.get_vocab()
    assert loaded.generate(PROMPTS, GREEDY) == generations


def test_adapter_checkpoint_is_a_standalone_peft_adapter(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    """`agent_<i>/` loads with plain PEFT onto the saved base model and reproduces the agent's policy."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    team = make_team("adapters", tokenizer)
    perturb(team, seed=1)
    team.eval()
    batches = agent_batches(team)
    team.save_pretrained(tmp_path)
    # The toy base model has no loadable name, so it is saved next to the adapters, without any LoRA weight.
    base = AutoModelForCausalLM.from_pretrained(tmp_path / "base_model")
    assert not any("lora" in n or "base_layer" in n for n in base.state_dict())
    original = toy_model(tokenizer)
    for name, value in original.state_dict().items():
        torch.testing.assert_close(base.state_dict()[name], value, msg=f"base weight {name} not saved as is")
    agent_1 = PeftModel.from_pretrained(base, tmp_path / "agent_1").eval()
    assert_logps_close(reference_free_logps(agent_1, batches[1]), team.policy_logps(1, batches[1]), batches[1])


# ----------------------------------------------------------------------------------------------------------------
# 2. adapters mode: mixed-adapter generation, trainability, gradients
# ----------------------------------------------------------------------------------------------------------------


def test_mixed_adapter_generation_matches_per_adapter_generation(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    perturb(team, seed=2)
    team.train()  # as in training: `generate` must switch to eval mode for the mixed batch, then back
    batched = team.generate(PROMPTS, GREEDY)
    assert team.training

    peft_model = team.models[0]
    for a in range(team.num_agents):
        prompt_ids, completion_ids = batched[a]
        assert prompt_ids == tokenize_prompts(tokenizer, PROMPTS[a])
        assert len(completion_ids) == len(PROMPTS[a])
        assert all(0 < len(c) <= GREEDY.max_new_tokens for c in completion_ids)
        # Only this agent's prompts, only its adapter active: plain PEFT generation.
        ids, mask = pad_left(prompt_ids, tokenizer.pad_token_id)
        peft_model.set_adapter(f"agent_{a}")
        peft_model.eval()
        with torch.no_grad():
            out = peft_model.generate(input_ids=ids, attention_mask=mask, generation_config=GREEDY)
        alone = [row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
                 for row in out[:, ids.size(1):].tolist()]
        assert completion_ids == alone, f"agent {a}"
        # The team's own single-agent path agrees too.
        single = [PROMPTS[b] if b == a else [] for b in range(team.num_agents)]
        assert team.generate(single, GREEDY)[a][1] == completion_ids
    # The adapters matter: on the same prompts the two agents answer differently.
    same = team.generate([PROMPTS[0], PROMPTS[0]], GREEDY)
    assert same[0][1] != same[1][1]


def test_every_adapter_trainable_after_build(tokenizer: PreTrainedTokenizerBase) -> None:
    """`Trainer.create_optimizer` runs before any forward and keeps only parameters that require gradients."""
    team = make_team("adapters", tokenizer)
    for a in range(team.num_agents):
        params = adapter_params(team, f"agent_{a}")
        assert params, f"no LoRA weights for agent {a}"
        assert all(p.requires_grad for p in params.values()), f"agent {a}'s adapter is frozen after build"


def test_every_adapter_stays_trainable(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    team.train()
    batches = agent_batches(team)

    def check(when: str) -> None:
        for a in range(team.num_agents):
            frozen = [n for n, p in adapter_params(team, f"agent_{a}").items() if not p.requires_grad]
            assert not frozen, f"agent {a}'s adapter frozen {when}: {frozen}"

    team(batches)
    check("after forward")
    team([None, batches[1]])
    team([batches[0], None])
    check("after single-agent forwards")
    team.policy_logps(1, batches[1])
    check("after policy_logps")
    team.reference_logps(0, batches[0])
    team.reference_logps(1, batches[1])
    check("after reference_logps")
    team.generate(PROMPTS, GREEDY)
    team.generate([PROMPTS[0], []], GREEDY)
    check("after generate")
    for name, param in team.named_parameters():
        if "lora_" not in name:
            assert not param.requires_grad, f"base weight {name} became trainable"


def test_backward_reaches_both_adapters_and_no_base_weight(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    perturb(team, seed=3)
    team.train()
    batches = agent_batches(team)
    results = team(batches)
    assert all(r is not None for r in results)
    loss = sum(masked_sum(r[0], b) for r, b in zip(results, batches) if r is not None)
    loss.backward()
    for a in range(team.num_agents):
        params = adapter_params(team, f"agent_{a}")
        for name, param in params.items():
            assert param.grad is not None and param.grad.abs().sum() > 0, f"no gradient for {name}"
    for name, param in team.named_parameters():
        if "lora_" not in name:
            assert param.grad is None, f"base weight {name} got a gradient"


def test_backward_of_one_agent_only_reaches_its_adapter(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    perturb(team, seed=4)
    team.train()
    batches = agent_batches(team)
    results = team([None, batches[1]])
    assert results[0] is None and results[1] is not None
    masked_sum(results[1][0], batches[1]).backward()
    assert all(p.grad is None or not p.grad.any() for p in adapter_params(team, "agent_0").values())
    assert all(p.grad is not None and p.grad.any() for p in adapter_params(team, "agent_1").values())


def test_forward_matches_policy_logps_and_entropy(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    perturb(team, seed=5)
    team.eval()
    batches = agent_batches(team)
    results = team(batches, compute_entropy=True)
    for a, result in enumerate(results):
        assert result is not None
        logps, entropy = result
        assert logps.shape == batches[a].completion_ids.shape
        assert entropy is not None and entropy.shape == logps.shape
        assert (entropy >= 0).all()
        assert_logps_close(logps.detach(), team.policy_logps(a, batches[a]), batches[a])
        team.models[0].set_adapter(f"agent_{a}")
        assert_logps_close(logps.detach(), reference_free_logps(team.models[0], batches[a]), batches[a])
    assert team([None, None]) == [None, None]


def test_log_softmax_runs_outside_autocast(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # accelerate runs the team's forward under autocast in bf16 training; CUDA autocast would take the log-softmax
    # of every completion logit in float32 and keep that copy for the backward (6.5 bytes per logit more than TRL on
    # an H100). The model runs under autocast, the log-probabilities in the logits' dtype, as TRL computes them.
    import trl_marl.team.forward as team_module

    seen: list[tuple[bool, bool]] = []
    original = team_module.selective_log_softmax

    def spy(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        seen.append((torch.is_autocast_enabled("cpu"), logits.requires_grad))
        return original(logits, index)

    monkeypatch.setattr(team_module, "selective_log_softmax", spy)
    team = make_team("adapters", tokenizer)
    team.logprob_chunk_elements = 0  # the full-logits path (models that `head_path` refuses)
    batches = agent_batches(team)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu")
        results = team(batches)
        assert torch.is_autocast_enabled("cpu")  # restored for the caller
    assert seen == [(False, True), (False, True)]
    assert all(r is not None and r[0].dtype == torch.bfloat16 for r in results)  # the model itself ran in bf16
    # the default path: the LM head under autocast a chunk at a time, each chunk's log-softmax in float32
    team.logprob_chunk_elements = 2**24
    with torch.autocast("cpu", dtype=torch.bfloat16):
        chunked = team(batches)
        assert torch.is_autocast_enabled("cpu")
    assert len(seen) == 2  # no full logits
    for r, full in zip(chunked, results, strict=True):
        assert r[0].dtype == torch.float32 and r[0].requires_grad
        torch.testing.assert_close(r[0], full[0].float(), atol=0.1, rtol=0.05)  # bf16 logits either way


# ----------------------------------------------------------------------------------------------------------------
# 3. Reference policies
# ----------------------------------------------------------------------------------------------------------------


def test_adapters_reference_is_the_base_model(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("adapters", tokenizer)
    batches = agent_batches(team)
    base = toy_model(tokenizer)  # same seed: the weights the adapters were added to
    team.eval()
    for a in range(team.num_agents):
        # LoRA starts as the identity: policy == reference == base.
        assert_logps_close(team.policy_logps(a, batches[a]), reference_free_logps(base, batches[a]), batches[a])
    perturb(team, seed=6)
    for a in range(team.num_agents):
        reference = team.reference_logps(a, batches[a])
        assert_logps_close(reference, reference_free_logps(base, batches[a]), batches[a])
        assert logps_differ(team.policy_logps(a, batches[a]), reference, batches[a])
    # The adapters are enabled again afterwards.
    assert logps_differ(team.policy_logps(0, batches[0]), reference_free_logps(base, batches[0]), batches[0])


def test_models_reference_copies_are_frozen_and_outside_the_team(tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team("models", tokenizer)
    batches = agent_batches(team)
    team.eval()
    with pytest.raises(RuntimeError, match="create_reference_models"):
        team.reference_logps(0, batches[0])
    initial = all_policy_logps(team, batches)
    team.create_reference_models()
    assert len(team.ref_models) == 2 and all(ref is not None for ref in team.ref_models)

    team_params = {id(p) for p in team.parameters()}
    team_ptrs = {p.data_ptr() for p in team.parameters()}
    state_keys = list(team.state_dict())
    for ref in team.ref_models:
        assert ref is not None
        assert not ref.training
        for param in ref.parameters():
            assert not param.requires_grad
            assert id(param) not in team_params
            assert param.data_ptr() not in team_ptrs
    assert all(key.startswith("models.") for key in state_keys)
    assert sum(p.numel() for p in team.parameters()) == sum(p.numel() for m in team.models for p in m.parameters())

    ref_ids = [id(ref) for ref in team.ref_models]
    team.create_reference_models()  # idempotent
    assert [id(ref) for ref in team.ref_models] == ref_ids

    train_steps(team)
    for a in range(team.num_agents):
        reference = team.reference_logps(a, batches[a])
        assert_logps_close(reference, initial[a], batches[a])
        assert logps_differ(team.policy_logps(a, batches[a]), reference, batches[a])


def test_models_mode_with_lora_uses_the_disabled_adapter_as_reference(tokenizer: PreTrainedTokenizerBase) -> None:
    team = AgentTeam.build(toy_model(tokenizer), 2, mode="models", peft_config=lora_config(),
                           processing_class=tokenizer)
    assert team.agent_adapter == ["default", "default"]
    team.create_reference_models()
    assert team.ref_models == [None, None]  # no copies: the adapter is switched off instead
    for name, param in team.named_parameters():
        assert param.requires_grad == ("lora_" in name), name
    perturb(team, seed=7)
    team.eval()
    batches = agent_batches(team)
    base = toy_model(tokenizer)
    for a in range(team.num_agents):
        reference = team.reference_logps(a, batches[a])
        assert_logps_close(reference, reference_free_logps(base, batches[a]), batches[a])
        assert logps_differ(team.policy_logps(a, batches[a]), reference, batches[a])


# ----------------------------------------------------------------------------------------------------------------
# 4. load_weights_ (resume_from_checkpoint)
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_load_weights_restores_in_place(mode: str, tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    team = make_team(mode, tokenizer)
    perturb(team, seed=8)
    team.eval()
    batches = agent_batches(team)
    saved = all_policy_logps(team, batches)
    team.save_pretrained(tmp_path)

    perturb(team, seed=9)
    params_before = [id(p) for p in team.parameters()]
    grads_before = [p.requires_grad for p in team.parameters()]
    for a in range(team.num_agents):
        assert logps_differ(team.policy_logps(a, batches[a]), saved[a], batches[a])

    team.load_weights_(tmp_path)
    for a in range(team.num_agents):
        assert_logps_close(team.policy_logps(a, batches[a]), saved[a], batches[a])
    # In place: the optimizer's references to the parameters stay valid.
    assert [id(p) for p in team.parameters()] == params_before
    assert [p.requires_grad for p in team.parameters()] == grads_before


# ----------------------------------------------------------------------------------------------------------------
# 5. Errors
# ----------------------------------------------------------------------------------------------------------------


def test_tokenizer_without_pad_token(tokenizer: PreTrainedTokenizerBase) -> None:
    no_pad = build_toy_tokenizer()
    no_pad.pad_token = None
    assert no_pad.pad_token_id is None
    for mode in ("models", "shared"):
        with pytest.raises(ValueError, match="pad token"):
            AgentTeam.build(toy_model(tokenizer), 2, mode=mode, processing_class=no_pad)
    with pytest.raises(ValueError, match="pad token"):
        AgentTeam.build(toy_model(tokenizer), 2, mode="models", processing_class=[tokenizer, no_pad])


def test_adapters_mode_needs_peft_config(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="peft_config"):
        AgentTeam.build(toy_model(tokenizer), 2, mode="adapters", processing_class=tokenizer)


def test_unknown_mode(tokenizer: PreTrainedTokenizerBase) -> None:
    with pytest.raises(ValueError, match="Unknown team mode"):
        AgentTeam([toy_model(tokenizer)], [tokenizer] * 2, "mixture", [0, 0], [None, None])


@pytest.mark.parametrize("mode", ["adapters", "shared"])
def test_different_tokenizers_need_models_mode(mode: str, tokenizer: PreTrainedTokenizerBase) -> None:
    other = build_toy_tokenizer()
    other.add_tokens(["<extra>"])
    assert len(other) == len(tokenizer) + 1
    peft_config = lora_config() if mode == "adapters" else None
    with pytest.raises(ValueError, match="agent 1") as info:
        AgentTeam.build(toy_model(tokenizer), 2, mode=mode, peft_config=peft_config,
                        processing_class=[tokenizer, other])
    assert "mode='models'" in str(info.value)
    # Equal tokenizers that are distinct objects are fine.
    team = AgentTeam.build(toy_model(tokenizer), 2, mode=mode, peft_config=peft_config,
                           processing_class=[tokenizer, build_toy_tokenizer()])
    assert team.num_agents == 2


def test_models_mode_accepts_different_tokenizers(tokenizer: PreTrainedTokenizerBase) -> None:
    other = build_toy_tokenizer()
    other.add_tokens(["<extra>"])
    models = [toy_model(tokenizer), toy_model(other, seed=1)]
    team = AgentTeam.build(models, 2, processing_class=[tokenizer, other])
    assert team.mode == "models"
    assert team.tokenizers[1] is other
    generations = team.generate(PROMPTS, GREEDY)
    assert [len(completions) for _, completions in generations] == [2, 2]


def test_wrong_number_of_models_or_tokenizers(tokenizer: PreTrainedTokenizerBase) -> None:
    models = [toy_model(tokenizer) for _ in range(3)]
    with pytest.raises(ValueError, match="3 models"):
        AgentTeam.build(models, 2, processing_class=tokenizer)
    with pytest.raises(ValueError, match="3 tokenizers"):
        AgentTeam.build(toy_model(tokenizer), 2, mode="models", processing_class=[tokenizer] * 3)
    with pytest.raises(ValueError, match="1 tokenizers"):
        AgentTeam.build(models[:2], 2, processing_class=[tokenizer])
    with pytest.raises(ValueError, match="one entry per agent"):
        AgentTeam([models[0]], [tokenizer], "shared", [0, 0], [None, None])
    with pytest.raises(ValueError, match="mode='models'"):
        AgentTeam.build(models[:2], 2, mode="adapters", peft_config=lora_config(), processing_class=tokenizer)
    team = AgentTeam.build(models[:2], 2, processing_class=tokenizer)
    with pytest.raises(ValueError, match="num_agents=3"):
        AgentTeam.build(team, 3)
    with pytest.raises(ValueError, match="prompts for 2 agents"):
        team.generate([PROMPTS[0]], GREEDY)


def test_from_pretrained_needs_a_saved_team(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="team_config.json"):
        AgentTeam.from_pretrained(tmp_path)


# ----------------------------------------------------------------------------------------------------------------
# 6. Activation checkpointing
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_activation_checkpointing(mode: str, tokenizer: PreTrainedTokenizerBase) -> None:
    team = make_team(mode, tokenizer)
    perturb(team, seed=10)
    batches = agent_batches(team)
    team.train()
    plain = team(batches)
    expected = [r[0].detach() for r in plain if r is not None]
    sum(masked_sum(r[0], b) for r, b in zip(plain, batches) if r is not None).backward()
    expected_grads = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
    assert expected_grads
    team.zero_grad(set_to_none=True)

    # `context_fn` is a public argument of `torch.utils.checkpoint.checkpoint`: it counts the checkpointed forwards
    # and their recomputations in the backward, and shows that the keyword arguments reach `checkpoint`.
    counts = {"forward": 0, "recompute": 0}

    @contextlib.contextmanager
    def counting(kind: str) -> Iterator[None]:
        counts[kind] += 1
        yield

    def context_fn() -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
        return counting("forward"), counting("recompute")

    team.activation_checkpointing_enable({"use_reentrant": False, "context_fn": context_fn})
    for model in team.models:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        assert base.is_gradient_checkpointing

    results = team(batches)
    loss = sum(masked_sum(r[0], b) for r, b in zip(results, batches) if r is not None)
    loss.backward()
    assert counts["forward"] > 0, "no layer ran under activation checkpointing"
    assert counts["recompute"] == counts["forward"], "the backward did not recompute the checkpointed layers"
    for a, result in enumerate(results):
        assert result is not None
        assert_logps_close(result[0].detach(), expected[a], batches[a])
    grads = {n: p.grad for n, p in team.named_parameters() if p.grad is not None}
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_adapters_mode_refuses_reentrant_checkpointing(tokenizer: PreTrainedTokenizerBase) -> None:
    """Reentrant checkpointing cannot switch adapters for the recomputation, so it would train the wrong policy."""
    team = make_team("adapters", tokenizer)
    with pytest.raises(ValueError, match="use_reentrant=False"):
        team.activation_checkpointing_enable({"use_reentrant": True})
    make_team("models", tokenizer).activation_checkpointing_enable({"use_reentrant": True})  # fine without adapters


def test_checkpointed_backward_matches_separate_backwards(tokenizer: PreTrainedTokenizerBase) -> None:
    """With checkpointing, each agent's gradients equal those of a backward through that agent alone."""
    team = make_team("adapters", tokenizer)
    perturb(team, seed=11)
    team.train()
    team.activation_checkpointing_enable()
    batches = agent_batches(team)
    expected: dict[str, torch.Tensor] = {}
    for a in range(team.num_agents):
        team.zero_grad(set_to_none=True)
        result = team([batches[b] if b == a else None for b in range(team.num_agents)])[a]
        assert result is not None
        masked_sum(result[0], batches[a]).backward()
        expected.update({n: p.grad.clone() for n, p in adapter_params(team, f"agent_{a}").items()})
    team.zero_grad(set_to_none=True)
    results = team(batches)
    sum(masked_sum(r[0], b) for r, b in zip(results, batches) if r is not None).backward()
    for name, grad in expected.items():
        param = dict(team.named_parameters())[name]
        assert param.grad is not None
        torch.testing.assert_close(param.grad, grad, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------------------------------
# Saving the base model of an adapters team
# ----------------------------------------------------------------------------------------------------------------


def test_loadable_base_is_referenced_not_copied(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    base_dir = tmp_path / "base"
    toy_model(tokenizer).save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    team = AgentTeam.build(str(base_dir), 2, peft_config=lora_config())
    assert team.mode == "adapters"
    perturb(team, seed=12)
    team.eval()
    batches = agent_batches(team)
    expected = all_policy_logps(team, batches)
    team.save_pretrained(tmp_path / "team")
    assert not (tmp_path / "team" / "base_model").exists()
    config = json.loads((tmp_path / "team" / "team_config.json").read_text())
    assert config["base_models"] == [str(base_dir)]
    loaded = AgentTeam.from_pretrained(tmp_path / "team")
    loaded.eval()
    for a in range(team.num_agents):
        assert_logps_close(loaded.policy_logps(a, batches[a]), expected[a], batches[a])


def test_base_state_dict_fallback_matches_peft(
    tokenizer: PreTrainedTokenizerBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback for PEFT versions without `get_base_model_state_dict` gives the same weights and names."""
    import peft

    from trl_marl.team import base_state_dict

    team = make_team("adapters", tokenizer)
    expected = base_state_dict(team.models[0])
    assert expected.keys() == toy_model(tokenizer).state_dict().keys()
    monkeypatch.delattr(peft, "get_base_model_state_dict")
    fallback = base_state_dict(team.models[0])
    assert fallback.keys() == expected.keys()
    for name, value in expected.items():
        assert fallback[name] is value or torch.equal(fallback[name], value)


ROLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ 'Q' if m['role'] == 'user' else 'A' }}{{ m['content'] }}:{% endfor %}"
    "{% if add_generation_prompt %}A{% endif %}"
)
"""A chat template with role markers and an end-of-message marker (`:`), in the toy tokenizer's characters."""


def test_conversation_ending_with_assistant_message_is_continued(tokenizer: PreTrainedTokenizerBase) -> None:
    """A prompt whose last message is the assistant's is a prefill: the model continues that message (no end marker
    after it, no new assistant turn), as TRL's `apply_chat_template` renders it; other rows of the same batch keep
    the generation prompt, each row in its place."""
    chat = build_toy_tokenizer()
    chat.chat_template = ROLE_TEMPLATE
    question = [{"role": "user", "content": "1+2=?"}]
    prefilled = question + [{"role": "assistant", "content": "A 3"}]
    ids = tokenize_prompts(chat, [question, prefilled, question])
    texts = [chat.decode(row, skip_special_tokens=True) for row in ids]
    assert texts == ["Q1+2=?:A", "Q1+2=?:AA 3", "Q1+2=?:A"]
    assert ids[0] == ids[2] and ids[0][0] == chat.bos_token_id
