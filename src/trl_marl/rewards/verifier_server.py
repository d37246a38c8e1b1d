"""The HTTP server of a verifier: [`VerifierServer`] serves any batch verifier (`trl_marl.rewards.remote` has the
client, [`~trl_marl.rewards.remote.RemoteVerifier`], and re-exports the server).

`POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`, `GET /health`. The server bounds
what a request may cost before any heavy work and while it is served: the body size and the number of items (HTTP
413 beyond them), the time a client may take to send its request (line, headers and body together; a client that
trickles bytes is dropped at that deadline, and one still sending after a second gives its thread to a new
connection when all are busy), silent connections, and the scoring time of one request. Requests are scored in
chunks, in turn, by one scoring thread, so a large request delays a small one by at most one chunk.
"""

from __future__ import annotations

import io
import json
import logging
import math
import socket
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .serving import (
    DEFAULT_CHUNK,
    ClientGoneError,
    DeadlineReader,
    ScoreJob,
    Scorer,
    ScorerBusyError,
    ScoringTimeError,
    client_gone,
)
from .verifier import BatchVerifier, validate_pairs

__all__ = ["VerifierServer"]

logger = logging.getLogger(__name__)


class _BadRequest(ValueError):
    """A request the server refuses with HTTP 400 (or another 4xx `status`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_DRAIN_CHUNK = 1 << 16
"""Bytes read at a time when the server discards the body of a request it refuses."""

_EVICT_AFTER_S = 1.0
"""When every connection slot is taken, a connection that has been sending its request for this long (a legitimate
client sends a request in milliseconds) is closed to make room for a new one, the longest-sending first."""

# ---------------------------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------------------------


class _Connection:
    """What the accept loop knows of a connection being served: when its request began and whether it is still
    being read (`reading`), which makes it a candidate for eviction."""

    __slots__ = ("evicted", "reading", "sock", "started")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.started = time.monotonic()
        self.reading = True
        self.evicted = False


class _VerifierHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that holds the verifier (through its scorer) and the limits its handlers apply."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], server: VerifierServer) -> None:
        self.verifier = server.verifier
        self.max_body_bytes = server.max_body_bytes
        self.max_items = server.max_items
        self.timeout_s = server.timeout_s
        self.request_timeout_s = server.request_timeout_s
        self.max_connections = server.max_connections
        self.num_connections = 0
        self.num_evicted = 0
        self.connections: dict[int, _Connection] = {}
        self.slots = threading.BoundedSemaphore(server.max_connections)
        self.closing = False
        self.num_requests = 0
        self.counter_lock = threading.Lock()
        super().__init__(address, _VerifierHandler)
        self.scorer = Scorer(server.verifier, server.chunk_size, server.max_score_s)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serves the connection in a thread once fewer than `max_connections` are being served.

        While all are busy, the accept loop closes the connection that has been sending its request the longest, if
        that is more than a second (a slow sender cannot hold a thread that a new client needs), else waits (every
        connection ends within its deadline); further connections queue in the socket's backlog.
        """
        while not self.slots.acquire(timeout=0.05):
            if self.closing:
                self.shutdown_request(request)
                return
            self._evict_a_slow_sender()
        with self.counter_lock:
            self.num_connections += 1
            self.connections[id(request)] = _Connection(request)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def _evict_a_slow_sender(self) -> None:
        now = time.monotonic()
        with self.counter_lock:
            if any(c.evicted for c in self.connections.values()):
                return  # one is being closed already; its slot frees in a moment
            slow = [c for c in self.connections.values() if c.reading and now - c.started >= _EVICT_AFTER_S]
            if not slow:
                return
            victim = min(slow, key=lambda c: c.started)
            victim.evicted = True
            self.num_evicted += 1
        logger.warning(
            "verifier server: all %d connections busy; closing one that has been sending its request for %.1f s",
            self.max_connections,
            now - victim.started,
        )
        try:
            victim.sock.shutdown(socket.SHUT_RDWR)  # wakes its handler's read, which ends the connection
        except OSError:
            pass

    def connection(self, request: Any) -> _Connection:
        with self.counter_lock:
            return self.connections[id(request)]

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        with self.counter_lock:
            self.num_connections -= 1
            self.connections.pop(id(request), None)
        self.slots.release()

    def server_close(self) -> None:
        super().server_close()
        self.scorer.stop()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logs a failed connection (a client that timed out and left is routine) instead of printing it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("verifier server: connection from %s failed: %s", client_address, error)
        else:
            logger.exception("verifier server: error while handling a request from %s", client_address)


