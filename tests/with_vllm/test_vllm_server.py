"""`vllm_mode="server"`: a server started with `trl-marl vllm-serve` serves each agent's adapter over HTTP, and
adapters follow training (see `conftest.py`; the server is a separate process, started once for this module)."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from trl_marl.team import AgentTeam, Generation

pytest.importorskip("vllm")

PROMPTS = [["Q:12+3=A:", "T:5?", "Q:45+67=A:"], ["Q:12+3=A:", "Q:1+1=A:"]]
HIDDEN, HEADS, CONTEXT = 64, 2, 512  # a head size of 32, vLLM's CPU minimum


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base model folder, URL) of a vLLM server started with `trl-marl vllm-serve` on a toy base model."""
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    base = tmp_path_factory.mktemp("server-base")
    # `vllm-serve` writes its key and adapter folder to a connection file here; the trainer (this process) reads it
    state = tmp_path_factory.mktemp("server-state")
    previous = os.environ.get("TRL_MARL_VLLM_SERVE_DIR")
    os.environ["TRL_MARL_VLLM_SERVE_DIR"] = str(state)
    os.environ.pop("VLLM_API_KEY", None)
    tokenizer = build_toy_tokenizer()
    build_toy_model(tokenizer, hidden_size=HIDDEN, num_layers=2, num_heads=HEADS,
                    max_position_embeddings=CONTEXT).save_pretrained(base)
    tokenizer.save_pretrained(base)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = Path(base) / "server.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "trl_marl.cli", "vllm-serve", "--model", str(base), "--max-loras", "2",
             "--max-lora-rank", "8", "--port", str(port), "--dtype", "float32", "--kv-cache-memory-bytes",
             str(32 << 20), "--max-model-len", str(CONTEXT)], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the vLLM server did not start:\n" + log.read_text()[-3000:])
                time.sleep(2)
        yield str(base), url
    finally:
        if previous is None:
            os.environ.pop("TRL_MARL_VLLM_SERVE_DIR", None)
        else:
            os.environ["TRL_MARL_VLLM_SERVE_DIR"] = previous
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()


def get(url: str, path: str, key: str | None = None, payload: dict | None = None) -> tuple[int, Any]:
    """(status, JSON body) of a request to the server, with the API key when given."""
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url + path, data=data, headers=headers, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def served_adapters(url: str) -> set[str]:
    status, models = get(url, "/v1/models", server_key(url))
    assert status == 200
    return {model["id"] for model in models["data"] if model.get("parent")}


def server_key(url: str) -> str:
    from trl_marl.team.generation.serve_guard import read_connection

    return read_connection(int(url.rsplit(":", 1)[1]))["api_key"]


def test_the_server_wants_its_key_loads_only_its_folder_and_hides_docs(server: tuple[str, str],
                                                                       tmp_path: Path) -> None:
    _, url = server
    key = server_key(url)
    assert get(url, "/health")[0] == 200
    assert get(url, "/v1/models")[0] == 401 and get(url, "/tokenize", payload={"prompt": "x"})[0] == 401
    for path in ("/docs", "/openapi.json", "/metrics"):
        assert get(url, path, key)[0] == 404, path
    (tmp_path / "adapter").mkdir()
    refused = [get(url, "/v1/load_lora_adapter", key, {"lora_name": "x", "lora_path": path})
               for path in (str(tmp_path / "adapter"), "/etc", "../../../etc", str(tmp_path / "missing"))]
    assert {status for status, _ in refused} == {403} and len({body for _, body in refused}) == 1


def test_server_serves_each_agents_adapter_and_follows_training(server: tuple[str, str]) -> None:
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_marl import MultiAgentPPOConfig
    from trl_marl.team.generation import build_generation_backend

    base, url = server
    tokenizer = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(0)
    team = AgentTeam.build(AutoModelForCausalLM.from_pretrained(base), 2, processing_class=tokenizer,
                           peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():
        for name, param in team.models[0].named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    config = MultiAgentPPOConfig(output_dir="/tmp/unused", report_to=[], use_vllm=True, vllm_mode="server",
                                 vllm_server_base_url=url, vllm_server_timeout=120.0)
    backend = build_generation_backend(config, team)  # reads the key and folder; checks the log-probs' kind
    assert backend.api_key == server_key(url)
    greedy = GenerationConfig(do_sample=False, max_new_tokens=5, eos_token_id=tokenizer.eos_token_id,
                              pad_token_id=tokenizer.pad_token_id)

    def generate(with_backend: Any) -> Generation:
        team.generation_backend = with_backend
        try:
            return team.generate(PROMPTS, greedy)
        finally:
            team.generation_backend = None

    served = generate(backend)
    before = served.completion_ids
    # the sampled tokens' log-probs come back over HTTP (`vllm_importance_sampling_correction`, TRL's default), in
    # the returned `Generation` (the team keeps nothing of the call)
    scores = served.sampling_logps
    assert scores is not None and [[len(r) for r in a] for a in scores] == [[len(r) for r in a] for a in before]
    assert all(math.isfinite(lp) and lp <= 0.0 for a in scores for r in a for lp in r)
    assert not hasattr(team, "sampling_logps")
    assert before == generate(None).completion_ids  # each row its own agent's greedy tokens
    assert before[0][0] != before[1][0]
    assert served_adapters(url) == {backend.lora_name("agent_0"), backend.lora_name("agent_1")}
    old = backend.lora_name("agent_0")
    with torch.no_grad():
        for name, param in team.models[0].named_parameters():
            if "lora_B.agent_0." in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    after = generate(backend).completion_ids
    assert after == generate(None).completion_ids and after[0] != before[0] and after[1] == before[1]
    assert backend.uploads == 3 and old not in served_adapters(url)  # the old version was unloaded
    backend.close()
    assert served_adapters(url) == set()
