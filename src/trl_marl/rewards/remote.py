"""A verifier over HTTP: [`VerifierServer`] serves any batch verifier, [`RemoteVerifier`] calls it with retries.

`POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`, `GET /health`. A verifier on
another GPU or machine scores a team's answers as the in-process verifiers of `trl_marl.rewards.verifier` do.
`trl-marl serve-verifier` (`trl_marl.scripts.serve_verifier`) serves a saved model. The server lives in
`trl_marl.rewards.verifier_server` and is re-exported here.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import math
import socket
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from ..utils.columns import AgentSelector, select_texts
from ..utils.text import completion_text
from .serving import DeadlineReader
from .verifier import gold_values, question_texts, validate_pairs
from .verifier_server import VerifierServer

__all__ = ["RemoteVerifier", "VerifierError", "VerifierServer", "VerifierUnavailableError"]

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------------------
# HTTP client
# ---------------------------------------------------------------------------------------------------------------


class VerifierError(RuntimeError):
    """A remote verifier rejected a request or answered something that is not a list of scores."""


class VerifierUnavailableError(VerifierError):
    """A remote verifier could not be reached (refused, timed out, or server errors) after every retry."""


_VERIFIER_FAILURE_RETRIES = 3
"""HTTP 500 (the served verifier raised: the server is up and said why) is retried this often, not for the whole
retry budget that an unreachable or overloaded server gets."""


class RemoteVerifier:
    """Client of a [`VerifierServer`] with the reward-function API of the in-process verifiers.

    Each attempt must be over within `timeout` seconds: connecting, sending, and receiving the whole answer (a
    server that trickles its answer a byte at a time is cut off at that limit, not each time it is silent that long).
    Connection errors, timeouts and HTTP 5xx answers other than 500 mean
    the server is down, restarting or overloaded: the request is retried, waiting `backoff * 2**k` seconds (at most
    `max_backoff`) before retry k + 1, for as long as the next attempt starts within `retry_budget_s` seconds of the
    first one (and for at most `retries` retries when that is set). So a server restart that takes less than
    `retry_budget_s` costs a pause, not the training step. When the budget is spent, a
    [`VerifierUnavailableError`] says for how long the server at the URL was unreachable and what to do; a
    trainer's reward call turns it into a `RewardFunctionError` naming the reward function. HTTP 500 (the served
    verifier raised: the server is up and says why) is retried 3 times only, then reported the same way. One request
    with all its retries never takes longer than `max_wait_s` (about `retry_budget_s + timeout`; a call of
    `score_batch` sends one request per `batch_size` responses). HTTP 4xx answers (a malformed or oversized
    request), answers longer than `max_response_bytes` (reading stops there), and answers that are not one score
    in [0, 1] per response (NaN and infinities included) raise [`VerifierError`] at once: a verifier that answers
    them is broken or not a verifier, and its scores must not reach training. (The bound does not cover resolving
    a host name, which the operating system does; an IP address or `localhost` avoids it.)

    Args:
        url: The server, `http://host:port` (a trailing `/score` is accepted).
        timeout: Seconds per attempt, from connecting to the answer's last byte.
        retries: At most this many retries after the first attempt (`None`: as many as `retry_budget_s` allows).
        backoff: Seconds before the first retry; each further retry waits twice as long, up to `max_backoff`.
        question_column: The dataset column holding the question; `None` uses the prompt text.
        gold_column: A dataset column sent as `golds` (for a served [`AnswerVerifier`]); `None` sends none.
        agent_index: Which completions are scored (see [`AnswerVerifier`]).
        batch_size: Responses per request (`None`: all of a call in one request).
        proxies: Proxies by URL scheme, e.g. `{"http": "http://proxy:3128"}` (default none: environment proxy
            settings are ignored, so a loopback verifier is never sent through a proxy).
        retry_budget_s: Seconds, from the first failed attempt, during which an unreachable server is retried
            (default 300: five minutes, enough for a restart that reloads a model).
        max_backoff: Longest wait between two attempts, in seconds.
        max_response_bytes: Longest answer read, in bytes (default 16 MiB; a list of 4096 scores takes under
            100 KiB); a longer one is refused as soon as that many bytes have arrived (or its `Content-Length`
            says so).
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
        max_response_bytes: int = 16 << 20,
    ) -> None:
        if not timeout > 0 or not math.isfinite(timeout):
            raise ValueError(f"`timeout` must be a positive number of seconds, got {timeout}.")
        if retries is not None and (isinstance(retries, bool) or not isinstance(retries, int) or retries < 0):
            raise ValueError(f"`retries` must be an integer >= 0 or None, got {retries!r}.")
        for field, value in (("backoff", backoff), ("retry_budget_s", retry_budget_s), ("max_backoff", max_backoff)):
            if not value >= 0 or not math.isfinite(value):
                raise ValueError(f"`{field}` must be a finite number of seconds >= 0, got {value!r}.")
        if isinstance(max_response_bytes, bool) or not isinstance(max_response_bytes, int) or max_response_bytes < 1:
            raise ValueError(f"`max_response_bytes` must be a positive number of bytes, got {max_response_bytes!r}.")
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
        self.max_response_bytes = max_response_bytes

    def _wait(self, retry: int) -> float:
        """Seconds to wait before retry `retry` (0-based): `backoff * 2**retry`, at most `max_backoff`."""
        return min(self.backoff * 2.0 ** min(retry, 60), self.max_backoff)

    @property
    def max_wait_s(self) -> float:
        """How long one request may take with all its retries (enforced: the last attempt is cut off at it, however
        slowly the server answers): the retry budget plus one last attempt's `timeout`, or less when `retries` caps
        the attempts."""
        budget = self.retry_budget_s + self.timeout
        if self.retries is None:
            return budget
        capped = (self.retries + 1) * self.timeout + sum(self._wait(k) for k in range(min(self.retries, 10_000)))
        return min(budget, capped)

    def _exchange(self, method: str, path: str, data: bytes | None, deadline: float) -> tuple[int, bytes]:
        """One HTTP exchange that ends by `deadline` (a `time.monotonic()` value), however slowly the server sends.

        Returns:
            The status and the body (an error body is cut to its first 64 KiB).

        Raises:
            TimeoutError: The deadline passed, or the server was silent for `timeout` seconds.
            _ResponseTooLarge: The answer is longer than `max_response_bytes` (reading stops there).
            OSError, http.client.HTTPException: The connection failed.
        """
        target = urllib.parse.urlsplit(self.url)
        https = target.scheme == "https"
        host, port = target.hostname or "", target.port or (443 if https else 80)
        request_path = (target.path or "") + path
        proxy = self.proxies.get(target.scheme)
        wait = max(min(self.timeout, deadline - time.monotonic()), 1e-3)
        connection_class = _DeadlineHTTPSConnection if https else _DeadlineHTTPConnection
        if proxy is None:
            connection = connection_class(host, port, timeout=wait)
        else:
            via = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
            connection = connection_class(via.hostname or "", via.port or 80, timeout=wait)
            if https:
                connection.set_tunnel(host, port)
            else:  # a plain HTTP proxy takes the absolute URL
                request_path = f"http://{target.netloc}{request_path}"
        connection.deadline, connection.idle_s = deadline, self.timeout
        response = None
        try:
            headers = {"Content-Type": "application/json", "Connection": "close"}
            connection.request(method, request_path, body=data, headers=headers)
            response = connection.getresponse()
            limit = self.max_response_bytes if 200 <= response.status < 300 else _ERROR_BODY_BYTES
            declared = response.getheader("Content-Length")
            if declared is not None and declared.strip().isdigit() and int(declared) > limit:
                if limit == _ERROR_BODY_BYTES:
                    return response.status, response.read(limit)
                raise _ResponseTooLarge(f"the answer declares {int(declared)} bytes")
            body = bytearray()
            while chunk := response.read(min(_READ_CHUNK, limit + 1 - len(body))):
                body += chunk
                if len(body) > limit:
                    if limit == _ERROR_BODY_BYTES:
                        return response.status, bytes(body[:limit])
                    raise _ResponseTooLarge(f"the answer is longer than {limit} bytes")
            return response.status, bytes(body)
        finally:
            if response is not None:
                response.close()
            connection.close()

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Any:
        """Sends one request with retries and returns the decoded JSON answer, all within `max_wait_s`.

        Raises:
            VerifierUnavailableError: Every attempt within the retry budget failed with a connection error, a
                timeout or HTTP 5xx.
            VerifierError: HTTP 4xx, an answer over `max_response_bytes`, or one that is not JSON.
        """
        url = self.url + path
        data = None if payload is None else json.dumps(payload).encode()
        first = time.monotonic()
        call_deadline = first + self.max_wait_s
        attempt = failures_of_verifier = 0
        last = "no attempt"
        while True:
            attempt += 1
            deadline = min(time.monotonic() + self.timeout, call_deadline)
            try:
                status, body = self._exchange(method, path, data, deadline)
            except _ResponseTooLarge as exc:
                raise VerifierError(
                    f"The verifier at {url} answered more than max_response_bytes={self.max_response_bytes} bytes "
                    f"({exc}); reading stopped there. Check what serves that URL, or raise "
                    "`RemoteVerifier(max_response_bytes=...)` if its answers are really that long."
                ) from exc
            except TimeoutError:
                failures_of_verifier = 0
                last = f"timed out: no complete answer within {self.timeout:g} s"
            except (OSError, http.client.HTTPException) as exc:
                failures_of_verifier = 0
                last = f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    try:
                        return json.loads(body)
                    except (ValueError, RecursionError) as exc:
                        raise VerifierError(
                            f"The verifier at {url} answered something that is not JSON: {body[:200]!r}"
                        ) from exc
                detail = _error_detail(body, status)
                if not 500 <= status < 600:
                    raise VerifierError(f"The verifier at {url} rejected the request: HTTP {status}: {detail}")
                last = f"HTTP {status}: {detail}"
                failures_of_verifier = failures_of_verifier + 1 if status == 500 else 0
            wait = self._wait(attempt - 1)
            elapsed = time.monotonic() - first
            out_of_retries = self.retries is not None and attempt > self.retries
            verifier_broken = failures_of_verifier > _VERIFIER_FAILURE_RETRIES
            if out_of_retries or verifier_broken or elapsed + wait > self.retry_budget_s:
                break
            logger.warning(
                "verifier at %s: attempt %d failed (%s); retrying in %.2g s (%.0f s of the %g s retry budget used)",
                url,
                attempt,
                last,
                wait,
                elapsed,
                self.retry_budget_s,
            )
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
            scores.extend(self._checked_scores(answer, len(payload["responses"]), start))
        return scores

    def _checked_scores(self, answer: Any, expected: int, start: int) -> list[float]:
        """The scores of an answer to a request of `expected` responses (the first being response `start`).

        Raises:
            VerifierError: The answer is not `{"scores": [...]}` with `expected` numbers, each in [0, 1].
        """
        chunk = answer.get("scores") if isinstance(answer, dict) else None
        if not isinstance(chunk, list):
            raise VerifierError(f'The verifier at {self.url} answered {str(answer)[:200]!r}, not {{"scores": [...]}}.')
        if len(chunk) != expected:
            raise VerifierError(
                f"The verifier at {self.url} answered {len(chunk)} scores for {expected} responses; the scores "
                "cannot be matched to the responses. Check that the URL serves a trl-marl verifier."
            )
        for offset, value in enumerate(chunk):
            # `not 0 <= value <= 1` is true for NaN as well (every comparison with NaN is false)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise VerifierError(
                    f"The verifier at {self.url} answered the score {value!r} for response {start + offset}: "
                    "a score must be a finite number in [0, 1]. The served verifier is broken (or is not a "
                    "verifier of probabilities); its scores are not used."
                )
        return [float(value) for value in chunk]

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
        return (
            f"RemoteVerifier(url={self.url!r}, timeout={self.timeout:g}, retries={self.retries}, "
            f"retry_budget_s={self.retry_budget_s:g})"
        )


