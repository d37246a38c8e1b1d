"""The remote verifier under hostile and unlucky conditions: oversized bodies and responses, idle connections, a
server that restarts or stays down. Everything runs on 127.0.0.1 with short timeouts and small backoffs."""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForSequenceClassification

from helpers import free_port
from trl_marl.reward_contract import RewardFunctionError, call_reward_function
from trl_marl.rewards.remote import RemoteVerifier, VerifierError, VerifierServer, VerifierUnavailableError
from trl_marl.rewards.serving import ClientGoneError, ScoreJob, Scorer, ScorerBusyError, client_gone
from trl_marl.rewards.verifier import AnswerVerifier, ModelVerifier
from trl_marl.scripts.serve_verifier import serve_verifier_main
from trl_marl.toy import build_toy_tokenizer


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


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_body_bytes", 0),
        ("timeout_s", 0.0),
        ("max_connections", 0),
        ("request_timeout_s", float("inf")),
        ("request_timeout_s", -1.0),
        ("max_items", 0),
        ("max_items", 2.5),
        ("max_score_s", float("nan")),
        ("chunk_size", 0),
        ("max_connections", True),
    ],
)
def test_server_rejects_bad_limits(field, value):
    with pytest.raises(ValueError, match=f"`{field}` must be a positive"):
        VerifierServer(CountingVerifier(), **{field: value})


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
            stalled.sendall(b'POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"responses"')
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
                ["q"], ["r"]
            ) == [0.5]
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
    argv += ["--request-timeout", "11", "--max-items", "50", "--max-score-s", "2.5"]
    assert serve_verifier_main(argv) == 0
    assert seen["max_body_bytes"] == 1 << 19 and seen["timeout_s"] == 7.0 and seen["max_connections"] == 3
    assert seen["request_timeout_s"] == 11.0 and seen["max_items"] == 50 and seen["max_score_s"] == 2.5
    for flag, value, message in [
        ("--max-body-mb", "0", "--max-body-mb must be a positive number"),
        ("--request-timeout", "0", "--request-timeout must be a positive number of seconds"),
        ("--max-score-s", "inf", "--max-score-s must be a positive number of seconds"),
        ("--max-items", "0", "--max-items must be at least 1"),
    ]:
        with pytest.raises(SystemExit):
            serve_verifier_main(["--model", "m", flag, value])
        assert message in capsys.readouterr().err
    # without flags, the server's own defaults
    seen.clear()
    assert serve_verifier_main(["--model", "m"]) == 0
    defaults = inspect.signature(VerifierServer).parameters
    for name in ("timeout_s", "max_connections", "request_timeout_s", "max_items", "max_score_s", "max_body_bytes"):
        assert seen[name] == defaults[name].default, name


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
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
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
    remote = RemoteVerifier(f"http://127.0.0.1:{port}", timeout=1.0, backoff=0.02, max_backoff=0.1, retry_budget_s=4.0)
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
    [
        ({"timeout": 0}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"backoff": -1.0}, "backoff"),
        ({"retry_budget_s": float("inf")}, "retry_budget_s"),
        ({"max_backoff": float("nan")}, "max_backoff"),
    ],
)
def test_client_rejects_bad_settings(kwargs, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        RemoteVerifier("http://127.0.0.1:1", **kwargs)


def test_answer_verifier_served_within_limits():
    with VerifierServer(AnswerVerifier(), max_body_bytes=1 << 20) as server:
        remote = RemoteVerifier(server.url, gold_column="answer", timeout=5.0)
        assert remote(prompts=["p"], completions=["#### 18"], question=["q"], answer=["18"]) == [1.0]


# ------------------------------------------------------------------------------------------------ slow and hostile
# clients (issue 35, item 5): a deadline per request, slow senders evicted when every thread is busy, caps on the
# items and the scoring time of a request, requests scored in turn, 400 for JSON nested too deeply


def closed_after(sock: socket.socket, limit_s: float) -> float:
    """Seconds until the server closed `sock` (EOF or a reset), reading whatever it answers; fails past `limit_s`."""
    start = time.monotonic()
    sock.settimeout(limit_s)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    return time.monotonic() - start


class Trickler:
    """Keeps sockets sending one byte of an endless header every `interval` seconds (a "slowloris" client)."""

    def __init__(self, port: int, count: int, interval: float = 0.2) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5.0) for _ in range(count)]
        self.alive = list(self.socks)
        self.stop = threading.Event()
        for sock in self.socks:
            sock.sendall(b"POST /score HTTP/1.1\r\nX-Pad: ")
        self.thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self.thread.start()

    def _run(self, interval: float) -> None:
        while not self.stop.wait(interval):
            for sock in list(self.alive):
                try:
                    sock.sendall(b"a")
                except OSError:  # the server closed it
                    self.alive.remove(sock)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)
        for sock in self.socks:
            sock.close()


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_request_trickling_in_is_dropped_at_its_deadline(part):
    verifier = CountingVerifier()
    # silence is allowed for 5 s; the whole request must arrive within 1 s
    with VerifierServer(verifier, timeout_s=5.0, request_timeout_s=1.0) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5.0) as sock:
            if part == "body":
                sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
            else:
                sock.sendall(b"POST /score HTTP/1.1\r\nX-Pad: ")
            sent = threading.Event()

            def trickle() -> None:  # one byte every 0.1 s: 100 s for the 1000 bytes, never 5 s of silence
                for _ in range(1000):
                    try:
                        sock.sendall(b" " if part == "body" else b"a")
                    except OSError:
                        return
                    sent.set()
                    time.sleep(0.1)

            threading.Thread(target=trickle, daemon=True).start()
            assert sent.wait(5.0)
            elapsed = closed_after(sock, limit_s=6.0)  # before the fix: still open after 6 s (socket.timeout)
        assert 0.5 <= elapsed < 2.5, elapsed
        assert verifier.calls == 0
        assert RemoteVerifier(server.url, timeout=5.0, retries=0).score_batch(["q"], ["r"]) == [0.5]


