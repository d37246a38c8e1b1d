"""Where a training step's time goes: exclusive wall and CPU time per named part, and every model forward's shape.

Shared by ``bench_profile.py`` (trl_marl, in its process) and ``bench_comlrl_peer.py --profile`` (comlrl, in the
comlrl virtualenv), so that both sides are timed by the same code. It needs torch and the standard library only.

A [`StepProfiler`] keeps a stack of open *regions*. A region's time is exclusive: what it spent minus what the
regions opened inside it spent, so the parts of a step add up to the time the step spent inside regions, and the
rest of the step (the training loop's own bookkeeping, logging, data loading) is the step time minus their sum.
Regions come from:

- wrapped methods (``wrap_method(obj, "name", part)``: an instance attribute that shadows the method, so calls
  through ``obj.name(...)`` are timed; the library's code is not changed);
- forward hooks on a causal LM's decoder stack (``model.model``) and ``lm_head`` (``hook_causal_lm``): a forward is
  named after the innermost *phase* region it runs in: ``prefill`` / ``decode`` inside ``generate`` (``decode`` when
  it feeds one new token per row on top of a KV cache, else ``prefill``), ``train_fwd`` inside ``loss``,
  ``logps_fwd`` inside ``logps``, ``other_fwd`` elsewhere. Its shape (rows, new tokens, cached tokens, rows x
  positions given to ``lm_head``, whether autograd records it) is counted, for the FLOP count;
- ``install_global()``: ``torch.autograd.backward`` (what ``Tensor.backward`` calls) as ``backward``, and every
  optimizer's ``step`` (torch's global optimizer step hooks) as ``optimizer``.

The hooks run a few microseconds per forward (``instrumentation_cost`` measures one region).
"""

from __future__ import annotations

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

PHASES = {"generate": None, "loss": "train_fwd", "logps": "logps_fwd"}  # phase region -> name of its forwards


class _Open:
    __slots__ = ("name", "wall", "cpu", "child_wall", "child_cpu")

    def __init__(self, name: str, wall: float, cpu: float) -> None:
        self.name = name
        self.wall = wall
        self.cpu = cpu
        self.child_wall = 0.0
        self.child_cpu = 0.0


