"""Checkpoints survive a kill: atomic saves, rotation that keeps the last complete checkpoint, exact resume.

The trainer runs below are MAGRPO on the suite's toy target model (conftest.py's `target_model_dir`, 11k parameters;
two LoRA agents, 16 samples per step); the killed runs are child processes that SIGKILL themselves at a chosen
moment.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from trl_marl._trl_compat import (
    CorruptCheckpointWarning,
    IncompleteCheckpointWarning,
    _rotate_complete_checkpoints,
    checkpoint_problem,
    is_complete_checkpoint,
    last_complete_checkpoint,
)
from trl_marl.utils.checkpoint_files import MANIFEST_FILE, file_sha256, folder_step, write_manifest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parents[1]
TARGET = 10
STEPS = 6


def build_trainer(model_dir: str, output_dir: str, max_steps: int = STEPS, **overrides: Any) -> Any:
    """A MAGRPO trainer of two LoRA agents that saves every 2 steps (also used by the child processes)."""
    from datasets import Dataset
    from peft import LoraConfig

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    kwargs = dict(
        output_dir=output_dir, num_agents=2, num_generations=8, per_device_train_batch_size=16,
        max_completion_length=4, learning_rate=3e-3, lr_scheduler_type="linear", max_steps=max_steps,
        logging_steps=1, report_to="none", save_strategy="steps", save_steps=2, gradient_checkpointing=False,
        temperature=1.0, disable_tqdm=True, seed=0, beta=0.05,
    )
    kwargs.update(overrides)
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2),
                         args=MAGRPOConfig(**kwargs), train_dataset=Dataset.from_dict({"target": [TARGET] * 64}),
                         peft_config=peft_config)


def run_child(argv: list[str]) -> None:
    """A child process: train, and SIGKILL itself at `step<N>` (after step N) or `save<N>` (during the save of N)."""
    model_dir, output_dir, kill_at = argv
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    trainer = build_trainer(model_dir, output_dir)
    step = int(kill_at[4:])
    if kill_at.startswith("step"):
        from transformers import TrainerCallback

        class KillAfterStep(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if state.global_step == step:
                    os.kill(os.getpid(), signal.SIGKILL)

        trainer.add_callback(KillAfterStep())
    else:  # die in the middle of the save: the model is written, the optimizer too, the RNG state not yet
        save_rng_state = trainer._save_rng_state

        def dying_save_rng_state(output_dir: str) -> None:
            if trainer.state.global_step == step:
                os.kill(os.getpid(), signal.SIGKILL)
            save_rng_state(output_dir)

        trainer._save_rng_state = dying_save_rng_state
    trainer.train()


def child(model_dir: str, output_dir: Path, kill_at: str) -> subprocess.CompletedProcess[str]:
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r}); from test_checkpoints import run_child; " \
           "run_child(sys.argv[1:])"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    return subprocess.run([sys.executable, "-c", code, model_dir, str(output_dir), kill_at], env=env,
                          capture_output=True, text=True, timeout=300)


def logged_metrics(trainer: Any) -> list[dict[str, Any]]:
    """Every per-step log entry, without wall-clock metrics (the run summary, runtime, throughput) ."""
    entries = []
    for entry in trainer.state.log_history:
        if "train_runtime" in entry:
            continue
        entries.append({k: v for k, v in entry.items() if "time" not in k and "per_second" not in k})
    return entries


@pytest.fixture(scope="module")
def reference(target_model_dir, tmp_path_factory) -> Any:
    """The uninterrupted run of STEPS steps."""
    trainer = build_trainer(target_model_dir, str(tmp_path_factory.mktemp("reference")))
    trainer.train()
    return trainer


def assert_same_run(resumed: Any, reference: Any) -> None:
    assert resumed.state.global_step == reference.state.global_step == STEPS
    expected = reference.team.state_dict()
    got = resumed.team.state_dict()
    assert got.keys() == expected.keys()
    different = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert not different, different
    assert logged_metrics(resumed) == logged_metrics(reference)
    assert len(logged_metrics(reference)) == STEPS


# ------------------------------------------------------------------------------------------------ finding checkpoints


def make_folder(root: Path, name: str, state: str | None = "step") -> Path:
    """A checkpoint-like folder: a file, a state (`"step"`: the step of its name) and a manifest of both."""
    folder = root / name
    folder.mkdir()
    (folder / "adapter.bin").write_text("weights")
    if state == "step":
        state = json.dumps({"global_step": folder_step(folder) or 0})
    if state is not None:
        (folder / "trainer_state.json").write_text(state)
    write_manifest(str(folder))
    return folder


def test_last_complete_checkpoint_skips_incomplete_folders(tmp_path):
    assert last_complete_checkpoint(tmp_path / "missing") is None
    assert last_complete_checkpoint(tmp_path) is None
    make_folder(tmp_path, "checkpoint-2")
    make_folder(tmp_path, "checkpoint-7", state='{"global_step": ')  # cut off mid-write
    make_folder(tmp_path, "checkpoint-10", state=None)  # no trainer_state.json
    make_folder(tmp_path, "checkpoint-3x")  # not a checkpoint name
    (tmp_path / "checkpoint-11").write_text("a file, not a folder")
    with pytest.warns(IncompleteCheckpointWarning) as caught:
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "checkpoint-10" in messages[0] and "checkpoint-7" in messages[1]

    # an interrupted save is never used, and is reported when it is newer than what is returned
    make_folder(tmp_path, "tmp-checkpoint-12")
    make_folder(tmp_path, "tmp-checkpoint-1")
    with pytest.warns(IncompleteCheckpointWarning) as caught:
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")
    assert sum("tmp-checkpoint-12" in str(w.message) for w in caught) == 1
    assert not any("tmp-checkpoint-1 " in str(w.message) or "tmp-checkpoint-1:" in str(w.message) for w in caught)

    # a complete copy moved aside by a same-step re-save counts when its checkpoint-<step> is missing
    make_folder(tmp_path, "tmp-checkpoint-9-replaced")
    make_folder(tmp_path, "tmp-checkpoint-2-replaced")  # checkpoint-2 exists: ignored
    with pytest.warns(IncompleteCheckpointWarning):
        assert last_complete_checkpoint(tmp_path) == str(tmp_path / "tmp-checkpoint-9-replaced")
    assert is_complete_checkpoint(tmp_path / "checkpoint-2") and not is_complete_checkpoint(tmp_path / "checkpoint-7")


# ------------------------------------------------------------------------------------------------ saves and rotation


def test_save_is_atomic_and_rotation_keeps_the_last_complete_checkpoint(target_model_dir, tmp_path):
    output_dir = tmp_path / "out"
    trainer = build_trainer(target_model_dir, str(output_dir), max_steps=4, save_total_limit=1)
    calls = []
    save_rng_state = trainer._save_rng_state

    def failing_save_rng_state(folder: str) -> None:
        calls.append(os.path.basename(folder))
        if trainer.state.global_step == 4:
            raise OSError("No space left on device")
        save_rng_state(folder)

    trainer._save_rng_state = failing_save_rng_state
    with pytest.raises(OSError, match="No space left"):
        trainer.train()
    assert calls == ["tmp-checkpoint-2", "tmp-checkpoint-4"]  # written under a temporary name
    names = sorted(os.listdir(output_dir))
    assert "checkpoint-2" in names and "checkpoint-4" not in names and "tmp-checkpoint-4" in names
    assert is_complete_checkpoint(output_dir / "checkpoint-2")
    for name in ("agent_0", "agent_1", "team_config.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        assert (output_dir / "checkpoint-2" / name).exists(), name
    assert json.loads((output_dir / "checkpoint-2" / "trainer_state.json").read_text())["global_step"] == 2

    # resume=True: warns about the interrupted save, resumes from checkpoint-2, then the interrupted folder and
    # (save_total_limit=1) checkpoint-2 go once checkpoint-4 is complete
    resumed = build_trainer(target_model_dir, str(output_dir), max_steps=4, save_total_limit=1)
    with pytest.warns(IncompleteCheckpointWarning, match="tmp-checkpoint-4"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 4
    assert sorted(os.listdir(output_dir)) == ["checkpoint-4"]
    assert is_complete_checkpoint(output_dir / "checkpoint-4")

    # a second save at the same step replaces the checkpoint in place
    resumed._save_checkpoint(resumed.model, trial=None)
    assert sorted(os.listdir(output_dir)) == ["checkpoint-4"]


def test_resume_skips_a_partial_checkpoint_folder(target_model_dir, tmp_path, reference):
    output_dir = tmp_path / "out"
    build_trainer(target_model_dir, str(output_dir)).train()
    shutil.rmtree(output_dir / "checkpoint-6")
    # a half-written folder as transformers' own save leaves it when killed: no trainer_state.json
    os.remove(output_dir / "checkpoint-4" / "trainer_state.json")
    os.remove(output_dir / "checkpoint-4" / "rng_state.pth")

    with pytest.raises(ValueError, match="not a complete checkpoint.*checkpoint-2"):
        build_trainer(target_model_dir, str(output_dir)).train(resume_from_checkpoint=str(output_dir / "checkpoint-4"))
    resumed = build_trainer(target_model_dir, str(output_dir))
    with pytest.warns(IncompleteCheckpointWarning, match="checkpoint-4"):
        resumed.train(resume_from_checkpoint=True)
    assert is_complete_checkpoint(output_dir / "checkpoint-4")  # rewritten by the resumed run
    assert_same_run(resumed, reference)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="No complete checkpoint"):
        build_trainer(target_model_dir, str(empty)).train(resume_from_checkpoint=True)


# ------------------------------------------------------------------------------------------------ SIGKILL


@pytest.mark.parametrize(("kill_at", "resumed_from"), [("step5", 4), ("save4", 2)])
@pytest.mark.slow
def test_exact_resume_after_sigkill(target_model_dir, tmp_path, reference, kill_at, resumed_from):
    """Killed after step 5 (checkpoint-4 complete) or in the middle of saving checkpoint-4: resuming reproduces the
    uninterrupted run exactly (every adapter weight and every logged metric)."""
    output_dir = tmp_path / "out"
    result = child(target_model_dir, output_dir, kill_at)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert last_complete_checkpoint(output_dir) == str(output_dir / f"checkpoint-{resumed_from}")
    if kill_at == "save4":
        assert "checkpoint-4" not in os.listdir(output_dir) and "tmp-checkpoint-4" in os.listdir(output_dir)
    resumed = build_trainer(target_model_dir, str(output_dir))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed.train(resume_from_checkpoint=True)
    incomplete = [w for w in caught if issubclass(w.category, IncompleteCheckpointWarning)]
    assert len(incomplete) == (1 if kill_at == "save4" else 0)
    assert resumed.state.log_history[resumed_from - 1]["step"] == resumed_from
    assert_same_run(resumed, reference)


# ------------------------------------------------------------------------------------------------ damaged checkpoints


def damage(path: Path, how: str) -> None:
    """Truncate a file to half its size, empty it, or flip one byte in its middle (same size)."""
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:])


@pytest.fixture(scope="module")
def saved_run(target_model_dir, tmp_path_factory) -> Path:
    """checkpoint-2, -4 and -6 of the reference settings (copied by the tests that damage them)."""
    output_dir = tmp_path_factory.mktemp("saved") / "out"
    build_trainer(target_model_dir, str(output_dir)).train()
    return output_dir


@pytest.fixture(scope="module")
def resumer(target_model_dir, tmp_path_factory) -> Any:
    """A trainer of the reference settings that is only asked to resume from damaged checkpoints (so never trains)."""
    return build_trainer(target_model_dir, str(tmp_path_factory.mktemp("resumer")))


@pytest.mark.parametrize(("name", "how"), [
    ("agent_0/adapter_model.safetensors", "truncate"), ("agent_1/adapter_model.safetensors", "empty"),
    ("optimizer.pt", "truncate"), ("rng_state.pth", "truncate"), ("scheduler.pt", "empty"),
    ("agent_0/adapter_model.safetensors", "flip"), ("trainer_state.json", "flip"),
])
def test_a_damaged_checkpoint_is_named_and_skipped(saved_run, resumer, tmp_path, name, how):
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    assert checkpoint_problem(str(output_dir / "checkpoint-6")) is None
    damage(output_dir / "checkpoint-6" / name, how)
    bad_file = str(output_dir / "checkpoint-6" / name)
    problem = checkpoint_problem(str(output_dir / "checkpoint-6"))
    assert problem is not None and problem.startswith(bad_file)
    with pytest.warns(CorruptCheckpointWarning) as caught:
        assert last_complete_checkpoint(output_dir) == str(output_dir / "checkpoint-4")
    assert [str(w.message).count(bad_file) for w in caught] == [1]
    assert "left in place" in str(caught[0].message)
    assert (output_dir / "checkpoint-6" / name).exists()  # never deleted

    # an explicit path: a clear error naming the bad file and the good checkpoint next to it
    with pytest.raises(ValueError, match="checkpoint-6: it is damaged: .*checkpoint-6/.*checkpoint-4"):
        resumer.train(resume_from_checkpoint=str(output_dir / "checkpoint-6"))


def test_a_checkpoint_without_a_manifest_is_refused_by_name(saved_run, resumer, tmp_path):
    """Every checkpoint trl-marl writes ends with a manifest: one without it (removed, left out of a copy, or of a
    development version from before manifests) is refused, naming the folder and how to accept it knowingly; its
    damaged files are still named first (a structural check)."""
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    six = output_dir / "checkpoint-6"
    os.remove(six / MANIFEST_FILE)
    problem = checkpoint_problem(str(six))
    assert problem is not None and problem.startswith(f"{six} has no {MANIFEST_FILE}"), problem
    assert f"write_manifest({str(six)!r})" in problem
    with pytest.warns(CorruptCheckpointWarning, match=f"checkpoint-6 has no {MANIFEST_FILE}"):
        assert last_complete_checkpoint(output_dir) == str(output_dir / "checkpoint-4")
    with pytest.raises(ValueError, match=f"checkpoint-6: it is damaged: .*checkpoint-6 has no {MANIFEST_FILE}.*"
                                         "write_manifest.*The newest complete checkpoint next to it .*checkpoint-4"):
        resumer.train(resume_from_checkpoint=str(six))
    for name, how, expected in [
        ("agent_0/adapter_model.safetensors", "truncate", "header describes"),
        ("agent_0/adapter_model.safetensors", "empty", "is empty"),
        ("optimizer.pt", "truncate", "BadZipFile"),
        ("rng_state.pth", "truncate", "BadZipFile"),
        ("scheduler.pt", "empty", "is empty"),
        ("team_config.json", "truncate", "JSONDecodeError"),
    ]:
        original = (six / name).read_bytes()
        damage(six / name, how)
        problem = checkpoint_problem(str(six))
        assert problem is not None and problem.startswith(str(six / name)) and expected in problem, problem
        with pytest.warns(CorruptCheckpointWarning, match=name):
            assert last_complete_checkpoint(output_dir) == str(output_dir / "checkpoint-4")
        (six / name).write_bytes(original)
    # accepted knowingly: a manifest written by hand
    write_manifest(str(six))
    assert checkpoint_problem(str(six), spec=resumer.checkpoint_spec()) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert last_complete_checkpoint(output_dir) == str(six)


def test_rotation_never_counts_or_deletes_a_damaged_checkpoint(saved_run, tmp_path):
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    damage(output_dir / "checkpoint-6" / "optimizer.pt", "truncate")
    shutil.copytree(saved_run / "checkpoint-6", output_dir / "checkpoint-8")  # the newly published one
    edit_json(output_dir / "checkpoint-8" / "trainer_state.json", global_step=8)
    write_manifest(str(output_dir / "checkpoint-8"))
    _rotate_complete_checkpoints(str(output_dir), 2, keep={str(output_dir / "checkpoint-8")})
    # the two newest good ones stay (4 and 8), the damaged 6 is kept aside from the count, 2 goes
    assert sorted(os.listdir(output_dir)) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]


def test_resume_falls_back_past_a_damaged_checkpoint_and_keeps_it(target_model_dir, saved_run, tmp_path, reference):
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    damage(output_dir / "checkpoint-6" / "agent_0" / "adapter_model.safetensors", "truncate")
    damage(output_dir / "checkpoint-4" / "optimizer.pt", "truncate")
    resumed = build_trainer(target_model_dir, str(output_dir), save_total_limit=1)
    with pytest.warns(CorruptCheckpointWarning) as caught:
        resumed.train(resume_from_checkpoint=True)
    messages = [str(w.message) for w in caught]
    assert any("checkpoint-6/agent_0/adapter_model.safetensors" in m for m in messages)
    assert any("checkpoint-4/optimizer.pt" in m for m in messages)
    assert any("kept as" in m and "checkpoint-6-corrupt" in m for m in messages)  # re-saving step 6 kept it
    assert any("kept as" in m and "checkpoint-4-corrupt" in m for m in messages)
    assert resumed.state.log_history[1]["step"] == 2  # resumed from checkpoint-2
    assert_same_run(resumed, reference)
    # re-saving steps 4 and 6 moved the damaged ones aside (kept); save_total_limit=1 counts the new, good ones only
    assert sorted(os.listdir(output_dir)) == ["checkpoint-4-corrupt", "checkpoint-6", "checkpoint-6-corrupt"]
    assert checkpoint_problem(str(output_dir / "checkpoint-6")) is None
    assert checkpoint_problem(str(output_dir / "checkpoint-6-corrupt")) is not None


def test_checkpoint_model_cards_name_the_published_folder(saved_run):
    for step in (2, 4, 6):
        card = (saved_run / f"checkpoint-{step}" / "README.md").read_text()
        assert f"\n# checkpoint-{step}\n" in card
        assert f'AgentTeam.from_pretrained("checkpoint-{step}")' in card
        assert "tmp-" not in card


def test_resuming_a_finished_run_is_refused(target_model_dir, saved_run, tmp_path):
    """transformers trains one step past `max_steps` when resumed from the last checkpoint of a finished run."""
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    trainer = build_trainer(target_model_dir, str(output_dir))
    with pytest.raises(ValueError, match=r"checkpoint-6: it is at step 6 and `MAGRPOConfig.max_steps=6`, so this "
                                         r"run is finished .*raise `max_steps` above 6"):
        trainer.train(resume_from_checkpoint=True)
    with pytest.raises(ValueError, match="at step 4 and `MAGRPOConfig.max_steps=4`"):
        build_trainer(target_model_dir, str(output_dir), max_steps=4).train(
            resume_from_checkpoint=str(output_dir / "checkpoint-4"))
    assert trainer.state.global_step == 0
    assert sorted(os.listdir(output_dir)) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]  # nothing trained


# ------------------------------------------------------------------------------------------------ damage of every kind
# The shapes a red team used to resume silently in a wrong state (or to crash or hang the resume); each one is applied
# to checkpoint-6 of a copy of `saved_run`, usually with the manifest rewritten to fit (what a tool that "repairs"
# manifests, or a careless user, leaves), and must be refused by name: skipped for checkpoint-4 with a warning, and a
# clear `ValueError` for the explicit path.


def finishes_within(seconds: float, call: Any) -> Any:
    """`call()`'s result; fails (instead of hanging the suite) when it takes longer (e.g. reading `/dev/zero`)."""
    import threading

    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            outcome.append((False, exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s (reading a device or a FIFO?)"
    returned, value = outcome[0]
    if not returned:
        raise value
    return value


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def set_manifest_entry(folder: Path, name: str, size: int, sha256: str) -> None:
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    manifest["files"][name] = {"size": size, "sha256": sha256}
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))


