"""Multi-process training with `accelerate launch`: 2 CPU processes (gloo) train a team with DDP and with FSDP2.

Each process plays different dataset rows and samples different completions, so its local gradients differ; the
tests check that DistributedDataParallel still leaves both processes with identical weights that training moved,
for both trainers (MAGRPO, multi-agent PPO) and both team modes (`models`, `adapters`). FSDP2
(`examples/accelerate_configs/fsdp2.yaml`) must then train *exactly* like DDP (same samples, same weights), save
checkpoints whose agents load back with `from_pretrained`, and resume from one to the same result.

`accelerate launch --cpu --num_processes 2` starts a *single* process unless an MPI hostfile is given (accelerate's
simple launcher does not spawn CPU workers), so the processes are started with `--multi_gpu` (torchrun) or an FSDP
config, and the trainer configs switch to `use_cpu=True`, which gives accelerate's `MULTI_CPU` mode with gloo (for
FSDP2, `trl_marl.trainers.distributed` turns FSDP on in that mode).

One launch per strategy trains all four teams one after the other (about 20-30 s each on 2 cores).
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from helpers import free_port
from trl_marl.toy import make_toy_model

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tests" / "scripts" / "team_processes.py"
FSDP2_CONFIG = REPO_ROOT / "examples" / "accelerate_configs" / "fsdp2.yaml"
NUM_PROCESSES = 2
TIMEOUT_S = 400
RUNS = ("magrpo:models", "magrpo:adapters", "ppo:models", "ppo:adapters")
# two turns, but every episode of process 0 ends after the first (as early stopping can make it)
UNEVEN = ("magrpo:adapters:uneven", "ppo:models:uneven")
# 2 accumulated micro-steps per step, with a backward per agent (the default) and with one backward; PPO's with a
# centralized critic (one value model that every slot's backward reaches)
BACKWARD = ("magrpo:adapters:ga2", "magrpo:adapters:ga2:single", "ppo:adapters:ga2", "ppo:adapters:ga2:single")
# asynchronous rollouts (`max_staleness=1`): each process's worker plays its own rows
ASYNC = ("magrpo:adapters:async", "ppo:adapters:async")


@pytest.fixture(scope="module")
def toy_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return make_toy_model(tmp_path_factory.mktemp("toy") / "toy32", hidden_size=32, num_layers=1,
                              pretrain_steps=50, targets=(10,))
    finally:
        torch.set_num_threads(threads)


def _launch_env() -> dict[str, str]:
    """The current environment, with `src/` importable (installed or not) and one thread per process."""
    import trl_marl

    env = dict(os.environ)
    paths = [str(Path(trl_marl.__file__).resolve().parents[1]), str(REPO_ROOT / "src")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["OMP_NUM_THREADS"] = "1"
    env["TOKENIZERS_PARALLELISM"] = "false"
    env["CUDA_VISIBLE_DEVICES"] = ""  # the run is CPU-only even on a GPU machine
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # a launcher around pytest must not leak into the child processes
    return env


def _launch(model_dir: str, out_dir: Path, strategy: list[str], *extra: str,
            runs: Sequence[str] = RUNS) -> dict[str, list[dict[str, Any]]]:
    """Train every team of `runs` in one launch; returns each run's per-process results (`<run>/rank<i>.pt`)."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", *strategy,
        "--num_processes", str(NUM_PROCESSES), "--main_process_port", str(free_port()),
        str(SCRIPT), "--model-dir", model_dir, "--out-dir", str(out_dir), "--runs", ",".join(runs), *extra,
    ]
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=_launch_env(), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`accelerate launch` did not finish in {TIMEOUT_S} s.\nstdout:\n{exc.stdout}\n"
                    f"stderr:\n{exc.stderr}")
    assert proc.returncode == 0, (
        f"`accelerate launch` exited with {proc.returncode}.\nstdout:\n{proc.stdout[-5000:]}\n"
        f"stderr:\n{proc.stderr[-10000:]}"
    )
    results = {}
    for run in sorted({p.name for p in out_dir.iterdir() if p.is_dir()}):
        results[run] = []
        for rank in range(NUM_PROCESSES):
            path = out_dir / run / f"rank{rank}.pt"
            assert path.is_file(), f"process {rank} wrote no result for {run}.\nstderr:\n{proc.stderr[-10000:]}"
            results[run].append(torch.load(path, weights_only=False))
    return results


