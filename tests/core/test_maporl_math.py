"""MAPoRL's reward math (`trl_marl.core.maporl`) and reward function (`trl_marl.rewards.influence`).

Every expected number is worked out by hand in the comments next to it (Definition 1, Tables 1 and 2 of arXiv
2502.18439). Tensors are indexed `[turn, agent]` from 0; the comments say "turn 1" for index 0 as the paper does.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from helpers import close
from trl_marl.core.maporl import (
    collaboration_incentives,
    influence_aware_reward,
    influence_incentives,
    majority_correctness,
    others_majority_correctness,
    revision_incentives,
    shaped_debate_rewards,
)
from trl_marl.envs.base import Transcript
from trl_marl.rewards.influence import InfluenceAwareReward

R, W = True, False
# Powers of two so that every sum of incentives is unambiguous.
A0, A1, B0, B1 = 1.0, 2.0, 4.0, 8.0


def incentives(correct: list[list[bool]]) -> torch.Tensor:
    return collaboration_incentives(torch.tensor(correct), A0, A1, B0, B1)


# ------------------------------------------------------------------------------------ Definition 1
def test_influence_reward_two_turns_two_agents() -> None:
    v = torch.tensor([[1.0, 0.0], [0.5, 1.0]])
    # team mean at turn 2: (0.5 + 1) / 2 = 0.75
    # gamma = 1: R[1, a] = (V[1, a] + 0.75) / (1 + 1): (1 + 0.75) / 2 = 0.875, (0 + 0.75) / 2 = 0.375
    #            R[2, a] = V[2, a] / 1
    close(influence_aware_reward(v, 1.0), [[0.875, 0.375], [0.5, 1.0]])
    # gamma = 0.5: R[1, a] = (V[1, a] + 0.5 * 0.75) / (1 + 0.5): 1.375 / 1.5 = 0.91666.., 0.375 / 1.5 = 0.25
    close(influence_aware_reward(v, 0.5), [[1.375 / 1.5, 0.25], [0.5, 1.0]])


def test_influence_reward_three_turns_three_agents() -> None:
    v = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    # team means: turn 1: 1/3, turn 2: 2/3, turn 3: 1
    # gamma = 1:
    #   turn 1: denominator 3, future 2/3 + 1 = 5/3: (1 + 5/3) / 3 = 8/9, (0 + 5/3) / 3 = 5/9 (twice)
    #   turn 2: denominator 2, future 1:             (0 + 1) / 2 = 1/2, (1 + 1) / 2 = 1 (twice)
    #   turn 3: V
    close(influence_aware_reward(v, 1.0), [[8 / 9, 5 / 9, 5 / 9], [0.5, 1.0, 1.0], [1.0, 1.0, 1.0]])
    # gamma = 0.5:
    #   turn 1: denominator 1 + 0.5 + 0.25 = 1.75, future 0.5 * 2/3 + 0.25 * 1 = 7/12:
    #           (1 + 7/12) / 1.75 = (19/12) / (7/4) = 19/21, (7/12) / (7/4) = 1/3
    #   turn 2: denominator 1.5, future 0.5 * 1 = 0.5: (0 + 0.5) / 1.5 = 1/3, (1 + 0.5) / 1.5 = 1
    close(influence_aware_reward(v, 0.5), [[19 / 21, 1 / 3, 1 / 3], [1 / 3, 1.0, 1.0], [1.0, 1.0, 1.0]])


def test_influence_reward_three_turns_two_agents_and_two_turns_three_agents() -> None:
    v = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    # team means: 0.5, 0.5, 0; gamma = 0.5
    #   turn 1: denominator 1.75, future 0.5 * 0.5 + 0.25 * 0 = 0.25: 0.25 / 1.75 = 1/7, 1.25 / 1.75 = 5/7
    #   turn 2: denominator 1.5, future 0.5 * 0 = 0: 1 / 1.5 = 2/3, 0
    close(influence_aware_reward(v, 0.5), [[1 / 7, 5 / 7], [2 / 3, 0.0], [0.0, 0.0]])
    v = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    # team mean at turn 2: 2/3; gamma = 1: (1 + 2/3) / 2 = 5/6, (0 + 2/3) / 2 = 1/3
    close(influence_aware_reward(v, 1.0), [[5 / 6, 1 / 3, 1 / 3], [1.0, 1.0, 0.0]])


def test_influence_reward_edge_cases() -> None:
    v = torch.tensor([[0.2, 0.7], [0.4, 0.9], [1.0, 0.0]])
    close(influence_aware_reward(v, 0.0), v.tolist())  # gamma = 0: only the answer itself (0^0 = 1)
    close(influence_aware_reward(v[:1], 0.7), v[:1].tolist())  # one turn: R = V
    # one agent (self-correction), gamma = 1: turn 1 (0 + 1) / 2 = 0.5
    close(influence_aware_reward(torch.tensor([[0.0], [1.0]]), 1.0), [[0.5], [1.0]])
    # batched (B, T, A) is the same as one debate at a time; integer scores are promoted to floats
    batch = torch.stack([v, v.flip(0), torch.ones(3, 2)])
    out = influence_aware_reward(batch, 0.5)
    for b in range(3):
        torch.testing.assert_close(out[b], influence_aware_reward(batch[b], 0.5))
    assert influence_aware_reward(torch.tensor([[1, 0], [1, 1]]), 1.0).dtype == torch.get_default_dtype()
    with pytest.raises(ValueError, match="gamma"):
        influence_aware_reward(v, 1.5)
    with pytest.raises(ValueError, match="shape"):
        influence_aware_reward(torch.ones(3), 1.0)


# ------------------------------------------------------------------------------------ majorities
def test_majority_correctness() -> None:
    c = torch.tensor([[R, W, W], [W, R, R], [R, R, W]])
    # all three agents: turn 1 one R two W -> W; turn 2 -> R; turn 3 -> R
    close(majority_correctness(c).float(), [-1.0, 1.0, 1.0])
    # without agent 0: (W, W) -> W, (R, R) -> R, (R, W) -> tie
    close(majority_correctness(c, exclude_agent=0).float(), [-1.0, 1.0, 0.0])
    close(majority_correctness(c, exclude_agent=-1).float(), [0.0, 0.0, 1.0])  # agents 0, 1
    # per agent: M[t, a] is the majority of the others
    close(others_majority_correctness(c).float(), [[-1, 0, 0], [1, 0, 0], [0, 0, 1]])
    # two agents: the other agent's correctness
    close(others_majority_correctness(torch.tensor([[R, W], [W, W]])).float(), [[-1, 1], [-1, -1]])
    # one agent: no others, always a tie
    close(others_majority_correctness(torch.tensor([[R], [W]])).float(), [[0], [0]])
    with pytest.raises(IndexError):
        majority_correctness(c, exclude_agent=3)


# ------------------------------------------------------------------------------------ Tables 1 and 2, two agents
# alpha0 = 1, alpha1 = 2, beta0 = 4, beta1 = 8. "other" = the other agent = the others' majority.
@pytest.mark.parametrize(
    ("correct", "expected"),
    [
        # agent 0 R->W while the other was R at turn 1: Table 1 -alpha1 on agent 0 at turn 2;
        # the other's view: its "majority" (agent 0) went R->W while its own turn-1 answer was R: -beta1 at turn 1
        ([[R, R], [W, R]], [[0, -B1], [-A1, 0]]),
        # agent 0 R->W while the other was W: -alpha0; the other (W) saw agent 0 go R->W: -beta0
        ([[R, W], [W, W]], [[0, -B0], [-A0, 0]]),
        # agent 0 W->R while the other was W: +alpha0; the other (W) saw agent 0 go W->R: +beta0
        ([[W, W], [R, W]], [[0, B0], [A0, 0]]),
        # agent 0 W->R while the other was R: +alpha1; the other (R) saw agent 0 go W->R: +beta1
        ([[W, R], [R, R]], [[0, B1], [A1, 0]]),
        # both flip. Agent 0: R->W, other W at turn 1 (Majority (t), not t+1): -alpha0 at turn 2; the other went
        # W->R while agent 0 was R: +beta1 at turn 1. Agent 1: W->R, other R at turn 1: +alpha1 at turn 2; the
        # other went R->W while agent 1 was W: -beta0 at turn 1.
        ([[R, W], [W, R]], [[B1, -B0], [-A0, A1]]),
        # nobody changes: nothing
        ([[R, W], [R, W]], [[0, 0], [0, 0]]),
        ([[W, W], [W, W]], [[0, 0], [0, 0]]),
    ],
)
def test_incentives_two_agents(correct: list[list[bool]], expected: list[list[float]]) -> None:
    close(incentives(correct), expected)


def test_incentives_three_turns_two_agents() -> None:
    c = [[W, R], [R, R], [R, W]]
    # agent 0: turn 1->2 W->R with the other R at turn 1: +alpha1 = 2 on turn 2;
    #          turn 2->3 the other R->W while agent 0 was R at turn 2: -beta1 = -8 on turn 2  => 2 - 8 = -6
    # agent 1: turn 1->2 the other W->R while agent 1 was R at turn 1: +beta1 = 8 on turn 1;
    #          turn 2->3 R->W with the other R at turn 2: -alpha1 = -2 on turn 3
    close(incentives(c), [[0, B1], [A1 - B1, 0], [0, -A1]])
    # the two tables separately
    close(revision_incentives(torch.tensor(c), A0, A1), [[0, 0], [A1, 0], [0, -A1]])
    close(influence_incentives(torch.tensor(c), B0, B1), [[0, B1], [-B1, 0], [0, 0]])


# ------------------------------------------------------------------------------------ Tables 1 and 2, three agents
@pytest.mark.parametrize(
    ("correct", "expected"),
    [
        # Table 1, every cell (agent 0 revises; agents 1, 2 are "the others")
        # R->W, others (R, R) = R: -alpha1. Agents 1/2: others (agent 0, one R) go (R,R) -> (W,R) = tie: nothing.
        ([[R, R, R], [W, R, R]], [[0, 0, 0], [-A1, 0, 0]]),
        # R->W, others (W, W) = W: -alpha0. Agents 1/2: others at turn 1 (R, W) = tie: nothing.
        ([[R, W, W], [W, W, W]], [[0, 0, 0], [-A0, 0, 0]]),
        # W->R, others W: +alpha0. Agents 1/2: others at turn 2 (R, W) = tie: nothing.
        ([[W, W, W], [R, W, W]], [[0, 0, 0], [A0, 0, 0]]),
        # W->R, others R: +alpha1. Agents 1/2: others at turn 1 (W, R) = tie: nothing.
        ([[W, R, R], [R, R, R]], [[0, 0, 0], [A1, 0, 0]]),
        # Table 2, every cell (agent 0 at turn 1; agents 1, 2 change together)
        # others R->W, agent 0 R: -beta1. Agents 1/2: R->W with others (R, R) = R: -alpha1 each;
        # their others go (R, R) -> (R, W) = tie: no beta.
        ([[R, R, R], [R, W, W]], [[-B1, 0, 0], [0, -A1, -A1]]),
        # others R->W, agent 0 W: -beta0. Agents 1/2: R->W with others (W, R) = tie: nothing.
        ([[W, R, R], [W, W, W]], [[-B0, 0, 0], [0, 0, 0]]),
        # others W->R, agent 0 W: +beta0. Agents 1/2: W->R with others (W, W) = W: +alpha0 each.
        ([[W, W, W], [W, R, R]], [[B0, 0, 0], [0, A0, A0]]),
        # others W->R, agent 0 R: +beta1. Agents 1/2: W->R with others (R, W) = tie: nothing.
        ([[R, W, W], [R, R, R]], [[B1, 0, 0], [0, 0, 0]]),
        # Ties give nothing: agent 0 W->R but its others (R, W) are tied at turn 1, and every agent's others are
        # tied at turn 1 or turn 2 (agent 1: (W, W) -> (R, W); agent 2: (W, R) -> (R, R)).
        ([[W, R, W], [R, R, W]], [[0, 0, 0], [0, 0, 0]]),
        # Agent 0 R->W against others (W, W): -alpha0; its others go W -> R while it was R: +beta1.
        # Agents 1/2 W->R but their others are tied at both turns: nothing.
        ([[R, W, W], [W, R, R]], [[B1, 0, 0], [-A0, 0, 0]]),
    ],
)
def test_incentives_three_agents(correct: list[list[bool]], expected: list[list[float]]) -> None:
    close(incentives(correct), expected)


def test_incentives_one_agent_and_one_turn() -> None:
    # self-correction: no other agents, so no majority and no incentive (the authors' code would give -/+alpha1)
    close(incentives([[R], [W]]), [[0], [0]])
    close(incentives([[W], [R]]), [[0], [0]])
    close(incentives([[R, W, W]]), [[0, 0, 0]])  # one turn: no transition


def test_incentives_batched_and_shaped_reward() -> None:
    cases = [[[R, R], [W, R]], [[R, W], [W, R]], [[W, W], [W, W]]]
    batch = collaboration_incentives(torch.tensor(cases), A0, A1, B0, B1)
    for b, case in enumerate(cases):
        torch.testing.assert_close(batch[b], incentives(case))
    # shaped reward = Definition 1 + incentives; `correct` defaults to scores >= 0.5
    scores = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # Definition 1, gamma = 1: turn 1 (1 + 0.5) / 2 = 0.75, (0 + 0.5) / 2 = 0.25; turn 2 = V
    # incentives of [[R, W], [W, R]] from the two-agent table: [[8, -4], [-1, 2]]
    expected = [[0.75 + B1, 0.25 - B0], [0.0 - A0, 1.0 + A1]]
    close(shaped_debate_rewards(scores, None, 1.0, A0, A1, B0, B1), expected)
    close(shaped_debate_rewards(scores, scores > 0.5, 1.0, A0, A1, B0, B1), expected)
    # float64 scores keep float64 incentives (0.1 is not rounded to float32)
    out = shaped_debate_rewards(scores.double(), None, 1.0, 0.1, 0.0, 0.0, 0.0)
    assert out.dtype == torch.float64 and out[1, 0].item() == -0.1
    with pytest.raises(ValueError, match="shape"):
        shaped_debate_rewards(scores, torch.ones(3, 2, dtype=torch.bool))


# ------------------------------------------------------------------------------------ the reward function
class FakeVerifier:
    """Exact match after stripping: 1.0 or 0.0; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def score(self, response: str, gold: Any) -> float:
        self.calls += 1
        if isinstance(gold, list):  # a gold column of lists (unhashable), e.g. several accepted answers
            return 1.0 if response.strip() in gold else 0.0
        return 1.0 if response.strip() == str(gold) else 0.0


