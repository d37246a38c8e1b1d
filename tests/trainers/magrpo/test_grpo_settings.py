"""GRPO settings in a team beyond what one agent can compare with `GRPOTrainer` (that is `test_grpo_equivalence.py`):
per-agent entropy control and its checkpoints, the float32 LM head in LoRA teams, evaluation with several episodes
per row, and continuous-batching generation."""

from __future__ import annotations

import json
import os
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import GenerationConfig

from helpers import spread_reward
from trl_marl import AgentTeam, MAGRPOConfig, MAGRPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.toy import build_toy_model, build_toy_tokenizer
from trl_marl.trainers.magrpo.entropy import ENTROPY_STATE_FILE, EntropyControl
from trl_marl.utils.precision import Float32Head, cast_lm_head_to_fp32

warnings.filterwarnings("ignore")
# a tiny paged cache: transformers sizes the default one from the free memory, which takes seconds to set up on CPU
SMALL_CACHE = {"num_blocks": 16, "page_size": 32, "max_batch_tokens": 256}


def config(tmp_path, **overrides) -> MAGRPOConfig:
    kwargs = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=8,
        max_completion_length=4, learning_rate=3e-3, max_steps=1, logging_steps=1, report_to="none",
        save_strategy="no", gradient_checkpointing=False, disable_tqdm=True, seed=0,
    )
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def trainer_for(model_dir, tmp_path, peft_config=None, **overrides) -> MAGRPOTrainer:
    return MAGRPOTrainer(model=model_dir, reward_funcs=spread_reward, env=TargetSumEnv(2),
                         args=config(tmp_path, **overrides), train_dataset=Dataset.from_dict({"target": [10] * 16}),
                         peft_config=peft_config)


# ------------------------------------------------------------------------------------------------ entropy control
class OneProcess:
    device = torch.device("cpu")

    @staticmethod
    def reduce(tensor, reduction):
        return tensor


def test_each_agent_has_its_own_adaptive_entropy_coefficient(tmp_path):
    args = SimpleNamespace(entropy_coef=0.1, use_adaptive_entropy=True, entropy_target=0.5, entropy_coef_delta=0.05,
                           entropy_coef_min=0.0, entropy_coef_max=1.0)
    control = EntropyControl(args, agents=[0, 2])  # agent 1 is frozen: no loss, no coefficient
    mask = torch.ones(1, 4)
    # no bonus before a measurement: step 1 leaves the loss alone whatever the coefficient
    assert control.bonus(0, torch.full((1, 4), 0.2), mask, scale=1.0, train=True).item() == 0.0
    assert control.bonus(2, torch.full((1, 4), 0.9), mask, scale=1.0, train=True).item() == 0.0
    metrics = defaultdict(list)
    control.end_step(OneProcess(), metrics)
    # agent 0's entropy (0.2) is under the target: more bonus, applied; agent 2's (0.9) is over: less, not applied
    assert metrics == {"agent_0/entropy_coef": [pytest.approx(0.15)], "agent_2/entropy_coef": [pytest.approx(0.05)]}
    entropy = torch.full((2, 4), 0.3, requires_grad=True)
    bonus = control.bonus(0, entropy, torch.ones(2, 4), scale=2.0, train=True)  # / 2 accumulation steps
    assert bonus.item() == pytest.approx(0.15 * 0.3 / 2)
    bonus.backward()
    torch.testing.assert_close(entropy.grad, torch.full((2, 4), 0.15 / 8 / 2))
    assert control.applied_coef(2) == 0.0
    # the window of a step is every micro-step's tokens: (0.3 * 8 + 0.6 * 8) / 16 = 0.45, still under the target
    control.bonus(0, torch.full((2, 4), 0.6), torch.ones(2, 4), scale=2.0, train=True)
    control.end_step(OneProcess(), metrics)
    assert control.last_entropy[0] == pytest.approx(0.45) and control.coefs[0] == pytest.approx(0.2)
    # evaluation neither records nor moves anything
    control.bonus(0, torch.full((1, 4), 5.0), mask, scale=1.0, train=False)
    assert control._window == {}

    control.save(str(tmp_path))
    restored = EntropyControl(args, agents=[0, 2])
    restored.load(str(tmp_path))
    assert restored.coefs == control.coefs and restored.last_entropy == control.last_entropy


