"""What the demos leave behind and show (issue 39, item 6): `--real`'s plots and JSON like the toy demo's, the trained
teams kept with `--keep-teams` (else a line saying they were deleted), output folders ignored by git, an evaluation
bar per `evaluate()`, timed lines for phases without steps, bars that stay on screen."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pytest

from trl_marl.scripts import demo_real, progress
from trl_marl.scripts.demo import DemoConfig, add_demo_arguments, demo_command

ROOT = Path(__file__).resolve().parents[2]
TARGET = 10


def fake_parts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Replace the real demo's model and both training parts by what they return (no model is loaded); records the
    folder each part was asked to keep its team in."""
    kept: list[tuple[str, str | None]] = []
    monkeypatch.setattr("trl_marl.utils.model_names.resolve_model_name", lambda name: "/nowhere")

    def magrpo(steps: int, seed: int, eval_lists: int, work_dir: str, show_progress: bool,
               keep_dir: str | None = None, cpu_threads: int | None = None) -> dict[str, Any]:
        kept.append(("magrpo", keep_dir))
        return {"heldout_lists": eval_lists, "distinct_lists": eval_lists, "before": {"success": 0.25},
                "after": {"success": 0.75}, "sample_list": [37, 52], "sample_answers": ["37 / 52"],
                "reward_curve": [0.5, 0.625, 0.75], "team_dir": keep_dir}

    def maporl(updates: int, seed: int, questions: int, work_dir: str, show_progress: bool,
               keep_dir: str | None = None, cpu_threads: int | None = None) -> dict[str, Any]:
        kept.append(("maporl", keep_dir))
        return {"questions": questions, "distinct_questions": questions,
                "before": {"majority_accuracy": [0.5, 0.25], "w_to_r_rate": [0.125], "r_to_w_rate": [0.5]},
                "after": {"majority_accuracy": [0.5, 0.75], "w_to_r_rate": [0.5], "r_to_w_rate": [0.0]},
                "score_curve": [0.1, 0.2], "team_dir": keep_dir}

    monkeypatch.setattr(demo_real, "run_magrpo_real", magrpo)
    monkeypatch.setattr(demo_real, "run_maporl_real", maporl)
    return kept


def test_real_demo_writes_plots_and_says_the_teams_were_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: `--real` wrote its JSON only (no plots) and said nothing about its trained teams."""
    kept = fake_parts(monkeypatch)
    out = tmp_path / "real"
    results = demo_real.run_real_demo(demo_real.RealDemoConfig(preset="quick", output_dir=str(out),
                                                               show_progress=False))
    assert kept == [("magrpo", None), ("maporl", None)]
    assert sorted(os.listdir(out)) == ["demo_real_metrics.json", "magrpo_team_reward.png",
                                       "maporl_accuracy_per_turn.png"]
    saved = json.loads((out / "demo_real_metrics.json").read_text())
    assert saved["plots"] == [str(out / "magrpo_team_reward.png"), str(out / "maporl_accuracy_per_turn.png")]
    assert saved["plots"] == results["plots"] and saved["magrpo"]["reward_curve"] == [0.5, 0.625, 0.75]
    for plot in saved["plots"]:
        assert Path(plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(plot).stat().st_size > 1000
    printed = capsys.readouterr().out
    assert f"Plots and metrics in {out}" in printed
    assert printed.rstrip().endswith(f"The trained teams were deleted; `--keep-teams` saves them to {out / 'teams'}.")


def test_real_demo_keeps_the_teams_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = fake_parts(monkeypatch)
    out = tmp_path / "real"
    parser = argparse.ArgumentParser()
    add_demo_arguments(parser)
    assert parser.parse_args([]).keep_teams is False
    assert demo_command(parser.parse_args(["--real", "--quick", "--keep-teams", "--output-dir", str(out)])) == 0
    teams = out / "teams"
    assert kept == [("magrpo", str(teams / "magrpo")), ("maporl", str(teams / "maporl"))]
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last == (f"Trained teams saved: MAGRPO in {teams / 'magrpo'}, MAPoRL in {teams / 'maporl'} "
                    "(AgentTeam.from_pretrained loads them). Try one: trl-marl generate --team "
                    f"{teams / 'maporl'} --prompt 'What is 3 + 4?'")


def test_the_real_debate_plot_has_one_turn_change() -> None:
    """The toy demo's MAPoRL figure, with the real debate's 2 turns and its own title."""
    from trl_marl.scripts.plots import maporl_figure

    data = {"before": {"majority_accuracy": [0.5, 0.25], "w_to_r_rate": [0.125], "r_to_w_rate": [0.5]},
            "after": {"majority_accuracy": [0.5, 0.75], "w_to_r_rate": [0.5], "r_to_w_rate": [0.0]}}
    fig = maporl_figure(data, "the real debate")
    lines_ax, bars_ax = fig.axes
    assert fig._suptitle.get_text() == "the real debate"
    assert [list(line.get_ydata()) for line in lines_ax.get_lines()] == [[0.5, 0.25], [0.5, 0.75]]
    heights = [patch.get_height() for patch in bars_ax.patches]
    assert heights == [0.125, 0.5, 0.5, 0.0]  # w->r before, after; r->w before, after
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["1 -> 2"]


def test_debate_accuracy_keeps_the_flips() -> None:
    metrics = {"eval_turn_1/majority_accuracy": 0.5, "eval_turn_2/majority_accuracy": 0.75,
               "eval_turn_1/agent_accuracy": 0.4, "eval_turn_2/agent_accuracy": 0.6,
               "eval_turn_1_2/w_to_r_rate": 0.25, "eval_turn_1_2/r_to_w_rate": 0.0}
    assert demo_real.debate_accuracy(metrics) == {"majority_accuracy": [0.5, 0.75], "agent_accuracy": [0.4, 0.6],
                                                  "w_to_r_rate": [0.25], "r_to_w_rate": [0.0]}


@pytest.mark.parametrize("config", [DemoConfig(), demo_real.RealDemoConfig()])
def test_demo_output_folders_are_ignored_by_git(config: Any) -> None:
    """Before: `trl-marl-demo-real/` was not in .gitignore (the toy demo's folder was)."""
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert f"/{config.output_dir}/" in ignored


def magrpo_trainer(model_dir: str, output_dir: str) -> Any:
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    config = MAGRPOConfig(output_dir=output_dir, num_agents=2, num_generations=2, per_device_train_batch_size=4,
                          per_device_eval_batch_size=2, max_completion_length=3, max_steps=1, report_to="none",
                          save_strategy="no", disable_tqdm=True, seed=0, activation_checkpointing=False)
    rows = Dataset.from_dict({"target": [TARGET] * 8})
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(0.5), env=TargetSumEnv(2), args=config,
                         train_dataset=rows, eval_dataset=Dataset.from_dict({"target": [TARGET] * 3}))


