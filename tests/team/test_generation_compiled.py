"""`generation_backend="compiled"` (`trl_marl.team.generation.compiled`): the eager lean loop's tokens from a static KV
cache and a compiled decode forward, for one model and a mixed-adapter team; the eager loop, with one warning, where
the static path cannot stand in; a bounded number of compiled graphs.

The token tests run the static-cache loop with the eager forward (`compile=False`); the compile test traces with
dynamo into conftest's graph-counting backend (inductor's code generation takes tens of seconds on a CPU).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import GenerationConfig, PreTrainedTokenizerBase

from trl_marl.team import AgentTeam, pad_left
from trl_marl.team.generation import build_generation_backend, check_generation_backend
from trl_marl.team.generation.compiled import CompiledBackend, CompiledDecoder, bucket_batch, bucket_length
from trl_marl.team.generation.lean import decode
from trl_marl.toy import build_toy_model

PROMPTS = ["Q:12+3=A:", "T:5?", "Q:45+67=A: go"]
EOS = [9, 19]  # two frequent tokens of the random toy model: sampled rows stop at different steps
SETTINGS = {
    "greedy": dict(do_sample=False, max_new_tokens=10),
    "sampled": dict(do_sample=True, temperature=1.3, top_k=20, top_p=0.95, repetition_penalty=1.3,
                    max_new_tokens=10),
    "sampled, EOS": dict(do_sample=True, top_k=0, max_new_tokens=10, eos_token_id=EOS),
}
LOGGER = "trl_marl.team.generation.compiled"


def toy(tokenizer: PreTrainedTokenizerBase) -> Any:
    return build_toy_model(tokenizer, hidden_size=32, num_layers=2).eval()


@pytest.fixture(scope="module")
def lora_model(tokenizer: PreTrainedTokenizerBase) -> Any:
    """Two LoRA adapters with non-zero B (they really differ), in eval mode."""
    torch.manual_seed(0)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    model = get_peft_model(toy(tokenizer), config, adapter_name="a0")
    model.add_adapter("a1", copy.deepcopy(config))
    return model.eval()


def batch(tokenizer: PreTrainedTokenizerBase, prompts: list[str] = PROMPTS) -> tuple[torch.Tensor, torch.Tensor]:
    return pad_left([tokenizer(p)["input_ids"] for p in prompts], tokenizer.pad_token_id)


def ours(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages this backend logged."""
    return [record.getMessage() for record in caplog.records if record.name == LOGGER]


def both(model: Any, ids: torch.Tensor, mask: torch.Tensor, config: GenerationConfig, decoder: CompiledDecoder,
         **kwargs: Any) -> tuple[list, list, bool]:
    """The eager loop's and the decoder's sequences from the same seed, and whether the random states then agree."""
    torch.manual_seed(3)
    eager = decode(model, ids, mask, config, **kwargs).tolist()
    eager_state = torch.get_rng_state()
    torch.manual_seed(3)
    static = decoder.decode(model, ids, mask, config, **kwargs).tolist()
    return eager, static, bool(torch.equal(eager_state, torch.get_rng_state()))


def test_buckets() -> None:
    assert [bucket_length(n) for n in (1, 64, 65, 200)] == [64, 64, 128, 256]
    assert [bucket_batch(n) for n in (1, 2, 3, 5, 17, 32, 33, 100)] == [1, 2, 4, 8, 32, 32, 64, 128]


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_host_sampling_gives_the_eager_tokens_and_draws(tokenizer, setting, caplog) -> None:
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)  # 3 rows of different lengths: left padding, and one padding row (bucket of 4)
    decoder = CompiledDecoder(compile=False, in_graph_sampling=False)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        eager, static, same_state = both(model, ids, mask, GenerationConfig(**SETTINGS[setting]), decoder)
    assert static == eager
    assert same_state  # as many draws as the eager loop
    assert not ours(caplog) and decoder.failure is None  # the static path ran
    assert len(decoder._caches[model]) == 1
    if setting == "sampled, EOS":  # rows finished at different steps: padded with the pad token
        assert any(tokenizer.pad_token_id in row[ids.size(1):] for row in static)


