"""MAGRPOTrainer behaviour: learning, multi-turn trees, team modes, checkpoints, and clear errors."""

from __future__ import annotations

import json
import math
import os
import warnings

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig

from trl_marl import AgentTeam, MAGRPOConfig, MAGRPOTrainer, NonFiniteError, RewardFunctionError
from trl_marl.envs import PromptEnv, TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.team import Generation
from trl_marl.toy import build_toy_tokenizer

warnings.filterwarnings("ignore")
TARGET = 10


def config(tmp_path, **overrides) -> MAGRPOConfig:
    kwargs = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=8, per_device_train_batch_size=64,
        max_completion_length=4, learning_rate=3e-3, lr_scheduler_type="constant", max_steps=3, logging_steps=1,
        report_to="none", save_strategy="no", gradient_checkpointing=False, temperature=1.0, disable_tqdm=True,
        seed=0,
    )
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def dataset(n: int = 256) -> Dataset:
    return Dataset.from_dict({"target": [TARGET] * n})


def success_rate(trainer: MAGRPOTrainer, episodes: int = 32) -> float:
    rollout = trainer.joint_rollout.run([{"target": TARGET}] * episodes)
    return float((rollout.turns[0].rewards == 1.0).float().mean())


@pytest.mark.slow
def test_two_agents_learn_to_coordinate(target_model_dir, tmp_path):
    # lr 2e-3 for 80 steps, not the suite's 3e-3 for 60: at 3e-3 one Adam step can push a near-deterministic team onto
    # an answer that is wrong in every sample, after which every group has zero advantage and nothing is learnt again
    # (scripts/demo.py's MAGRPO_LEARNING_RATE). 3e-3/60 passed on 6 of seeds 0-7 on one machine, and which seeds pass
    # moves with the CPU's float summation; 2e-3/80 passed on 16 of 16 (converged by step 35-67); lr 0 fails.
    torch.manual_seed(0)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=config(tmp_path, learning_rate=2e-3, max_steps=80), train_dataset=dataset(1024))
    before = success_rate(trainer)
    trainer.train()
    after = success_rate(trainer)
    assert before < 0.3
    assert after > 0.6 and after > before + 0.4, (before, after)
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5 + 0.3, rewards
    # the metrics a user expects are logged per agent and per turn
    logged = set().union(*(h.keys() for h in trainer.state.log_history))
    for key in ("agent_0/entropy", "agent_1/clip_ratio", "agent_1/completion_length", "turn_1/reward",
                "rewards/target_sum/mean", "rewards/target_sum/std", "agent_0/turn_1/advantage_abs_mean",
                "tokens_per_second", "frac_reward_zero_std"):
        assert key in logged, key


@pytest.mark.parametrize("joint_mode", ["aligned", "cross"])
def test_multi_turn_tree_returns(target_model_dir, tmp_path, joint_mode):
    G, gamma = 2, 0.5
    trainer = MAGRPOTrainer(
        model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, num_turns=2),
        args=config(tmp_path, num_turns=2, num_generations=G, per_device_train_batch_size=4, joint_mode=joint_mode,
                    discount=gamma, max_steps=2),
        train_dataset=dataset(),
    )
    trainer.train()
    rollout = trainer.last_rollout
    assert [t.turn for t in rollout.turns] == [1, 2]
    first, second = rollout.turns
    J = G if joint_mode == "aligned" else G**2
    K = 4 // G
    assert first.rewards.shape == (K, J)
    assert len(second.nodes) == K * J  # every joint action continues
    # turn-2 prompts show the turn-1 joint action: own answer first, then the partner's
    for (k, j), c in first.children.items():
        node = second.nodes[c]
        a0 = first.completions[0][k * G + int(first.joint_indices[j, 0])]
        a1 = first.completions[1][k * G + int(first.joint_indices[j, 1])]
        assert node.transcript[0].responses == (a0, a1)
        assert second.prompts[0][c * G] == f"T={TARGET}:{a0.strip()}+{a1.strip()}:"
        assert second.prompts[1][c * G] == f"T={TARGET}:{a1.strip()}+{a0.strip()}:"
        # R_1 = r_1 + gamma * mean over the child's joint actions of R_2 (= r_2 at the last turn)
        expected = first.rewards[k, j] + gamma * second.rewards[c].mean()
        assert math.isclose(float(first.returns[k, j]), float(expected), abs_tol=1e-6)
    # credit: in cross mode each completion gets the mean return of the joint actions containing it
    for k in range(K):
        for a in range(2):
            for g in range(G):
                rows = (first.joint_indices[:, a] == g)
                assert math.isclose(float(first.agent_returns[k, a, g]), float(first.returns[k, rows].mean()),
                                    abs_tol=1e-6)
    # advantages are R - mean(R) among the G samples of each agent at each node
    expected_adv = first.agent_returns - first.agent_returns.mean(dim=-1, keepdim=True)
    torch.testing.assert_close(first.advantages, expected_adv)


