"""MAPoRL's evaluation (`trl_marl.evaluation`) and the `maporl_accuracy` evaluate metric, on hand-computed values."""

from __future__ import annotations

import math
from typing import Any

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.evaluation import DebateEvaluation, evaluate_debates, majority_vote_score, plurality_answer
from trl_marl.metrics import MAPORL_ACCURACY_PATH

T, F = True, False


def is_four(answer: str) -> bool:
    return answer == "4"


# ------------------------------------------------------------------------------------ majority vote
def test_plurality_answer() -> None:
    assert plurality_answer(["4", "4", "5"]) == "4"
    assert plurality_answer(["4", "5"]) is None  # tie
    assert plurality_answer([None, None, "5"]) == "5"  # None casts no vote
    assert plurality_answer([None, None]) is None
    assert plurality_answer([]) is None


def test_majority_vote_clear_winner() -> None:
    assert majority_vote_score(["4", "4", "5"], is_four) == 1.0
    assert majority_vote_score(["5", "5", "4"], is_four) == 0.0
    assert majority_vote_score(["4"], is_four) == 1.0


def test_majority_vote_ties_score_the_expected_accuracy() -> None:
    # 2-2 split, one side right: candidates {"4", "5"}, 1 of 2 right -> 0.5
    assert majority_vote_score(["4", "5", "5", "4"], is_four) == 0.5
    # two agents disagree: 0.5
    assert majority_vote_score(["4", "5"], is_four) == 0.5
    # three-way tie, one right: 1/3
    assert majority_vote_score(["1", "4", "3"], is_four) == pytest.approx(1 / 3)
    # three-way tie of pairs (6 agents), one right: 1/3
    assert majority_vote_score(["1", "1", "4", "4", "3", "3"], is_four) == pytest.approx(1 / 3)
    # the tie is only among the top: "4" x2, "5" x2, "6" x1 -> candidates {"4", "5"} -> 0.5
    assert majority_vote_score(["4", "5", "6", "4", "5"], is_four) == 0.5


def test_majority_vote_none_answers() -> None:
    # two unparseable answers do not outvote one parsed answer: "4" wins alone -> 1.0
    assert majority_vote_score([None, None, "4"], is_four) == 1.0
    # None never wins: [None, "4", "5"] is a 1-1 tie between "4" and "5" -> 0.5
    assert majority_vote_score([None, "4", "5"], is_four) == 0.5
    # nobody answered: 0
    assert majority_vote_score([None, None], is_four) == 0.0


def test_majority_vote_with_per_agent_correctness() -> None:
    assert majority_vote_score(["4", "5"], [T, F]) == 0.5
    assert majority_vote_score(["4", "4", "5"], [T, T, F]) == 1.0
    # a candidate's correctness is the mean over its voters (e.g. a model verifier that judged them differently):
    # "4" (votes T, F) -> 0.5; single winner -> 0.5
    assert majority_vote_score(["4", "4", "5"], [T, F, F]) == 0.5
    # None entries are ignored even when "correct"
    assert majority_vote_score([None, "5"], [T, F]) == 0.0
    with pytest.raises(ValueError, match="correctness"):
        majority_vote_score(["4", "5"], [T])


# ------------------------------------------------------------------------------------ debates
# Debate 1 (gold "4"), 3 turns:            Debate 2 (gold "7"), stops after turn 2 (turn 3 = turn 2):
#   turn 1: 4 5 5      R W W                 turn 1: 7 7 None   R R W
#   turn 2: 4 4 5      R R W                 turn 2: 7 8 7      R W R
#   turn 3: 4 4 4      R R R
ANSWERS = [
    [["4", "5", "5"], ["4", "4", "5"], ["4", "4", "4"]],
    [["7", "7", None], ["7", "8", "7"]],
]
CORRECT = [
    [[T, F, F], [T, T, F], [T, T, T]],
    [[T, T, F], [T, F, T]],
]


