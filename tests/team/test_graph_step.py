"""The whole decode step inside the compiled region (`trl_marl.team.generation.graph_step`): its scores are
transformers' processors' value for value, its bookkeeping by hand, and the structure that decides GPU speed counted
on a CPU (operators and host syncs outside the compiled step per generated token, graphs and graph breaks).

The counts run the decoder with dynamo tracing into conftest's graph-counting backend (inductor's code generation
would take tens of seconds on a CPU); a `TorchDispatchMode` counts every operator the decode loop dispatches outside
the compiled call.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes
from transformers import GenerationConfig, PreTrainedTokenizerBase
from transformers.generation import NoRepeatNGramLogitsProcessor

from helpers import SYNC_OPS, OpCounter
from trl_marl.team import pad_left
from trl_marl.team.generation.compiled import CompiledDecoder
from trl_marl.team.generation.graph_step import (
    DecodeBuffers,
    graph_sampling_unsupported,
    processed_scores,
    sample_into,
)
from trl_marl.team.generation.lean import _logits_processors, decode
from trl_marl.toy import build_toy_model


def processors(do_sample: bool = True, **settings: Any) -> list[Any]:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    return _logits_processors(settings, do_sample, 5, mask, torch.tensor([3]), torch.device("cpu"))


@pytest.mark.parametrize("settings", [
    dict(repetition_penalty=1.3),
    dict(temperature=0.7),
    dict(top_k=5),
    dict(top_p=0.8),
    dict(min_p=0.1),
    dict(repetition_penalty=0.8, temperature=1.4, top_k=12, top_p=0.9, min_p=0.02),
])
def test_processed_scores_are_transformers_processors(settings) -> None:
    """The graph's scores equal the eager loop's (transformers' processors on the sequence so far), bit for bit."""
    torch.manual_seed(0)
    vocab = 20
    prompt = torch.tensor([[7, 7, 1, 2, 2], [4, 5, 6, 4, 5], [9, 11, 12, 13, 1]])  # left padding: 2, 0 and 1 tokens
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 1, 1, 1, 1]])
    generated = torch.tensor([[3, 3], [0, 19], [12, 7]])
    chain = processors(**settings)
    assert graph_sampling_unsupported(chain) is None
    buffers = DecodeBuffers(3, 8, torch.device("cpu"))
    penalty = "repetition_penalty" in settings
    buffers.reset(3, prompt, prompt, torch.cat([mask, mask.new_ones(3, 3)], dim=1), None, None,
                  vocab if penalty else None)
    if penalty:  # the drawn tokens join the seen mask as `sample_into` adds them
        buffers.seen.scatter_(1, generated, True)
        # by hand: row 0 has seen {1, 2, 3} (its padding tokens 7, 7 left out), row 1 {0, 4, 5, 6, 19}
        assert buffers.seen[0].nonzero().flatten().tolist() == [1, 2, 3]
        assert buffers.seen[1].nonzero().flatten().tolist() == [0, 4, 5, 6, 19]
    scores = torch.randn(3, vocab) * 3
    eager = scores.clone()
    for processor in chain:
        eager = processor(torch.cat([prompt, generated], dim=1), eager)
    ours = processed_scores(scores.clone(), buffers.seen, chain)
    assert torch.equal(ours, eager)


def test_processors_the_graph_cannot_run_are_named() -> None:
    chain = processors(no_repeat_ngram_size=2, temperature=0.5)
    assert graph_sampling_unsupported(chain) == "NoRepeatNGramLogitsProcessor reads the sequence so far"
    assert isinstance(chain[0], NoRepeatNGramLogitsProcessor)
    assert graph_sampling_unsupported(processors(temperature=0.5, top_k=3)) is None
    with pytest.raises(ValueError, match="seen-token mask"):
        processed_scores(torch.zeros(1, 4), None, processors(repetition_penalty=1.2))


