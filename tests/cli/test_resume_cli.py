"""`--resume_from_checkpoint` on the command line resumes as `trainer.train(resume_from_checkpoint=...)` does, and a
run into an `output_dir` that holds another run's checkpoints is refused before any model loads (issue 53, item 1).

The runs are `trl-marl magrpo` on the toy target-sum task, in this process: two steps of two agents, a checkpoint
after each (a few seconds).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from trl_marl.scripts.arguments import output_dir_problem, resume_value

RUN = ["--task", "target_sum", "--model_name_or_path", "toy", "--num_generations", "2",
       "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--lora_r", "2",
       "--save_strategy", "steps", "--save_steps", "1", "--report_to", "none", "--cpu_threads", "1",
       "--logging_steps", "1", "--max_steps", "2", "--disable_tqdm", "true", "--learning_rate", "0.01"]


def magrpo(output_dir: Path, *extra: str) -> Any:
    """`trl-marl magrpo` with the two-step toy run into `output_dir`; returns the trainer."""
    from trl_marl.scripts.magrpo import cli_main

    return cli_main([*RUN, "--output_dir", str(output_dir), *extra])


def adapters(output_dir: Path) -> dict[str, torch.Tensor]:
    """Every agent's saved weights, by file and name."""
    files = sorted(output_dir.glob("agent_*/*.safetensors"))
    return {f"{path.parent.name}/{path.name}/{name}": tensor
            for path in files for name, tensor in load_file(path).items()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of an uninterrupted two-step run: checkpoint-1, checkpoint-2 and the final agents."""
    output_dir = tmp_path_factory.mktemp("finished") / "out"
    trainer = magrpo(output_dir)
    assert trainer.state.global_step == 2
    return output_dir


@pytest.fixture
def interrupted_run(finished_run: Path, tmp_path: Path) -> Path:
    """An output folder as a run stopped after step 1 leaves it: its checkpoint-1 only."""
    output_dir = tmp_path / "interrupted"
    output_dir.mkdir()
    shutil.copytree(finished_run / "checkpoint-1", output_dir / "checkpoint-1")
    return output_dir


@pytest.mark.parametrize("how", ["path", "true"])
def test_the_command_line_resumes_where_the_run_stopped(finished_run, interrupted_run, how):
    checkpoint = interrupted_run / "checkpoint-1"
    before = os.stat(checkpoint).st_ino
    trainer = magrpo(interrupted_run, "--resume_from_checkpoint", str(checkpoint) if how == "path" else "true")
    assert trainer.state.global_step == 2
    assert os.stat(checkpoint).st_ino == before  # step 1 was not trained, nor saved, again
    assert sorted(p.name for p in interrupted_run.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    resumed, uninterrupted = adapters(interrupted_run), adapters(finished_run)
    assert resumed.keys() == uninterrupted.keys() and resumed
    for name, tensor in uninterrupted.items():  # the resumed run ends where the uninterrupted one did
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=0, msg=name)


def test_a_run_into_another_runs_checkpoints_is_refused_before_any_model_loads(interrupted_run, monkeypatch,
                                                                               capsys):
    import trl_marl.scripts.magrpo as script

    def must_not_load(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the task and the model were loaded before the refusal")

    monkeypatch.setattr(script, "main", must_not_load)
    with pytest.raises(SystemExit) as exited:
        magrpo(interrupted_run)
    assert exited.value.code == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert str(interrupted_run) in message and "checkpoint-1" in message
    assert "--resume_from_checkpoint true" in message and "--overwrite_output_dir true" in message


def test_overwrite_output_dir_starts_afresh_and_deletes_the_other_runs_checkpoints(finished_run, tmp_path):
    output_dir = tmp_path / "again"
    shutil.copytree(finished_run, output_dir)
    (output_dir / "checkpoint-1" / "from_the_old_run").write_text("")  # an inode number may be reused: a marker
    trainer = magrpo(output_dir, "--overwrite_output_dir", "true", "--max_steps", "1")
    assert trainer.state.global_step == 1
    assert sorted(p.name for p in output_dir.glob("checkpoint-*")) == ["checkpoint-1"]  # checkpoint-2 deleted
    assert not (output_dir / "checkpoint-1" / "from_the_old_run").exists()  # written by this run
    assert (output_dir / "checkpoint-1" / "trainer_state.json").exists()


@pytest.mark.parametrize(("extra", "expected"), [
    (["--resume_from_checkpoint", "true"], "has none"),
    (["--resume_from_checkpoint", "no/such/checkpoint-3"], "is not a folder"),
])
def test_a_resume_with_nothing_to_resume_is_one_line_before_any_model_loads(tmp_path, monkeypatch, capsys, extra,
                                                                            expected):
    import trl_marl.scripts.magrpo as script

    monkeypatch.setattr(script, "main", lambda *args: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit):
        magrpo(tmp_path / "empty", *extra)
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and expected in message and "--resume_from_checkpoint" in message


@pytest.mark.parametrize("how", ["path", "true"])
def test_resuming_a_finished_run_is_one_line_before_any_model_loads(finished_run, monkeypatch, capsys, how):
    """A new user's replay resumed a run that had reached `max_steps`: the trainer's ValueError came after the
    model loaded, inside a 20-line traceback."""
    import trl_marl.scripts.magrpo as script

    monkeypatch.setattr(script, "main", lambda *args: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as exited:
        magrpo(finished_run, "--resume_from_checkpoint",
               str(finished_run / "checkpoint-2") if how == "path" else "true")
    assert exited.value.code == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1
    assert "checkpoint-2" in message and "max_steps=2" in message and "raise `max_steps` above 2" in message


def test_maporl_refuses_another_runs_checkpoints_and_offers_the_resume(tmp_path, monkeypatch, capsys):
    import trl_marl.scripts.maporl as script

    monkeypatch.setattr(script, "build_models", lambda *args: pytest.fail("the model was loaded"))
    (tmp_path / "checkpoint-3").mkdir()
    with pytest.raises(SystemExit):
        script.main(["gsm8k", "--output_dir", str(tmp_path), "--report_to", "none"])
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and "--overwrite_output_dir true" in message, message
    assert "resume that run with `--resume_from_checkpoint true`" in message  # PPO resumes since issue 53


def test_resume_values_follow_trainer_train():
    assert resume_value("true") is True and resume_value(True) is True
    assert resume_value(None) is None and resume_value("false") is None and resume_value(False) is None
    assert resume_value("out/checkpoint-4") == "out/checkpoint-4"
    assert output_dir_problem("x", "x/checkpoint-1", True) is not None  # resume and overwrite contradict