@pytest.mark.parametrize(("max_connections", "slow_clients"), [(4, 4), (2, 5), (64, 66)])
def test_slow_senders_do_not_keep_a_legitimate_request_out(max_connections, slow_clients):
    """The shapes observed: 4 connections sending a byte a second held `--max-connections 4` for 15 s, and 66 held
    the default 64 for 75 s. Now, when every thread is busy, the connection that has been sending its request the
    longest (over a second) is closed for the newcomer."""
    verifier = CountingVerifier()
    with VerifierServer(verifier, timeout_s=30.0, request_timeout_s=30.0, max_connections=max_connections) as server:
        slow = Trickler(server.port, slow_clients)
        try:
            deadline = time.monotonic() + 5.0
            while server._httpd.num_connections < max_connections and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server._httpd.num_connections == max_connections  # every thread is held by a slow sender
            start = time.monotonic()
            remote = RemoteVerifier(server.url, timeout=8.0, retries=0)
            assert remote.score_batch(["q"], ["r"]) == [0.5]  # before the fix: timed out after 8 s
            assert time.monotonic() - start < 4.0
            evicted = remote.health()["evicted"]
            assert evicted >= 1 + slow_clients - max_connections
            deadline = time.monotonic() + 3.0  # the evicted ones were closed by the server (a send fails)
            while len(slow.alive) > slow_clients - evicted and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(slow.alive) <= slow_clients - evicted
        finally:
            slow.close()


def test_too_many_items_are_refused_with_413():
    verifier = CountingVerifier()
    with VerifierServer(verifier, max_items=100) as server:
        remote = RemoteVerifier(server.url, timeout=5.0, retries=0)
        with pytest.raises(VerifierError, match="HTTP 413: 101 responses exceed this server's limit of 100") as info:
            remote.score_batch(["q"] * 101, ["r"] * 101)
        assert "batch_size" in str(info.value) and "--max-items" in str(info.value)
        assert verifier.calls == 0
        assert remote.score_batch(["q"] * 100, ["r"] * 100) == [0.5] * 100
        assert RemoteVerifier(server.url, timeout=5.0, batch_size=100).score_batch(["q"] * 101, ["r"] * 101) == (
            [0.5] * 101
        )  # split by the client, as the message says
    # the observed shape: 80,000 empty responses in a third of a MiB, refused by the default limit before scoring
    verifier = CountingVerifier()
    with VerifierServer(verifier) as server:
        body = json.dumps({"responses": [""] * 80_000}).encode()
        assert len(body) < 0.35 * (1 << 20)
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(urllib.request.Request(server.url + "/score", data=body, method="POST"), timeout=5)
        assert error.value.code == 413
        assert "80000 responses exceed this server's limit of 4096" in json.loads(error.value.read())["error"]
        assert verifier.calls == 0


