"""MultiAgentPPOTrainer credit: every (turn, agent) score lands on its own sample; a shared policy has one value
model and one whitening group for the whole team."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer
from trl_marl.core import whiten_jointly
from trl_marl.envs import PromptEnv, TargetSumEnv

warnings.filterwarnings("ignore")


def args(tmp_path: Path, **overrides: Any) -> MultiAgentPPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=4, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=1, total_episodes=8, response_length=3, stop_token="eos",
        learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, temperature=1.0,
    )
    kwargs.update(overrides)
    return MultiAgentPPOConfig(**kwargs)


class RecordingReward:
    """Scores each (turn, agent, row) with a fresh id and remembers what it scored under that id."""

    __name__ = "recording"
    reward_isolation = "thread"  # the test reads `seen`: run in the trainer's process, not in a worker

    def __init__(self) -> None:
        self.seen: dict[int, tuple[int, int, str, str]] = {}

    def __call__(self, prompts, completions, agent_index, turn, **kwargs) -> list[float]:
        ids = []
        for prompt, completion in zip(prompts, completions):
            ids.append(float(len(self.seen)))
            self.seen[len(self.seen)] = (turn, agent_index, prompt, completion)
        return ids


@pytest.mark.parametrize("policy_sharing", ["agent", "agent_turn", "shared"])
def test_every_turn_and_agent_score_lands_on_its_own_sample(target_model_dir, tmp_path, policy_sharing):
    # Two agents, three turns, distinct prompts per agent and row: a score that landed on another turn's, agent's or
    # row's sample would carry the id of a different (turn, agent, prompt, completion).
    reward = RecordingReward()
    rows = {"prompt": [f"T={r}:" for r in range(3)],
            "agent_prompts": [[f"T={r}:", f"T={r + 10}:"] for r in range(3)]}
    trainer = MultiAgentPPOTrainer(
        args=args(tmp_path, num_turns=3, policy_sharing=policy_sharing), model=target_model_dir,
        env=PromptEnv(num_agents=2, num_turns=3), reward_funcs=reward, train_dataset=Dataset.from_dict(rows),
    )
    batch = [Dataset.from_dict(rows)[i] for i in range(3)]
    rollouts = trainer.rollout(batch)
    checked = set()
    for s, ro in enumerate(rollouts):
        for i in range(len(ro.texts)):
            turn, agent = int(ro.turns[i]), int(ro.agents[i])
            assert trainer.slot(turn, agent) == s
            assert reward.seen[int(ro.scores[i])] == (turn, agent, ro.prompts[i], ro.texts[i])
            # the sample is what that agent answered at that turn for the row its prompt names ("T=<r + 10 a>:...")
            row = int(ro.prompts[i].split(":")[0][2:]) - 10 * agent
            assert ro.texts[i] == trainer.last_rollout.turns[turn - 1].completions[agent][row]
            checked.add(int(ro.scores[i]))
    assert checked == set(reward.seen) and len(checked) == 3 * 2 * 3  # every (turn, agent, row) exactly once


def test_shared_policy_has_one_value_model_and_one_whitening_group(target_model_dir, tmp_path):
    # Agent 0 always scores 1 and agent 1 always 0. Whitened per agent, each agent's advantages would have mean 0;
    # whitened as one group (one shared policy), agent 0's are above the team mean and agent 1's below it.
    def by_agent(prompts, completions, agent_index, **kwargs):
        return [1.0 if agent_index == 0 else 0.0] * len(completions)

    trainer = MultiAgentPPOTrainer(
        args=args(tmp_path, policy_sharing="shared", team_mode="shared", per_device_train_batch_size=8,
                  total_episodes=16, kl_coef=0.0),
        model=target_model_dir, env=TargetSumEnv(2), reward_funcs=by_agent,
        train_dataset=Dataset.from_dict({"target": [10] * 16}),
    )
    wrapper = trainer.wrapper
    assert len(wrapper.value_models) == 1 and wrapper.value_model(0) is wrapper.value_model(1)
    rollouts = trainer.rollout([{"target": 10}] * 8)
    means = [float(ro.advantages[ro.policy_mask].mean()) for ro in rollouts]
    assert means[0] > 0.3 and means[1] < -0.3, means
    team = torch.cat([ro.advantages[ro.policy_mask] for ro in rollouts])
    assert abs(float(team.mean())) < 1e-5 and abs(float(team.var()) - 1.0) < 1e-3
    trainer.train()
    trainer.save_model(str(tmp_path / "team"))
    assert (tmp_path / "team" / "value_model_0").exists() and not (tmp_path / "team" / "value_model_1").exists()


def test_per_agent_policies_keep_their_own_whitening(target_model_dir, tmp_path):
    def by_agent(prompts, completions, agent_index, **kwargs):
        return [1.0 if agent_index == 0 else 0.0] * len(completions)

    trainer = MultiAgentPPOTrainer(
        args=args(tmp_path, per_device_train_batch_size=8, total_episodes=16, kl_coef=0.0), model=target_model_dir,
        env=TargetSumEnv(2), reward_funcs=by_agent, train_dataset=Dataset.from_dict({"target": [10] * 16}),
    )
    assert len(trainer.wrapper.value_models) == 2
    for ro in trainer.rollout([{"target": 10}] * 8):
        assert abs(float(ro.advantages[ro.policy_mask].mean())) < 1e-5


def test_whiten_jointly_by_hand():
    # entries [1, 3] and [5, (pad)]: mean 3, unbiased var (4 + 0 + 4) / 2 = 4, std 2 -> [-1, 0], [1, pad]
    a, b = torch.tensor([1.0, 3.0]), torch.tensor([5.0, 100.0])
    out = whiten_jointly([a, b], [torch.tensor([1, 1]), torch.tensor([1, 0])], eps=0.0)
    torch.testing.assert_close(out[0], torch.tensor([-1.0, 0.0]))
    torch.testing.assert_close(out[1][:1], torch.tensor([1.0]))
    kept = whiten_jointly([a, b], [torch.tensor([1, 1]), torch.tensor([1, 0])], shift_mean=False, eps=0.0)
    torch.testing.assert_close(kept[0], torch.tensor([2.0, 3.0]))
    with pytest.raises(ValueError):
        whiten_jointly([a], [torch.tensor([1, 0])])
