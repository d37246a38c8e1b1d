"""Plain functions that several test modules share (the fixtures are in `conftest.py`).

Under pytest `tests/` is on `sys.path` (the folder of the top `conftest.py`), so a test module in any folder imports
them as `from helpers import ...`.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import TrainerCallback

SYNC_OPS = {"_local_scalar_dense", "is_nonzero"}  # the operators that read a device value on the host


class OpCounter(TorchDispatchMode):
    """Counts, by name, the operators dispatched while it is active (`with OpCounter() as counter:`); `syncs` is
    how many of them read a device value on the host (what decides a GPU step's speed, counted on a CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def syncs(self) -> int:
        return sum(self.ops[op] for op in SYNC_OPS)


def close(actual: torch.Tensor, expected: Any, atol: float = 1e-6, rtol: float = 1e-6) -> None:
    """`actual` equals `expected` (a number, a nested list or a tensor, taken at `actual`'s dtype) within `atol` and
    `rtol`, as `torch.testing.assert_close` measures them."""
    torch.testing.assert_close(actual, torch.as_tensor(expected, dtype=actual.dtype), atol=atol, rtol=rtol)


def spread_reward(prompts: list[Any], completions: list[Any], agent_completions: list[list[Any]],
                  **kwargs: Any) -> list[float]:
    """A team reward that tells almost any two joint actions apart (so that every training step has a gradient)."""
    return [float(sum(map(ord, "|".join(joint))) % 7) for joint in zip(*agent_completions)]


class StopAfter(TrainerCallback):
    """Stops training after `step` updates, as a kill after that checkpoint would."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def free_port() -> int:
    """A local TCP port that nothing listened on a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_script(path: Path) -> ModuleType:
    """Imports the Python file `path` (a benchmark script, not a package module) as the module named after its stem.

    The module is in `sys.modules` before its code runs: dataclasses look their module up while the class is
    created.
    """
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class ScriptedTeam:
    """A team stand-in for the rollout engine: sample g of every node is the one-token completion `g` (so joint
    action g of an aligned node is "g", "g"), decoded by a tokenizer that writes token ids as digits."""

    class DigitTokenizer:
        def batch_decode(self, ids: list[list[int]], skip_special_tokens: bool = True) -> list[str]:
            return ["".join(map(str, x)) for x in ids]

    def __init__(self, num_agents: int, num_generations: int) -> None:
        self.tokenizers = [self.DigitTokenizer()] * num_agents
        self.G = num_generations

    def generate(self, prompts: list[list[str]], generation_config: Any, chat_template_kwargs: Any = None) -> Any:
        from trl_marl.team import Generation

        return Generation([[[0]] * len(p) for p in prompts], [[[i % self.G] for i in range(len(p))] for p in prompts])


def add(a: int, b: int) -> int:
    """Add two integers (a tool for the tool-loop tests: typed, with the docstring a tool's schema is built from).

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum.
    """
    return a + b


def tool_chat_model(path: Path) -> str:
    """Save a one-layer toy model whose tokenizer has a ChatML template (which can write tool calls) at `path`."""
    from trl_marl.toy import build_toy_chat_tokenizer, build_toy_model

    tokenizer = build_toy_chat_tokenizer()
    build_toy_model(tokenizer, hidden_size=32, num_layers=1, max_position_embeddings=1024).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER = "It is 5"
PARTNER = "Ok"


def scripted(trainer: Any, calls: dict[str, int], seen_prompts: list[list[str]], call: str = CALL,
             tool_members: tuple[int, ...] = (0,), answer_ends: bool = True) -> Any:
    """A team's `generate` whose every token is known (for the tool tests): the members in `tool_members` write
    `call` first and `ANSWER` once a tool result is in their prompt, every other member `PARTNER`; `calls` counts
    their two kinds of generation, `seen_prompts[member]` collects the prompts as text. `answer_ends=False`: the
    answer has no EOS (cut by the budget)."""
    from trl_marl.team import Generation

    tokenizer = trainer.team.tokenizers[0]
    eos = tokenizer.eos_token_id

    def encode(text: str, ends: bool = True) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] + ([eos] if ends else [])

    def generate(prompts, generation_config, chat_template_kwargs=None, stop_token_ids=None):
        prompt_ids, completion_ids = [], []
        for agent, rows in enumerate(prompts):
            ids = [list(p) if isinstance(p, list) and p and isinstance(p[0], int) else
                   tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False,
                                                 **(chat_template_kwargs or {})) for p in rows]
            prompt_ids.append(ids)
            texts = [tokenizer.decode(x) for x in ids]
            seen_prompts[agent].extend(texts)
            if agent in tool_members:
                outs = []
                for text in texts:
                    after_tool = text.rstrip().endswith("<|im_start|>assistant") and "<|im_start|>tool" in text
                    calls["after_tool" if after_tool else "first"] += 1
                    outs.append(encode(ANSWER, answer_ends) if after_tool else encode(call))
                completion_ids.append(outs)
            else:
                completion_ids.append([encode(PARTNER) for _ in texts])
        return Generation(prompt_ids=prompt_ids, completion_ids=completion_ids)

    return generate


def encodes(value: object) -> bool:
    """Whether `value` serializes to JSON that encodes as UTF-8 (no lone surrogates left in it)."""
    import json

    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text_batch(tokenizer: Any, prompts: list[str], completions: list[str]) -> Any:
    """An `AgentBatch` of text prompts (left-padded) and completions (each ended by EOS, right-padded)."""
    from trl_marl.team import AgentBatch, pad_left, pad_right, tokenize_prompts

    prompt_ids, prompt_mask = pad_left(tokenize_prompts(tokenizer, prompts), tokenizer.pad_token_id)
    tokens = [tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for c in completions]
    completion_ids, completion_mask = pad_right(tokens, tokenizer.pad_token_id)
    return AgentBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)
