"""A memory + pids cgroup per sandbox run (v1 or v2, where `/sys/fs/cgroup` is writable)."""

from __future__ import annotations

import os
import time

from .warn import warn_once


class Cgroup:
    """A memory + pids cgroup for one run (as root, where cgroupfs is writable): bounds the memory of all the
    run's processes together (`RLIMIT_AS` bounds each process) and their number (also for root, to whom
    `RLIMIT_NPROC` does not apply). Best effort: without cgroupfs the other limits still hold."""

    ROOT = "/sys/fs/cgroup"
    unavailable = False

    def __init__(self, name: str, memory_bytes: int, pids: int) -> None:
        self.dirs: list[str] = []
        self.events: str | None = None
        if os.geteuid() != 0 or Cgroup.unavailable:
            return
        try:
            if os.path.exists(os.path.join(self.ROOT, "cgroup.controllers")):  # unified hierarchy (v2)
                self._create_v2(name, memory_bytes, pids)
            else:
                self._create_v1(name, memory_bytes, pids)
        except OSError as exc:
            Cgroup.unavailable = True  # do not retry on every run
            warn_once(f"trl_marl sandbox: no cgroup limits ({exc}); the per-process limits still apply")
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
                warn_once(f"trl_marl sandbox: could not remove the cgroup {path}")
        self.dirs = []
