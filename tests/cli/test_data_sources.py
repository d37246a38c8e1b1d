"""Where the scripts' data comes from (`scripts.data_sources`), local data files (`data.files`) and LoRA targets fitted
to the model's family (`scripts.lora_targets`): the rules behind the offline examples (issue 39, item 2)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from trl_marl.data import load_anli, load_gsm8k, load_humaneval, load_tldr
from trl_marl.data.files import data_file_builder, load_data_files
from trl_marl.scripts.data_sources import (
    DatasetUnavailableError,
    DataSource,
    hub_dataset,
    offline_route,
    resolve_source,
)
from trl_marl.scripts.lora_targets import fit_lora_targets, translate_targets


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# ----------------------------------------------------------------------------------------------------- data files


@pytest.mark.parametrize("name, builder", [
    ("rows.jsonl", "json"), ("rows.JSON", "json"), ("dir/rows.csv", "csv"), ("rows.parquet", "parquet"),
    ("rows.jsonl.gz", "json"), ("rows.csv.zst", "csv"), ("rows.parquet.gz", None), ("openai/gsm8k", None),
    ("trl-marl/team_coding", None), ("rows.txt", None),
])
def test_a_data_files_builder_comes_from_its_suffix(name, builder):
    assert data_file_builder(name) == builder


def test_local_files_of_one_format_are_read_in_order_and_bad_ones_are_named(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", [{"question": "1+1", "answer": "#### 2"}])
    b = write_jsonl(tmp_path / "b.jsonl", [{"question": "2+3", "answer": "#### 5"}])
    assert load_data_files(f"{a},{b}")["question"] == ["1+1", "2+3"]
    assert load_data_files([str(b), str(a)])["question"] == ["2+3", "1+1"]
    (tmp_path / "c.csv").write_text("question,answer\n4+4,#### 8\n")
    with pytest.raises(ValueError, match=r"`--data_files` mixes formats \(csv, json\)"):
        load_data_files([str(a), str(tmp_path / "c.csv")], field="`--data_files`")
    with pytest.raises(ValueError, match=r"'rows.txt' is not a data file: its name must end in .jsonl, .json"):
        load_data_files("rows.txt")
    with pytest.raises(FileNotFoundError, match=r"`data_files` 'missing.jsonl': no such file"):
        load_data_files("missing.jsonl")


def test_every_loader_reads_local_files(tmp_path):
    gsm8k = tmp_path / "gsm8k.csv"
    gsm8k.write_text('question,answer\nTom has 2 apples,"2 + 0 = 2\n#### 2"\n')
    assert load_gsm8k(data_files=str(gsm8k))["answer"] == ["2"]  # CSV too (it was JSON Lines only)
    anli = write_jsonl(tmp_path / "anli.jsonl", [{"premise": "P", "hypothesis": "H", "label": 2},
                                                 {"premise": "Q", "hypothesis": "I", "label": -1}])
    rows = load_anli(data_files=str(anli))
    assert rows["answer"] == ["contradiction"] and rows["premise"] == ["P"]  # the unlabelled row is dropped
    tldr = write_jsonl(tmp_path / "tldr.jsonl", [{"prompt": "SUBREDDIT: r/x\n\nTITLE: T\n\nPOST: A post.\n\nTL;DR:",
                                                  "completion": " Short."}])
    assert load_tldr(data_files=str(tldr))[0] == {"text": "A post.", "reference": "Short."}
    env_rows = write_jsonl(tmp_path / "posts.jsonl", [{"text": "A post."}, {"text": "Another."}])
    assert load_tldr(data_files=str(env_rows), max_rows=1)["text"] == ["A post."]  # the env's own schema, as it is
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"body": "x"}])
    with pytest.raises(ValueError, match=r"'prompt' and 'completion' of trl-lib/tldr \(or `text`"):
        load_tldr(data_files=str(bad))
    humaneval = write_jsonl(tmp_path / "he.jsonl", [{"task_id": "t/0", "prompt": "def f():\n", "entry_point": "f",
                                                    "canonical_solution": "    return 1\n",
                                                    "test": "def check(c):\n    assert c() == 1\n"}])
    assert load_humaneval(data_files=str(humaneval))["task_id"] == ["t/0"]


# ---------------------------------------------------------------------------------------------- where data comes from


def test_data_files_win_then_local_names_then_shipped_then_the_hub(tmp_path):
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"text": "x"}])
    assert resolve_source("openai/gsm8k", str(rows)) == DataSource("local", str(rows), "`--data_files`")
    assert resolve_source(str(rows)) == DataSource("local", str(rows), "`--dataset_name`")
    assert resolve_source("trl-marl/team_coding").kind == "shipped"
    assert resolve_source(None, None, "trl-lib/tldr") == DataSource("hub", "trl-lib/tldr",
                                                                   "the default of `--dataset_name`")
    assert resolve_source(None) is None
    with pytest.raises(FileNotFoundError, match=r"`--dataset_name` 'nope.jsonl' names a local data file, but there"):
        resolve_source("nope.jsonl")  # never looked up on the Hub
    with pytest.raises(FileNotFoundError, match=r"`--dataset_name` './my_data' looks like a local path, but"):
        resolve_source("./my_data")
    assert resolve_source(str(tmp_path)) == DataSource("hub", str(tmp_path), "`--dataset_name`")  # a folder
    with pytest.raises(FileNotFoundError, match=r"`--data_files` 'nope.csv': no such file"):
        resolve_source("openai/gsm8k", f"{rows},nope.csv")


def test_only_a_failure_to_fetch_becomes_the_offline_error(monkeypatch):
    from trl_marl.utils import model_names

    monkeypatch.setattr(model_names, "hub_reachable", lambda *a, **k: True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")  # an earlier test of the suite may have left it set
    source = DataSource("hub", "org/data", "`--dataset_name`")
    route = offline_route("a `question` column")
    with pytest.raises(DatasetUnavailableError) as error:
        with hub_dataset(source, route):
            raise ConnectionError("Couldn't reach 'org/data' on the Hub (LocalEntryNotFoundError)")
    message = str(error.value)
    assert message.startswith("The dataset 'org/data' (`--dataset_name`) could not be fetched from the Hugging Face "
                              "Hub: ConnectionError: Couldn't reach 'org/data'")
    assert message.endswith(route) and "`--data_files PATH` (.jsonl, .json, .csv or .parquet; a `question` column)" \
        in message and "`--model_name_or_path smollm2-135m-instruct`" in message
    assert isinstance(error.value, ConnectionError) and isinstance(error.value.__cause__, ConnectionError)
    with pytest.raises(ValueError, match="lacks the column"):  # a bad dataset is the loader's own error
        with hub_dataset(source, route):
            raise ValueError("load_gsm8k: 'org/data' lacks the column 'answer'")


# ---------------------------------------------------------------------------------------------------- LoRA targets

LLAMA = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"}
PHI3 = {"qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}


def test_a_fused_projection_becomes_its_parts_and_back():
    assert translate_targets(["qkv_proj", "o_proj", "gate_up_proj", "down_proj"], LLAMA) == (
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}, [])
    assert translate_targets(["q_proj", "k_proj", "v_proj", "o_proj"], PHI3) == (
        ["qkv_proj", "o_proj"], {"q_proj": ["qkv_proj"], "k_proj": ["qkv_proj"], "v_proj": ["qkv_proj"]}, [])
    assert translate_targets(["query_key_value", "c_fc"], LLAMA) == (["q_proj", "k_proj", "v_proj"],
                                                                     {"query_key_value": ["q_proj", "k_proj",
                                                                                          "v_proj"]}, ["c_fc"])


def model_args(targets, use_peft=True):
    return SimpleNamespace(use_peft=use_peft, lora_target_modules=targets)


def test_the_targets_are_fitted_said_and_refused_by_name(capsys):
    modules = [f"model.layers.0.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj", "o_proj")] + ["lm_head"]
    args = model_args(["qkv_proj", "o_proj"])
    fit_lora_targets(args, modules, "smollm2-135m-instruct (LlamaForCausalLM)")
    assert args.lora_target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert "LoRA targets fitted to smollm2-135m-instruct (LlamaForCausalLM): qkv_proj -> q_proj, k_proj, v_proj" \
        in capsys.readouterr().out
    single = model_args("v_proj")  # TRL makes a lone command-line name a string, which PEFT reads as a regex
    fit_lora_targets(single, modules, "m")
    assert single.lora_target_modules == ["v_proj"]
    for untouched in (model_args("all-linear"), model_args(r".*\.q_proj"), model_args(["nope"], use_peft=False)):
        before = untouched.lora_target_modules
        fit_lora_targets(untouched, modules, "m")
        assert untouched.lora_target_modules == before
    with pytest.raises(ValueError, match=r"`lora_target_modules` \['wq', 'fc9'\] match no module of m \(X\)\. Its "
                                         r"projections are: k_proj, o_proj, q_proj, v_proj\..*all-linear"):
        fit_lora_targets(model_args(["q_proj", "wq", "fc9"]), modules, "m (X)")


def test_each_task_reads_its_shipped_dataset_and_refuses_the_other():
    from trl_marl.data import load_team_coding, load_team_writing
    from trl_marl.scripts.magrpo import MAGRPOScriptArguments, coding_rows, writing_rows

    writing = MAGRPOScriptArguments(task="writing", dataset_name="trl-marl/team_writing", dataset_split="heldout")
    rows = writing_rows(writing, resolve_source(writing.dataset_name))
    assert rows["text"] == load_team_writing("heldout")["text"] and "reference" in rows.column_names
    coding = MAGRPOScriptArguments(task="coding", dataset_name="trl-marl/team_coding", dataset_config="1")
    assert coding_rows(coding, resolve_source(coding.dataset_name))["task_id"] == \
        load_team_coding("train", (1,))["task_id"]
    with pytest.raises(ValueError, match=r"is a coding dataset; .* \(shipped: trl-marl/team_writing\)"):
        writing_rows(writing, resolve_source("trl-marl/team_coding"))
    with pytest.raises(ValueError, match=r"is a writing dataset; .* \(shipped: trl-marl/team_coding\)"):
        coding_rows(coding, resolve_source("trl-marl/team_writing"))
