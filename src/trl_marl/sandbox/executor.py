"""A cache of sandbox results per (program, tests), so that a reward and the feedback after it share one run."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .runner import run_programs

__all__ = ["ExecutionResultLike", "ProgramExecutor", "Runner", "shared_executor"]


class ExecutionResultLike(Protocol):
    """What the environment reads from a sandbox result ([`trl_marl.sandbox.ExecutionResult`])."""

    passed: int
    total: int
    reason: str

    @property
    def fraction(self) -> float: ...


Runner = Callable[[list[str], list[dict[str, Any]]], Sequence[ExecutionResultLike]]
"""Runs programs against tests: `runner(programs, tests) -> results`, one result per program, where `tests[i]` is
the test specification of `programs[i]` (a dict such as `{"test": ..., "entry_point": ...}`)."""


def _default_runner(limits: Any = None, max_workers: int | None = None) -> Runner:
    """The sandbox runner `trl_marl.sandbox.run_programs`."""
    def run(programs: list[str], tests: list[dict[str, Any]]) -> Sequence[ExecutionResultLike]:
        kwargs: dict[str, Any] = {"max_workers": max_workers}
        if limits is not None:
            kwargs["limits"] = limits
        return run_programs(programs, tests, **kwargs)

    return run


class ProgramExecutor:
    """Runs combined programs in the sandbox, with a cache of results per (program, tests).

    The cache makes the reward of a joint action and the feedback the rollout asks for right after it cost one
    sandbox run, and lets identical joint actions (frequent once a team converges) run once.

    Args:
        runner (`Callable`, *optional*): `runner(programs, tests) -> results` (see `Runner`); by default
            `trl_marl.sandbox.run_programs` with `limits` and `max_workers`. Tests inject a fake here.
        limits (`SandboxLimits`, *optional*): Limits for the default runner (its defaults if `None`).
        max_workers (`int`, *optional*): Parallel sandbox processes for the default runner.
        cache_size (`int`): How many results to keep (least recently used ones are dropped first); 0 disables it.
    """

    def __init__(self, runner: Runner | None = None, limits: Any = None, max_workers: int | None = None,
                 cache_size: int = 8192) -> None:
        self._runner = runner
        self.limits = limits
        self.max_workers = max_workers
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, str], ExecutionResultLike] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @property
    def runner(self) -> Runner:
        """The runner in use (the sandbox is imported when first needed)."""
        if self._runner is None:
            self._runner = _default_runner(self.limits, self.max_workers)
        return self._runner

    @staticmethod
    def _key(program: str, tests: Mapping[str, Any]) -> tuple[str, str]:
        return program, json.dumps(tests, sort_keys=True, default=str)

    def run(self, programs: Sequence[str], tests: Sequence[dict[str, Any]]) -> list[ExecutionResultLike]:
        """Results of `programs[i]` against `tests[i]`; programs not in the cache run in one batch of the runner.

        Args:
            programs (`list[str]`): The programs.
            tests (`list[dict]`): One test specification per program.

        Returns:
            `list`: One result per program.
        """
        if len(programs) != len(tests):
            raise ValueError(f"Got {len(programs)} programs but {len(tests)} test specifications.")
        keys = [self._key(p, t) for p, t in zip(programs, tests)]
        todo: dict[tuple[str, str], int] = {}
        for i, key in enumerate(keys):
            if key in self._cache:
                self._cache.move_to_end(key)
                self.hits += 1
            elif key not in todo:
                todo[key] = i
                self.misses += 1
            else:
                self.hits += 1
        fresh: dict[tuple[str, str], ExecutionResultLike] = {}
        if todo:
            order = list(todo.values())
            results = list(self.runner([programs[i] for i in order], [tests[i] for i in order]))
            if len(results) != len(order):
                raise RuntimeError(f"The runner returned {len(results)} results for {len(order)} programs.")
            fresh = dict(zip(todo, results))
        out = [self._cache[key] if key in self._cache else fresh[key] for key in keys]
        if self.cache_size > 0:
            for key, result in fresh.items():
                if not str(getattr(result, "reason", "")).startswith("sandbox_error"):  # transient: retry next time
                    self._cache[key] = result
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def clear(self) -> None:
        """Empty the cache and reset the hit/miss counters."""
        self._cache.clear()
        self.hits = self.misses = 0


_SHARED_EXECUTOR: ProgramExecutor | None = None


def shared_executor() -> ProgramExecutor:
    """The executor (default sandbox and limits) shared by every environment built without `executor`, `runner` or
    `limits`, so that an environment and a reward built separately still share one cache."""
    global _SHARED_EXECUTOR
    if _SHARED_EXECUTOR is None:
        _SHARED_EXECUTOR = ProgramExecutor()
    return _SHARED_EXECUTOR
