"""`trl_marl.teamwork.evaluate_teamwork` on a two-agent toy team whose two adapters answer differently.

The team: the target-sum toy model with two LoRA adapters; agent 0's adapter starts at zero (its policy is the base
model's), agent 1's is set to large random weights (it answers "1111" where the base answers "1", greedy). So which
weights wrote an answer can be read off the answer, and every condition's answers can be checked by hand.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from peft import LoraConfig

from trl_marl import AgentTeam
from trl_marl.envs import TargetSumEnv
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.teamwork import evaluate_teamwork, teamwork_conditions

ROWS = [{"target": 10}, {"target": 7}]


def perturbed_team(model_dir: str, agent: int = 1, seed: int = 1) -> AgentTeam:
    """Two LoRA agents on the toy model; `agent`'s adapter gets large random weights, the other stays at zero."""
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    team = AgentTeam.build(model_dir, 2, peft_config=lora)
    generator = torch.Generator().manual_seed(seed)
    for name, param in team.models[0].named_parameters():
        if f"lora_B.agent_{agent}" in name:
            param.data.copy_(torch.randn(param.shape, generator=generator) * 3)
    return team


@pytest.fixture(scope="module")
def team(target_model_dir: str) -> AgentTeam:
    return perturbed_team(target_model_dir)


def greedy(team: AgentTeam, **kwargs: Any) -> Any:
    return evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=4, samples_per_row=1,
                             temperature=0, **kwargs)


def reads_agent_1(prompts: list[Any], completions: list[Any], agent_completions: list[list[str]],
                  **kwargs: Any) -> list[float]:
    """1 when agent 1 answered something, whatever agent 0 wrote."""
    return [float(text != "") for text in agent_completions[1]]


def test_the_adapters_answer_differently(team: AgentTeam) -> None:
    report = greedy(team)
    assert report["team"].completions == [["1", "1"], ["1111", "1111"]]


def test_blanking_a_partner_only_empties_its_answer(team: AgentTeam) -> None:
    report = evaluate_teamwork(team, TargetSumEnv(), ROWS, reads_agent_1, max_new_tokens=4, samples_per_row=4)
    team_answers = report["team"].completions
    # agent 1 acts alone: its sampled answers are the team's own (the same random stream), agent 0's are empty
    assert report["blank_partner_1"].completions == [[""] * 8, team_answers[1]]
    assert report["blank_partner_0"].completions == [team_answers[0], [""] * 8]
    # a reward that reads agent 1 only: blanking agent 0 changes nothing, blanking agent 1 zeroes it
    assert report["blank_partner_1"].score == report["team"].score > 0
    assert report["blank_partner_0"].score == 0.0
    assert report.gaps()["blank_partner_1"] == 0.0


@pytest.mark.parametrize("num_turns, batch_size", [(1, None), (1, 3), (2, None)])
def test_blanked_conditions_of_one_turn_replay_the_team_conditions_samples(
        team: AgentTeam, monkeypatch: pytest.MonkeyPatch, num_turns: int, batch_size: int | None) -> None:
    """One turn without tools: a blanked condition samples nothing and scores what the team condition sampled, which
    is what it samples when played alone (same members, prompts and seed). With two turns it samples (its second turn
    sees the blank answer)."""
    from trl_marl.team.generation import TransformersBackend

    calls: list[int] = []
    original = TransformersBackend.generate

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TransformersBackend, "generate", counted)
    env, kwargs = TargetSumEnv(num_turns=num_turns), dict(max_new_tokens=4, samples_per_row=3, batch_size=batch_size)
    report = evaluate_teamwork(team, env, ROWS, reads_agent_1, conditions=["team", "blank_partner_0",
                                                                           "blank_partner_1"], **kwargs)
    per_condition = num_turns * (1 if batch_size is None else 2)  # 6 episodes: one call, or batches of 3
    assert len(calls) == per_condition * (1 if num_turns == 1 else 3)
    for name in ("blank_partner_0", "blank_partner_1"):  # the same as each condition played on its own
        alone = evaluate_teamwork(team, env, ROWS, reads_agent_1, conditions=[name], **kwargs)
        assert report[name].completions == alone[name].completions and report[name].score == alone[name].score
        assert report[name].turn_scores == alone[name].turn_scores


def test_blank_answers_reach_the_reward_and_the_next_turn(team: AgentTeam) -> None:
    def partner_seen(prompts: list[str], completions: list[Any], agent_completions: list[list[str]],
                     turn: int, **kwargs: Any) -> list[float]:
        """Turn 1: whether agent 0's partner answered; turn 2: whether agent 0's prompt shows a partner's answer."""
        if turn == 1:
            return [float(text != "") for text in agent_completions[1]]
        return [float(not prompt.endswith("+:")) for prompt in prompts]

    report = evaluate_teamwork(team, TargetSumEnv(num_turns=2), ROWS, partner_seen, max_new_tokens=4,
                               samples_per_row=1, temperature=0, conditions=["team", "blank_partner_0"])
    assert report["team"].turn_scores == [1.0, 1.0]
    assert report["blank_partner_0"].turn_scores == [0.0, 0.0]