def _error_detail(body: bytes, status: int) -> str:
    """The `error` message of a JSON error answer, else the start of its body."""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and "error" in data:
            return str(data["error"])[:2000]
    except (ValueError, RecursionError):
        pass
    return body[:200].decode(errors="replace") or f"HTTP {status}"


class _ResponseTooLarge(Exception):
    """An answer longer than `RemoteVerifier.max_response_bytes`."""


_READ_CHUNK = 1 << 16
"""Bytes read at a time from an answer (which is read in pieces, so that a cap stops it early)."""

_ERROR_BODY_BYTES = 1 << 16
"""Bytes of an error answer read for its message; the rest is not read."""


class _DeadlineSocket:
    """A connected socket whose sends and reads end by an absolute deadline (see [`DeadlineReader`]).

    As with `socket.makefile`, the socket stays open until the connection and every reader made from it are closed
    (`http.client` closes the connection before the body of a `Connection: close` answer has been read).
    """

    def __init__(self, sock: socket.socket, deadline: float, idle_s: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._idle_s = idle_s
        self._users = 1  # the connection

    def _release(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._sock.close()

    def sendall(self, data: Any) -> None:
        self._sock.settimeout(DeadlineReader(self._sock, self._deadline, self._idle_s).wait_s())
        self._sock.sendall(data)  # the timeout bounds the whole `sendall`

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        self._users += 1
        return io.BufferedReader(_SharedDeadlineReader(self, self._sock, self._deadline, self._idle_s))

    def close(self) -> None:
        self._release()


class _SharedDeadlineReader(DeadlineReader):
    """A [`DeadlineReader`] that gives its use of a [`_DeadlineSocket`] back when closed."""

    def __init__(self, owner: _DeadlineSocket, sock: socket.socket, deadline: float, idle_s: float) -> None:
        super().__init__(sock, deadline, idle_s)
        self._owner = owner

    def close(self) -> None:
        if not self.closed:
            self._owner._release()
        super().close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class _DeadlineConnectionMixin:
    """Wraps the connected (and, for HTTPS, encrypted) socket in a [`_DeadlineSocket`]."""

    deadline: float = math.inf
    idle_s: float = math.inf
    sock: Any

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        self.sock = _DeadlineSocket(self.sock, self.deadline, self.idle_s)


class _DeadlineHTTPConnection(_DeadlineConnectionMixin, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineConnectionMixin, http.client.HTTPSConnection):
    pass


def _jsonable(value: Any) -> Any:
    """A gold value as JSON accepts it (numpy scalars and the like become Python numbers or strings)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)
