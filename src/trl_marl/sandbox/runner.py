"""Run model-generated code against unit tests in a sandbox (the trainer-side runner).

Model code never runs in the calling process, and it never decides its own verdict. Each program gets a fresh
`python -I` interpreter running the harness (the module `trl_marl.sandbox.harness`) as three processes: the trusted
harness H, a trusted init process C, and the program's process P, which applies every limit before it runs any of the
program. H runs the tests (dataset code) itself, with the program's names bound to stubs that forward each call to P
over a pipe; P answers with *plain data* only (exact `int`, `float`, `complex`, `str`, `bytes`, `bool`, `None`,
`list`, `tuple`, `dict`, `set`, `frozenset`, in a strict codec of its own, never pickle), and H compares there. Any
other result is an opaque reference whose comparison, truth value, hashing or iteration fails the test; a test that
never reports, or that ends after P died, has failed; P's exit code, output and markers are never read as a verdict.
P never holds the tests (H reads them from its pipe only after P exists) nor H's report pipe. The threat model, the
isolation levels and what each guarantees are in `docs/sandbox.md`.

OS layer (the security boundary), isolation level `"namespaces"` (the default; root; `SandboxUnavailableError` where
impossible -- `"process"` is the explicit opt-in to a weaker level, also through `TRL_MARL_SANDBOX_ISOLATION`):
    - resource limits: address space (`memory_mb`), CPU seconds (`cpu_time`), processes and threads of the
      sandbox user (`max_processes`, `RLIMIT_NPROC`), size of a written file (`max_file_mb`), open files, no core
      files; C kills the program when its *charged* time (wall clock minus the time it waited for a CPU, and at
      least the CPU time of all its processes) passes `wall_time`, so load from other runs does not time it out;
      the caller kills everything after a generous plain wall-clock backstop;
    - Linux namespaces: a network namespace with no interface up (no network at all, not even 127.0.0.1), a PID
      namespace (when the program's process ends, the kernel kills everything it started), a mount namespace whose
      root is built from an allowlist (the interpreter, its import path, the system libraries, a few loader and
      time zone files, `SandboxLimits.visible_paths`; read-only, `nosuid`; no home, no datasets cache, no host data
      directory), and where `/tmp`, `/var/tmp` and `/dev/shm` are one private size-limited tmpfs (`max_disk_mb`),
      the program's working directory, gone when the run ends;
    - a memory + pids cgroup per run (where `/sys/fs/cgroup` is writable) bounds the memory and the number of all
      the run's processes together (`RLIMIT_AS` only bounds each process);
    - the program runs as an unprivileged user id of its own (`uid_base` + a slot number unique among the sandboxes
      running at the same time), with `no_new_privs` (set-uid binaries gain nothing) and a seccomp filter that
      refuses nested namespaces (user namespaces above all), mounts, `ptrace`, keyrings, BPF, perf, `userfaultfd`
      and `io_uring`. The directories on the way to an allowlisted path (e.g. a Python under `/root`) are the new
      root's own, traversable, and hold nothing else.

Python layer (defense in depth; it can be bypassed by determined code, the OS layer cannot):
    - an audit hook (`sys.addaudithook`, which a program cannot remove) refuses process creation, signals,
      sockets, `ctypes`, `resource.setrlimit`, `gc` introspection, and any write, delete, rename, `chmod` or
      `shutil.rmtree`/`shutil.move` outside the working directory;
    - functions that have no use in a unit test are replaced by stubs that raise `PermissionError`:
      `os.system`, `os.kill`, `os.fork`, the `os.exec*`/`os.spawn*`/`os.posix_spawn*` family, `os.popen`,
      `os.chown` and friends, `subprocess.Popen`/`run`/..., `socket.socket`/`create_connection`/....

Reasons: a run without H's `done` failed, with the reason the caller observed: `timeout`, `memory`, `output_limit`,
`exit: ...` (the program called `sys.exit` or `os._exit`), `killed by signal N`. So a program that exits early never
counts as passing. What a program can make the caller log is sanitized and bounded.

Test formats:
    - HumanEval rows (`prompt`, `test` defining `check(candidate)`, `entry_point`): the program is the
      completion (a whole function when it defines `entry_point`, else a body appended to the prompt); the test code
      runs in H with `candidate` the program's `entry_point`, after the prompt's own definitions (`task_code`, when
      the spec has the prompt), so a test's `poly(...)` is the task's, whatever the program redefines. For partial
      credit each top-level statement of `check` that can fail (it asserts, `assert True, ...` aside, raises, or
      calls a helper of the test code that does) is a test, and every other statement runs inside the next test
      (after the last test: inside the last one), so any failure in `check` fails a test; when `check` has no such
      statement, `check(entry_point)` is one test.
    - MBPP rows (`test_list`, a list of assert statements, and optional `test_setup_code`): each assert is a test.
      The tests see the program's top-level names as they would in one module (functions and classes as stubs,
      plain constants as values), except that the program cannot shadow built-ins (only the entry point may carry a
      built-in's name) and that a standard module the tests read as `name.attribute` (`math.isclose`) is always H's
      own (see `plans.modules_read`). An object a call returned that is not plain data can only be passed back to
      the program: reading its attributes (`f(x).startswith(...)`) or calling it fails the test. A test that mutates
      an argument in place and checks it afterwards sees no change (the program worked on a copy).

Example:

```python
from trl_marl.sandbox import SandboxLimits, TestSpec, run_programs

spec = TestSpec.mbpp(["assert add(1, 2) == 3", "assert add(2, 2) == 4"])
[result] = run_programs(["def add(a, b):\\n    return a + b\\n"], [spec], SandboxLimits(wall_time=2))
result.passed, result.total, result.reason  # (2, 2, 'ok')
```
"""

