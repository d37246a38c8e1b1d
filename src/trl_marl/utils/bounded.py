"""Calls bounded in time: in a worker thread (abandoned when late) or in a forked child process (killed when late).

A Python thread cannot be stopped, and code that holds the GIL in C (a backtracking `re.match`, `sum(range(10**9))`)
does not even let the waiting thread notice that the time is up: only a separate process can be stopped on time.

- [`call_in_thread`]: `func(**kwargs)` in a daemon thread, awaited at most `timeout` seconds; the elapsed time is
  returned with the result, so that a result that came back after the limit can be refused by the caller.
- [`call_in_child`]: `work()` in a child forked from the calling thread, which inherits the caller's memory (the
  function and its arguments are never pickled); `work()` returns a JSON-serializable value, the only thing that
  comes back. A child that overruns is killed with its process group (`SIGKILL`), one that dies is reported.
- [`Worker`]: a long-lived forked child that serves many calls of one handler, each bounded like
  [`call_in_child`]'s (the request is pickled, the reply is JSON); what the handler keeps in its memory between
  calls (a model loaded on first use, a cache, a counter) stays there until the worker is killed at a limit or dies.
"""

from __future__ import annotations

import contextvars
import json
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any, NoReturn

__all__ = [
    "ChildDied",
    "ForkFailed",
    "Overran",
    "Worker",
    "call_in_child",
    "call_in_thread",
    "can_fork",
    "exception_text",
    "fork_obstacle",
]

_ORPHAN_POLL_S = 0.5
"""How often a [`Worker`] waiting for a request checks that its parent is alive (it exits within this time of the
parent's death; a request it is running when the parent dies ends first)."""

MAX_CHILD_BYTES = 16 * 1024 * 1024
"""The most bytes a child may send back (its JSON reply); more is a [`ChildDied`] (the child is killed)."""


class Overran(Exception):
    """The call did not return within its time limit (a child was killed; a thread was abandoned)."""


class ForkFailed(Exception):
    """No child process could be started (`os.pipe` or `os.fork` failed, e.g. for want of memory)."""


class ChildDied(Exception):
    """The child process ended without a complete reply (a crash, `os._exit`, a reply too large or malformed)."""


def can_fork() -> bool:
    """Whether this platform has `os.fork` (Linux, macOS; not Windows)."""
    return hasattr(os, "fork")


def fork_obstacle(func: Any) -> str | None:
    """Why `func` cannot run in a forked child (no `os.fork` here; it holds a model or tensor on a GPU, which CUDA does
    not allow after a fork: looked for in `func`, its `__self__`, its attributes and its closure), or None."""
    import torch

    if not can_fork():
        return "this platform has no `os.fork`"
    seen: list[Any] = [func, getattr(func, "__self__", None), *getattr(func, "__dict__", {}).values()]
    for cell in getattr(func, "__closure__", None) or ():
        try:
            seen.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    for value in seen:
        if isinstance(value, torch.nn.Module):
            value = next(iter([*value.parameters(), *value.buffers()]), None)
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return f"it holds a model or tensor on {value.device} (a forked process cannot use it)"
    return None


