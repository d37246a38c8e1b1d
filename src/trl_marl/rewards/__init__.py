"""Reward modules with TRL's reward-function signature `f(prompts, completions, **kwargs) -> list[float | None]`.

- `RougeLReward`: ROUGE-L F-measure against a reference column (`rouge-score`).
- `CodeBLEUReward`: CodeBLEU against a reference-code column (`codebleu`).
- `UnitTestReward`: runs model-generated code against unit tests in a sandbox (separate processes with time,
  memory, file-system, network and output limits).
- `AnswerVerifier`, `ModelVerifier`, `RemoteVerifier` (+ `VerifierServer`): MAPoRL's verifiers.
- `InfluenceAwareReward`: MAPoRL's influence-aware reward with collaboration incentives.
- `CentralizedReward`: a team reward on the tagged parts of one policy's completion (`envs.CentralizedEnv`).
- The team rewards of the built-in tasks: `WritingTeamReward` (`rewards.writing`), `CodingTeamReward`
  (`rewards.coding`), `TargetSumReward` (`rewards.arithmetic`), `SplitItemsReward` (`rewards.coordination`), each
  with its terms.

Modules by job: `answers` (answer extraction and matching), `verifier` (in-process verifiers), `remote` and
`verifier_server` (verifiers over HTTP: client and server; `serving` holds the deadlines and the scorer they share),
`execution` (unit tests in the sandbox of `trl_marl.sandbox`), `rouge`, `codebleu`, `influence`, and one module per
task.

ROUGE-L and CodeBLEU need the `rewards` extra: `pip install "trl-marl[rewards]"`.
"""

from ..sandbox import ExecutionResult, SandboxLimits, run_programs
from .answers import extract_label, extract_math_answer, parse_gold
from .arithmetic import TargetSumReward, target_sum_reward
from .centralized import CentralizedReward
from .codebleu import CodeBLEUReward
from .coding import (
    CodingTeamReward,
    CombinedSyntaxReward,
    HelperDefinedReward,
    HelperUsedReward,
    IgnoredCallReward,
    MainDefinedReward,
    NonTrivialMainReward,
    PassRateReward,
)
from .coordination import SplitItemsReward
from .execution import UnitTestReward
from .influence import InfluenceAwareReward
from .remote import RemoteVerifier, VerifierError, VerifierServer, VerifierUnavailableError
from .rouge import RougeLReward
from .verifier import AnswerVerifier, ModelVerifier
from .writing import (
    LengthRangeReward,
    LengthRatioReward,
    LexicalDiversityReward,
    StyleConsistencyReward,
    TransitionWordsReward,
    VocabularyRatioReward,
    WritingTeamReward,
)
from .writing_source import SourceRelevanceReward
from .writing_variants import SymmetricWritingTeamReward, TldrCombinedReward

__all__ = [
    "AnswerVerifier",
    "CentralizedReward",
    "CodeBLEUReward",
    "CodingTeamReward",
    "CombinedSyntaxReward",
    "ExecutionResult",
    "HelperDefinedReward",
    "HelperUsedReward",
    "IgnoredCallReward",
    "InfluenceAwareReward",
    "LengthRangeReward",
    "LengthRatioReward",
    "LexicalDiversityReward",
    "MainDefinedReward",
    "ModelVerifier",
    "NonTrivialMainReward",
    "PassRateReward",
    "RemoteVerifier",
    "RougeLReward",
    "SandboxLimits",
    "SourceRelevanceReward",
    "SplitItemsReward",
    "StyleConsistencyReward",
    "SymmetricWritingTeamReward",
    "TargetSumReward",
    "TldrCombinedReward",
    "TransitionWordsReward",
    "UnitTestReward",
    "VerifierError",
    "VerifierServer",
    "VerifierUnavailableError",
    "VocabularyRatioReward",
    "WritingTeamReward",
    "extract_label",
    "extract_math_answer",
    "parse_gold",
    "run_programs",
    "target_sum_reward",
]
