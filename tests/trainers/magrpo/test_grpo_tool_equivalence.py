"""With one agent that has tools, MAGRPO equals TRL's `GRPOTrainer(tools=...)` on the same rollouts.

Both trainers get the same scripted completions: a first completion per sample (GRPO through `rollout_func`, MAGRPO
by replacing the team's `generate`) and, after each tool result, a continuation chosen from the conversation so far
(GRPO's `_generate_single_turn` replaced, MAGRPO's `generate` again), with a real `add` tool in between. Some samples
answer at once, some call the tool once, one calls it twice, one is cut by `max_completion_length`. The completions
with their tool results, the masks (TRL's `completion_mask * tool_mask` against `AgentBatch.loss_mask`), the
advantages, the logged loss and the gradients before the optimizer step must agree, for two loss types.
"""

from __future__ import annotations

import re

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from helpers import add
from trl_marl import MAGRPOConfig, MAGRPOTrainer, load_tokenizer
from trl_marl.team import Generation
from trl_marl.toy import build_toy_chat_tokenizer, build_toy_model

PROMPTS = [[{"role": "user", "content": "Add 2 and 3."}], [{"role": "user", "content": "Add 40 and 2."}]]
G = 4
MAX_LEN = 200


def call(a: int, b: int) -> str:
    return f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'


def first_completion(question: str, occurrence: int) -> tuple[str, bool]:
    """Sample `occurrence` of a question: (text, ends with EOS). 0: answers at once; 1, 2: calls add; 3: a long
    ramble cut by the budget (no EOS)."""
    a, b = (int(x) for x in re.findall(r"\d+", question))
    if occurrence == 0:
        return f"It is {a + b + 1}", True
    if occurrence == 3:
        return "Let me think. " * 10, False
    return call(a, b), True


def continuation(context: str) -> str:
    """After a tool result: with 42 and one result so far, a second call; else the answer, the last result."""
    results = re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", context)
    if results == ["42"]:
        return call(42, 0)
    return f"The sum is {results[-1]}"


def reward(prompts, completions, **kwargs) -> list[float]:
    """0.1 per character of the answer, +1 when it holds the right sum (GRPO passes messages, MAGRPO the answer)."""
    out = []
    for prompt, completion in zip(prompts, completions):
        text = completion if isinstance(completion, str) else next(
            m["content"] for m in reversed(completion) if m["role"] == "assistant")
        question = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        a, b = (int(x) for x in re.findall(r"\d+", question)[:2])
        out.append(0.1 * len(text) + (1.0 if str(a + b) in text else 0.0))
    return out


class Script:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.seen: dict[str, int] = {}

    def encode(self, text: str, eos: bool = True) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids + [self.tokenizer.eos_token_id] if eos else ids

    def first(self, prompt_ids: list[int]) -> list[int]:
        text = self.tokenizer.decode(prompt_ids)
        question = text.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0]
        k = self.seen.get(question, 0)
        self.seen[question] = k + 1
        completion, eos = first_completion(question, k % G)
        return self.encode(completion, eos)

    def after_tool(self, context_ids: list[int]) -> list[int]:
        return self.encode(continuation(self.tokenizer.decode(context_ids)))


