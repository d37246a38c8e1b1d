"""Every kind of saved model card describes what its folder holds, and its Python snippet runs as written.

The kinds: a MAGRPO team (full weights per agent, and LoRA adapters on one base), a one-agent team, a
`MultiAgentPPOTrainer` team and the drop-in `PPOTrainer`'s single policy. Each snippet is run from the folder's
parent directory, where the card's `from_pretrained("<folder>")` finds it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from trl_marl import (
    MAGRPOConfig,
    MAGRPOTrainer,
    MultiAgentPPOConfig,
    MultiAgentPPOTrainer,
    PPOConfig,
    PPOTrainer,
    load_tokenizer,
)
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.utils import model_names

NAME = "my-tiny-model"  # a name that resolves to a local folder, as "toy" does


@pytest.fixture
def named(untrained_target_model_dir: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """`NAME` resolves to the toy model's folder (an absolute cache path the card must not show)."""
    monkeypatch.setattr(model_names, "_RESOLVERS", [lambda name: untrained_target_model_dir if name == NAME else None])
    return NAME


def snippet(card: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", card, re.DOTALL)
    assert len(blocks) == 1, card
    return blocks[0]


def run_snippet(folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    card = (folder / "README.md").read_text()
    monkeypatch.chdir(folder.parent)
    scope: dict[str, Any] = {}
    exec(compile(snippet(card), str(folder / "README.md"), "exec"), scope)  # noqa: S102 - the card's own snippet
    return scope


def common(tmp_path: Path) -> dict[str, Any]:
    return dict(output_dir=str(tmp_path / "run"), report_to="none", save_strategy="no", disable_tqdm=True,
                learning_rate=1e-3, seed=0)


def rows() -> Dataset:
    return Dataset.from_dict({"prompt": ["T=10:"] * 4})


@pytest.mark.parametrize("num_agents, lora", [(2, False), (2, True), (1, False)])
def test_magrpo_team_card(named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, num_agents: int,
                          lora: bool) -> None:
    args = MAGRPOConfig(num_agents=num_agents, num_generations=2, per_device_train_batch_size=2,
                        max_completion_length=3, **common(tmp_path))
    trainer = MAGRPOTrainer(model=named, reward_funcs=TargetSumReward(0.5), args=args, train_dataset=rows(),
                            peft_config=LoraConfig(r=2, target_modules=["q_proj"]) if lora else None)
    folder = tmp_path / "team"
    trainer.save_model(str(folder))
    card = (folder / "README.md").read_text()
    assert "\n# team\n" in card
    who = "A team of 2 LLM agents trained together" if num_agents == 2 else "One LLM agent trained with"
    assert who in card and "A team of 1" not in card
    for a in range(num_agents):
        assert f"| {a} | `agent_{a}/` | {NAME} |" in card  # the name passed, not the cache path
        assert (folder / f"agent_{a}").is_dir()
    assert str(tmp_path) not in card
    scope = run_snippet(folder, monkeypatch)
    assert scope["team"].num_agents == num_agents
    # the snippet answers with text: one list of answers per agent, the team's greedy answer to the card's prompt
    assert scope["answers"] == scope["team"].chat_team(["Hello! Who are you?"], max_new_tokens=64)
    assert len(scope["answers"]) == num_agents and all(isinstance(t[0], str) for t in scope["answers"])
    assert "trl-marl generate --team team --prompt" in card and "team.save_merged(agent, path)" in card
    assert "training_steps:" not in card  # nothing trained yet
    trainer.state.global_step = 3  # as after three optimizer steps: the card says how long the team trained
    trainer.save_model(str(tmp_path / "later"))
    assert "training_steps: 3\n" in (tmp_path / "later" / "README.md").read_text()


def test_multi_agent_ppo_team_card(named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = MultiAgentPPOConfig(num_agents=2, per_device_train_batch_size=2, total_episodes=2, response_length=3,
                               num_ppo_epochs=1, num_sample_generations=0, **common(tmp_path))
    trainer = MultiAgentPPOTrainer(args=args, model=named, reward_funcs=TargetSumReward(0.5), train_dataset=rows())
    folder = tmp_path / "ppo-team"
    trainer.save_model(str(folder))
    card = (folder / "README.md").read_text()
    assert "A team of 2 LLM agents trained together with **multi-agent PPO" in card
    assert f"| 1 | `agent_1/` | {NAME} |" in card and (folder / "agent_1").is_dir()
    assert run_snippet(folder, monkeypatch)["team"].num_agents == 2


def test_drop_in_ppo_card_describes_one_policy(untrained_target_model_dir: str, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    args = PPOConfig(per_device_train_batch_size=2, total_episodes=2, response_length=3, num_ppo_epochs=1,
                     num_sample_generations=0, **common(tmp_path))
    trainer = PPOTrainer(args=args, processing_class=load_tokenizer(untrained_target_model_dir),
                         model=AutoModelForCausalLM.from_pretrained(untrained_target_model_dir), ref_model=None,
                         reward_model=AutoModelForSequenceClassification.from_pretrained(untrained_target_model_dir,
                                                                                         num_labels=1),
                         train_dataset=Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]]}))
    folder = tmp_path / "ppo-policy"
    trainer.save_model(str(folder))
    card = (folder / "README.md").read_text()
    assert "LLM agents" not in card and "agent_0/" not in card and not (folder / "agent_0").exists()
    assert "A language model (base model" in card and "trained with **PPO**" in card
    scope = run_snippet(folder, monkeypatch)
    assert scope["model"].config.vocab_size == trainer.team.policy(0).config.vocab_size
    assert scope["tokenizer"].pad_token_id is not None