def test_untrained_partner_is_the_base_model_for_a_lora_team(team: AgentTeam) -> None:
    report = greedy(team)
    # agent 0 as trained (zero adapter = base: "1"), agent 1 untrained = the base model: "1", not its adapter's "1111"
    assert report["untrained_partner_0"].completions == [["1", "1"], ["1", "1"]]
    assert report["untrained_partner_1"].completions == [["1", "1"], ["1111", "1111"]]
    assert report.settings["untrained_partner"] == "adapters off"


def test_untrained_partner_from_a_given_team(team: AgentTeam, target_model_dir: str) -> None:
    untrained = perturbed_team(target_model_dir, agent=0, seed=2)  # its agent 0 differs from the base, agent 1 not
    expected = greedy(untrained)["team"].completions
    assert expected[0] != ["1", "1"]
    report = greedy(team, untrained=untrained, conditions=["untrained_partner_0", "untrained_partner_1"])
    assert report["untrained_partner_0"].completions == [["1", "1"], expected[1]]
    assert report["untrained_partner_1"].completions == [expected[0], ["1111", "1111"]]
    assert report.settings["untrained_partner"] == "given team"


def test_roles_swapped_plays_each_policy_in_the_other_role(team: AgentTeam) -> None:
    def agent_0_wrote_long(prompts: list[Any], completions: list[Any], agent_completions: list[list[str]],
                           **kwargs: Any) -> list[float]:
        return [float(len(text) > 2) for text in agent_completions[0]]

    report = greedy(team, metrics={"role_0_long": agent_0_wrote_long})
    assert report["roles_swapped"].completions == [["1111", "1111"], ["1", "1"]]
    assert report["team"].metrics["role_0_long"] == 0.0
    assert report["roles_swapped"].metrics["role_0_long"] == 1.0


def test_metrics_are_scored_in_every_condition(team: AgentTeam) -> None:
    def agent_1_blank(prompts: list[Any], completions: list[Any], agent_completions: list[list[str]],
                      **kwargs: Any) -> list[float | None]:
        return [float(text == "") for text in agent_completions[1]]

    report = greedy(team, metrics={"agent_1_blank": agent_1_blank, "never": lambda prompts, completions, **kw:
                                   [None] * len(completions)})
    assert report.metric_names == ["agent_1_blank", "never"]
    assert {name: r.metrics["agent_1_blank"] for name, r in report.conditions.items()} == {
        "team": 0.0, "blank_partner_0": 1.0, "blank_partner_1": 0.0, "untrained_partner_0": 0.0,
        "untrained_partner_1": 0.0, "roles_swapped": 0.0}
    assert all(r.metrics["never"] is None for r in report.conditions.values())


def test_same_seed_same_samples_and_state_restored(team: AgentTeam) -> None:
    team.train()
    flags = {name: p.requires_grad for name, p in team.named_parameters()}
    rng = torch.get_rng_state()
    first = evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=4, seed=3)
    again = evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=4, seed=3)
    other = evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=4, seed=4)
    assert first.to_dict(completions=True) == again.to_dict(completions=True)
    assert first["team"].completions != other["team"].completions
    assert torch.equal(torch.get_rng_state(), rng)
    assert team.training and {name: p.requires_grad for name, p in team.named_parameters()} == flags
    assert team.models[0].active_adapter in ("agent_0", "agent_1")


def test_batches_of_episodes_give_every_episode(team: AgentTeam) -> None:
    report = evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=4, samples_per_row=3,
                               batch_size=4, conditions=["team"])
    assert report["team"].episodes == 6 and len(report["team"].completions[0]) == 6


def test_table_plot_and_json(team: AgentTeam, tmp_path: Any) -> None:
    report = greedy(team, metrics={"agent_1_answers": reads_agent_1})
    lines = report.table().splitlines()
    assert lines[0].split() == ["condition", "score", "team", "-", "this", "agent_1_answers"]
    assert [line.split()[0] for line in lines[2:]] == list(report.conditions)
    assert lines[3].split()[:3] == ["blank_partner_0", "-0.500", f"{report.gaps()['blank_partner_0']:+.3f}"]
    record = json.loads(json.dumps(report.to_dict()))
    assert record["conditions"]["blank_partner_0"]["metrics"] == {"agent_1_answers": 0.0}
    assert "completions" not in record["conditions"]["team"]
    assert record["settings"]["rows"] == 2 and record["settings"]["temperature"] == 0.0
    path = report.plot(tmp_path / "teamwork.png")
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_full_fine_tune_team_leaves_out_the_untrained_partner(target_model_dir: str) -> None:
    team = AgentTeam.build(target_model_dir, 2)
    names, notes = teamwork_conditions(team)
    assert names == ["team", "blank_partner_0", "blank_partner_1", "roles_swapped"]
    assert "pass `untrained=`" in notes[0]
    report = evaluate_teamwork(team, TargetSumEnv(), ROWS, TargetSumReward(), max_new_tokens=3, samples_per_row=1,
                               untrained=team, conditions=["untrained_partner_0"])
    assert math.isfinite(report["untrained_partner_0"].score)