@pytest.mark.parametrize("setting", [*SETTINGS, "sampled, EOS, 40 tokens"])
@pytest.mark.parametrize("sync_every", [1, 3, 8])
def test_in_graph_step_gives_the_eager_tokens(tokenizer, setting, sync_every, caplog) -> None:
    """A batch that fills its bucket (4 rows): every row draws in the graph, so the same random numbers reach the same
    rows; the host checks the end every `sync_every` tokens and the output is cut where the eager loop stops."""
    model = toy(tokenizer)
    ids, mask = batch(tokenizer, PROMPTS + ["Q:7+8=A:"])
    decoder = CompiledDecoder(compile=False, sync_every=sync_every)
    long = setting.endswith("40 tokens")
    settings = dict(SETTINGS["sampled, EOS"], max_new_tokens=40) if long else SETTINGS[setting]
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        eager, static, _ = both(model, ids, mask, GenerationConfig(**settings), decoder)
    assert static == eager
    assert not ours(caplog) and decoder.failure is None
    if long:  # every row ended before the 40th token: the output is cut where they did
        assert len(static[0]) < ids.size(1) + 40
    if "EOS" in setting:  # rows ended at different steps
        assert any(tokenizer.pad_token_id in row[ids.size(1):] for row in static)


def test_in_graph_step_with_padding_rows(tokenizer) -> None:
    """3 rows in a bucket of 4: greedy tokens are the eager loop's; sampled rows come from the same distribution with
    other random numbers (the padding row draws too), and keep the eager loop's EOS and padding rules."""
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)
    decoder = CompiledDecoder(compile=False)
    eager, static, _ = both(model, ids, mask, GenerationConfig(**SETTINGS["greedy"]), decoder)
    assert static == eager
    config = GenerationConfig(**SETTINGS["sampled, EOS"])
    for seed in range(4):
        torch.manual_seed(seed)
        out = decoder.decode(model, ids, mask, config)
        assert out.shape[0] == 3 and out.size(1) <= ids.size(1) + 10
        assert torch.equal(out[:, :ids.size(1)], ids)
        for row in out[:, ids.size(1):].tolist():
            ends = [i for i, token in enumerate(row) if token in EOS]
            if ends:  # after its first EOS a row holds only the pad token
                assert all(token == tokenizer.pad_token_id for token in row[ends[0] + 1:])
        if out.size(1) < ids.size(1) + 10:  # cut early: every row has ended
            assert all(any(token in EOS for token in row) for row in out[:, ids.size(1):].tolist())
    assert decoder.failure is None and not decoder._warned


def test_settings_the_graph_cannot_sample_draw_on_the_host(tokenizer, caplog) -> None:
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)
    decoder = CompiledDecoder(compile=False)
    config = GenerationConfig(do_sample=True, no_repeat_ngram_size=2, max_new_tokens=6)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            eager, static, same_state = both(model, ids, mask, config, decoder)
            assert static == eager and same_state  # the host draw: the eager loop's stream
    messages = ours(caplog)
    assert len(messages) == 1 and "NoRepeatNGramLogitsProcessor" in messages[0] and "the draw after" in messages[0]
    with pytest.raises(ValueError, match="sync_every"):
        CompiledDecoder(sync_every=0)