def test_sample_into_keeps_the_books() -> None:
    """Two real rows and one padding row, greedy, EOS 5, pad 0 (values by hand)."""
    buffers = DecodeBuffers(3, 6, torch.device("cpu"))
    prompt = torch.tensor([[1], [2], [2]])
    buffers.reset(2, prompt, torch.tensor([[4], [6], [6]]), torch.ones(3, 6, dtype=torch.long),
                  torch.tensor([5, 9]), torch.tensor(0), None)
    assert buffers.real.tolist() == [True, True, False] and buffers.positions.flatten().tolist() == [4, 6, 6]

    def logits(*tokens: int) -> torch.Tensor:
        out = torch.zeros(3, 10)
        out[torch.arange(3), torch.tensor(tokens)] = 1.0
        return out

    sample_into(logits(5, 7, 9), buffers, [], do_sample=False)
    assert buffers.tokens[:, 0].tolist() == [5, 7, 9]
    assert buffers.unfinished.tolist() == [0, 1, 0]
    assert buffers.done_at.item() == -1 and buffers.index.item() == 1  # the real row 1 goes on
    assert buffers.step_ids.flatten().tolist() == [5, 7, 9]
    sample_into(logits(3, 9, 3), buffers, [], do_sample=False)
    assert buffers.tokens[:, 1].tolist() == [0, 9, 0]  # ended rows get the pad token
    assert buffers.unfinished.tolist() == [0, 0, 0] and buffers.done_at.item() == 1
    sample_into(logits(3, 3, 3), buffers, [], do_sample=False)
    assert buffers.tokens[:, 2].tolist() == [0, 0, 0] and buffers.done_at.item() == 1  # the first end is kept
    assert buffers.index.item() == 3


def count_outside(decoder: CompiledDecoder, model: Any, ids: torch.Tensor, mask: torch.Tensor,
                  config: GenerationConfig) -> tuple[Counter[str], int]:
    """The operators the decode loop dispatches outside the compiled step, and how many steps ran."""
    original = decoder._step_function
    steps = 0

    def counted(device: torch.device, *args: Any, **kwargs: Any) -> Any:
        function = original(device, *args, **kwargs)

        def run(*call_args: Any, **call_kwargs: Any) -> Any:
            nonlocal steps
            steps += 1
            with _disable_current_modes():  # what the compiled region runs is not counted
                return function(*call_args, **call_kwargs)

        return run

    decoder._step_function = counted  # type: ignore[method-assign]
    try:
        with OpCounter() as counter:
            torch.manual_seed(0)
            decoder.decode(model, ids, mask, config)
    finally:
        del decoder._step_function
    return counter.ops, steps


@pytest.fixture(scope="module")
def rows32(tokenizer: PreTrainedTokenizerBase) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """The toy model and 32 left-padded prompts (a full batch bucket)."""
    torch.manual_seed(0)
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2).eval()
    prompts = [f"Q:{a}+{a * 7 % 13}=A:" for a in range(32)]
    ids, mask = pad_left([tokenizer(p)["input_ids"] for p in prompts], tokenizer.pad_token_id)
    return model, ids, mask


def never_drawn(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int) -> int:
    """A token id that greedy decoding of these rows never draws in `tokens` steps (an EOS id that keeps every row
    going, so the loop tracks the end without reaching it)."""
    out = decode(model, ids, mask, GenerationConfig(do_sample=False, max_new_tokens=tokens))[:, ids.size(1):]
    drawn = set(out.flatten().tolist())
    return next(t for t in range(model.config.vocab_size - 1, 0, -1) if t not in drawn)


