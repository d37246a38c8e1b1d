"""MAPoRL end to end on the toy arithmetic debate: training raises the final-turn majority accuracy."""

from __future__ import annotations

import warnings

import pytest

from trl_marl.envs.debate import ToyDebateEnv
from trl_marl.rewards import AnswerVerifier, InfluenceAwareReward
from trl_marl.toy import toy_debate_dataset
from trl_marl.trainers import MultiAgentPPOConfig, MultiAgentPPOTrainer

warnings.filterwarnings("ignore")


@pytest.mark.slow
def test_trained_debate_team_beats_untrained_at_the_final_turn(tmp_path):
    from trl_marl.scripts.demo import run_maporl_part

    result = run_maporl_part(updates=60, seed=0, episodes=128, work_dir=str(tmp_path), show_progress=False)
    before, after = result["before"]["majority_accuracy"], result["after"]["majority_accuracy"]
    assert after[-1] > before[-1] + 0.03, (before, after)
    assert len(result["before"]["w_to_r_rate"]) == 2  # transitions for turn changes 1->2 and 2->3


def test_evaluate_logs_per_turn_accuracy_and_transitions(debate_model_dir, tmp_path):
    verifier = AnswerVerifier(task="math")
    trainer = MultiAgentPPOTrainer(
        args=MultiAgentPPOConfig(output_dir=str(tmp_path / "out"), num_agents=3, num_turns=3,
                                 per_device_train_batch_size=8, total_episodes=16, response_length=4,
                                 stop_token="eos", num_ppo_epochs=1, learning_rate=1e-4, report_to="none",
                                 save_strategy="no", num_sample_generations=0, logging_steps=1,
                                 per_device_eval_batch_size=16, policy_sharing="agent_turn", value_input="answer",
                                 train_turns_from=2),
        model=debate_model_dir,
        reward_funcs=[InfluenceAwareReward(verifier, alpha0=0.1, alpha1=0.1, beta0=0.1, beta1=0.1)],
        env=ToyDebateEnv(3, 3), train_dataset=toy_debate_dataset(32, seed=0),
        eval_dataset=toy_debate_dataset(16, seed=1),
    )
    assert trainer.team.num_agents == 9  # theta_{t,a}: one policy (and value model) per agent and turn
    trainer.train()
    metrics = trainer.evaluate()
    for key in ("eval_turn_1/majority_accuracy", "eval_turn_3/agent_accuracy", "eval_turn_1_2/w_to_r",
                "eval_turn_2_3/r_to_w", "eval_turn_1_2/persuaded_rate"):
        assert key in metrics, key
    logged = set().union(*(h.keys() for h in trainer.state.log_history))
    assert "eval_turn_2/majority_accuracy" in logged
    # turn-1 policies are not trained (train_turns_from=2): only turns 2 and 3 are scored
    assert "turn_1/reward" not in logged and "turn_2/reward" in logged
