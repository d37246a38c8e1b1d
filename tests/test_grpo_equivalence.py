"""With one agent and one turn, MAGRPO must equal TRL's GRPOTrainer for the same rollouts.

Both trainers get identical completions (GRPO through its public `rollout_func`, MAGRPO by replacing the team's
`generate`), the same reward function, model, optimizer settings and seed; after one optimizer step their
advantages, loss and updated weights must agree within 1e-5 for every supported `loss_type`.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
from trl_marl.core import SUPPORTED_LOSS_TYPES
from trl_marl.toy import make_toy_model

PROMPTS = ["Q:12+3=A:", "Q:4+45=A:"]
G = 4
MAX_LEN = 4


def scripted_completion(tokenizer, prompt: str, occurrence: int) -> list[int]:
    """A fixed completion for the `occurrence`-th sample of `prompt`: varied lengths, with and without EOS."""
    seed = sum(map(ord, prompt)) + 7 * occurrence
    text = str(seed % 97)[: 1 + occurrence % 3]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if occurrence % 4 != 3:  # most completions end with EOS, one per group is truncated
        ids = ids + [tokenizer.eos_token_id]
    return ids[:MAX_LEN]


def reward_digits(prompts, completions, **kwargs) -> list[float]:
    return [0.3 * len(c) + (1.0 if "1" in c else 0.0) + (0.5 if "5" in c else 0.0) for c in completions]


class ScriptedGeneration:
    """Hands out the scripted completions in order of occurrence of each prompt."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.seen: dict[str, int] = {}

    def completion(self, prompt: str) -> list[int]:
        k = self.seen.get(prompt, 0)
        self.seen[prompt] = k + 1
        return scripted_completion(self.tokenizer, prompt, k)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return make_toy_model(tmp_path_factory.mktemp("toy"), task="addition", hidden_size=32, num_layers=1,
                          pretrain_steps=30, seed=3)


def common_kwargs(output_dir: str, loss_type: str) -> dict:
    return dict(
        output_dir=output_dir, per_device_train_batch_size=len(PROMPTS) * G, num_generations=G,
        max_completion_length=MAX_LEN, learning_rate=1e-2, max_steps=1, loss_type=loss_type, beta=0.04,
        scale_rewards="group", temperature=0.9, epsilon=0.2, report_to="none", save_strategy="no", bf16=False,
        gradient_checkpointing=False, logging_steps=1, seed=0, disable_tqdm=True, shuffle_dataset=False,
    )


def run_grpo(model_dir: str, tmp_path, loss_type: str):
    tokenizer = load_tokenizer(model_dir)
    script = ScriptedGeneration(tokenizer)

    def rollout_func(prompts, trainer):
        return {
            "prompt_ids": [tokenizer(text=p)["input_ids"] for p in prompts],
            "completion_ids": [script.completion(p) for p in prompts],
            "logprobs": None,
        }

    trainer = GRPOTrainer(
        model=model_dir, reward_funcs=reward_digits, processing_class=tokenizer, rollout_func=rollout_func,
        args=GRPOConfig(**common_kwargs(str(tmp_path / "grpo"), loss_type)),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
    )
    captured = {}
    original = trainer._generate_and_score_completions

    def capture(inputs):
        out = original(inputs)
        captured["advantages"] = out["advantages"].detach().clone()
        captured["completion_ids"] = out["completion_ids"].clone()
        captured["completion_mask"] = out["completion_mask"].clone()
        return out

    trainer._generate_and_score_completions = capture
    trainer.train()
    return trainer, captured


def run_magrpo(model_dir: str, tmp_path, loss_type: str):
    tokenizer = load_tokenizer(model_dir)
    script = ScriptedGeneration(tokenizer)
    trainer = MAGRPOTrainer(
        model=model_dir, reward_funcs=reward_digits, processing_class=tokenizer,
        args=MAGRPOConfig(num_agents=1, num_turns=1, **common_kwargs(str(tmp_path / "magrpo"), loss_type)),
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
    )

    def scripted_generate(prompts, generation_config, chat_template_kwargs=None):
        return [([tokenizer(text=p)["input_ids"] for p in agent_prompts],
                 [script.completion(p) for p in agent_prompts]) for agent_prompts in prompts]

    trainer.team.generate = scripted_generate
    trainer.train()
    return trainer


def keyed_advantages(completion_ids: torch.Tensor, mask: torch.Tensor, advantages: torch.Tensor) -> list:
    keys = [tuple(ids[m.bool()].tolist()) for ids, m in zip(completion_ids, mask)]
    return sorted(zip(keys, [round(float(a), 6) for a in advantages]))


@pytest.mark.parametrize("loss_type", SUPPORTED_LOSS_TYPES)
def test_one_agent_magrpo_equals_grpo(model_dir, tmp_path, loss_type):
    warnings.filterwarnings("ignore")
    grpo, captured = run_grpo(model_dir, tmp_path, loss_type)
    magrpo = run_magrpo(model_dir, tmp_path, loss_type)

    # Advantages: the same value for the same completion (pads excluded on both sides).
    ours = magrpo.last_advantages[0].cpu()
    batch = magrpo.last_rollout.turns[0]
    from trl_marl.team import pad_right

    c_ids, c_mask = pad_right(batch.completion_ids[0], magrpo.team.tokenizers[0].pad_token_id)
    assert keyed_advantages(c_ids, c_mask, ours) == keyed_advantages(
        captured["completion_ids"].cpu(), captured["completion_mask"].cpu(), captured["advantages"].cpu()
    )
    assert ours.abs().sum() > 0  # the scripted rewards differ within groups

    # Loss: both trainers log the loss of the single step.
    grpo_loss = next(h["loss"] for h in grpo.state.log_history if "loss" in h)
    magrpo_loss = next(h["loss"] for h in magrpo.state.log_history if "loss" in h)
    assert magrpo_loss == pytest.approx(grpo_loss, abs=1e-5)

    # Weights after one AdamW step.
    initial = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    theirs = dict(grpo.model.named_parameters())
    moved = 0.0
    for name, param in magrpo.team.policy(0).named_parameters():
        torch.testing.assert_close(param.detach(), theirs[name].detach(), atol=1e-5, rtol=0)
        moved = max(moved, float((param.detach() - initial[name]).abs().max()))
    assert moved > 1e-4  # the step really changed the weights