@pytest.fixture(scope="module")
def ddp_results(toy_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    ddp = ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    return _launch(toy_model_dir, tmp_path_factory.mktemp("ddp"), ddp, "--evaluate",
                   runs=RUNS + UNEVEN + BACKWARD + ASYNC)


@pytest.fixture(scope="module")
def fsdp_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fsdp2")


@pytest.fixture(scope="module")
def fsdp_results(toy_model_dir: str, fsdp_out: Path) -> dict[str, list[dict[str, Any]]]:
    return _launch(toy_model_dir, fsdp_out, ["--config_file", str(FSDP2_CONFIG)], "--save", "--resume-check",
                   "--evaluate", runs=RUNS + UNEVEN)


def _name(run: str) -> str:
    return run.replace(":", "_")


def _assert_same_training(fsdp: dict[str, Any], ddp: dict[str, Any]) -> None:
    assert fsdp["distributed_type"] == "DistributedType.FSDP" and fsdp["sharded"]
    assert fsdp["num_processes"] == NUM_PROCESSES and fsdp["global_step"] == ddp["global_step"] == 5
    assert fsdp["row_ids"] == ddp["row_ids"] and fsdp["turns"] == ddp["turns"]
    assert fsdp["joint_actions"] == ddp["joint_actions"]
    assert fsdp["losses"] == pytest.approx(ddp["losses"], abs=1e-6)
    assert sorted(fsdp["final"]) == sorted(ddp["final"])
    for name, value in fsdp["final"].items():
        torch.testing.assert_close(value, ddp["final"][name], rtol=0, atol=1e-6, msg=name)
        assert not torch.equal(value, fsdp["initial"][name]), f"{name} did not train"
    # evaluation on 5 rows in chunks of 2: 2 chunks on process 0, 1 on process 1 (which plays a discarded one more)
    assert fsdp["eval_reward"] is not None and math.isfinite(fsdp["eval_reward"])
    assert fsdp["eval_reward"] == pytest.approx(ddp["eval_reward"], abs=1e-6)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.slow
def test_two_processes_end_with_identical_weights(ddp_results, run: str) -> None:
    first, second = results = ddp_results[_name(run)]
    trainer, team_mode = run.split(":")

    assert [r["num_processes"] for r in results] == [NUM_PROCESSES] * NUM_PROCESSES
    assert [r["process_index"] for r in results] == list(range(NUM_PROCESSES))
    assert all(r["distributed_type"] == "DistributedType.MULTI_CPU" and not r["sharded"] for r in results)
    assert first["global_step"] == second["global_step"] == 5

    # the data was sharded: each process played its own rows
    assert first["row_ids"] and second["row_ids"]
    shared_rows = sorted(set(first["row_ids"]) & set(second["row_ids"]))
    assert not shared_rows, f"both processes played the dataset rows {shared_rows}"

    # every agent (and in PPO every value model) has trainable parameters
    names = sorted(first["final"])
    assert names == sorted(second["final"])
    root = "team." if trainer == "ppo" else ""
    prefixes = ["agent_0", "agent_1"] if team_mode == "adapters" else [f"{root}models.0.", f"{root}models.1."]
    prefixes += ["value_models.0.", "value_models.1."] if trainer == "ppo" else []
    for prefix in prefixes:
        assert any(prefix in name for name in names), f"no trainable parameter of {prefix!r} in {names}"

    # identical weights on both processes, and all of them trained
    different = [n for n in names if not torch.equal(first["final"][n], second["final"][n])]
    assert not different, f"parameters that differ between the processes: {different}"
    for result in results:
        assert all(torch.equal(result["initial"][n], first["initial"][n]) for n in names)
    unchanged = [n for n in names if torch.equal(first["final"][n], first["initial"][n])]
    assert not unchanged, f"parameters that training did not change: {unchanged}"
    assert all(math.isfinite(loss) for loss in first["losses"]) and len(first["losses"]) == 5

    # every row has the same prompt, so only per-process sampling seeds make the processes' rollouts (hence their
    # local gradients) differ; without that, identical weights would not show that gradients were averaged
    assert first["joint_actions"] != second["joint_actions"], "both processes sampled the same completions"
    if run == "magrpo:adapters":  # adaptive entropy: five steps under the target, +0.01 each, one shared entropy
        assert first["entropy_coefs"] == second["entropy_coefs"] == pytest.approx({0: 0.06, 1: 0.06})
        assert first["last_entropy"] == second["last_entropy"]
        assert all(0.0 < h < 50.0 for h in first["last_entropy"].values())


@pytest.mark.parametrize("run", ASYNC)
def test_ddp_with_asynchronous_rollouts_keeps_the_processes_identical(ddp_results, run: str) -> None:
    first, second = results = ddp_results[_name(run)]
    assert first["global_step"] == second["global_step"] == 5
    shared_rows = set(first["row_ids"]) & set(second["row_ids"])
    assert first["row_ids"] and second["row_ids"] and not shared_rows  # each process's worker played its own rows
    # the first step waits for its rollout; every later one trained a rollout sampled one version behind
    for result in results:
        assert len(result["staleness"]) == 5 and result["staleness"][0] == 0.0 and max(result["staleness"]) <= 1.0
    assert first["joint_actions"] != second["joint_actions"]  # different samples, hence different local gradients
    for name, value in first["final"].items():
        assert torch.equal(value, second["final"][name]), f"{name} differs between the processes"
        assert not torch.equal(value, first["initial"][name]), f"{name} did not train"
    assert all(math.isfinite(loss) for result in results for loss in result["losses"])


def _assert_trains_like_one_backward(per_agent: list[dict[str, Any]], summed: list[dict[str, Any]],
                                     weight_atol: float) -> None:
    """Each process of a run with a backward per agent (the default) trained as in the run with one backward of the
    summed loss (`:single`): 3 steps of 2 micro-steps with 2 agents, one agent per forward against both at once."""
    for mine, theirs in zip(per_agent, summed):
        assert mine["agents_per_forward"] and set(mine["agents_per_forward"]) == {1}
        assert set(theirs["agents_per_forward"]) == {2}
        assert len(mine["agents_per_forward"]) == 2 * len(theirs["agents_per_forward"]) == 2 * 2 * 3
        assert mine["global_step"] == theirs["global_step"] == 3
        assert mine["joint_actions"] == theirs["joint_actions"]
        assert mine["losses"] == pytest.approx(theirs["losses"], abs=1e-6)
        # the norm of the averaged gradient (Adam's update hardly changes with the gradient's scale: this does; a sum
        # over the processes instead of a mean would double it)
        assert len(mine["grad_norms"]) == 3 and mine["grad_norms"] == pytest.approx(theirs["grad_norms"], rel=1e-5)
        for name, value in theirs["final"].items():
            torch.testing.assert_close(mine["final"][name], value, rtol=0, atol=weight_atol, msg=name)
            assert not torch.equal(value, theirs["initial"][name]), f"{name} did not train"
    first, second = per_agent
    assert first["joint_actions"] != second["joint_actions"]  # different local gradients, yet the same weights
    assert all(torch.equal(first["final"][n], second["final"][n]) for n in first["final"])


def test_ddp_backward_per_agent_trains_like_one_backward(ddp_results) -> None:
    # under DDP the per-agent backwards run under `no_sync` and the trainer averages the gradients over the processes
    # itself at the synchronising micro-step (the second of each step here): the same training as DDP's own
    # all-reduce after one backward of the summed loss
    per_agent, summed = ddp_results["magrpo_adapters_ga2"], ddp_results["magrpo_adapters_ga2_single"]
    _assert_trains_like_one_backward(per_agent, summed, weight_atol=1e-6)
    for mine, theirs in zip(per_agent, summed):
        assert mine["last_entropy"] == pytest.approx(theirs["last_entropy"], abs=1e-6)


def test_ddp_ppo_backward_per_slot_trains_like_one_backward(ddp_results) -> None:
    # PPO with a backward per policy slot, the same way: the gradients averaged by the trainer at the second
    # micro-step of each update include the centralized critic's, which both slots' backwards reach. Adam (lr 1e-2)
    # divides by the gradient's root mean square, so the rounding of gradient elements near its eps (a LoRA A matrix
    # right after its B left zero) shows up in the weights at about 1e-6.
    per_slot, summed = ddp_results["ppo_adapters_ga2"], ddp_results["ppo_adapters_ga2_single"]
    assert any(name.startswith("value_models.0.") for name in summed[0]["final"])
    assert not any(name.startswith("value_models.1.") for name in summed[0]["final"])  # one critic
    _assert_trains_like_one_backward(per_slot, summed, weight_atol=1e-5)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.slow
def test_fsdp2_trains_exactly_like_ddp(fsdp_results, ddp_results, run: str) -> None:
    # FSDP2 shards every agent's layers and reduce-scatters gradients instead of all-reducing them: with the same
    # seeds each process must sample the same completions as under DDP, and end with the same weights
    for fsdp, ddp in zip(fsdp_results[_name(run)], ddp_results[_name(run)]):
        _assert_same_training(fsdp, ddp)


@pytest.mark.parametrize("run", UNEVEN)
def test_fsdp2_follows_a_process_that_plays_more_turns(fsdp_results, ddp_results, run: str) -> None:
    # every forward over sharded weights is a collective: process 0, whose episodes ended, generates along with
    # process 1's second turn (a placeholder, its random state restored) instead of leaving it waiting
    first, second = fsdp_results[_name(run)]
    assert first["turns"] == [1] and second["turns"] == [1, 2]
    assert all(torch.equal(first["final"][n], second["final"][n]) for n in first["final"])
    for fsdp, ddp in zip(fsdp_results[_name(run)], ddp_results[_name(run)]):
        _assert_same_training(fsdp, ddp)


@pytest.mark.parametrize("run", RUNS)
def test_fsdp2_saves_the_gathered_team(fsdp_results, fsdp_out: Path, run: str) -> None:
    # `save_model` under FSDP2 gathers the shards: every agent (and PPO's value models) loads back on its own
    from transformers import AutoModelForSequenceClassification

    from trl_marl import AgentTeam

    final = fsdp_results[_name(run)][0]["final"]
    folder = fsdp_out / _name(run) / "final"
    team = AgentTeam.from_pretrained(folder)
    loaded = {name: p.detach() for name, p in team.named_parameters()}
    root = "team." if run.startswith("ppo") else ""
    team_keys = [name for name in final if name.startswith(root) and not name.startswith("value_models.")]
    assert team_keys
    for name in team_keys:
        assert torch.equal(loaded[name[len(root):]], final[name]), name
    if run.startswith("ppo"):
        for index in range(2):
            value = AutoModelForSequenceClassification.from_pretrained(folder / f"value_model_{index}")
            params = dict(value.named_parameters())
            prefix = f"value_models.{index}."
            keys = [name for name in final if name.startswith(prefix)]
            assert keys and all(torch.equal(params[k[len(prefix):]].detach(), final[k]) for k in keys)


@pytest.mark.slow
def test_adapter_critics_train_alike_under_ddp_and_fsdp2(toy_model_dir, tmp_path_factory) -> None:
    # issue 51: each critic an adapter and a head on the team's base; DDP's processes agree, FSDP2 (whose gathered
    # state dict holds the critics' LoRA tensors under the team's keys) trains exactly like DDP and saves them
    from trl_marl.trainers.ppo.value import load_value_model, response_values

    run = "ppo:adapters:critics"
    ddp_flags = ["--multi_gpu", "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    ddp = _launch(toy_model_dir, tmp_path_factory.mktemp("ddp-critics"), ddp_flags, runs=(run,))[_name(run)]
    out = tmp_path_factory.mktemp("fsdp2-critics")
    fsdp = _launch(toy_model_dir, out, ["--config_file", str(FSDP2_CONFIG)], "--save", runs=(run,))[_name(run)]
    first, second = ddp
    assert sorted(first["final"]) == sorted(second["final"])
    assert all(torch.equal(first["final"][n], second["final"][n]) for n in first["final"])
    critic_keys = [n for n in first["final"] if ".critic_" in n]
    assert len(critic_keys) == 8  # lora_A and lora_B on q_proj and v_proj, for 2 critics
    assert all(not torch.equal(first["final"][n], first["initial"][n]) for n in critic_keys)
    assert all(not torch.equal(first["final"][f"value_models.{i}.score.weight"],
                               first["initial"][f"value_models.{i}.score.weight"]) for i in range(2))
    for sharded, replicated in zip(fsdp, ddp):
        assert sharded["distributed_type"] == "DistributedType.FSDP" and sharded["sharded"]
        for name, value in replicated["final"].items():
            torch.testing.assert_close(sharded["final"][name], value, rtol=0, atol=1e-6, msg=name)
    critic = load_value_model(out / _name(run) / "final" / "value_model_1", base_model=toy_model_dir)
    trained = {name.split(".critic_1.")[0].split("base_model.model.", 1)[1]: value
               for name, value in fsdp[0]["final"].items() if ".critic_1." in name}
    loaded = {name.split(".default.")[0].split("base_model.model.", 1)[1]: p.detach()
              for name, p in critic.named_parameters() if "lora_" in name}
    assert trained.keys() == loaded.keys()
    for name, value in trained.items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=0, msg=name)
    assert response_values(critic, torch.tensor([[5, 6, 7, 8]]), 0, 2).shape == (1, 2)


@pytest.mark.parametrize("run", ["magrpo:models", "magrpo:adapters"])
def test_fsdp2_resumes_to_the_same_weights(fsdp_results, run: str) -> None:
    # a run resumed from its checkpoint after step 4 (weights loaded into the shards, optimizer and RNG states)
    # ends its step 5 with the weights of the run that never stopped
    for whole, resumed in zip(fsdp_results[_name(run)], fsdp_results[_name(run) + "_resumed"]):
        assert resumed["global_step"] == whole["global_step"] == 5
        assert resumed["joint_actions"] == whole["joint_actions"][-len(resumed["joint_actions"]):]
        for name, value in whole["final"].items():
            assert torch.equal(resumed["final"][name], value), name


@pytest.mark.slow
def test_launcher_that_drops_processes_is_reported(tmp_path: Path) -> None:
    # `accelerate launch --num_processes 2` without `--multi_gpu` starts ONE process on a machine without GPUs (an
    # example used to log epoch 0.375 instead of 0.75 this way): the trainers say so, with the fix.
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, warnings\n"
        "from trl_marl._trl_compat import processes_dropped_by_launcher, warn_if_launcher_dropped_processes\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    warn_if_launcher_dropped_processes()\n"
        "print('DROPPED', processes_dropped_by_launcher(), 'WORLD', os.environ.get('WORLD_SIZE'))\n"
        "print('WARNING', [str(w.message) for w in caught])\n"
    )
    base = [sys.executable, "-m", "accelerate.commands.launch", "--num_machines", "1", "--mixed_precision", "no",
            "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    single = subprocess.run([*base, "--num_processes", "2", str(probe)], cwd=REPO_ROOT, env=_launch_env(),
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert single.returncode == 0, single.stderr[-3000:]
    assert single.stdout.count("DROPPED") == 1  # accelerate really started one process
    assert "DROPPED 2 WORLD None" in single.stdout
    assert "asked for 2 processes but started this script as a single process" in single.stdout
    assert "--multi_gpu --num_processes 2" in single.stdout

    both = subprocess.run([*base, "--multi_gpu", "--num_processes", "2", str(probe)], cwd=REPO_ROOT,
                          env=_launch_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert both.returncode == 0, both.stderr[-3000:]
    assert both.stdout.count("DROPPED None WORLD 2") == 2 and "WARNING []" in both.stdout

    # a config file that asks for 2 processes with `use_cpu: true` also starts one, without --num_processes on the line
    config = tmp_path / "cpu.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nnum_machines: 1\n"
                      "num_processes: 2\nmixed_precision: 'no'\nuse_cpu: true\n")
    from_file = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                                "--main_process_port", str(free_port()), str(probe)], cwd=REPO_ROOT,
                               env=_launch_env(), capture_output=True, text=True, timeout=TIMEOUT_S)
    assert from_file.returncode == 0, from_file.stderr[-3000:]
    assert from_file.stdout.count("DROPPED") == 1 and "DROPPED 2 WORLD None" in from_file.stdout
    assert "use_cpu: false" in from_file.stdout


