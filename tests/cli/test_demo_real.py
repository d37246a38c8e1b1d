"""`trl-marl demo --real` (`trl_marl.scripts.demo_real`): its held-out splits, its report, its CLI, one real step.

The demo itself takes minutes; these tests check that no held-out item can be trained on, that the command line
reaches the real demo, what the table prints, and one MAGRPO step of part 1 on the real model.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from trl_marl.scripts import demo_real
from trl_marl.scripts.demo import add_demo_arguments, demo_command


def test_number_split_is_fixed_and_disjoint() -> None:
    train, held = demo_real.number_split()
    assert len(held) == 18 and sorted(train + held) == list(range(10, 100))
    assert demo_real.number_split() == (train, held)  # the same for every training seed
    assert demo_real.number_split(seed=1) != (train, held)
    with pytest.raises(ValueError, match="num_heldout must be in 1..88"):
        demo_real.number_split(num_heldout=89)


def test_item_lists_use_only_their_pool() -> None:
    train, held = demo_real.number_split()
    rows = demo_real.item_lists(train, 300, seed=3)
    assert len(rows) == 300 and all(len(set(r["items"])) == 2 for r in rows)
    assert not any(set(held) & set(r["items"]) for r in rows)
    assert demo_real.item_lists(train, 5, seed=3) == rows[:5] and demo_real.item_lists(train, 5, seed=4) != rows[:5]
    assert all(len(r["items"]) == 3 for r in demo_real.item_lists(held, 4, seed=0, size=3))


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_addition_split_is_disjoint_in_either_order(seed: int) -> None:
    train, heldout = demo_real.addition_split(seed)
    assert len(train) + len(heldout) == 100
    unordered = {frozenset(p) for p in heldout}
    assert len(unordered) == 15
    assert not any(frozenset(p) in unordered for p in train)  # (3, 4) held out => (4, 3) never trained on
    rows = demo_real.addition_rows(heldout, 40, seed)
    assert len(rows) == 40 and all(int(r["answer"]) == sum(map(int, r["question"][8:-1].split(" + "))) for r in rows)
    train_questions = {r["question"] for r in demo_real.addition_rows(train, 200, seed)}
    assert train_questions.isdisjoint(r["question"] for r in rows)
    assert demo_real.addition_split(seed) == (train, heldout) and demo_real.addition_split(seed + 1)[1] != heldout
    with pytest.raises(ValueError, match="num_heldout must be in 1..54"):
        demo_real.addition_split(seed, num_heldout=55)


def test_value_models_zero_keeps_the_trainer_default() -> None:
    assert demo_real.value_models(0, seed=0) is None


def test_table() -> None:
    results = {
        "magrpo": {"heldout_lists": 24, "distinct_lists": 22, "before": {"success": 0.047},
                   "after": {"success": 0.797}, "sample_list": [37, 52], "sample_answers": ["37 / 52", "37. / 52."]},
        "maporl": {"questions": 40, "distinct_questions": 27, "before": {"majority_accuracy": [0.3, 0.275]},
                   "after": {"majority_accuracy": [0.5, 0.525]}},
    }
    lines = demo_real.format_real_table(results).splitlines()
    assert lines[0].startswith("MAGRPO: team success on 24 held-out lists (22 distinct), 8 joint actions each")
    assert lines[2].split() == ["MAGRPO", "team", "0.047", "0.797"]
    assert lines[3] == "  answers after MAGRPO to [37, 52]: 37 / 52, 37. / 52."
    assert lines[4] == ("MAPoRL debate (2 agents, 2 turns): majority-vote accuracy over 40 debates of 27 held-out "
                        "additions")
    assert lines[5].split() == ["turn", "1", "turn", "2"]
    assert lines[6].split() == ["before", "training", "0.300", "0.275"]
    assert lines[7].split() == ["after", "training", "0.500", "0.525"]


def test_cli_real_flag_reaches_the_real_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(demo_real, "run_real_demo", seen.append)
    parser = argparse.ArgumentParser()
    add_demo_arguments(parser)
    assert demo_command(parser.parse_args(["--real", "--quick", "--seed", "3"])) == 0
    assert seen == [demo_real.RealDemoConfig(preset="quick", seed=3, output_dir="trl-marl-demo-real")]
    assert parser.parse_args([]).real is False


@pytest.mark.slow
def test_one_real_magrpo_step_of_part_one(real_model_dir: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Part 1 end to end on the real model (1 step, 2 held-out lists): the numbers it reports are what it measured."""
    monkeypatch.setitem(demo_real.MAGRPO_SIZES, "batch", 4)
    monkeypatch.setitem(demo_real.MAGRPO_SIZES, "generations", 2)
    out = demo_real.run_magrpo_real(1, seed=0, eval_lists=2, work_dir=str(tmp_path), show_progress=False)
    assert out["steps"] == 1 and out["heldout_lists"] == 2 and len(out["reward_curve"]) == 1
    assert out["distinct_lists"] == 2
    _, held = demo_real.number_split()
    assert set(out["sample_list"]) <= set(held)
    for phase in ("before", "after"):
        assert out[phase]["joint_actions"] == 16 and 0.0 <= out[phase]["success"] <= out[phase]["reward"] <= 1.0
    assert len(out["sample_answers"]) == 8 and all(" / " in a for a in out["sample_answers"])


@pytest.mark.parametrize(("seed", "count", "questions", "twice"), [(0, 40, 27, 13), (0, 60, 27, 33), (1, 60, 30, 30),
                                                                  (2, 60, 26, 34), (0, 12, 12, 0)])
def test_heldout_debates_repeat_questions_as_documented(seed: int, count: int, questions: int, twice: int) -> None:
    """docs/real_model.md: 60 debates over 26-30 distinct held-out questions (27 for seed 0, 30 for seed 1, 26 for
    seed 2), each debated 2-3 times; the demo's 40 debates of seed 0 ask 27 questions, 13 of them twice. `twice`
    counts the debates beyond each question's first."""
    rows = demo_real.heldout_debate_rows(seed, count)
    _, held = demo_real.addition_split(seed)
    assert len(rows) == count and demo_real.distinct(rows, "question") == questions
    assert count - questions == twice
    assert {r["question"] for r in rows} <= {f"What is {a} + {b}?" for a, b in held}


def test_heldout_lists_repeat_as_documented() -> None:
    """docs/real_model.md: the study's 24 evaluation lists are 22 distinct ones; the demo's 16 are 15."""
    _, held = demo_real.number_split()
    assert demo_real.distinct(demo_real.item_lists(held, 24, demo_real.EVAL_SEED), "items") == 22
    assert demo_real.distinct(demo_real.item_lists(held, 16, demo_real.EVAL_SEED), "items") == 15


def test_value_heads_follow_the_seed_not_the_process(real_model_dir: str) -> None:
    """The MAPoRL value models' new score heads are drawn from the run's seed: not from the global RNG, whose state
    depends on what the process ran before (building the model cache, an earlier seed of the same benchmark), which
    made two runs of one seed on one machine train differently. The global RNG is left as it was."""
    import torch

    def heads(global_state: int, seed: int) -> list[torch.Tensor]:
        torch.manual_seed(global_state)
        torch.rand(global_state)  # whatever the process did before
        before = torch.get_rng_state()
        models = demo_real.value_models(1, count=2, seed=seed)
        assert torch.equal(torch.get_rng_state(), before)
        return [m.score.weight.detach().clone() for m in models]

    first, second, other = heads(1, seed=3), heads(2, seed=3), heads(1, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert not torch.equal(first[0], first[1])  # one head per agent
    assert not torch.equal(first[0], other[0])