def test_branching_cap_and_early_stop(target_model_dir, tmp_path):
    trainer = MAGRPOTrainer(
        model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, num_turns=3),
        args=config(tmp_path, num_turns=3, num_generations=4, per_device_train_batch_size=8, max_branches=2,
                    max_steps=1),
        train_dataset=dataset(),
    )
    rollout = trainer.joint_rollout.run([{"target": TARGET}] * 2)
    assert [len(t.nodes) for t in rollout.turns] == [2, 4, 8]  # each node continues 2 of its 4 joint actions
    first = rollout.turns[0]
    assert len(first.capped) == 4
    for k, j in first.capped:  # a capped joint action is credited the mean future of its continued siblings
        siblings = [rollout.turns[1].returns[c].mean() for (kk, _), c in first.children.items() if kk == k]
        expected = first.rewards[k, j] + sum(siblings) / len(siblings)
        assert math.isclose(float(first.returns[k, j]), float(expected), abs_tol=1e-5)

    trainer.joint_rollout.early_stop_threshold = -10.0  # every node is "good enough": nothing continues
    assert len(trainer.joint_rollout.run([{"target": TARGET}] * 2).turns) == 1


@pytest.mark.parametrize("team_mode", ["adapters", "models", "shared"])
def test_modes_train_checkpoint_and_resume(target_model_dir, tmp_path, team_mode):
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0) if (
        team_mode == "adapters") else None
    args = config(tmp_path, team_mode=team_mode, max_steps=4, save_strategy="steps", save_steps=2,
                  per_device_train_batch_size=16, beta=0.05)
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                            train_dataset=dataset(), peft_config=peft_config)
    initial = {k: v.clone() for k, v in trainer.team.state_dict().items()}
    trainer.train()
    assert any(not torch.equal(initial[k], v) for k, v in trainer.team.state_dict().items())
    checkpoint = os.path.join(args.output_dir, "checkpoint-2")
    for name in ("agent_0", "agent_1", "team_config.json", "trainer_state.json", "README.md"):
        assert os.path.exists(os.path.join(checkpoint, name)), name
    card = open(os.path.join(checkpoint, "README.md")).read()
    assert "MAGRPO" in card and "2508.04652" in card and "agent_1" in card and "target_sum" in card
    logged = set().union(*(h.keys() for h in trainer.state.log_history))
    assert "agent_0/kl" in logged

    # the final save loads back to the same policy
    trainer.save_model(str(tmp_path / "final"))
    loaded = AgentTeam.from_pretrained(tmp_path / "final")
    assert loaded.mode == team_mode
    batch = trainer._make_batch([{"target": TARGET}] * 2, mode="eval")["batches"]
    for a in range(2):
        torch.testing.assert_close(loaded.policy_logps(a, batch[a]), trainer.team.policy_logps(a, batch[a]))

    # resuming from checkpoint-2 reproduces the weights of the uninterrupted run at step 4
    resumed = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=config(tmp_path, team_mode=team_mode, max_steps=4, per_device_train_batch_size=16,
                                        beta=0.05, output_dir=str(tmp_path / "resumed")),
                            train_dataset=dataset(), peft_config=peft_config)
    resumed.train(resume_from_checkpoint=checkpoint)
    assert resumed.state.global_step == 4
    reference = AgentTeam.from_pretrained(os.path.join(args.output_dir, "checkpoint-2"))
    moved = [k for k, v in resumed.team.state_dict().items()
             if k in reference.state_dict() and not torch.equal(v, reference.state_dict()[k])]
    assert moved, "resuming must continue training from the checkpoint's weights"


