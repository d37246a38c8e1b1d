"""`torch_compile=True`: the team compiles its log-probability forwards (`team.compile`), not accelerate the team.

The compiled forwards give the eager values, one graph serves every sequence length and every model of the same
architecture, a trainer trains exactly as it does eager (the gradients of each optimizer step, with activation
checkpointing and both agents' forwards before one backward, the case where an eager recomputation needs the right
adapter), and a strategy that is not supported is refused before training. The backends here are "aot_eager" and a
graph-counting one (conftest's `GraphCounter`); inductor's code generation would take minutes on a CPU
(`benchmarks/speed/bench_compile.py` times it).
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM

from helpers import spread_reward
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.team.compile import CompiledForward, call_model, graphs_needed
from trl_marl.trainers.base import TeamTrainer

warnings.filterwarnings("ignore")
LORA = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def inputs(length: int, rows: int = 3, vocab: int = 20) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(length)
    ids = torch.randint(4, vocab, (rows, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row
    return dict(input_ids=ids, attention_mask=mask, logits_to_keep=2)


def test_one_graph_for_every_length_and_model_of_the_architecture(target_model_dir, graph_counter):
    first = AutoModelForCausalLM.from_pretrained(target_model_dir)
    second = AutoModelForCausalLM.from_pretrained(target_model_dir)
    with torch.no_grad():
        for p in second.parameters():
            p.add_(0.01 * torch.randn_like(p))
    counter = graph_counter()
    forward = CompiledForward(backend=counter, num_agents=2)
    with torch.no_grad():
        for model, length in ((first, 7), (first, 9), (second, 11), (second, 6), (first, 13)):
            compiled = forward(model, **inputs(length)).logits
            torch.testing.assert_close(compiled, call_model(model, **inputs(length)).logits, rtol=1e-6, atol=1e-6)
            if length == 7:
                after_first = counter.graphs
    assert after_first >= 1
    assert counter.graphs == after_first, "a new length or a second model of the same architecture recompiled"


def test_each_instance_has_graphs_of_its_own_and_the_limit_fits_the_team(target_model_dir, graph_counter):
    import torch._dynamo.config as dynamo_config

    model = AutoModelForCausalLM.from_pretrained(target_model_dir)
    counters = [graph_counter(), graph_counter()]
    with torch.no_grad():
        for counter in counters:
            CompiledForward(backend=counter)(model, **inputs(8))
    assert all(c.graphs >= 1 for c in counters), "the second instance reused the first one's graphs"
    limit = dynamo_config.recompile_limit
    try:
        CompiledForward(backend="eager", num_agents=4)
        assert dynamo_config.recompile_limit >= graphs_needed(4) == 15
    finally:
        dynamo_config.recompile_limit = limit


def train(model_dir: str, out: str, capture_cls: type, **overrides: Any) -> tuple[MAGRPOTrainer, Any]:
    capture = capture_cls()  # conftest's `GradientCapture`
    args = MAGRPOConfig(output_dir=out, num_agents=2, team_mode="adapters", num_generations=4,
                        per_device_train_batch_size=8, max_completion_length=4, learning_rate=1e-2, max_steps=2,
                        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
                        max_grad_norm=0.0, gradient_checkpointing=True, backward_per_agent=False, **overrides)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=spread_reward, env=TargetSumEnv(2), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 32}), peft_config=LORA,
                            callbacks=[capture])
    capture.team = trainer.team
    trainer.train()
    return trainer, capture


@pytest.mark.slow
def test_trainer_with_torch_compile_trains_as_eager(target_model_dir, tmp_path, assert_same_gradients,
                                                    gradient_capture):
    eager, eager_grads = train(target_model_dir, str(tmp_path / "eager"), gradient_capture)
    compiled, compiled_grads = train(target_model_dir, str(tmp_path / "compiled"), gradient_capture,
                                     torch_compile=True, torch_compile_backend="aot_eager")
    assert eager.team.forward_call is call_model
    assert isinstance(compiled.team.forward_call, CompiledForward)
    assert compiled.team.forward_call.backend == "aot_eager"
    # accelerate did not compile the team itself (its Python loop would recompile at every new length)
    assert not isinstance(compiled.model_wrapped, torch._dynamo.eval_frame.OptimizedModule)
    assert type(compiled.model_wrapped) is type(eager.model_wrapped)
    assert len(compiled_grads.grads) == 2
    assert_same_gradients(compiled_grads.grads, eager_grads.grads, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(compiled.team.named_parameters(), eager.team.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("plugin", ["fsdp_plugin", "deepspeed_plugin"])
def test_torch_compile_with_a_sharding_strategy_is_refused(plugin):
    state = SimpleNamespace(fsdp_plugin=None, deepspeed_plugin=None)
    setattr(state, plugin, object())
    trainer = SimpleNamespace(args=SimpleNamespace(torch_compile=True, torch_compile_backend=None,
                                                   torch_compile_mode=None),
                              accelerator=SimpleNamespace(state=state), model=None)
    name = "FSDP" if plugin == "fsdp_plugin" else "DeepSpeed"
    with pytest.raises(ValueError, match=f"torch_compile=True` with {name}.*set `torch_compile=False`"):
        TeamTrainer.compile_team_forwards(trainer)  # type: ignore[arg-type]


def train_ppo(model_dir: str, out: str, **overrides: Any) -> Any:
    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer

    args = MultiAgentPPOConfig(output_dir=out, num_agents=2, num_turns=1, team_mode="adapters",
                               per_device_train_batch_size=4, num_mini_batches=1, num_ppo_epochs=1,
                               total_episodes=8, response_length=4, stop_token="eos", learning_rate=1e-2,
                               report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
                               disable_tqdm=True, seed=0, gradient_checkpointing=True, backward_per_agent=False,
                               kl_coef=0.05, **overrides)
    trainer = MultiAgentPPOTrainer(args=args, model=model_dir, env=TargetSumEnv(2), peft_config=LORA,
                                   reward_funcs=lambda prompts, completions, **kw: [float(len(c) % 3) for c in
                                                                                    completions],
                                   train_dataset=Dataset.from_dict({"target": [10] * 16}))
    trainer.train()
    return trainer


@pytest.mark.slow
def test_ppo_with_torch_compile_trains_as_eager(target_model_dir, tmp_path):
    eager = train_ppo(target_model_dir, str(tmp_path / "eager"))
    compiled = train_ppo(target_model_dir, str(tmp_path / "compiled"), torch_compile=True,
                         torch_compile_backend="aot_eager")
    assert isinstance(compiled.team.forward_call, CompiledForward)
    for (name, p), q in zip(compiled.wrapper.named_parameters(), eager.wrapper.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    trained = [p for n, p in compiled.team.named_parameters() if "lora_B" in n]
    assert trained and all(float(p.detach().abs().max()) > 0 for p in trained), "the policies did not train"
    for mine, reference in zip(compiled.state.log_history, eager.state.log_history, strict=True):
        for key, value in reference.items():
            if "time" not in key and "per_second" not in key and key != "eps":  # (episodes per second)
                assert mine[key] == pytest.approx(value, rel=1e-5, abs=1e-6, nan_ok=True), key


def test_a_compiler_failure_warns_once_and_runs_eager(target_model_dir):
    model = AutoModelForCausalLM.from_pretrained(target_model_dir)
    calls = []

    def broken(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        calls.append(1)
        raise RuntimeError("C++ compile error")

    forward = CompiledForward(backend=broken)
    with torch.no_grad():
        with pytest.warns(RuntimeWarning, match="torch.compile failed .*C\\+\\+ compile error.*run eager"):
            first = forward(model, **inputs(8)).logits
        assert forward.failure is not None and "C++ compile error" in forward.failure
        tries = len(calls)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no second warning
            later = forward(model, **inputs(10)).logits
    assert len(calls) == tries, "compiling was tried again after the failure"
    torch.testing.assert_close(first, call_model(model, **inputs(8)).logits, rtol=0, atol=0)
    torch.testing.assert_close(later, call_model(model, **inputs(10)).logits, rtol=0, atol=0)


def summed_backward_gradients(model_dir: str, checkpointing: bool, backend: Any = None,
                              restore_on_failure: bool = True,
                              joint: bool = True) -> tuple[Any, dict[str, torch.Tensor]]:
    """Both agents' forwards (one joint forward over both agents' rows, or one forward per agent), then one backward
    of the summed log-probabilities: the case where an eager recomputation of a checkpointed layer must run each
    row through its agent's own adapter again."""
    from trl_marl.team import AgentBatch, AgentTeam

    torch.manual_seed(0)  # the same (random, nonzero) adapters in every call
    team = AgentTeam.build(model_dir, 2, mode="adapters",
                           peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                                                  init_lora_weights=False))
    team.train()
    team.joint_adapter_forward = joint
    if checkpointing:
        team.activation_checkpointing_enable()
    if backend is not None:
        team.compile_forwards(backend=backend)
        if not restore_on_failure:
            team.forward_call.on_failure = None
    generator = torch.Generator().manual_seed(1)
    batches = [AgentBatch(torch.randint(4, 20, (3, 5), generator=generator), torch.ones(3, 5, dtype=torch.long),
                          torch.randint(4, 20, (3, 4), generator=generator), torch.ones(3, 4, dtype=torch.long))
               for _ in range(2)]
    sum(logps.sum() for logps, _ in team(batches)).backward()
    return team, {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}