class _VerifierHandler(BaseHTTPRequestHandler):
    """`GET /health` and `POST /score` (JSON in, JSON out; one request per connection).

    The request (line, headers and body) must arrive within the server's `request_timeout_s` of the connection's
    start, and no read waits more than `timeout_s`: a connection that sends nothing, stalls, or trickles is closed
    (with 408 when it is the body that is late) and its thread ends.
    """

    server: _VerifierHTTPServer
    server_version = "trl-marl-verifier"

    def setup(self) -> None:
        # `StreamRequestHandler.setup` applies it to the socket (typeshed declares it a ClassVar, which it reads
        # from the instance)
        self.timeout = self.server.timeout_s  # type: ignore[misc]
        super().setup()
        self.state = self.server.connection(self.request)
        self.rfile.close()  # the plain socket file; reads go through the deadline instead
        raw = DeadlineReader(self.request, self.state.started + self.server.request_timeout_s, self.server.timeout_s)
        self.rfile = io.BufferedReader(raw)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's signature)
        logger.debug("verifier server: " + format, *args)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self.state.reading = False
        self.connection.settimeout(self.server.timeout_s)  # the whole answer, written at once, within the limit
        body = json.dumps(payload, allow_nan=False).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            server = self.server
            name = getattr(server.verifier, "name", type(server.verifier).__name__)
            self._send(
                200,
                {
                    "status": "ok",
                    "verifier": name,
                    "requests": server.num_requests,
                    "max_body_bytes": server.max_body_bytes,
                    "max_items": server.max_items,
                    "request_timeout_s": server.request_timeout_s,
                    "max_score_s": server.scorer.max_score_s,
                    "evicted": server.num_evicted,
                },
            )
        else:
            self._send(404, {"error": f"unknown path {self.path!r}; use GET /health or POST /score"})

    def _read_body(self) -> bytes:
        length_header = self.headers.get("Content-Length")
        if length_header is None:
            raise _BadRequest("missing Content-Length")
        try:
            length = int(length_header)
        except ValueError as exc:
            raise _BadRequest(f"bad Content-Length {length_header!r}") from exc
        if length < 0:
            raise _BadRequest(f"bad Content-Length {length_header!r}")
        limit = self.server.max_body_bytes
        if length > limit:
            self._discard_body(length)
            raise _BadRequest(
                f"request body of {length} bytes exceeds this server's limit of {limit} bytes; send fewer responses "
                "per request (RemoteVerifier(batch_size=...)) or shorter ones, or start the server with a larger "
                "--max-body-mb",
                status=413,
            )
        try:
            body = self.rfile.read(length)
        except TimeoutError as exc:
            self.close_connection = True
            raise _BadRequest(
                f"the request was not received within this server's limit of {self.server.request_timeout_s:g} s "
                f"(--request-timeout), or its body stalled for {self.server.timeout_s:g} s (--timeout)",
                status=408,
            ) from exc
        if len(body) < length:
            self.close_connection = True
            raise _BadRequest(f"the body ended after {len(body)} of its {length} bytes")
        return body

    def _payload(self) -> tuple[list[str], list[str], list[Any] | None]:
        body = self._read_body()
        self.state.reading = False  # the whole request is in: no longer a slow sender
        try:
            data = json.loads(body or b"null")
        except RecursionError as exc:
            raise _BadRequest(
                'the body is JSON nested too deeply; expected {"questions": [...], "responses": [...]}'
            ) from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _BadRequest('expected a JSON object {"questions": [...], "responses": [...]}')
        questions, responses, golds = data.get("questions"), data.get("responses"), data.get("golds")
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise _BadRequest('"responses" must be a list of strings')
        if len(responses) > self.server.max_items:
            raise _BadRequest(
                f"{len(responses)} responses exceed this server's limit of {self.server.max_items} per request; send "
                "fewer per request (RemoteVerifier(batch_size=...)) or start the server with a larger --max-items",
                status=413,
            )
        if questions is None:
            questions = [""] * len(responses)
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise _BadRequest('"questions" must be a list of strings')
        if golds is not None and (
            not isinstance(golds, list) or not all(g is None or isinstance(g, (str, int, float)) for g in golds)
        ):
            raise _BadRequest('"golds" must be a list of strings, numbers or nulls')
        try:
            validate_pairs(questions, responses, golds)
        except ValueError as exc:
            raise _BadRequest(str(exc)) from exc
        return questions, responses, golds

    def _discard_body(self, length: int) -> None:
        """Reads and drops up to 4x the body limit of a refused body (nothing is kept), so that the client, still
        sending, gets the 413 answer instead of a reset connection; a longer body is cut off by closing."""
        self.close_connection = True
        left = min(length, 4 * self.server.max_body_bytes)
        try:
            while left > 0:
                chunk = self.rfile.read(min(left, _DRAIN_CHUNK))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:  # a timeout or a client that left: the answer below may not arrive, which is fine
            pass

    def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
        if self.path.split("?", 1)[0].rstrip("/") != "/score":
            self.close_connection = True
            self._send(404, {"error": f"unknown path {self.path!r}; use POST /score"})
            return
        with self.server.counter_lock:
            self.server.num_requests += 1
        try:
            questions, responses, golds = self._payload()
            wait_s = self.server.scorer.max_score_s + self.server.request_timeout_s
            scores = self.server.scorer.score(ScoreJob(questions, responses, golds), wait_s,
                                              gone=lambda: client_gone(self.connection))
        except _BadRequest as exc:
            self._send(exc.status, {"error": str(exc)})
            return
        except ScoringTimeError as exc:
            self._send(413, {"error": str(exc)})
            return
        except ScorerBusyError as exc:
            retry = None if exc.retry_after_s is None else max(1, math.ceil(exc.retry_after_s))
            self._send(503, {"error": str(exc)}, {"Retry-After": str(retry)} if retry else None)
            return
        except ClientGoneError as exc:  # nobody to answer
            logger.info("verifier server: %s", exc)
            self.close_connection = True
            return
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": f"{type(exc).__name__}: {exc}"})
            return
        except Exception as exc:  # a verifier failure: report it, keep serving
            logger.error("verifier server: scoring failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
            self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._send(200, {"scores": scores})


class VerifierServer:
    """Serves a verifier over HTTP (a `ThreadingHTTPServer` in a background thread, and one scoring thread).

    Endpoints (JSON):

    - `POST /score` with `{"questions": [...], "responses": [...]}` (and `"golds": [...]`, strings or numbers, for a
      rule-based verifier) returns `{"scores": [...]}`, one float in [0, 1] per response. A malformed request gets
      400 with `{"error": ...}` (JSON nested too deeply included), a body over `max_body_bytes` 413 (refused from
      its `Content-Length`, before anything is decoded), more than `max_items` responses 413, a request whose
      scoring takes longer than `max_score_s` 413, a request not received within `request_timeout_s` 408 (or a
      closed connection), a verifier failure 500 (the server keeps running), a request not scored within
      `max_score_s + request_timeout_s` of its arrival (a stuck or overloaded verifier) 503, and so is one that the
      queue ahead of it would keep from being scored within half of that (refused on arrival, before any of it is
      scored, with `Retry-After`: admission control); a request whose client disconnects is cancelled.
    - `GET /health` returns `{"status": "ok", "verifier": name, "requests": n, ...}` with the limits below.

    What each limit protects against (a client may be hostile or broken):

    - `max_body_bytes` and `max_items`: memory and decoding time of one request (80,000 empty responses fit in a
      third of a MiB). The length of each response is the verifier's to bound ([`ModelVerifier`] cuts every text to
      a number of characters derived from its `max_length` before tokenizing).
    - `request_timeout_s`: slow senders ("slowloris"). The request line, headers and body must all arrive within
      it, however steadily the bytes trickle; `timeout_s` closes a connection that is silent for that long.
    - `max_connections`: threads. When all are busy, the connection that has been sending its request for the
      longest (more than a second) is closed to make room, so trickling clients cannot keep a new one out; a
      connection whose request is being scored is never closed.
    - `max_score_s` and scoring in turn: the verifier is called from one thread, `chunk_size` items of each waiting
      request at a time, so a large request delays a small one by one chunk, not its whole scoring; a request whose
      own chunks have taken more than `max_score_s` seconds is stopped and refused.

    There is no authentication: keep the default loopback `host` unless the network is trusted.

    Args:
        verifier: Anything with `score_batch(questions, responses, golds=None) -> list[float]`: a
            [`ModelVerifier`], an [`AnswerVerifier`], ...
        host: Address to bind.
        port: Port to bind (0: a free port, see `port` after `start()`).
        max_body_bytes: Largest accepted request body (default 16 MiB); a larger one is answered with HTTP 413.
        timeout_s: Seconds a connection may stay silent (before its request, or in the middle of its body) before
            the server closes it; also the limit for writing an answer.
        max_connections: Connections served at once (one thread each); further ones wait in the socket's backlog
            until one ends or a slow sender is closed for them.
        request_timeout_s: Seconds from the start of a connection's service within which its whole request (line,
            headers and body) must have arrived.
        max_items: Most responses in one request; more are answered with HTTP 413.
        max_score_s: Seconds of scoring one request may use (checked after each chunk); beyond it, HTTP 413.
        chunk_size: Items per call of the verifier (`None`: the verifier's `batch_size` if it has one and it is
            larger than 64, else 64). Smaller chunks interleave requests more finely.

    Example:

    ```python
    with VerifierServer(ModelVerifier("my-verifier")) as server:
        remote = RemoteVerifier(server.url)
        remote(prompts, completions, question=questions)
    ```
    """

    def __init__(
        self,
        verifier: BatchVerifier,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 16 << 20,
        timeout_s: float = 30.0,
        max_connections: int = 64,
        request_timeout_s: float = 60.0,
        max_items: int = 4096,
        max_score_s: float = 60.0,
        chunk_size: int | None = None,
    ) -> None:
        if not callable(getattr(verifier, "score_batch", None)):
            raise TypeError(
                f"{type(verifier).__name__} has no `score_batch(questions, responses, golds=None)` method."
            )
        for field, value in (
            ("max_body_bytes", max_body_bytes),
            ("max_connections", max_connections),
            ("max_items", max_items),
            ("chunk_size", chunk_size),
        ):
            if value is None and field == "chunk_size":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{field}` must be a positive integer, got {value!r}.")
        for field, seconds in (
            ("timeout_s", timeout_s),
            ("request_timeout_s", request_timeout_s),
            ("max_score_s", max_score_s),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < math.inf:
                raise ValueError(f"`{field}` must be a positive, finite number of seconds, got {seconds!r}.")
        if chunk_size is None:
            batch_size = getattr(verifier, "batch_size", None)
            useful = isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size > DEFAULT_CHUNK
            chunk_size = batch_size if useful and isinstance(batch_size, int) else DEFAULT_CHUNK
        self.verifier = verifier
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.timeout_s = float(timeout_s)
        self.max_connections = max_connections
        self.request_timeout_s = float(request_timeout_s)
        self.max_items = max_items
        self.max_score_s = float(max_score_s)
        self.chunk_size: int = chunk_size
        self._requested_port = port
        self._httpd: _VerifierHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> _VerifierHTTPServer:
        if self._httpd is not None:
            raise RuntimeError("The verifier server is already running.")
        self._httpd = _VerifierHTTPServer((self.host, self._requested_port), self)
        return self._httpd

    @property
    def port(self) -> int:
        """The bound port (the requested one before `start()`)."""
        return self._httpd.server_address[1] if self._httpd is not None else self._requested_port

    @property
    def url(self) -> str:
        """`http://host:port` of the running server."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the server is bound and serving."""
        return self._httpd is not None

    def start(self) -> VerifierServer:
        """Binds and serves in a daemon thread; returns `self` (`url` is valid from now on)."""
        httpd = self._bind()
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="verifier-server", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self, ready: Callable[[str], None] | None = None) -> None:
        """Binds and serves in the calling thread until `stop()` is called from another thread or an exception
        (such as `KeyboardInterrupt`) stops it; the socket is closed either way.

        Args:
            ready: Called with `url` once the socket is bound, before serving.

        Raises:
            OSError: If the address cannot be bound.
        """
        httpd = self._bind()
        try:
            if ready is not None:
                ready(self.url)
            httpd.serve_forever(poll_interval=0.2)
        finally:
            httpd.server_close()
            self._httpd = None

    def stop(self) -> None:
        """Stops serving and closes the socket (requests still being handled finish in their daemon threads)."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        httpd.closing = True  # an accept loop waiting for a free slot gives up
        httpd.shutdown()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5.0)
        self._httpd, self._thread = None, None

    def __enter__(self) -> VerifierServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
