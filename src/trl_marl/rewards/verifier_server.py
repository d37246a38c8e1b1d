"""The HTTP server of a verifier: [`VerifierServer`] serves any batch verifier (`trl_marl.rewards.remote` has the
client, [`~trl_marl.rewards.remote.RemoteVerifier`], and re-exports the server).

`POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`, `GET /health`. The server bounds
what a request may cost before any heavy work: the body size (HTTP 413 beyond it), silent connections (closed after
`timeout_s`) and the connections served at once.
"""


from __future__ import annotations

import json
import logging
import math
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class _VerifierHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that holds the verifier its handlers call."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], verifier: Any, max_body_bytes: int, timeout_s: float, max_connections: int
    ) -> None:
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.num_connections = 0
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = False
        self.num_requests = 0
        self.counter_lock = threading.Lock()
        super().__init__(address, _VerifierHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serves the connection in a thread once fewer than `max_connections` are being served.

        While all are busy the accept loop waits, and further connections queue in the socket's backlog until a
        handler finishes (each ends within `timeout_s` of silence): a flood of idle connections holds at most
        `max_connections` threads.
        """
        while not self.slots.acquire(timeout=0.1):
            if self.closing:
                self.shutdown_request(request)
                return
        with self.counter_lock:
            self.num_connections += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def _release(self) -> None:
        with self.counter_lock:
            self.num_connections -= 1
        self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logs a failed connection (a client that timed out and left is routine) instead of printing it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("verifier server: connection from %s failed: %s", client_address, error)
        else:
            logger.exception("verifier server: error while handling a request from %s", client_address)


class _VerifierHandler(BaseHTTPRequestHandler):
    """`GET /health` and `POST /score` (JSON in, JSON out; one request per connection).

    Every read from the client's socket waits at most the server's `timeout_s`: a connection that sends nothing
    (an idle keep-alive, a client that stalls halfway through its body) is closed and its thread ends.
    """

    server: _VerifierHTTPServer
    server_version = "trl-marl-verifier"

    def setup(self) -> None:
        self.timeout = self.server.timeout_s  # `StreamRequestHandler.setup` applies it to the socket
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's signature)
        logger.debug("verifier server: " + format, *args)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        body = json.dumps(payload, allow_nan=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802  (http.server's naming)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            verifier = self.server.verifier
            name = getattr(verifier, "name", type(verifier).__name__)
            self._send(200, {"status": "ok", "verifier": name, "requests": self.server.num_requests,
                             "max_body_bytes": self.server.max_body_bytes})
        else:
            self._send(404, {"error": f"unknown path {self.path!r}; use GET /health or POST /score"})

    def _payload(self) -> tuple[list[str], list[str], list[Any] | None]:
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
            data = json.loads(self.rfile.read(length) or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise _BadRequest('expected a JSON object {"questions": [...], "responses": [...]}')
        questions, responses, golds = data.get("questions"), data.get("responses"), data.get("golds")
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise _BadRequest('"responses" must be a list of strings')
        if questions is None:
            questions = [""] * len(responses)
        if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
            raise _BadRequest('"questions" must be a list of strings')
        if golds is not None and not isinstance(golds, list):
            raise _BadRequest('"golds" must be a list')
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
            self._send(404, {"error": f"unknown path {self.path!r}; use POST /score"})
            return
        with self.server.counter_lock:
            self.server.num_requests += 1
        try:
            questions, responses, golds = self._payload()
            verifier = self.server.verifier
            if golds is None:
                scores = verifier.score_batch(questions, responses)
            else:
                scores = verifier.score_batch(questions, responses, golds)
            scores = [float(s) for s in scores]
            if len(scores) != len(responses) or not all(math.isfinite(s) for s in scores):
                raise RuntimeError(f"the verifier returned {len(scores)} scores (finite: "
                                   f"{all(math.isfinite(s) for s in scores)}) for {len(responses)} responses")
        except _BadRequest as exc:
            self._send(exc.status, {"error": str(exc)})
            return
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"error": f"{type(exc).__name__}: {exc}"})
            return
        except Exception as exc:  # a verifier failure: report it, keep serving
            logger.exception("verifier server: scoring failed")
            self._send(500, {"error": f"{type(exc).__name__}: {exc}"})
            return
        self._send(200, {"scores": scores})


class VerifierServer:
    """Serves a verifier over HTTP (a `ThreadingHTTPServer` in a background thread).

    Endpoints (JSON):

    - `POST /score` with `{"questions": [...], "responses": [...]}` (and `"golds": [...]` for a rule-based verifier)
      returns `{"scores": [...]}`, one float per response. A malformed request gets 400 with `{"error": ...}`, a
      body over `max_body_bytes` 413 (refused from its `Content-Length`, before anything is decoded), a verifier
      failure 500 (the server keeps running).
    - `GET /health` returns `{"status": "ok", "verifier": name, "requests": n, "max_body_bytes": limit}`.

    Limits, as inference servers have them: the body size (`max_body_bytes`); the length of each response is the
    verifier's to bound ([`ModelVerifier`] cuts every text to a number of characters derived from its `max_length`
    before tokenizing; [`AnswerVerifier`]'s extraction is linear in the text); and every read from a client waits at
    most `timeout_s`, so idle or stalled connections are closed instead of holding a thread each; at most
    `max_connections` are served at once (more wait to be accepted).

    There is no authentication: keep the default loopback `host` unless the network is trusted.

    Args:
        verifier: Anything with `score_batch(questions, responses, golds=None) -> list[float]`: a
            [`ModelVerifier`], an [`AnswerVerifier`], ...
        host: Address to bind.
        port: Port to bind (0: a free port, see `port` after `start()`).
        max_body_bytes: Largest accepted request body (default 16 MiB); a larger one is answered with HTTP 413.
        timeout_s: Seconds a connection may stay silent (before its request, or in the middle of its body) before
            the server closes it.
        max_connections: Connections served at once (one thread each); further ones wait in the socket's backlog
            until one of them ends.

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
    ) -> None:
        if not callable(getattr(verifier, "score_batch", None)):
            raise TypeError(
                f"{type(verifier).__name__} has no `score_batch(questions, responses, golds=None)` method."
            )
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes < 1:
            raise ValueError(f"`max_body_bytes` must be a positive number of bytes, got {max_body_bytes!r}.")
        if not timeout_s > 0 or not math.isfinite(timeout_s):
            raise ValueError(f"`timeout_s` must be a positive number of seconds, got {timeout_s!r}.")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(f"`max_connections` must be an integer >= 1, got {max_connections!r}.")
        self.verifier = verifier
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.timeout_s = float(timeout_s)
        self.max_connections = max_connections
        self._requested_port = port
        self._httpd: _VerifierHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> _VerifierHTTPServer:
        if self._httpd is not None:
            raise RuntimeError("The verifier server is already running.")
        self._httpd = _VerifierHTTPServer(
            (self.host, self._requested_port), self.verifier, self.max_body_bytes, self.timeout_s, self.max_connections
        )
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