def test_inference_mode_and_no_grad_calls_keep_their_own_caches(tokenizer, caplog) -> None:
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)
    decoder = CompiledDecoder(compile=False)
    config = GenerationConfig(**SETTINGS["greedy"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with torch.inference_mode():  # as `AgentTeam` decodes
            first = decoder.decode(model, ids, mask, config).tolist()
        with torch.no_grad():  # the same shapes outside inference mode: the first cache cannot be written here
            second = decoder.decode(model, ids, mask, config).tolist()
    assert first == second == decode(model, ids, mask, config).tolist()
    assert not ours(caplog) and decoder.failure is None
    assert len(decoder._caches[model]) == 2


@pytest.mark.parametrize(("setting", "rows", "in_graph"), [
    ("greedy", 5, True), ("sampled", 5, False), ("sampled", 8, True),
])
def test_mixed_adapter_rows_give_the_eager_tokens(tokenizer, lora_model, setting, rows, in_graph) -> None:
    ids, mask = batch(tokenizer, (PROMPTS * 3)[:rows])  # 5 rows: 3 padding rows under the last adapter; 8: none
    names = ["a0"] * 3 + ["a1"] * (rows - 3)
    config = GenerationConfig(**SETTINGS[setting])
    eager, static, same_state = both(lora_model, ids, mask, config,
                                     CompiledDecoder(compile=False, in_graph_sampling=in_graph), adapter_names=names)
    assert static == eager
    assert same_state or in_graph  # (the graph draws for the padding rows and past the end too)
    # the adapters matter: the same prompt under a0 and a1 decodes differently
    assert eager[0] != eager[3] or eager[1] != eager[4]


@pytest.mark.parametrize("setting", ["greedy", "sampled"])
def test_adapters_team_with_the_compiled_backend(tokenizer, setting) -> None:
    torch.manual_seed(0)
    peft_config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
    team = AgentTeam.build(build_toy_model(tokenizer, hidden_size=32, num_layers=2), 2, mode="adapters",
                           peft_config=peft_config, processing_class=tokenizer)
    team.train()  # as in training: generation switches to eval mode and back
    team.share_prompt_prefill = False  # the compiled backend runs no shared prefill
    # 8 + 8 rows: a batch that fills its bucket, so the graph draws the eager loop's random numbers
    prompts = [[p for p in PROMPTS for _ in range(2)] + PROMPTS[:2], (PROMPTS[::-1] * 3)[:8]]
    config = GenerationConfig(**SETTINGS[setting])
    torch.manual_seed(5)
    eager = team.generate(prompts, config)
    backend = CompiledBackend(team, compile=False)
    team.generation_backend = backend
    torch.manual_seed(5)
    assert team.generate(prompts, config) == eager
    assert backend.decoder.failure is None and not backend.decoder._warned
    assert len(backend.decoder._caches[team.models[0].get_base_model()]) == 1  # one batch of both agents' rows
    assert team.training


def test_compiled_graphs_are_bounded_by_buckets(tokenizer, lora_model, graph_counter) -> None:
    counter = graph_counter()
    decoder = CompiledDecoder(backend=counter)
    config = GenerationConfig(**SETTINGS["sampled"])
    names = ["a0", "a0", "a1", "a1"]
    ids, mask = batch(tokenizer, PROMPTS + ["T:1?"])
    eager, static, _ = both(lora_model, ids, mask, config, decoder, adapter_names=names)
    assert static == eager and decoder.failure is None
    graphs = counter.graphs
    assert graphs >= 1
    # a longer prompt in the same length bucket (and 4 rows: the same batch bucket): no new graph
    longer_ids, longer_mask = batch(tokenizer, ["Q:1234+5678=A: and more", "T:5?", "Q:45+67=A: go", "T:1?"])
    assert longer_ids.size(1) != ids.size(1)
    eager, static, _ = both(lora_model, longer_ids, longer_mask, config, decoder,
                            adapter_names=["a0", "a0", "a1", "a1"])
    assert static == eager
    assert counter.graphs == graphs
    # a batch of another bucket compiles its graphs once more
    both(lora_model, *batch(tokenizer, PROMPTS * 2), config, decoder, adapter_names=["a0"] * 3 + ["a1"] * 3)
    assert counter.graphs > graphs


def broken_backend(graph_module: Any, example_inputs: list[Any]) -> Any:
    raise RuntimeError("no compiler here")


def test_compile_failure_falls_back_once(tokenizer, caplog) -> None:
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)
    decoder = CompiledDecoder(backend=broken_backend)
    config = GenerationConfig(**SETTINGS["sampled"])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            eager, static, same_state = both(model, ids, mask, config, decoder)
            assert static == eager and same_state  # run again eager from the random state the call started with
    assert "no compiler here" in decoder.failure
    messages = ours(caplog)
    assert len(messages) == 1 and "no compiler here" in messages[0]


@pytest.mark.parametrize(("change", "reason"), [
    ("beams", "beam search"),
    ("cache class", "cannot take a static cache"),
    ("not lean", "lean_decode=False"),
])
def test_unsupported_settings_fall_back_with_one_reason(tokenizer, monkeypatch, caplog, change, reason) -> None:
    model = toy(tokenizer)
    ids, mask = batch(tokenizer)
    settings = dict(SETTINGS["greedy"])
    kwargs: dict[str, Any] = {}
    if change == "beams":
        settings.update(num_beams=2)
    elif change == "cache class":
        monkeypatch.setattr(type(model), "_can_compile_fullgraph", False)
    else:
        kwargs["lean"] = False
    decoder = CompiledDecoder(compile=False)
    config = GenerationConfig(**settings)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for _ in range(2):
            eager, static, _ = both(model, ids, mask, config, decoder, **kwargs)
            assert static == eager
    messages = ours(caplog)
    assert len(messages) == 1 and reason in messages[0]
    assert not decoder._caches.get(model)  # the static loop never ran


def test_configs_accept_compiled(tmp_path) -> None:
    from trl_marl import MAGRPOConfig, MultiAgentPPOConfig

    for config_class in (MAGRPOConfig, MultiAgentPPOConfig):
        config = config_class(output_dir=str(tmp_path), report_to=[], generation_backend="compiled")
        check_generation_backend(config)
        assert config.generation_backend == "compiled" and not config.use_vllm
        assert isinstance(build_generation_backend(config, None), CompiledBackend)
        assert build_generation_backend(config, None).decoder.sync_every == 8  # the field's default
        every = config_class(output_dir=str(tmp_path), report_to=[], generation_backend="compiled",
                             compiled_sync_every=3)
        assert build_generation_backend(every, None).decoder.sync_every == 3
        with pytest.raises(ValueError, match="compiled_sync_every"):
            build_generation_backend(config_class(output_dir=str(tmp_path), report_to=[],
                                                  generation_backend="compiled", compiled_sync_every=0), None)
        assert "'compiled'" in config_class.__dataclass_fields__["generation_backend"].metadata["help"]
        with pytest.raises(ValueError, match="set only one"):
            config_class(output_dir=str(tmp_path), report_to=[], generation_backend="compiled", use_vllm=True)


def test_magrpo_trains_with_the_compiled_backend(target_model_dir, tmp_path, graph_counter, caplog) -> None:
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    args = MAGRPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=4, per_device_train_batch_size=8,
        max_completion_length=4, learning_rate=1e-2, max_steps=2, logging_steps=1, report_to="none",
        save_strategy="no", disable_tqdm=True, seed=0, generation_backend="compiled",
    )
    trainer = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=args,
                            train_dataset=Dataset.from_dict({"target": [10] * 32}),
                            peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    backend = trainer.team.generation_backend
    assert isinstance(backend, CompiledBackend)
    counter = backend.decoder.backend = graph_counter()  # dynamo's tracing, without inductor's code generation
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trainer.train()
    assert not ours(caplog) and backend.decoder.failure is None  # every rollout took the static, compiled path
    logs = [h for h in trainer.state.log_history if "reward" in h]
    assert len(logs) == 2 and all(0 < h["agent_0/completion_length"] <= 4 for h in logs)
    # both steps' rollouts (2 agents x 8 rows, in one batch): one batch bucket, one length bucket, one graph
    assert counter.graphs == 1
    assert [list(caches) for caches in backend.decoder._caches.values()] == [[(16, 64, torch.float32,
                                                                              torch.device("cpu"), True)]]
