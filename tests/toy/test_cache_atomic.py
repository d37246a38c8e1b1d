"""A toy model folder appears whole or not at all, and processes that want it at once build it once (issue 53, item 2:
`accelerate launch --num_processes 2` on an empty cache failed 2 of 2 times, both ranks building the toy model in its
final folder and one reading the other's half-written `config.json`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from transformers import AutoConfig

import trl_marl.toy.cache as cache
from trl_marl.toy import make_toy_model

SMALL = dict(task="target", hidden_size=16, num_layers=1, pretrain_steps=5, seed=0)
ROOT = Path(__file__).resolve().parents[2]


def test_the_final_folder_is_never_written_into(tmp_path, monkeypatch):
    """Every file is written in a folder beside the final one, which appears with its marker in one rename."""
    directory = tmp_path / "toy"
    seen: list[tuple[Path, bool]] = []
    build_model = cache.build_toy_model

    def watched_model(*args, **kwargs):
        model = build_model(*args, **kwargs)
        save = model.save_pretrained

        def save_pretrained(folder, *a, **k):
            seen.append((Path(folder), directory.exists()))
            return save(folder, *a, **k)

        model.save_pretrained = save_pretrained
        return model

    monkeypatch.setattr(cache, "build_toy_model", watched_model)
    assert make_toy_model(directory, **SMALL) == str(directory)
    [(written, final_existed)] = seen
    assert written != directory and written.parent == directory.parent and not final_existed
    assert AutoConfig.from_pretrained(directory).model_type == "qwen2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy"]  # nothing left beside it


def test_a_half_written_folder_is_replaced_whole(tmp_path):
    directory = tmp_path / "toy"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "qwe')  # a build killed mid-write, no marker
    (directory / "model.safetensors.partial").write_text("")
    make_toy_model(directory, **SMALL)
    assert AutoConfig.from_pretrained(directory).model_type == "qwen2"
    assert not (directory / "model.safetensors.partial").exists()


RANK = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import trl_marl.toy.cache as cache
    builds, go = Path(sys.argv[1]), Path(sys.argv[2])
    build = cache._build_toy_model
    def counted(*args, **kwargs):
        with open(builds, "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # a slow build: the other process asks for the folder meanwhile
        return build(*args, **kwargs)
    cache._build_toy_model = counted
    Path(sys.argv[3]).write_text("ready")
    while not go.exists():
        time.sleep(0.01)
    folder = cache.make_toy_model(task="target", hidden_size=16, num_layers=1, pretrain_steps=5, seed=0)
    from transformers import AutoConfig, AutoModelForCausalLM
    AutoConfig.from_pretrained(folder)
    AutoModelForCausalLM.from_pretrained(folder)
    print("loaded", folder)
""")


@pytest.mark.skipif(sys.platform == "win32", reason="no fcntl: each process builds its own copy there")
@pytest.mark.slow
def test_two_processes_on_an_empty_cache_build_once_and_both_load(tmp_path):
    builds, go = tmp_path / "builds.txt", tmp_path / "go"
    env = dict(os.environ, TRL_MARL_CACHE=str(tmp_path / "cache"), PYTHONPATH=str(ROOT / "src"))
    ready = [tmp_path / f"ready{rank}" for rank in range(2)]
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(builds), str(go), str(ready[rank])], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in range(2)]
    deadline = time.monotonic() + 240
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.write_text("go")  # both ask for the folder at the same moment
    outputs = [rank.communicate(timeout=240) for rank in ranks]
    for rank, (out, err) in zip(ranks, outputs):
        assert rank.returncode == 0, err[-3000:]
        assert out.startswith("loaded ")
    assert len(builds.read_text().split()) == 1  # the second process waited, then found the folder built


@pytest.mark.slow  # two processes that import torch and transformers: ~20 s
def test_a_rank_other_than_0_builds_a_whole_folder(tmp_path):
    """Under `accelerate launch` the process group is started before the model loads, and transformers'
    `save_pretrained` then writes nothing on ranks other than 0; the rank that won the build lock may be rank 1, which
    published a folder of a tokenizer and a marker without config or weights (both ranks then failed: "Unrecognized
    model ... Should have a `model_type` key"). Here rank 1 of a real two-process group builds the folder alone."""
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        import torch.distributed as dist
        from trl_marl.toy import make_toy_model
        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="file://{tmp_path}/rendezvous", rank=rank, world_size=2)
        if rank == 1:
            make_toy_model({str(tmp_path / "toy")!r}, **{SMALL!r})
        dist.barrier()
        dist.destroy_process_group()
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [subprocess.Popen([sys.executable, str(script), str(rank)], env=env, stderr=subprocess.PIPE, text=True)
             for rank in (0, 1)]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "toy"
    assert AutoConfig.from_pretrained(folder).model_type
    built_here = make_toy_model(tmp_path / "here", **SMALL)  # the same arguments in a single process
    import torch

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        theirs = AutoModelForCausalLM.from_pretrained(folder)(ids).logits
        ours = AutoModelForCausalLM.from_pretrained(built_here)(ids).logits
    assert torch.equal(theirs, ours)
