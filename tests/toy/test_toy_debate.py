"""Tests of the toy debate task (`trl_marl.toy.DebateAdditionTask`) and its toy model."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from trl_marl import toy
from trl_marl.envs.base import Transcript
from trl_marl.envs.debate import ToyDebateEnv
from trl_marl.toy import (
    TOY_CHARS,
    DebateAdditionTask,
    build_toy_model,
    build_toy_tokenizer,
    generate_toy_answers,
    make_toy_model,
    pretrain_toy_model,
)

PROMPT = re.compile(r"^Q:(\d+)\+(\d+)=(?:A:|(\d+(?: \d+){0,2})\?A:)$")


def test_samples_have_the_toy_debate_format():
    task = DebateAdditionTask(noise_prob=0.2)
    rng = random.Random(0)
    samples = [task.sample(rng) for _ in range(4000)]
    first = revision = noisy = correct_candidates = num_candidates = 0
    counts = set()
    for prompt, answer in samples:
        assert set(prompt) <= set(TOY_CHARS) and set(answer) <= set("0123456789")
        match = PROMPT.match(prompt)
        assert match, prompt
        a, b = int(match.group(1)), int(match.group(2))
        assert 0 <= a <= 99 and 0 <= b <= 99
        noisy += int(answer) != a + b
        assert abs(int(answer) - (a + b)) <= task.noise_max
        if match.group(3) is None:
            first += 1
            continue
        revision += 1
        candidates = [int(c) for c in match.group(3).split()]
        counts.add(len(candidates))
        num_candidates += len(candidates)
        correct_candidates += sum(c == a + b for c in candidates)
        assert all(0 < abs(c - (a + b)) <= task.candidate_noise_max for c in candidates if c != a + b)
        assert task.parse(prompt) == (a, b, match.group(3).split())
    assert counts == {1, 2, 3}
    assert first / len(samples) == pytest.approx(0.5, abs=0.03)
    assert noisy / len(samples) == pytest.approx(0.2, abs=0.03)
    assert correct_candidates / num_candidates == pytest.approx(0.5, abs=0.03)


def test_is_correct_and_parse():
    task = DebateAdditionTask()
    assert task.is_correct("Q:12+34=A:", "46")
    assert task.is_correct("Q:12+34=45 47?A:", " 46 ")
    assert not task.is_correct("Q:12+34=46 46?A:", "45")
    assert not task.is_correct("Q:12+34=A:", "4 6")
    assert task.parse("Q:12+34=A:") == (12, 34, [])
    assert task.parse("Q:12+34=46 - 45?A:") == (12, 34, ["46", "-", "45"])
    with pytest.raises(ValueError, match="toy debate prompt"):
        task.parse("T=10:")


@pytest.mark.parametrize(
    "kwargs",
    [{"max_operand": -1}, {"noise_prob": 1.5}, {"first_turn_prob": -0.1}, {"candidate_correct_prob": 2.0},
     {"noise_max": 0}, {"candidate_noise_max": 0}, {"max_candidates": 0}],
)
def test_invalid_fields(kwargs):
    with pytest.raises(ValueError):
        DebateAdditionTask(**kwargs)


def test_first_turn_only_and_revision_only():
    rng = random.Random(1)
    assert all(p.endswith("=A:") for p, _ in (DebateAdditionTask(first_turn_prob=1.0).sample(rng) for _ in range(50)))
    assert all(p.endswith("?A:") for p, _ in (DebateAdditionTask(first_turn_prob=0.0).sample(rng) for _ in range(50)))
    # wrong candidates and noisy labels never go below zero
    task = DebateAdditionTask(max_operand=0, first_turn_prob=0.0, candidate_correct_prob=0.0, noise_prob=1.0)
    for _ in range(50):
        prompt, answer = task.sample(rng)
        assert int(answer) > 0 and all(int(c) > 0 for c in task.parse(prompt)[2])


def test_toy_debate_env_prompts_are_task_prompts():
    task = DebateAdditionTask()
    env = ToyDebateEnv(num_agents=3, num_turns=2)
    row = {"question": "12+34", "answer": "46"}
    prompts = env.prompts(row, Transcript()) + env.prompts(row, Transcript().extend(["46", "45", "47"]))
    assert [task.parse(p) for p in prompts[3:]] == [
        (12, 34, ["46", "45", "47"]), (12, 34, ["45", "46", "47"]), (12, 34, ["47", "46", "45"])
    ]
    assert all(PROMPT.match(p) for p in prompts)


def test_make_toy_model_builds_the_debate_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = make_toy_model(tmp_path / "debate", task="debate", hidden_size=32, num_layers=1, pretrain_steps=2,
                          batch_size=8, noise_prob=0.1)
    marker = json.loads((Path(path) / "trl_marl_toy.json").read_text())
    assert marker["task"] == "debate" and marker["noise_prob"] == 0.1 and marker["max_operand"] == 99
    assert make_toy_model(tmp_path / "debate", task="debate", hidden_size=32, num_layers=1, pretrain_steps=2,
                          batch_size=8, noise_prob=0.1) == path  # cached
    seen = {}
    monkeypatch.setattr(toy.cache, "make_toy_model", lambda **kw: seen.update(kw) or "dir")
    assert toy.resolve_toy_name("toy:debate") == "dir"
    assert seen["task"] == "debate" and seen["hidden_size"] == 64


def majority_correct_prompts(pairs: list[tuple[int, int]], rng: random.Random) -> list[str]:
    """Revision prompts whose candidates are mostly right (1 right of 1, 2 of 2, 2 or 3 of 3)."""
    prompts = []
    for a, b in pairs:
        k = rng.randint(1, 3)
        right = k if k < 3 else rng.choice((2, 3))
        candidates = [a + b] * right + [a + b + rng.choice((-2, -1, 1, 2)) for _ in range(k - right)]
        rng.shuffle(candidates)
        prompts.append(f"Q:{a}+{b}=" + " ".join(map(str, candidates)) + "?A:")
    return prompts


@pytest.mark.slow
def test_pretrained_model_uses_the_candidates():
    """A short pretraining run teaches the model to read the revision format before it can add.

    hidden 64 / 2 layers, 300 steps of 64 sequences (~9 s on one thread), candidates right 70% of the time. Measured
    greedy accuracy on the 200 operand pairs below, first-turn vs. revision with a correct majority, for seeds
    0 / 1 / 2 / 3: .04 / .75, .14 / .68, .09 / .40, .09 / .50 (the test uses seed 0).
    """
    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=64, num_layers=2, seed=0)
    task = DebateAdditionTask(noise_prob=0.2, candidate_correct_prob=0.7)
    losses = pretrain_toy_model(model, tokenizer, task, steps=300, batch_size=64, lr=3e-3, seed=0)
    assert sum(losses[-20:]) / 20 < sum(losses[:20]) / 20
    rng = random.Random(123)
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(200)]
    first = [f"Q:{a}+{b}=A:" for a, b in pairs]
    revision = majority_correct_prompts(pairs, rng)

    def accuracy(prompts: list[str]) -> float:
        answers = generate_toy_answers(model, tokenizer, prompts, max_new_tokens=4)
        return sum(task.is_correct(p, a) for p, a in zip(prompts, answers)) / len(prompts)

    first_accuracy, revision_accuracy = accuracy(first), accuracy(revision)
    assert first_accuracy < 0.5  # the model cannot add well yet: a debate has something to correct
    assert revision_accuracy >= first_accuracy + 0.2, (first_accuracy, revision_accuracy)


# ------------------------------------------------------------------------------------------ heterogeneous team
def test_specialty_of_reads_the_first_digit_of_the_key():
    assert [toy.specialty_of(k) for k in ("10", "25", "37", "48", "59", "63")] == [1, 2, 0, 1, 2, 0]
    assert toy.specialty_of("Q:37=52 18 52?A:") == 0
    with pytest.raises(ValueError, match="not a toy fact question"):
        toy.specialty_of("Q:=A:")


def test_specialist_knows_its_class_and_a_fixed_subset_elsewhere():
    table = toy.fact_table()
    assert set(table) == set(toy.FACT_KEYS) and all(10 <= v <= 99 for v in table.values())
    assert toy.fact_table() == table  # fixed by its seed
    task = toy.SpecialistFactsTask(specialty=1, novice_known_prob=0.4, first_turn_prob=1.0)
    assert task.known == toy.SpecialistFactsTask(specialty=1).known  # a fixed subset, not a coin per sample
    assert task.known != toy.SpecialistFactsTask(specialty=2).known
    assert {k for k in toy.FACT_KEYS if toy.specialty_of(k) == 1} <= task.known
    outside = [k for k in toy.FACT_KEYS if toy.specialty_of(k) != 1]
    assert 0.2 < len(task.known & set(outside)) / len(outside) < 0.6
    rng = random.Random(0)
    right = {True: [], False: []}
    for _ in range(6000):
        prompt, answer = task.sample(rng)
        key = int(re.fullmatch(r"Q:(\d+)=A:", prompt).group(1))
        right[key in task.known].append(int(answer) == table[key])
    assert all(right[True])  # a known key is always answered with its true value
    assert sum(right[False]) / len(right[False]) < 0.05  # an unknown one is a fresh guess (1/90 right)


def test_specialist_revision_copies_a_candidate_or_answers_itself():
    table = toy.fact_table()
    task = toy.SpecialistFactsTask(specialty=0, first_turn_prob=0.0, copy_prob=1.0)
    rng = random.Random(1)
    for _ in range(500):
        prompt, answer = task.sample(rng)
        match = re.fullmatch(r"Q:(\d+)=(\d+) (\d+) (\d+)\?A:", prompt)
        assert match, prompt
        assert answer in match.group(2, 3, 4)
        assert task.is_correct(prompt, str(table[int(match.group(1))]))
    with pytest.raises(ValueError, match="specialty"):
        toy.SpecialistFactsTask(specialty=3)


def test_toy_facts_dataset_rows_hold_true_values():
    from trl_marl.toy import toy_facts_dataset

    data = toy_facts_dataset(50, seed=3)
    table = toy.fact_table()
    assert data.column_names == ["question", "answer"]
    assert all(table[int(q)] == int(a) for q, a in zip(data["question"], data["answer"]))
    assert toy_facts_dataset(50, seed=3)["question"] == data["question"]
    env = ToyDebateEnv(3, 3)
    assert env.agent_prompt(data[0], 0, Transcript()) == f"Q:{data[0]['question']}=A:"
