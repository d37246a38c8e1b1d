"""One engine under both trainers: one rollout, one reward contract, one evaluation, and the public hooks."""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.envs import TargetSumEnv
from trl_marl.envs.debate import DebateEnv
from trl_marl.reward_contract import NonFiniteError, RewardSet, agent_reward, team_reward
from trl_marl.rewards import AnswerVerifier, InfluenceAwareReward, TargetSumReward
from trl_marl.rollout import JointRollout, Rollout
from trl_marl.toy import toy_debate_dataset

warnings.filterwarnings("ignore")


COMMON = dict(report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0)


def magrpo_args(tmp_path: Path, **overrides: Any) -> MAGRPOConfig:
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path / "magrpo"), num_agents=2, num_generations=4,
                                  per_device_train_batch_size=16, max_completion_length=4, learning_rate=3e-3,
                                  max_steps=2, per_device_eval_batch_size=8, **COMMON)
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def ppo_args(tmp_path: Path, **overrides: Any) -> MultiAgentPPOConfig:
    kwargs: dict[str, Any] = dict(output_dir=str(tmp_path / "ppo"), num_agents=2, per_device_train_batch_size=8,
                                  total_episodes=16, response_length=4, stop_token="eos", num_ppo_epochs=1,
                                  learning_rate=1e-3, num_sample_generations=0, per_device_eval_batch_size=8,
                                  **COMMON)
    kwargs.update(overrides)
    return MultiAgentPPOConfig(**kwargs)


