"""An `adapters` team's forward over several agents' batches runs as one forward through the shared base model.

`AgentTeam.forward` (MAGRPO's summed loss, `backward_per_agent=False`, and the family trainers on it) puts every
agent's rows in one batch, each row through its agent's LoRA adapter (`team.mixed_adapters`, in train mode), with
`utils.tokens.joint_model_inputs` keeping each row's positions. These tests check the layout by hand, that the
log-probabilities, entropies and gradients equal those of one forward per agent when the agents' prompts and
completions differ in width, that a trainer trains alike either way (with activation checkpointing, whose
recomputation must slice the rows again, a frozen agent, a reference KL and old log-probabilities), where the team
keeps one forward per agent, and that a compiled forward keeps one graph across steps.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from helpers import spread_reward
from trl_marl import MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.team.adapters import AdapterControl
from trl_marl.team.compile import call_model
from trl_marl.team.mixed_adapters import sliced_adapter_rows, sliced_adapter_rows_unsupported
from trl_marl.utils.tokens import joint_model_inputs, pad_left, pad_right

warnings.filterwarnings("ignore")


def lora(dropout: float = 0.0) -> LoraConfig:
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=dropout,
                      init_lora_weights=False)  # random B: every adapter changes the logits


def random_batch(generator: torch.Generator, rows: int, prompt_width: int, completion_width: int,
                 vocab: int = 20) -> AgentBatch:
    """Rows of random lengths up to the widths: left-padded prompts, right-padded completions."""
    def lengths(width: int) -> list[int]:
        return [int(torch.randint(1, width + 1, (), generator=generator)) for _ in range(rows)]

    prompts = [torch.randint(4, vocab, (n,), generator=generator).tolist() for n in lengths(prompt_width)]
    completions = [torch.randint(4, vocab, (n,), generator=generator).tolist() for n in lengths(completion_width)]
    prompts[0] = prompts[0] + [5] * (prompt_width - len(prompts[0]))  # each batch exactly as wide as asked
    completions[0] = completions[0] + [6] * (completion_width - len(completions[0]))
    return AgentBatch(*pad_left(prompts, 0), *pad_right(completions, 0))


def test_joint_model_inputs_by_hand():
    first = AgentBatch(torch.tensor([[5, 6, 7], [0, 8, 9]]), torch.tensor([[1, 1, 1], [0, 1, 1]]),
                       torch.tensor([[10, 11], [12, 0]]), torch.tensor([[1, 1], [1, 0]]))
    second = AgentBatch(torch.tensor([[4]]), torch.tensor([[1]]), torch.tensor([[13, 14, 15]]),
                        torch.tensor([[1, 1, 1]]))
    ids, mask, positions = joint_model_inputs([first, second])
    # prompt + completion[:, :-1]; the first batch one more column on the right, the second two more on the left
    assert ids.tolist() == [[5, 6, 7, 10, 0], [0, 8, 9, 12, 0], [0, 0, 4, 13, 14]]
    assert mask.tolist() == [[1, 1, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]]
    # each row numbered as in its own batch's forward (0, 1, ... from its batch's first column)
    assert positions.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 0, 0, 1, 2]]
    # one batch alone: its own forward's inputs
    ids, mask, positions = joint_model_inputs([second])
    assert ids.tolist() == [[4, 13, 14]] and mask.tolist() == [[1, 1, 1]] and positions.tolist() == [[0, 1, 2]]


def build_team(model_dir: str, num_agents: int = 3, dropout: float = 0.0) -> AgentTeam:
    torch.manual_seed(0)
    team = AgentTeam.build(model_dir, num_agents, mode="adapters", peft_config=lora(dropout))
    team.train()
    return team


def count_forwards(team: AgentTeam) -> list[int]:
    """Wrap the team's model call: the returned list gets the rows of every forward from then on."""
    calls: list[int] = []
    call = team.forward_call

    def counting(model: Any, **inputs: Any) -> Any:
        calls.append(inputs["input_ids"].size(0))
        return call(model, **inputs)

    team.forward_call = counting
    return calls