def assert_refused(output_dir: Path, resumer: Any, bad: str, fragment: str, spec: Any = None) -> None:
    """checkpoint-6 of `output_dir` is refused: its problem starts with the bad path and holds `fragment`, resume=True
    falls back to checkpoint-4 with a warning saying so, and the explicit path is a `ValueError` saying so."""
    six = output_dir / "checkpoint-6"
    spec = spec if spec is not None else resumer.checkpoint_spec()
    problem = finishes_within(20, lambda: checkpoint_problem(str(six), spec=spec))
    assert problem is not None and problem.startswith(bad) and fragment in problem, problem
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert finishes_within(20, lambda: last_complete_checkpoint(output_dir, spec)) == str(
            output_dir / "checkpoint-4")
    assert [str(w.message) for w in caught if issubclass(w.category, CorruptCheckpointWarning)] == [
        f"Skipping the damaged checkpoint {six}: {problem}. Falling back to an older checkpoint; the damaged one is "
        "left in place (delete it yourself once you no longer need it)."]
    with pytest.raises(ValueError) as raised:
        finishes_within(20, lambda: resumer.train(resume_from_checkpoint=str(six)))
    assert str(raised.value).startswith(f"Cannot resume from {six}: it is damaged: {problem}. The newest complete "
                                        f"checkpoint next to it is {output_dir / 'checkpoint-4'}")


