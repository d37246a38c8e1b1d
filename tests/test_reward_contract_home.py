"""The reward contract lives in one package, `trl_marl.reward_contract`, and nowhere else.

The contract (the set of functions, the signature check, the call with its timeout and isolation, the errors, the
team reward wrapper) used to be spread over `rewarding.py`, `validation.py`, `utils/inputs.py` and `rollout.py`; its
package was then `trl_marl.rewarding`, a name too close to `trl_marl.rewards` (the reward functions). The old paths
keep no alias (the package was never released; issue 52); `trl_marl.validation` stays the plain home of the config and
data checks.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest

import trl_marl.reward_contract as contract

PACKAGE = Path(contract.__file__).resolve().parents[1]  # the trl_marl under test
SRC = PACKAGE.parent

CONTRACT = [
    "DEFAULT_REWARD_TIMEOUT", "REWARD_ISOLATIONS", "REWARD_KEYWORDS", "REWARD_KINDS", "LocalReward",
    "NonFiniteCounter", "NonFiniteError", "RewardFunc", "RewardFunctionError", "RewardIsolationWarning", "RewardSet",
    "RewardTimeoutError", "RewardTimeoutWarning", "RewardWorkerTraceback", "TeamReward", "agent_reward",
    "call_reward_function", "check_reward_signature", "checked_reward_values", "completion_objects", "reward_kind",
    "reward_isolation_field", "reward_timeout_field", "reward_value", "team_reward", "unscorable_message",
]

# (old module, name, the module it lives in now)
MOVED = [
    *(("trl_marl.validation", name, "trl_marl.reward_contract") for name in (
        "DEFAULT_REWARD_TIMEOUT", "REWARD_ISOLATIONS", "RewardFunctionError", "RewardIsolationWarning",
        "RewardTimeoutError", "RewardTimeoutWarning", "RewardWorkerTraceback", "call_reward_function",
        "checked_reward_values", "reward_value", "unscorable_message")),
    ("trl_marl.rollout", "TeamReward", "trl_marl.reward_contract"),
    ("trl_marl.utils.inputs", "check_reward_signature", "trl_marl.reward_contract"),
    ("trl_marl.utils.inputs", "REWARD_KEYWORDS", "trl_marl.reward_contract"),
    ("trl_marl.utils.inputs", "check_learning_rate", "trl_marl.validation"),
    ("trl_marl.utils.inputs", "generation_batch_error", "trl_marl.validation"),
    ("trl_marl.utils.inputs", "use_activation_checkpointing_name", "trl_marl.validation"),
]

# (module, name, the module that defines it): re-exports where the old module is still a natural home, no warning
KEPT = [
    ("trl_marl", "RewardFunctionError", "trl_marl.reward_contract.errors"),
    ("trl_marl", "RewardTimeoutError", "trl_marl.reward_contract.errors"),
    ("trl_marl.rollout", "RewardFunctionError", "trl_marl.reward_contract.errors"),
    ("trl_marl.validation", "check_prompt_lengths", "trl_marl.validation.data"),
    ("trl_marl.validation", "check_dataset_prompts", "trl_marl.validation.data"),
    ("trl_marl.validation", "ContextLengthWarning", "trl_marl.validation.data"),
    ("trl_marl.validation", "check_mixed_precision", "trl_marl.validation.config"),
    ("trl_marl.validation", "has_accelerator", "trl_marl.validation.config"),
    ("trl_marl.validation", "check_learning_rate", "trl_marl.validation.config"),
    ("trl_marl.utils.inputs", "check_model_path", "trl_marl.utils.inputs"),
]


def defining_module(value: Any) -> str | None:
    return getattr(value, "__module__", None)


def test_the_contract_is_importable_from_rewarding_and_defined_there() -> None:
    assert sorted(contract.__all__) == sorted(CONTRACT)
    for name in CONTRACT:
        value = getattr(contract, name)
        module = defining_module(value)
        if isinstance(value, type) or inspect.isfunction(value):
            assert module is not None and module.startswith("trl_marl.reward_contract."), (name, module)


def test_no_module_outside_rewarding_defines_a_name_of_the_contract() -> None:
    """One home: a class, function or constant of the contract is defined in `trl_marl/reward_contract/` only."""
    names = set(CONTRACT)
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "reward_contract":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                defined = [node.name]
            elif isinstance(node, ast.Assign):
                defined = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined = [node.target.id]
            else:
                defined = []
            outside += [f"{path.relative_to(SRC)}:{node.lineno} {name}" for name in defined if name in names]
    assert not outside, "Names of the reward contract defined outside trl_marl.reward_contract:\n" + "\n".join(outside)


@pytest.mark.parametrize(("old", "name", "home"), MOVED)
def test_an_old_path_is_gone_and_the_new_home_has_the_name(old: str, name: str, home: str) -> None:
    """The package was never released: a moved name keeps no alias at its old home (issue 52)."""
    assert not hasattr(importlib.import_module(old), name)
    assert hasattr(importlib.import_module(home), name)


@pytest.mark.parametrize(("module", "name", "home"), KEPT)
def test_a_natural_home_re_exports_without_a_warning(module: str, name: str, home: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(importlib.import_module(module), name)
    assert value is getattr(importlib.import_module(home), name)
    assert defining_module(value) == home


def test_an_old_private_name_fails_loudly_instead_of_patching_nothing() -> None:
    """`monkeypatch.setattr("trl_marl.validation._call_in_process", ...)` would replace a name that nothing calls:
    the old module has no such attribute, so such a patch raises instead of passing silently."""
    import trl_marl.validation as validation

    for name in ("_call_in_process", "_WARNED", "_THREAD_ONLY", "no_such_name"):
        with pytest.raises(AttributeError, match=f"has no attribute '{name}'"):
            getattr(validation, name)
    with pytest.raises(AttributeError):
        pytest.MonkeyPatch().setattr("trl_marl.validation._call_in_process", lambda *a, **k: [1.0])


def test_the_once_per_function_warning_reads_the_set_in_rewarding_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests patch `trl_marl.reward_contract.calls._WARNED`: the object `call_reward_function` reads."""
    reward_calls = importlib.import_module("trl_marl.reward_contract.calls")

    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [2.0]

    monkeypatch.setattr(reward_calls, "fork_obstacle", lambda func: "a test says so")
    monkeypatch.setattr(reward_calls, "_WARNED", {"reward"})  # already warned: silent
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert contract.call_reward_function(reward, "reward", 1, timeout=30.0, prompts=["p"], completions=["c"]) == [
            2.0]
    monkeypatch.setattr(reward_calls, "_WARNED", set())
    with pytest.warns(contract.RewardIsolationWarning, match="`reward` runs in a thread.*because a test says so"):
        assert contract.call_reward_function(reward, "reward", 1, timeout=30.0, prompts=["p"], completions=["c"]) == [
            2.0]


