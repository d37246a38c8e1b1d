"""`generation_backend="vllm"`: one engine for a team's adapters gives each row its own agent's policy, log-probs equal
to the training model's, adapters that follow training, and a MAGRPO run end to end (see `conftest.py`)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from transformers import GenerationConfig

from trl_marl.team import AgentBatch, AgentTeam, pad_left, pad_right, tokenize_prompts

pytest.importorskip("vllm")
warnings.filterwarnings("ignore")

PROMPTS = [["Q:12+3=A:", "T:5?", "Q:45+67=A:"], ["Q:12+3=A:", "Q:1+1=A:"]]


def greedy(tokenizer: Any, max_new_tokens: int = 6) -> GenerationConfig:
    return GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                            pad_token_id=tokenizer.pad_token_id)


def generate_with(team: AgentTeam, backend: Any, prompts: list[list[str]], config: GenerationConfig) -> list:
    """`team.generate` through `backend` (None: the team's own decoding, the HF path)."""
    team.generation_backend = backend
    try:
        return [completions for _, completions in team.generate(prompts, config)]
    finally:
        team.generation_backend = None


def batch(tokenizer: Any, prompt_ids: list[list[int]], completions: list[list[int]]) -> AgentBatch:
    ids, mask = pad_left(prompt_ids, tokenizer.pad_token_id)
    completion_ids, completion_mask = pad_right(completions, tokenizer.pad_token_id)
    return AgentBatch(ids, mask, completion_ids, completion_mask)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_of_sampled_tokens_equal_the_training_models(served_team: tuple, temperature: float) -> None:
    team, backend = served_team
    tokenizer = team.tokenizers[0]
    prompt_ids = [tokenize_prompts(tokenizer, prompts) * 2 for prompts in PROMPTS]
    config = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, max_new_tokens=8,
                              eos_token_id=tokenizer.eos_token_id)  # no truncation (transformers' default is 50)
    completions, logprobs = backend.generate_with_logprobs(team, prompt_ids, config)
    team.temperature = temperature  # the trainers' log-softmax of logits / temperature
    try:
        for a in range(team.num_agents):
            assert [len(row) for row in completions[a]] == [len(row) for row in logprobs[a]]
            ours = team.policy_logps(a, batch(tokenizer, prompt_ids[a], completions[a]))
            theirs = torch.zeros(ours.shape, dtype=ours.dtype)
            for i, row in enumerate(logprobs[a]):
                theirs[i, : len(row)] = torch.tensor(row, dtype=ours.dtype)
            mask = batch(tokenizer, prompt_ids[a], completions[a]).completion_mask.bool()
            assert mask.sum() > 20
            torch.testing.assert_close(ours[mask], theirs[mask], rtol=0, atol=1e-4)
    finally:
        team.temperature = 1.0


def test_truncation_biases_processed_log_probs_and_the_models_settings_are_used(served_team: tuple) -> None:
    """With top-k on, vLLM's processed log-probs are after truncation: each sampled token's is >= the training
    model's (the log-ratio <= 0), and the backend says so once. Greedy decoding with the model's own repetition
    penalty (its generation_config, not the call's) gives the tokens of the team's own decoding."""
    team, backend = served_team
    tokenizer = team.tokenizers[0]
    prompt_ids = [tokenize_prompts(tokenizer, prompts) for prompts in PROMPTS]
    config = GenerationConfig(do_sample=True, temperature=1.0, top_k=3, max_new_tokens=8,
                              eos_token_id=tokenizer.eos_token_id)
    with pytest.warns(UserWarning, match="top_k=3 .*systematic bias"):
        completions, logprobs = backend.generate_with_logprobs(team, prompt_ids, config)
    gaps = []
    for a in range(team.num_agents):
        agent_batch = batch(tokenizer, prompt_ids[a], completions[a])
        ours = team.policy_logps(a, agent_batch)
        for i, row in enumerate(logprobs[a]):
            gaps += (ours[i, : len(row)] - torch.tensor(row, dtype=ours.dtype)).tolist()
    assert max(gaps) < 1e-4 and min(gaps) < -1e-2  # never above, often below: the ratio shrinks with length
    model_config = team.base_model_of(0).generation_config
    model_config.repetition_penalty = 3.0
    # rows of one length (no padding) and `generate` itself: the lean loop's per-row penalty offsets need
    # transformers >= 5.20, and this virtualenv has vLLM's 5.19
    prompts = [["Q:12+3=A:", "Q:45+6=A:"], ["Q:12+3=A:"]]
    team.lean_decode = False
    try:
        bare = GenerationConfig(do_sample=False, max_new_tokens=8)
        served = generate_with(team, backend, prompts, bare)
        assert served == generate_with(team, None, prompts, bare)
        model_config.repetition_penalty = None
        assert generate_with(team, backend, prompts, bare) != served  # the penalty changed the tokens
    finally:
        model_config.repetition_penalty = None
        team.lean_decode = True