def forward_and_backward(team: AgentTeam, batches: list[AgentBatch | None], joint: bool) -> tuple[list, dict, int]:
    """The team's log-probabilities and entropies, the gradients of a loss that weighs the agents differently, and
    how many model forwards ran."""
    team.joint_adapter_forward = joint
    team.zero_grad(set_to_none=True)
    call = team.forward_call
    calls = count_forwards(team)
    try:
        out = team(batches, compute_entropy=True)
    finally:
        team.forward_call = call
    loss = sum((a + 1) * logps.sum() for a, (logps, _) in enumerate(o for o in out if o is not None))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in team.named_parameters() if p.grad is not None}
    return [None if o is None else (o[0].detach(), o[1]) for o in out], grads, calls


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_one_forward_gives_each_agents_own_forward(target_model_dir, checkpointing):
    team = build_team(target_model_dir)
    if checkpointing:  # the backward recomputes each layer: with each row's adapter again
        team.activation_checkpointing_enable()
    generator = torch.Generator().manual_seed(0)
    # the agents' prompts and completions differ in width: rows are padded further in the joint forward
    batches = [random_batch(generator, 3, 7, 2), random_batch(generator, 4, 2, 6), random_batch(generator, 2, 4, 4)]
    per_agent, per_agent_grads, per_agent_calls = forward_and_backward(team, batches, joint=False)
    joint, joint_grads, joint_calls = forward_and_backward(team, batches, joint=True)
    assert per_agent_calls == [3, 4, 2] and joint_calls == [9]
    for (logps, entropy), (theirs, their_entropy), batch in zip(joint, per_agent, batches):
        assert logps.shape == batch.completion_ids.shape
        torch.testing.assert_close(logps, theirs, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropy, their_entropy, rtol=1e-5, atol=1e-5)
    assert joint_grads.keys() == per_agent_grads.keys() and len(joint_grads) == 12  # q/v, A/B, three adapters
    for name, grad in per_agent_grads.items():
        assert grad.abs().max() > 0, name
        torch.testing.assert_close(joint_grads[name], grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("reference", [False, True], ids=["old-policy", "reference"])
def test_no_grad_log_probs_of_every_agent_in_one_forward(target_model_dir, reference):
    team = build_team(target_model_dir)
    generator = torch.Generator().manual_seed(1)
    batches = [random_batch(generator, 3, 6, 2), None, random_batch(generator, 2, 3, 5)]  # agent 1 frozen
    calls = count_forwards(team)
    joint = team.inference_logps_all(batches, reference=reference)
    assert calls == [5]
    team.joint_adapter_forward = False
    alone = team.inference_logps_all(batches, reference=reference)
    assert calls == [5, 3, 2]
    assert joint[1] is None and alone[1] is None
    for a in (0, 2):
        assert not joint[a].is_inference() and not joint[a].requires_grad
        torch.testing.assert_close(joint[a], alone[a], rtol=1e-5, atol=1e-5)
    # the reference (adapters disabled) differs from the policy: the adapters are random, not zero
    other = team.inference_logps_all(batches, reference=not reference)
    assert not torch.allclose(other[0], alone[0], atol=1e-3)


def test_checkpointed_recomputation_without_the_row_slices_is_caught(target_model_dir, monkeypatch):
    """The control of the test above: a recomputation that does not slice the rows again runs every row through
    the active adapter, and torch's checkpoint sees other tensors saved than in the forward."""
    contexts = AdapterControl.checkpoint_contexts

    def without_joint_rows(self: AdapterControl, *args: Any) -> Any:
        forwards = self.team.logprob_forwards
        forwards._joint_rows, rows = None, forwards._joint_rows
        try:
            return contexts(self, *args)
        finally:
            forwards._joint_rows = rows

    monkeypatch.setattr(AdapterControl, "checkpoint_contexts", without_joint_rows)
    team = build_team(target_model_dir, num_agents=2)
    team.activation_checkpointing_enable()
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(generator, 3, 5, 3), random_batch(generator, 3, 5, 3)]
    with pytest.raises(torch.utils.checkpoint.CheckpointError):
        forward_and_backward(team, batches, joint=True)


def joint_names(team: AgentTeam, batches: list[AgentBatch | None]) -> list[str] | None:
    """The adapter of each row when the team's forward runs the batches as one forward, else None."""
    rows = team.logprob_forwards._joint_adapter_rows(batches)
    return None if rows is None else rows[0]


def test_where_the_team_keeps_one_forward_per_agent(target_model_dir):
    generator = torch.Generator().manual_seed(0)
    batches = [random_batch(generator, 2, 4, 3) for _ in range(3)]
    team = build_team(target_model_dir)
    assert joint_names(team, batches) == ["agent_0"] * 2 + ["agent_1"] * 2 + ["agent_2"] * 2
    # a frozen agent (no batch) is left out; a single agent with rows runs alone
    assert joint_names(team, [batches[0], None, batches[2]]) == ["agent_0"] * 2 + ["agent_2"] * 2
    assert joint_names(team, [batches[0], None, None]) is None
    team.joint_adapter_forward = False
    assert joint_names(team, batches) is None
    # LoRA dropout in train mode: the per-agent forwards keep TRL's layout and dropout draws
    assert joint_names(build_team(target_model_dir, dropout=0.1), batches) is None
    # a full model per agent has nothing to share
    models = AgentTeam.build(target_model_dir, 3, mode="models")
    models.train()
    assert joint_names(models, batches) is None


