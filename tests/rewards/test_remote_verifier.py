"""The remote verifier under hostile and unlucky conditions: oversized bodies and responses, idle connections, a
server that restarts or stays down. Everything runs on 127.0.0.1 with short timeouts and small backoffs."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForSequenceClassification

from helpers import free_port
from trl_marl.rewards.remote import RemoteVerifier, VerifierError, VerifierServer, VerifierUnavailableError
from trl_marl.rewards.verifier import AnswerVerifier, ModelVerifier
from trl_marl.scripts.serve_verifier import serve_verifier_main
from trl_marl.toy import build_toy_tokenizer
from trl_marl.validation import RewardFunctionError, call_reward_function


class CountingVerifier:
    """Scores 0.5 and counts its calls and the responses it saw."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    def score_batch(self, questions, responses, golds=None):
        self.calls += 1
        return [0.5] * len(responses)


# ------------------------------------------------------------------------------------------------ server limits


def test_oversized_body_is_refused_with_413_before_decoding():
    verifier = CountingVerifier()
    with VerifierServer(verifier, max_body_bytes=1000) as server:
        body = json.dumps({"questions": ["q"], "responses": ["7" * 5000]}).encode()
        request = urllib.request.Request(server.url + "/score", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)
        assert info.value.code == 413
        message = json.loads(info.value.read())["error"]
        assert f"{len(body)} bytes exceeds this server's limit of 1000 bytes" in message
        assert "batch_size" in message and "--max-body-mb" in message
        # the client reports it at once (a 4xx is not retried) with the server's explanation
        remote = RemoteVerifier(server.url, timeout=5.0, backoff=0.01)
        with pytest.raises(VerifierError, match="HTTP 413: .*exceeds this server's limit of 1000 bytes") as error:
            remote.score_batch(["q"], ["7" * 5000])
        assert not isinstance(error.value, VerifierUnavailableError)
        assert verifier.calls == 0  # nothing reached the verifier
        assert remote.score_batch(["q"], ["7" * 100]) == [0.5]  # a body within the limit is served
        assert remote.health()["max_body_bytes"] == 1000


def test_server_rejects_bad_limits():
    with pytest.raises(ValueError, match="max_body_bytes"):
        VerifierServer(CountingVerifier(), max_body_bytes=0)
    with pytest.raises(ValueError, match="timeout_s"):
        VerifierServer(CountingVerifier(), timeout_s=0.0)
    with pytest.raises(ValueError, match="max_connections"):
        VerifierServer(CountingVerifier(), max_connections=0)


def recv_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


def test_idle_and_stalled_connections_are_closed():
    verifier = CountingVerifier()
    with VerifierServer(verifier, timeout_s=0.2) as server:
        # a connection that never sends a request, and one that stops halfway through its body
        idle = socket.create_connection(("127.0.0.1", server.port), timeout=5.0)
        stalled = socket.create_connection(("127.0.0.1", server.port), timeout=5.0)
        with idle, stalled:
            stalled.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"responses\"")
            # closed by the server within its timeout (without it, recv waits 5 s and raises socket.timeout)
            assert recv_until_closed(idle) == b""
            assert b"200 OK" not in recv_until_closed(stalled)
        assert verifier.calls == 0
        # the server still answers
        assert RemoteVerifier(server.url, timeout=5.0).score_batch(["q"], ["r"]) == [0.5]


def test_connections_beyond_the_limit_wait_for_a_free_thread():
    verifier = CountingVerifier()
    with VerifierServer(verifier, timeout_s=5.0, max_connections=2) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=5.0) for _ in range(2)]
        try:
            deadline = time.monotonic() + 5.0
            while server._httpd.num_connections < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server._httpd.num_connections == 2  # two idle connections hold both threads
            with pytest.raises(VerifierUnavailableError, match="timed out"):  # a third waits, not served
                RemoteVerifier(server.url, timeout=0.3, retries=0).score_batch(["q"], ["r"])
            assert verifier.calls == 0 and server._httpd.num_connections == 2
            held[0].close()  # a thread frees up: waiting and new requests are served
            assert RemoteVerifier(server.url, timeout=2.0, backoff=0.05, retry_budget_s=5.0).score_batch(
                ["q"], ["r"]) == [0.5]
        finally:
            for sock in held:
                sock.close()


def test_cli_passes_the_limits_and_rejects_bad_ones(monkeypatch, capsys):
    import trl_marl.rewards.remote as remote  # the command imports both classes from their modules when it runs
    import trl_marl.rewards.verifier as verifier

    seen = {}

    class FakeModelVerifier:
        def __init__(self, *args, **kwargs):
            pass

    class FakeServer:
        def __init__(self, verifier, **kwargs):
            seen.update(kwargs)

        def serve_forever(self, ready=None):
            raise KeyboardInterrupt

    monkeypatch.setattr(verifier, "ModelVerifier", FakeModelVerifier)
    monkeypatch.setattr(remote, "VerifierServer", FakeServer)
    argv = ["--model", "m", "--max-body-mb", "0.5", "--timeout", "7", "--max-connections", "3"]
    assert serve_verifier_main(argv) == 0
    assert seen["max_body_bytes"] == 1 << 19 and seen["timeout_s"] == 7.0 and seen["max_connections"] == 3
    with pytest.raises(SystemExit):
        serve_verifier_main(["--model", "m", "--max-body-mb", "0"])
    assert "--max-body-mb must be a positive number" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ long responses


