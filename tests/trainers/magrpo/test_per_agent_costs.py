"""What an optimizer step of MAGRPO costs per agent beyond the agent's data, counted on a CPU (on a GPU every host sync
in the middle of a step stalls the queue of kernels: the per-agent fixed costs that made a 2-agent team train at 0.79x
one agent's tokens/s on an H100).

Counted with a `TorchDispatchMode` around `training_step` (the rollout's returns and metrics, the loss, its backward),
leaving out the sampling (whose per-token work tests/team/test_graph_step.py counts) and what runs inside the model's
own forward (transformers' mask checks, one set per forward).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from torch.utils._python_dispatch import _disable_current_modes

from helpers import OpCounter, spread_reward
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.trainers.logbook import MetricsBook


def step_syncs(model_dir: str, out: str, agents: int) -> tuple[int, int]:
    """Host syncs of the second optimizer step's `training_step` calls, outside the sampling and the model's
    forwards, and the all-gathers the step asked accelerate for."""
    args = MAGRPOConfig(output_dir=out, num_agents=agents, team_mode="adapters", num_generations=4,
                        per_device_train_batch_size=8, max_completion_length=4, learning_rate=1e-2, max_steps=2,
                        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=0)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=spread_reward, env=TargetSumEnv(agents), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 32}),
                            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                   lora_dropout=0.0))
    counter = OpCounter()
    step = trainer.training_step
    call = trainer.team.forward_call
    generate = trainer.team.generate
    calls = 0

    def model_call(model: Any, **inputs: Any) -> Any:
        with _disable_current_modes():
            return call(model, **inputs)

    def sample(*args: Any, **kwargs: Any) -> Any:
        with _disable_current_modes():
            return generate(*args, **kwargs)

    def counted_step(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first step builds what later steps reuse
            return step(*args, **kwargs)
        with counter:
            return step(*args, **kwargs)

    gathers = 0
    gather = trainer.accelerator.gather

    def counted_gather(*args: Any, **kwargs: Any) -> Any:
        nonlocal gathers
        gathers += calls == 2
        return gather(*args, **kwargs)

    trainer.accelerator.gather = counted_gather  # type: ignore[method-assign]
    trainer.training_step = counted_step  # type: ignore[method-assign]
    trainer.team.forward_call = model_call
    trainer.team.generate = sample  # type: ignore[method-assign]
    trainer.train()
    assert calls == 2
    return counter.syncs, gathers


def test_host_syncs_and_gathers_per_agent_in_a_training_step(target_model_dir, tmp_path) -> None:
    """One host sync per agent (the check that its loss is finite, which decides whether it is used); the agents'
    metrics stay on the device until the log reads them all at once. Each agent added 11 syncs here before (entropy,
    clip ratio, loss, the entropy diagnostics, each read with `float()` as it was recorded)."""
    (one, one_gathers), (three, three_gathers) = (step_syncs(target_model_dir, str(tmp_path / name), agents)
                                                  for name, agents in (("one", 1), ("three", 3)))
    assert (three - one) / 2 <= 1, (one, three)
    # the token counts that normalize the loss: one all-gather for every agent (it was one per agent)
    assert three_gathers == one_gathers >= 1


def test_metrics_book_reads_tensors_once() -> None:
    book = MetricsBook()
    book["train"]["loss"] += [torch.tensor(1.0), 2.0, torch.tensor([3.0])]
    book["train"]["nonfinite/loss"] += [torch.tensor(1.0), torch.tensor(2.0)]
    book["train"]["diagnostics/streak"] += [torch.tensor(4.0), torch.tensor(5.0)]
    with OpCounter() as counter:
        logged = book.logged("train")
    assert logged == {"loss": 2.0, "nonfinite/loss": 3.0, "diagnostics/streak": 5.0}
    assert counter.syncs <= 1  # one read of every tensor (`tolist` of their stack)
    assert book["train"]["loss"] == [1.0, 2.0, 3.0]  # the lists now hold the floats
    book["eval"]["x"].append(torch.tensor(float("inf")))
    assert book.logged("eval") == {"eval_x": pytest.approx(float("nan"), nan_ok=True)}