@pytest.mark.parametrize("sync_every", [4, 8])
def test_per_token_work_outside_the_compiled_step(rows32, graph_counter, sync_every) -> None:
    """32 rows, sampled with a repetition penalty, top-k and top-p, EOS tracked: per generated token, the loop runs at
    most 2 operators and 1 host sync per `sync_every` tokens outside the compiled step (its end check), and nothing
    else. The first compiled loop ran ~20 operators and one host sync per token there."""
    model, ids, mask = rows32
    eos = never_drawn(model, ids, mask, 40)
    decoder = CompiledDecoder(backend=graph_counter(), sync_every=sync_every)
    settings = dict(do_sample=True, temperature=1.2, top_k=20, top_p=0.95, repetition_penalty=1.2,
                    eos_token_id=eos, pad_token_id=0)
    count_outside(decoder, model, ids, mask, GenerationConfig(max_new_tokens=8, **settings))  # builds the cache
    short, short_steps = count_outside(decoder, model, ids, mask, GenerationConfig(max_new_tokens=8, **settings))
    decoder.stats.clear()
    long, long_steps = count_outside(decoder, model, ids, mask, GenerationConfig(max_new_tokens=40, **settings))
    # the decoder's own account (bench_gpu.py reports it per token): 40 tokens, 39 compiled steps, a check at
    # tokens 8, 16, ... and one at the end
    assert dict(decoder.stats) == {"calls": 1, "tokens": 40, "compiled_steps": 39,
                                   "host_checks": 39 // sync_every + 1}
    assert (short_steps, long_steps) == (7, 39)  # no row ended: every token but the first is a compiled step
    tokens = long_steps - short_steps
    ops = sum(long.values()) - sum(short.values())
    syncs = sum(long[op] for op in SYNC_OPS) - sum(short[op] for op in SYNC_OPS)
    assert syncs / tokens <= 1 / sync_every
    assert ops / tokens <= 2 / sync_every
    assert decoder.failure is None and not decoder._warned


def test_the_whole_step_is_one_graph(rows32, graph_counter) -> None:
    """Dynamo takes the forward, the processors, the draw and the bookkeeping as one graph, without a break."""
    import torch._dynamo.utils as dynamo_utils

    model, ids, mask = rows32
    counter = graph_counter()
    decoder = CompiledDecoder(backend=counter)
    breaks = sum(dynamo_utils.counters["graph_break"].values())
    config = GenerationConfig(do_sample=True, top_k=10, top_p=0.9, min_p=0.01, repetition_penalty=1.1,
                              max_new_tokens=12, eos_token_id=3, pad_token_id=0)
    torch.manual_seed(1)
    decoder.decode(model, ids, mask, config)
    torch.manual_seed(2)
    decoder.decode(model, ids, mask, config)  # a second call reuses the graph
    assert sum(dynamo_utils.counters["graph_break"].values()) == breaks
    assert counter.graphs == 1
    targets = {str(node.target) for node in counter.modules[0].graph.nodes
               if node.op in ("call_function", "call_method")}
    assert any("multinomial" in t for t in targets) and any("index_copy" in t for t in targets)
    assert decoder.failure is None and not decoder._warned


def graph_operators(graph_module: Any) -> int:
    """The operators of a traced graph (calls; not its inputs, attribute reads or output)."""
    return sum(node.op in ("call_function", "call_method", "call_module") for node in graph_module.graph.nodes)


def test_operators_per_token_do_not_grow_with_the_agents(tokenizer, graph_counter) -> None:
    """32 rows as 1, 2 or 4 agents' equal runs of LoRA adapters (MAGRPO's layout): each layout's decode step is one
    graph with the same operators, the adapters applied as one batched matmul per LoRA layer. Run by run (the first
    compiled loop), every further agent added its slice, dropout, two matmuls, scaling and add per LoRA layer."""
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    model = get_peft_model(build_toy_model(tokenizer, hidden_size=32, num_layers=2), config, adapter_name="a0")
    for index in range(1, 4):
        model.add_adapter(f"a{index}", copy.deepcopy(config))
    model.eval()
    ids, mask = pad_left([tokenizer(f"Q:{a}+{a % 5}=A:")["input_ids"] for a in range(32)], tokenizer.pad_token_id)
    settings = GenerationConfig(do_sample=True, top_k=10, max_new_tokens=3, eos_token_id=3, pad_token_id=0)
    operators = {}
    for agents in (1, 2, 4):
        counter = graph_counter()
        decoder = CompiledDecoder(backend=counter)
        names = [f"a{a}" for a in range(agents) for _ in range(32 // agents)]
        torch.manual_seed(0)
        decoder.decode(model, ids, mask, settings, adapter_names=names)
        assert counter.graphs == 1 and decoder.failure is None
        operators[agents] = graph_operators(counter.modules[0])
    assert operators[1] == operators[2] == operators[4], operators