def test_a_colocated_cpu_engine_makes_set_num_threads_a_no_op_and_it_is_said(
        served_team: tuple, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from trl_marl.utils import threads

    if torch.cuda.is_available():
        pytest.skip("vLLM replaces torch.set_num_threads on its CPU build only")
    assert threads.set_num_threads_replaced() is not None  # vLLM's CPU worker did it when the engine started
    monkeypatch.setattr(threads, "_replaced_warned", False)
    before = torch.get_num_threads()
    with caplog.at_level(logging.WARNING, logger=threads.__name__):
        assert threads.apply_cpu_threads([team.models[0] for team in [served_team[0]]], cpu_threads=before + 1,
                                         on_cpu=True) == before
    assert "trl-marl's setting of" in caplog.text and "not applied" in caplog.text


def test_one_call_serves_every_agents_adapter(served_team: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    team, backend = served_team
    tokenizer = team.tokenizers[0]
    calls = []
    engine_generate = backend.llm.generate

    def recording(prompts: Any, sampling_params: Any = None, lora_request: Any = None, **kwargs: Any) -> Any:
        calls.append([request.lora_name for request in lora_request])
        return engine_generate(prompts, sampling_params=sampling_params, lora_request=lora_request, **kwargs)

    monkeypatch.setattr(backend.llm, "generate", recording)
    served = generate_with(team, backend, PROMPTS, greedy(tokenizer))
    assert [[name.split("-v")[0] for name in call] for call in calls] == [["agent_0"] * 3 + ["agent_1"] * 2]
    assert served == generate_with(team, None, PROMPTS, greedy(tokenizer))  # each row its own agent's greedy tokens
    assert served[0][0] != served[1][0]  # the same prompt, two adapters: two policies


def test_adapters_sync_after_a_change_and_no_stale_prefix_cache(served_team: tuple) -> None:
    team, backend = served_team
    tokenizer = team.tokenizers[0]
    long_prompt = [" ".join(["Q:12+3=A:15"] * 30) + " Q:2+2=A:"]  # > 300 tokens: several full KV blocks
    assert len(tokenize_prompts(tokenizer, long_prompt)[0]) > 300
    prompts = [long_prompt, long_prompt]
    before = generate_with(team, backend, prompts, greedy(tokenizer, 4))
    assert before == generate_with(team, None, prompts, greedy(tokenizer, 4))
    uploads = backend.uploads
    with torch.no_grad():  # a new agent 0, as an optimizer step would make it
        for name, param in team.models[0].named_parameters():
            if "lora_B.agent_0." in name:
                param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(1)) * 0.5)
    after = generate_with(team, backend, prompts, greedy(tokenizer, 4))
    assert after == generate_with(team, None, prompts, greedy(tokenizer, 4))  # the new adapter, not cached KV
    assert after[0] != before[0] and after[1] == before[1]
    assert backend.uploads == uploads + 1  # agent 0 only
    current = {backend.lora_request(f"agent_{a}").lora_int_id for a in range(2)}
    assert set(backend.llm.llm_engine.list_loras()) == current  # the old version left the engine


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The toy pretrained on the target-sum task (T=10), with one head of size 32 (vLLM's CPU attention minimum)."""
    from trl_marl.toy import make_toy_model

    return make_toy_model(tmp_path_factory.mktemp("toy"), task="target", hidden_size=32, num_layers=1, num_heads=1,
                          pretrain_steps=100, seed=0, targets=(10,))


def test_magrpo_trains_end_to_end_with_vllm(target_dir: str, tmp_path: Any) -> None:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=16,
        max_completion_length=4, learning_rate=1e-2, max_steps=3, logging_steps=1, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0, use_vllm=True, vllm_kv_cache_memory_bytes=16 << 20,
    )
    trainer = MAGRPOTrainer(model=target_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 64}),
                            peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    backend = trainer.team.generation_backend
    assert backend is not None and backend.name == "vllm"
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 3 and all(0 < h["agent_0/completion_length"] <= 4 for h in logs)
    # TRL's correction (on by default): in float32 vLLM's log-probs are the training model's, the ratio ~1
    assert all(h["sampling/sampling_logp_difference/max"] < 1e-3 for h in logs)
    assert all(abs(h["sampling/importance_sampling_ratio/mean"] - 1.0) < 1e-2 for h in logs)
    assert backend.uploads == 2 + 2 * 2  # both adapters at the start, then after each step that a rollout followed
    rollout = trainer.last_rollout
    assert all(len(row) <= 4 for agent in rollout.turns[0].completion_ids for row in agent)
    backend.close()


