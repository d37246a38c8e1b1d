"""Bad input fails before the first step with an error that names the field and the fix (issue 10, part 3).

Every case is tried as a new user would: a toy model, a small dataset, the trainer's constructor (or the first
rollout, for reward functions, which only run then). Each test asserts the error type and that the message names the
offending field.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
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
    PromptEnv,
    RewardFunctionError,
    load_tokenizer,
)
from trl_marl.envs import TargetSumEnv
from trl_marl.envs.base import MultiAgentEnv, Prompt, Transcript, prompt_problem
from trl_marl.reward_contract import TeamReward, reward_value
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.validation import ContextLengthWarning, has_accelerator

warnings.filterwarnings("ignore")
PROMPT = "T=10:"


def magrpo_args(tmp_path: Path, **overrides: Any) -> MAGRPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, num_generations=2, per_device_train_batch_size=4,
        max_completion_length=3, learning_rate=1e-3, max_steps=1, report_to="none", save_strategy="no",
        disable_tqdm=True, seed=0,
    )
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def ppo_args(tmp_path: Path, cls: type = MultiAgentPPOConfig, **overrides: Any) -> Any:
    kwargs: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=2, total_episodes=2,
        response_length=3, num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="no",
        num_sample_generations=0, disable_tqdm=True, seed=0,
    )
    if cls is PPOConfig:
        kwargs.pop("num_agents")
    kwargs.update(overrides)
    return cls(**kwargs)


def prompts(n: int = 4, **columns: list[Any]) -> Dataset:
    return Dataset.from_dict({"prompt": [PROMPT] * n, **columns})


def magrpo(model_dir: str, tmp_path: Path, train_dataset: Any = None, reward: Any = None,
           **kwargs: Any) -> MAGRPOTrainer:
    args = kwargs.pop("args", None) or magrpo_args(tmp_path)
    return MAGRPOTrainer(model=model_dir, reward_funcs=reward or TargetSumReward(0.5), args=args,
                         train_dataset=train_dataset if train_dataset is not None else prompts(), **kwargs)


def ppo(model_dir: str, tmp_path: Path, train_dataset: Any = None, reward: Any = None,
        **kwargs: Any) -> MultiAgentPPOTrainer:
    args = kwargs.pop("args", None) or ppo_args(tmp_path)
    return MultiAgentPPOTrainer(args=args, model=model_dir, reward_funcs=reward or TargetSumReward(0.5),
                                train_dataset=train_dataset if train_dataset is not None else prompts(), **kwargs)


TRAINERS = {"magrpo": magrpo, "ppo": ppo}


def constant(value: Any) -> Any:
    """A reward function returning `value` for every completion."""

    def reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Any]:
        return [value] * len(completions)

    reward.__name__ = f"constant_{type(value).__name__}"
    return reward


class ExactVerifier:
    """The least a PPO `eval_verifier` needs: `extract` and `score`."""

    def extract(self, response: str) -> str:
        return response.strip()

    def score(self, response: str, gold: Any) -> float:
        return float(response.strip() == str(gold))


class ListEnv(MultiAgentEnv):
    """Wrong: returns every agent's prompt from `agent_prompt`."""

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Prompt:
        return [PROMPT] * self.num_agents


class NoneEnv(MultiAgentEnv):
    """Wrong: forgets to return the prompt."""

    def agent_prompt(self, row: Mapping[str, Any], agent_index: int, transcript: Transcript) -> Any:
        return None


class PromptsEnv(PromptEnv):
    """Wrong: overrides `prompts()`, which no trainer calls."""

    def prompts(self, row: Mapping[str, Any], transcript: Transcript) -> list[Prompt]:
        return ["custom"] * self.num_agents


