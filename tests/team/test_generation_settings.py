"""`GenerationSettings`: built once from a trainer config, typed, each default written once, checked when built; and
no module below the trainers reads a trainer config with a defaulted `getattr`."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from types import SimpleNamespace

import pytest

from trl_marl import MAGRPOConfig, MultiAgentPPOConfig
from trl_marl.team.generation import GenerationSettings, TransformersBackend, build_generation_backend

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "trl_marl"


def test_of_reads_each_field_by_name_and_keeps_the_default_of_a_missing_one() -> None:
    config = MultiAgentPPOConfig(output_dir="/tmp/unused", report_to=[], vllm_gpu_memory_utilization=0.55,
                                 vllm_server_port=8123, seed=7)
    assert not hasattr(config, "vllm_model_impl")  # a field TRL's GRPOConfig has and the PPO config does not
    settings = GenerationSettings.of(config)
    assert settings.vllm_gpu_memory_utilization == 0.55
    assert settings.vllm_server_port == 8123
    assert settings.seed == 7
    assert settings.vllm_model_impl == "vllm"  # TRL's default
    grpo = GenerationSettings.of(MAGRPOConfig(output_dir="/tmp/unused", num_generations=2,
                                              per_device_train_batch_size=2, report_to=[], vllm_model_impl="auto"))
    assert grpo.vllm_model_impl == "auto"


def test_the_dataclass_defaults_are_the_configs_defaults() -> None:
    """One default per setting: a config that sets nothing gives the dataclass's own defaults (except the seed,
    whose default is transformers' 42, and the server host, where TRL's wildcard and our loopback address reach the
    same server)."""
    for config in (MultiAgentPPOConfig(output_dir="/tmp/unused", report_to=[]),
                   MAGRPOConfig(output_dir="/tmp/unused", num_generations=2, per_device_train_batch_size=2,
                                report_to=[])):
        read = GenerationSettings.of(config)
        for field in dataclasses.fields(GenerationSettings):
            if field.name not in ("seed", "vllm_server_host") and hasattr(config, field.name):
                assert getattr(read, field.name) == field.default, (type(config).__name__, field.name)
        assert read.server_url() == GenerationSettings().server_url() == "http://127.0.0.1:8000"


@pytest.mark.parametrize(("fields", "message"), [
    ({"generation_backend": "onnx"}, "`generation_backend` must be one of"),
    ({"generation_backend": "vllm", "vllm_mode": "remote"}, "`vllm_mode='remote'` is not implemented"),
    ({"generation_backend": "vllm", "vllm_mode": "server", "vllm_server_timeout": 0.0}, "`vllm_server_timeout`"),
    ({"generation_backend": "vllm", "vllm_gpu_memory_utilization": 1.5}, "`vllm_gpu_memory_utilization` must be"),
    ({"generation_backend": "vllm", "vllm_kv_cache_memory_bytes": -1}, "`vllm_kv_cache_memory_bytes` must be"),
    ({"generation_backend": "vllm", "vllm_logprobs_mode": "logits"}, "`vllm_logprobs_mode` must be one of"),
    ({"generation_backend": "vllm", "vllm_tensor_parallel_size": 2}, "`vllm_tensor_parallel_size=2`"),
])
def test_bad_settings_are_refused_naming_the_field(fields: dict, message: str) -> None:
    with pytest.raises((ValueError, NotImplementedError), match=message):
        GenerationSettings(**fields)


def test_vllm_only_checks_wait_for_the_vllm_backend() -> None:
    """A vLLM setting is not checked while another backend runs (as the configs always did)."""
    settings = GenerationSettings(generation_backend="compiled", vllm_gpu_memory_utilization=1.5)
    assert settings.vllm_gpu_memory_utilization == 1.5


def test_server_url() -> None:
    assert GenerationSettings(vllm_server_host="0.0.0.0", vllm_server_port=9000).server_url() == \
        "http://127.0.0.1:9000"
    assert GenerationSettings(vllm_server_host="gpu-3", vllm_server_port=80).server_url() == "http://gpu-3:80"
    assert GenerationSettings(vllm_server_base_url="http://h:1/v").server_url() == "http://h:1/v"


def test_build_takes_settings_or_a_config() -> None:
    assert isinstance(build_generation_backend(GenerationSettings(), None), TransformersBackend)
    assert isinstance(build_generation_backend(SimpleNamespace(generation_backend="transformers"), None),
                      TransformersBackend)
    with pytest.raises(ValueError, match="`generation_backend` must be one of"):
        build_generation_backend(SimpleNamespace(generation_backend="onnx"), None)


def _defaulted_config_reads(path: pathlib.Path) -> list[str]:
    """`getattr(<config-like name>, "<field>", <default>)` calls in a module: a config read duck-typed, with a default
    repeated from the config class."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)):
            target = ast.unparse(node.args[0])
            if target in ("config", "args", "self.args", "self.config", "training_args"):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_layer_below_the_trainers_reads_a_config_with_a_defaulted_getattr() -> None:
    """Settings below the trainers are typed (e.g. `GenerationSettings`): a duck-typed read would repeat a default
    that the config class already holds, and drift from it. PEFT's adapter configs (`peft_type`) are not trainer
    configs and are read where the adapters are."""
    below = ["core", "envs", "reward_contract", "rewards", "rollout.py", "team", "utils", "validation", "data",
             "sandbox"]
    found = []
    for name in below:
        root = SRC / name
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            found += [line for line in _defaulted_config_reads(path) if "peft_type" not in line
                      and "alora_invocation_tokens" not in line]
    assert found == []
