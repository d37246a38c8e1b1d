"""The code-execution sandbox of trl-marl: run model-generated programs against unit tests, isolated.

- [`types`]: `SandboxLimits`, `TestSpec`, `ExecutionResult`, `SandboxUnavailableError`.
- [`plans`]: a test specification turned into tests reported one by one.
- [`runner`]: `run_program`/`run_programs`: one fresh `python -I` interpreter per program, namespaces, cgroups,
  limits (its docstring and `docs/sandbox.md` hold the threat model and the guarantees of each isolation level).
- [`boot`] and [`harness`]: what runs inside each sandbox interpreter (standard library only); `harness` also holds
  the plain-data codec.
- [`feedback`]: a result as a short text for prompts; [`executor`]: a cache of results per (program, tests).

The unit-test reward built on it is `trl_marl.rewards.execution.UnitTestReward`.
"""

from .executor import ProgramExecutor, shared_executor
from .feedback import describe_result, format_feedback
from .runner import BOOT_PATH, HARNESS_PATH, run_program, run_programs
from .types import ISOLATION_ENV, ISOLATION_LEVELS, ExecutionResult, SandboxLimits, SandboxUnavailableError, TestSpec

__all__ = [
    "BOOT_PATH",
    "HARNESS_PATH",
    "ISOLATION_ENV",
    "ISOLATION_LEVELS",
    "ExecutionResult",
    "SandboxLimits",
    "SandboxUnavailableError",
    "TestSpec",
    "ProgramExecutor",
    "describe_result",
    "format_feedback",
    "shared_executor",
    "run_program",
    "run_programs",
]
