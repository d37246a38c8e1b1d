"""FSDP2's "returned a view tensor ... can cause backward to fail or produce wrong gradients" (issue 39, item 5).

`fully_shard` hooks the backward of every tensor that the root module's forward returns; under accelerate's FSDP2 the
root is the team (MAGRPO) or `PolicyValueTeam` (PPO). In `adapters` mode their outputs were views: slices of the
joint adapter forward's rows and of the chunked head's concatenated log-probabilities, and a value head's `squeeze`.
An in-place op on such a view would drop the hook, hence torch's warning at every forward. trl-marl's losses never
modify them in place, and 2-process FSDP2 trains to DDP's weights (`test_accelerate.py`), so the gradients were right;
the forwards now return tensors with storage of their own (`team.forward.own_storage`), and the warning is gone.

FSDP2 runs here in one process over gloo (world size 1), in a child process so that no process group outlives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys, tempfile, warnings
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from peft import LoraConfig
from trl_marl.team import AgentBatch, AgentTeam
from trl_marl.trainers.ppo.value import PolicyValueTeam, build_value_models
from trl_marl.utils.tokens import pad_left, pad_right

torch.set_num_threads(1)
model_dir = sys.argv[1]
dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, init_lora_weights=False)
batches = [AgentBatch(*pad_left([[5, 6, 7], [8, 9]], 0), *pad_right([[10, 11, 12], [13]], 0)),
           AgentBatch(*pad_left([[4], [7, 8, 9, 6]], 0), *pad_right([[14, 15], [16, 17, 5, 6]], 0))]
qr = torch.tensor([[5, 6, 7, 10, 11, 12], [0, 8, 9, 13, 14, 0]])
ppo_batches = [(qr, 3, qr[:, 3:], qr, 3), (qr.flip(0), 3, qr.flip(0)[:, 3:], qr.flip(0), 3)]

def build(kind):
    torch.manual_seed(0)
    team = AgentTeam.build(model_dir, 2, mode="adapters", peft_config=lora)
    team.train()
    if kind == "team":
        return team, lambda module: [out[0] for out in module(batches)]
    root = PolicyValueTeam(team, build_value_models(None, team))
    return root, lambda module: [t for out in module(ppo_batches, [0, 0]) for t in out[1:]]

def run(kind, shard):
    module, outputs = build(kind)
    if shard:
        fully_shard(module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = outputs(module)
        views = [t._base is not None for t in outs]
        loss = sum((t * torch.arange(1, t.numel() + 1).view_as(t)).sum() for t in outs)
        loss.backward()
    grads = {}
    for name, p in module.named_parameters():
        if p.requires_grad and p.grad is not None:
            g = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
            grads[name] = g.detach().clone()
    said = [str(w.message) for w in caught if "view tensor" in str(w.message)]
    return views, said, grads

result = {}
for kind in ("team", "ppo"):
    views, _, plain = run(kind, False)
    _, said, sharded = run(kind, True)
    result[kind] = {
        "views": views, "said": said, "trained": len(plain),
        "same_names": sorted(plain) == sorted(sharded),
        "max_diff": max((sharded[n] - plain[n]).abs().max().item() for n in plain),
    }
dist.destroy_process_group()
print("RESULT " + json.dumps(result))
"""


@pytest.mark.slow
def test_fsdp2_roots_return_no_views_and_the_same_gradients(target_model_dir: str) -> None:
    """Before: every output was a view and each FSDP2 forward warned (the gradients were the same already)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", SCRIPT, target_model_dir], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    for kind, count in (("team", 2), ("ppo", 4)):  # 2 agents' log-probs; PPO: their log-probs and values
        got = result[kind]
        assert got["views"] == [False] * count, (kind, got)
        assert got["said"] == [], (kind, got["said"])
        assert got["trained"] > 0 and got["same_names"], (kind, got)
        assert got["max_diff"] <= 1e-6, (kind, got)


def test_own_storage_copies_differentiable_views_only() -> None:
    from trl_marl.team.forward import own_storage

    base = torch.arange(6.0, requires_grad=True) * 1.0
    view = base.view(2, 3)
    copy = own_storage(view)
    assert copy is not view and copy._base is None and torch.equal(copy, view)
    (copy * torch.tensor([[1.0, 2, 3], [4, 5, 6]])).sum().backward()
    no_grad_view = torch.arange(6.0).view(2, 3)
    assert own_storage(no_grad_view) is no_grad_view and own_storage(base) is base and own_storage(None) is None