class SlowVerifier:
    """Takes 10 ms per response under a lock (as the real verifiers hold one); the score is len(response) / 100."""

    name = "slow"

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.scored = 0

    def score_batch(self, questions, responses, golds=None):
        with self.lock:
            self.calls += 1
            self.scored += len(responses)
            time.sleep(0.01 * len(responses))
            return [len(r) / 100 for r in responses]


def test_a_large_request_is_scored_in_turn_with_a_small_one():
    verifier = SlowVerifier()
    responses = ["x" * (i % 101) for i in range(200)]  # 2 s of scoring
    with VerifierServer(verifier, chunk_size=5, max_score_s=60.0) as server:
        results = {}
        big = threading.Thread(
            target=lambda: results.update(
                big=RemoteVerifier(server.url, timeout=30.0, retries=0).score_batch(["q"] * 200, responses)
            )
        )
        big.start()
        deadline = time.monotonic() + 5.0
        while verifier.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        start = time.monotonic()
        assert RemoteVerifier(server.url, timeout=10.0, retries=0).score_batch(["q"], ["x" * 7]) == [0.07]
        waited = time.monotonic() - start
        big.join(timeout=30.0)
    assert waited < 1.0, waited  # one chunk of 5 (50 ms) ahead of it, not the rest of the 2 s
    assert results["big"] == [len(r) / 100 for r in responses]  # in order, chunk after chunk
    assert verifier.scored == 201


def test_a_request_over_its_scoring_time_is_stopped_with_413():
    verifier = SlowVerifier()
    with VerifierServer(verifier, chunk_size=5, max_score_s=0.3) as server:
        remote = RemoteVerifier(server.url, timeout=10.0, retries=0)
        start = time.monotonic()
        with pytest.raises(
            VerifierError,
            match=r"HTTP 413: scoring this request took more than this server's "
            r"limit of 0.3 s \(stopped after \d+ of 200 responses\)",
        ) as info:
            remote.score_batch(["q"] * 200, ["r"] * 200)
        assert time.monotonic() - start < 1.5
        assert "--max-score-s" in str(info.value) and "batch_size" in str(info.value)
        assert verifier.scored <= 40  # 0.3 s of 50 ms chunks, plus the chunk that crossed the limit
        assert remote.score_batch(["q"] * 10, ["r"] * 10) == [0.01] * 10  # the server goes on serving


DEEP = 100_000


@pytest.mark.parametrize(
    "body",
    [
        b"[" * DEEP + b"]" * DEEP,
        b'{"responses": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        b'{"responses": ["r"], "golds": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}",
        b'{"responses": ["r"], "golds": [[[["5"]]]]}',  # within the recursion limit, still no gold value
        b'{"responses": ["r"], "golds": [{"value": 5}]}',
    ],
    ids=["list", "responses", "golds", "nested-gold", "object-gold"],
)
def test_deeply_nested_json_is_refused_with_400(body):
    verifier = CountingVerifier()
    with VerifierServer(verifier) as server:
        request = urllib.request.Request(server.url + "/score", data=body, method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=10)
        assert info.value.code == 400  # before the fix: 500 with a RecursionError, or 200
        error = json.loads(info.value.read())["error"]
        assert "nested too deeply" in error or '"golds" must be a list of strings, numbers or nulls' in error
        assert verifier.calls == 0
        assert RemoteVerifier(server.url, timeout=5.0, retries=0).score_batch(["q"], ["r"]) == [0.5]


# ------------------------------------------------------------------------------------------------ hostile servers