def test_plain_trl_reward_function_with_prompt_dataset(tmp_path):
    tokenizer = build_toy_tokenizer()
    from trl_marl.toy import build_toy_model

    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)

    def digit_count(prompts, completions, **kwargs):  # a TRL-style function: no multi-agent kwargs needed
        return [float(sum(ch.isdigit() for ch in c)) for c in completions]

    trainer = MAGRPOTrainer(model=model, reward_funcs=digit_count, processing_class=tokenizer,
                            args=config(tmp_path, num_agents=1, per_device_train_batch_size=16),
                            train_dataset=Dataset.from_dict({"prompt": ["Q:1+2=A:", "Q:3+4=A:"] * 8}))
    trainer.train()
    assert isinstance(trainer.env, PromptEnv)
    assert trainer.state.global_step == 3


# ----------------------------------------------------------------------------------------------- bad input
def test_missing_dataset_column_is_named(target_model_dir, tmp_path):
    with pytest.raises(KeyError, match="target"):
        MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(2),
                      args=config(tmp_path), train_dataset=Dataset.from_dict({"goal": [10] * 8}))


def test_num_generations_below_two(tmp_path):
    with pytest.raises(ValueError, match="num_generations"):
        config(tmp_path, num_generations=1, per_device_train_batch_size=8)


def test_unimplemented_grpo_setting_is_refused(tmp_path):
    # a refused setting says why
    with pytest.raises(ValueError, match="router_aux_loss_coef=0.5 \\(not implemented yet: the team's forward"):
        config(tmp_path, router_aux_loss_coef=0.5)
    with pytest.raises(ValueError, match="log_unique_prompts=True"):
        config(tmp_path, log_unique_prompts=True)
    # GRPO settings that MAGRPO implements still refuse values that make no sense
    with pytest.raises(ValueError, match="off_policy_mask_threshold"):
        config(tmp_path, off_policy_mask_threshold=-0.1)
    with pytest.raises(ValueError, match="entropy_coef_min <= entropy_coef_max"):
        config(tmp_path, use_adaptive_entropy=True, entropy_coef_min=0.5, entropy_coef_max=0.1)
    with pytest.raises(ValueError, match="entropy_coef_delta"):
        config(tmp_path, use_adaptive_entropy=True, entropy_coef_delta=0.0)
    with pytest.raises(ValueError, match="num_iterations"):
        config(tmp_path, num_iterations=0)
    with pytest.raises(ValueError, match="loss_type"):
        config(tmp_path, loss_type="cispo")


def test_env_and_config_must_agree(target_model_dir, tmp_path):
    with pytest.raises(ValueError, match="num_agents"):
        MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(3),
                      args=config(tmp_path), train_dataset=dataset())


@pytest.mark.parametrize(
    "reward, match",
    [
        (lambda prompts, completions, **kw: [1.0] * (len(completions) - 1), "returned .* values"),
        (lambda prompts, completions, **kw: 1 / 0, "raised ZeroDivisionError"),
        (lambda prompts, completions, **kw: None, "returned NoneType"),
    ],
)
def test_bad_reward_functions_fail_before_the_first_update(target_model_dir, tmp_path, reward, match):
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=reward, env=TargetSumEnv(2), args=config(tmp_path),
                            train_dataset=dataset())
    before = {k: v.clone() for k, v in trainer.team.state_dict().items()}
    with pytest.raises(RewardFunctionError, match=match):
        trainer.train()
    assert all(torch.equal(before[k], v) for k, v in trainer.team.state_dict().items())


def test_tokenizers_that_cannot_share_a_batch(target_model_dir, tmp_path):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(target_model_dir)
    other.add_tokens(["<extra>"])
    with pytest.raises(ValueError, match="agent 1"):
        MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(2),
                      processing_class=[AutoTokenizer.from_pretrained(target_model_dir), other],
                      peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
                      args=config(tmp_path, team_mode="adapters"), train_dataset=dataset())


