"""Reward modules with TRL's reward-function signature `f(prompts, completions, **kwargs) -> list[float | None]`.

- `RougeLReward`: ROUGE-L F-measure against a reference column (`rouge-score`).
- `CodeBLEUReward`: CodeBLEU against a reference-code column (`codebleu`).
- `UnitTestReward`: runs model-generated code against unit tests in a sandbox (separate processes with time,
  memory, file-system, network and output limits).
- `AnswerVerifier`, `ModelVerifier`, `RemoteVerifier` (+ `VerifierServer`): MAPoRL's verifiers.
- `InfluenceAwareReward`: MAPoRL's influence-aware reward with collaboration incentives.

ROUGE-L and CodeBLEU need the `rewards` extra: `pip install "trl-marl[rewards]"`.
"""

from ..sandbox import ExecutionResult, SandboxLimits, run_programs
from .answers import extract_label, extract_math_answer, parse_gold
from .codebleu import CodeBLEUReward
from .execution import UnitTestReward
from .influence import InfluenceAwareReward
from .remote import RemoteVerifier, VerifierError, VerifierServer, VerifierUnavailableError
from .rouge import RougeLReward
from .verifier import AnswerVerifier, ModelVerifier

__all__ = [
    "AnswerVerifier",
    "CodeBLEUReward",
    "ExecutionResult",
    "InfluenceAwareReward",
    "ModelVerifier",
    "RemoteVerifier",
    "RougeLReward",
    "SandboxLimits",
    "UnitTestReward",
    "VerifierError",
    "VerifierServer",
    "VerifierUnavailableError",
    "extract_label",
    "extract_math_answer",
    "parse_gold",
    "run_programs",
]
