"""Run model-generated code against unit tests in a sandbox, and score it as a TRL reward function.

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
      namespace (when the program's process ends, the kernel kills everything it started), a mount namespace in
      which `/` is read-only, every mount is `nosuid`, and `/tmp`, `/var/tmp` and `/dev/shm` are one private
      size-limited tmpfs (`max_disk_mb`), the program's working directory, gone when the run ends;
    - a memory + pids cgroup per run (where `/sys/fs/cgroup` is writable) bounds the memory and the number of all
      the run's processes together (`RLIMIT_AS` only bounds each process);
    - the program runs as an unprivileged user id of its own (`uid_base` + a slot number unique among the sandboxes
      running at the same time), with `no_new_privs` (set-uid binaries gain nothing) and a seccomp filter that
      refuses nested namespaces (user namespaces above all), mounts, `ptrace`, keyrings, BPF, perf, `userfaultfd`
      and `io_uring`. Interpreter directories that this user could not traverse (e.g. a Python under `/root`) are
      bind-mounted read-only into the namespace; everything else in them stays hidden.

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
      runs in H with `candidate` the program's `entry_point`. For partial credit the top-level statements of
      `check` that contain an `assert` are run one by one, each catching its own exception (statements without an
      assert, or with only `assert <constant>`, run in order as set-up); when `check` has no such statement,
      `check(entry_point)` is one test.
    - MBPP rows (`test_list`, a list of assert statements, and optional `test_setup_code`): each assert is a test.
      The tests see the program's top-level names as they would in one module (functions and classes as stubs,
      plain constants as values, common standard modules such as `math` imported by H), except that the program
      cannot shadow built-ins (only the entry point may carry a built-in's name). A test that mutates an argument
      in place and checks it afterwards sees no change (the program worked on a copy).

Example:

```python
from trl_marl.rewards.execution import SandboxLimits, TestSpec, run_programs

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
import re
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..sandbox import HARNESS_PATH
from ..utils.code import build_humaneval_program, extract_code
from ..utils.columns import MULTI_AGENT_KWARGS, AgentSelector, column, is_missing, select_texts
from ..utils.text import completion_text

logger = logging.getLogger(__name__)

__all__ = [
    "ISOLATION_LEVELS",
    "ExecutionResult",
    "SandboxUnavailableError",
    "SandboxLimits",
    "TestSpec",
    "UnitTestReward",
    "build_humaneval_program",
    "extract_code",
    "format_feedback",
    "run_program",
    "run_programs",
]

# Names the generated test code uses (chosen so that they do not collide with a program's names).
_TESTS_FN = "_trl_marl_tests_"
_RECORD = "_trl_marl_record_"
_EQ = "_trl_marl_eq_"
_EXC = "_trl_marl_exc_"

_MAX_RECORD_BYTES = 8 * 1024 * 1024  # the harness reports a few hundred bytes per test
_SLOTS_PER_PROCESS = 256
_PID_SPACE = 1 << 22  # Linux's largest pid_max


ISOLATION_LEVELS = ("namespaces", "process")
ISOLATION_ENV = "TRL_MARL_SANDBOX_ISOLATION"


# ---------------------------------------------------------------------------------------------------- public types
class SandboxUnavailableError(RuntimeError):
    """The requested isolation level cannot be had here (e.g. `"namespaces"` without root): nothing was run."""


@dataclass
class SandboxLimits:
    """Limits of one sandboxed program run.

    Args:
        wall_time (`float`): Seconds the program may take, counted fairly: wall-clock time minus the time it waited
            for a CPU (`/proc/<pid>/schedstat`), so a program is not timed out because others load the machine;
            then it is killed (`reason="timeout"`). A sleeping or blocked program uses this time up too.
        cpu_time (`float`): CPU seconds of the program (`RLIMIT_CPU`, rounded up; `reason="timeout: cpu time"`).
        backstop_time (`float`, *optional*): Plain wall-clock seconds after which the caller kills the whole run
            whatever it does (the trusted test code included). Default: `wall_time + cpu_time * max(1, runs at
            the same time / CPUs) * 2 + 5`, generous on purpose: the fair limits above decide, this only bounds.
        memory_mb (`int`): Address-space limit in MiB (`RLIMIT_AS`); allocations beyond it raise `MemoryError`
            (`reason="memory"`).
        max_output_bytes (`int`): Bytes of stdout + stderr kept; a program printing more is killed
            (`reason="output_limit"`). The caller never holds more than this.
        max_processes (`int`): Processes and threads of the sandbox user (`RLIMIT_NPROC`), the program included.
            Enforced only when the sandbox runs under a user id of its own (as root) or as a non-root user, since
            the kernel does not apply `RLIMIT_NPROC` to root; as root the PID namespace also ends every process
            when the program ends.
        max_file_mb (`int`): Largest file the program may write (`RLIMIT_FSIZE`).
        max_disk_mb (`int`): Size of the private tmpfs that is the working directory (namespaces only).
        max_open_files (`int`): File descriptors (`RLIMIT_NOFILE`).
        isolation (`str`, *optional*): The isolation level (see `docs/sandbox.md`): `"namespaces"` (the default;
            root, Linux namespaces, a sandbox user id; a clear `SandboxUnavailableError` where that is not
            possible) or `"process"` (an explicit opt-in to a weaker level: a separate process with resource limits,
            `no_new_privs`, seccomp and the Python guards, but, run as a non-root user, the program shares that
            user's files, network and processes). `None` reads the environment variable
            `TRL_MARL_SANDBOX_ISOLATION`, else `"namespaces"`. Whatever the level, the verdict is decided outside
            the program's process.
        namespaces (`bool`): Use Linux namespaces (network, PID, mount, IPC, UTS). `False` is an explicit opt-in to
            the `"process"` level. As root the program always runs under a sandbox user id.
        cgroups (`bool`): As root, put each run in a memory + pids cgroup of its own (cgroup v1 or v2, where
            `/sys/fs/cgroup` is writable): all its processes together get `memory_mb + max_disk_mb` (+64 MiB for
            the harness) and `max_processes + 2` processes (`reason="memory"` when the kernel's OOM killer ends
            one).
        python_guards (`bool`): Install the Python layer (audit hook and stubs). Only tests of the OS layer turn
            it off.
        python_executable (`str`, *optional*): The interpreter that runs programs (default: `sys.executable`).
        uid_base (`int`): First user id of the sandbox users (as root). A run uses
            `uid_base + 256 * (caller pid) + slot`, so pick a range no real user or container uses.
    """

    wall_time: float = 5.0
    cpu_time: float = 5.0
    backstop_time: float | None = None
    memory_mb: int = 1024
    max_output_bytes: int = 64 * 1024
    max_processes: int = 16
    max_file_mb: int = 16
    max_disk_mb: int = 64
    max_open_files: int = 64
    isolation: str | None = None
    namespaces: bool = True
    cgroups: bool = True
    python_guards: bool = True
    python_executable: str | None = None
    uid_base: int = 1_000_000_000

    @property
    def level(self) -> str:
        """The isolation level in force: `isolation`, else `$TRL_MARL_SANDBOX_ISOLATION`, else `"namespaces"`;
        `namespaces=False` means `"process"`."""
        if not self.namespaces:
            return "process"
        level = self.isolation or os.environ.get(ISOLATION_ENV) or "namespaces"
        if level not in ISOLATION_LEVELS:
            raise ValueError(f"{ISOLATION_ENV}={level!r} is not an isolation level; use one of {ISOLATION_LEVELS}.")
        return level

    def __post_init__(self) -> None:
        for name in ("wall_time", "cpu_time", "memory_mb", "max_output_bytes", "max_processes", "max_file_mb",
                     "max_disk_mb", "max_open_files"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {value!r}.")
        if self.backstop_time is not None and not self.backstop_time > 0:
            raise ValueError(f"SandboxLimits.backstop_time must be positive, got {self.backstop_time!r}.")
        if self.isolation not in (None, *ISOLATION_LEVELS):
            raise ValueError(f"SandboxLimits.isolation must be one of {ISOLATION_LEVELS} or None, got "
                             f"{self.isolation!r}.")
        if self.max_processes < 1:
            raise ValueError("SandboxLimits.max_processes must be at least 1 (the program itself).")
        if not 0 < self.uid_base < 2**31 - _PID_SPACE * _SLOTS_PER_PROCESS:
            raise ValueError(f"SandboxLimits.uid_base={self.uid_base} leaves no room for the sandbox user ids.")


@dataclass
class ExecutionResult:
    """Outcome of one program against its tests.

    Args:
        passed (`int`): Tests that passed. Each test is reported as soon as it ends, so when a run ends early
            (timeout, exit, ...) the tests that passed before still count; ending early never adds any.
        total (`int`): Tests planned.
        reason (`str`): `"ok"` when every test passed; else why not: `"failed: <test> -> <error>"` (the first
            failing test), `"syntax_error: <message> (line N)"`, `"error: <exception> (program line N)"` (the
            program raised before the tests), `"test_error: ..."` (the test code itself failed), `"timeout"`,
            `"timeout: cpu time"`, `"memory"` / `"memory: <test>"`, `"exit: ..."`, `"output_limit"`,
            `"killed by signal N (NAME)"`, or `"sandbox_error: ..."` (the sandbox could not be set up).
        stdout (`str`): The program's stdout and stderr, truncated to `max_output_bytes`.
        duration (`float`): Wall-clock seconds of the run (interpreter start-up included).
        per_test (`list[bool]`): Whether each test passed (tests that never ran count as failed).
        failures (`list[str]`): Up to 5 failing tests as `"<test source> -> <error>"`.
        isolation (`tuple[str, ...]`): The protection layers that were active (`"rlimits"`, `"uid"`, `"netns"`,
            `"pidns"`, `"mountns"`, `"guards"`, ...).
    """

    passed: int
    total: int
    reason: str
    stdout: str = ""
    duration: float = 0.0
    per_test: list[bool] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    isolation: tuple[str, ...] = ()

    @property
    def fraction(self) -> float:
        """Fraction of tests passed (0 when there are no tests)."""
        return self.passed / self.total if self.total > 0 else 0.0

    @property
    def all_passed(self) -> bool:
        """Whether the run finished normally and every test passed."""
        return self.reason == "ok" and self.total > 0 and self.passed == self.total


@dataclass
class TestSpec:
    """The unit tests of one program.

    Build one with [`TestSpec.humaneval`], [`TestSpec.mbpp`] or [`TestSpec.from_row`] (which also accepts the dicts
    `{"test": ..., "entry_point": ...}` and `{"test_list": [...], "test_setup_code": ...}`). With neither checks
    nor asserts the single test is "the program runs without an error".

    Args:
        asserts (`list[str]`): MBPP-style tests, one statement (or a few) each, run after `setup_code`.
        setup_code (`str`): Code run once after the program and before the tests (MBPP's `test_setup_code`).
        check_code (`str`, *optional*): HumanEval-style test code defining `check(candidate)`.
        entry_point (`str`, *optional*): The function `check` is called with (required with `check_code`).
        split (`bool`): Split `check` into one test per top-level statement containing an assert (partial
            credit); `False` runs `check(entry_point)` as one test.
    """

    __test__ = False  # not a pytest test class

    asserts: list[str] = field(default_factory=list)
    setup_code: str = ""
    check_code: str | None = None
    entry_point: str | None = None
    split: bool = True

    def __post_init__(self) -> None:
        if self.check_code is not None:
            if not self.entry_point or not str(self.entry_point).isidentifier():
                raise ValueError(f"A HumanEval test needs an identifier as entry_point, got {self.entry_point!r}.")
            if self.asserts:
                raise ValueError("A TestSpec has either check_code (HumanEval) or asserts (MBPP), not both.")

    @classmethod
    def humaneval(cls, test: str, entry_point: str, split: bool = True) -> TestSpec:
        """Tests of a HumanEval row: `test` defines `check(candidate)`, called with `entry_point`."""
        return cls(check_code=str(test), entry_point=str(entry_point), split=split)

    @classmethod
    def mbpp(cls, test_list: Sequence[str], setup_code: str | None = "") -> TestSpec:
        """Tests of an MBPP row: every string of `test_list` is one test, run after `setup_code`."""
        if isinstance(test_list, str):
            test_list = [test_list]
        return cls(asserts=[str(t) for t in test_list], setup_code=str(setup_code or ""))

    @classmethod
    def from_row(cls, row: TestSpec | Mapping[str, Any] | Sequence[str] | None, split: bool = True) -> TestSpec:
        """A spec from a `TestSpec`, a row dict (HumanEval's `test` + `entry_point` or MBPP's `test_list`
        + optional `test_setup_code`), a list of assert strings, or `None` (run the program only).

        Raises:
            KeyError: A dict with neither format (the message names the missing keys).
        """
        if row is None:
            return cls()
        if isinstance(row, TestSpec):
            return row
        if isinstance(row, Mapping):
            if not is_missing(row.get("test")) and "entry_point" in row:
                return cls.humaneval(row["test"], row["entry_point"], split=split)
            if not is_missing(row.get("test_list")):
                return cls.mbpp(row["test_list"], row.get("test_setup_code") or row.get("setup_code") or "")
            if not is_missing(row.get("test")):
                raise KeyError("A HumanEval test specification needs the key 'entry_point' besides 'test'.")
            raise KeyError(
                f"A test specification needs the keys 'test' and 'entry_point' (HumanEval) or 'test_list' (MBPP); "
                f"got {sorted(row)}."
            )
        if isinstance(row, str):
            raise TypeError("A bare string is ambiguous as a test specification: use TestSpec.humaneval/mbpp.")
        return cls.mbpp(list(row))


# ---------------------------------------------------------------------------------------------------- test plans
@dataclass(frozen=True)
class _Plan:
    """What the harness runs after the program: `setup` at module level, then the function `_TESTS_FN` defined by
    `tests_fn`, which reports each of the `len(sources)` tests through its first argument."""

    setup: str
    tests_fn: str
    sources: tuple[str, ...]
    entry_point: str | None = None


class _EqAsserts(ast.NodeTransformer):
    """Rewrites `assert a == b` (no message) as `_EQ(a, b)`, which raises `AssertionError("got .., expected ..")`:
    same evaluation order and truth test, and an informative message for feedback."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        if (node.msg is None and isinstance(test, ast.Compare) and len(test.ops) == 1
                and isinstance(test.ops[0], ast.Eq)):
            call = ast.Call(func=ast.Name(_EQ, ast.Load()), args=[test.left, test.comparators[0]], keywords=[])
            return ast.copy_location(ast.Expr(call), node)
        return node


def _has_assert(node: ast.AST) -> bool:
    """Whether `node` contains an assert that tests something (`assert True, "..."` does not count)."""
    return any(isinstance(n, ast.Assert) and not isinstance(n.test, ast.Constant) for n in ast.walk(node))


def _record_call(index: int, value: ast.expr) -> ast.stmt:
    return ast.Expr(ast.Call(func=ast.Name(_RECORD, ast.Load()), args=[ast.Constant(index), value], keywords=[]))


def _guarded(index: int, body: list[ast.stmt]) -> ast.Try:
    """`try: <body> except Exception as e: record(index, e) else: record(index, None)`."""
    handler = ast.ExceptHandler(type=ast.Name("Exception", ast.Load()), name=_EXC,
                                body=[_record_call(index, ast.Name(_EXC, ast.Load()))])
    return ast.Try(body=body or [ast.Pass()], handlers=[handler], orelse=[_record_call(index, ast.Constant(None))],
                   finalbody=[])


def _tests_function(body: list[ast.stmt]) -> str:
    module = ast.parse(f"def {_TESTS_FN}({_RECORD}, {_EQ}):\n    pass\n")
    module.body[0].body = body  # type: ignore[attr-defined]
    return ast.unparse(ast.fix_missing_locations(module))


def _segment(source: str, node: ast.AST) -> str:
    text = ast.get_source_segment(source, node) or ast.unparse(node)
    return " ".join(text.split()) if "\n" not in text.strip() else text.strip()


def _humaneval_plan(spec: TestSpec) -> _Plan:
    code, entry = str(spec.check_code), str(spec.entry_point)
    check: ast.FunctionDef | None = None
    try:
        tree = ast.parse(code)
    except SyntaxError:
        tree = None
    if tree is not None:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "check":
                check = node
    args = check.args if check is not None else None
    simple = (args is not None and len(args.args) == 1 and not args.posonlyargs and not args.kwonlyargs
              and args.vararg is None and args.kwarg is None)
    if spec.split and check is not None and simple and any(_has_assert(s) for s in check.body):
        param = check.args.args[0].arg
        body: list[ast.stmt] = [ast.Assign(targets=[ast.Name(param, ast.Store())], value=ast.Name(entry, ast.Load()))]
        sources: list[str] = []
        for stmt in check.body:
            is_test, text = _has_assert(stmt), _segment(code, stmt)
            new = _EqAsserts().visit(stmt)
            if is_test:
                body.append(_guarded(len(sources), [new]))
                sources.append(text)
            else:
                body.append(new)
        return _Plan(setup=code, tests_fn=_tests_function(body), sources=tuple(sources), entry_point=entry)
    call = ast.Expr(ast.Call(func=ast.Name("check", ast.Load()), args=[ast.Name(entry, ast.Load())], keywords=[]))
    return _Plan(setup=code, tests_fn=_tests_function([_guarded(0, [call])]), sources=(f"check({entry})",),
                 entry_point=entry)


def _mbpp_plan(spec: TestSpec) -> _Plan:
    body: list[ast.stmt] = []
    sources: list[str] = []
    for index, test in enumerate(spec.asserts):
        try:
            stmts = [_EqAsserts().visit(s) for s in ast.parse(test).body]
        except SyntaxError as exc:
            message = ast.Constant(f"the test does not parse: {exc.msg}")
            stmts = [ast.Raise(exc=ast.Call(func=ast.Name("SyntaxError", ast.Load()), args=[message], keywords=[]))]
        body.append(_guarded(index, stmts))
        sources.append(" ".join(test.split()) if "\n" not in test.strip() else test.strip())
    if not spec.asserts:
        body.append(_guarded(0, [ast.Pass()]))
        sources.append("(the program runs without an error)")
    return _Plan(setup=spec.setup_code, tests_fn=_tests_function(body), sources=tuple(sources))


def _plan(spec: TestSpec) -> _Plan:
    return _humaneval_plan(spec) if spec.check_code is not None else _mbpp_plan(spec)


# ---------------------------------------------------------------------------------------------------- the harness
# The harness is the module `trl_marl.sandbox.harness`, run in `python -I -c _BOOT`, which reads (harness, request)
# from stdin (length-prefixed marshal: trusted data from this process; the tests follow in the pipe, read by the
# harness only once the program's process exists without them) and executes the harness as `__trl_marl_harness__`.
# It is sent as a code object compiled once when the sandbox interpreter is this one (saves compiling it every run),
# else as source. The harness imports nothing from trl_marl, so any interpreter can run it.
_BOOT = """
import marshal, os
def _boot():
    head = b""
    while not head.endswith(b"\\n"):
        byte = os.read(0, 1)
        if not byte or len(head) > 20:
            raise SystemExit(2)
        head += byte
    size, parts = int(head), []
    while size > 0:
        chunk = os.read(0, min(size, 1 << 16))
        if not chunk:
            raise SystemExit(2)
        parts.append(chunk)
        size -= len(chunk)
    code, request = marshal.loads(b"".join(parts))
    del parts
    exec(code, {"__name__": "__trl_marl_harness__", "__builtins__": __builtins__, "REQUEST": request})
_boot()
"""
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


_SLOTS = _UidSlots(_SLOTS_PER_PROCESS)
_WARNED: set[str] = set()
_MAX_WARNINGS = 32  # distinct sandbox warnings logged per process; then one last line says the rest are dropped
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _clean(text: str, limit: int = 300) -> str:
    """`text` with control characters (terminal escapes, newlines) escaped and cut to `limit` characters."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _warn_once(message: str) -> None:
    """Log a sandbox warning once per process: sanitized, at most 300 characters, at most `_MAX_WARNINGS` kinds."""
    message = _clean(message)
    if message in _WARNED or len(_WARNED) > _MAX_WARNINGS:
        return
    _WARNED.add(message)
    if len(_WARNED) > _MAX_WARNINGS:
        logger.warning("trl_marl sandbox: further distinct warnings are not logged")
    else:
        logger.warning(message)


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


def _execute(program: str, plan: _Plan, limits: SandboxLimits, backstop: float) -> _RawRun:
    """Start the harness, feed it the request, collect its output and reports within the limits."""
    python = limits.python_executable or sys.executable
    if not python:
        raise RuntimeError("No Python interpreter to run the sandbox (sys.executable is empty).")
    nonce = secrets.token_hex(16)
    slot = _SLOTS.acquire()
    uid = limits.uid_base + (os.getpid() % _PID_SPACE) * _SLOTS_PER_PROCESS + slot
    workdir = tempfile.mkdtemp(prefix="trl_marl_sandbox_")
    start = time.monotonic()
    cgroup: _Cgroup | None = None
    try:
        if limits.cgroups:
            slack = 64 * 1024 * 1024  # the harness's own processes and the namespaces' kernel memory
            cgroup = _Cgroup(f"uid{uid}", (limits.memory_mb + limits.max_disk_mb) * 1024 * 1024 + slack,
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
        }))
        request = b"%d\n" % len(request) + request + marshal.dumps({"setup": plan.setup, "tests_fn": plan.tests_fn})
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
        if os.geteuid() == 0 and not any(r[0] == "iso" and "pidns" in r[1] for r in raw.records if len(r) > 1):
            _kill_user(uid)  # no PID namespace: end what escaped the process group (setsid) by its user id
        raw.returncode = proc.returncode
        raw.oom_killed = cgroup is not None and cgroup.oom_killed()
        raw.duration = time.monotonic() - start
        return raw
    finally:
        if cgroup is not None:
            cgroup.remove()
        shutil.rmtree(workdir, ignore_errors=True)
        _SLOTS.release(slot)


class _Cgroup:
    """A memory + pids cgroup for one run (as root, where cgroupfs is writable): bounds the memory of all the
    run's processes together (`RLIMIT_AS` bounds each process) and their number (also for root, to whom
    `RLIMIT_NPROC` does not apply). Best effort: without cgroupfs the other limits still hold."""

    ROOT = "/sys/fs/cgroup"
    unavailable = False

    def __init__(self, name: str, memory_bytes: int, pids: int) -> None:
        self.dirs: list[str] = []
        self.events: str | None = None
        if os.geteuid() != 0 or _Cgroup.unavailable:
            return
        try:
            if os.path.exists(os.path.join(self.ROOT, "cgroup.controllers")):  # unified hierarchy (v2)
                self._create_v2(name, memory_bytes, pids)
            else:
                self._create_v1(name, memory_bytes, pids)
        except OSError as exc:
            _Cgroup.unavailable = True  # do not retry on every run
            _warn_once(f"trl_marl sandbox: no cgroup limits ({exc}); the per-process limits still apply")
            self.remove()

    def _make(self, path: str, limits: dict[str, int], optional: dict[str, int] | None = None) -> None:
        os.makedirs(path, exist_ok=True)
        self.dirs.append(path)
        for file, value in {**limits, **(optional or {})}.items():
            target = os.path.join(path, file)
            if file in limits or os.path.exists(target):
                with open(target, "w") as f:
                    f.write(str(value))

    def _create_v1(self, name: str, memory_bytes: int, pids: int) -> None:
        memory, pid_dir = os.path.join(self.ROOT, "memory"), os.path.join(self.ROOT, "pids")
        if not (os.access(memory, os.W_OK) and os.access(pid_dir, os.W_OK)):
            return
        self._make(os.path.join(memory, "trl_marl", name), {"memory.limit_in_bytes": memory_bytes})
        self._make(os.path.join(pid_dir, "trl_marl", name), {"pids.max": pids})
        self.events = os.path.join(self.dirs[0], "memory.oom_control")

    def _create_v2(self, name: str, memory_bytes: int, pids: int) -> None:
        parent = os.path.join(self.ROOT, "trl_marl")
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write("+memory +pids")
        self._make(os.path.join(parent, name), {"memory.max": memory_bytes, "pids.max": pids}, {"memory.swap.max": 0})
        self.events = os.path.join(self.dirs[0], "memory.events")

    @property
    def join_files(self) -> list[str]:
        """The files the harness writes "0" to in order to join the cgroup. In v1 that is `tasks` (moving the
        single-threaded harness thread by thread skips the global threadgroup lock, whose RCU wait made
        `cgroup.procs` cost up to ~15 ms on a busy machine)."""
        name = "cgroup.procs" if self.events and self.events.endswith("memory.events") else "tasks"
        return [os.path.join(d, name) for d in self.dirs]

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of the run for exceeding the memory limit."""
        if self.events is None:
            return False
        try:
            with open(self.events) as f:
                return any(line.startswith("oom_kill ") and int(line.split()[1]) > 0 for line in f)
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        for path in self.dirs:
            for _ in range(200):  # the processes are gone, but the kernel may take a moment to let go
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.005)
            else:
                _warn_once(f"trl_marl sandbox: could not remove the cgroup {path}")
        self.dirs = []


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