def test_nonfinite_rewards_are_skipped_counted_then_fatal(target_model_dir, tmp_path):
    calls = {"n": 0}

    def sometimes_nan(prompts, completions, **kwargs):
        calls["n"] += 1
        return [float("nan")] + [1.0 if i % 2 else 0.0 for i in range(len(completions) - 1)]

    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=sometimes_nan, env=TargetSumEnv(2),
                            args=config(tmp_path, max_steps=2, max_nonfinite=5), train_dataset=dataset())
    trainer.train()
    first = trainer.last_rollout.turns[0]
    assert torch.isnan(first.rewards[0, 0])  # skipped, not replaced
    assert torch.all(first.advantages[0, :, 0] == 0)  # ... and carries no learning signal
    assert all(math.isfinite(float(x)) for x in first.advantages.flatten())
    counted = [h["nonfinite/rewards"] for h in trainer.state.log_history if "nonfinite/rewards" in h]
    assert sum(counted) == 2  # one per step

    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=sometimes_nan, env=TargetSumEnv(2),
                            args=config(tmp_path, max_steps=10, max_nonfinite=3), train_dataset=dataset())
    with pytest.raises(NonFiniteError, match="max_nonfinite=3"):
        trainer.train()


def test_team_config_records_layout(target_model_dir, tmp_path):
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(2),
                            args=config(tmp_path, max_steps=1), train_dataset=dataset())
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    with open(tmp_path / "saved" / "team_config.json") as f:
        layout = json.load(f)
    assert layout["mode"] == "models" and layout["num_agents"] == 2


@pytest.mark.parametrize("team_mode", ["models", "adapters"])
def test_frozen_partner_is_not_trained(target_model_dir, tmp_path, team_mode):
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                             init_lora_weights=False) if team_mode == "adapters" else None
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                            args=config(tmp_path, team_mode=team_mode, frozen_agents=[1], max_steps=3, beta=0.05),
                            train_dataset=dataset(), peft_config=peft_config)

    def agent_params(a: int) -> dict[str, torch.Tensor]:
        model = trainer.team.policy(a)
        name = trainer.team.agent_adapter[a]
        return {k: v.detach().clone() for k, v in model.named_parameters()
                if name is None or f".{name}." in k}

    before = [agent_params(0), agent_params(1)]
    trainer.train()
    after = [agent_params(0), agent_params(1)]
    assert any(not torch.equal(before[0][k], after[0][k]) for k in before[0])
    assert all(torch.equal(before[1][k], after[1][k]) for k in before[1])
    assert "agent_1/loss" not in set().union(*(h.keys() for h in trainer.state.log_history))
    with pytest.raises(ValueError, match="frozen_agents"):
        config(tmp_path, frozen_agents=[0, 1])