def test_multi_agent_ppo_trains_end_to_end_with_vllm(target_dir: str, tmp_path: Any) -> None:
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=4, gradient_accumulation_steps=2,
        num_mini_batches=2, num_ppo_epochs=1, total_episodes=16, response_length=4, stop_token="eos",
        learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, temperature=1.0, generation_backend="vllm", vllm_kv_cache_memory_bytes=16 << 20,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=target_dir, env=TargetSumEnv(2), reward_funcs=TargetSumReward(),
                                   train_dataset=Dataset.from_dict({"target": [10] * 16}),
                                   peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    backend = trainer.team.generation_backend
    assert backend is not None and backend.name == "vllm"
    trainer.train()
    updates = [h for h in trainer.state.log_history if "objective/scores" in h]
    assert len(updates) == 2  # 16 episodes / 8 per update
    assert all(h["sampling/sampling_logp_difference/max"] < 1e-3 for h in updates)  # TRL's correction, on
    assert all(-0.5 <= h["agent_0/reward"] <= 1.0 for h in updates)
    assert backend.uploads == 2 + 2  # both adapters at the start, then both again for the second update's rollout
    backend.close()


def test_one_agent_with_an_adapter_is_served(target_dir: str) -> None:
    """One agent with a `peft_config` is a `models` team of one model with its `default` adapter: servable too."""
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_marl.team.generation.vllm import VLLMBackend

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    team = AgentTeam.build(AutoModelForCausalLM.from_pretrained(target_dir), 1, processing_class=tokenizer,
                           peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    assert (team.mode, team.agent_adapter) == ("models", ["default"])
    with torch.no_grad():
        for name, param in team.models[0].named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(2))
    # raw (untruncated) log-probs: at temperature 1 with top-k on, the training model's own log-softmax
    backend = VLLMBackend(team, kv_cache_memory_bytes=16 << 20, logprobs_mode="raw_logprobs")
    prompts = [["T=10:", "T=10:1"]]
    assert generate_with(team, backend, prompts, greedy(tokenizer, 3)) == generate_with(team, None, prompts,
                                                                                       greedy(tokenizer, 3))
    prompt_ids = [tokenize_prompts(tokenizer, prompts[0]) * 4]
    sampled = GenerationConfig(do_sample=True, temperature=1.0, top_k=2, max_new_tokens=4,
                               eos_token_id=tokenizer.eos_token_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no bias warning: the log-probs are untruncated
        completions, logprobs = backend.generate_with_logprobs(team, prompt_ids, sampled)
    ours = team.policy_logps(0, batch(tokenizer, prompt_ids[0], completions[0]))
    for i, row in enumerate(logprobs[0]):
        torch.testing.assert_close(ours[i, : len(row)], torch.tensor(row, dtype=ours.dtype), rtol=0, atol=1e-4)
    with pytest.raises(ValueError, match="raw_logprobs.*temperature 0.5"):
        backend.generate_with_logprobs(team, prompt_ids, GenerationConfig(do_sample=True, temperature=0.5,
                                                                          max_new_tokens=2))
    assert backend.lora_request("default").lora_int_id == 1
    backend.close()


def test_a_models_team_gets_one_engine_per_distinct_base_and_syncs_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """Agents 0 and 1 over one base (a copy of it), agent 2 over another: two engines, one `generate` call each,
    every row its own agent's greedy tokens, and a changed adapter re-sent to its own engine only."""
    import copy

    from peft import LoraConfig

    from trl_marl.team.generation.vllm import VLLMBackend
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    torch.manual_seed(0)  # LoRA A's initialisation: the same agents whatever ran before
    tokenizer = build_toy_tokenizer()
    bases = [build_toy_model(tokenizer, hidden_size=64, num_layers=1, num_heads=2, seed=seed,
                             max_position_embeddings=512) for seed in (0, 1)]
    team = AgentTeam.build([bases[0], copy.deepcopy(bases[0]), bases[1]], 3, processing_class=tokenizer,
                           peft_config=LoraConfig(r=8, target_modules=["q_proj", "v_proj", "o_proj", "up_proj"],
                                                  lora_dropout=0.0))
    with torch.no_grad():
        for m, model in enumerate(team.models):
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(m)))
    backend = VLLMBackend(team, kv_cache_memory_bytes=32 << 20, max_model_len=512)
    try:
        assert backend.groups == [[0, 1], [2]] and len(backend.engines) == 2
        assert [engine.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes for engine in backend.engines] == [
            16 << 20, 16 << 20]  # the engines split the budget
        calls: list[tuple[int, list[str]]] = []
        for e, engine in enumerate(backend.engines):
            def recording(prompts: Any, sampling_params: Any = None, lora_request: Any = None, e: int = e,
                          engine_generate: Any = engine.generate, **kwargs: Any) -> Any:
                calls.append((e, [request.lora_name.split("-v")[0] for request in lora_request]))
                return engine_generate(prompts, sampling_params=sampling_params, lora_request=lora_request,
                                       **kwargs)

            monkeypatch.setattr(engine, "generate", recording)
        prompts = [["Q:12+3=A:", "T:5?"], ["Q:12+3=A:"], ["Q:12+3=A:", "Q:1+1=A:"]]
        served = generate_with(team, backend, prompts, greedy(tokenizer))
        assert calls == [(0, ["model0.default"] * 2 + ["model1.default"]), (1, ["model2.default"] * 2)]
        assert served == generate_with(team, None, prompts, greedy(tokenizer))  # each row its own base + adapter
        assert len({str(served[a][0]) for a in range(3)}) == 3  # one prompt, three policies

        ids = [{backend.lora_request("default", m).lora_int_id for m in group} for group in backend.groups]
        assert [set(engine.llm_engine.list_loras()) for engine in backend.engines] == ids
        uploads = backend.uploads
        with torch.no_grad():  # a new agent 2, as an optimizer step would make it
            for name, param in team.models[2].named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=torch.Generator().manual_seed(7)))
        after = generate_with(team, backend, prompts, greedy(tokenizer))
        assert after == generate_with(team, None, prompts, greedy(tokenizer))
        assert after[2] != served[2] and after[:2] == served[:2]
        assert backend.uploads == uploads + 1  # agent 2 only, into the second engine
        new = backend.lora_request("default", 2).lora_int_id
        assert set(backend.engines[0].llm_engine.list_loras()) == ids[0]  # the first engine untouched
        assert set(backend.engines[1].llm_engine.list_loras()) == {new} != ids[1]  # the old version left
    finally:
        backend.close()
