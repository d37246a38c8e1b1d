"""`share_prompt_forward`: MAGRPO's log-probability forward runs each distinct prompt once (`team.shared_prompt`).

Each test checks that the shared forward really ran (the backbone saw the distinct prompts, then the completions
alone: counted, not timed) and that what comes out is what the usual layout gives, gradients included.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import PreTrainedTokenizerBase

from helpers import spread_reward, text_batch
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.head import head_path_checked
from trl_marl.team.shared_prompt import shared_prompt_unsupported
from trl_marl.toy import build_toy_model

# two distinct prompts of different lengths (left padding), each repeated 3 times, with completions of 1 to 5 tokens
PROMPTS = ["Q:12+3=A:"] * 3 + ["T:5?"] * 3
COMPLETIONS = ["15", "7 ", "1234", "2", "", "112"]


def make_team(tokenizer: PreTrainedTokenizerBase, mode: str, share: bool, chunk: int | None = None) -> AgentTeam:
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0) if mode == "adapters" else None
    team = AgentTeam.build(model, 2, mode=mode, peft_config=lora, processing_class=tokenizer)
    changes = {"share_prompt_forward": share} | ({} if chunk is None else {"logprob_chunk_elements": chunk})
    team.configure(**changes)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # agents that differ (LoRA B starts at zero)
        for name, param in team.named_parameters():
            if mode == "models" or "lora_" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.2)
    for member in team.models:
        head_path_checked(member)  # the one-time probe, before the forwards are counted
    return team


class Widths:
    """The `(rows, width)` of the `input_ids` of every forward of `model`'s backbone (`grad_rows`: the row counts of
    the forwards with gradients, the training forwards)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.grad_rows: list[int] = []
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        self.handle = base.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.shapes.append(tuple(ids.shape))
        if torch.is_grad_enabled():
            self.grad_rows.append(ids.size(0))


def logps_and_grads(team: AgentTeam, batches: list[AgentBatch]) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    team.zero_grad()
    results = team.forward(batches, compute_entropy=True)
    masks = [b.completion_mask.float() for b in batches]
    loss = sum(((r[0] * m).sum() + (r[1] * m).sum()) for r, m in zip(results, masks, strict=True))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
    return [r[0].detach() for r in results], grads


@pytest.mark.parametrize("mode", ["adapters", "models"])
@pytest.mark.parametrize("chunk", [None, 0])  # the LM head a chunk at a time (default), the full logits
def test_shared_prompt_forward_gives_the_usual_logps_and_gradients(tokenizer, mode: str, chunk: int | None) -> None:
    batches = [text_batch(tokenizer, PROMPTS, COMPLETIONS), text_batch(tokenizer, PROMPTS[::-1], COMPLETIONS)]
    usual, shared = make_team(tokenizer, mode, False, chunk), make_team(tokenizer, mode, True, chunk)
    expected_logps, expected_grads = logps_and_grads(usual, batches)
    recorders = [Widths(model) for model in shared.models]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing refused: no warning
        logps, grads = logps_and_grads(shared, batches)
    for got, want, batch in zip(logps, expected_logps, batches, strict=True):
        mask = batch.completion_mask.bool()
        torch.testing.assert_close(got[mask], want[mask], atol=1e-5, rtol=1e-5)
    assert set(grads) == set(expected_grads) and grads
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], atol=1e-5, rtol=1e-4, msg=name)
    # counted: the 2 distinct prompts once (P columns), then the 6 completions without their last token
    prompt_width, completion_width = batches[0].prompt_ids.size(1), batches[0].completion_ids.size(1)
    shapes = [shape for recorder in recorders for shape in recorder.shapes]
    assert shapes == [(2, prompt_width), (6, completion_width - 1)] * 2


def test_a_batch_without_a_repeated_prompt_runs_the_usual_layout(tokenizer) -> None:
    team = make_team(tokenizer, "adapters", True)
    batch = text_batch(tokenizer, PROMPTS[2:4], COMPLETIONS[2:4])
    recorder = Widths(team.models[0])
    team.forward([batch, None])
    assert recorder.shapes == [(2, batch.prompt_ids.size(1) + batch.completion_ids.size(1) - 1)]


def test_dropout_falls_back_with_one_warning_naming_why(tokenizer) -> None:
    team = make_team(tokenizer, "models", True)
    for module in team.models[0].modules():
        if isinstance(module, torch.nn.Dropout) or hasattr(module, "attention_dropout"):
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.1
            else:
                module.attention_dropout = 0.1
    team.train()
    batch = text_batch(tokenizer, PROMPTS, COMPLETIONS)
    recorder = Widths(team.models[0])
    with pytest.warns(UserWarning, match="`share_prompt_forward` is on, but dropout is active"):
        team.forward([batch, None])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per reason
        team.forward([batch, None])
    width = batch.prompt_ids.size(1) + batch.completion_ids.size(1)
    assert recorder.shapes == [(6, width)] * 2  # TRL's layout under dropout: the whole sequence


def test_unsupported_settings_are_named(tokenizer) -> None:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    from trl_marl.team.compile import call_model

    assert shared_prompt_unsupported(model, call_model, dropout=False) is None
    assert "compiled" in shared_prompt_unsupported(model, object(), dropout=False)
    model.gradient_checkpointing_enable()
    model.train()
    assert "activation checkpointing" in shared_prompt_unsupported(model, call_model, dropout=False)


def test_magrpo_trains_to_the_same_weights_with_the_shared_prompt_forward(target_model_dir, tmp_path) -> None:
    """The config field reaches the team, and two steps of training with it end where the usual forward ends."""
    weights = []
    for share in (False, True):
        args = MAGRPOConfig(
            output_dir=str(tmp_path / f"out{share}"), num_agents=2, num_generations=4, per_device_train_batch_size=8,
            max_completion_length=4, learning_rate=3e-3, max_steps=2, logging_steps=1, report_to="none",
            save_strategy="no", disable_tqdm=True, seed=0, share_prompt_forward=share,
            activation_checkpointing=False)  # (transformers' checkpointed layers drop the KV cache)
        trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=spread_reward, env=TargetSumEnv(2), args=args,
                                train_dataset=Dataset.from_dict({"target": [10] * 16}),
                                peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
        assert trainer.team.settings.share_prompt_forward is share
        recorder = Widths(trainer.team.models[0])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.train()
        assert not [w for w in caught if "share_prompt_forward" in str(w.message)]  # nothing refused it
        # each agent's 8 rows repeat one prompt: the shared forward runs it for 1 row, the usual one for all 8
        assert set(recorder.grad_rows) == ({1, 8} if share else {8})
        weights.append({n: p.detach().clone() for n, p in trainer.team.named_parameters() if "lora_" in n})
    assert weights[0].keys() == weights[1].keys() and weights[0]
    for name, value in weights[0].items():
        torch.testing.assert_close(weights[1][name], value, atol=1e-5, rtol=1e-4, msg=name)