def test_dapo_normalises_over_the_whole_accumulated_step(target_model_dir, tmp_path, monkeypatch):
    # gradient_accumulation_steps = 2, one episode of G = 2 samples per micro-step. Micro-step 1's completions have
    # 1 token each (2 tokens), micro-step 2's 3 tokens each (6 tokens): 8 tokens in the step. DAPO weighs every token
    # of the step alike: d loss / d l_token = 1/8 = 0.125 in both micro-steps (a per-micro-step normaliser gave
    # 1/2 * 1/2 = 0.25 and 1/6 * 1/2 = 0.083).
    import trl_marl.trainers.magrpo.trainer as module

    trainer = MAGRPOTrainer(
        model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
        args=config(tmp_path, num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                    loss_type="dapo", beta=0.0),
        train_dataset=dataset(),
    )
    tok = trainer.team.tokenizers[0]
    digit = tok.convert_tokens_to_ids("3")

    def scripted_generate(prompts, generation_config, chat_template_kwargs=None):
        # the step's two episodes are played together: samples 0-1 are micro-step 1's, samples 2-3 micro-step 2's
        short, long = [tok.eos_token_id], [digit, digit, tok.eos_token_id]
        return Generation([[tok(p)["input_ids"] for p in ps] for ps in prompts],
                          [[short if i < 2 else long for i in range(len(ps))] for ps in prompts])

    trainer.team.generate = scripted_generate
    weights: list[torch.Tensor] = []

    def spy_surrogate(logps, old, advantages, **kwargs):  # per-token loss = a leaf we can read the gradient of
        leaf = torch.ones_like(logps, requires_grad=True)
        weights.append(leaf)
        return leaf, torch.zeros_like(logps, dtype=torch.bool)

    monkeypatch.setattr(module, "clipped_surrogate", spy_surrogate)
    steps, _ = trainer.get_batch_samples(iter([[{"target": TARGET}], [{"target": TARGET}]]), 2, None)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    per_token = []
    for step in steps:
        group = step.group
        if group.batches is None:
            group.batches = trainer._make_batches(group.row_batches, mode="train")
        batch = group.batches[step.index]
        assert [int(n) for n in batch["num_items"]] == [8, 8]  # each agent: 2 + 6 tokens
        weights.clear()
        trainer.compute_loss(trainer.model, batch).backward()
        for a, leaf in enumerate(weights):
            mask = batch["batches"][a].completion_mask.bool()
            per_token.append(leaf.grad[mask])
            assert (leaf.grad[~mask] == 0).all()
    assert [len(g) for g in per_token] == [2, 2, 6, 6]
    for grads in per_token:
        torch.testing.assert_close(grads, torch.full_like(grads, 0.125))


def test_no_learning_signal_is_diagnosed(target_model_dir, tmp_path):
    # A reward that returns a constant gives every group zero std: every advantage and gradient is 0. The trainer
    # logs the streak of such steps and warns once when it reaches `zero_std_warning_steps` (here 3 of 5 steps).
    # The entropy threshold is set above any entropy so that the entropy-collapse warning fires too (after 2 steps).
    from trl_marl.trainers.magrpo import TrainingDiagnosticWarning

    def constant(prompts, completions, **kwargs):
        return [1.0] * len(completions)

    trainer = MAGRPOTrainer(
        model=target_model_dir, reward_funcs=constant, env=TargetSumEnv(2),
        args=config(tmp_path, max_steps=5, per_device_train_batch_size=16, zero_std_warning_steps=3,
                    entropy_warning_threshold=100.0, entropy_warning_steps=2,
                    no_signal_warning_interval=None),  # the immediate no-signal warning: test_no_signal_warning.py
        train_dataset=dataset(),
    )
    with pytest.warns(TrainingDiagnosticWarning) as record:
        trainer.train()
    messages = [str(w.message) for w in record if issubclass(w.category, TrainingDiagnosticWarning)]
    assert len(messages) == 2  # each diagnosis warns once, not at every step
    zero_std = next(m for m in messages if "same return" in m)
    assert "not learning" in zero_std and "learning_rate" in zero_std and "beta" in zero_std
    assert any("entropy" in m and "agent(s) [0, 1]" in m for m in messages)
    key = "diagnostics/zero_std_streak"
    streaks = [h[key] for h in trainer.state.log_history if key in h]
    assert streaks == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert all(h["frac_reward_zero_std"] == 1.0 for h in trainer.state.log_history if "frac_reward_zero_std" in h)


def test_a_learning_run_is_not_diagnosed(target_model_dir, tmp_path):
    import warnings as _warnings

    from trl_marl.trainers.magrpo import TrainingDiagnosticWarning

    trainer = MAGRPOTrainer(
        model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
        args=config(tmp_path, max_steps=4, zero_std_warning_steps=2, entropy_warning_steps=2),
        train_dataset=dataset(),
    )
    with _warnings.catch_warnings(record=True) as record:
        _warnings.simplefilter("always")
        trainer.train()
    assert not [w for w in record if issubclass(w.category, TrainingDiagnosticWarning)]
    key = "diagnostics/zero_std_streak"
    streaks = [h[key] for h in trainer.state.log_history if key in h]
    assert streaks == [0.0] * 4