def call_in_thread(func: Callable[..., Any], kwargs: dict[str, Any], timeout: float) -> tuple[Any, float]:
    """`func(**kwargs)` in a daemon thread, awaited at most `timeout` seconds.

    The thread gets the caller's context variables, autograd mode and CUDA device.

    Returns:
        `(result, seconds)`: the call's result and how long it took (which may exceed `timeout` when the call held
        the GIL in C code, so that the waiting thread could not run at the deadline).

    Raises:
        Overran: when the call is still running after `timeout` seconds (its thread is left to finish on its own).
        BaseException: whatever the call raised, re-raised in the caller's thread.
    """
    import torch

    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()
    grad = torch.is_grad_enabled()
    device = torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None

    def work() -> None:
        try:
            if device is not None:
                torch.cuda.set_device(device)
            with torch.set_grad_enabled(grad):
                outcome["value"] = context.run(func, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    start = time.monotonic()
    thread = threading.Thread(
        target=work, name=f"reward:{getattr(func, '__name__', type(func).__name__)}", daemon=True
    )
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise Overran
    seconds = time.monotonic() - start
    if "error" in outcome:
        raise outcome.pop("error")
    return outcome["value"], seconds


def call_in_child(work: Callable[[], Any], timeout: float) -> Any:
    """`work()` in a forked child process, awaited at most `timeout` seconds; its JSON-serializable return value.

    The child runs in its own process group (a Ctrl-C at the terminal reaches the parent only, which then kills the
    child) on one torch thread, and ends with `os._exit` (no `atexit` handler of the parent runs twice). Whatever
    `work` raises, `BaseException`s included, comes back as `{"raised": type name, "message": ..., "traceback":
    ...}`; nothing else of the child reaches the parent but the JSON reply.

    Raises:
        ForkFailed: no child could be started.
        Overran: `work()` did not reply within `timeout` seconds; the child and its process group were killed.
        ChildDied: the child ended without a complete reply (the message says how it ended).
    """
    deadline = time.monotonic() + timeout

    def life(pipes: list[tuple[int, int]]) -> None:
        os.close(pipes[0][0])
        _child_main(work, pipes[0][1])

    pid, [(read_fd, write_fd)] = _fork_child(1, life)
    os.close(write_fd)
    reaped = False
    try:
        reply = _read_reply(read_fd, deadline, pid)
        status = _wait(pid, deadline)
        reaped = status is not None
        if reply is None:
            raise ChildDied(_how_it_ended(status))
        return reply
    finally:
        os.close(read_fd)
        if not reaped:
            _kill(pid)


def _flush_streams(ignored: type[BaseException] = Exception) -> None:
    """Flush stdout and stderr, ignoring `ignored` (a closed or odd stream). Before a fork, or the child would print
    the parent's buffered text again; in a child, before its `os._exit`."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except ignored:
            pass


def _fork_child(count: int, life: Callable[[list[tuple[int, int]]], None]) -> tuple[int, list[tuple[int, int]]]:
    """Fork a child whose whole life is `life(pipes)`, with `count` pipes (`(read, write)` each) made before the fork;
    returns `(pid, pipes)` in the parent only, which closes the ends it does not use (`life` closes the others).

    The child never returns into the caller's code, whatever happens in it: it ends with `os._exit` (0 when `life`
    returns, 70 when it raises), so no `atexit` handler, test runner or training loop of the parent runs twice.
    Signals that could raise in it (Ctrl-C, SIGTERM, SIGALRM handlers of the parent) are blocked from before the fork
    until the child has its own process group (set on both sides: whichever runs first wins) and Ctrl-C ends it as a
    plain program. The streams are flushed first, or the child would print the parent's buffered text again.

    Raises:
        ForkFailed: no pipe or no child could be made (nothing is left open).
    """
    _flush_streams()
    pipes: list[tuple[int, int]] = []
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    try:
        try:
            for _ in range(count):
                pipes.append(os.pipe())
            with warnings.catch_warnings():  # Python 3.12+ warns on fork with threads; the child starts none of them
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError as exc:
            for fd in (fd for pipe in pipes for fd in pipe):
                os.close(fd)
            raise ForkFailed(f"{type(exc).__name__}: {exc}") from exc
        if pid == 0:
            _child_process(life, pipes, held)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        return pid, pipes
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _child_process(life: Callable[[list[tuple[int, int]]], None], pipes: list[tuple[int, int]],
                   held: set[int | signal.Signals]) -> NoReturn:
    """A forked child: its own process group, default Ctrl-C, the caller's signal mask back, `life(pipes)`, then
    `os._exit` (0, or 70 when `life` raised), whatever happens."""
    code = 70
    try:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        life(pipes)
        code = 0
    except BaseException:  # noqa: BLE001 - e.g. the parent closed the pipe: exit without a reply
        pass
    finally:
        _flush_streams(BaseException)  # nothing may stop the exit below
        os._exit(code)


_HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2}


def _one_torch_thread() -> None:
    """The parent's OpenMP pool does not survive the fork: a child computes on one torch thread."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _reply_message(produce: Callable[[], Any]) -> bytes:
    """What a child sends back for `produce()`: `{"value": ...}`, or what it raised (`BaseException`s included) as
    `{"raised": type name, "message": ..., "traceback": ...}`, as JSON after its 8-byte length."""
    try:
        reply: Any = {"value": produce()}
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included: all go back
        reply = {"raised": type(exc).__name__, "message": exception_text(exc), "traceback": _traceback_text(exc)}
    try:
        data = json.dumps(reply).encode()
    except Exception as exc:  # noqa: BLE001 - a value that JSON cannot hold
        data = json.dumps(
            {"raised": type(exc).__name__, "message": f"the reply is not JSON: {exc}", "traceback": ""}
        ).encode()
    return len(data).to_bytes(8, "big") + data


