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
    """A request the server refuses with HTTP 400."""


class _VerifierHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server that holds the verifier its handlers call."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], verifier: Any, max_body_bytes: int) -> None:
        self.verifier = verifier
        self.max_body_bytes = max_body_bytes
        self.num_requests = 0
        self.counter_lock = threading.Lock()
        super().__init__(address, _VerifierHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Logs a failed connection (a client that timed out and left is routine) instead of printing it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("verifier server: connection from %s failed: %s", client_address, error)
        else:
            logger.exception("verifier server: error while handling a request from %s", client_address)


class _VerifierHandler(BaseHTTPRequestHandler):
    """`GET /health` and `POST /score` (JSON in, JSON out; one request per connection)."""

    server: _VerifierHTTPServer
    server_version = "trl-marl-verifier"

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
            self._send(200, {"status": "ok", "verifier": name, "requests": self.server.num_requests})
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
        if length < 0 or length > self.server.max_body_bytes:
            raise _BadRequest(f"body of {length} bytes exceeds the limit of {self.server.max_body_bytes}")
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
        except (_BadRequest, ValueError, KeyError, TypeError) as exc:
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
      verifier failure 500 (the server keeps running).
    - `GET /health` returns `{"status": "ok", "verifier": name, "requests": n}`.

    There is no authentication: keep the default loopback `host` unless the network is trusted.

    Args:
        verifier: Anything with `score_batch(questions, responses, golds=None) -> list[float]`: a
            [`ModelVerifier`], an [`AnswerVerifier`], ...
        host: Address to bind.
        port: Port to bind (0: a free port, see `port` after `start()`).
        max_body_bytes: Largest accepted request body.

    Example:

    ```python
    with VerifierServer(ModelVerifier("my-verifier")) as server:
        remote = RemoteVerifier(server.url)
        remote(prompts, completions, question=questions)
    ```
    """

    def __init__(
        self, verifier: BatchVerifier, host: str = "127.0.0.1", port: int = 0, max_body_bytes: int = 64 << 20
    ) -> None:
        if not callable(getattr(verifier, "score_batch", None)):
            raise TypeError(
                f"{type(verifier).__name__} has no `score_batch(questions, responses, golds=None)` method."
            )
        self.verifier = verifier
        self.host = host
        self.max_body_bytes = max_body_bytes
        self._requested_port = port
        self._httpd: _VerifierHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def _bind(self) -> _VerifierHTTPServer:
        if self._httpd is not None:
            raise RuntimeError("The verifier server is already running.")
        self._httpd = _VerifierHTTPServer((self.host, self._requested_port), self.verifier, self.max_body_bytes)
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

    Each request has a per-request `timeout`. Connection errors, timeouts and HTTP 5xx answers are retried `retries`
    times, waiting `backoff * 2**k` seconds before retry k + 1; after the last retry a [`VerifierUnavailableError`]
    naming the URL is raised. So a call never takes longer than about
    `(retries + 1) * timeout + backoff * (2**retries - 1)` seconds (`max_wait_s`). HTTP 4xx answers (a malformed
    request) and answers that are not a list of scores raise [`VerifierError`] at once. (The bound does not cover
    resolving a host name, which the operating system does; an IP address or `localhost` avoids it.)

    Args:
        url: The server, `http://host:port` (a trailing `/score` is accepted).
        timeout: Seconds per request (connecting, and each wait for data).
        retries: Retries after the first attempt.
        backoff: Base of the exponential wait between attempts, in seconds.
        question_column: The dataset column holding the question; `None` uses the prompt text.
        gold_column: A dataset column sent as `golds` (for a served [`AnswerVerifier`]); `None` sends none.
        agent_index: Which completions are scored (see [`AnswerVerifier`]).
        batch_size: Responses per request (`None`: all of a call in one request).
        proxies: Proxies for `urllib` (default none: environment proxy settings are ignored, so a loopback verifier
            is never sent through a proxy).
    """

    def __init__(
        self,
        url: str,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        question_column: str | None = "question",
        gold_column: str | None = None,
        agent_index: AgentSelector = None,
        batch_size: int | None = None,
        proxies: dict[str, str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"`timeout` must be > 0, got {timeout}.")
        if retries < 0 or backoff < 0:
            raise ValueError("`retries` and `backoff` must be >= 0.")
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
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.question_column = question_column
        self.gold_column = gold_column
        self.agent_index = agent_index
        self.batch_size = batch_size
        self.proxies = dict(proxies or {})

    @property
    def max_wait_s(self) -> float:
        """An upper bound (up to network jitter) of how long one request may take with all its retries."""
        return (self.retries + 1) * self.timeout + self.backoff * (2**self.retries - 1)

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """Sends one request with retries and returns the decoded JSON answer.

        Raises:
            VerifierUnavailableError: Every attempt failed with a connection error, a timeout or HTTP 5xx.
            VerifierError: HTTP 4xx, or an answer that is not JSON.
        """
        url = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler(self.proxies))
        attempts = self.retries + 1
        last = "no attempt"
        for attempt in range(attempts):
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
                else:
                    raise VerifierError(
                        f"The verifier at {url} rejected the request: HTTP {exc.code}: {detail}"
                    ) from exc
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
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
            logger.warning("verifier at %s: attempt %d/%d failed (%s)", url, attempt + 1, attempts, last)
            if attempt + 1 < attempts:
                time.sleep(self.backoff * 2**attempt)
        raise VerifierUnavailableError(
            f"The verifier at {url} is unavailable: {attempts} attempt(s) failed (timeout {self.timeout:g} s per "
            f"request); last error: {last}. Is `trl-marl serve-verifier` running there?"
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
        return f"RemoteVerifier(url={self.url!r}, timeout={self.timeout:g}, retries={self.retries})"


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


