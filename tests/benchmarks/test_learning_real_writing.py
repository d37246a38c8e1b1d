"""The writing task of benchmarks/learning/learning_real.py: rows from the right split, the success threshold, the
centralised arm, and the metrics (team-reward terms, ROUGE-L) computed over sampled joint actions, with fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import load_script

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "learning_real.py"
SHORT = "Cat ate homework."
DETAILED = "My cat ate my homework, and my teacher did not believe me at all."


@pytest.fixture(scope="module")
def bench() -> Any:
    return load_script(PATH)


def test_writing_task_rows_never_train_on_a_heldout_module(bench: Any) -> None:
    from trl_marl.data.team_writing import HELDOUT_MODULES

    task = bench.TASKS["writing"]()
    rows = task.train_rows(500, 0)
    assert len(rows) == 500 and not {r["module"] for r in rows} & set(HELDOUT_MODULES)
    assert task.train_rows(50, 0) != task.train_rows(50, 1)
    held = task.eval_rows("heldout", 16)
    assert len(held) == 16 and {r["module"] for r in held} <= set(HELDOUT_MODULES)
    assert len({r["source"] for r in held}) == 16 and len({r["module"] for r in held}) > 4  # spread over modules
    assert len(task.eval_rows("heldout", 100)) == 44  # each held-out text at most once
    assert not {r["module"] for r in task.eval_rows("train", 16)} & set(HELDOUT_MODULES)
    assert task.sizes["temperature"] == 0.7 and task.sizes["completion"] == 96


def test_writing_task_success_is_a_team_reward_of_at_least_3(bench: Any) -> None:
    from trl_marl.envs.writing import CentralizedWritingEnv, CooperativeWritingEnv

    task = bench.TASKS["writing"]()
    env = task.env(False)
    assert isinstance(env, CooperativeWritingEnv) and env.chat
    team = task.reward(env)
    assert "rouge_l" not in team.names  # ROUGE-L is measured, never trained on
    short = "The cat sat on the warm mat today."
    good = ("The cat sat on the warm mat today because the sun was out. However, a dog barked, so finally the cat "
            "ran away.")
    # |s| = 8, |d| = 23: range 1, ratio 2.875 -> 1; distinct words 19 / 7 -> 1; TTR (7/8 + 19/23) / 2; transitions
    # because, however, finally -> 1; content words 5 shared of 14 -> 5/14. "x" and "x": range (1/8 + 1/16) / 2,
    # ratio 1 -> 0, distinct 1/1 -> 0, TTR 0 (< 5 words), no transition, overlap {x}/{x} = 1: 0.59 before issue 55;
    # now "x" is not about the source, so the source gate makes it 0 (and it would make `good` 0 too against an
    # unrelated source, where it scored 3.6 before)
    source = "The cat sat on the warm mat today because the sun was out. A dog barked and the cat ran away."
    columns = {"prompts": ["p"] * 2, "completions": [short, "x"], "text": [source] * 2,
               "agent_completions": [[short, "x"], [good, "x"]]}
    assert team(**columns) == pytest.approx([3 + 0.5 * (7 / 8 + 19 / 23) / 2 + 0.5 * 5 / 14, 0.0])
    assert task.success(env)(**columns) == [1.0, 0.0]
    assert team(**{**columns, "text": ["t"] * 2}) == [0.0, 0.0]
    assert bench.WRITING_SUCCESS == 3.0
    central = task.env(True)
    assert isinstance(central, CentralizedWritingEnv)
    one = f" {SHORT}\n\nDetailed summary: {DETAILED}"
    cat = ["My cat ate my homework. The teacher did not believe me."]
    assert task.reward(central)(["p"], [one], text=cat) == pytest.approx(
        team(prompts=["p"], completions=[SHORT], agent_completions=[[SHORT], [DETAILED]], text=cat))
    assert task.reward(central)(["p"], [one], text=cat)[0] > 1.5


def test_joint_action_means_of_the_writing_metrics(bench: Any) -> None:
    pytest.importorskip("rouge_score")
    task = bench.TASKS["writing"]()
    rows = [{"text": "my cat ate my homework", "reference": "cat ate homework", "source": "a", "module": "a"},
            {"text": "open a file", "reference": "open it", "source": "b", "module": "b"}]
    # two rows, two samples each: completions[agent][row * 2 + g]
    completions = [["Short summary: cat ate homework", "cat", "open it", "nothing here"],
                   ["my cat ate my homework", "x", "open a file", "y"]]
    means = bench.joint_action_means(task.metrics(task.env(False)), completions, rows)
    assert set(means) == {"team_reward", "length_range", "length_ratio", "vocabulary_ratio", "lexical_diversity",
                          "transition_words", "style_consistency", "rouge_l_short", "rouge_l_detailed_vs_text"}
    # ROUGE-L of agent 0 against its row's reference (label removed): 1, 1/2 ("cat" vs 3 words: P 1, R 1/3),
    # 1 ("open it"), 0
    assert means["rouge_l_short"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    # agent 1 against its row's text: 1, 0, 1, 0
    assert means["rouge_l_detailed_vs_text"] == pytest.approx(0.5)
    team = task.reward(task.env(False))
    expected = team(prompts=[None] * 4, completions=completions[0], agent_completions=completions,
                    text=[rows[i // 2]["text"] for i in range(4)])
    assert means["team_reward"] == pytest.approx(sum(expected) / 4)
    # the central arm's metrics read the same parts out of one completion
    central = bench.joint_action_means(task.metrics(task.env(True)),
                                       [[" cat ate homework\nDetailed summary: my cat ate my homework"]], rows[:1])
    assert central["rouge_l_short"] == pytest.approx(1.0) and central["rouge_l_detailed_vs_text"] == pytest.approx(1)


def test_summary_and_brief_carry_the_metrics(bench: Any) -> None:
    def res(x: float) -> dict:
        return {"success": x, "reward": x, "metrics": {"team_reward": 2 + x, "rouge_l_short": None}}

    runs = [{"seed": s, "untrained": {"heldout": res(0.1 * s), "train_rows": res(0.0)}} for s in (0, 1)]
    summary = bench.summarize("magrpo", runs)
    assert summary["untrained/heldout/team_reward"]["mean"] == pytest.approx(2.05)
    assert "untrained/heldout/rouge_l_short" not in summary  # a metric with no value is left out
    assert bench.brief("magrpo", runs[1])["untrained"]["heldout_team_reward"] == 2.1