def _write_blocking(fd: int, data: bytes) -> None:
    """Write all of `data` to a blocking pipe (a child's reply)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _child_main(work: Callable[[], Any], write_fd: int) -> None:
    """A [`call_in_child`] child's life: run `work` on one torch thread, write the reply (8-byte length, then JSON)."""

    def run() -> Any:
        _one_torch_thread()
        return work()

    _write_blocking(write_fd, _reply_message(run))


class Worker:
    """A long-lived child process, forked now from the calling thread, that answers requests with `handler`.

    Each [`call`] pickles a request, sends it, and waits at most `timeout` seconds for the handler's JSON-serializable
    reply (or what it raised, as [`call_in_child`] reports it); the handler runs in the child, which keeps whatever
    the handler keeps between calls. The child runs in its own process group on one torch thread, serves one request
    at a time (calls from several threads wait their turn), and exits when the parent closes its end (its exit, or
    [`close`]).

    Memory: the child shares the parent's pages as they were at the fork; pages the parent writes afterwards are
    copied for it (copy-on-write), so a parent that rewrites much host memory after the fork (a full fine-tune on the
    CPU) holds up to that much more while the worker lives.

    Raises:
        ForkFailed: no child could be started.
    """

    def __init__(self, handler: Callable[[Any], Any]) -> None:
        def life(pipes: list[tuple[int, int]]) -> None:
            (request_read, request_write), (reply_read, reply_write) = pipes
            os.close(request_write)
            os.close(reply_read)
            _worker_main(handler, request_read, reply_write)

        pid, [(request_read, request_write), (reply_read, reply_write)] = _fork_child(2, life)
        os.close(request_read)
        os.close(reply_write)
        self.pid, self._requests, self._replies = pid, request_write, reply_read
        self._lock = threading.Lock()
        self.closed = False

    def call(self, request: Any, timeout: float) -> Any:
        """The handler's reply to `request` within `timeout` seconds.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: `request` cannot be pickled (nothing was sent; the
                worker goes on).
            Overran: no reply within `timeout`; the worker was killed ([`close`]).
            ChildDied: the worker ended without a reply (it is closed).
        """
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        data = len(data).to_bytes(8, "big") + data
        with self._lock:
            if self.closed:
                raise ChildDied("the worker was closed")
            deadline = time.monotonic() + timeout
            try:
                _write_all(self._requests, data, deadline)
                reply = _read_reply(self._replies, deadline, self.pid)
            except Overran:
                self.close()
                raise
            except (ChildDied, OSError) as exc:
                self.close()
                raise ChildDied(str(exc) if isinstance(exc, ChildDied) else f"{type(exc).__name__}: {exc}") from None
            if reply is None:
                status = _wait(self.pid, time.monotonic() + 1.0)
                self.close()
                raise ChildDied(_how_it_ended(status))
            return reply

    def close(self) -> None:
        """Kill the child (with its process group) and close the pipes; a closed worker takes no more calls."""
        if self.closed:
            return
        self.closed = True
        for fd in (self._requests, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        _kill(self.pid)


def _write_all(fd: int, data: bytes, deadline: float) -> None:
    """Write `data` to a pipe, waiting for room until `deadline` ([`Overran`] then)."""
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Overran
        _, ready, _ = select.select([], [fd], [], remaining)
        if ready:
            view = view[os.write(fd, view[: 1 << 16]) :]


def _read_exact(fd: int, count: int, parent: int | None = None) -> bytes | None:
    """`count` bytes from a blocking pipe, or None at its end. With `parent`, the wait polls every
    `_ORPHAN_POLL_S` whether the parent pid is still this process's parent, and exits the process (`os._exit(0)`)
    once it is not: the parent died (even by `os._exit` or a kill) and nobody will write again."""
    data = bytearray()
    while len(data) < count:
        if parent is not None:
            while not select.select([fd], [], [], _ORPHAN_POLL_S)[0]:
                if os.getppid() != parent:
                    os._exit(0)
        chunk = os.read(fd, min(count - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _prctl() -> Callable[..., int] | None:
    """Linux's `prctl`, looked up in the parent at import: a child must not `dlopen` (it takes the loader's lock,
    which another parent thread may have held at the fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()
_PR_SET_PDEATHSIG = 1


def _leave_with(parent: int) -> None:
    """Have Linux signal this (child) process when its parent dies, even mid-request, and exit then. The signal comes
    once, when the *thread* that forked the child ends, so the handler exits only if the parent process is gone;
    after a forking thread's own end, and off Linux, the poll between requests (`_read_exact`) is the only watch."""
    if _PRCTL is None:
        return

    def parent_died(signum: int, frame: Any) -> None:
        if os.getppid() != parent:
            os._exit(0)

    signal.signal(signal.SIGUSR2, parent_died)
    _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGUSR2), 0, 0, 0)
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(0)


def _worker_main(handler: Callable[[Any], Any], read_fd: int, write_fd: int) -> None:
    """A [`Worker`]'s life: answer requests until the parent closes its end (or dies)."""
    _one_torch_thread()
    # The child leaves with its parent, freeing what the fork inherited (its pipes and sockets) so nobody waits on
    # them. It starts no thread to watch: a thread started in the child of a multi-threaded parent can block forever
    # on a lock another parent thread held at the fork (seen: it never ran, so the child never answered).
    parent = os.getppid()
    _leave_with(parent)
    while True:
        header = _read_exact(read_fd, 8, parent)
        if header is None:
            return
        payload = _read_exact(read_fd, int.from_bytes(header, "big"))
        if payload is None:
            return

        def produce(data: bytes = payload) -> object:
            return handler(pickle.loads(data))

        _write_blocking(write_fd, _reply_message(produce))
        _flush_streams(BaseException)


def exception_text(exc: BaseException) -> str:
    """`str(exc)`, or a line naming the exception's type when its `__str__` itself raises."""
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        return f"<{type(exc).__name__} whose str() raised>"


def _traceback_text(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-20_000:]
    except Exception:  # noqa: BLE001
        return ""


def _read_reply(fd: int, deadline: float, pid: int) -> Any:
    """The child's JSON reply, or None when the pipe closed before a complete one; [`Overran`] at the deadline."""
    data = bytearray()
    expected: int | None = None
    while expected is None or len(data) < expected + 8:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Overran
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        data += chunk
        if expected is None and len(data) >= 8:
            expected = int.from_bytes(data[:8], "big")
            if expected > MAX_CHILD_BYTES:
                raise ChildDied(f"its reply is {expected} bytes, more than {MAX_CHILD_BYTES}")
    try:
        return json.loads(bytes(data[8 : 8 + expected]))
    except ValueError as exc:
        raise ChildDied(f"its reply is not JSON ({exc})") from None


def _wait(pid: int, deadline: float) -> int | None:
    """The child's wait status once it exits, or None if it still runs at the deadline (then the caller kills it)."""
    delay = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _kill(pid: int) -> None:
    """Kill the child and its process group, and reap it."""
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _how_it_ended(status: int | None) -> str:
    if status is None:
        return "it ended without a reply"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"it was killed by {name}"
    return f"it exited with status {os.WEXITSTATUS(status)} without a reply (os._exit, or the interpreter crashed)"