# ---------------------------------------------------------------------------------------------- DeepSpeed
# deepspeed is not a test dependency: these run where it is installed (README "Scaling out" lists what was verified).
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_trains_magrpo_like_ddp(toy_model_dir, tmp_path, ddp_results, stage: int) -> None:
    config = REPO_ROOT / "examples" / "accelerate_configs" / f"deepspeed_zero{stage}.yaml"
    runs = ["magrpo:models", "magrpo:adapters"] + (["ppo:adapters"] if stage == 2 else [])
    results = _launch(toy_model_dir, tmp_path, ["--config_file", str(config), "--mixed_precision", "no"],
                      "--save", runs=runs)
    from trl_marl import AgentTeam

    for run in runs:
        for ds, ddp in zip(results[_name(run)], ddp_results[_name(run)]):
            assert ds["distributed_type"] == "DistributedType.DEEPSPEED" and ds["num_processes"] == NUM_PROCESSES
            assert ds["joint_actions"] == ddp["joint_actions"]  # the same samples, so (nearly) the same weights
            for name, value in ds["final"].items():
                torch.testing.assert_close(value, ddp["final"][name], rtol=0, atol=1e-4, msg=name)
        final = results[_name(run)][0]["final"]
        loaded = dict(AgentTeam.from_pretrained(tmp_path / _name(run) / "final").named_parameters())
        root = "team." if run.startswith("ppo") else ""
        for name, value in final.items():
            if not name.startswith("value_models."):
                assert torch.equal(loaded[name[len(root):]].detach(), value), name


