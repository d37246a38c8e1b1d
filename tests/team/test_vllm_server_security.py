"""`trl-marl vllm-serve` and the server backend, without vLLM: the key, the adapter folder, the closed paths, the
log-probability check at start, and the settings sent. vLLM's server is replaced by a plain ASGI app (for the guard)
and by a small HTTP server that answers as vLLM's does (for the trainer's side)."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from peft import LoraConfig
from transformers import GenerationConfig

from trl_marl import cli
from trl_marl.team import AgentTeam
from trl_marl.team.generation import serve_guard
from trl_marl.team.generation.serve_guard import REFUSED_ADAPTER, ServerGuard, read_connection, write_connection
from trl_marl.team.generation.vllm_server import VLLMServerBackend
from trl_marl.toy import build_toy_model

KEY = "k" * 43


class App:
    """Stands for vLLM's app: records what reaches it and answers 200."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append((scope["path"], body))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def call(
    guard: ServerGuard, path: str, method: str = "GET", body: bytes = b"", key: str | None = KEY
) -> tuple[int, bytes]:
    """One HTTP request through `guard`: (status, body)."""
    headers = [(b"content-type", b"application/json")]
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": headers}
    chunks = [body[:5], body[5:]]  # a body in two messages, as a server may deliver it
    replies: list[dict] = []

    async def receive() -> dict:
        chunk = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message: dict) -> None:
        replies.append(message)

    asyncio.run(guard(scope, receive, send))
    status = next(m["status"] for m in replies if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in replies if m["type"] == "http.response.body")


@pytest.fixture()
def adapter_root(tmp_path: Path) -> Path:
    root = tmp_path / "adapters"
    (root / "run-1" / "agent_0-v1").mkdir(parents=True)
    return root


def test_the_guard_asks_for_the_key_everywhere_but_health_and_closes_docs_and_metrics(adapter_root: Path) -> None:
    """vLLM checks the key on /v1 and a few prefixes only; /tokenize, /pause, /metrics and the docs were open."""
    app = App()
    guard = ServerGuard(app, {"VLLM_API_KEY": KEY, "TRL_MARL_VLLM_ADAPTER_DIR": str(adapter_root)})
    for path in ("/v1/models", "/tokenize", "/pause", "/v1/load_lora_adapter", "/collective_rpc"):
        assert call(guard, path, key=None)[0] == 401, path
        assert call(guard, path, key="wrong")[0] == 401, path
    assert call(guard, "/health", key=None)[0] == 200
    assert call(guard, "/v1/models")[0] == 200
    for path in ("/docs", "/redoc", "/openapi.json", "/metrics", "/metrics/", "/docs/oauth2-redirect"):
        assert call(guard, path)[0] == 404, path
    opened = ServerGuard(app, {"VLLM_API_KEY": KEY, "TRL_MARL_VLLM_OPEN_DOCS": "1", "TRL_MARL_VLLM_OPEN_METRICS": "1"})
    assert [call(opened, path)[0] for path in ("/docs", "/openapi.json", "/metrics")] == [200, 200, 200]
    assert call(opened, "/metrics", key=None)[0] == 401