def test_evaluation_has_a_bar_that_stays(target_model_dir: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Before: `evaluate()` told its callbacks nothing per batch, and the demos' training bars vanished at the end."""
    from transformers import TrainerCallback

    trainer = magrpo_trainer(target_model_dir, str(tmp_path / "run"))
    progress.replace_progress(trainer.callback_handler, progress.progress_callback("toy team", True))
    batches = []

    class Count(TrainerCallback):
        def on_prediction_step(self, args: Any, state: Any, control: Any, eval_dataloader: Any = None,
                               **kwargs: Any) -> None:
            batches.append(len(eval_dataloader))

    trainer.add_callback(Count())
    capsys.readouterr()
    trainer.evaluate()
    # 3 rows, one episode each (`num_generations_eval` 1), 2 episodes per batch: 2 batches
    assert batches == [2, 2]
    err = capsys.readouterr().err
    assert "toy team: evaluating: 100%" in err and "2/2" in err
    assert err.endswith("\n")  # closed and left on screen
    trainer.train()
    err = capsys.readouterr().err
    assert "toy team: 100%" in err and "1/1" in err and err.endswith("\n")


def test_phase_bar_shows_the_time_and_stays(capsys: pytest.CaptureFixture[str]) -> None:
    with progress.phase_bar("loading the model", True, tick_seconds=0.01):
        pass
    with progress.phase_bar("evaluating", True) as bar:
        bar.set_postfix_str("success 0.750", refresh=False)
    with progress.phase_bar("hidden", False):
        pass
    err = capsys.readouterr().err
    assert err.endswith("\n")
    lines = [line.split("\r")[-1] for line in err.split("\n") if line.split("\r")[-1]]  # what stays on screen
    assert lines == ["loading the model: 00:00, done", "evaluating: 00:00, success 0.750"]


def test_keep_team_saves_a_loadable_team(target_model_dir: str, tmp_path: Path) -> None:
    import torch

    from trl_marl import AgentTeam

    trainer = magrpo_trainer(target_model_dir, str(tmp_path / "run"))
    folder = trainer.save_team(str(tmp_path / "teams" / "magrpo"))
    assert sorted(os.listdir(folder)) == ["README.md", "agent_0", "agent_1", "team_config.json"]
    loaded = AgentTeam.from_pretrained(folder)
    mine = trainer.team.state_dict()
    theirs = loaded.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_toy_demo_plots_through_the_shared_code(tmp_path: Path) -> None:
    from trl_marl.scripts.demo import make_plots

    results = {"magrpo": {"magrpo_curve": [0.0, 0.5, 1.0], "alone_curves": [[0.0, 0.1, 0.0], [0.1, 0.0, 0.1]]},
               "maporl": {"before": {"majority_accuracy": [0.8, 0.5, 0.5], "w_to_r_rate": [0.4, 0.2],
                                     "r_to_w_rate": [0.5, 0.3]},
                          "after": {"majority_accuracy": [0.8, 1.0, 1.0], "w_to_r_rate": [0.9, 0.9],
                                    "r_to_w_rate": [0.0, 0.0]}}}
    paths = make_plots(results, str(tmp_path))
    assert paths == [str(tmp_path / "magrpo_team_reward.png"), str(tmp_path / "maporl_accuracy_per_turn.png")]
    assert all(Path(p).stat().st_size > 1000 for p in paths)


def test_save_team_of_ppo_leaves_the_value_models_out(target_model_dir: str, tmp_path: Path) -> None:
    import torch
    from datasets import Dataset

    from trl_marl import AgentTeam, MultiAgentPPOConfig, MultiAgentPPOTrainer
    from trl_marl.envs import TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    config = MultiAgentPPOConfig(output_dir=str(tmp_path / "run"), num_agents=2, per_device_train_batch_size=2,
                                 total_episodes=2, response_length=3, report_to="none", save_strategy="no",
                                 num_sample_generations=0, disable_tqdm=True, seed=0)
    trainer = MultiAgentPPOTrainer(args=config, model=target_model_dir, reward_funcs=TargetSumReward(0.5),
                                   env=TargetSumEnv(2), train_dataset=Dataset.from_dict({"target": [TARGET] * 4}))
    folder = trainer.save_team(str(tmp_path / "teams" / "maporl"))
    assert sorted(os.listdir(folder)) == ["README.md", "agent_0", "agent_1", "team_config.json"]
    loaded = AgentTeam.from_pretrained(folder).state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in trainer.team.state_dict().items())
