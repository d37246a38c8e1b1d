"""The generation-backend seam, without vLLM installed: config fields, the team's hand-off, and clear refusals.

The vLLM engine itself is tested in `tests/with_vllm/` (its own virtualenv; see `.ci/run`).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from peft import LoraConfig
from transformers import GenerationConfig
from transformers.generation import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from helpers import free_port
from trl_marl import MAGRPOConfig, MultiAgentPPOConfig, PPOConfig
from trl_marl.team import AgentTeam
from trl_marl.team.generation import Generation, GenerationBackend, TransformersBackend, build_generation_backend
from trl_marl.team.generation.base import resolve_generation_settings
from trl_marl.team.generation.lean import _plan
from trl_marl.team.generation.vllm import (
    LogprobSettingsCheck,
    base_groups,
    check_servable,
    sampling_settings,
    vllm_lora_rank,
)
from trl_marl.toy import build_toy_model


def magrpo(**kwargs: object) -> MAGRPOConfig:
    return MAGRPOConfig(output_dir="/tmp/unused", num_generations=2, per_device_train_batch_size=2, report_to=[],
                        **kwargs)


def ppo(**kwargs: object) -> MultiAgentPPOConfig:
    return MultiAgentPPOConfig(output_dir="/tmp/unused", report_to=[], **kwargs)


@pytest.mark.parametrize("make", [magrpo, ppo, lambda **kw: PPOConfig(output_dir="/tmp/unused", report_to=[], **kw)])
def test_use_vllm_selects_the_vllm_backend(make: object) -> None:
    assert make().generation_backend == "transformers"
    config = make(use_vllm=True)
    assert (config.generation_backend, config.use_vllm) == ("vllm", True)
    config = make(generation_backend="vllm", vllm_kv_cache_memory_bytes=64 << 20)
    assert (config.use_vllm, config.vllm_kv_cache_memory_bytes) == (True, 64 << 20)


@pytest.mark.parametrize("make", [magrpo, ppo])
def test_backend_settings_that_do_not_work_are_refused(make: object) -> None:
    with pytest.raises(ValueError, match="generation_backend.*one of"):
        make(generation_backend="sglang")
    with pytest.raises(NotImplementedError, match="vllm_mode='async'.*'colocate'.*'server'"):
        make(use_vllm=True, vllm_mode="async")
    with pytest.raises(ValueError, match="vllm_server_timeout` must be > 0"):
        make(use_vllm=True, vllm_mode="server", vllm_server_timeout=0)
    with pytest.raises(ValueError, match="vllm_kv_cache_memory_bytes` must be a positive"):
        make(use_vllm=True, vllm_kv_cache_memory_bytes=0)
    with pytest.raises(ValueError, match="vllm_logprobs_mode` must be one of"):
        make(use_vllm=True, vllm_logprobs_mode="processed_logits")
    assert make(use_vllm=True, vllm_logprobs_mode="raw_logprobs").vllm_logprobs_mode == "raw_logprobs"
    make(vllm_mode="server")  # vLLM settings mean nothing (and are not checked) while vLLM is off, as in TRL


def test_magrpo_refuses_vllm_settings_it_does_not_implement() -> None:
    with pytest.raises(NotImplementedError, match="vllm_enable_sleep_mode"):
        magrpo(use_vllm=True, vllm_enable_sleep_mode=True)
    with pytest.raises(NotImplementedError, match="vllm_tensor_parallel_size"):
        magrpo(use_vllm=True, vllm_tensor_parallel_size=2)


class Scripted(GenerationBackend):
    """Returns fixed completions (cut after the call's stop tokens) and records what the team handed over."""

    name = "scripted"

    def __init__(self, completions: list[list[list[int]]]) -> None:
        self.completions = completions
        self.calls: list[list[list[list[int]]]] = []

    def generate(self, team: AgentTeam, prompt_ids: list[list[list[int]]], generation_config: GenerationConfig,
                 stop_token_ids: set[int] | None = None) -> Generation:
        self.calls.append(prompt_ids)
        return Generation.from_rows(team, prompt_ids, self.completions, None, stop_token_ids, generation_config)


def test_team_hands_every_agents_rows_to_its_backend_and_cuts_after_eos(tokenizer: object) -> None:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    team = AgentTeam.build(model, 2, peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
                           processing_class=tokenizer)
    eos = tokenizer.eos_token_id
    team.generation_backend = Scripted([[[5, eos, 6, 7]], [[8, 9], [eos, 4]]])
    out = team.generate([["T:5?"], ["Q:1+1=A:", "T:7?"]], GenerationConfig(max_new_tokens=4, do_sample=False))
    assert [completions for _, completions in out] == [[[5, eos]], [[8, 9], [eos]]]
    prompts = team.generation_backend.calls[0]
    assert [len(rows) for rows in prompts] == [1, 2]
    assert prompts[1][0] == tokenizer("Q:1+1=A:")["input_ids"]
    out = team.generate([["T:5?"], ["T:1?", "T:7?"]], GenerationConfig(max_new_tokens=4), stop_token_ids=set())
    assert out[0][1] == [[5, eos, 6, 7]]  # an empty stop set keeps every generated token, as on the HF path


def test_vllm_refuses_teams_without_adapters_before_importing_vllm(tokenizer: object) -> None:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    for mode in ("shared", "models"):
        team = AgentTeam.build(model, 2, mode=mode, processing_class=tokenizer)
        with pytest.raises(NotImplementedError, match=r"LoRA adapters.*pass a `peft_config`.*team_mode='models'.*"
                                                      r"Full-weight teams.*generation_backend='transformers'"):
            build_generation_backend(magrpo(use_vllm=True, vllm_importance_sampling_correction=False), team)
    config = magrpo(use_vllm=True)  # TRL's default: vllm_importance_sampling_correction=True
    with warnings.catch_warnings():  # the correction is applied now: no "not applied" warning any more
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(NotImplementedError):
            build_generation_backend(config, team)
    team = AgentTeam.build(model, 2, peft_config=LoraConfig(r=4, target_modules=["q_proj"],
                                                             modules_to_save=["lm_head"]), processing_class=tokenizer)
    with pytest.raises(NotImplementedError, match="modules_to_save"):
        check_servable(team)
    assert type(build_generation_backend(magrpo(), team)) is TransformersBackend


def test_vllm_serves_models_teams_of_lora_agents_one_engine_per_distinct_base(tokenizer: object) -> None:
    lora = LoraConfig(r=4, target_modules=["q_proj"])
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    same = AgentTeam.build(model, 3, mode="models", peft_config=lora, processing_class=tokenizer)
    check_servable(same)  # a `models` team of LoRA agents: servable in colocate mode
    assert (len(same.models), base_groups(same)) == (3, [[0, 1, 2]])  # copies of one base: one engine
    other = build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=1)
    renamed = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    renamed.config.name_or_path = renamed.name_or_path = "/elsewhere/the-same-weights"
    mixed = AgentTeam.build([build_toy_model(tokenizer, hidden_size=32, num_layers=1), other, renamed], 3,
                            peft_config=lora, processing_class=tokenizer)
    assert base_groups(mixed) == [[0, 2], [1]]  # equal weights share an engine whatever their name; others do not
    with torch.no_grad():  # one base weight of the third model changes: a base of its own
        next(p for n, p in mixed.models[2].named_parameters() if "lora" not in n).view(-1)[0] += 1e-3
    assert base_groups(mixed) == [[0], [1], [2]]
    with pytest.raises(NotImplementedError, match=r"vllm_mode='server'.*3 models.*vllm_mode='colocate'"):
        check_servable(mixed, one_base=True)  # a server serves one base
    fresh = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    check_servable(AgentTeam.build(fresh, 2, peft_config=lora, processing_class=tokenizer), one_base=True)


