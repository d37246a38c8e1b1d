"""Reward modules with TRL's reward-function signature `f(prompts, completions, **kwargs) -> list[float | None]`.

- `RougeLReward`: ROUGE-L F-measure against a reference column (`rouge-score`).
- `CodeBLEUReward`: CodeBLEU against a reference-code column (`codebleu`).
- `UnitTestReward`: runs model-generated code against unit tests in a sandbox (separate processes with time,
  memory, file-system, network and output limits).

ROUGE-L and CodeBLEU need the `rewards` extra: `pip install "trl-marl[rewards]"`.
"""

from .codebleu import CodeBLEUReward
from .execution import ExecutionResult, SandboxLimits, UnitTestReward, run_programs
from .rouge import RougeLReward

__all__ = [
    "CodeBLEUReward",
    "ExecutionResult",
    "RougeLReward",
    "SandboxLimits",
    "UnitTestReward",
    "run_programs",
]
