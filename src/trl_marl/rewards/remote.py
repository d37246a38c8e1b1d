"""A verifier over HTTP: [`VerifierServer`] serves any batch verifier, [`RemoteVerifier`] calls it with retries.

`POST /score` with `{"questions": [...], "responses": [...]}` -> `{"scores": [...]}`, `GET /health`. A verifier on
another GPU or machine scores a team's answers as the in-process verifiers of `trl_marl.rewards.verifier` do.
`trl-marl serve-verifier` (`trl_marl.scripts.serve_verifier`) serves a saved model. The server lives in
`trl_marl.rewards.verifier_server` and is re-exported here.
"""


from __future__ import annotations

import http.client
import json
import logging
import math
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from ..utils.columns import AgentSelector, select_texts
from ..utils.text import completion_text
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