# ---------------------------------------------------------------------------------------------- dataset columns
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_agent_prompts_given_as_a_string(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    data = prompts(agent_prompts=["T=10:T=10:"] * 4)
    with pytest.raises(TypeError, match=r'`train_dataset\["agent_prompts"\]` at row 0 is a str.*one prompt per agent'):
        TRAINERS[trainer](target_model_dir, tmp_path, data)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("count", [1, 3])
def test_agent_prompts_with_the_wrong_number_of_entries(target_model_dir: str, tmp_path: Path, trainer: str,
                                                        count: int) -> None:
    data = prompts(agent_prompts=[[PROMPT] * count] * 4)
    with pytest.raises(ValueError, match=rf'`train_dataset\["agent_prompts"\]` at row 0 has {count} entries but the '
                                         "team has 2 agents"):
        TRAINERS[trainer](target_model_dir, tmp_path, data)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("column, found", [([7, 8, 9, 10], "row 0 is int 7"),
                                           ([PROMPT, PROMPT, None, PROMPT], "row 2 is NoneType None")])
def test_prompt_column_of_ints_or_none(target_model_dir: str, tmp_path: Path, trainer: str, column: list[Any],
                                       found: str) -> None:
    data = Dataset.from_dict({"prompt": column})
    with pytest.raises(TypeError, match=rf'`train_dataset\["prompt"\]` at {found}'):
        TRAINERS[trainer](target_model_dir, tmp_path, data)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_eval_dataset_is_checked_too(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    bad = Dataset.from_dict({"prompt": [3] * 4})
    with pytest.raises(TypeError, match=r'`eval_dataset\["prompt"\]` at row 0'):
        TRAINERS[trainer](target_model_dir, tmp_path, eval_dataset=bad)
    built = TRAINERS[trainer](target_model_dir, tmp_path,
                              **({"eval_verifier": ExactVerifier()} if trainer == "ppo" else {}))
    with pytest.raises(TypeError, match=r'`eval_dataset\["prompt"\]` at row 0'):
        built.evaluate(bad)


# ---------------------------------------------------------------------------------------------- environments
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_env_prompt_returning_a_list_of_prompts(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    with pytest.raises(TypeError, match=r"ListEnv.agent_prompt\(row 0 of `train_dataset`, agent_index=0\) returned "
                                        "a list of 2 strings"):
        TRAINERS[trainer](target_model_dir, tmp_path, env=ListEnv(2))


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_env_prompt_of_none(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    with pytest.raises(TypeError, match=r"NoneEnv.agent_prompt\(row 0 of `train_dataset`, agent_index=0\) returned "
                                        "NoneType"):
        TRAINERS[trainer](target_model_dir, tmp_path, env=NoneEnv(2))


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_env_overriding_prompts_is_refused(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    with pytest.raises(TypeError, match=r"PromptsEnv overrides `prompts\(\)`.*Override `agent_prompt` instead"):
        TRAINERS[trainer](target_model_dir, tmp_path, env=PromptsEnv(2))


def test_env_agent_prompt_that_raises_names_the_row(target_model_dir: str, tmp_path: Path) -> None:
    # TargetSumEnv reads `target`: a row with a non-numeric target makes agent_prompt raise
    data = Dataset.from_dict({"target": ["10", "ten"]})
    with pytest.raises(ValueError, match=r"TargetSumEnv.agent_prompt\(row 1 of `train_dataset`, agent_index=0, "
                                         "empty transcript\\) raised ValueError"):
        magrpo(target_model_dir, tmp_path, data, env=TargetSumEnv(2))


# ---------------------------------------------------------------------------------------------- prompt length
LONG = Dataset.from_dict({"prompt": [PROMPT, "1" * 200]})  # the toy model has max_position_embeddings=128
FIELDS = {"magrpo": "MAGRPOConfig.max_completion_length", "ppo": "MultiAgentPPOConfig.response_length"}
ARGS = {"magrpo": magrpo_args, "ppo": ppo_args}


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_prompt_longer_than_the_context_is_refused_on_request(target_model_dir: str, tmp_path: Path,
                                                               trainer: str) -> None:
    args = ARGS[trainer](tmp_path, prompt_length_check="error")
    with pytest.raises(ValueError, match=rf"agent 0 for row 1 of `train_dataset` is \d+ tokens; with "
                                         rf"`{FIELDS[trainer]}=3`.*max_position_embeddings=128"):
        TRAINERS[trainer](target_model_dir, tmp_path, LONG, args=args)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_prompt_longer_than_the_context_warns_by_default(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    """Rotary models run past their context (the toy writing demo does): a user may mean it, so a warning."""
    with pytest.warns(ContextLengthWarning, match=rf"row 1 of `train_dataset`.*`{FIELDS[trainer]}=3`.*"
                                                  "prompt_length_check"):
        TRAINERS[trainer](target_model_dir, tmp_path, LONG)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ContextLengthWarning)
        TRAINERS[trainer](target_model_dir, tmp_path, LONG, args=ARGS[trainer](tmp_path, prompt_length_check="ignore"))


def rows_with(n: int, long_rows: dict[int, Any], chat: bool = False) -> Dataset:
    """`n` rows of the short toy prompt, with the given rows replaced (a string, or a chat message's content)."""
    texts = [long_rows.get(i, PROMPT) for i in range(n)]
    if chat:
        return Dataset.from_dict({"prompt": [[{"role": "user", "content": t}] for t in texts]})
    return Dataset.from_dict({"prompt": texts})


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("chat", [False, True])
def test_a_prompt_that_cannot_fit_fails_before_training_naming_the_row(target_model_dir: str, tmp_path: Path,
                                                                       trainer: str, chat: bool) -> None:
    """1 MB prompts from row 64 on (past the rows whose prompts are built first): refused when the trainer is built,
    naming the row and its field, even with the default `prompt_length_check='warn'` (was: no word, then an attempt
    to allocate 10^12 bytes at step 0)."""
    huge = "1" * 1_000_000
    dataset = rows_with(70, {i: huge for i in range(64, 70)}, chat=chat)
    with pytest.raises(ValueError, match=r"agent 0 for row 64 of `train_dataset` is at least \d+ \(from its size\) "
                                         r"tokens, more than 4096 \(4 times the model's context window, "
                                         r"max_position_embeddings=128, and at least 4096\): it cannot fit\. "
                                         r"The row's longest field is `prompt` \(\d+ characters\)"):
        TRAINERS[trainer](target_model_dir, tmp_path, dataset)
    with pytest.raises(ValueError, match=r"row 2 of `eval_dataset` .* it cannot fit"):
        TRAINERS[trainer](target_model_dir, tmp_path, prompts(), eval_dataset=rows_with(3, {2: huge}, chat=chat))
    # just past the bound (4 context windows of the toy are 512 tokens, but the bound is never under 4096): too short
    # for the size bound alone, tokenized and refused with its exact count; 8 context windows only warn
    with pytest.raises(ValueError, match=r"row 1 of `train_dataset` is 4097 tokens, more than 4096 "):
        TRAINERS[trainer](target_model_dir, tmp_path, rows_with(3, {1: "1" * 4096}, chat=chat))
    with pytest.warns(ContextLengthWarning, match=r"row 1 of `train_dataset` is 1025 tokens"):
        TRAINERS[trainer](target_model_dir, tmp_path, rows_with(3, {1: "1" * 1024}, chat=chat))
    # 'ignore' skips every length check (the user takes the risk)
    TRAINERS[trainer](target_model_dir, tmp_path, dataset, args=ARGS[trainer](tmp_path, prompt_length_check="ignore"))


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_every_row_is_checked_and_only_long_rows_are_tokenized(target_model_dir: str, tmp_path: Path, trainer: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import trl_marl.utils.tokens as tokens

    tokenized: list[Any] = []
    tokenize_prompts = tokens.tokenize_prompts

    def counting(tokenizer: Any, batch: Any, *args: Any) -> Any:
        tokenized.extend(batch)
        return tokenize_prompts(tokenizer, batch, *args)

    monkeypatch.setattr(tokens, "tokenize_prompts", counting)
    long = "1" * 200  # past the context (128) with the completion, not 4 times past it
    dataset = rows_with(2100, {1500: long, 2099: long})
    with pytest.warns(ContextLengthWarning, match=r"row 1500 of `train_dataset` is \d+ tokens.* \(2 of the 2100 rows "
                                                  r"have a turn-1 prompt this long\.\)"):
        TRAINERS[trainer](target_model_dir, tmp_path, dataset)
    # the short rows fit by their byte count alone: only the long ones (of both agents) were tokenized
    assert len(tokenized) == 4 and set(tokenized) == {long}
    with pytest.raises(ValueError, match=r"agent 0 for row 1500 of `train_dataset` is \d+ tokens; with"):
        TRAINERS[trainer](target_model_dir, tmp_path, dataset,
                          args=ARGS[trainer](tmp_path, prompt_length_check="error"))


# ---------------------------------------------------------------------------------------------- configuration
@pytest.mark.skipif(has_accelerator(), reason="fp16 is valid with a GPU")
@pytest.mark.parametrize("cls", [MAGRPOConfig, MultiAgentPPOConfig, PPOConfig])
def test_fp16_without_a_gpu(tmp_path: Path, cls: type) -> None:
    with pytest.raises(ValueError, match=rf"`{cls.__name__}.fp16=True` needs a CUDA GPU.*Set `fp16=False`"):
        cls(output_dir=str(tmp_path), fp16=True, report_to="none")


@pytest.mark.skipif(has_accelerator(), reason="bf16 is valid with a GPU")
def test_bf16_without_a_gpu_names_the_config(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"`MAGRPOConfig.bf16=True` needs a GPU.*use_cpu=True"):
        MAGRPOConfig(output_dir=str(tmp_path), bf16=True, report_to="none")


@pytest.mark.parametrize("cls, field", [(MAGRPOConfig, "max_completion_length"),
                                        (MultiAgentPPOConfig, "response_length"), (PPOConfig, "response_length")])
def test_zero_completion_length(tmp_path: Path, cls: type, field: str) -> None:
    with pytest.raises(ValueError, match=rf"`{cls.__name__}.{field}` must be an integer >= 1"):
        cls(output_dir=str(tmp_path), report_to="none", **{field: 0})


def test_adapters_with_different_tokenizers_name_team_mode(target_model_dir: str, tmp_path: Path) -> None:
    other = load_tokenizer(target_model_dir)
    other.add_tokens(["<extra>"])
    with pytest.raises(ValueError, match="agent 1") as info:
        magrpo(target_model_dir, tmp_path, processing_class=[load_tokenizer(target_model_dir), other],
               peft_config=LoraConfig(r=4, target_modules=["q_proj"]),
               args=magrpo_args(tmp_path, team_mode="adapters"))
    assert "team_mode='models'" in str(info.value)


# ---------------------------------------------------------------------------------------------- the drop-in PPO
def drop_in(model_dir: str, tmp_path: Path, input_ids: list[Any], **overrides: Any) -> PPOTrainer:
    return PPOTrainer(
        args=ppo_args(tmp_path, cls=PPOConfig, **overrides), processing_class=load_tokenizer(model_dir),
        model=AutoModelForCausalLM.from_pretrained(model_dir), ref_model=None,
        reward_model=AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1),
        train_dataset=Dataset.from_dict({"input_ids": input_ids}),
    )


@pytest.mark.parametrize("column, found", [([[1, 2, 3], None], "row 1 is NoneType"),
                                           (["T=10:", "T=10:"], "row 0 is a string"),
                                           ([[1, 2, 3], []], "row 1 is an empty list")])
def test_drop_in_ppo_bad_input_ids(target_model_dir: str, tmp_path: Path, column: list[Any], found: str) -> None:
    with pytest.raises(TypeError, match=rf'`train_dataset\["input_ids"\]` at {found}.*tokenize'):
        drop_in(target_model_dir, tmp_path, column)


def test_drop_in_ppo_prompt_longer_than_the_context(target_model_dir: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"row 1 of `train_dataset` is 127 tokens; with `PPOConfig.response_length"):
        drop_in(target_model_dir, tmp_path, [[1, 2, 3], [5] * 127], prompt_length_check="error")


def test_prompt_length_check_choices(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"`MAGRPOConfig.prompt_length_check` must be one of \('warn', 'error'"):
        magrpo_args(tmp_path, prompt_length_check="raise")


# ---------------------------------------------------------------------------------------------- rewards
@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_reward_returning_none_for_everything(target_model_dir: str, tmp_path: Path, trainer: str) -> None:
    built = TRAINERS[trainer](target_model_dir, tmp_path, reward=constant(None))
    before = {k: v.clone() for k, v in built.team.state_dict().items()}
    with pytest.raises(RewardFunctionError, match=r"Every reward function \(`constant_NoneType`\) returned None"):
        built.train()
    assert all(torch.equal(before[k], v) for k, v in built.team.state_dict().items())  # no update was taken


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("value", ["1.0", "good"])
def test_reward_returning_strings(target_model_dir: str, tmp_path: Path, trainer: str, value: str) -> None:
    built = TRAINERS[trainer](target_model_dir, tmp_path, reward=constant(value))
    with pytest.raises(RewardFunctionError, match=rf"`constant_str` returned '{value}' \(str\) for completion 0.*"
                                                  "Strings are not parsed"):
        built.train()


def test_a_reward_for_the_last_turn_only_is_not_an_error(target_model_dir: str, tmp_path: Path) -> None:
    """A rollout is unscorable only when no joint action of any turn got a score."""
    scorer = TargetSumReward(0.5)

    def final_turn_only(prompts: list[Any], completions: list[Any], turn: int, **kwargs: Any) -> list[Any]:
        return [None] * len(completions) if turn == 1 else scorer(prompts, completions, turn=turn, **kwargs)

    built = magrpo(target_model_dir, tmp_path, Dataset.from_dict({"target": [10] * 4}), reward=final_turn_only,
                   env=TargetSumEnv(2, num_turns=2), args=magrpo_args(tmp_path, num_turns=2))
    built.train()
    turns = built.last_rollout.turns
    assert torch.isnan(turns[0].rewards).all() and torch.isfinite(turns[1].rewards).all()


def test_a_function_may_skip_what_another_scores(target_model_dir: str, tmp_path: Path) -> None:
    """None means "skip": with a second function scoring every response, PPO trains (as MAGRPO does)."""
    built = ppo(target_model_dir, tmp_path, reward=[constant(None), constant(1.0)])
    built.train()
    assert [h["objective/scores"] for h in built.state.log_history if "objective/scores" in h] == [1.0]


@pytest.mark.parametrize("value", [1, 0.5, True, np.float32(0.5), np.int64(2), np.bool_(True), torch.tensor(0.5),
                                   torch.tensor([2.0]), np.array(0.25)])
def test_numbers_are_accepted(value: Any) -> None:
    assert reward_value(value, "f", 0) == pytest.approx(float(np.asarray(value).item()))


@pytest.mark.parametrize("value", ["1.0", b"1", [1.0], {"score": 1.0}, np.array("1.0"), torch.tensor([1.0, 2.0])])
def test_non_numbers_are_refused(value: Any) -> None:
    with pytest.raises(RewardFunctionError, match="`f` returned .* for completion 3"):
        reward_value(value, "f", 3)


def test_team_reward_skips_none_and_documents_it() -> None:
    reward = TeamReward([constant(None), lambda prompts, completions, **kw: [np.float64(2.0), None]])
    scores, nonfinite = reward([["a", "b"]], [["x", "y"]], [{}, {}], [Transcript()] * 2, turn=1)
    assert torch.isnan(scores[:, 0]).all() and scores[0, 1] == 2.0 and torch.isnan(scores[1, 1])
    assert not nonfinite.any()
    assert "None" in (TeamReward.__doc__ or "") and "RewardFunctionError" in (TeamReward.__doc__ or "")


def test_prompt_problem() -> None:
    assert prompt_problem("x") is None
    assert prompt_problem([{"role": "user", "content": "x"}]) is None
    assert prompt_problem([1, 2]) is None
    assert "list of 2 strings" in str(prompt_problem(["a", "b"]))
    assert "lacking 'role'" in str(prompt_problem([{"text": "x"}]))
    assert "empty list" in str(prompt_problem([]))
    assert "int" in str(prompt_problem(3))


# ------------------------------------------------------------- errors that would come from torch, the Hub, TRL, PEFT
@pytest.mark.parametrize("make", [magrpo_args, ppo_args, lambda tmp_path, **kw: ppo_args(tmp_path, PPOConfig, **kw)])
@pytest.mark.parametrize("value", [-1e-5, float("nan")])
def test_bad_learning_rate_is_refused_by_the_config(tmp_path: Path, make: Any, value: float) -> None:
    # torch would say "Invalid learning rate" only at train()
    with pytest.raises(ValueError, match=r"Config.learning_rate` must be a finite number >= 0") as info:
        make(tmp_path, learning_rate=value)
    assert "learning_rate=1e-5" in str(info.value)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("name", ["./no-such-model", "~/no-such-model-of-trl-marl", "runs/a/no-such-model"])
def test_a_missing_local_model_folder_is_named(tmp_path: Path, trainer: str, name: str) -> None:
    # the Hub client would say "Repo id must be in the form 'repo_name'..."
    with pytest.raises(FileNotFoundError, match=r"`model` \(`model_name_or_path`\) '.*no-such-model.*' looks like a "
                                                r"local folder, but") as info:
        TRAINERS[trainer](name, tmp_path)
    assert "does not exist" in str(info.value) and "'toy'" in str(info.value)


def test_hub_ids_are_not_taken_for_folders() -> None:
    from trl_marl.utils.inputs import looks_like_path

    assert not looks_like_path("Qwen/Qwen2.5-0.5B-Instruct") and not looks_like_path("gpt2")
    assert looks_like_path("./model") and looks_like_path("/abs/model") and looks_like_path("a/b/c")


def test_a_batch_without_whole_groups_names_the_fields_the_user_sets(tmp_path: Path) -> None:
    # TRL would name `generation_batch_size`, which the user never set, and give no fix
    with pytest.raises(ValueError) as info:
        magrpo_args(tmp_path, per_device_train_batch_size=10, num_generations=4)
    message = str(info.value)
    assert "`MAGRPOConfig.per_device_train_batch_size` (10) must be a multiple of `num_generations` (4)" in message
    assert "set `per_device_train_batch_size` to 8 or 12, or `num_generations` to 2 or 5" in message
    assert "generation_batch_size" not in message
    with pytest.raises(ValueError, match=r"`per_device_train_batch_size` to 3 or 6, or `num_generations` to 5\."):
        magrpo_args(tmp_path, per_device_train_batch_size=5, gradient_accumulation_steps=2, num_generations=3)
    assert magrpo_args(tmp_path, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                       num_generations=4).generation_batch_size == 16


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_a_reward_without_kwargs_is_refused_at_construction(target_model_dir: str, tmp_path: Path,
                                                            trainer: str) -> None:
    def exact(prompts: list[Any], completions: list[Any], target: list[int]) -> list[float]:
        return [0.0] * len(completions)

    with pytest.raises(TypeError, match=r"Reward function `exact` does not take `\*\*kwargs`") as info:
        TRAINERS[trainer](target_model_dir, tmp_path, reward=exact)
    assert "`agent_completions`" in str(info.value)
    assert "def exact(prompts, completions, **kwargs)" in str(info.value)


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_a_lora_target_that_does_not_exist_lists_the_valid_ones(target_model_dir: str, tmp_path: Path,
                                                                 trainer: str) -> None:
    lora = LoraConfig(r=2, target_modules=["q_proj", "query"])
    with pytest.raises(ValueError, match=r"LoRA `target_modules` \['query'\] match no module") as info:
        TRAINERS[trainer](target_model_dir, tmp_path, peft_config=lora)
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "lm_head"):
        assert name in str(info.value), name
    assert "all-linear" in str(info.value)