@pytest.mark.parametrize("change, error, message", [
    ({"rows": [{"target": 10}, {"goal": 3}]}, ValueError, "row 1 lacks the column(s) ['target']"),
    ({"rows": []}, ValueError, "`rows` is empty"),
    ({"env": TargetSumEnv(num_agents=3)}, ValueError, "`env` has 3 agents but `team` has 2"),
    ({"conditions": ["blank_partner_2"]}, ValueError, "unknown condition 'blank_partner_2'"),
    ({"samples_per_row": 0}, ValueError, "`samples_per_row` (0)"),
    ({"metrics": [reads_agent_1]}, TypeError, "`metrics` must map a name"),
])
def test_bad_input_is_named(team: AgentTeam, change: dict[str, Any], error: type, message: str) -> None:
    kwargs = {"env": TargetSumEnv(), "rows": ROWS, **change}
    with pytest.raises(error) as raised:
        evaluate_teamwork(team, kwargs.pop("env"), kwargs.pop("rows"), TargetSumReward(), **kwargs)
    assert message in str(raised.value)


def test_one_agent_or_no_untrained_partner_is_refused(target_model_dir: str) -> None:
    alone = AgentTeam.build(target_model_dir, 1)
    with pytest.raises(ValueError, match="teamwork needs two or more agents"):
        evaluate_teamwork(alone, TargetSumEnv(num_agents=1), ROWS, TargetSumReward())
    full = AgentTeam.build(target_model_dir, 2)
    with pytest.raises(ValueError, match="pass `untrained=`"):
        evaluate_teamwork(full, TargetSumEnv(), ROWS, TargetSumReward(), conditions=["untrained_partner_1"])
    with pytest.raises(TypeError, match="pass `trainer.team`"):
        evaluate_teamwork(type("Trainer", (), {"team": full})(), TargetSumEnv(), ROWS, TargetSumReward())


def test_untrained_partner_of_a_team_of_lora_models_turns_its_adapter_off(target_model_dir: str) -> None:
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    team = AgentTeam.build(target_model_dir, 2, mode="models", peft_config=lora)
    generator = torch.Generator().manual_seed(1)
    for name, param in team.models[1].named_parameters():
        if "lora_B" in name:
            param.data.copy_(torch.randn(param.shape, generator=generator) * 3)
    report = greedy(team, conditions=["team", "untrained_partner_0", "roles_swapped"])
    assert report["team"].completions == [["1", "1"], ["1111", "1111"]]
    assert report["untrained_partner_0"].completions == [["1", "1"], ["1", "1"]]
    assert report["roles_swapped"].completions == [["1111", "1111"], ["1", "1"]]
    assert greedy(team, conditions=["team"])["team"].completions[1] == ["1111", "1111"]  # the adapter is back on


def test_metrics_read_the_tool_messages_of_each_episode() -> None:
    """With tools, every condition's metrics get `agent_tool_messages` (one sample per agent and episode), as the
    rewards do in training: here a metric that reads agent 0's calculator result."""
    from trl_marl.envs.base import Transcript
    from trl_marl.reward_contract import TeamReward
    from trl_marl.rollout import Node, Rollout, TurnResult
    from trl_marl.teamwork import _summarize

    def result_of_agent_0(prompts: Any, completions: Any, agent_tool_messages: list, **kwargs: Any) -> list[float]:
        return [float(turn[1]["content"]) for turn in agent_tool_messages[0]]

    def turn(result: str) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": ""}, {"role": "tool", "name": "calculator", "content": result},
                {"role": "assistant", "content": result}]

    nodes = [Node(0, Transcript()), Node(1, Transcript())]
    result = TurnResult(1, nodes, [["p", "p"], ["p", "p"]], [[[1], [1]]] * 2, [[[2], [2]]] * 2,
                        [["3", "4"], ["", ""]], torch.zeros(1, 2, dtype=torch.long), torch.ones(2, 1),
                        torch.ones(2, 1), transcripts=[Transcript(), Transcript()])
    result.tool_messages = [[turn("3"), turn("4")], None]
    metrics = TeamReward([result_of_agent_0])
    metrics.names = ["agent_0_result"]
    plan = SimpleNamespace(name="team", description="the team")
    summary = _summarize(plan, [(Rollout([result], 0.0, 0, 0), ROWS)], 2, metrics)
    assert summary.metrics == {"agent_0_result": 3.5} and summary.score == 1.0