def _interpret(raw: _RawRun, plan: _Plan, limits: SandboxLimits) -> ExecutionResult:
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
            _warn_once(f"trl_marl sandbox: {rec[1] if len(rec) > 1 else rec}")
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
        _warn_once(f"trl_marl sandbox could not run a program: {errors[0]}")
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
    plans = [_plan(TestSpec.from_row(t)) for t in tests]
    workers = max(1, min(max_workers or os.cpu_count() or 1, len(programs)))
    backstop = _backstop(limits, workers)

    def one(index: int) -> ExecutionResult:
        raw = _execute(str(programs[index]), plans[index], limits, backstop)
        return _interpret(raw, plans[index], limits)

    if workers == 1:
        return [one(i) for i in range(len(programs))]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trl_marl_sandbox") as pool:
        return list(pool.map(one, range(len(programs))))


# ---------------------------------------------------------------------------------------------------- feedback
def format_feedback(result: ExecutionResult, max_chars: int = 400) -> str:
    """A short summary of a result for a prompt: all passed, the syntax error, or the first failing test.

    Args:
        result (`ExecutionResult`): The result.
        max_chars (`int`): Longest summary returned.

    Returns:
        `str`: One or two lines.
    """
    reason = result.reason
    if result.all_passed:
        text = f"All {result.total} tests passed."
    elif reason.startswith("syntax_error: "):
        text = f"SyntaxError: {reason[len('syntax_error: '):]}. No test ran."
    else:
        head = f"Tests passed: {result.passed}/{result.total}."
        if reason.startswith(("failed: ", "memory: ")):
            detail = "First failure: " + reason.split(": ", 1)[1]
        elif reason == "timeout" or reason.startswith("timeout:"):
            detail = "The program ran out of time (infinite loop or too slow)."
        elif reason == "memory":
            detail = "The program ran out of memory."
        elif reason == "output_limit":
            detail = "The program printed too much output."
        elif reason.startswith("error: "):
            detail = "The program raised " + reason[len("error: "):] + " before the tests ran."
        elif reason.startswith("test_error: "):
            detail = "The tests could not run: " + reason[len("test_error: "):]
        elif reason.startswith("exit: "):
            detail = "The program exited before the tests finished (" + reason[len("exit: "):] + ")."
        else:
            detail = reason
        text = f"{head} {detail}"
    return text if len(text) <= max_chars else text[:max_chars - 3] + "..."


