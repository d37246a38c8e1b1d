"""The shipped configs run offline on the toy models within their 128 positions, and each toy name means one model.

`examples/configs/*.yaml` are written for real models; `--model_name_or_path toy` (MAGRPO) or `toy:debate` (MAPoRL)
turns each into an offline smoke run. Every prompt of such a run, at every turn and with the longest completions the
run allows, must fit the toy's context: no `ContextLengthWarning`, no rotary positions past what the toy was built for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trl_marl.envs.base import Transcript
from trl_marl.toy import build_toy_tokenizer, toy_debate_dataset

CONFIGS = Path(__file__).resolve().parents[2] / "examples" / "configs"
TOY_POSITIONS = 128  # make_toy_model's default max_position_embeddings: every registered toy name uses it


def _tokens(tokenizer, prompt) -> int:
    return len(tokenizer(prompt)["input_ids"])


def _longest_prompt(env, rows, completion: int, tokenizer) -> tuple[int, str]:
    """The longest prompt over rows, agents and turns, each earlier turn answered with `completion` characters."""
    longest, where = 0, ""
    for i, row in enumerate(rows):
        transcript = Transcript()
        for turn in range(env.num_turns):
            for a in range(env.num_agents):
                n = _tokens(tokenizer, env.agent_prompt(row, a, transcript))
                if n > longest:
                    longest, where = n, f"row {i}, agent {a}, turn {turn + 1}"
            # every character is one toy token; a long feedback must not reach a toy prompt
            transcript = transcript.extend(["9" * completion] * env.num_agents, "f" * 300)
    return longest, where


@pytest.mark.parametrize("task", ["writing", "coding"])
def test_magrpo_configs_fit_the_toy_context_offline(task, capsys):
    from trl_marl.scripts.magrpo import build_task, fit_to_toy, parse

    script_args, training_args, _ = parse(["--config", str(CONFIGS / f"magrpo_{task}.yaml"),
                                           "--model_name_or_path", "toy"])
    fit_to_toy(training_args, "max_completion_length")  # what the script does for an offline run
    env, _, dataset = build_task(script_args, training_args.num_agents, training_args.num_turns, offline=True)
    completion = training_args.max_completion_length
    assert completion == 16 and env.num_turns == (2 if task == "coding" else 1)
    longest, where = _longest_prompt(env, [dataset[i] for i in range(16)], completion, build_toy_tokenizer())
    assert longest + completion <= TOY_POSITIONS, (longest, where)


@pytest.mark.parametrize("task", ["gsm8k", "anli"])
def test_maporl_configs_fit_the_toy_context_offline(task, capsys):
    from trl_marl.envs.debate import ToyDebateEnv
    from trl_marl.scripts.magrpo import fit_to_toy
    from trl_marl.scripts.maporl import parse

    _, training_args, _ = parse(task, ["--config", str(CONFIGS / f"maporl_{task}.yaml"),
                                       "--model_name_or_path", "toy:debate"])
    fit_to_toy(training_args, "response_length", limit=8)  # as `trl_marl.scripts.maporl.train` does offline
    env = ToyDebateEnv(num_agents=training_args.num_agents, num_turns=training_args.num_turns)
    rows = list(toy_debate_dataset(16, seed=0))
    longest, where = _longest_prompt(env, rows, training_args.response_length, build_toy_tokenizer())
    assert longest + training_args.response_length <= TOY_POSITIONS, (longest, where)


def test_the_task_instructions_alone_do_not_fit_the_toy():
    """Why the offline runs use `TOY_WRITING_PROMPTS` / `TOY_CODING_PROMPTS`: the real prompts overflow the toy."""
    from trl_marl.envs.coding import CooperativeCodingEnv
    from trl_marl.envs.writing import CooperativeWritingEnv
    from trl_marl.toy import toy_coding_rows, toy_writing_rows

    tokenizer = build_toy_tokenizer()
    writing = _tokens(tokenizer, CooperativeWritingEnv().agent_prompt(toy_writing_rows(1)[0], 0, Transcript()))
    coding = _tokens(tokenizer, CooperativeCodingEnv().agent_prompt(toy_coding_rows(1)[0], 0, Transcript()))
    assert writing + 16 > TOY_POSITIONS and coding + 16 > TOY_POSITIONS


def test_toy_means_the_target_model_in_maporl_too():
    from trl_marl.scripts.maporl import TOY_DEBATE_MODEL, use_debate_model_name
    from trl_marl.toy.names import TOY_PRESETS

    class Args:
        model_name_or_path = None

    args = Args()
    use_debate_model_name(args)  # no model named: the toy debate model, by its explicit name
    assert args.model_name_or_path == TOY_DEBATE_MODEL == "toy:debate"
    assert "debate" in TOY_PRESETS
    for name in ("toy", "trl-marl/toy"):
        args.model_name_or_path = name
        with pytest.raises(ValueError, match="target-number toy model, which cannot debate.*--model_name_or_path "
                                             "toy:debate"):
            use_debate_model_name(args)
    args.model_name_or_path = "toy:debate"
    use_debate_model_name(args)
    assert args.model_name_or_path == "toy:debate"