def digest(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        h.update(key.encode())
        h.update(value.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def targets(n: int = 64) -> Dataset:
    return Dataset.from_dict({"target": [10] * n})


# ---------------------------------------------------------------------------------------------- one rollout engine
def test_ppo_plays_with_the_engine_one_sample_per_agent(target_model_dir: str, tmp_path: Path) -> None:
    trainer = MultiAgentPPOTrainer(args=ppo_args(tmp_path, num_turns=2), model=target_model_dir,
                                   reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, 2), train_dataset=targets())
    assert isinstance(trainer.joint_rollout, JointRollout) and trainer.joint_rollout.num_generations == 1
    rows = [{"target": 10}] * 3
    rollouts = trainer.rollout(rows)
    played = trainer.last_rollout
    assert isinstance(played, Rollout) and [t.turn for t in played.turns] == [1, 2]
    for t in played.turns:  # one node per episode, one joint action per node
        assert [n.row_index for n in t.nodes] == [0, 1, 2] and t.joint_indices.tolist() == [[0, 0]]
    # turn 2's prompts are built from turn 1's joint action (env feedback through the shared transcript)
    first = played.turns[0].completions
    assert played.turns[1].nodes[0].transcript[0].responses == (first[0][0], first[1][0])
    assert all(len(ro.texts) == 3 * 2 for ro in rollouts)  # each agent: 3 episodes x 2 turns


class EndsEarlyEnv(TargetSumEnv):
    """TargetSumEnv whose episodes of odd targets end after turn 1 (`is_done`), as a solved coding task does."""

    def is_done(self, row: Any, transcript: Any) -> bool:
        return len(transcript) >= self.num_turns or (int(row["target"]) % 2 == 1 and len(transcript) >= 1)


@pytest.mark.parametrize("policy_sharing", ["agent", "agent_turn"])
def test_ppo_episodes_end_when_the_env_says_so(target_model_dir: str, tmp_path: Path, policy_sharing: str) -> None:
    data = Dataset.from_dict({"target": [10, 11] * 16})
    trainer = MultiAgentPPOTrainer(args=ppo_args(tmp_path, num_turns=2, policy_sharing=policy_sharing),
                                   model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=EndsEarlyEnv(2, 2),
                                   train_dataset=data)
    rollouts = trainer.rollout([{"target": 10}, {"target": 11}, {"target": 10}])
    played = trainer.last_rollout
    assert [n.row_index for n in played.turns[1].nodes] == [0, 2]  # the odd target's episode ended at turn 1
    samples = sorted(len(ro.texts) for ro in rollouts if ro is not None)
    assert samples == ([5, 5] if policy_sharing == "agent" else [2, 2, 3, 3])
    before = digest(trainer.wrapper)
    trainer.train()
    assert digest(trainer.wrapper) != before
    assert all("turn_2/reward" in h for h in trainer.state.log_history if "objective/scores" in h)


# ---------------------------------------------------------------------------------------------- reward contract
class CountingTeamReward:
    """A team reward that remembers how it was called."""

    name = "counting"
    reward_kind = "team"
    reward_isolation = "thread"  # the tests read `calls`: run in the trainer's process, not in a worker

    def __init__(self) -> None:
        self.calls: list[tuple[Any, int, int]] = []
        self.inner = TargetSumReward(0.5)

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        self.calls.append((kwargs["agent_index"], kwargs["turn"], len(completions)))
        for i, transcript in enumerate(kwargs["transcript"]):  # the transcript includes the scored turn
            assert transcript[kwargs["turn"] - 1].responses == tuple(c[i] for c in kwargs["agent_completions"])
        return self.inner(prompts, completions, **kwargs)


def test_a_team_reward_works_unchanged_under_both_trainers(target_model_dir: str, tmp_path: Path) -> None:
    reward = CountingTeamReward()
    magrpo = MAGRPOTrainer(model=target_model_dir, reward_funcs=reward, env=TargetSumEnv(2),
                           args=magrpo_args(tmp_path, max_steps=1), train_dataset=targets())
    magrpo.train()
    assert reward.calls == [(None, 1, 16)]  # once per turn, one entry per joint action (4 episodes x G=4)

    reward.calls.clear()
    ppo = MultiAgentPPOTrainer(args=ppo_args(tmp_path, num_turns=2), model=target_model_dir, reward_funcs=reward,
                               env=TargetSumEnv(2, 2), train_dataset=targets())
    rollouts = ppo.rollout([{"target": 10}] * 5)
    # once per turn for the whole team (not once per agent), one entry per joint action (episode)
    assert reward.calls == [(None, 1, 5), (None, 2, 5)]
    torch.testing.assert_close(rollouts[0].scores, rollouts[1].scores)  # every agent gets its joint action's score
    ppo.train()
    assert any("turn_2/reward" in h for h in ppo.state.log_history)


def test_agent_and_team_kinds_mean_the_same_in_both_trainers() -> None:
    seen: list[Any] = []

    @agent_reward
    def per_agent(prompts: list[Any], completions: list[Any], agent_index: int, **kwargs: Any) -> list[float]:
        seen.append(agent_index)
        return [float(agent_index)] * len(completions)

    @team_reward
    def team(prompts: list[Any], completions: list[Any], agent_index: Any, **kwargs: Any) -> list[float | None]:
        seen.append(agent_index)
        return [1.0, None]

    rewards = RewardSet([per_agent, team], [1.0, 2.0])
    args = ([["p", "q"], ["p", "q"]], [["a", "b"], ["c", "d"]], [{}, {}], [None, None], 1)
    joint, bad = rewards.score(*args)  # MAGRPO: one score per joint action
    assert seen == [0, 1, None] and not bad.any()
    torch.testing.assert_close(rewards.combine(joint, bad), torch.tensor([0.5 + 2.0, 0.5]))
    per_agent_scores, bad = rewards.score(*args, per_agent=True)  # PPO: one score per (joint action, agent)
    torch.testing.assert_close(rewards.combine(per_agent_scores, bad), torch.tensor([[2.0, 3.0], [0.0, 1.0]]))


def test_ppo_leaves_unscorable_responses_out_and_counts_nonfinite(target_model_dir: str, tmp_path: Path) -> None:
    def agent_zero_only(prompts: list[Any], completions: list[Any], agent_index: int, **kwargs: Any) -> list[Any]:
        return [1.0 if agent_index == 0 else None] * len(completions)

    trainer = MultiAgentPPOTrainer(args=ppo_args(tmp_path), model=target_model_dir, reward_funcs=agent_zero_only,
                                   env=TargetSumEnv(2), train_dataset=targets())
    rollouts = trainer.rollout([{"target": 10}] * 4)
    assert rollouts[0].scorable.all() and not rollouts[1].scorable.any()
    assert not rollouts[1].policy_mask.any() and not rollouts[1].value_mask.any()  # out of both losses
    trainer.train()

    def nan_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        return [float("nan")] + [1.0] * (len(completions) - 1)

    trainer = MultiAgentPPOTrainer(args=ppo_args(tmp_path, max_nonfinite=2), model=target_model_dir,
                                   reward_funcs=nan_reward, env=TargetSumEnv(2), train_dataset=targets())
    with pytest.raises(NonFiniteError, match="max_nonfinite=2"):
        trainer.train()  # 2 NaN scores (one per agent) per update: the second update passes the limit


def test_influence_reward_works_under_magrpo_on_debate_env(debate_model_dir: str, tmp_path: Path) -> None:
    """MAGRPO trains on DebateEnv with MAPoRL's influence-aware reward and reports per-turn majority accuracy."""
    verifier = AnswerVerifier(task="math")
    influence = InfluenceAwareReward(verifier, alpha0=0.1, alpha1=0.1, beta0=0.1, beta1=0.1)
    env = DebateEnv(num_agents=2, num_turns=2, first_turn_template="Q:{question}=A:",
                    revision_template="Q:{question}={own_answers} {other_answers}?A:")
    trainer = MAGRPOTrainer(model=debate_model_dir, reward_funcs=influence, env=env,
                            args=magrpo_args(tmp_path, num_turns=2, max_steps=2, max_completion_length=4,
                                             eval_strategy="steps", eval_steps=2),
                            train_dataset=toy_debate_dataset(32, seed=0), eval_dataset=toy_debate_dataset(8, seed=1))
    before = digest(trainer.team)
    trainer.train()
    assert digest(trainer.team) != before
    metrics = trainer.evaluate()
    for key in ("eval_reward", "eval_turn_1/reward", "eval_turn_2/reward", "eval_turn_1/majority_accuracy",
                "eval_turn_2/majority_accuracy", "eval_turn_1/agent_accuracy", "eval_turn_1_2/w_to_r",
                "eval_turn_1_2/persuaded_rate", "eval_final/majority_accuracy", "eval_num_debates", "eval_runtime"):
        assert key in metrics, key
    assert metrics["eval_num_debates"] == 8
    assert 0.0 <= metrics["eval_turn_2/majority_accuracy"] <= 1.0
    logged = set().union(*(h.keys() for h in trainer.state.log_history))
    assert "eval_turn_2/majority_accuracy" in logged and "turn_2/reward" in logged


def test_multi_agent_ppo_trains_on_the_cooperative_writing_env(tmp_path: Path) -> None:
    pytest.importorskip("rouge_score")
    from trl_marl.envs.writing import CooperativeWritingEnv
    from trl_marl.rewards.writing import WritingTeamReward
    from trl_marl.toy import build_toy_model, build_toy_tokenizer

    torch.manual_seed(0)
    tokenizer = build_toy_tokenizer()
    writing = WritingTeamReward()
    for func in writing.funcs:  # the writing terms declare it; ROUGE-L (a general reward) is made one here too
        func.reward_kind = "team"
    data = Dataset.from_dict({"text": ["My cat ate my homework."] * 8, "reference": ["cat ate homework", None] * 4})
    trainer = MultiAgentPPOTrainer(
        args=ppo_args(tmp_path, num_turns=2, reward_weights=writing.weights, per_device_train_batch_size=4,
                      total_episodes=8, prompt_length_check="ignore"),
        model=build_toy_model(tokenizer, hidden_size=32, num_layers=1), processing_class=tokenizer,
        reward_funcs=writing.funcs, env=CooperativeWritingEnv(num_turns=2), train_dataset=data,
    )
    before = digest(trainer.wrapper)
    trainer.train()
    assert digest(trainer.wrapper) != before
    updates = [h for h in trainer.state.log_history if "objective/scores" in h]
    assert len(updates) == 2
    for h in updates:
        for key in ("turn_1/reward", "turn_2/reward", "agent_0/reward", "agent_1/turn_2/reward"):
            assert torch.isfinite(torch.tensor(h[key])), key


def test_one_set_of_evaluation_metric_names(target_model_dir: str, tmp_path: Path) -> None:
    data = Dataset.from_dict({"target": [10] * 8})
    magrpo = MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, 2),
                           args=magrpo_args(tmp_path, num_turns=2), train_dataset=targets(), eval_dataset=data)
    ppo = MultiAgentPPOTrainer(args=ppo_args(tmp_path, num_turns=2), model=target_model_dir,
                               reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2, 2), train_dataset=targets(),
                               eval_dataset=data)
    names = [set(trainer.evaluate()) for trainer in (magrpo, ppo)]
    assert names[0] == names[1] == {"eval_reward", "eval_turn_1/reward", "eval_turn_2/reward", "eval_runtime"}