def test_sampling_settings_mean_what_they_mean_in_generate() -> None:
    sampled = sampling_settings(GenerationConfig(do_sample=True, temperature=0.7, top_k=5, top_p=0.9, min_p=0.0,
                                                 max_new_tokens=6, eos_token_id=[2, 3], repetition_penalty=1.2))
    assert sampled == {"max_tokens": 6, "min_tokens": 0, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.0,
                       "repetition_penalty": 1.2, "ignore_eos": True, "stop_token_ids": [2, 3], "detokenize": False}
    greedy = sampling_settings(GenerationConfig(do_sample=False, temperature=0.7, max_new_tokens=3, eos_token_id=2))
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"], greedy["stop_token_ids"]) == (0.0, 0, 1.0, [2])
    with pytest.raises(ValueError, match="num_beams=4"):
        sampling_settings(GenerationConfig(num_beams=4, max_new_tokens=3))
    assert [vllm_lora_rank(r) for r in (1, 4, 8, 9, 64)] == [1, 8, 8, 16, 64]


def qwen_like(eos: int) -> GenerationConfig:
    """A Qwen2.5-Instruct-like `generation_config`: it samples, and sets temperature, top-k, top-p, a repetition
    penalty and two EOS tokens."""
    return GenerationConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.1,
                            eos_token_id=[eos, 3], pad_token_id=eos)