class StepProfiler:
    """Exclusive wall / CPU seconds per part and counted forward shapes, read step by step with [`step`].

    Example:

    ```python
    >>> profiler = StepProfiler()
    >>> profiler.mark()
    >>> with profiler.region("generate"):
    ...     with profiler.region("reward"):
    ...         pass
    >>> record = profiler.step()
    >>> sorted(record["parts"])
    ['generate', 'reward']
    ```
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.thread_time) -> None:
        self.clock = clock
        self.cpu_clock = cpu_clock
        self._stack: list[_Open] = []
        self.parts: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # part -> [wall, cpu]
        self.shapes: Counter[tuple[Any, ...]] = Counter()
        self.events = 0  # regions closed (each costs a few clock reads)
        self._forward: list[Any] = []  # the open forward: [part, rows, new_tokens, cached, grad]
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []
        self._base: dict[str, Any] | None = None

    # ------------------------------------------------------------------ regions
    def enter(self, name: str) -> None:
        self._stack.append(_Open(name, self.clock(), self.cpu_clock()))

    def exit(self) -> None:
        wall, cpu = self.clock(), self.cpu_clock()
        top = self._stack.pop()
        spent_wall, spent_cpu = wall - top.wall, cpu - top.cpu
        part = self.parts[top.name]
        part[0] += spent_wall - top.child_wall
        part[1] += spent_cpu - top.child_cpu
        if self._stack:
            self._stack[-1].child_wall += spent_wall
            self._stack[-1].child_cpu += spent_cpu
        self.events += 1

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        self.enter(name)
        try:
            yield
        finally:
            self.exit()

    def flush(self) -> None:
        """Credit the open regions with their exclusive time so far (so that a step ending inside one is whole)."""
        wall, cpu = self.clock(), self.cpu_clock()
        for depth, top in enumerate(self._stack):
            inner = self._stack[depth + 1] if depth + 1 < len(self._stack) else None
            inner_wall = wall - inner.wall if inner is not None else 0.0
            inner_cpu = cpu - inner.cpu if inner is not None else 0.0
            part = self.parts[top.name]
            part[0] += wall - top.wall - top.child_wall - inner_wall
            part[1] += cpu - top.cpu - top.child_cpu - inner_cpu
        for top in self._stack:
            top.wall, top.cpu, top.child_wall, top.child_cpu = wall, cpu, 0.0, 0.0

    def phase(self) -> str | None:
        """The innermost open phase region (`generate`, `loss` or `logps`), if any."""
        for top in reversed(self._stack):
            if top.name in PHASES:
                return top.name
        return None

    # ------------------------------------------------------------------ instrumentation
    def wrap_method(self, obj: Any, name: str, part: str) -> None:
        """Time every call of `obj.name(...)` as region `part` (an instance attribute shadows the method)."""
        original = getattr(obj, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.enter(part)
            try:
                return original(*args, **kwargs)
            finally:
                self.exit()

        had_own = name in vars(obj)
        setattr(obj, name, timed)
        self._restore.append(lambda: setattr(obj, name, original) if had_own else delattr(obj, name))

    def hook_causal_lm(self, model: torch.nn.Module) -> None:
        """Time and count the forwards of a causal LM with `model.model` (decoder stack) and `model.lm_head`."""
        decoder, head = model.model, model.lm_head
        self._handles.append(decoder.register_forward_pre_hook(self._decoder_pre, with_kwargs=True))
        self._handles.append(decoder.register_forward_hook(self._region_post))
        self._handles.append(head.register_forward_pre_hook(self._head_pre))
        self._handles.append(head.register_forward_hook(self._head_post))

    def _decoder_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs.get("inputs_embeds")
        rows, new = int(ids.shape[0]), int(ids.shape[1])
        cache = kwargs.get("past_key_values")
        cached = int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
        phase = self.phase()
        if phase == "generate":
            part = "decode" if cached > 0 and new == 1 else "prefill"
        else:
            part = PHASES[phase] if phase is not None else "other_fwd"
        self._forward = [part, rows, new, cached, bool(torch.is_grad_enabled())]
        self.enter(part)

    def _region_post(self, module: Any, args: Any, output: Any) -> None:
        self.exit()

    def _head_pre(self, module: Any, args: tuple[Any, ...]) -> None:
        hidden = args[0]
        if not self._forward:  # lm_head called on its own: a forward of its own, with no decoder tokens
            self._forward = ["other_fwd", int(hidden.shape[0]), 0, 0, bool(torch.is_grad_enabled())]
        part, rows, new, cached, grad = self._forward
        positions = int(hidden.numel() // hidden.shape[-1])  # rows x positions kept for the logits
        self.shapes[(part, rows, new, cached, positions, grad)] += 1
        self._forward = []
        self.enter(part)

    def _head_post(self, module: Any, args: Any, output: Any) -> None:
        self.exit()

    def install_global(self) -> None:
        """Time `torch.autograd.backward` as `backward` and every optimizer step as `optimizer` (process-wide)."""
        original = torch.autograd.backward

        @functools.wraps(original)
        def timed_backward(*args: Any, **kwargs: Any) -> Any:
            self.enter("backward")
            try:
                return original(*args, **kwargs)
            finally:
                self.exit()

        torch.autograd.backward = timed_backward
        self._restore.append(lambda: setattr(torch.autograd, "backward", original))
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(lambda opt, args, kwargs: self.enter("optimizer")))
        self._handles.append(register_optimizer_step_post_hook(lambda opt, args, kwargs: self.exit()))

    def remove(self) -> None:
        """Undo every hook, wrapper and patch."""
        for handle in self._handles:
            handle.remove()
        for restore in reversed(self._restore):
            restore()
        self._handles, self._restore = [], []

    # ------------------------------------------------------------------ reading
    def _snapshot(self) -> dict[str, Any]:
        self.flush()
        return {"wall": self.clock(), "cpu": self.cpu_clock(), "parts": {k: list(v) for k, v in self.parts.items()},
                "shapes": Counter(self.shapes), "events": self.events}

    def mark(self) -> None:
        """Start a step here (e.g. at the start of training)."""
        self._base = self._snapshot()

    def step(self) -> dict[str, Any]:
        """End the current step (and start the next): its wall and CPU time, parts, forward shapes and events.

        `parts[name] = [wall, cpu]` exclusive seconds; `shapes` a list of `[part, rows, new_tokens, cached,
        lm_head_positions, grad, count]`; `wall - sum(parts wall)` is the time spent outside every region.
        """
        now = self._snapshot()
        base = self._base if self._base is not None else {"wall": now["wall"], "cpu": now["cpu"], "parts": {},
                                                           "shapes": Counter(), "events": 0}
        parts = {}
        for name, (wall, cpu) in now["parts"].items():
            before = base["parts"].get(name, [0.0, 0.0])
            if wall - before[0] > 0.0 or cpu - before[1] > 0.0:
                parts[name] = [wall - before[0], cpu - before[1]]
        shapes = now["shapes"] - base["shapes"]
        self._base = now
        return {
            "wall": now["wall"] - base["wall"],
            "cpu": now["cpu"] - base["cpu"],
            "parts": parts,
            "shapes": [[*key, count] for key, count in sorted(shapes.items())],
            "events": now["events"] - base["events"],
        }


def instrumentation_cost(repeats: int = 20000) -> float:
    """Seconds one region costs (enter + exit, two clocks each), best of 5 batches of `repeats`."""
    profiler = StepProfiler()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            profiler.enter("x")
            profiler.exit()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best