# ---------------------------------------------------------------------------------------------- hooks
def _train_magrpo(cls: type, target_dir: str, tmp_path: Path) -> str:
    trainer = cls(model=target_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                  args=magrpo_args(tmp_path), train_dataset=targets())
    trainer.train()
    return digest(trainer.team)


class ConstantRewardMAGRPO(MAGRPOTrainer):
    def compute_rewards(self, prompts, completions, rows, transcripts, turn):  # noqa: ANN001, ANN201
        per_func, nonfinite = super().compute_rewards(prompts, completions, rows, transcripts, turn)
        return torch.ones_like(per_func), nonfinite  # every joint action alike: no advantage, no update


class NegatedAdvantageMAGRPO(MAGRPOTrainer):
    def compute_advantages(self, rollout):  # noqa: ANN001, ANN201
        return [-a for a in super().compute_advantages(rollout)]


class DoubledLossMAGRPO(MAGRPOTrainer):
    def compute_agent_loss(self, agent_index, logps, inputs):  # noqa: ANN001, ANN201
        loss, kl, clipped = super().compute_agent_loss(agent_index, logps, inputs)
        return 2.0 * loss if agent_index == 0 else 0.0 * loss, kl, clipped


def test_magrpo_hooks_change_training(target_model_dir: str, tmp_path: Path) -> None:
    initial = digest(MAGRPOTrainer(model=target_model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                                   args=magrpo_args(tmp_path), train_dataset=targets()).team)
    default = _train_magrpo(MAGRPOTrainer, target_model_dir, tmp_path)
    assert default != initial
    assert _train_magrpo(ConstantRewardMAGRPO, target_model_dir, tmp_path) == initial  # all advantages 0
    for cls in (NegatedAdvantageMAGRPO, DoubledLossMAGRPO):
        assert _train_magrpo(cls, target_model_dir, tmp_path) not in (default, initial), cls.__name__