def test_adapters_load_only_from_the_adapter_folder_with_one_message(adapter_root: Path, tmp_path: Path) -> None:
    """Before: a client loaded a root-only folder by absolute path and by `../../..`, and vLLM's errors told files
    from folders. Every path outside the folder now gets the same 403, and vLLM loads the checked path."""
    app = App()
    root = os.path.realpath(adapter_root)
    guard = ServerGuard(app, {"VLLM_API_KEY": KEY, "TRL_MARL_VLLM_ADAPTER_DIR": root})
    outside = tmp_path / "secret"
    outside.mkdir()
    (tmp_path / "file.txt").write_text("x")
    (adapter_root / "escape").symlink_to(outside)
    refused = [
        str(outside),
        str(tmp_path / "file.txt"),
        str(tmp_path / "missing"),
        "/etc",
        "/",
        "../secret",
        "run-1/../../secret",
        f"{root}/../secret",
        "escape",
        "escape/x",
        root,
        "",
        "\x00",
        None,
        3,
    ]
    answers = set()
    for path in refused:
        status, body = call(
            guard, "/v1/load_lora_adapter", "POST", json.dumps({"lora_name": "a", "lora_path": path}).encode()
        )
        assert status == 403, path
        answers.add(body)
    assert answers == {json.dumps({"error": REFUSED_ADAPTER}).encode()}  # nothing tells a file from a folder
    assert app.seen == []
    for path in ("run-1/agent_0-v1", f"{root}/run-1/agent_0-v1", f"{adapter_root}/run-1/agent_0-v1"):
        status, _ = call(
            guard, "/v1/load_lora_adapter", "POST", json.dumps({"lora_name": "a", "lora_path": path}).encode()
        )
        assert status == 200
        assert json.loads(app.seen[-1][1]) == {"lora_name": "a", "lora_path": f"{root}/run-1/agent_0-v1"}
    assert call(guard, "/v1/load_lora_adapter", "POST", b"[1]")[0] == 400
    assert call(guard, "/v1/load_lora_adapter", "POST", b"x" * (70 << 10))[0] == 413
    no_folder = ServerGuard(app, {"VLLM_API_KEY": KEY})
    assert call(no_folder, "/v1/load_lora_adapter", "POST", b'{"lora_path": "/tmp"}')[0] == 403


