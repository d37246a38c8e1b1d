"""Tests of the offline toy world (`trl_marl.toy`)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from trl_marl import toy
from trl_marl.toy import (
    TOY_CHARS,
    AdditionTask,
    TargetNumberTask,
    build_toy_model,
    generate_toy_answers,
    is_toy_name,
    make_toy_model,
    pretrain_toy_model,
    resolve_toy_name,
    toy_accuracy,
)


@pytest.fixture(scope="module")
def trained(tokenizer: PreTrainedTokenizerBase) -> tuple[torch.nn.Module, list[float]]:
    """A hidden-32 / 1-layer model pretrained on the target-10 task, with its losses."""
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    losses = pretrain_toy_model(model, tokenizer, TargetNumberTask(targets=(10,)), steps=150, seed=0)
    return model, losses


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer
# ----------------------------------------------------------------------------------------------------------------


def test_tokenizer_vocabulary_and_special_tokens(tokenizer: PreTrainedTokenizerBase) -> None:
    assert len(tokenizer) == 4 + len(TOY_CHARS)
    assert len(set(TOY_CHARS)) == len(TOY_CHARS)
    assert set("0123456789+-=?:TQA ") <= set(TOY_CHARS)
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == (
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
    )
    assert len({tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id}) == 4
    assert tokenizer.padding_side == "left"


def test_tokenizer_round_trip(tokenizer: PreTrainedTokenizerBase) -> None:
    rng = random.Random(0)
    texts = ["", " ", "  ", "Q:12+34=A:46", " T=07: 3 ", TOY_CHARS, TOY_CHARS[::-1]]
    texts += ["".join(rng.choice(TOY_CHARS) for _ in range(rng.randint(1, 30))) for _ in range(50)]
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        assert len(ids) == len(text)  # one token per character, spaces included
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text


def test_tokenizer_special_tokens(tokenizer: PreTrainedTokenizerBase) -> None:
    ids = tokenizer("T=10:").input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert ids[1:] == tokenizer("T=10:", add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == "<s>T=10:"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "T=10:"
    # Special tokens written in the text are recognised as single tokens.
    ids = tokenizer("12</s>", add_special_tokens=False).input_ids
    assert ids[-1] == tokenizer.eos_token_id and len(ids) == 3
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12"
    # Unknown characters map to unk.
    assert tokenizer("~", add_special_tokens=False).input_ids == [tokenizer.unk_token_id]


def test_tokenizer_left_padding(tokenizer: PreTrainedTokenizerBase) -> None:
    batch = tokenizer(["T=5:", "Q:1+2=A:"], padding=True)
    short, long_ = batch["input_ids"]
    assert len(short) == len(long_) == 9
    assert short[:4] == [tokenizer.pad_token_id] * 4
    assert short[4] == tokenizer.bos_token_id
    assert batch["attention_mask"][0] == [0] * 4 + [1] * 5


def test_chat_template(tokenizer: PreTrainedTokenizerBase) -> None:
    messages = [{"role": "user", "content": "T=10:"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<s>T=10:"
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if not isinstance(ids, list):
        ids = ids["input_ids"]
    assert ids == tokenizer("T=10:").input_ids
    parts = [{"role": "user", "content": [{"type": "text", "text": "Q:1"}, {"type": "text", "text": "+2=A:"}]}]
    assert tokenizer.apply_chat_template(parts, tokenize=False) == "<s>Q:1+2=A:"


def test_tokenizer_save_load_round_trip(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.padding_side == "left"
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    text = " Q:9+9=A:18 T=00: "
    assert loaded(text).input_ids == tokenizer(text).input_ids
    assert loaded.decode(loaded(text, add_special_tokens=False).input_ids) == text
    assert loaded.apply_chat_template([{"role": "user", "content": "T=03:"}], tokenize=False) == "<s>T=03:"


# ----------------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------------


def test_build_toy_model(tokenizer: PreTrainedTokenizerBase) -> None:
    state = torch.random.get_rng_state()
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=1, num_heads=4, seed=3)
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is left alone
    config = model.config
    assert config.vocab_size == len(tokenizer)
    assert config.intermediate_size == 64 and config.num_hidden_layers == 1
    assert config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
    )
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert sum(p.numel() for p in model.parameters()) < 20_000

    same = build_toy_model(tokenizer, hidden_size=32, num_layers=1, num_heads=4, seed=3)
    other = build_toy_model(tokenizer, hidden_size=32, num_layers=1, num_heads=4, seed=4)
    for (name, a), b in zip(model.state_dict().items(), same.state_dict().values()):
        assert torch.equal(a, b), name
    assert not torch.equal(model.model.embed_tokens.weight, other.model.embed_tokens.weight)
    with pytest.raises(ValueError):
        build_toy_model(tokenizer, hidden_size=30, num_heads=4)


def test_model_save_load_round_trip(tokenizer: PreTrainedTokenizerBase, tmp_path: Path) -> None:
    model = build_toy_model(tokenizer, hidden_size=32, num_layers=2, seed=1)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is type(model)
    assert loaded.config.tie_word_embeddings
    # Next to a qwen2 config.json, AutoTokenizer picks Qwen2Tokenizer: it must still tokenize like the original.
    rng = random.Random(2)
    texts = [" T=10: ", "Q:12+3=A: 15", "  "]
    texts += ["".join(rng.choice(TOY_CHARS) for _ in range(rng.randint(1, 20))) for _ in range(30)]
    for text in texts:
        assert loaded_tokenizer(text).input_ids == tokenizer(text).input_ids
        assert loaded_tokenizer.decode(loaded_tokenizer(text, add_special_tokens=False).input_ids) == text
    assert loaded_tokenizer.padding_side == "left"
    assert loaded_tokenizer.apply_chat_template([{"role": "user", "content": "T=10:"}], tokenize=False) == "<s>T=10:"
    batch = loaded_tokenizer(["T=10:", "Q:12+3=A: "], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).logits
        actual = loaded(**batch).logits
    assert torch.equal(expected, actual)
    assert loaded.generation_config.eos_token_id == tokenizer.eos_token_id
    assert loaded.generation_config.pad_token_id == tokenizer.pad_token_id


# ----------------------------------------------------------------------------------------------------------------
# Tasks
# ----------------------------------------------------------------------------------------------------------------


def test_addition_task_format_and_checker() -> None:
    task = AdditionTask(max_operand=9)
    rng = random.Random(0)
    for _ in range(100):
        prompt, answer = task.sample(rng)
        a, b = task.operands(prompt)
        assert prompt == f"Q:{a}+{b}=A:"
        assert 0 <= a <= 9 and 0 <= b <= 9
        assert answer == str(a + b)
        assert task.is_correct(prompt, answer)
        assert not task.is_correct(prompt, str(a + b + 1))
    assert task.is_correct("Q:3+4=A:", " 7 ")
    assert not task.is_correct("Q:3+4=A:", "")
    assert not task.is_correct("Q:3+4=A:", "7+")
    with pytest.raises(ValueError):
        task.operands("T=10:")
    with pytest.raises(ValueError):
        AdditionTask(noise_prob=1.5)


@pytest.mark.parametrize("noise_prob", [0.0, 0.3, 0.5])
def test_addition_task_noise_rate(noise_prob: float) -> None:
    task = AdditionTask(max_operand=20, noise_prob=noise_prob)
    rng = random.Random(1)
    n = 4000
    changed = 0
    for _ in range(n):
        prompt, answer = task.sample(rng)
        a, b = task.operands(prompt)
        value = int(answer)
        assert value >= 0
        assert abs(value - (a + b)) <= task.noise_max
        changed += value != a + b
    assert abs(changed / n - noise_prob) < 0.03


def test_target_number_task() -> None:
    task = TargetNumberTask(targets=(3, 10))
    rng = random.Random(0)
    seen: dict[int, set[int]] = {3: set(), 10: set()}
    for _ in range(400):
        prompt, answer = task.sample(rng)
        target = task.target(prompt)
        assert prompt == f"T={target:02d}:"
        assert task.is_correct(prompt, answer)
        seen[target].add(int(answer))
    assert seen == {3: set(range(4)), 10: set(range(11))}  # uniform over [0, t]: every value shows up
    assert task.is_correct("T=07:", "7") and task.is_correct("T=07:", "0")
    assert not task.is_correct("T=07:", "8")
    assert not task.is_correct("T=07:", "-1")
    assert not task.is_correct("T=07:", ":3")
    assert not task.is_correct("T=07:", "")
    with pytest.raises(ValueError):
        TargetNumberTask(targets=())
    with pytest.raises(ValueError):
        TargetNumberTask(targets=(100,))


# ----------------------------------------------------------------------------------------------------------------
# Pretraining and evaluation
# ----------------------------------------------------------------------------------------------------------------


def test_pretraining_teaches_validity(
    tokenizer: PreTrainedTokenizerBase, trained: tuple[torch.nn.Module, list[float]]
) -> None:
    model, losses = trained
    task = TargetNumberTask(targets=(10,))
    assert len(losses) == 150
    assert sum(losses[-10:]) / 10 < 0.5 * sum(losses[:10]) / 10
    untrained = build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=0)
    before = toy_accuracy(untrained, tokenizer, task, n=200, greedy=False)
    after = toy_accuracy(model, tokenizer, task, n=200, greedy=False)
    assert before < 0.2
    assert after > 0.8
    assert toy_accuracy(model, tokenizer, task, n=100, greedy=True) > 0.8
    # Sampled answers are diverse: the model learned a distribution, not one number.
    answers = generate_toy_answers(model, tokenizer, ["T=10:"] * 100, greedy=False, seed=1)
    assert len(set(answers)) >= 5


def test_pretraining_is_deterministic(tokenizer: PreTrainedTokenizerBase) -> None:
    task = [TargetNumberTask(targets=(5, 10)), AdditionTask(max_operand=9)]
    runs = []
    for _ in range(2):
        model = build_toy_model(tokenizer, hidden_size=32, num_layers=1, seed=2)
        state = torch.random.get_rng_state()
        losses = pretrain_toy_model(model, tokenizer, task, steps=8, batch_size=16, seed=5)
        assert torch.equal(state, torch.random.get_rng_state())
        assert not model.training
        runs.append((losses, model.model.embed_tokens.weight.detach().clone()))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])


def test_toy_accuracy_is_reproducible(
    tokenizer: PreTrainedTokenizerBase, trained: tuple[torch.nn.Module, list[float]]
) -> None:
    model, _ = trained
    task = TargetNumberTask(targets=(10,))
    tokenizer.padding_side = "right"
    try:
        first = toy_accuracy(model, tokenizer, task, n=50, greedy=False, seed=3)
        assert tokenizer.padding_side == "right"  # restored
    finally:
        tokenizer.padding_side = "left"
    assert toy_accuracy(model, tokenizer, task, n=50, greedy=False, seed=3) == first
    # The trained model knows nothing about addition.
    assert toy_accuracy(model, tokenizer, AdditionTask(), n=50) < 0.2


# ----------------------------------------------------------------------------------------------------------------
# Cached toy models and names
# ----------------------------------------------------------------------------------------------------------------


def test_make_toy_model_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path / "cache"))
    kwargs = {"hidden_size": 32, "num_layers": 1, "pretrain_steps": 5, "batch_size": 16}
    path = make_toy_model(**kwargs)
    assert Path(path).is_relative_to(tmp_path / "cache")
    marker = json.loads((Path(path) / "trl_marl_toy.json").read_text())
    assert marker["hidden_size"] == 32 and marker["targets"] == [10]

    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.hidden_size == 32
    assert tokenizer.padding_side == "left"
    assert tokenizer.decode(tokenizer(" T=10: 3 ", add_special_tokens=False).input_ids) == " T=10: 3 "

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached model was rebuilt")

    monkeypatch.setattr(toy.cache, "build_toy_model", fail)
    assert make_toy_model(**kwargs) == path
    monkeypatch.undo()
    monkeypatch.setenv("TRL_MARL_CACHE", str(tmp_path / "cache"))

    other = make_toy_model(**{**kwargs, "seed": 1})
    assert other != path
    reloaded = AutoModelForCausalLM.from_pretrained(other)
    assert not torch.equal(reloaded.model.embed_tokens.weight, model.model.embed_tokens.weight)

    explicit = tmp_path / "explicit"
    assert make_toy_model(explicit, task="addition", **kwargs) == str(explicit)
    assert json.loads((explicit / "trl_marl_toy.json").read_text())["task"] == "addition"

    with pytest.raises(ValueError):
        make_toy_model(task="chess")
    with pytest.raises(TypeError):
        make_toy_model(hidden=32)


def test_make_toy_model_is_deterministic(tmp_path: Path) -> None:
    kwargs = {"hidden_size": 32, "num_layers": 1, "pretrain_steps": 3, "batch_size": 8, "seed": 7}
    first = AutoModelForCausalLM.from_pretrained(make_toy_model(tmp_path / "a", **kwargs))
    second = AutoModelForCausalLM.from_pretrained(make_toy_model(tmp_path / "b", **kwargs))
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)


def test_toy_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ["toy", "toy:addition", "toy:target", "trl-marl/toy", "trl-marl/toy-addition"]:
        assert is_toy_name(name)
    for name in ["Qwen/Qwen2.5-0.5B", "toys", "my-toy", "", "./toy"]:
        assert not is_toy_name(name)

    calls: list[dict[str, object]] = []

    def fake_make_toy_model(path: object = None, **kwargs: object) -> str:
        calls.append(kwargs)
        return "/somewhere"

    monkeypatch.setattr(toy.cache, "make_toy_model", fake_make_toy_model)
    assert resolve_toy_name("toy") == "/somewhere"
    assert calls[-1]["task"] == "target"
    resolve_toy_name("trl-marl/toy-addition")
    assert calls[-1]["task"] == "addition"
    resolve_toy_name("toy:target")
    assert calls[-1]["task"] == "target"
    with pytest.raises(ValueError):
        resolve_toy_name("toy:chess")
    with pytest.raises(ValueError):
        resolve_toy_name("gpt2")


def test_pretraining_does_not_depend_on_the_callers_thread_count(tmp_path):
    """Same arguments, same weights, whether the caller runs torch on one thread or two."""
    from safetensors.torch import load_file

    previous = torch.get_num_threads()
    dirs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            dirs.append(make_toy_model(tmp_path / f"t{threads}", task="target", hidden_size=32, num_layers=1,
                                       pretrain_steps=20, seed=0))
            assert torch.get_num_threads() == threads  # restored for the caller
    finally:
        torch.set_num_threads(previous)
    a, b = (load_file(os.path.join(d, "model.safetensors")) for d in dirs)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
