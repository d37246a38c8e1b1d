"""The sandbox's public types: its limits, a test specification, the result of a run, and its errors.

See [`trl_marl.sandbox.runner`] for how a run works and `docs/sandbox.md` for the threat model.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..utils.code import prompt_preamble
from ..utils.columns import is_missing

SLOTS_PER_PROCESS = 256
"""Sandboxes one process may run at the same time (each gets a user id of its own)."""
PID_SPACE = 1 << 22  # Linux's largest pid_max

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
            `no_new_privs`, seccomp and the Python guards; as root without namespaces it runs as a sandbox user
            that reads the host's world-readable files and has its network, and what that user leaves in the
            shared temporary directories is removed after the run; run as a non-root user, the program shares that
            user's files, network and processes: see `docs/sandbox.md`). `None` reads the environment variable
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
        visible_paths (`tuple[str, ...]`): Absolute host paths (files or directories) the program may read besides
            the interpreter and its libraries, e.g. a task's own data files. With namespaces the program's root is
            built from an allowlist (the interpreter, its import path, the system libraries, these paths) and shows
            nothing else of the host; without namespaces there is no such root (see `docs/sandbox.md`).
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
    visible_paths: tuple[str, ...] = ()

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
        if isinstance(self.visible_paths, str) or not all(
                isinstance(p, str) and os.path.isabs(p) and "\0" not in p for p in self.visible_paths):
            raise ValueError(f"SandboxLimits.visible_paths must be a tuple of absolute paths, got "
                             f"{self.visible_paths!r}.")
        self.visible_paths = tuple(self.visible_paths)
        if not 0 < self.uid_base < 2**31 - PID_SPACE * SLOTS_PER_PROCESS:
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
        task_code (`str`): Definitions of the task itself that the tests may use, run (trusted, in the harness)
            before the tests: for HumanEval, the prompt without the entry point (imports and helpers such as
            `poly`, `encode_cyclic`), so that a test's `poly(...)` is the task's `poly` even when the program
            redefines it. Statements that fail are skipped.
    """

    __test__ = False  # not a pytest test class

    asserts: list[str] = field(default_factory=list)
    setup_code: str = ""
    check_code: str | None = None
    entry_point: str | None = None
    split: bool = True
    task_code: str = ""

    def __post_init__(self) -> None:
        if self.check_code is not None:
            if not self.entry_point or not str(self.entry_point).isidentifier():
                raise ValueError(f"A HumanEval test needs an identifier as entry_point, got {self.entry_point!r}.")
            if self.asserts:
                raise ValueError("A TestSpec has either check_code (HumanEval) or asserts (MBPP), not both.")

    @classmethod
    def humaneval(cls, test: str, entry_point: str, split: bool = True, prompt: str | None = None) -> TestSpec:
        """Tests of a HumanEval row: `test` defines `check(candidate)`, called with `entry_point`; with the row's
        `prompt`, the prompt's own definitions (all but `entry_point`) are the ones the tests see (`task_code`)."""
        task_code = prompt_preamble(str(prompt), str(entry_point)) if prompt and not is_missing(prompt) else ""
        return cls(check_code=str(test), entry_point=str(entry_point), split=split, task_code=task_code)

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
                return cls.humaneval(row["test"], row["entry_point"], split=split, prompt=row.get("prompt"))
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