class GradientCapture(TrainerCallback):
    def __init__(self) -> None:
        self.parameters = None
        self.grads: dict[str, torch.Tensor] = {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads = {name: p.grad.detach().clone() for name, p in self.parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("toy_chat_tools")
    tokenizer = build_toy_chat_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1, max_position_embeddings=1024, seed=5)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def common(out: str, loss_type: str) -> dict:
    return dict(output_dir=out, per_device_train_batch_size=len(PROMPTS) * G, num_generations=G,
                max_completion_length=MAX_LEN, learning_rate=1e-2, max_steps=1, loss_type=loss_type, beta=0.0,
                scale_rewards="group", temperature=0.9, epsilon=0.2, report_to="none", save_strategy="no",
                bf16=False, gradient_checkpointing=False, logging_steps=1, seed=0, disable_tqdm=True,
                shuffle_dataset=False, max_grad_norm=0.0, adam_epsilon=1e-5, max_tool_calling_iterations=3)


def run_grpo(model_dir: str, out: str, loss_type: str):
    tokenizer = load_tokenizer(model_dir)
    script = Script(tokenizer)

    def rollout_func(prompts, trainer):
        ids = [tokenizer.apply_chat_template(p, tools=[add], add_generation_prompt=True, tokenize=True,
                                             return_dict=False) for p in prompts]
        return {"prompt_ids": ids, "completion_ids": [script.first(p) for p in ids], "logprobs": None}

    capture = GradientCapture()
    trainer = GRPOTrainer(model=model_dir, reward_funcs=reward, processing_class=tokenizer, tools=[add],
                          rollout_func=rollout_func, args=GRPOConfig(**common(out, loss_type)),
                          train_dataset=Dataset.from_dict({"prompt": PROMPTS}), callbacks=[capture])
    capture.parameters = lambda: list(trainer.model.named_parameters())
    trainer._generate_single_turn = lambda prompt_ids, *args, **kwargs: (
        [script.after_tool(p) for p in prompt_ids], None)
    captured: dict = {"capture": capture}
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        captured.update({key: output[key].detach().clone() for key in
                         ("advantages", "completion_ids", "completion_mask", "tool_mask")})
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    return trainer, captured


def run_magrpo(model_dir: str, out: str, loss_type: str):
    tokenizer = load_tokenizer(model_dir)
    script = Script(tokenizer)
    capture = GradientCapture()
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=reward, processing_class=tokenizer, tools=[add],
                            args=MAGRPOConfig(num_agents=1, num_turns=1, **common(out, loss_type)),
                            train_dataset=Dataset.from_dict({"prompt": PROMPTS}), callbacks=[capture])
    capture.parameters = lambda: list(trainer.team.policy(0).named_parameters())
    state = {"calls": 0}

    def generate(prompts, generation_config, chat_template_kwargs=None, stop_token_ids=None):
        first = state["calls"] == 0
        state["calls"] += 1
        rows = prompts[0]
        completions = [script.first(p) if first else script.after_tool(p) for p in rows]
        return Generation(prompt_ids=[[list(p) for p in rows]], completion_ids=[completions])

    trainer.team.generate = generate
    captured: dict = {"capture": capture}
    original = trainer._make_batches

    def record(row_batches, mode):
        batches = original(row_batches, mode)
        captured["batch"] = batches[0]["batches"][0]
        captured["advantages"] = batches[0]["advantages"][0].detach().clone()
        return batches

    trainer._make_batches = record
    trainer.train()
    return trainer, captured


def keyed(ids: torch.Tensor, masks: list[torch.Tensor], values: torch.Tensor) -> list:
    """Rows as (their ids, masks), sorted, with their values: the two trainers order samples differently."""
    out = []
    for row, value in zip(range(ids.size(0)), values):
        attended = masks[0][row].bool()
        out.append((tuple(ids[row][attended].tolist()), *(tuple(m[row][attended].tolist()) for m in masks[1:]),
                    round(float(value), 5)))
    return sorted(out)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_one_agent_with_tools_equals_grpo_with_tools(model_dir, tmp_path, loss_type):
    grpo, theirs = run_grpo(model_dir, str(tmp_path / "grpo"), loss_type)
    magrpo, ours = run_magrpo(model_dir, str(tmp_path / "magrpo"), loss_type)
    batch = ours["batch"]
    # same completions (results included), same attention and loss masks, same advantages
    assert keyed(theirs["completion_ids"], [theirs["completion_mask"], theirs["tool_mask"]], theirs["advantages"]) \
        == keyed(batch.completion_ids, [batch.completion_mask, batch.tool_mask], ours["advantages"])
    tool_tokens = int((theirs["completion_mask"] * (1 - theirs["tool_mask"])).sum())
    assert tool_tokens > 0 and int((batch.completion_mask - batch.loss_mask).sum()) == tool_tokens
    # the rollout covered every path: an answer at once, one call, two calls, a cut completion
    stats = magrpo.last_rollout.turns[0].tool_stats[0]
    assert (stats.samples, stats.calls, stats.failed_calls) == (8, 6, 0)  # 42 asks twice
    logged = next(h for h in grpo.state.log_history if "loss" in h)
    ours_logged = next(h for h in magrpo.state.log_history if "loss" in h)
    assert ours_logged["loss"] == pytest.approx(logged["loss"], rel=1e-4, abs=1e-6)
    assert ours_logged["agent_0/tools/call_frequency"] == pytest.approx(logged["tools/call_frequency"])
    assert theirs["capture"].grads and max(float(g.abs().max()) for g in theirs["capture"].grads.values()) > 1e-4
    for name, grad in theirs["capture"].grads.items():
        torch.testing.assert_close(ours["capture"].grads[name], grad, atol=1e-6, rtol=1e-4)