def _train_ppo(cls: type, target_dir: str, tmp_path: Path) -> str:
    trainer = cls(args=ppo_args(tmp_path), model=target_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                  train_dataset=targets())
    trainer.train()
    return digest(trainer.team)


class ConstantRewardPPO(MultiAgentPPOTrainer):
    def compute_rewards(self, prompts, completions, rows, transcripts, turn):  # noqa: ANN001, ANN201
        per_func, nonfinite = super().compute_rewards(prompts, completions, rows, transcripts, turn)
        return torch.full_like(per_func, 5.0), nonfinite


class ZeroAdvantagePPO(MultiAgentPPOTrainer):
    def compute_advantages(self, rewards, values, policy_masks, value_masks):  # noqa: ANN001, ANN201
        advantages, returns = super().compute_advantages(rewards, values, policy_masks, value_masks)
        return [torch.zeros_like(a) for a in advantages], returns


class ValueOnlyPPO(MultiAgentPPOTrainer):
    def compute_agent_loss(self, slot, new_logprobs, values, rollout, idx):  # noqa: ANN001, ANN201
        loss, stats = super().compute_agent_loss(slot, new_logprobs, values, rollout, idx)
        return self.args.vf_coef * stats["vf_loss"] + 0.0 * new_logprobs.sum(), stats


def test_ppo_hooks_change_training(target_model_dir: str, tmp_path: Path) -> None:
    initial = digest(MultiAgentPPOTrainer(args=ppo_args(tmp_path), model=target_model_dir,
                                          reward_funcs=TargetSumReward(), env=TargetSumEnv(2),
                                          train_dataset=targets()).team)
    default = _train_ppo(MultiAgentPPOTrainer, target_model_dir, tmp_path)
    assert default != initial
    assert _train_ppo(ConstantRewardPPO, target_model_dir, tmp_path) not in (default, initial)
    # without advantages (or without a policy loss) the policies do not move
    assert _train_ppo(ZeroAdvantagePPO, target_model_dir, tmp_path) == initial
    assert _train_ppo(ValueOnlyPPO, target_model_dir, tmp_path) == initial


def test_the_extending_guide_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/extending.md's first example runs as written (in a temporary folder)."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "extending.md", "exec"), namespace)  # noqa: S102 - the project's own documentation
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    assert any("turn_1/reward" in h for h in trainer.state.log_history)
    exec(compile(blocks[1], "extending.md", "exec"), namespace)  # noqa: S102 - defines the PPO subclass
    assert issubclass(namespace["ValueWarmupPPO"], MultiAgentPPOTrainer)