# ---------------------------------------------------------------------------------------------- refused setups
def _tiny_trainer(tmp_path: Path, model_dir: str, trainer: str) -> Any:
    from datasets import Dataset

    from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, TargetSumEnv
    from trl_marl.rewards.arithmetic import TargetSumReward

    dataset = Dataset.from_dict({"target": [10] * 8})
    common = dict(output_dir=str(tmp_path / "out"), num_agents=2, report_to="none", save_strategy="no")
    if trainer == "ppo":
        return MultiAgentPPOTrainer(args=MultiAgentPPOConfig(total_episodes=8, response_length=2, **common),
                                    model=model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(2),
                                    train_dataset=dataset)
    return MAGRPOTrainer(model=model_dir, reward_funcs=TargetSumReward(), env=TargetSumEnv(2), train_dataset=dataset,
                         args=MAGRPOConfig(num_generations=2, per_device_train_batch_size=4, max_completion_length=2,
                                           **common))


@pytest.mark.parametrize("trainer", ["magrpo", "ppo"])
def test_fsdp_version_1_is_refused_when_the_trainer_is_built(toy_model_dir, tmp_path, monkeypatch, trainer):
    # what `accelerate launch` with an FSDP1 config sets: the trainer refuses before accelerate builds its plugin
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(ValueError, match=r"FSDP2 only.*fsdp_version: 2"):
        _tiny_trainer(tmp_path, toy_model_dir, trainer)


