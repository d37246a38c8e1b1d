"""What bounds a verifier exchange in time, for [`~trl_marl.rewards.verifier_server.VerifierServer`] and
[`~trl_marl.rewards.remote.RemoteVerifier`]: a socket reader with an absolute deadline (a peer that trickles bytes
cannot stretch a request or an answer past it) and the server's scorer, which calls the verifier from one thread and
takes the waiting requests in turn, a chunk of each at a time, with a limit on each request's scoring time, an
admission check (a request that cannot be scored within its wait is refused at once, before any work) and the
cancellation of a request whose client has gone.
"""

from __future__ import annotations

import io
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = [
    "DEFAULT_CHUNK", "ClientGoneError", "DeadlineReader", "ScoreJob", "Scorer", "ScorerBusyError", "ScoringTimeError",
    "client_gone",
]

DEFAULT_CHUNK = 64
"""Items scored in one call of the verifier when neither `chunk_size` nor the verifier's `batch_size` says more."""


class DeadlineReader(io.RawIOBase):
    """Reads a socket with two limits: each read waits at most `idle_s`, and no read starts or waits past the
    absolute `deadline` (a `time.monotonic()` value), so a peer that trickles one byte at a time cannot stretch an
    exchange beyond it. Either limit raises `TimeoutError`. Wrap it in `io.BufferedReader`; shared with the client
    ([`~trl_marl.rewards.remote.RemoteVerifier`])."""

    def __init__(self, sock: socket.socket, deadline: float, idle_s: float) -> None:
        super().__init__()
        self._sock = sock
        self.deadline = deadline
        self._idle_s = idle_s

    def readable(self) -> bool:
        return True

    def wait_s(self) -> float:
        """Seconds the next socket operation may wait: the idle limit or what is left before the deadline.

        Raises:
            TimeoutError: The deadline has passed.
        """
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the deadline of this exchange has passed")
        return min(self._idle_s, left)

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(self.wait_s())
        return self._sock.recv_into(buffer)


class ScoringTimeError(RuntimeError):
    """A request's scoring used more than the server's `max_score_s` (the server answers HTTP 413)."""


class ScorerBusyError(RuntimeError):
    """A request waited longer than its limit for its scores, or was refused at admission because it could not be
    scored within it (the server answers HTTP 503 with `Retry-After`, which clients retry)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ClientGoneError(RuntimeError):
    """The client of a request closed its connection while the request waited: its scoring was cancelled."""


def client_gone(sock: socket.socket) -> bool:
    """Whether the peer of a connected socket has closed it (or reset it): readable with nothing to read. Data
    waiting on the socket (a pipelined request) is left there and means the client is still there."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except (OSError, ValueError):  # reset, or already closed
        return True


class ScoreJob:
    """One request's items, scored a chunk at a time; `done` is set when all are scored or the job failed."""

    def __init__(self, questions: list[str], responses: list[str], golds: list[Any] | None) -> None:
        self.questions, self.responses, self.golds = questions, responses, golds
        self.scores: list[float] = []
        self.spent_s = 0.0
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.cancelled = False