def broken_backend(graph_module: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    raise RuntimeError("C++ compile error")


@pytest.mark.parametrize("joint", [True, False], ids=["joint-forward", "forward-per-agent"])
def test_after_a_compiler_failure_checkpointed_layers_recompute_with_their_own_adapter(target_model_dir, joint):
    _, reference = summed_backward_gradients(target_model_dir, checkpointing=False, joint=joint)
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        team, grads = summed_backward_gradients(target_model_dir, checkpointing=True, backend=broken_backend,
                                                joint=joint)
    assert team.forward_call is call_model  # back to eager for good
    assert grads.keys() == reference.keys() and len(grads) == 8  # q/v, A/B, two adapters
    for name, grad in reference.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    # the control: falling back without the team's eager checkpointing settings recomputes the layers with the
    # active adapter only: one forward per agent gets agent 0's gradients wrong; the joint forward's recomputation
    # (no row slices) saves other tensors than its forward did, which torch's checkpoint catches
    with pytest.warns(RuntimeWarning, match="torch.compile failed"):
        if joint:
            with pytest.raises(torch.utils.checkpoint.CheckpointError):
                summed_backward_gradients(target_model_dir, checkpointing=True, backend=broken_backend,
                                          restore_on_failure=False, joint=joint)
            return
        _, wrong = summed_backward_gradients(target_model_dir, checkpointing=True, backend=broken_backend,
                                             restore_on_failure=False, joint=joint)
    assert any(not torch.allclose(wrong[n], g, rtol=1e-4, atol=1e-6) for n, g in reference.items())