def test_adaptive_entropy_state_survives_a_resume(target_model_dir, tmp_path):
    settings = dict(use_adaptive_entropy=True, entropy_coef=0.1, entropy_target=50.0, entropy_coef_delta=0.1,
                    max_steps=2, save_strategy="steps", save_steps=1)
    full = trainer_for(target_model_dir, tmp_path / "full", **settings)
    full.train()
    checkpoint = os.path.join(full.args.output_dir, "checkpoint-1")
    with open(os.path.join(checkpoint, ENTROPY_STATE_FILE)) as f:
        saved = json.load(f)
    assert saved["0"]["entropy_coef"] == pytest.approx(0.2) and saved["1"]["last_entropy"] < 50.0
    resumed = trainer_for(target_model_dir, tmp_path / "resumed", **settings)
    resumed.train(resume_from_checkpoint=checkpoint)
    # step 2 of the resumed run applies the restored coefficient (0.2, not a fresh controller's nothing) and ends
    # where the uninterrupted run ended
    assert resumed.entropy_control.coefs == pytest.approx(full.entropy_control.coefs) == {0: 0.3, 1: 0.3}
    for a in range(2):
        last = [h for h in full.state.log_history if f"agent_{a}/loss" in h][-1]
        again = [h for h in resumed.state.log_history if f"agent_{a}/loss" in h][-1]
        assert again[f"agent_{a}/loss"] == pytest.approx(last[f"agent_{a}/loss"], abs=1e-6)
        assert again[f"agent_{a}/policy_loss"] - again[f"agent_{a}/loss"] == pytest.approx(
            0.2 * again[f"agent_{a}/entropy"], rel=1e-4)


# ------------------------------------------------------------------------------------------- float32 LM head
def test_cast_lm_head_to_fp32_computes_logits_in_float32():
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=16, num_layers=1).to(torch.bfloat16)
    assert model.config.tie_word_embeddings
    ids = torch.tensor([[1, 5, 6, 7]])
    bf16_logits = model(ids).logits
    cast_lm_head_to_fp32(model)
    cast_lm_head_to_fp32(model)  # idempotent
    out = model(ids, output_hidden_states=True)
    assert isinstance(model.lm_head, Float32Head) and out.logits.dtype == torch.float32
    # the logits are the float32 product of the (bf16) final hidden states and the float32 head
    expected = out.hidden_states[-1].float() @ model.lm_head.weight.float().T
    torch.testing.assert_close(out.logits, expected, atol=1e-6, rtol=0)
    assert (out.logits - bf16_logits.float()).abs().max() > 1e-4  # not the bf16 product
    # tied embeddings: the decoder still receives bf16 activations, even under CPU autocast
    assert model.get_input_embeddings()(ids).dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(ids).logits.dtype == torch.float32


def test_cast_lm_head_to_fp32_refuses_a_lora_head():
    model = build_toy_model(build_toy_tokenizer(), hidden_size=16, num_layers=1)
    from peft import get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(ValueError, match="remove 'lm_head' from the adapter's `target_modules`"):
        cast_lm_head_to_fp32(peft_model)


def test_lora_team_takes_log_probs_from_a_float32_head(target_model_dir, tmp_path):
    # adapters mode: one bf16 base model under both agents' adapters; the agents' log-probs (with gradients to
    # their adapters) come from the float32 head, and the step trains
    trainer = trainer_for(target_model_dir, tmp_path, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]),
                          cast_lm_head_to_fp32=True, model_init_kwargs={"dtype": torch.bfloat16}, beta=0.04)
    team = trainer.team
    assert team.mode == "adapters" and isinstance(team.models[0].get_output_embeddings(), Float32Head)
    batch = trainer._make_batch([{"target": 10}] * 2, mode="train")["batches"]
    logps, _ = team([batch[0], None])[0]
    assert logps.dtype == torch.float32 and logps.requires_grad
    with team.acting(0) as model:
        out = model(input_ids=batch[0].input_ids, attention_mask=batch[0].attention_mask, output_hidden_states=True)
    assert out.logits.dtype == torch.float32
    before = {k: v.clone() for k, v in team.state_dict().items() if "lora_B" in k}
    trainer.train()
    assert any(not torch.equal(v, team.state_dict()[k]) for k, v in before.items())


