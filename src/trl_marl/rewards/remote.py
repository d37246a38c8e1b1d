"""A verifier over HTTP: [`VerifierServer`] serves any batch verifier, [`RemoteVerifier`] calls it with retries.

`POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`, `GET /health`. A verifier on
another GPU or machine scores a team's answers as the in-process verifiers of `trl_marl.rewards.verifier` do.
`trl-marl serve-verifier` (`trl_marl.scripts.serve_verifier`) serves a saved model.
"""


from __future__ import annotations

import http.client
import json
import logging
import math
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..utils.columns import AgentSelector, select_texts
from ..utils.text import completion_text
from .verifier import BatchVerifier, gold_values, question_texts, validate_pairs

__all__ = ["RemoteVerifier", "VerifierError", "VerifierServer", "VerifierUnavailableError"]

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------------------
# HTTP: server and client
# ---------------------------------------------------------------------------------------------------------------


class VerifierError(RuntimeError):
    """A remote verifier rejected a request or answered something that is not a list of scores."""


class VerifierUnavailableError(VerifierError):
    """A remote verifier could not be reached (refused, timed out, or server errors) after every retry."""


class _BadRequest(ValueError):
    """A request the server refuses with HTTP 400 (or another 4xx `status`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_VERIFIER_FAILURE_RETRIES = 3
"""HTTP 500 (the served verifier raised: the server is up and said why) is retried this often, not for the whole
retry budget that an unreachable or overloaded server gets."""

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


class RemoteVerifier:
    """Client of a [`VerifierServer`] with the reward-function API of the in-process verifiers.

    Each request has a per-request `timeout`. Connection errors, timeouts and HTTP 5xx answers other than 500 mean
    the server is down, restarting or overloaded: the request is retried, waiting `backoff * 2**k` seconds (at most
    `max_backoff`) before retry k + 1, for as long as the next attempt starts within `retry_budget_s` seconds of the
    first one (and for at most `retries` retries when that is set). So a server restart that takes less than
    `retry_budget_s` costs a pause, not the training step. When the budget is spent, a
    [`VerifierUnavailableError`] says for how long the server at the URL was unreachable and what to do; a
    trainer's reward call turns it into a `RewardFunctionError` naming the reward function. HTTP 500 (the served
    verifier raised: the server is up and says why) is retried 3 times only, then reported the same way. A call
    never takes longer than `max_wait_s` (about `retry_budget_s + timeout`). HTTP 4xx answers (a malformed or
    oversized request) and answers that are not a list of scores raise [`VerifierError`] at once. (The bound does
    not cover resolving a host name, which the operating system does; an IP address or `localhost` avoids it.)

    Args:
        url: The server, `http://host:port` (a trailing `/score` is accepted).
        timeout: Seconds per request (connecting, and each wait for data).
        retries: At most this many retries after the first attempt (`None`: as many as `retry_budget_s` allows).
        backoff: Seconds before the first retry; each further retry waits twice as long, up to `max_backoff`.
        question_column: The dataset column holding the question; `None` uses the prompt text.
        gold_column: A dataset column sent as `golds` (for a served [`AnswerVerifier`]); `None` sends none.
        agent_index: Which completions are scored (see [`AnswerVerifier`]).
        batch_size: Responses per request (`None`: all of a call in one request).
        proxies: Proxies for `urllib` (default none: environment proxy settings are ignored, so a loopback verifier
            is never sent through a proxy).
        retry_budget_s: Seconds, from the first failed attempt, during which an unreachable server is retried
            (default 300: five minutes, enough for a restart that reloads a model).
        max_backoff: Longest wait between two attempts, in seconds.
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        retries: int | None = None,
        backoff: float = 0.5,
        question_column: str | None = "question",
        gold_column: str | None = None,
        agent_index: AgentSelector = None,
        batch_size: int | None = None,
        proxies: dict[str, str] | None = None,
        retry_budget_s: float = 300.0,
        max_backoff: float = 30.0,
    ) -> None:
        if not timeout > 0 or not math.isfinite(timeout):
            raise ValueError(f"`timeout` must be a positive number of seconds, got {timeout}.")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValueError(f"`retries` must be an integer >= 0 or None, got {retries!r}.")
        for field, value in (("backoff", backoff), ("retry_budget_s", retry_budget_s), ("max_backoff", max_backoff)):
            if not value >= 0 or not math.isfinite(value):
                raise ValueError(f"`{field}` must be a finite number of seconds >= 0, got {value!r}.")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"`batch_size` must be >= 1 or None, got {batch_size}.")
        base = url.strip().rstrip("/")
        if base.endswith("/score"):
            base = base[: -len("/score")]
        if not base.startswith(("http://", "https://")):
            raise ValueError(f"The verifier URL must start with http:// or https://, got {url!r}.")
        self.name = "remote_verifier"
        self.__name__ = self.name
        self.url = base
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.retry_budget_s = float(retry_budget_s)
        self.question_column = question_column
        self.gold_column = gold_column
        self.agent_index = agent_index
        self.batch_size = batch_size
        self.proxies = dict(proxies or {})

    def _wait(self, retry: int) -> float:
        """Seconds to wait before retry `retry` (0-based): `backoff * 2**retry`, at most `max_backoff`."""
        return min(self.backoff * 2.0 ** min(retry, 60), self.max_backoff)

    @property
    def max_wait_s(self) -> float:
        """An upper bound (up to network jitter) of how long one request may take with all its retries: the retry
        budget plus one last request's `timeout`, or less when `retries` caps the attempts."""
        budget = self.retry_budget_s + self.timeout
        if self.retries is None:
            return budget
        capped = (self.retries + 1) * self.timeout + sum(self._wait(k) for k in range(min(self.retries, 10_000)))
        return min(budget, capped)

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """Sends one request with retries and returns the decoded JSON answer.

        Raises:
            VerifierUnavailableError: Every attempt within the retry budget failed with a connection error, a
                timeout or HTTP 5xx.
            VerifierError: HTTP 4xx, or an answer that is not JSON.
        """
        url = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(self.proxies))
        first = time.monotonic()
        attempt = failures_of_verifier = 0
        last = "no attempt"
        while True:
            attempt += 1
            request = urllib.request.Request(
                url, data=data, method=method, headers={"Content-Type": "application/json"}
            )
            try:
                with opener.open(request, timeout=self.timeout) as response:
                    body = response.read()
            except urllib.error.HTTPError as exc:
                detail = _error_detail(exc)
                if 500 <= exc.code < 600:
                    last = f"HTTP {exc.code}: {detail}"
                    failures_of_verifier = failures_of_verifier + 1 if exc.code == 500 else 0
                else:
                    raise VerifierError(
                        f"The verifier at {url} rejected the request: HTTP {exc.code}: {detail}"
                    ) from exc
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
                failures_of_verifier = 0
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    last = f"timed out after {self.timeout:g} s"
                else:
                    last = f"{type(reason).__name__}: {reason}"
            else:
                try:
                    return json.loads(body)
                except ValueError as exc:
                    raise VerifierError(
                        f"The verifier at {url} answered something that is not JSON: {body[:200]!r}"
                    ) from exc
            wait = self._wait(attempt - 1)
            elapsed = time.monotonic() - first
            out_of_retries = self.retries is not None and attempt > self.retries
            verifier_broken = failures_of_verifier > _VERIFIER_FAILURE_RETRIES
            if out_of_retries or verifier_broken or elapsed + wait > self.retry_budget_s:
                break
            logger.warning("verifier at %s: attempt %d failed (%s); retrying in %.2g s (%.0f s of the %g s retry "
                           "budget used)", url, attempt, last, wait, elapsed, self.retry_budget_s)
            time.sleep(wait)
        elapsed = time.monotonic() - first
        if failures_of_verifier:  # the last attempt reached the server, whose verifier raised
            raise VerifierUnavailableError(
                f"The verifier at {url} failed {failures_of_verifier} times in a row (HTTP 500: the server runs, the "
                f"verifier it serves raised); last error: {last}. See the server's log."
            )
        raise VerifierUnavailableError(
            f"The verifier at {url} was unreachable for {elapsed:.1f} s: {attempt} attempt(s) failed (timeout "
            f"{self.timeout:g} s per request, retry budget {self.retry_budget_s:g} s); last error: {last}. Check "
            "that the server runs there (`trl-marl serve-verifier --model PATH --port PORT`) and that the URL is "
            "right; to ride out longer restarts, raise `RemoteVerifier(retry_budget_s=...)`."
        )

    def health(self) -> dict[str, Any]:
        """`GET /health` of the server (with retries)."""
        return self._request("GET", "/health")

    def score_batch(
        self, questions: Sequence[str], responses: Sequence[str], golds: Sequence[Any] | None = None
    ) -> list[float]:
        """Scores (question, response) pairs on the server (one request per `batch_size` pairs).

        Raises:
            VerifierUnavailableError: The server could not be reached after every retry.
            VerifierError: The server rejected the request or answered no list of scores.
        """
        validate_pairs(questions, responses, golds)
        size = self.batch_size or max(len(responses), 1)
        scores: list[float] = []
        for start in range(0, len(responses), size):
            payload: dict[str, Any] = {
                "questions": [str(q) for q in questions[start : start + size]],
                "responses": [completion_text(r) for r in responses[start : start + size]],
            }
            if golds is not None:
                payload["golds"] = [_jsonable(g) for g in golds[start : start + size]]
            answer = self._request("POST", "/score", payload)
            chunk = answer.get("scores") if isinstance(answer, dict) else None
            if not isinstance(chunk, list) or len(chunk) != len(payload["responses"]) or not all(
                isinstance(s, (int, float)) and not isinstance(s, bool) for s in chunk
            ):
                raise VerifierError(
                    f"The verifier at {self.url} answered {str(answer)[:200]!r}, not one score per response."
                )
            scores.extend(float(s) for s in chunk)
        return scores

    def score(self, question: str, response: str) -> float:
        """Scores one (question, response) pair on the server."""
        return self.score_batch([question], [response])[0]

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        """Scores completions on the server (TRL reward-function signature).

        Raises:
            KeyError: If the question (or gold) column is missing.
            VerifierUnavailableError: The server could not be reached after every retry.
        """
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", self.name)
        questions = question_texts(prompts, kwargs, self.question_column, self.name, len(texts))
        golds = None
        if self.gold_column is not None:
            golds = gold_values(kwargs, self.gold_column, self.name, len(texts), "gold answer", "gold_column")
        return self.score_batch(questions, texts, golds)

    def __repr__(self) -> str:
        return (f"RemoteVerifier(url={self.url!r}, timeout={self.timeout:g}, retries={self.retries}, "
                f"retry_budget_s={self.retry_budget_s:g})")


def _error_detail(exc: urllib.error.HTTPError) -> str:
    """The `error` message of a JSON error answer, else the start of its body."""
    try:
        body = exc.read()
    except Exception:  # the body may be gone with the connection
        return str(exc.reason)
    try:
        data = json.loads(body)
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])
    except ValueError:
        pass
    return body[:200].decode(errors="replace") or str(exc.reason)


def _jsonable(value: Any) -> Any:
    """A gold value as JSON accepts it (numpy scalars and the like become Python numbers or strings)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


