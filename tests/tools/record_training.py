"""pytest plugin: record every training log and weight the suite produces (to show a refactor changes neither).

    PYTHONPATH=src:tests/tools TRL_MARL_RECORD=before.json python -m pytest tests -q -p record_training

then the same on the other tree (`after.json`), and `python tests/tools/compare_training_records.py before.json
after.json`. Under pytest-xdist (`-n 2 --dist loadfile`) each worker writes `<path>.<worker>` and the controller merges
them into `<path>`. A test that does not seed its own random state (e.g. a value head initialised from the global RNG)
records what the tests before it left, so a change of test order alone can change its entry.

Wraps MAGRPOTrainer.train, MultiAgentPPOTrainer.train (and so PPOTrainer) and legacy PPOTrainer.step through the
public imports. Per call: the log history without wall-clock fields, and SHA-256 hashes of the model's state dict
(with key names, and of the sorted per-tensor hashes alone, which survives renamed attributes).
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import os
from typing import Any

RECORDS: dict[str, list[Any]] = {}
TIMING = ("runtime", "per_second", "seconds", "time", "tokens_per_s", "_s_")
TIMING_KEYS = ("eps",)  # PPO's episodes per second


def _key() -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST", "outside::outside (call)").rsplit(" (", 1)[0]
    path, _, rest = current.partition("::")
    return os.path.basename(path) + "::" + rest


def _tensor_bytes(t: Any) -> bytes:
    import torch

    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return str(t.dtype).encode() + str(tuple(t.shape)).encode() + t.numpy().tobytes()


def _hash_module(module: Any) -> dict[str, Any]:
    if module is None or not hasattr(module, "state_dict"):
        return {"none": True}
    per = {k: hashlib.sha256(_tensor_bytes(v)).hexdigest() for k, v in module.state_dict().items()
           if hasattr(v, "detach")}
    keyed = hashlib.sha256(json.dumps(sorted(per.items())).encode()).hexdigest()
    values = hashlib.sha256(json.dumps(sorted(per.values())).encode()).hexdigest()
    return {"keyed": keyed, "values": values, "tensors": len(per)}


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in sorted(value.items())
                if k not in TIMING_KEYS and not any(s in k for s in TIMING)}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return value if isinstance(value, (int, str, bool, type(None))) else repr(type(value))


def _wrap(cls: Any, name: str, kind: str) -> None:
    original = getattr(cls, name)
    if getattr(original, "_recorded", False):
        return

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        entry: dict[str, Any] = {"kind": kind, "class": type(self).__name__}
        try:
            out = original(self, *args, **kwargs)
        except BaseException as exc:
            entry["raised"] = type(exc).__name__
            entry["model"] = _safe_hash(self)
            RECORDS.setdefault(_key(), []).append(entry)
            raise
        if kind == "step":
            entry["stats"] = hashlib.sha256(json.dumps(_clean(out)).encode()).hexdigest()
        else:
            state = getattr(self, "state", None)
            entry["log_history"] = _clean(getattr(state, "log_history", None))
        entry["model"] = _safe_hash(self)
        RECORDS.setdefault(_key(), []).append(entry)
        return out

    wrapper._recorded = True  # type: ignore[attr-defined]
    setattr(cls, name, wrapper)


def _safe_hash(trainer: Any) -> Any:
    try:
        return _hash_module(getattr(trainer, "model", None))
    except Exception as exc:  # noqa: BLE001
        return {"error": type(exc).__name__}


def pytest_configure(config: Any) -> None:
    if not os.environ.get("TRL_MARL_RECORD"):
        return
    import trl_marl
    from trl_marl import legacy

    _wrap(trl_marl.MAGRPOTrainer, "train", "train")
    _wrap(trl_marl.MultiAgentPPOTrainer, "train", "train")
    _wrap(legacy.PPOTrainer, "step", "step")


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    path = os.environ.get("TRL_MARL_RECORD")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # an xdist worker: its share, merged by the controller below
        with open(f"{path}.{worker}", "w") as f:
            json.dump(RECORDS, f)
        return
    records = dict(RECORDS)
    for part in sorted(glob.glob(glob.escape(path) + ".gw*")):
        with open(part) as f:
            records.update(json.load(f))
        os.remove(part)
    with open(path, "w") as f:
        json.dump(records, f, indent=1, sort_keys=True)