def make_transcripts(debates: list[list[list[str]]]) -> list[Transcript]:
    out = []
    for turns in debates:
        transcript = Transcript()
        for responses in turns:
            transcript = transcript.extend(responses)
        out.append(transcript)
    return out


def call_like_ppo(reward: InfluenceAwareReward, transcripts: list[Transcript], golds: list[Any]) -> list[list[list]]:
    """Call the reward as the PPO trainer does: once per (turn, agent). Returns values[t][a][debate]."""
    num_turns = max(len(tr) for tr in transcripts)
    num_agents = len(transcripts[0][0].responses)
    values = []
    for t in range(1, num_turns + 1):
        row = []
        for a in range(num_agents):
            completions = [tr[min(t, len(tr)) - 1].responses[a] for tr in transcripts]
            row.append(
                reward(
                    prompts=["q"] * len(transcripts),
                    completions=completions,
                    agent_index=a,
                    turn=t,
                    transcript=transcripts,
                    answer=golds,
                    trainer_state=None,
                )
            )
        values.append(row)
    return values


def test_reward_influence_mode_matches_hand_computation_and_verifies_once() -> None:
    verifier = FakeVerifier()
    reward = InfluenceAwareReward(verifier, gamma=1.0, alpha0=A0, alpha1=A1, beta0=B0, beta1=B1)
    assert reward.name == "influence_aware"
    # debate 0 (gold 4): turn 1 ["4", "5"] -> V [[1, 0]], turn 2 ["5", "4"] -> [[0, 1]]: correctness [[R, W], [W, R]]
    # debate 1 (gold 7): turn 1 ["7", "7"], turn 2 ["7", "7"]: all R, no change
    transcripts = make_transcripts([[["4", "5"], ["5", "4"]], [["7", "7"], [" 7", "7 "]]])
    values = call_like_ppo(reward, transcripts, [4, 7])
    # debate 0: Definition 1 (gamma = 1): turn 1 (1 + 0.5) / 2 = 0.75, (0 + 0.5) / 2 = 0.25; turn 2 = [0, 1]
    #           incentives (two-agent table, both flip): [[8, -4], [-1, 2]]
    # debate 1: Definition 1 = 1 everywhere, no incentives
    assert values[0][0] == pytest.approx([0.75 + B1, 1.0])
    assert values[0][1] == pytest.approx([0.25 - B0, 1.0])
    assert values[1][0] == pytest.approx([0.0 - A0, 1.0])
    assert values[1][1] == pytest.approx([1.0 + A1, 1.0])
    # 2 debates x 2 turns x 2 agents = 8 verifications, not 8 * (2 * 2) calls
    assert verifier.calls == 8 and reward.num_verifications == 8
    # a new batch (different responses) is verified again
    call_like_ppo(reward, make_transcripts([[["1", "2"], ["2", "2"]]]), [2])
    assert verifier.calls == 8 + 4