class RecordingTokenizer:
    """Wraps a tokenizer and records the length of every text it is asked to tokenize."""

    def __init__(self, tokenizer) -> None:
        self.inner = tokenizer
        self.lengths: list[int] = []

    def __call__(self, texts, **kwargs):
        self.lengths.extend(len(text) for text in texts)
        return self.inner(texts, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_model_verifier_cuts_long_responses_before_tokenizing():
    tokenizer = build_toy_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, num_labels=1, pad_token_id=tokenizer.pad_token_id,
        use_sliding_window=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(config).eval()
        torch.nn.init.normal_(model.score.weight, std=1.0)
    recording = RecordingTokenizer(tokenizer)
    verifier = ModelVerifier(model, recording, max_length=16)
    assert verifier.max_chars == 16 * 32
    huge = "1+2=3 " * 200_000 + "so 3"  # 1.2 MB; the tokenizer sees at most max_chars characters of it
    score = verifier.score("Q:1+2=A:", huge)
    assert recording.lengths and max(recording.lengths) <= verifier.max_chars
    # the same score as the text's tail (the last 16 tokens lie well within the last 512 characters)
    assert score == pytest.approx(verifier.score("", huge[-200:]), abs=1e-6)
    # the question is cut too, and the formatted text never exceeds max_chars
    assert len(verifier.format("9" * 10**6, "r")) == verifier.max_chars
    with pytest.raises(ValueError, match="max_chars"):
        ModelVerifier(model, tokenizer, max_length=16, max_chars=8)


# ------------------------------------------------------------------------------------------------ client retries


def test_client_rides_out_a_server_restart():
    """The server is down for ~1 s (longer than the old client's 3 retries with these waits) and comes back."""
    port = free_port()
    verifier = CountingVerifier()
    restarted = threading.Event()

    def restart_later() -> None:
        time.sleep(1.0)
        server = VerifierServer(verifier, port=port).start()
        restarted.set()
        time.sleep(5.0)
        server.stop()

    thread = threading.Thread(target=restart_later, daemon=True)
    thread.start()
    remote = RemoteVerifier(f"http://127.0.0.1:{port}", timeout=1.0, backoff=0.02, max_backoff=0.1,
                            retry_budget_s=4.0)
    assert remote.score_batch(["q"], ["r"]) == [0.5]
    assert restarted.is_set() and verifier.calls == 1


def test_client_gives_up_after_its_budget_with_a_clear_error():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    remote = RemoteVerifier(url, timeout=0.5, backoff=0.01, max_backoff=0.05, retry_budget_s=0.4)
    assert remote.max_wait_s == pytest.approx(0.9)
    start = time.monotonic()
    with pytest.raises(VerifierUnavailableError) as info:
        remote.score_batch(["q"], ["r"])
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert f"The verifier at {url}/score was unreachable for" in message
    assert "retry budget 0.4 s" in message and "retry_budget_s" in message and "serve-verifier" in message
    attempts = int(message.split(": ")[1].split(" attempt")[0])
    assert attempts > 4  # kept trying for the whole budget (waits of 0.01, 0.02, 0.04, 0.05, 0.05, ...)
    assert 0.3 <= elapsed < remote.max_wait_s + 1.0, elapsed
    # inside a trainer the reward contract turns it into a RewardFunctionError naming the function and the URL
    expected = rf"`remote_verifier` raised VerifierUnavailableError: The verifier at {url}/score was unreachable"
    with pytest.raises(RewardFunctionError, match=expected):
        call_reward_function(remote, "remote_verifier", 1, prompts=["p"], completions=["r"], question=["q"])


class FailingVerifier(CountingVerifier):
    def score_batch(self, questions, responses, golds=None):
        self.calls += 1
        raise RuntimeError("CUDA out of memory")


def test_a_failing_verifier_is_reported_after_a_few_retries_not_the_whole_budget():
    verifier = FailingVerifier()
    with VerifierServer(verifier) as server:
        remote = RemoteVerifier(server.url, timeout=5.0, backoff=0.01, retry_budget_s=300.0)
        with pytest.raises(VerifierUnavailableError, match=r"failed 4 times in a row \(HTTP 500.*CUDA out of memory"):
            remote.score_batch(["q"], ["r"])
    assert verifier.calls == 4  # the first attempt and 3 retries


def test_retries_caps_the_attempts_within_the_budget():
    url = f"http://127.0.0.1:{free_port()}"
    remote = RemoteVerifier(url, timeout=0.5, retries=2, backoff=0.01, retry_budget_s=60.0)
    assert remote.max_wait_s == pytest.approx(3 * 0.5 + 0.01 + 0.02)
    with pytest.raises(VerifierUnavailableError, match=r": 3 attempt\(s\) failed"):
        remote.score_batch(["q"], ["r"])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"timeout": 0}, "timeout"), ({"retries": -1}, "retries"), ({"backoff": -1.0}, "backoff"),
     ({"retry_budget_s": float("inf")}, "retry_budget_s"), ({"max_backoff": float("nan")}, "max_backoff")],
)
def test_client_rejects_bad_settings(kwargs, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        RemoteVerifier("http://127.0.0.1:1", **kwargs)


def test_answer_verifier_served_within_limits():
    with VerifierServer(AnswerVerifier(), max_body_bytes=1 << 20) as server:
        remote = RemoteVerifier(server.url, gold_column="answer", timeout=5.0)
        assert remote(prompts=["p"], completions=["#### 18"], question=["q"], answer=["18"]) == [1.0]
