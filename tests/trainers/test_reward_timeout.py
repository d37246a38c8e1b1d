"""A reward call that hangs or fails never leaves training silent or loses the completed steps (issue 26, item 4;
issue 35, item 2).

Every reward function call is limited by the configs' `reward_timeout`. It runs in a worker process forked for the
call and killed at the limit (`reward_isolation="process"`, the default), so that a call stuck in C code that holds
the GIL ends on time too; or in a worker thread (`"thread"`), abandoned at the limit, whose result is refused when it
comes back late. A reward that times out, raises (`SystemExit` and `KeyboardInterrupt` included) or crashes its
worker during `train()` saves the last completed step as a checkpoint and stops with an error naming the function,
the field and the checkpoint. The trainer runs below are MAGRPO and multi-agent PPO on the suite's toy target model
(conftest.py's `target_model_dir`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from datasets import Dataset

from trl_marl import MAGRPOConfig, MAGRPOTrainer, MultiAgentPPOConfig, MultiAgentPPOTrainer, RewardFunctionError
from trl_marl._trl_compat import is_complete_checkpoint
from trl_marl.envs import TargetSumEnv
from trl_marl.reward_contract import (
    DEFAULT_REWARD_TIMEOUT,
    RewardIsolationWarning,
    RewardSet,
    RewardTimeoutError,
    RewardTimeoutWarning,
    call_reward_function,
)
from trl_marl.rewards.arithmetic import TargetSumReward
from trl_marl.utils.checkpoint_files import MANIFEST_FILE

warnings.filterwarnings("ignore")


@pytest.fixture
def release() -> Any:
    """An event that the hanging rewards wait for; set at the end of the test, so no thread outlives it for long."""
    event = threading.Event()
    yield event
    event.set()


# ------------------------------------------------------------------------------------------------ one call


def test_a_hanging_call_times_out_naming_the_function_and_the_field(release: threading.Event) -> None:
    def stuck_verifier(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        release.wait()
        return [1.0] * len(completions)

    start = time.monotonic()
    with pytest.raises(RewardTimeoutError) as caught:
        call_reward_function(
            stuck_verifier,
            "stuck_verifier",
            2,
            timeout=0.2,
            timeout_field="MAGRPOConfig.reward_timeout",
            prompts=["a", "b"],
            completions=["1", "2"],
        )
    assert time.monotonic() - start < 5.0  # returned although the function never did
    message = str(caught.value)
    assert "`stuck_verifier`" in message and "0.2 s" in message and "`MAGRPOConfig.reward_timeout`" in message
    assert isinstance(caught.value, RewardFunctionError)


def test_a_call_in_a_thread_behaves_as_a_direct_call() -> None:
    seen: dict[str, Any] = {}

    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        seen["grad"] = torch.is_grad_enabled()
        seen["thread"] = threading.current_thread().name
        return [float(len(c)) for c in completions]

    with torch.no_grad():
        values = call_reward_function(
            reward, "reward", 2, timeout=30.0, isolation="thread", prompts=["a", "b"], completions=["x", "yz"]
        )
    assert values == [1.0, 2.0]
    assert seen == {"grad": False, "thread": "reward:reward"}  # in a worker thread, under the caller's no_grad

    def broken(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        raise KeyError("gold")

    for isolation in ("thread", "process"):
        with pytest.raises(RewardFunctionError, match="`broken` raised KeyError: 'gold'"):
            call_reward_function(
                broken, "broken", 1, timeout=30.0, isolation=isolation, prompts=["a"], completions=["x"]
            )

    # without a timeout the function runs in the calling thread
    call_reward_function(reward, "reward", 1, timeout=None, prompts=["a"], completions=["x"])
    assert seen["thread"] == threading.current_thread().name


def test_a_call_in_a_worker_process_gets_the_arguments_and_sends_back_only_checked_scores() -> None:
    """The default: a child process forked for the call, which inherits the function (a closure here: nothing is
    pickled), its arguments and the caller's autograd mode; numbers of any accepted type come back as floats."""
    parent = os.getpid()
    seen: list[str] = []

    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[Any]:
        seen.append("called")  # in the child's memory: the caller never sees it
        pid = os.getpid()
        return [torch.tensor(float(pid != parent)), float(torch.is_grad_enabled()), None, kwargs["target"][3]]

    with torch.no_grad():
        values = call_reward_function(
            reward,
            "reward",
            4,
            timeout=30.0,
            arguments={
                "prompts": ["p"] * 4,
                "completions": ["c"] * 4,
                "target": [1, 2, 3, float("nan")],
                "timeout": "a dataset column may be named like a parameter",
            },
        )
    assert values[:3] == [1.0, 0.0, None] and values[3] != values[3]  # NaN comes back as NaN (counted by trainers)
    assert seen == []

    # the contract is checked in the worker: the error names the function and the entry
    def text(prompts: list[str], completions: list[str], **kwargs: Any) -> list[Any]:
        return ["1.0"]

    with pytest.raises(RewardFunctionError, match=r"`text` returned '1.0' \(str\) for completion 0"):
        call_reward_function(text, "text", 1, timeout=30.0, prompts=["p"], completions=["c"])

    def short(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0]

    with pytest.raises(RewardFunctionError, match="`short` returned 1 values for 2 completions"):
        call_reward_function(short, "short", 2, timeout=30.0, prompts=["p"] * 2, completions=["c"] * 2)

    # the worker's traceback is the cause of the error
    def broken(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [1.0 / 0]

    with pytest.raises(RewardFunctionError, match="`broken` raised ZeroDivisionError") as caught:
        call_reward_function(broken, "broken", 1, timeout=30.0, prompts=["p"], completions=["c"])
    assert "return [1.0 / 0]" in str(caught.value.__cause__)


def pid_alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not reaped by its new parent, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def backtracking(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """The report's regular expression: about 2^29 steps in C, holding the GIL (51.6 s there)."""
    return [float(re.match(r"(a+)+$", "a" * 29 + "b") is None)] * len(completions)


def summing(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """The report's other shape: one C call holding the GIL (88 s there)."""
    return [float(sum(range(1_500_000_000)))] * len(completions)


def spinning(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """A pure Python endless loop: abandoned in a thread, it would burn a core until the process ends."""
    while True:
        pass


def deaf(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
    """Ignores SIGINT and SIGTERM, then blocks in C (reading a pipe that never gets data)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    read_end, _ = os.pipe()
    os.read(read_end, 1)
    return [1.0] * len(completions)


@pytest.mark.parametrize("func", [backtracking, summing, spinning, deaf])
def test_a_call_stuck_in_c_code_is_killed_at_the_limit(func: Any) -> None:
    start = time.monotonic()
    with pytest.raises(RewardTimeoutError) as caught:
        call_reward_function(
            func,
            func.__name__,
            2,
            timeout=1.0,
            timeout_field="MAGRPOConfig.reward_timeout",
            prompts=["a", "b"],
            completions=["1", "2"],
        )
    assert time.monotonic() - start < 6.0  # about the limit (1 s), not the call's tens of seconds
    message = str(caught.value)
    assert f"`{func.__name__}`" in message and "`MAGRPOConfig.reward_timeout`" in message
    assert "worker process was killed" in message


def test_the_worker_is_killed_with_what_it_started(tmp_path: Path) -> None:
    """A reward that hangs in a program it started: the program goes with the worker (its process group)."""
    pid_file = tmp_path / "pid"

    def runs_a_program(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        program = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pid_file.write_text(str(program.pid))
        program.wait()
        return [1.0]

    with pytest.raises(RewardTimeoutError):
        call_reward_function(runs_a_program, "runs_a_program", 1, timeout=2.0, prompts=["a"], completions=["1"])
    program = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while pid_alive(program) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(program)


def test_a_late_result_in_a_thread_is_refused() -> None:
    """In a thread the C code holds the GIL, so the caller cannot act at the limit: the result that comes back
    late is refused (it was accepted, and training went on)."""

    def slow_regex(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [float(re.match(r"(a+)+$", "a" * 22 + "b") is None)] * len(completions)

    with pytest.raises(RewardTimeoutError, match=r"`slow_regex` (returned after .* s, past|did not return within)"):
        call_reward_function(
            slow_regex, "slow_regex", 1, timeout=0.05, isolation="thread", prompts=["a"], completions=["1"]
        )


@pytest.mark.parametrize("isolation", ["process", "thread"])
@pytest.mark.parametrize("raised", [SystemExit(0), SystemExit("bye"), KeyboardInterrupt()])
def test_system_exit_and_keyboard_interrupt_become_reward_errors(isolation: str, raised: BaseException) -> None:
    def quitter(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        raise raised

    name = type(raised).__name__
    with pytest.raises(RewardFunctionError, match=f"`quitter` raised {name}.*may not end or interrupt training"):
        call_reward_function(
            quitter, "quitter", 1, timeout=30.0, isolation=isolation, prompts=["a"], completions=["1"]
        )
    if isolation == "thread":  # and without a limit, called directly
        with pytest.raises(RewardFunctionError, match=f"`quitter` raised {name}"):
            call_reward_function(quitter, "quitter", 1, timeout=None, prompts=["a"], completions=["1"])


@pytest.mark.parametrize("how", ["os._exit", "segfault", "huge reply"])
def test_a_worker_that_dies_is_a_reward_error(how: str) -> None:
    def crashing(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        if how == "os._exit":
            os._exit(0)
        if how == "segfault":
            import ctypes

            ctypes.string_at(0)
        return [1.0] * 3_000_000  # checked in the worker: the wrong length, reported without sending it

    expected = {
        "os._exit": "exited with status 0 without a reply",
        "segfault": "killed by SIGSEGV",
        "huge reply": "returned 3000000 values for 1 completions",
    }[how]
    with pytest.raises(RewardFunctionError, match=re.escape(expected)):
        call_reward_function(crashing, "crashing", 1, timeout=30.0, prompts=["a"], completions=["1"])


def test_a_function_with_a_model_on_a_gpu_runs_in_a_thread_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA cannot be used in a forked child: a reward that needs it runs in a thread (one warning per function)."""
    from trl_marl.reward_contract import calls as reward_calls
    from trl_marl.utils import bounded

    monkeypatch.setattr(reward_calls, "_WARNED", set())
    monkeypatch.setattr(reward_calls, "_THREAD_ONLY", {})
    calls: list[str] = []

    def needs_cuda(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        calls.append(threading.current_thread().name)
        if os.getpid() != parent:  # what torch raises in a forked child once the parent initialised CUDA
            raise RuntimeError("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, ...")
        return [1.0]

    parent = os.getpid()
    with pytest.warns(RewardIsolationWarning, match="`needs_cuda` runs in a thread.*it uses CUDA"):
        assert call_reward_function(needs_cuda, "needs_cuda", 1, timeout=30.0, prompts=["a"], completions=["1"]) == [
            1.0
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once; the next call goes to a thread at once
        assert call_reward_function(needs_cuda, "needs_cuda", 1, timeout=30.0, prompts=["a"], completions=["1"]) == [
            1.0
        ]
    assert calls == ["reward:needs_cuda", "reward:needs_cuda"]

    class OnGpu(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))

        def forward(self, prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
            return [2.0] * len(completions)

    assert bounded.fork_obstacle(OnGpu()) == "it holds a model or tensor on meta (a forked process cannot use it)"
    assert bounded.fork_obstacle(needs_cuda) is None


def test_a_function_that_sets_signal_handlers_runs_in_a_main_thread() -> None:
    """Python allows `signal.signal` in the main thread only (e.g. a reward with a `signal.alarm` time limit, as
    math_verify has). In a worker process it has the child's main thread, under the limit; in `"thread"` mode it is
    called in the caller's thread, without the limit, and says so once."""
    import signal

    calls: list[str] = []

    def alarmed(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        calls.append(threading.current_thread().name)
        previous = signal.signal(signal.SIGALRM, signal.getsignal(signal.SIGALRM))
        signal.signal(signal.SIGALRM, previous)
        return [float(threading.current_thread() is threading.main_thread())] * len(completions)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert call_reward_function(alarmed, "alarmed", 1, timeout=30.0, prompts=["a"], completions=["x"]) == [1.0]
    assert calls == []  # it ran in the worker process
    with pytest.warns(RewardTimeoutWarning, match="`alarmed` sets signal handlers.*without `MAGRPOConfig.reward_time"):
        values = call_reward_function(
            alarmed,
            "alarmed",
            1,
            timeout=30.0,
            isolation="thread",
            timeout_field="MAGRPOConfig.reward_timeout",
            prompts=["a"],
            completions=["x"],
        )
    assert values == [1.0]
    assert calls == ["reward:alarmed", threading.main_thread().name]


def test_reward_set_applies_the_timeout_and_a_function_may_keep_its_own(release: threading.Event) -> None:
    def slow(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        time.sleep(0.5)
        return [1.0] * len(completions)

    rewards = RewardSet([slow])
    rewards.set_timeout(0.1, "MultiAgentPPOConfig.reward_timeout")
    args = ([["p"]], [["c"]], [{"prompt": "p"}], [None], 1)
    with pytest.raises(RewardTimeoutError, match="MultiAgentPPOConfig.reward_timeout"):
        rewards.score(*args)
    slow.reward_timeout = 5.0  # e.g. a remote verifier whose retry budget is longer than the run's limit
    scores, _ = rewards.score(*args)
    assert scores.tolist() == [[1.0]]


def test_reward_set_runs_each_function_where_its_isolation_says() -> None:
    """The config's `reward_isolation` for every function; a function's own `reward_isolation` attribute wins (e.g.
    `"thread"` for one whose side effects the caller reads)."""
    seen: list[int] = []

    def counting(prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        seen.append(os.getpid())
        return [float(len(seen))] * len(completions)

    args = ([["p"]], [["c"]], [{"prompt": "p"}], [None], 1)
    rewards = RewardSet([counting])
    rewards.set_timeout(30.0, "MAGRPOConfig.reward_timeout", "process")
    assert rewards.isolation_field == "MAGRPOConfig.reward_isolation"
    # both calls in the function's worker process, which keeps its state between calls; the caller's is untouched
    assert [rewards.score(*args)[0].item() for _ in range(2)] == [1.0, 2.0]
    assert seen == []
    rewards.set_timeout(30.0, "MAGRPOConfig.reward_timeout", "thread")
    assert [rewards.score(*args)[0].item() for _ in range(2)] == [1.0, 2.0]
    assert seen == [os.getpid()] * 2
    counting.reward_isolation = "process"  # type: ignore[attr-defined]
    assert rewards.score(*args)[0].item() == 3.0 and len(seen) == 2

    with pytest.raises(ValueError, match="`MAGRPOConfig.reward_isolation` must be one of \\('process', 'thread'\\)"):
        rewards.set_timeout(30.0, "MAGRPOConfig.reward_timeout", "subprocess")
    counting.reward_isolation = "fork"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="`counting` has `reward_isolation='fork'`"):
        rewards.set_timeout(30.0, "MAGRPOConfig.reward_timeout", "process")


@pytest.mark.parametrize("cls", [MAGRPOConfig, MultiAgentPPOConfig])
def test_reward_timeout_field(tmp_path: Path, cls: type) -> None:
    extra = {"num_generations": 2} if cls is MAGRPOConfig else {}
    assert DEFAULT_REWARD_TIMEOUT == 600.0
    assert cls(output_dir=str(tmp_path), report_to="none", **extra).reward_timeout == 600.0
    assert cls(output_dir=str(tmp_path), report_to="none", reward_timeout=None, **extra).reward_timeout is None
    for bad in (0, -1.0, float("inf"), "10", True):
        with pytest.raises(ValueError, match=f"`{cls.__name__}.reward_timeout` must be a number of seconds > 0"):
            cls(output_dir=str(tmp_path), report_to="none", reward_timeout=bad, **extra)
    assert cls(output_dir=str(tmp_path), report_to="none", **extra).reward_isolation == "process"
    assert cls(output_dir=str(tmp_path), report_to="none", reward_isolation="thread", **extra).reward_isolation == (
        "thread"
    )
    with pytest.raises(ValueError, match=f"`{cls.__name__}.reward_isolation` must be one of"):
        cls(output_dir=str(tmp_path), report_to="none", reward_isolation="none", **extra)


# ------------------------------------------------------------------------------------------------ during training


class FailingReward(TargetSumReward):
    """`TargetSumReward`, until the given optimizer step: then it hangs (`"hang"`), raises (`"raise"`), hangs in C
    code holding the GIL (`"regex"`, the report's backtracking expression), or raises `SystemExit(0)` (`"exit"`) or
    `KeyboardInterrupt` (`"interrupt"`)."""

    def __init__(self, fail_at_step: int, how: str, release: threading.Event) -> None:
        super().__init__(0.5)
        self.name = self.__name__ = "flaky_verifier"
        self.fail_at_step, self.how, self.release = fail_at_step, how, release

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        if state is not None and state.global_step + 1 >= self.fail_at_step:
            if self.how == "hang":
                self.release.wait()
            elif self.how == "regex":
                re.match(r"(a+)+$", "a" * 36 + "b")
            elif self.how == "exit":
                raise SystemExit(0)
            elif self.how == "interrupt":
                raise KeyboardInterrupt
            else:
                raise ConnectionError("verifier at http://127.0.0.1:9 refused the connection")
        return super().__call__(prompts, completions, **kwargs)


def magrpo(model_dir: str, output_dir: Path, reward: Any, max_steps: int = 3, **overrides: Any) -> MAGRPOTrainer:
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        num_agents=2,
        num_generations=2,
        per_device_train_batch_size=4,
        max_completion_length=3,
        learning_rate=1e-3,
        max_steps=max_steps,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
        logging_steps=1,
    )
    kwargs.update(overrides)
    return MAGRPOTrainer(
        model=model_dir,
        reward_funcs=reward,
        args=MAGRPOConfig(**kwargs),
        train_dataset=Dataset.from_dict({"target": [10] * 8}),
        env=TargetSumEnv(2),
    )


@pytest.mark.parametrize("how", ["hang", "raise"])
def test_a_failing_reward_saves_the_last_completed_step_and_stops(
    target_model_dir: str, tmp_path: Path, release: threading.Event, how: str
) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(3, how, release), reward_timeout=0.5)
    error = RewardTimeoutError if how == "hang" else RewardFunctionError
    with pytest.raises(error) as caught:
        trainer.train()
    message = str(caught.value)
    checkpoint = out / "checkpoint-2"
    assert "during step 3" in message and "`flaky_verifier`" in message and str(checkpoint) in message
    assert ("MAGRPOConfig.reward_timeout" in message) == (how == "hang")
    assert "resume_from_checkpoint=True" in message
    # saved although save_strategy="no": the two completed steps, with the optimizer, scheduler and random state
    assert sorted(os.listdir(out)) == ["checkpoint-2"]
    assert is_complete_checkpoint(checkpoint)
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == 2
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", MANIFEST_FILE):
        assert (checkpoint / name).exists(), name
    saved = json.loads((checkpoint / MANIFEST_FILE).read_text())["files"]
    assert "optimizer.pt" in saved and "agent_0/model.safetensors" in saved

    # once the reward works again, the run goes on from step 2 to the end
    resumed = magrpo(target_model_dir, out, TargetSumReward(0.5))
    resumed.train(resume_from_checkpoint=True)
    assert resumed.state.global_step == 3
    assert [entry["step"] for entry in resumed.state.log_history if "loss" in entry] == [1, 2, 3]


@pytest.mark.parametrize(
    ("how", "isolation"), [("regex", "process"), ("exit", "process"), ("exit", "thread"), ("interrupt", "process")]
)
def test_a_reward_stuck_in_c_code_or_ending_the_process_saves_and_stops(
    target_model_dir: str, tmp_path: Path, release: threading.Event, how: str, isolation: str
) -> None:
    """The report's shapes during training: the backtracking expression ran 51.6 s past `reward_timeout=3` and
    training went on; `SystemExit(0)` ended the process with status 0 and no checkpoint after 2 steps."""
    out = tmp_path / "out"
    trainer = magrpo(
        target_model_dir, out, FailingReward(3, how, release), reward_timeout=1.5, reward_isolation=isolation
    )
    error = RewardTimeoutError if how == "regex" else RewardFunctionError
    start = time.monotonic()
    with pytest.raises(error) as caught:
        trainer.train()
    message = str(caught.value)
    assert "during step 3" in message and "`flaky_verifier`" in message
    assert f"The last completed step (2) was saved in {out / 'checkpoint-2'}" in message
    if how == "regex":
        assert "worker process was killed" in message and time.monotonic() - start < 60
    else:
        assert f"raised {'SystemExit: 0' if how == 'exit' else 'KeyboardInterrupt'}" in message
    assert is_complete_checkpoint(out / "checkpoint-2")


def test_a_reward_failing_in_the_first_step_saves_nothing(
    target_model_dir: str, tmp_path: Path, release: threading.Event
) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(1, "raise", release))
    with pytest.raises(RewardFunctionError, match="during step 1: .*No training step had completed"):
        trainer.train()
    assert not any(name.startswith("checkpoint-") for name in os.listdir(out)) if out.exists() else True


def test_ppo_saves_the_last_completed_update_when_a_reward_hangs(
    target_model_dir: str, tmp_path: Path, release: threading.Event
) -> None:
    out = tmp_path / "out"
    args = MultiAgentPPOConfig(
        output_dir=str(out),
        num_agents=2,
        per_device_train_batch_size=2,
        total_episodes=6,
        response_length=3,
        num_ppo_epochs=1,
        learning_rate=1e-3,
        report_to="none",
        save_strategy="no",
        num_sample_generations=0,
        disable_tqdm=True,
        seed=0,
        reward_timeout=0.5,
    )
    trainer = MultiAgentPPOTrainer(
        args=args,
        model=target_model_dir,
        reward_funcs=FailingReward(2, "hang", release),
        train_dataset=Dataset.from_dict({"prompt": ["T=10:"] * 4, "target": [10] * 4}),
    )
    with pytest.raises(RewardTimeoutError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "`flaky_verifier`" in message and "MultiAgentPPOConfig.reward_timeout" in message
    assert str(out / "checkpoint-1") in message and "resume_from_checkpoint=True" in message  # PPO resumes
    assert is_complete_checkpoint(out / "checkpoint-1")
    assert (out / "checkpoint-1" / "value_model_0").is_dir()


def test_a_failed_save_is_reported_with_the_reward_error(
    target_model_dir: str, tmp_path: Path, release: threading.Event
) -> None:
    out = tmp_path / "out"
    trainer = magrpo(target_model_dir, out, FailingReward(2, "raise", release))

    def full_disk(model: Any, trial: Any) -> None:
        raise OSError(28, "No space left on device")

    trainer._save_checkpoint = full_disk
    with pytest.raises(RewardFunctionError) as caught:
        trainer.train()
    message = str(caught.value)
    assert "`flaky_verifier` raised ConnectionError" in message
    assert f"Saving the last completed step (1) in {out / 'checkpoint-1'} failed too (OSError: " in message
    assert "the newest checkpoint is none" in message
    assert isinstance(caught.value.__cause__, RewardFunctionError)


def test_a_failed_fork_runs_the_call_in_a_thread_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process whose memory the system will not duplicate (strict overcommit) still scores, in a thread."""
    from trl_marl.reward_contract import calls as reward_calls
    from trl_marl.utils import bounded

    def no_memory() -> int:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(reward_calls, "_WARNED", set())
    monkeypatch.setattr(bounded.os, "fork", no_memory)

    def reward(prompts: list[str], completions: list[str], **kwargs: Any) -> list[float]:
        return [float(threading.current_thread().name == "reward:reward")]

    with pytest.warns(RewardIsolationWarning, match=r"`reward` runs in a thread.*no worker process could be started"):
        assert call_reward_function(reward, "reward", 1, timeout=30.0, prompts=["a"], completions=["1"]) == [1.0]