class Scorer:
    """Calls the verifier from one thread, taking `chunk_size` items of each waiting request in turn (round robin).

    A request whose scoring has used more than `max_score_s` seconds of the verifier's time (waiting for other
    requests' chunks does not count) is stopped after its current chunk and refused with HTTP 413.

    Admission: once the verifier's time per item is known (a running average over the chunks scored), a request is
    queued only if the scoring ahead of its last item fits in half its wait: its own items, plus, of every request
    already queued, at most as many items as it has (round robin serves the others' chunks in between). Otherwise it
    is refused at once ([`ScorerBusyError`] with the estimated wait as `retry_after_s`), before any of it is scored:
    a flood of large requests is no longer admitted only to fail after the wait with its work wasted, and a small
    request still gets in beside it. A request whose client closes its connection while it waits is cancelled
    (`gone`, checked every `poll_s` seconds): its remaining chunks are never scored.
    """

    poll_s = 0.2
    """How often a waiting request checks that its client is still there."""

    def __init__(self, verifier: Any, chunk_size: int, max_score_s: float) -> None:
        self.verifier = verifier
        self.chunk_size = chunk_size
        self.max_score_s = max_score_s
        self._queue: deque[ScoreJob] = deque()
        self._current: ScoreJob | None = None  # the job whose chunk the verifier is scoring
        self.seconds_per_item: float | None = None  # a running average over the scored chunks (weight 0.3 each)
        self._ready = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="verifier-scorer", daemon=True)
        self._thread.start()

    def estimated_wait_s(self, items: int) -> float | None:
        """Seconds until a new request of `items` responses would be scored (see the class docstring), or `None`
        before the verifier's time per item is known."""
        if self.seconds_per_item is None:
            return None
        with self._ready:
            jobs = [*self._queue, *([self._current] if self._current is not None else [])]
            ahead = sum(min(len(j.responses) - len(j.scores), items) for j in jobs if not j.cancelled)
        return (ahead + items) * self.seconds_per_item

    def score(self, job: ScoreJob, wait_s: float, gone: Callable[[], bool] | None = None) -> list[float]:
        """Admits `job` (or refuses it), queues it, waits for it and returns its scores (or raises what scoring
        raised).

        Raises:
            ScorerBusyError: The job would not be scored within half of `wait_s` (refused before any work), or was
                not done within `wait_s` seconds (the verifier is stuck in a call); it is dropped.
            ClientGoneError: `gone()` said the client left while the job waited; the job is dropped.
        """
        estimate = self.estimated_wait_s(len(job.responses))
        if estimate is not None and estimate > wait_s / 2:
            raise ScorerBusyError(
                f"this server is busy: {len(job.responses)} responses would be scored in about {estimate:.0f} s, "
                f"more than half this request's wait of {wait_s:g} s; try again later or send fewer responses per "
                "request", retry_after_s=estimate)
        with self._ready:
            if self._closing:
                raise RuntimeError("the verifier server is stopping")
            self._queue.append(job)
            self._ready.notify()
        deadline = time.monotonic() + wait_s
        left = False
        while not job.done.wait(max(0.0, min(self.poll_s, deadline - time.monotonic()))):
            left = gone is not None and gone()
            if left or time.monotonic() >= deadline:
                break
        if not job.done.is_set():
            with self._ready:
                job.cancelled = True
                if job in self._queue:
                    self._queue.remove(job)
            if not job.done.is_set():
                if left:
                    raise ClientGoneError(f"the client left after {len(job.scores)} of {len(job.responses)} "
                                          "responses were scored; the rest were cancelled")
                raise ScorerBusyError(
                    f"this request waited {wait_s:g} s for the verifier without being scored ({len(job.scores)} of "
                    f"{len(job.responses)} responses done): the verifier is stuck or overloaded; try again later"
                )
        if job.error is not None:
            raise job.error
        return job.scores

    def stop(self) -> None:
        """Fails the waiting jobs and ends the thread after its current chunk."""
        with self._ready:
            self._closing = True
            for job in self._queue:
                job.error = RuntimeError("the verifier server is stopping")
                job.done.set()
            self._queue.clear()
            self._ready.notify_all()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if self._closing:
                    return
                job = self._queue.popleft()
                if job.cancelled:
                    continue
                self._current = job
            try:
                finished = self._step(job)
            except Exception as exc:  # handed to the request's thread, which answers it
                job.error, finished = exc, True
            except BaseException as exc:  # SystemExit or KeyboardInterrupt from a verifier: not the server's end
                job.error, finished = RuntimeError(f"the verifier raised {type(exc).__name__}: {exc}"), True
            with self._ready:
                self._current = None
                if not finished and self._closing:
                    job.error, finished = RuntimeError("the verifier server is stopping"), True
                elif not finished and not job.cancelled:
                    self._queue.append(job)  # behind the requests that waited meanwhile
            if finished:
                job.done.set()

    def _step(self, job: ScoreJob) -> bool:
        """Scores the next chunk of `job`; returns whether the job is finished (all scored, or over its time)."""
        start = len(job.scores)
        stop = min(start + self.chunk_size, len(job.responses))
        questions, responses = job.questions[start:stop], job.responses[start:stop]
        began = time.monotonic()
        if job.golds is None:
            scores = self.verifier.score_batch(questions, responses)
        else:
            scores = self.verifier.score_batch(questions, responses, job.golds[start:stop])
        took = time.monotonic() - began
        job.spent_s += took
        per_item = took / max(1, stop - start)
        self.seconds_per_item = per_item if self.seconds_per_item is None else (
            0.7 * self.seconds_per_item + 0.3 * per_item)
        scores = [float(s) for s in scores]
        if len(scores) != stop - start:
            raise RuntimeError(f"the verifier returned {len(scores)} scores for {stop - start} responses")
        bad = next((s for s in scores if not 0.0 <= s <= 1.0), None)  # NaN fails both comparisons
        if bad is not None:
            raise RuntimeError(f"the verifier returned the score {bad!r}, not a number in [0, 1]")
        job.scores.extend(scores)
        if len(job.scores) == len(job.responses):
            return True
        if job.spent_s > self.max_score_s:
            job.error = ScoringTimeError(
                f"scoring this request took more than this server's limit of {self.max_score_s:g} s (stopped after "
                f"{len(job.scores)} of {len(job.responses)} responses); send fewer responses per request "
                "(RemoteVerifier(batch_size=...)) or start the server with a larger --max-score-s"
            )
            return True
        return False