@pytest.fixture
def run_copy(saved_run, tmp_path) -> Path:
    output_dir = tmp_path / "out"
    shutil.copytree(saved_run, output_dir)
    return output_dir


@pytest.mark.parametrize("deleted", [("optimizer.pt", "scheduler.pt"), ("rng_state.pth",),
                                     ("agent_1/adapter_model.safetensors",), ("team_config.json",)])
@pytest.mark.parametrize("manifest", ["removed", "rewritten"])
def test_the_files_a_resume_needs_are_required(run_copy, resumer, deleted, manifest):
    """transformers resumes silently without an optimizer, a scheduler or an RNG state it does not find (an empty
    optimizer, the learning rate back at its start); a manifest cannot tell, once removed or rewritten."""
    six = run_copy / "checkpoint-6"
    for name in deleted:
        os.remove(six / name)
    os.remove(six / MANIFEST_FILE)
    if manifest == "rewritten":
        write_manifest(str(six))
    assert_refused(run_copy, resumer, str(six / deleted[0]), "is missing: resuming needs it")
    if deleted[0].startswith("agent_"):  # the checkpoint's own team_config.json names its agents, whatever the trainer
        assert checkpoint_problem(str(six)).startswith(f"{six / deleted[0]} is missing")


def test_the_trainer_says_what_it_needs(target_model_dir, saved_run, resumer, tmp_path):
    """MAGRPO's adaptive entropy controllers keep their state in a file of their own: required when they are on."""
    adapters = [("agent_0/adapter_model.safetensors",), ("agent_1/adapter_model.safetensors",)]
    training = [("optimizer.pt",), ("scheduler.pt",), ("rng_state.pth", "rng_state_0.pth")]
    assert resumer.checkpoint_spec().required == (("trainer_state.json",), ("team_config.json",), *adapters,
                                                  *training)
    assert "global_step" in resumer.checkpoint_spec().state_keys
    adaptive = build_trainer(target_model_dir, str(tmp_path / "adaptive"), use_adaptive_entropy=True,
                             entropy_coef=0.1)
    assert adaptive.checkpoint_spec().required[-1] == ("entropy_control.json",)
    six = saved_run / "checkpoint-6"  # written without adaptive entropy
    assert checkpoint_problem(str(six), spec=adaptive.checkpoint_spec()) == (
        f"{six / 'entropy_control.json'} is missing: resuming needs it (without it the run would resume silently in "
        "another state)")
    only_model = build_trainer(target_model_dir, str(tmp_path / "only-model"), save_only_model=True)
    assert only_model.checkpoint_spec().required == (("trainer_state.json",), ("team_config.json",), *adapters)