def test_reward_modes_and_early_stopped_debates() -> None:
    # debate 0 (gold 4) stops after turn 1; debate 1 (gold 4) has 3 turns; unhashable golds are fine
    transcripts = make_transcripts([[["4", "5"]], [["5", "5"], ["4", "5"], ["4", "4"]]])
    golds = [["4", "four"], "4"]
    v = InfluenceAwareReward(FakeVerifier(), mode="verifier")
    tables = v.debate_rewards(transcripts, golds)
    close(tables[0], [[1.0, 0.0]])
    close(tables[1], [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    final = InfluenceAwareReward(FakeVerifier(), mode="final")
    tables = final.debate_rewards(transcripts, golds)
    close(tables[0], [[1.0, 0.0]])  # its own last turn is turn 1
    close(tables[1], [[1.0, 1.0]] * 3)
    influence = InfluenceAwareReward(FakeVerifier(), gamma=0.5)
    tables = influence.debate_rewards(transcripts, golds)
    # debate 1, V = [[0, 0], [1, 0], [1, 1]], team means 0, 0.5, 1, gamma = 0.5:
    #   turn 1: (0 + 0.5 * 0.5 + 0.25 * 1) / 1.75 = 0.5 / 1.75 = 2/7 (both agents)
    #   turn 2: (V + 0.5 * 1) / 1.5: 1.5 / 1.5 = 1, 0.5 / 1.5 = 1/3
    close(tables[1], [[2 / 7, 2 / 7], [1.0, 1 / 3], [1.0, 1.0]])
    close(tables[0], [[1.0, 0.0]])
    # asking for turn 2 of the one-turn debate is an error (a transcript that is not complete)
    with pytest.raises(ValueError, match="complete transcript"):
        influence(completions=["x", "y"], agent_index=0, turn=2, transcript=transcripts, answer=["4", "4"])


def test_reward_verifier_mode_without_transcript_and_errors() -> None:
    # "verifier" mode works as a plain TRL reward function: scores `completions`
    v = InfluenceAwareReward(FakeVerifier(), mode="verifier")
    assert v(prompts=["a", "b"], completions=["4", [{"role": "assistant", "content": "5"}]], answer=[4, 4]) == [
        1.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="transcript"):
        InfluenceAwareReward(FakeVerifier())(prompts=["a"], completions=["4"], answer=[4])
    with pytest.raises(KeyError, match="answer"):
        v(prompts=["a"], completions=["4"], solution=[4])
    with pytest.raises(ValueError, match="only apply"):
        InfluenceAwareReward(FakeVerifier(), mode="final", alpha0=0.1)
    with pytest.raises(ValueError, match="mode"):
        InfluenceAwareReward(FakeVerifier(), mode="team")
    with pytest.raises(TypeError, match="score"):
        InfluenceAwareReward(object())


class FakeBatchVerifier:
    """The batch API of trl-marl's verifiers: `score_batch(questions, responses, golds)`; records every call."""

    question_column = "question"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str], list[Any]]] = []

    def score_batch(self, questions: list[str], responses: list[str], golds: list[Any]) -> list[float]:
        self.calls.append((list(questions), list(responses), list(golds)))
        # a "model" that only believes answers to the question "q1"
        return [1.0 if q == "q1" and r == str(g) else 0.0 for q, r, g in zip(questions, responses, golds)]

    def score(self, question: str, response: str) -> float:  # a model verifier's signature: never used
        raise AssertionError("score_batch must be preferred over score")