def test_fsdp_settings_a_team_cannot_use_are_refused():
    from accelerate.utils import FullyShardedDataParallelPlugin

    from trl_marl.trainers.distributed import check_fsdp_plugin

    full = {"fsdp_version": 2, "state_dict_type": "FULL_STATE_DICT"}
    check_fsdp_plugin(FullyShardedDataParallelPlugin(**full))  # the example config's settings pass
    with pytest.raises(ValueError, match=r"activation checkpointing.*gradient_checkpointing=True"):
        check_fsdp_plugin(FullyShardedDataParallelPlugin(**full, activation_checkpointing=True))
    with pytest.raises(ValueError, match="FULL_STATE_DICT"):
        check_fsdp_plugin(FullyShardedDataParallelPlugin(fsdp_version=2, state_dict_type="SHARDED_STATE_DICT"))


def test_a_process_that_accelerate_runs_alone_is_refused(monkeypatch):
    # torchrun started 2 processes, but accelerate (no GPU, use_cpu=False) runs each alone: each would train its own
    # team on all the data, which multi-agent PPO did before its config set use_cpu itself
    from types import SimpleNamespace

    from trl_marl.trainers.distributed import setup_strategy
    from trl_marl.validation import has_accelerator, use_cpu_for_cpu_processes

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    alone = SimpleNamespace(accelerator=SimpleNamespace(num_processes=1, state=SimpleNamespace()),
                            args=SimpleNamespace(fsdp_plugin_args=None))
    with pytest.raises(RuntimeError, match=r"one of 2 processes.*use_cpu=True"):
        setup_strategy(alone.accelerator, alone.args)
    config = SimpleNamespace(use_cpu=False)
    use_cpu_for_cpu_processes(config)
    assert config.use_cpu is (not has_accelerator())
    monkeypatch.setenv("WORLD_SIZE", "1")
    config = SimpleNamespace(use_cpu=False)
    use_cpu_for_cpu_processes(config)
    assert config.use_cpu is False