from __future__ import annotations

import ast
import logging
import marshal
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .cgroup import Cgroup
from .cleanup import remove_user_files, remove_user_ipc
from .plans import TestPlan, make_plan
from .types import (
    ISOLATION_ENV,
    PID_SPACE,
    SLOTS_PER_PROCESS,
    ExecutionResult,
    SandboxLimits,
    SandboxUnavailableError,
    TestSpec,
)
from .warn import warn_once

logger = logging.getLogger(__name__)

_MAX_RECORD_BYTES = 8 * 1024 * 1024  # the harness reports a few hundred bytes per test

# ---------------------------------------------------------------------------------------------------- the harness
# The harness is the module `trl_marl.sandbox.harness`, run in `python -I -c <source of trl_marl.sandbox.boot>`,
# which reads (harness, request) from stdin (length-prefixed marshal: trusted data from this process; the tests
# follow in the pipe, read by the harness only once the program's process exists without them) and executes the
# harness as `__trl_marl_harness__`. It is sent as a code object compiled once when the sandbox interpreter is this
# one (saves compiling it every run), else as source. The harness imports nothing from trl_marl, so any interpreter
# can run it.
BOOT_PATH = Path(__file__).with_name("boot.py")
HARNESS_PATH = Path(__file__).with_name("harness.py")
"""The harness's source file (sent to each sandbox interpreter)."""
_BOOT = BOOT_PATH.read_text(encoding="utf-8")
_HARNESS_CODE: list[Any] = []


def _harness_source() -> str:
    return HARNESS_PATH.read_text(encoding="utf-8")