def eager_settings(model: object, config: GenerationConfig) -> dict:
    """The settings the team's own decoding (and the compiled backend, which runs the same plan) samples with."""
    plan = _plan(model, config, torch.device("cpu"), None)
    assert not isinstance(plan, str), plan
    return plan.settings


@pytest.mark.parametrize("source", ["bare", "ppo", "partial"])
def test_every_backend_samples_with_the_settings_generate_resolves(tokenizer: object, source: str) -> None:
    """The eager and compiled loops fill unset fields from the model's generation_config, then transformers'
    defaults; vLLM now gets the same resolved values (it read only the call's config: a bare config sampled at
    T=1, top_k=0, top_p=1, no penalty and no stop token on vLLM, and PPO's config without the model's penalty)."""
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    team = AgentTeam.build(model, 2, peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
                           processing_class=tokenizer)
    eos = tokenizer.eos_token_id
    team.base_model_of(0).generation_config = qwen_like(eos)
    if source == "bare":
        call = GenerationConfig(max_new_tokens=5)
        want = {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.0, "repetition_penalty": 1.1}
    elif source == "ppo":  # the shape of `MultiAgentPPOTrainer._generation_config`: no repetition penalty set
        call = GenerationConfig(max_new_tokens=5, temperature=0.9 + 1e-7, top_k=0, top_p=1.0, do_sample=True,
                                pad_token_id=eos, eos_token_id=eos)
        want = {"temperature": 0.9 + 1e-7, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.1}
    else:  # some fields set, the rest from the model
        call = GenerationConfig(max_new_tokens=5, top_k=7, repetition_penalty=1.05)
        want = {"temperature": 0.7, "top_k": 7, "top_p": 0.8, "min_p": 0.0, "repetition_penalty": 1.05}
    stops = [eos] if source == "ppo" else [eos, 3]
    policy = team.models[0]
    eager = eager_settings(policy, call)
    assert {name: eager[name] for name in ("temperature", "top_k", "top_p", "repetition_penalty", "do_sample")} == {
        name: want[name] for name in ("temperature", "top_k", "top_p", "repetition_penalty")} | {"do_sample": True}
    assert eager["eos_token_id"] == (eos if source == "ppo" else [eos, 3])
    assert resolve_generation_settings(call, policy) == eager  # one resolution, the plan's
    engine = sampling_settings(call, policy)
    assert engine == {"max_tokens": 5, "min_tokens": 0, **want, "ignore_eos": True, "stop_token_ids": stops,
                      "detokenize": False}
    # the model's settings may be handed over as its generation config too; a plain model resolves the same
    assert sampling_settings(call, qwen_like(eos)) == engine == sampling_settings(call, team.base_model_of(0))
    assert sampling_settings(call, team.base_model_of(0)) == engine


@pytest.mark.parametrize(("name", "value"), [
    ("stop_strings", ["\n\n"]), ("min_length", 12), ("exponential_decay_length_penalty", (4, 1.5)),
    ("max_time", 30.0), ("no_repeat_ngram_size", 2), ("typical_p", 0.9), ("epsilon_cutoff", 3e-4),
    ("guidance_scale", 1.5), ("num_return_sequences", 2),
])
def test_vllm_refuses_each_setting_it_cannot_mean_the_same_way(name: str, value: object) -> None:
    """Before: `stop_strings`, `min_length`, `exponential_decay_length_penalty` and `max_time` were dropped without a
    word. Now every setting away from transformers' default that vLLM has no equivalent for is refused by name,
    whether the call or the model's generation_config sets it."""
    with pytest.raises(ValueError, match=rf"`{name}=.*from the call's generation config"):
        sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, **{name: value}))
    model_config = GenerationConfig(do_sample=True, **{name: value})
    with pytest.raises(ValueError, match=rf"`{name}=.*from the model's `generation_config`"):
        sampling_settings(GenerationConfig(max_new_tokens=4), model_config)