def test_deepspeed_zero3_partitioned_weights_are_never_copied(toy_model_dir):
    # transformers' from_pretrained partitions weights under a ZeRO-3 config (each parameter then carries a `ds_id`
    # and an empty local tensor); a deep copy of such a model is empty, so the team refuses or reloads instead
    from trl_marl import AgentTeam
    from trl_marl.team import is_partitioned
    from trl_marl.toy import build_toy_model, build_toy_tokenizer
    from trl_marl.trainers.ppo.value import build_value_models

    tokenizer = build_toy_tokenizer()
    model = build_toy_model(tokenizer, hidden_size=16, num_layers=1)
    assert not is_partitioned(model)
    for param in model.parameters():
        param.ds_id = 0  # what DeepSpeed's partitioning leaves on every parameter
    assert is_partitioned(model)
    with pytest.raises(ValueError, match="ZeRO-3.*pass the model's name or path"):
        AgentTeam.build(model, 2, mode="models", processing_class=tokenizer)
    team = AgentTeam.build([model, build_toy_model(tokenizer, hidden_size=16, num_layers=1)], 2,
                           processing_class=tokenizer)
    with pytest.raises(ValueError, match="reference copy.*ZeRO-3.*team_mode='adapters'"):
        team.create_reference_models()
    with pytest.raises(ValueError, match=r"Agent 0's weights were partitioned.*value_model="):
        build_value_models(None, team)


def test_deepspeed_zero3_without_gathered_saves_is_refused(monkeypatch):
    # ZeRO-3 leaves each process a slice of every weight: without gathering them at save time, checkpoints would
    # hold empty agents
    from types import SimpleNamespace

    from trl_marl.trainers.distributed import setup_strategy

    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)

    def accelerator(stage: int, gather: bool) -> SimpleNamespace:
        plugin = SimpleNamespace(zero_stage=stage, zero3_save_16bit_model=gather)
        return SimpleNamespace(num_processes=2, state=SimpleNamespace(deepspeed_plugin=plugin))

    args = SimpleNamespace(fsdp_plugin_args=None)
    with pytest.raises(ValueError, match="zero3_save_16bit_model: true"):
        setup_strategy(accelerator(3, False), args)
    setup_strategy(accelerator(3, True), args)
    setup_strategy(accelerator(2, False), args)