def test_a_resume_never_continues_without_the_optimizer_and_scheduler(target_model_dir, run_copy, reference):
    """The red team's shape: checkpoint-4's optimizer and scheduler (and its manifest) deleted. The resume falls back
    to checkpoint-2 and reproduces the uninterrupted run (not step 4's weights with a fresh optimizer and the
    learning rate of step 0)."""
    shutil.rmtree(run_copy / "checkpoint-6")
    four = run_copy / "checkpoint-4"
    for name in ("optimizer.pt", "scheduler.pt", MANIFEST_FILE):
        os.remove(four / name)
    resumed = build_trainer(target_model_dir, str(run_copy))
    with pytest.warns(CorruptCheckpointWarning, match=f"{four / 'optimizer.pt'} is missing: resuming needs it"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.log_history[1]["step"] == 2  # resumed from checkpoint-2
    assert_same_run(resumed, reference)


def test_the_folder_name_agrees_with_global_step(saved_run, run_copy, resumer):
    six, four = run_copy / "checkpoint-6", run_copy / "checkpoint-4"
    # global_step edited (and the manifest rewritten): refused by the step of the folder's name...
    edit_json(six / "trainer_state.json", global_step=7)
    write_manifest(str(six))
    assert_refused(run_copy, resumer, str(six / "trainer_state.json"),
                   "has `global_step` 7, but its folder is named for step 6")
    # ...and edited back in time, by the log that goes on past it (whatever the folder is called)
    edit_json(six / "trainer_state.json", global_step=1)
    write_manifest(str(six))
    assert_refused(run_copy, resumer, str(six / "trainer_state.json"),
                   "has `global_step` 1 but a log entry for step 6")
    renamed = run_copy / "my-copy"
    shutil.copytree(six, renamed)
    assert checkpoint_problem(str(renamed)) == (f"{renamed / 'trainer_state.json'} has `global_step` 1 but a log "
                                                "entry for step 6: the state was edited or is not this checkpoint's")
    # checkpoint-4 and checkpoint-6 swapped whole (each with its own, valid manifest): both refused, the resume goes
    # back to checkpoint-2 (not step 4's state continued as step 6, nor the reverse)
    shutil.rmtree(six)
    shutil.rmtree(four)
    shutil.copytree(saved_run / "checkpoint-4", six)
    shutil.copytree(saved_run / "checkpoint-6", four)
    with pytest.warns(CorruptCheckpointWarning) as caught:
        assert last_complete_checkpoint(run_copy, resumer.checkpoint_spec()) == str(run_copy / "checkpoint-2")
    swapped = ("{} has `global_step` {}, but its folder is named for step {}: the state was edited, or checkpoint "
               "folders were renamed or swapped (a resume would continue step {}'s state as step {}, or the reverse)")
    assert [str(w.message).split(": ", 1)[1].split(". Falling")[0] for w in caught] == [
        swapped.format(six / "trainer_state.json", 4, 6, 4, 6),
        swapped.format(four / "trainer_state.json", 6, 4, 6, 4),
    ]
    shutil.rmtree(run_copy / "checkpoint-2")
    output_dir, resumer.args.output_dir = resumer.args.output_dir, str(run_copy)
    try:
        with pytest.raises(ValueError, match=r"No complete checkpoint to resume from .*Skipped:\n- .*checkpoint-6/"
                                             r"trainer_state.json has `global_step` 4, but its folder is named"):
            resumer.train(resume_from_checkpoint=True)
    finally:
        resumer.args.output_dir = output_dir


DEV_ZERO = "/dev/zero"
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def link_to_dev_zero(six: Path) -> None:
    os.remove(six / "optimizer.pt")
    os.symlink(DEV_ZERO, six / "optimizer.pt")
    set_manifest_entry(six, "optimizer.pt", 0, EMPTY_SHA256)  # what /dev/zero's size says


def fifo_for_a_file(six: Path) -> None:
    os.remove(six / "optimizer.pt")
    os.mkfifo(six / "optimizer.pt")
    set_manifest_entry(six, "optimizer.pt", 0, EMPTY_SHA256)


def linked_agent_folder(six: Path, manifest: str = "rewritten") -> None:
    """agent_0 from another checkpoint: mixed weights. The manifest lists its files as read through the link."""
    shutil.rmtree(six / "agent_0")
    os.symlink("../checkpoint-4/agent_0", six / "agent_0")
    if manifest == "removed":
        os.remove(six / MANIFEST_FILE)
        return
    for path in sorted((six / "agent_0").iterdir()):
        set_manifest_entry(six, f"agent_0/{path.name}", path.stat().st_size, file_sha256(str(path)))


def linked_weights_file(six: Path) -> None:
    target = six.parent / "checkpoint-4" / "agent_1" / "adapter_model.safetensors"
    os.remove(six / "agent_1" / "adapter_model.safetensors")
    os.symlink(target, six / "agent_1" / "adapter_model.safetensors")
    set_manifest_entry(six, "agent_1/adapter_model.safetensors", target.stat().st_size, file_sha256(str(target)))


def dotted_entry(six: Path) -> None:
    size, digest = (six / "optimizer.pt").stat().st_size, file_sha256(str(six / "optimizer.pt"))
    set_manifest_entry(six, "./optimizer.pt", size, digest)


def parent_entry(six: Path) -> None:
    target = six.parent / "checkpoint-4" / "optimizer.pt"
    set_manifest_entry(six, "../checkpoint-4/optimizer.pt", target.stat().st_size, file_sha256(str(target)))


def unlisted_file(six: Path) -> None:
    shutil.copy(six / "scheduler.pt", six / "scaler.pt")  # transformers would load a scaler.pt it finds


def directory_for_a_file(six: Path) -> None:
    data = (six / "rng_state.pth").read_bytes()
    os.remove(six / "rng_state.pth")
    (six / "rng_state.pth").mkdir()
    (six / "rng_state.pth" / "rng_state.pth").write_bytes(data)


@pytest.mark.parametrize(("shape", "bad", "fragment"), [
    (link_to_dev_zero, "optimizer.pt", "is a symbolic link (to '/dev/zero')"),
    (fifo_for_a_file, "optimizer.pt", "is a FIFO, not a regular file"),
    (linked_agent_folder, "agent_0", "is a symbolic link (to '../checkpoint-4/agent_0')"),
    (lambda six: linked_agent_folder(six, "removed"), "agent_0", "is a symbolic link"),
    (linked_weights_file, "agent_1/adapter_model.safetensors", "is a symbolic link"),
    (dotted_entry, MANIFEST_FILE, "lists './optimizer.pt', which is not a plain path inside the checkpoint"),
    (parent_entry, MANIFEST_FILE, "lists '../checkpoint-4/optimizer.pt', which is not a plain path"),
    (unlisted_file, "scaler.pt", f"is not listed in {{six}}/{MANIFEST_FILE}: it was added after"),
    (directory_for_a_file, "rng_state.pth", "is a directory, not the file its manifest lists"),
], ids=["dev-zero", "fifo", "linked-agent", "linked-agent-no-manifest", "linked-file", "dot-entry", "dotdot-entry",
        "unlisted", "directory"])
def test_a_checkpoint_holds_its_listed_regular_files_only(run_copy, resumer, shape, bad, fragment):
    """Manifest entries are regular files inside the folder (`lstat`: no link is followed, no device or FIFO is
    read), and a file the manifest does not list is refused."""
    six = run_copy / "checkpoint-6"
    shape(six)
    assert_refused(run_copy, resumer, str(six / bad), fragment.replace("{six}", str(six)))


def wrong_types(**changes: Any) -> Any:
    return lambda six: edit_json(six / "trainer_state.json", **changes)


@pytest.mark.parametrize(("shape", "bad", "fragment"), [
    (lambda six: damage(six / "trainer_state.json", "truncate"), "trainer_state.json", "JSONDecodeError"),
    (wrong_types(global_step="6"), "trainer_state.json", 'has `global_step` = "6", which is not a non-negative'),
    (wrong_types(log_history=5), "trainer_state.json", "has `log_history` = 5, which is not a list of objects"),
    (wrong_types(stateful_callbacks=[]), "trainer_state.json", "has `stateful_callbacks` = [], which is not"),
    (wrong_types(resumed_by="me"), "trainer_state.json", "has `resumed_by`, which transformers' TrainerState"),
    (lambda six: (six / "trainer_state.json").write_text("[6]"), "trainer_state.json", "is not a JSON object"),
    (lambda six: edit_json(six / "team_config.json", agent_adapter="default"), "team_config.json",
     "is not a team layout"),
    (directory_for_a_file, "rng_state.pth", "is a directory"),
    (lambda six: (six / "optimizer.pt").write_text("{}"), "optimizer.pt", "is damaged (BadZipFile"),
    (lambda six: (six / "agent_0" / "adapter_config.json").write_text("{"), "agent_0/adapter_config.json",
     "JSONDecodeError"),
], ids=["truncated-state", "step-a-string", "log-a-number", "callbacks-a-list", "unknown-key", "state-a-list",
        "team-config-types", "directory", "optimizer-not-a-zip", "truncated-adapter-config"])
@pytest.mark.parametrize("manifest", ["rewritten", "removed"])
def test_wrong_json_types_and_odd_files_are_refused_never_crash(run_copy, resumer, shape, bad, fragment, manifest):
    """The OSError/TypeError-type crashes of the red team: a truncated or mistyped JSON file, a directory where a
    file is expected, a file of the wrong kind. Each is named; nothing raises, so an older good checkpoint is
    found."""
    six = run_copy / "checkpoint-6"
    shape(six)
    os.remove(six / MANIFEST_FILE)
    if manifest == "rewritten":
        write_manifest(str(six))
    if shape is directory_for_a_file:  # a folder is not listed: the file it replaced is missing
        bad, fragment = "rng_state.pth", "is missing: resuming needs it"
    assert_refused(run_copy, resumer, str(six / bad), fragment)


def test_the_manifest_itself_is_checked(run_copy, resumer):
    six = run_copy / "checkpoint-6"
    manifest = (six / MANIFEST_FILE).read_text()
    for written, fragment in [
        ('{"format": 1, "files": []}', "is not a manifest of format 1"),
        ('{"format": true, "files": {}}', "is not a manifest of format 1"),
        ('{"format": 1, "files": {"optimizer.pt": {"size": "12", "sha256": "00"}}}', "has an invalid entry for"),
        (manifest[: len(manifest) // 2], "is not valid JSON"),
    ]:
        (six / MANIFEST_FILE).write_text(written)
        assert_refused(run_copy, resumer, str(six / MANIFEST_FILE), fragment)
    os.remove(six / MANIFEST_FILE)
    (six / MANIFEST_FILE).mkdir()
    assert_refused(run_copy, resumer, str(six / MANIFEST_FILE), "is a directory, not a file")


@pytest.mark.parametrize("damaged", [
    {"global_step": "4"},  # crashed with TypeError (compared with max_steps)
    {"stateful_callbacks": []},  # crashed with KeyError when the resumed run saved its next checkpoint
])
def test_a_damaged_state_falls_back_instead_of_crashing_the_resume(target_model_dir, run_copy, reference, damaged):
    shutil.rmtree(run_copy / "checkpoint-6")
    four = run_copy / "checkpoint-4"
    edit_json(four / "trainer_state.json", **damaged)
    write_manifest(str(four))
    resumed = build_trainer(target_model_dir, str(run_copy))
    with pytest.warns(CorruptCheckpointWarning, match=f"{four / 'trainer_state.json'} has `{next(iter(damaged))}`"):
        resumed.train(resume_from_checkpoint=True)
    assert resumed.state.log_history[1]["step"] == 2  # resumed from checkpoint-2
    assert_same_run(resumed, reference)


# ------------------------------------------------------------------------------------------------ multi-agent PPO
# MultiAgentPPOTrainer does not resume (`train(resume_from_checkpoint=...)` is refused); its checkpoints are read
# back when a failing reward asks whether the last completed update is saved already: a damaged checkpoint of that
# step is not "already saved" (it is kept aside, and the step saved again).


def test_ppo_does_not_take_a_damaged_checkpoint_for_its_last_completed_update(target_model_dir, tmp_path):
    from datasets import Dataset

    from trl_marl import MultiAgentPPOConfig, MultiAgentPPOTrainer, RewardFunctionError
    from trl_marl.rewards.arithmetic import TargetSumReward

    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"

    class TamperingReward(TargetSumReward):
        """Update 2's reward links checkpoint-1's value model to another folder (same files), then fails."""

        def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
            if (out / "checkpoint-1").is_dir():
                folder = out / "checkpoint-1" / "value_model_0"
                shutil.copytree(folder, elsewhere)
                shutil.rmtree(folder)
                os.symlink(elsewhere, folder)
                raise ConnectionError("verifier at http://127.0.0.1:9 refused the connection")
            return super().__call__(prompts, completions, **kwargs)

    reward = TamperingReward(0.5)
    reward.__name__ = "tampering_verifier"
    args = MultiAgentPPOConfig(
        output_dir=str(out), num_agents=2, per_device_train_batch_size=2, total_episodes=6, response_length=3,
        num_ppo_epochs=1, learning_rate=1e-3, report_to="none", save_strategy="steps", save_steps=1,
        num_sample_generations=0, disable_tqdm=True, seed=0,
    )
    trainer = MultiAgentPPOTrainer(args=args, model=target_model_dir, reward_funcs=reward,
                                   train_dataset=Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4}))
    with pytest.warns(CorruptCheckpointWarning, match=f"{out / 'checkpoint-1'} is damaged .*value_model_0 is a "
                                                      f"symbolic link .*kept as {out / 'checkpoint-1-corrupt'}"):
        with pytest.raises(RewardFunctionError) as caught:
            trainer.train()
    assert f"The last completed step (1) was saved in {out / 'checkpoint-1'}" in str(caught.value)
    assert sorted(os.listdir(out)) == ["checkpoint-1", "checkpoint-1-corrupt"]
    assert checkpoint_problem(str(out / "checkpoint-1")) is None  # saved again, whole (value models included)
    assert (out / "checkpoint-1" / "value_model_0" / "model.safetensors").is_file()
    assert (out / "checkpoint-1-corrupt" / "value_model_0").is_symlink()  # kept as it was


def rewrite_safetensors_header(path: Path, edit: Any) -> None:
    """Rewrite a safetensors file's JSON header with `edit(header)` applied, keeping its data bytes (the file's size
    then agrees with the new header's length, as a careful forger would make it)."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    edit(header)
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


def first_tensor(header: dict) -> str:
    return min((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])


def shrunk_header(six: Path) -> None:
    """The first tensor's entry removed from the header: every other offset and the file's size still agree."""
    path = six / "agent_0" / "adapter_model.safetensors"
    rewrite_safetensors_header(path, lambda header: header.pop(first_tensor(header)))
    set_manifest_entry(six, "agent_0/adapter_model.safetensors", path.stat().st_size, file_sha256(str(path)))


def reshaped_tensor(six: Path) -> None:
    path = six / "agent_0" / "adapter_model.safetensors"

    def edit(header: dict) -> None:
        entry = header[first_tensor(header)]
        entry["shape"] = [entry["shape"][0] * 2, *entry["shape"][1:]]

    rewrite_safetensors_header(path, edit)
    set_manifest_entry(six, "agent_0/adapter_model.safetensors", path.stat().st_size, file_sha256(str(path)))


def linked_checkpoint(six: Path) -> None:
    """checkpoint-6 is a link to another run's checkpoint-6 (a whole, intact one)."""
    elsewhere = six.parent.parent / "other-run-checkpoint-6"
    shutil.move(str(six), elsewhere)
    os.symlink(elsewhere, six)


@pytest.mark.parametrize(("shape", "bad", "fragment"), [
    (shrunk_header, "agent_0/adapter_model.safetensors", "where the previous one ends at 0 (a hole"),
    (reshaped_tensor, "agent_0/adapter_model.safetensors", "bytes where its shape"),
    (linked_checkpoint, "", "is a symbolic link (to "),
], ids=["shrunk-header", "reshaped-tensor", "linked-checkpoint"])
def test_a_forged_safetensors_header_or_a_linked_checkpoint_falls_back(run_copy, resumer, shape, bad, fragment):
    """A safetensors header rewritten (with its manifest) so that sizes agree but safetensors refuses it, and a
    checkpoint folder that is a link to another run's: both skipped for the checkpoint before, never loaded."""
    six = run_copy / "checkpoint-6"
    shape(six)
    assert_refused(run_copy, resumer, str(six / bad) if bad else str(six), fragment)