@contextlib.contextmanager
def raw_server(answer):
    """A TCP server on loopback that reads each request and calls `answer(sock)`; yields its URL and a dict with the
    bytes it managed to send (`sent`)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stats = {"sent": 0}
    stop = threading.Event()

    def serve_one(sock: socket.socket) -> None:
        with sock:
            sock.settimeout(5.0)
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(4096)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(
                next(
                    (
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    b"0",
                )
            )
            while len(body) < length:
                body += sock.recv(4096)
            try:
                answer(sock, stats, stop)
            except OSError:  # the client went away
                pass

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve_one, args=(sock,), daemon=True).start()

    thread = threading.Thread(target=accept_loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", stats
    finally:
        stop.set()
        thread.join(timeout=5.0)
        listener.close()


def send_slowly(data: bytes, interval: float = 0.05):
    def answer(sock, stats, stop):
        for byte in data:
            if stop.is_set():
                return
            sock.sendall(bytes([byte]))
            stats["sent"] += 1
            time.sleep(interval)

    return answer


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.0 200 OK\r\nX-Pad: " + b"a" * 400 + b'\r\n\r\n{"scores": [0.5]}',
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + b" " * 400 + b'{"scores": [0.5]}',
    ],
    ids=["headers", "body"],
)
@pytest.mark.parametrize("retries", [0, None])
def test_a_server_trickling_its_answer_cannot_stretch_a_call(answer, retries):
    """The observed shape: a server sending a byte a second made a call take 16 s against `max_wait_s=5`."""
    with raw_server(send_slowly(answer)) as (url, stats):
        remote = RemoteVerifier(url, timeout=0.5, retries=retries, backoff=0.05, max_backoff=0.05, retry_budget_s=1.0)
        start = time.monotonic()
        with pytest.raises(VerifierUnavailableError, match="timed out: no complete answer within 0.5 s"):
            remote.score_batch(["q"], ["r"])
        elapsed = time.monotonic() - start
    assert remote.max_wait_s == pytest.approx(0.5 if retries == 0 else 1.5)
    assert elapsed < remote.max_wait_s + 0.5, elapsed  # before the fix: the whole trickle, 20 s and more


def send_endlessly(declare: bool):
    def answer(sock, stats, stop):
        head = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
        sock.sendall(head + (b"Content-Length: %d\r\n" % (200 << 20) if declare else b"") + b"\r\n")
        chunk = b" " * (1 << 16)
        while stats["sent"] < 200 << 20 and not stop.is_set():  # 200 MiB of whitespace, which is valid JSON
            sock.sendall(chunk)
            stats["sent"] += len(chunk)

    return answer


@pytest.mark.parametrize("declare", [True, False], ids=["content-length", "until-closed"])
def test_an_oversized_answer_is_refused_without_reading_it(declare):
    with raw_server(send_endlessly(declare)) as (url, stats):
        limit = 16 << 20 if declare else 1 << 20  # the default, and a smaller one
        remote = RemoteVerifier(url, timeout=10.0, retries=0, max_response_bytes=limit)
        with pytest.raises(VerifierError, match=rf"answered more than max_response_bytes={limit} bytes") as info:
            remote.score_batch(["q"], ["r"])
        assert not isinstance(info.value, VerifierUnavailableError)  # not retried
        time.sleep(0.2)
    # the client stopped reading at its limit; the server could only fill the sockets' buffers beyond it
    assert stats["sent"] < limit + (32 << 20) < 200 << 20, stats["sent"]


def answer_json(body: bytes):
    def answer(sock, stats, stop):
        sock.sendall(
            b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )

    return answer


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"scores": [NaN]}', "the score nan for response 0"),
        (b'{"scores": [Infinity]}', "the score inf for response 0"),
        (b'{"scores": [-Infinity]}', "the score -inf for response 0"),
        (b'{"scores": [1.5]}', "the score 1.5 for response 0"),
        (b'{"scores": [-0.25]}', "the score -0.25 for response 0"),
        (b'{"scores": [1e400]}', "the score inf for response 0"),
        (b'{"scores": [true]}', "the score True for response 0"),
        (b'{"scores": ["0.5"]}', "the score '0.5' for response 0"),
        (b'{"scores": [0.5, 0.5]}', "answered 2 scores for 1 responses"),
        (b'{"scores": []}', "answered 0 scores for 1 responses"),
        (b'{"scores": 0.5}', 'not {"scores": [...]}'),
    ],
)
def test_scores_that_are_not_probabilities_are_refused(body, message):
    with raw_server(answer_json(body)) as (url, _):
        with pytest.raises(VerifierError, match=re.escape(message)) as info:
            RemoteVerifier(url, timeout=5.0, retries=0).score_batch(["q"], ["r"])
        assert not isinstance(info.value, VerifierUnavailableError)


def test_scores_at_the_bounds_are_accepted():
    with raw_server(answer_json(b'{"scores": [0, 1.0, 0.25]}')) as (url, _):
        assert RemoteVerifier(url, timeout=5.0, retries=0).score_batch(["q"] * 3, ["r"] * 3) == [0.0, 1.0, 0.25]


# ------------------------------------------------------------------------------------------ admission, cancellation


def test_a_request_that_cannot_be_scored_in_time_is_refused_on_arrival_and_a_small_one_gets_in():
    """Issue 54, item 10: a flood of large requests was admitted, scored in turn and answered 503 after the wait with
    the work wasted. Once the time per item is known, a request whose scoring would not fit in half its wait is
    refused before any of it is scored, with the estimate; a small request beside the queue is still admitted."""
    verifier = SlowVerifier()  # 10 ms per response
    scorer = Scorer(verifier, chunk_size=5, max_score_s=60.0)
    try:
        first = ScoreJob(["q"] * 100, ["r"] * 100, None)  # 1 s: admitted (nothing measured yet)
        done = threading.Thread(target=lambda: scorer.score(first, wait_s=10.0))
        done.start()
        deadline = time.monotonic() + 10.0
        while verifier.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert scorer.seconds_per_item >= 0.009  # measured: 10 ms per response, or more on a loaded machine
        flood = ScoreJob(["q"] * 400, ["r"] * 400, None)
        refusal = r"400 responses would be scored in about \d+ s, more than half"
        with pytest.raises(ScorerBusyError, match=refusal) as busy:
            scorer.score(flood, wait_s=4.0)  # at least 400 x 10 ms > 2 s
        assert flood.scores == [] and busy.value.retry_after_s >= 4.0  # refused before any of it was scored
        assert scorer.score(ScoreJob(["q"] * 3, ["abc"] * 3, None), wait_s=4.0) == [0.03] * 3
        done.join(10.0)
        assert first.done.is_set() and first.scores == [0.01] * 100
    finally:
        scorer.stop()


def test_a_request_whose_client_left_is_cancelled():
    """Abandoned requests kept being scored: a waiting request checks that its client is there, and one whose client
    left is dropped with its remaining chunks never scored."""
    verifier = SlowVerifier()
    scorer = Scorer(verifier, chunk_size=5, max_score_s=60.0)
    scorer.poll_s = 0.05
    left_at = time.monotonic() + 0.2
    try:
        with pytest.raises(ClientGoneError, match=r"the client left after \d+ of 300 responses"):
            scorer.score(ScoreJob(["q"] * 300, ["r"] * 300, None), wait_s=30.0,
                         gone=lambda: time.monotonic() > left_at)
        stopped = verifier.scored
        time.sleep(0.3)
        assert verifier.scored == stopped < 100  # 3 s of work: stopped within a chunk or two of the client leaving
    finally:
        scorer.stop()


def test_client_gone_reads_a_closed_socket_and_leaves_pipelined_data():
    server_side, client_side = socket.socketpair()
    try:
        assert not client_gone(server_side)
        client_side.sendall(b"GET /health HTTP/1.1\r\n\r\n")  # a pipelined request: still there
        assert not client_gone(server_side)
        assert server_side.recv(100).startswith(b"GET /health")  # nothing was consumed
        client_side.close()
        assert client_gone(server_side)
    finally:
        server_side.close()


def test_a_busy_server_answers_503_with_retry_after():
    verifier = SlowVerifier()
    with VerifierServer(verifier, chunk_size=5, max_score_s=1.0, request_timeout_s=1.0) as server:
        def flood() -> None:
            with contextlib.suppress(VerifierError):
                RemoteVerifier(server.url, timeout=10.0, retries=0).score_batch(["q"] * 150, ["r"] * 150)

        big = threading.Thread(target=flood)
        big.start()
        deadline = time.monotonic() + 10.0
        while verifier.calls < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        body = json.dumps({"responses": ["r"] * 400}).encode()
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(urllib.request.Request(server.url + "/score", data=body, method="POST"), timeout=5)
        assert error.value.code == 503 and int(error.value.headers["Retry-After"]) >= 1
        assert "this server is busy" in json.loads(error.value.read())["error"]
        big.join(10.0)


def test_the_admission_estimate_by_hand():
    """(items ahead + own items) x seconds per item, where a queued request counts at most as many items as the new
    one (round robin): 10 ms per item, queued requests with 100 and 2 items left, a new one of 10 ->
    (min(100, 10) + min(2, 10) + 10) x 0.01 = 0.22 s; a cancelled request counts nothing."""
    scorer = Scorer(SlowVerifier(), chunk_size=5, max_score_s=60.0)
    try:
        assert scorer.estimated_wait_s(10) is None  # nothing measured yet
        scorer.seconds_per_item = 0.01
        big, small, gone = (ScoreJob(["q"] * n, ["r"] * n, None) for n in (100, 2, 50))
        gone.cancelled = True
        with scorer._ready:  # queued without waking the scoring thread's work
            scorer._queue.extend([big, small, gone])
            assert scorer.estimated_wait_s(10) == pytest.approx(0.22)
            scorer._queue.clear()
    finally:
        scorer.stop()