def test_slicing_a_model_in_train_mode_is_asked_for(target_model_dir):
    team = build_team(target_model_dir, num_agents=2)
    model, names = team.models[0], ["agent_0", "agent_1"]
    assert sliced_adapter_rows_unsupported(model, names) == "train mode"  # PEFT's rule, by default
    assert sliced_adapter_rows_unsupported(model, names, training=True) is None
    with sliced_adapter_rows(model, names, training=True) as sliced:
        assert sliced
    with pytest.raises(ValueError, match="training mode"), sliced_adapter_rows(model, names):
        model(input_ids=torch.tensor([[4, 5], [6, 7]]))  # PEFT's hooks, which refuse it


def train(model_dir: str, out: str, capture_cls: type, joint: bool, **overrides: Any) -> tuple[MAGRPOTrainer, Any]:
    capture = capture_cls()  # conftest's `GradientCapture`
    settings = dict(output_dir=out, num_agents=3, team_mode="adapters", num_generations=4,
                    per_device_train_batch_size=8, max_completion_length=4, learning_rate=1e-2, max_steps=2,
                    logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, seed=0,
                    max_grad_norm=0.0, backward_per_agent=False)
    trainer = MAGRPOTrainer(model=model_dir, reward_funcs=spread_reward, env=TargetSumEnv(3),
                            args=MAGRPOConfig(**{**settings, **overrides}),
                            train_dataset=Dataset.from_dict({"target": [10] * 32}),
                            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                   lora_dropout=0.0),
                            callbacks=[capture])
    trainer.team.joint_adapter_forward = joint
    capture.team = trainer.team
    trainer.joint_forwards = []  # per joint forward: whether it built a graph (training) or not (reference, old)
    joint_forward = trainer.team.logprob_forwards._joint_forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        trainer.joint_forwards.append(torch.is_grad_enabled())
        return joint_forward(*args, **kwargs)

    trainer.team.logprob_forwards._joint_forward = counting
    trainer.train()
    return trainer, capture


def test_a_trainer_trains_alike_with_one_forward(target_model_dir, tmp_path, assert_same_gradients,
                                                 gradient_capture):
    settings = dict(gradient_checkpointing=True, frozen_agents=[1], beta=0.04, num_iterations=2,
                    gradient_accumulation_steps=2, per_device_train_batch_size=4)
    joint, joint_grads = train(target_model_dir, str(tmp_path / "joint"), gradient_capture, True, **settings)
    alone, alone_grads = train(target_model_dir, str(tmp_path / "alone"), gradient_capture, False, **settings)
    # 2 steps of 2 micro-batches, each used twice (num_iterations): 4 training forwards; the reference and the old
    # policy score the 2 micro-batches of the one generation: 4 no-grad forwards
    assert sorted(joint.joint_forwards) == [False] * 4 + [True] * 4 and alone.joint_forwards == []
    assert len(joint_grads.grads) == len(alone_grads.grads) == 2
    assert_same_gradients(joint_grads.grads, alone_grads.grads, rtol=1e-4, atol=1e-6)
    for (name, p), q in zip(joint.team.named_parameters(), alone.team.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    for mine, theirs in zip(joint.state.log_history, alone.state.log_history):
        for key, value in theirs.items():
            if "time" not in key and "per_second" not in key and key != "grad_norm":
                assert mine[key] == pytest.approx(value, rel=1e-4, abs=1e-6, nan_ok=True), key


def test_a_compiled_joint_forward_keeps_its_graph_across_steps(target_model_dir, graph_counter):
    """The row slices installed for a joint forward are the same objects at every step of the same layout (a
    compiled forward guards on each layer's `forward`), so steps with new lengths reuse the graph."""
    team = build_team(target_model_dir, num_agents=2)
    counter = graph_counter()
    team.compile_forwards(backend=counter)
    generator = torch.Generator().manual_seed(0)
    for step in range(4):
        batches = [random_batch(generator, 4, 3 + step, 2 + step), random_batch(generator, 4, 5, 2 + 2 * step)]
        compiled = [logps.detach() for logps, _ in team(batches)]
        if step == 0:
            graphs = counter.graphs
        compiled_call, team.forward_call = team.forward_call, call_model
        eager = [logps.detach() for logps, _ in team(batches)]
        team.forward_call = compiled_call
        for a, b in zip(compiled, eager):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert team.forward_call.failure is None
    assert graphs >= 1 and counter.graphs == graphs, "a new step recompiled"