def test_evaluate_debates_per_turn_accuracy() -> None:
    m = evaluate_debates(ANSWERS, CORRECT)
    assert m["num_debates"] == 2
    # majority: turn 1: d1 "5" wins (2 votes) -> 0, d2 "7" wins -> 1: 0.5; turn 2: d1 "4", d2 "7": 1; turn 3: 1
    assert m["turn_1/majority_accuracy"] == 0.5
    assert m["turn_2/majority_accuracy"] == 1.0
    assert m["turn_3/majority_accuracy"] == 1.0
    # agents: turn 1: (1 + 2) / 6; turn 2: (2 + 2) / 6; turn 3: (3 + 2) / 6 (debate 2 keeps its turn-2 answers)
    assert m["turn_1/agent_accuracy"] == pytest.approx(3 / 6)
    assert m["turn_2/agent_accuracy"] == pytest.approx(4 / 6)
    assert m["turn_3/agent_accuracy"] == pytest.approx(5 / 6)
    assert m["final/majority_accuracy"] == 1.0 and m["final/agent_accuracy"] == pytest.approx(5 / 6)
    assert all(isinstance(v, float) for v in m.values())


def test_evaluate_debates_transitions() -> None:
    m = evaluate_debates(ANSWERS, CORRECT)
    # turn 1 -> 2
    #   W->R: d1 agent 1, d2 agent 2 = 2 of 3 wrong answers (d1 agents 1, 2; d2 agent 2)
    #   R->W: d2 agent 1 = 1 of 3 right answers (d1 agent 0; d2 agents 0, 1)
    assert m["turn_1_2/w_to_r"] == 2 and m["turn_1_2/w_to_r_rate"] == pytest.approx(2 / 3)
    assert m["turn_1_2/r_to_w"] == 1 and m["turn_1_2/r_to_w_rate"] == pytest.approx(1 / 3)
    #   persuaded: others' majority answer at turn 1, per agent:
    #     d1 a0: others (5, 5) -> "5" != "4": candidate; keeps "4": no.  d1 a1, a2: others (4, 5) tie: none.
    #     d2 a0, a1: others (7, None) -> "7" = own: none.  d2 a2: others (7, 7) -> "7" != None: candidate; adopts
    #     "7" (right): persuaded.  => 1 of 2, to R
    assert m["turn_1_2/persuaded"] == 1 and m["turn_1_2/persuaded_rate"] == 0.5
    assert m["turn_1_2/persuaded_to_r"] == 1 and m["turn_1_2/persuaded_to_w"] == 0
    #   persuader: own answer x at turn 1 not the others' majority at turn 1; do the others hold x at turn 2?
    #     d1 a0: x = "4", others turn 2 (4, 5) tie: no.  d1 a1: x = "5", others turn 2 (4, 5): no.
    #     d1 a2: x = "5", others turn 2 (4, 4) -> "4": no.  d2 a0, a1: x = "7" = others' majority: not counted.
    #     d2 a2: x = None: not counted.  => 0 of 3
    assert m["turn_1_2/persuader"] == 0 and m["turn_1_2/persuader_rate"] == 0.0
    # turn 2 -> 3
    #   W->R: d1 agent 2 = 1 of 2 wrong (d1 a2, d2 a1); R->W: 0 of 4 right
    assert m["turn_2_3/w_to_r"] == 1 and m["turn_2_3/w_to_r_rate"] == 0.5
    assert m["turn_2_3/r_to_w"] == 0 and m["turn_2_3/r_to_w_rate"] == 0.0
    #   persuaded: d1 a2: others (4, 4) -> "4" != "5", adopts "4": yes.  d2 a1: others (7, 7) -> "7" != "8",
    #     keeps "8": no.  Everyone else has tied others.  => 1 of 2, to R
    assert m["turn_2_3/persuaded"] == 1 and m["turn_2_3/persuaded_rate"] == 0.5
    assert m["turn_2_3/persuaded_to_r"] == 1
    #   persuader: d1 a0: x = "4", others turn 2 (4, 5) tie != "4": candidate; others turn 3 (4, 4) -> "4": yes.
    #     d1 a1: same: yes.  d1 a2: x = "5", others turn 3 "4": no.  d2 (unchanged): 3 candidates, no.
    #     => 2 of 6
    assert m["turn_2_3/persuader"] == 2 and m["turn_2_3/persuader_rate"] == pytest.approx(1 / 3)


