"""trl-marl: multi-agent reinforcement learning for teams of LLM agents, built on Hugging Face TRL.

Public API:

- [`MAGRPOConfig`], [`MAGRPOTrainer`]: Multi-Agent Group Relative Policy Optimization (arXiv 2508.04652).
- [`MAREINFORCEConfig`], [`MARLOOConfig`], [`MAReMaxConfig`]: MAGRPO with comlrl's other advantages (no
  baseline, leave-one-out, group-max baseline: the best sampled return, not ReMax's greedy-rollout baseline).
- [`AgentTeam`]: the agents' policies (one LoRA adapter per agent, one model per agent, or shared weights).
- [`trl_marl.envs`]: the `MultiAgentEnv` protocol and built-in environments.
- [`trl_marl.core`]: the algorithms' math as pure tensor functions.
- [`trl_marl.toy`]: tiny offline models and tasks for tests and demos.
- [`trl_marl.offline_models`]: the model names that load without the Hub (`"toy"`, `"smollm2-135m-instruct"`).
"""

from typing import TYPE_CHECKING, Any

from .utils.model_names import register_model_name_resolver
from .utils.quiet import quiet_bitsandbytes_import, quiet_other_ranks

quiet_bitsandbytes_import()  # a log line at bitsandbytes' import that no user can act on (see utils.quiet)
quiet_other_ranks()  # under accelerate/torchrun only the main process prints (TRL_MARL_LOG_ALL_RANKS=1: all)

# The public names are imported on first use (PEP 562), so that `trl-marl --help` and `import trl_marl.cli` do not pay
# for torch, transformers and TRL. The first access to any of them imports the whole public API (and checks TRL's
# version, `_trl_compat`), as an eager `import trl_marl` did.
_PUBLIC = {
    "AgentTeam": ".team",
    "load_tokenizer": ".team",
    "MultiAgentEnv": ".envs",
    "PromptEnv": ".envs",
    "TargetSumEnv": ".envs",
    "RewardFunctionError": ".reward_contract",
    "RewardTimeoutError": ".reward_contract",
    **{name: ".trainers" for name in ("MAGRPOConfig", "MAGRPOTrainer", "MAREINFORCEConfig", "MAReMaxConfig",
                                      "MARLOOConfig", "MultiAgentPPOConfig", "MultiAgentPPOTrainer",
                                      "NonFiniteError", "PPOConfig", "PPOTrainer")},
}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'trl_marl' has no attribute {name!r}")
    import importlib

    importlib.import_module("._trl_compat", __name__)  # fails early, with a clear message, outside TRL's range
    for public, module in _PUBLIC.items():
        globals()[public] = getattr(importlib.import_module(module, __name__), public)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


def _offline_names(name: str) -> str | None:
    """Import `trl_marl.offline_models` the first time a model name is resolved: it registers the offline names
    ("toy", "toy:<task>", "smollm2-135m-instruct") right after this resolver, and `resolve_model_name` asks it next."""
    import importlib

    importlib.import_module(".offline_models", __name__)
    return None


register_model_name_resolver(_offline_names)  # `import trl_marl` stays light; a name resolved loads offline_models


if TYPE_CHECKING:
    from .envs import MultiAgentEnv, PromptEnv, TargetSumEnv
    from .reward_contract import RewardFunctionError, RewardTimeoutError
    from .team import AgentTeam, load_tokenizer
    from .trainers import (
        MAGRPOConfig,
        MAGRPOTrainer,
        MAREINFORCEConfig,
        MAReMaxConfig,
        MARLOOConfig,
        MultiAgentPPOConfig,
        MultiAgentPPOTrainer,
        NonFiniteError,
        PPOConfig,
        PPOTrainer,
    )

__version__ = "0.1.0.dev0"

__all__ = [
    "AgentTeam",
    "MAGRPOConfig",
    "MAGRPOTrainer",
    "MAREINFORCEConfig",
    "MARLOOConfig",
    "MAReMaxConfig",
    "MultiAgentEnv",
    "MultiAgentPPOConfig",
    "MultiAgentPPOTrainer",
    "NonFiniteError",
    "PPOConfig",
    "PPOTrainer",
    "PromptEnv",
    "RewardFunctionError",
    "RewardTimeoutError",
    "TargetSumEnv",
    "load_tokenizer",
    "__version__",
]