def test_vllm_serve_generates_a_key_shares_it_privately_and_warns_off_loopback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Before: no key, any adapter path, /docs /openapi.json /metrics open, no word about a public --host."""
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    ran: list[tuple[list[str], dict[str, str]]] = []

    def execve(path: str, argv: list[str], env: dict[str, str]) -> None:
        ran.append((argv, env))

    monkeypatch.setattr(os, "execve", execve)
    cli.main(["vllm-serve", "--model", "base", "--port", "8123", "--max-model-len", "512"])
    argv, env = ran[-1]
    key = env["VLLM_API_KEY"]
    assert len(key) >= 40 and key not in " ".join(argv)  # never on the command line every user can read
    assert argv[argv.index("--middleware") + 1] == "trl_marl.team.generation.serve_guard.ServerGuard"
    assert "--disable-fastapi-docs" in argv and argv[-2:] == ["--max-model-len", "512"]
    assert argv[argv.index("--logprobs-mode") + 1] == "processed_logprobs"
    assert (env["TRL_MARL_VLLM_OPEN_DOCS"], env["TRL_MARL_VLLM_OPEN_METRICS"]) == ("0", "0")
    connection = tmp_path / "state" / "port-8123.json"
    assert stat.S_IMODE(connection.stat().st_mode) == 0o600
    assert read_connection(8123) == {"port": 8123, "api_key": key, "adapter_dir": env["TRL_MARL_VLLM_ADAPTER_DIR"]}
    assert stat.S_IMODE(Path(env["TRL_MARL_VLLM_ADAPTER_DIR"]).stat().st_mode) == 0o700
    said = capsys.readouterr().err
    assert key not in said and str(connection) in said and "warning" not in said
    cli.main(["vllm-serve", "--model", "base", "--port", "8124", "--host", "0.0.0.0", "--open-docs"])
    argv, env = ran[-1]
    assert env["VLLM_API_KEY"] != key and "--disable-fastapi-docs" not in argv
    assert "warning: serving on 0.0.0.0, reachable from other machines" in capsys.readouterr().err
    monkeypatch.setenv("VLLM_API_KEY", "mine")
    cli.main(["vllm-serve", "--model", "base", "--port", "8125", "--api-key", "given"])
    assert ran[-1][1]["VLLM_API_KEY"] == "given" and "given" not in ran[-1][0]


class FakeVLLM(BaseHTTPRequestHandler):
    """Answers as vLLM's OpenAI server does for what the backend sends; `server.logprob` is what a top-k=1 probe
    token gets (0.0: processed log-probs; negative: raw ones)."""

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        if self.path == "/health" or self.headers.get("Authorization") == f"Bearer {self.server.key}":
            return True
        self._answer(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:  # noqa: N802
        if self._authorized():
            self._answer(200, {"data": [{"id": "base", "parent": None}]} if self.path == "/v1/models" else {})

    def do_POST(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.posts.append((self.path, payload))
        if self.path != "/v1/completions":
            self._answer(200, {})
            return
        rows = payload["prompt"]
        value = self.server.logprob if payload.get("top_k") == 1 else -0.5
        self._answer(
            200,
            {
                "choices": [
                    {
                        "index": i,
                        "token_ids": [5] * payload["max_tokens"],
                        "logprobs": {"token_logprobs": [value] * payload["max_tokens"]},
                    }
                    for i in range(len(rows))
                ]
            },
        )


@pytest.fixture()
def fake_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVLLM)
    server.key, server.logprob, server.posts = KEY, 0.0, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def lora_team(tokenizer: object) -> AgentTeam:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    return AgentTeam.build(
        model, 2, peft_config=LoraConfig(r=4, target_modules=["q_proj"]), processing_class=tokenizer
    )


def test_the_trainer_reads_the_key_and_folder_and_checks_the_servers_logprobs(
    tokenizer: object, fake_server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: no key was ever sent, adapters went to a folder of the trainer's choosing, and a server returning raw
    log-probabilities (a hand-started one) went unnoticed."""
    monkeypatch.setenv("TRL_MARL_VLLM_SERVE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv(serve_guard.ADAPTER_DIR_ENV, raising=False)
    port = fake_server.server_address[1]
    url = f"http://127.0.0.1:{port}"
    team = lora_team(tokenizer)
    with pytest.raises(RuntimeError, match=r"wants an API key .*401.*none was found.*VLLM_API_KEY"):
        VLLMServerBackend(team, url, timeout=10, sampling_logprobs=True)
    write_connection(port, KEY, tmp_path / "adapters")
    backend = VLLMServerBackend(team, url, timeout=10, sampling_logprobs=True)
    assert backend.api_key == KEY
    assert Path(backend._root).parent == (tmp_path / "adapters").resolve()
    probe = fake_server.posts[-1][1]
    assert (probe["top_k"], probe["max_tokens"], probe["logprobs"], probe["model"]) == (1, 1, 0, "base")
    team.base_model_of(0).generation_config = GenerationConfig(
        do_sample=True,
        temperature=0.7,
        top_k=20,
        top_p=0.8,
        repetition_penalty=1.1,
        eos_token_id=[tokenizer.eos_token_id, 3],
    )
    team.generation_backend = backend
    with pytest.warns(UserWarning, match="systematic bias"):
        team.generate([["T:5?"], ["T:7?"]], GenerationConfig(max_new_tokens=2))
    sent = [payload for path, payload in fake_server.posts if path == "/v1/completions"][-1]
    assert {name: sent[name] for name in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")} == {
        "temperature": 0.7,
        "top_k": 20,
        "top_p": 0.8,
        "min_p": 0.0,
        "repetition_penalty": 1.1,
    }
    assert sent["stop_token_ids"] == [tokenizer.eos_token_id, 3]
    loads = [payload for path, payload in fake_server.posts if path == "/v1/load_lora_adapter"]
    assert loads and all(Path(p["lora_path"]).parent == Path(backend._root) for p in loads)
    backend.close()
    fake_server.logprob = -1.25  # a server with vLLM's default `--logprobs-mode raw_logprobs`
    with pytest.raises(RuntimeError, match=r"returns raw log-probabilities.*expects `processed_logprobs`"):
        VLLMServerBackend(team, url, timeout=10, sampling_logprobs=True)
    raw = VLLMServerBackend(team, url, timeout=10, sampling_logprobs=True, logprobs_mode="raw_logprobs")
    raw.close()
    VLLMServerBackend(team, url, timeout=10, sampling_logprobs=False).close()  # no correction: nothing to check
    monkeypatch.setenv("VLLM_API_KEY", "other")  # the environment wins over the file
    with pytest.raises(RuntimeError, match="the one sent is not it"):
        VLLMServerBackend(team, url, timeout=10, sampling_logprobs=True)