def test_debate_evaluation_docstring_example_and_empty_rates() -> None:
    evaluation = DebateEvaluation()
    evaluation.add([["4", "5"], ["4", "4"]], [[T, F], [T, T]])
    m = evaluation.compute()
    assert (m["turn_1/majority_accuracy"], m["turn_2/majority_accuracy"], m["turn_1_2/persuaded"]) == (0.5, 1.0, 1)
    assert m["turn_1_2/persuader"] == 1  # agent 0's "4" is the other's answer at turn 2
    assert m["turn_1_2/r_to_w_rate"] == 0.0  # agent 0 stayed right
    # one agent: no others, so no persuasion; one turn: no transition keys
    m = evaluate_debates([[["1"], ["4"]]], [[[F], [T]]])
    assert m["turn_1_2/w_to_r"] == 1 and m["turn_1_2/persuaded"] == 0
    assert math.isnan(m["turn_1_2/persuaded_rate"]) and math.isnan(m["turn_1_2/r_to_w_rate"])
    assert not any(key.startswith("turn_1_2") for key in evaluate_debates([[["4"]]], [[[T]]]))


def test_debate_evaluation_errors() -> None:
    evaluation = DebateEvaluation()
    with pytest.raises(ValueError, match="No debate"):
        evaluation.compute()
    with pytest.raises(ValueError, match="turns"):
        evaluation.add([["4"]], [[T], [T]])
    with pytest.raises(ValueError, match="expected 2"):
        evaluation.add([["4", "5"], ["4"]], [[T, F], [T]])
    evaluation.add([["4", "5"]], [[T, F]])
    with pytest.raises(ValueError, match="agents"):
        evaluation.add([["4", "5", "6"]], [[T, F, F]])


class FakeVerifier:
    def extract(self, response: str) -> str | None:
        text = response.replace("The answer is", "").strip()
        return text or None

    def score(self, response: str, gold: Any) -> float:
        return 1.0 if self.extract(response) == str(gold) else 0.0


def test_add_transcripts_uses_the_verifier() -> None:
    transcript = Transcript().extend(["The answer is 4", "The answer is"]).extend(["The answer is 4", "4"])
    evaluation = DebateEvaluation()
    evaluation.add_transcripts([transcript], [4], FakeVerifier())
    assert evaluation.answers == [[["4", None], ["4", "4"]]]
    assert evaluation.correct == [[[T, F], [T, T]]]
    m = evaluation.compute()
    # turn 1: only "4" voted -> 1.0; agents 1/2
    assert m["turn_1/majority_accuracy"] == 1.0 and m["turn_1/agent_accuracy"] == 0.5


# ------------------------------------------------------------------------------------ the evaluate metric
def test_maporl_accuracy_metric_loads_offline_and_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluate = pytest.importorskip("evaluate")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    predictions = [["4", "4", "5"], ["1", "2"], ["1", "2", "3"], [None, "7", None], [None, None], ["8", "9", "9"]]
    references = ["4", "2", "3", "7", "1", "8"]
    metric = evaluate.load(MAPORL_ACCURACY_PATH, keep_in_memory=True)
    result = metric.compute(predictions=predictions, references=references)
    # majority: 1, 1/2, 1/3, 1, 0, 0 -> (2 + 5/6) / 6 = 17/36
    # agents: 2 + 1 + 1 + 1 + 0 + 1 = 6 right of 3 + 2 + 3 + 3 + 2 + 3 = 16 answers
    assert result["majority_accuracy"] == pytest.approx(17 / 36)
    assert result["agent_accuracy"] == pytest.approx(6 / 16)
    expected = [majority_vote_score(p, lambda a, r=r: a == r) for p, r in zip(predictions, references)]
    assert result["majority_accuracy"] == pytest.approx(sum(expected) / len(expected))
    # the script file itself also loads, and surrounding whitespace is ignored
    metric = evaluate.load(MAPORL_ACCURACY_PATH + "/maporl_accuracy.py", keep_in_memory=True)
    assert metric.compute(predictions=[[" 4", "4 ", "5"]], references=["4"]) == {
        "majority_accuracy": 1.0,
        "agent_accuracy": pytest.approx(2 / 3),
    }