def test_min_p_with_top_p_is_refused_and_with_top_k_kept() -> None:
    """transformers applies top-p before min-p, vLLM min-p before top-p: different distributions, refused. top-k and
    min-p keep the same tokens in either order, so that pair is served."""
    probs = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    logits = probs.log()
    ids = torch.zeros((1, 1), dtype=torch.long)

    def apply(*warpers: object) -> list[float]:
        scores = logits.clone()
        for warper in warpers:
            scores = warper(ids, scores)
        return [round(p, 3) for p in scores.softmax(-1)[0].tolist()]

    top_p, min_p, top_k = TopPLogitsWarper(0.75), MinPLogitsWarper(0.3), TopKLogitsWarper(2)
    assert apply(top_p, min_p) == [0.444, 0.333, 0.222, 0.0]  # transformers' order
    assert apply(min_p, top_p) == [0.571, 0.429, 0.0, 0.0]  # vLLM's order
    assert apply(top_k, min_p) == apply(min_p, top_k) == [0.571, 0.429, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"min_p=0.3.*top_p=0.75.*min-p before top-p"):
        sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_p=0.75, min_p=0.3, top_k=0))
    with pytest.raises(ValueError, match=r"min_p=0.3.*top_p=0.8"):  # top_p from the model's generation config
        sampling_settings(GenerationConfig(max_new_tokens=4, min_p=0.3), qwen_like(2))
    kept = sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_k=2, min_p=0.3))
    assert (kept["top_k"], kept["top_p"], kept["min_p"]) == (2, 1.0, 0.3)
    greedy = sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=False, top_p=0.75, min_p=0.3))
    assert (greedy["temperature"], greedy["min_p"]) == (0.0, 0.0)  # greedy reads neither


def test_the_correction_warns_once_under_truncation_and_raw_logprobs_need_temperature_one() -> None:
    """vLLM's processed log-probs are taken after truncation and penalties: the importance ratio is then biased
    low. Said once per set of settings; raw (untruncated) log-probs are offered at temperature 1 and refused at
    another temperature."""
    check = LogprobSettingsCheck("processed_logprobs")
    truncated = sampling_settings(GenerationConfig(max_new_tokens=4), qwen_like(2))
    with pytest.warns(UserWarning, match=r"top_k=20, top_p=0.8, repetition_penalty=1.1 .*<= 0.*systematic bias"):
        check(truncated)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(truncated)  # once
        check(sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_k=0)))  # untruncated
    with pytest.warns(UserWarning, match=r"min_p=0.1 "):
        check(sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_k=0, min_p=0.1)))
    with warnings.catch_warnings():  # a top-k of the vocabulary or more truncates nothing
        warnings.simplefilter("error")
        check(sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_k=50)), vocab_size=50)
    with pytest.warns(UserWarning, match=r"with top_k=50 and"):
        check(sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, top_k=50)), vocab_size=51)
    raw = LogprobSettingsCheck("raw_logprobs")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw(sampling_settings(GenerationConfig(max_new_tokens=4, do_sample=True, temperature=1.0, top_k=20)))
    with pytest.raises(ValueError, match=r"raw_logprobs.*temperature 0.7"):
        raw(truncated)
    with pytest.raises(ValueError, match="vllm_logprobs_mode` must be one of"):
        LogprobSettingsCheck("processed_logits")


def test_server_mode_names_the_url_and_the_fix_when_no_server_answers(tokenizer: object) -> None:
    port = free_port()  # a port that nothing listens on
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1)
    team = AgentTeam.build(model, 2, peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
                           processing_class=tokenizer)
    config = ppo(use_vllm=True, vllm_mode="server", vllm_server_port=port, vllm_server_timeout=5.0)
    with pytest.raises(RuntimeError, match=rf"No vLLM server answers at http://127.0.0.1:{port}.*trl-marl vllm-serve"):
        build_generation_backend(config, team)