# ------------------------------------------------------------------------------------------ num_generations_eval
class EchoVerifier:
    """Extracts the completion itself; right when it equals the gold answer."""

    def extract(self, response):
        return response.strip() or None

    def score(self, response, gold):
        return float(self.extract(response) == str(gold))


def test_num_generations_eval_plays_several_episodes_per_row(target_model_dir, tmp_path):
    calls = []

    def reward(prompts, completions, target, **kwargs):
        calls.append(list(target))
        return [float(i) for i in range(len(completions))]

    reward.reward_isolation = "thread"  # the test reads `calls`: run in the trainer's process, not in a worker

    rows = Dataset.from_dict({"target": [10, 11, 12], "answer": ["5", "5", "5"]})
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=reward, env=TargetSumEnv(2),
                            args=config(tmp_path, num_generations_eval=4, per_device_eval_batch_size=8),
                            train_dataset=Dataset.from_dict({"target": [10] * 8}), eval_dataset=rows,
                            eval_verifier=EchoVerifier())
    metrics = trainer.evaluate()
    # 8 episodes per batch: two rows of four episodes, then the last row's four
    assert calls == [[10] * 4 + [11] * 4, [12] * 4]
    assert metrics["eval_num_debates"] == 12
    assert metrics["eval_reward"] == pytest.approx((sum(range(8)) + sum(range(4))) / 12)

    defaults = config(tmp_path)
    assert defaults.num_generations_eval == 1  # MAGRPO's default: one episode per row
    assert config(tmp_path, num_generations_eval=None).num_generations_eval == 4  # GRPO's: num_generations
    with pytest.raises(ValueError, match="num_generations_eval"):
        config(tmp_path, num_generations_eval=0)


# ------------------------------------------------------------------------------------------ scale_rewards="batch"
def test_batch_scaling_takes_the_std_of_every_process(target_model_dir, tmp_path, monkeypatch):
    # The trainer's rollout pools each turn's team returns over the processes through the accelerator, as TRL's
    # GRPOTrainer gathers its rewards before `scale_rewards="batch"`'s std. A second process is simulated: it holds
    # team returns [0, 10, 0, 10] (padded to this process's 4 rows + 2 with NaN rows, as `pad_across_processes`
    # pads), this one [0, 1, 0, 1]: std([0, 1, 0, 1, 0, 10, 0, 10]) = sqrt(141.5 / 7) -> +-.11121 (this process
    # alone: +-.866).
    from trl_marl.rollout import Node, Rollout, TurnResult, assign_advantages

    trainer = trainer_for(target_model_dir, tmp_path, scale_rewards="batch")
    accelerator = trainer.accelerator
    other = torch.tensor([[1.0, 0.0], [1.0, 10.0], [1.0, 0.0], [1.0, 10.0]] + [[float("nan")] * 2] * 2,
                         dtype=torch.float64)
    monkeypatch.setattr(type(accelerator), "num_processes", property(lambda self: 2))
    monkeypatch.setattr(accelerator, "pad_across_processes", lambda rows, dim, pad_index: torch.cat(
        [rows, torch.full((2, 2), pad_index, dtype=rows.dtype)]), raising=False)
    monkeypatch.setattr(accelerator, "gather", lambda rows: torch.cat([rows, other]), raising=False)
    turn = TurnResult(1, [Node(0, None)], [], [], [], [], torch.zeros(0), torch.zeros(0),
                      torch.tensor([[0.0, 1.0, 0.0, 1.0]]))
    trainer.joint_rollout._backup([turn])  # the engine's returns, pooled over the processes
    rollout = Rollout(turns=[turn], generation_time=0.0, generated_tokens=0, nonfinite_rewards=0)
    assign_advantages([turn], trainer.compute_advantages(rollout))  # then the trainer's estimator, as in a step
    a = 0.5 / ((141.5 / 7) ** 0.5 + 1e-4)
    assert a == pytest.approx(0.11121, abs=1e-5)
    torch.testing.assert_close(turn.advantages, torch.tensor([[[-a, a, -a, a]] * 2]))