def test_reward_prefers_score_batch_with_questions() -> None:
    verifier = FakeBatchVerifier()
    reward = InfluenceAwareReward(verifier, mode="verifier")
    transcripts = make_transcripts([[["4", "5"], ["4", "4"]], [["4", "4"], ["4", "4"]]])
    kwargs = dict(transcript=transcripts, answer=[4, 4], question=["q1", "q2"])
    assert reward(completions=["4", "4"], agent_index=0, turn=1, **kwargs) == [1.0, 0.0]
    assert reward(completions=["5", "4"], agent_index=1, turn=1, **kwargs) == [0.0, 0.0]
    assert reward(completions=["4", "4"], agent_index=1, turn=2, **kwargs) == [1.0, 0.0]
    # one call for the whole batch, flattened debate -> turn -> agent, with each debate's question and gold
    assert len(verifier.calls) == 1
    questions, responses, golds = verifier.calls[0]
    assert questions == ["q1"] * 4 + ["q2"] * 4
    assert responses == ["4", "5", "4", "4", "4", "4", "4", "4"]
    assert golds == [4] * 8
    # a model-based verifier without its question column is an error, not a silent empty question
    with pytest.raises(KeyError, match="question"):
        InfluenceAwareReward(FakeBatchVerifier())(
            completions=["4"], agent_index=0, turn=1, transcript=transcripts[:1], answer=[4]
        )