def _harness_payload(python: str) -> Any:
    """The harness as a code object for the caller's own interpreter, else as source."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return _harness_source()
    if not _HARNESS_CODE:
        _HARNESS_CODE.append(compile(_harness_source(), str(HARNESS_PATH), "exec"))
    return _HARNESS_CODE[0]


# ---------------------------------------------------------------------------------------------------- running
class _UidSlots:
    """Hands out sandbox slot numbers (0..255) so that runs at the same time get distinct user ids."""

    def __init__(self, size: int) -> None:
        self._free = list(range(size - 1, -1, -1))
        self._cond = threading.Condition()

    def acquire(self) -> int:
        with self._cond:
            while not self._free:
                self._cond.wait()
            return self._free.pop()

    def release(self, slot: int) -> None:
        with self._cond:
            self._free.append(slot)
            self._cond.notify()


_SLOTS = _UidSlots(SLOTS_PER_PROCESS)


@dataclass
class _RawRun:
    stdout: bytes
    records: list[tuple[Any, ...]]
    timed_out: bool
    output_limited: bool
    returncode: int | None
    duration: float
    oom_killed: bool = False


def _parse_records(data: bytes, nonce: str) -> list[tuple[Any, ...]]:
    tag = nonce.encode() + b" "
    records = []
    for line in data.split(b"\n"):
        if not line.startswith(tag):
            continue
        try:
            value = ast.literal_eval(line[len(tag):].decode("utf-8", "replace"))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
        if isinstance(value, tuple) and value and isinstance(value[0], str):
            records.append(value)
    return records


def _kill_user(uid: int, rounds: int = 100) -> None:
    """SIGKILL every live process of the sandbox user `uid` (unique to one run) until none is left."""
    for _ in range(rounds):
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
                with open(f"/proc/{name}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X"):  # dead, waiting to be reaped
                        continue
                os.kill(int(name), signal.SIGKILL)
                found = True
            except (OSError, IndexError):
                pass
        if not found:
            return
        time.sleep(0.001)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _execute(program: str, plan: TestPlan, limits: SandboxLimits, backstop: float) -> _RawRun:
    """Start the harness, feed it the request, collect its output and reports within the limits."""
    python = limits.python_executable or sys.executable
    if not python:
        raise RuntimeError("No Python interpreter to run the sandbox (sys.executable is empty).")
    nonce = secrets.token_hex(16)
    slot = _SLOTS.acquire()
    uid = limits.uid_base + (os.getpid() % PID_SPACE) * SLOTS_PER_PROCESS + slot
    workdir = tempfile.mkdtemp(prefix="trl_marl_sandbox_")
    start = time.monotonic()
    cgroup: Cgroup | None = None
    try:
        if limits.cgroups:
            slack = 64 * 1024 * 1024  # the harness's own processes and the namespaces' kernel memory
            cgroup = Cgroup(f"uid{uid}", (limits.memory_mb + limits.max_disk_mb) * 1024 * 1024 + slack,
                             limits.max_processes + 2)
        if os.geteuid() == 0:
            os.chown(workdir, uid, uid)
        read_fd, write_fd = os.pipe()
        request = marshal.dumps((_harness_payload(python), {
            "nonce": nonce, "result_fd": write_fd, "parent_pid": os.getpid(), "uid": uid, "workdir": workdir,
            "namespaces": bool(limits.namespaces), "guards": bool(limits.python_guards),
            "memory": int(limits.memory_mb) * 1024 * 1024, "cpu": max(1, math.ceil(limits.cpu_time)),
            "fsize": int(limits.max_file_mb) * 1024 * 1024, "nofile": int(limits.max_open_files),
            "nproc": int(limits.max_processes), "disk_mb": int(limits.max_disk_mb),
            "program": program, "total": len(plan.sources),
            "entry_point": plan.entry_point, "level": limits.level, "wall_time": float(limits.wall_time),
            "cgroup_join": cgroup.join_files if cgroup is not None else [],
            "visible": list(limits.visible_paths), "hide": [__name__.split(".")[0]],
        }))
        request = b"%d\n" % len(request) + request + marshal.dumps({"setup": plan.setup, "tests_fn": plan.tests_fn,
                                                                         "modules": list(plan.modules)})
        try:
            proc = subprocess.Popen(
                [python, "-I", "-c", _BOOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, pass_fds=(write_fd,), cwd=workdir, start_new_session=True,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        watch = _InitWatch()
        try:
            raw = _collect(proc, read_fd, request, nonce, limits, start + backstop, watch)
        finally:
            _kill_group(proc.pid)  # the harness is not reaped yet, so its process group id cannot be reused
            proc.wait()
            watch.wait_gone(timeout=5.0)
            os.close(read_fd)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        layers = {layer for r in raw.records if r[0] == "iso" and len(r) > 1 for layer in r[1]}
        if os.geteuid() == 0 and "pidns" not in layers:
            _kill_user(uid)  # no PID namespace: end what escaped the process group (setsid) by its user id
        if os.geteuid() == 0 and "mountns" not in layers:
            # no mount namespace: the host's /tmp, /var/tmp, /dev/shm were the program's; nothing of it runs now
            remove_user_files(uid)
            if "ipcns" not in layers:
                remove_user_ipc(uid)
        raw.returncode = proc.returncode
        raw.oom_killed = cgroup is not None and cgroup.oom_killed()
        raw.duration = time.monotonic() - start
        return raw
    finally:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)
        _SLOTS.release(slot)


class _InitWatch:
    """Watches the harness's process C (pid 1 of the sandbox's PID namespace) through a pidfd.

    After a kill, the harness H is reaped at once but C's exit completes only when the kernel has killed and
    reaped every process of its namespace; waiting for it means no process of the run outlives the call.
    """

    def __init__(self) -> None:
        self.fd: int | None = None
        self._searched = 0

    def look(self, results: bytearray, nonce: str) -> None:
        """Open a pidfd for C once the harness has reported its pid (the `init` record)."""
        if self.fd is not None or not hasattr(os, "pidfd_open"):
            return
        tag = (nonce + " ('init', ").encode()
        at = results.find(tag, max(0, self._searched - len(tag)))
        self._searched = len(results)
        if at < 0:
            return
        end = results.find(b")", at)
        try:
            self.fd = os.pidfd_open(int(results[at + len(tag):end].decode().strip(" ,")))
        except (ValueError, OSError):
            self._searched = len(results) + len(tag)  # do not retry

    def wait_gone(self, timeout: float) -> None:
        if self.fd is None:
            return
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.fd, selectors.EVENT_READ)
                sel.select(timeout)
        finally:
            os.close(self.fd)
            self.fd = None


def _collect(proc: subprocess.Popen, read_fd: int, request: bytes, nonce: str, limits: SandboxLimits,
             deadline: float, watch: _InitWatch) -> _RawRun:
    out = bytearray()
    results = bytearray()
    timed_out = output_limited = False
    assert proc.stdin is not None and proc.stdout is not None
    stdin_fd, stdout_fd = proc.stdin.fileno(), proc.stdout.fileno()
    os.set_blocking(stdin_fd, False)
    pending = memoryview(request)
    with selectors.DefaultSelector() as sel:
        sel.register(stdin_fd, selectors.EVENT_WRITE)
        sel.register(stdout_fd, selectors.EVENT_READ)
        sel.register(read_fd, selectors.EVENT_READ)
        readers = 2
        while readers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(remaining):
                fd = key.fd
                if fd == stdin_fd:
                    try:
                        pending = pending[os.write(fd, pending[:1 << 16]):]
                    except BlockingIOError:
                        continue
                    except OSError:  # the harness died before reading everything
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        proc.stdin.close()
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    sel.unregister(fd)
                    readers -= 1
                elif fd == stdout_fd:
                    room = limits.max_output_bytes - len(out)
                    out += chunk[:max(room, 0)]
                    if len(chunk) > room:
                        output_limited = True
                else:
                    results += chunk
                    watch.look(results, nonce)
                    if len(results) > _MAX_RECORD_BYTES:
                        output_limited = True
            if output_limited:
                break
    if timed_out or output_limited:
        _kill_group(proc.pid)
    return _RawRun(bytes(out), _parse_records(bytes(results), nonce), timed_out, output_limited, None, 0.0)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "?"


def _interpret(raw: _RawRun, plan: TestPlan, limits: SandboxLimits) -> ExecutionResult:
    total = len(plan.sources)
    outcomes: dict[int, tuple[bool, str]] = {}
    final: tuple[Any, ...] | None = None
    status: tuple[Any, ...] | None = None
    errors: list[str] = []
    isolation: tuple[str, ...] = ()
    done = False
    notes = 0
    for rec in raw.records:
        kind = rec[0]
        if kind == "unavailable":
            raise SandboxUnavailableError(_unavailable_message(limits, str(rec[1]) if len(rec) > 1 else "?"))
        if kind == "t" and len(rec) == 4 and isinstance(rec[1], int) and 0 <= rec[1] < total:
            outcomes.setdefault(rec[1], (bool(rec[2]), str(rec[3])))
        elif kind in ("syntax", "abort") and final is None:
            final = rec
        elif kind == "done":
            done = True
        elif kind == "status" and status is None:
            status = rec
        elif kind == "error":
            errors.append(str(rec[1]) if len(rec) > 1 else "unknown")
        elif kind == "note" and notes < 5:
            notes += 1
            warn_once(f"trl_marl sandbox: {rec[1] if len(rec) > 1 else rec}")
        elif kind == "iso" and len(rec) > 1 and isinstance(rec[1], tuple):
            isolation = tuple(str(x) for x in rec[1])
    per_test = [outcomes.get(i, (False, ""))[0] for i in range(total)]
    passed = sum(per_test)
    failures = [f"{plan.sources[i]} -> {outcomes[i][1]}" for i in range(total) if i in outcomes and not outcomes[i][0]]

    if raw.output_limited:
        reason = "output_limit"
    elif raw.timed_out:
        reason = "timeout"
    elif errors:
        reason = "sandbox_error: " + errors[0]
        warn_once(f"trl_marl sandbox could not run a program: {errors[0]}")
    elif final is not None and final[0] == "syntax":
        line = f" (line {final[1]})" if final[1] else ""
        reason = f"syntax_error: {final[2]}{line}"
    elif final is not None:
        kind, message = final[1], str(final[2])
        if kind == "exit":
            reason = f"exit: the program called sys.exit({message})"
        elif kind == "memory":
            reason = "memory"
        else:
            reason = f"{kind}: {message}"
    elif done:
        if passed == total:
            reason = "ok"
        else:
            first = next(i for i in range(total) if not per_test[i])
            src = plan.sources[first]
            src = src if len(src) <= 200 else src[:197] + "..."
            message = outcomes.get(first, (False, "not run"))[1]
            reason = ("memory: " if message.startswith("MemoryError") else "failed: ") + f"{src} -> {message}"
    elif raw.oom_killed:
        reason = "memory"
    else:
        reason = _abnormal_end(status, raw.returncode, limits)
    return ExecutionResult(
        passed=passed, total=total, reason=reason, stdout=raw.stdout.decode("utf-8", "replace"),
        duration=raw.duration, per_test=per_test, failures=failures[:5], isolation=isolation,
    )


def _abnormal_end(status: tuple[Any, ...] | None, returncode: int | None, limits: SandboxLimits) -> str:
    """Why a program ended without reporting `done`, from its wait status (reported by the harness)."""
    if status is None or status[1] is None:
        if returncode is not None and returncode < 0:
            return f"killed by signal {-returncode} ({_signal_name(-returncode)})"
        return f"sandbox_error: the harness ended without a report (exit code {returncode})"
    wait_status, cpu = int(status[1]), float(status[2] or 0.0)
    if len(status) > 3 and status[3]:
        return "timeout"
    if os.WIFSIGNALED(wait_status):
        number = os.WTERMSIG(wait_status)
        if number == signal.SIGXCPU or (number == signal.SIGKILL and cpu >= math.ceil(limits.cpu_time)):
            return "timeout: cpu time"
        return f"killed by signal {number} ({_signal_name(number)})"
    code = os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else wait_status
    return f"exit: the process exited with code {code} before the tests finished"


def _unavailable_message(limits: SandboxLimits, why: str) -> str:
    return (f"The trl_marl sandbox cannot provide the isolation level {limits.level!r}: {why}. It needs root (e.g. "
            "a container's root user) and Linux namespaces (unshare(2) allowed: in Docker, --cap-add SYS_ADMIN or "
            "--privileged, or a seccomp profile that allows unshare). To accept a weaker sandbox, opt in explicitly "
            f"with SandboxLimits(isolation='process') or {ISOLATION_ENV}=process; see docs/sandbox.md for what "
            "each level guarantees.")


def _backstop(limits: SandboxLimits, workers: int) -> float:
    """The plain wall-clock bound of one run (see `SandboxLimits.backstop_time`)."""
    if limits.backstop_time is not None:
        return float(limits.backstop_time)
    share = max(1.0, workers / (os.cpu_count() or 1))
    return float(limits.wall_time) + float(limits.cpu_time) * share * 2 + 5.0


def run_program(program: str, tests: TestSpec | Mapping[str, Any] | Sequence[str] | None = None,
                limits: SandboxLimits | None = None) -> ExecutionResult:
    """Run one program against its tests in the sandbox (see [`run_programs`])."""
    return run_programs([program], [tests], limits=limits, max_workers=1)[0]


def run_programs(
    programs: Sequence[str],
    tests: Sequence[TestSpec | Mapping[str, Any] | Sequence[str] | None],
    limits: SandboxLimits | None = None,
    max_workers: int | None = None,
) -> list[ExecutionResult]:
    """Run many programs against their tests, each in its own sandbox, several at a time.

    Args:
        programs (`Sequence[str]`): Complete Python programs (see [`build_humaneval_program`] for HumanEval).
        tests (`Sequence`): One test specification per program: a [`TestSpec`], a row dict (`{"test",
            "entry_point"}` or `{"test_list", "test_setup_code"}`), a list of assert strings, or `None` (the
            program only has to run without an error).
        limits (`SandboxLimits`, *optional*): Limits of every run (defaults if `None`).
        max_workers (`int`, *optional*): Programs run at the same time (threads, each waiting on one sandbox
            process); default `os.cpu_count()`.

    Returns:
        `list[ExecutionResult]`: One result per program, in order.

    Raises:
        SandboxUnavailableError: The isolation level of `limits` cannot be had here (nothing ran).
    """
    if len(programs) != len(tests):
        raise ValueError(f"Got {len(programs)} programs but {len(tests)} test specifications.")
    limits = limits if limits is not None else SandboxLimits()
    if limits.level == "namespaces" and os.geteuid() != 0:
        raise SandboxUnavailableError(_unavailable_message(limits, "the trainer does not run as root"))
    plans = [make_plan(TestSpec.from_row(t)) for t in tests]
    workers = max(1, min(max_workers or os.cpu_count() or 1, len(programs)))
    backstop = _backstop(limits, workers)

    def one(index: int) -> ExecutionResult:
        raw = _execute(str(programs[index]), plans[index], limits, backstop)
        return _interpret(raw, plans[index], limits)

    if workers == 1:
        return [one(i) for i in range(len(programs))]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trl_marl_sandbox") as pool:
        return list(pool.map(one, range(len(programs))))