# ------------------------------------------------------------------------------------------ continuous batching
def test_continuous_batching_generates_what_generate_generates(target_model_dir):
    # greedy decoding: the paged engine must give each prompt generate's completion, in order, cut after EOS
    team = AgentTeam.build([target_model_dir, target_model_dir], num_agents=2)
    greedy = GenerationConfig(max_new_tokens=4, do_sample=False, pad_token_id=team.tokenizers[0].pad_token_id,
                              eos_token_id=team.tokenizers[0].eos_token_id)
    prompts = [["T=10:", "T=10: 3+", "T=1"], ["T=10: 9+", "T=", "T=10:"]]
    expected = team.generate(prompts, greedy)
    from transformers.generation import ContinuousBatchingConfig

    team.continuous_batching_config = ContinuousBatchingConfig(**SMALL_CACHE)
    for model in team.models:
        model.generate = None  # not used any more
    assert team.generate(prompts, greedy) == expected
    assert any(ids for _, completions in expected for ids in completions)


@pytest.mark.parametrize(("team_mode", "lora"), [("models", False), ("models", True), ("shared", False)])
def test_continuous_batching_trains_models_and_shared_teams(target_model_dir, tmp_path, team_mode, lora):
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"]) if lora else None
    trainer = trainer_for(target_model_dir, tmp_path, peft_config=peft_config, team_mode=team_mode,
                          use_transformers_continuous_batching=True,
                          transformers_continuous_batching_config=SMALL_CACHE)
    assert trainer.team.continuous_batching_config.num_blocks == 16
    assert trainer.team.continuous_batching_config.max_memory_percent == 0.5  # TRL's default for training
    for model in trainer.team.models:
        model.generate = None
    before = {k: v.clone() for k, v in trainer.team.state_dict().items()}
    trainer.train()
    completions = trainer.last_rollout.turns[0].completion_ids
    assert all(0 < len(ids) <= 4 for agent in completions for ids in agent)
    assert any(not torch.equal(v, trainer.team.state_dict()[k]) for k, v in before.items())


def test_continuous_batching_refuses_an_adapters_team(target_model_dir, tmp_path):
    with pytest.raises(ValueError, match="takes no per-row adapter"):
        trainer_for(target_model_dir, tmp_path, peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
                    use_transformers_continuous_batching=True)
    with pytest.warns(FutureWarning, match="use_transformers_paged"):  # GRPO's deprecated name, same meaning
        args = config(tmp_path, use_transformers_paged=True)
    assert args.use_transformers_continuous_batching


def test_continuous_batching_failures_raise():
    # transformers only logs a failed or missing request; the team refuses a batch that lost completions
    from transformers.generation.continuous_batching.requests import GenerationOutput

    from trl_marl.team import generate_with_continuous_batching

    class Engine:
        def __init__(self, outputs):
            self.outputs = outputs

        def generate_batch(self, rows, **kwargs):
            return {o.request_id: o for o in self.outputs}

    ok = GenerationOutput("req_0", generated_tokens=[5, 2])
    assert generate_with_continuous_batching(Engine([ok]), [[1]], GenerationConfig(), None) == [[5, 2]]
    with pytest.raises(RuntimeError, match="1 of 2 completions"):
        generate_with_continuous_batching(Engine([ok]), [[1], [1]], GenerationConfig(), None)
    failed = GenerationOutput("req_1", error="out of blocks")
    with pytest.raises(RuntimeError, match="first error: out of blocks"):
        generate_with_continuous_batching(Engine([ok, failed]), [[1], [1]], GenerationConfig(), None)


def test_generation_kwargs_override_the_default_stop_tokens(target_model_dir, tmp_path):
    """`generation_kwargs={"eos_token_id": [...]}` (e.g. stop at a closing code fence too) replaces the model's end
    token; it used to reach `GenerationConfig` twice (a `TypeError`)."""
    from trl_marl.trainers.magrpo.sampling_config import generation_config

    team = AgentTeam.build(target_model_dir, 2, mode="models")
    plain = generation_config(config(tmp_path), team)
    stops = [team.tokenizers[0].eos_token_id, 7]
    custom = generation_config(config(tmp_path, generation_kwargs={"eos_token_id": stops, "top_k": 3}), team)
    assert plain.eos_token_id != stops
    assert (custom.eos_token_id, custom.top_k, custom.temperature) == (stops, 3, plain.temperature)