# ---------------------------------------------------------------------------------------------------- reward
class UnitTestReward:
    """Fraction of a row's unit tests that the completion's program passes, run in the sandbox.

    A TRL reward function (`reward(prompts, completions, **columns) -> list[float]`, `name = "unit_tests"`).
    Each completion (a string or chat messages, Markdown fences stripped) becomes a program checked against its
    row's tests:

    - HumanEval rows (columns `test` and `entry_point`): [`build_humaneval_program`] with the row's HumanEval
      prompt (the `prompt_column` if the call has it, else the string prompt of the call), then the row's `test`
      with `check` split into one test per assert statement;
    - MBPP rows (column `test_list`, optional `test_setup_code`): the code as is, one test per assert.

    With `code_column` (a column holding complete programs, e.g. the combined helper + main program of the
    cooperative coding environment) or `program_builder` (`program_builder(code, row) -> program`, with `code`
    the completion's text without fences and `row` the row's columns plus `"prompt"`), the program comes from
    there instead. Rows whose test cells are missing (`None`) score `None`. The results of the last call are kept
    in `last_results` (one [`ExecutionResult`] per completion, `None` where not run) for feedback.

    Args:
        limits (`SandboxLimits`, *optional*): Sandbox limits (defaults if `None`).
        partial_credit (`bool`): Reward the fraction of tests passed; `False` gives 1 only when all pass, else 0.
        max_workers (`int`, *optional*): Programs run at the same time (default `os.cpu_count()`).
        test_column, entry_point_column, prompt_column (`str`): HumanEval's columns.
        test_list_column, setup_column (`str`): MBPP's columns.
        code_column (`str`, *optional*): A column of complete programs to run instead of the completions.
        program_builder (`Callable[[str, dict], str]`, *optional*): Builds the program from the completion's code
            and the row.
        agent_index (`int`, `"concat"` or `None`): Which completion is scored (see `AgentSelector`).

    Example:

    ```python
    reward = UnitTestReward(limits=SandboxLimits(wall_time=2))
    reward(prompts=["def add(a, b):\\n"], completions=["    return a + b\\n"],
           test=["def check(candidate):\\n    assert candidate(1, 2) == 3\\n"], entry_point=["add"])  # [1.0]
    ```
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        partial_credit: bool = True,
        max_workers: int | None = None,
        test_column: str = "test",
        entry_point_column: str = "entry_point",
        prompt_column: str = "prompt",
        test_list_column: str = "test_list",
        setup_column: str = "test_setup_code",
        code_column: str | None = None,
        program_builder: Callable[[str, dict[str, Any]], str] | None = None,
        agent_index: AgentSelector = None,
    ) -> None:
        self.name = "unit_tests"
        self.__name__ = "unit_tests"
        self.limits = limits if limits is not None else SandboxLimits()
        self.partial_credit = partial_credit
        self.max_workers = max_workers
        self.test_column = test_column
        self.entry_point_column = entry_point_column
        self.prompt_column = prompt_column
        self.test_list_column = test_list_column
        self.setup_column = setup_column
        self.code_column = code_column
        self.program_builder = program_builder
        self.agent_index = agent_index
        self.last_results: list[ExecutionResult | None] = []

    def _check_columns(self, kwargs: Mapping[str, Any]) -> None:
        humaneval = self.test_column in kwargs and self.entry_point_column in kwargs
        if humaneval or self.test_list_column in kwargs:
            return
        if self.test_column in kwargs:
            missing = f"{self.entry_point_column!r} (HumanEval rows need it besides {self.test_column!r})"
        else:
            missing = (f"{self.test_column!r} and {self.entry_point_column!r} (HumanEval) or "
                       f"{self.test_list_column!r} (MBPP)")
        available = sorted(k for k in kwargs if k not in MULTI_AGENT_KWARGS)
        raise KeyError(f"{type(self).__name__} needs the dataset column {missing}; the reward function received "
                       f"the columns {available}. Pass the column names to the reward if they differ "
                       "(e.g. `test_column=...`).")

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        """Score each completion by the unit tests of its row.

        Args:
            prompts (`Sequence`): The prompts (HumanEval's prompt when it is a string and no `prompt_column`).
            completions (`Sequence`): The completions (strings or chat messages).
            **kwargs: The dataset columns and trl-marl's multi-agent arguments.

        Returns:
            `list[float | None]`: Fraction of tests passed (or 1/0 without partial credit); `None` for rows
            without tests.

        Raises:
            KeyError: The call has neither HumanEval's nor MBPP's test columns (the message names them).
        """
        owner = type(self).__name__
        texts = select_texts(completions, kwargs.get("agent_completions"), self.agent_index, "\n\n", owner)
        n = len(texts)
        self._check_columns(kwargs)

        def optional(name: str | None) -> list[Any]:
            return column(kwargs, name, owner, n) if name and name in kwargs else [None] * n

        he_tests, entries = optional(self.test_column), optional(self.entry_point_column)
        mbpp_tests, setups = optional(self.test_list_column), optional(self.setup_column)
        codes = column(kwargs, self.code_column, owner, n) if self.code_column else None
        if self.prompt_column in kwargs:
            row_prompts = column(kwargs, self.prompt_column, owner, n)
        else:
            row_prompts = [p if isinstance(p, str) else "" for p in (list(prompts) + [""] * n)[:n]]

        programs: list[str] = []
        specs: list[TestSpec] = []
        todo: list[int] = []
        for i, text in enumerate(texts):
            prompt = "" if is_missing(row_prompts[i]) else str(row_prompts[i])
            entry: str | None = None
            if not is_missing(he_tests[i]) and not is_missing(entries[i]):
                entry = str(entries[i])
                spec = TestSpec.humaneval(he_tests[i], entry)
            elif not is_missing(mbpp_tests[i]):
                spec = TestSpec.mbpp(mbpp_tests[i], None if is_missing(setups[i]) else setups[i])
            else:
                continue
            if codes is not None:
                program = completion_text(codes[i])
            elif self.program_builder is not None:
                row = {key: _cell(value, i) for key, value in kwargs.items() if key not in MULTI_AGENT_KWARGS}
                row.setdefault("prompt", prompt)
                program = self.program_builder(extract_code(text, entry), row)
            elif entry is not None:
                program = build_humaneval_program(prompt, text, entry)
            else:
                program = extract_code(text)
            programs.append(program)
            specs.append(spec)
            todo.append(i)
        results = run_programs(programs, specs, self.limits, self.max_workers) if programs else []
        self.last_results = [None] * n
        rewards: list[float | None] = [None] * n
        for i, result in zip(todo, results):
            self.last_results[i] = result
            rewards[i] = result.fraction if self.partial_credit else float(result.all_passed)
        return rewards


def _cell(values: Any, index: int) -> Any:
    try:
        return values[index]
    except (TypeError, IndexError, KeyError):
        return values
