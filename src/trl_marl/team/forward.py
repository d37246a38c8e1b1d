"""The team's log-probability forwards ([`LogProbForwards`], `team.logprob_forwards`: a part the team has), and what
they may leave out.

[`LogProbForwards`] computes the log-probabilities of each agent's [`AgentBatch`] under its policy or its reference:
`AgentTeam.forward` (with gradients, every agent in one call), the old-policy and reference log-probabilities
(`policy_logps`, `reference_logps`, `inference_logps_all`), PPO's response log-probabilities (`response_logprobs`) and
logits (`sequence_logits`, `response_logits`); the team's methods of those names call it. In `adapters` mode the rows
of several agents run as one forward, each row through its own adapter (`team.mixed_adapters`).

Every log-probability goes through one primitive, [`LogProbForwards.token_logps`]: a layout ([`TokenWindow`]: the model
inputs and the output positions that score tokens; MAGRPO's [`completion_window`], the joint adapter forward's
[`joint_completion_window`], PPO's [`response_window`]) and the labels in, per-token log-probabilities (and
entropies) out. It alone chooses between the LM head a chunk of positions at a time and the full logits
(`_logprob_head`); one method runs the model for it and for PPO's logits (`_window_output`, through `forward_call`:
eager or compiled); the layouts decide what dropout changes (below). A subclass that wraps `token_logps` sees
every log-probability forward (`team.logprob_forwards = MyForwards(team)`).

These forwards skip the one position whose logits are never used. The log-probability of token t of a sequence is
read from the logits at position t - 1, so a forward over a prompt plus its completion scores the completion from the
logits of the last prompt token up to the *second to last* completion token. The logits at the last position
predict a token that is not there; TRL's `GRPOTrainer` computes them and throws them away. On a causal model the
logits at every earlier position do not depend on the last input token, so the forward can stop one token earlier:
the same logits up to floating-point reordering in shape-dependent kernels (bit for bit in most shapes, within 1e-6
otherwise). For G samples of 4 completion tokens after a 6-token prompt that is a tenth of the training tokens.

The one thing the last token does change is the random numbers of dropout: a model that draws dropout masks draws
them over one position fewer, so its masks (and every random draw after them) differ from TRL's layout. The
layouts take the whole sequence for such a model ([`dropout_active`]), so that training with dropout stays draw for
draw what it was.

Forwards without gradients (generation, old and reference log-probs) run under [`no_autograd`]: inference mode
where it is safe.
"""

from __future__ import annotations

import functools
import inspect
import warnings
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, overload

import torch
from torch import nn
from transformers import PreTrainedModel

from ..core import chunk_positions, entropy_from_logits, head_logprobs, selective_log_softmax
from ..utils.tokens import joint_model_inputs, sequence_model_inputs
from .batch import AgentBatch
from .compile import CompiledForward, call_model
from .head import bound_head, head_path, head_path_checked
from .mixed_adapters import sliced_adapter_rows, sliced_adapter_rows_plan
from .shared_prompt import shared_prompt_output, shared_prompt_unsupported

__all__ = ["AgentBatch", "LogProbForwards", "TokenWindow", "completion_window",
           "dropout_active", "head_path", "joint_completion_window", "logits_dtype_autocast", "no_autograd",
           "own_storage", "response_window", "takes_logits_to_keep"]


# float attributes through which transformers' modules pass a dropout probability to a kernel or `F.dropout`
_DROPOUT_ATTRIBUTES = ("attention_dropout", "dropout", "activation_dropout", "hidden_dropout")
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_CANDIDATES: weakref.WeakKeyDictionary[nn.Module, tuple[nn.Module, ...]] = weakref.WeakKeyDictionary()


@overload
def own_storage(tensor: torch.Tensor) -> torch.Tensor: ...


@overload
def own_storage(tensor: None) -> None: ...


@overload
def own_storage(tensor: torch.Tensor | None) -> torch.Tensor | None: ...


def own_storage(tensor: torch.Tensor | None) -> torch.Tensor | None:
    """`tensor`, copied into storage of its own when it is a view that autograd differentiates (a slice of the joint
    adapter forward's rows, of the chunked head's concatenated log-probabilities, a value head's `squeeze`).

    The team's forwards return their outputs through this. Under FSDP2 the team is the root module, and
    `fully_shard` hooks the backward of every tensor that the root's forward returns. An in-place op on a returned view
    (`logps.mul_(...)` in a loss override) would rebase the view onto its base and silently drop that hook, so
    torch warns "returned a view tensor ... can cause backward to fail or produce wrong gradients" at every forward.
    trl-marl's own losses use out-of-place ops only, and 2-process FSDP2 trains to DDP's weights
    (`tests/trainers/test_accelerate.py`). The copy removes the warning's premise: the copy of a `(rows, tokens)`
    tensor is negligible next to the forward, and its backward passes the gradient through unchanged.
    """
    if tensor is None or tensor._base is None or not tensor.requires_grad:
        return tensor
    return tensor.clone()


def _dropout_candidates(model: nn.Module) -> tuple[nn.Module, ...]:
    """The submodules of `model` that can draw dropout masks, found once per model (walking every module of a large
    PEFT model takes milliseconds: too long for every forward)."""
    found = _CANDIDATES.get(model)
    if found is None:
        found = tuple(m for m in model.modules() if isinstance(m, _DROPOUT_MODULES)
                      or any(isinstance(m.__dict__.get(name), float) for name in _DROPOUT_ATTRIBUTES))
        _CANDIDATES[model] = found
    return found


def dropout_active(model: nn.Module) -> bool:
    """Whether a forward of `model` now draws dropout masks.

    True when a submodule in train mode is a dropout module (`nn.Dropout`, ...) with `p > 0`, or has a float
    `attention_dropout` (or `dropout`, `activation_dropout`, `hidden_dropout`) attribute `> 0`: transformers'
    attention classes pass that probability to the attention kernel in train mode, without a dropout module.
    `disable_dropout` (which zeroes every `nn.Dropout`) and eval mode make it False. Train/eval modes and
    probabilities are read at every call; which submodules can draw masks is found at the first call on `model`
    (a dropout module added to it later is not seen).

    Example:

    ```python
    model = build_toy_model(tokenizer).train()  # no dropout in its config
    dropout_active(model)  # False
    model.model.layers[0].self_attn.attention_dropout = 0.1
    dropout_active(model)  # True; False again after model.eval()
    ```
    """
    for module in _dropout_candidates(model):
        if not module.training:
            continue
        if isinstance(module, _DROPOUT_MODULES):
            if module.p > 0:
                return True
            continue
        for name in _DROPOUT_ATTRIBUTES:
            probability = module.__dict__.get(name)
            if isinstance(probability, float) and probability > 0:
                return True
    return False


@functools.lru_cache
def _forward_takes_logits_to_keep(model_class: type[nn.Module]) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def takes_logits_to_keep(model: Any) -> bool:
    """Whether the forward of `model` (of the base model under a PEFT wrapper) takes transformers' `logits_to_keep`
    (compute the LM head over the last k positions only)."""
    base: nn.Module = model.get_base_model() if hasattr(model, "get_base_model") else model
    # (mypy does not see a class as `Hashable`, which typeshed asks of `lru_cache`'s arguments)
    return _forward_takes_logits_to_keep(type(base))  # type: ignore[arg-type]


def no_autograd() -> AbstractContextManager[Any]:
    """A context for forwards whose outputs never enter a backward: `torch.inference_mode()`, or `torch.no_grad()`
    when `torch.distributed` is initialized.

    Inference mode also skips autograd's bookkeeping (version counters, view tracking) in every op: 8-10% less CPU
    time for a decoding step of a small model. But FSDP and DeepSpeed ZeRO-3 gather and swap parameters in place
    under version-counter guards, which inference tensors do not have (`RuntimeError: Inference tensors do not track
    version counter`), so any distributed run keeps `no_grad`. A tensor made under inference mode cannot be saved for
    a backward or changed in place outside it: callers return plain Python values or clones.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.no_grad()
    return torch.inference_mode()


def logits_dtype_autocast(logits: torch.Tensor) -> AbstractContextManager[Any]:
    """A context in which log-softmaxes of `logits` run in the logits' own dtype (autocast off), as in TRL.

    accelerate runs a prepared model's `forward` under autocast in bf16/fp16 training. `AgentTeam.forward` (and the
    PPO policy-value wrapper) compute log-probabilities inside that forward, where CUDA autocast would run
    `log_softmax` in float32 and keep a float32 copy of every completion logit for the backward: on an H100 that was
    6.5 bytes per logit more than TRL's `GRPOTrainer` (4.2 GiB at 32 x 128 completions over Qwen2.5's 152k-token
    vocabulary; benchmarks/README.md). TRL computes log-probabilities outside the model's forward, in the logits'
    dtype; so do we.
    """
    return torch.autocast(device_type=logits.device.type, enabled=False)


@dataclass(frozen=True)
class TokenWindow:
    """One log-probability forward of [`AgentTeam.token_logps`]: the model inputs, and which output positions
    score tokens: the `width` positions that end `skip_last` positions before the last one.

    Attributes:
        inputs: The model's keyword inputs (`input_ids`, `attention_mask`, and `position_ids` where the layout sets
            them).
        width: How many output positions score tokens (the widest batch's completions in a joint forward).
        skip_last: The inputs hold the whole sequence (TRL's layout under dropout, so that the masks are drawn over
            the same shapes) and the last output position scores nothing; else they stop before the last token.
        trim_logits: Whether the LM head may run over the scored positions alone (transformers' `logits_to_keep`,
            where the model takes it); False keeps the logits of every position, as TRL's PPO computes them.
    """

    inputs: dict[str, torch.Tensor]
    width: int
    skip_last: bool = False
    trim_logits: bool = True


def completion_window(batch: AgentBatch, dropout: bool) -> TokenWindow:
    """MAGRPO's layout for `batch` (prompt + completion): without dropout the forward stops before the last
    completion token; with dropout it takes the whole sequence (the LM head over the last `width + 1` positions, as
    TRL's `GRPOTrainer`) and drops the last position."""
    width = batch.completion_ids.size(1)
    if dropout:
        return TokenWindow({"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}, width,
                           skip_last=True)
    return TokenWindow({"input_ids": torch.cat([batch.prompt_ids, batch.completion_ids[:, :-1]], dim=1),
                        "attention_mask": torch.cat([batch.prompt_mask, batch.completion_mask[:, :-1]], dim=1)},
                       width)


def joint_completion_window(batches: Sequence[AgentBatch]) -> TokenWindow:
    """One forward over the rows of several batches (`utils.tokens.joint_model_inputs`: padded to the widest prompt
    and the widest completion, explicit position ids), stopping before the last completion token; batch b's rows
    are scored at the first `completion_ids.size(1)` of the window's positions. Never under dropout (the per-agent
    forwards keep TRL's layout there: `_joint_adapter_rows`)."""
    input_ids, attention_mask, position_ids = joint_model_inputs(batches)
    return TokenWindow({"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids},
                       max(batch.completion_ids.size(1) for batch in batches))


def response_window(query_responses: torch.Tensor, context_length: int, pad_token_id: int,
                    dropout: bool) -> TokenWindow:
    """PPO's layout for `query_responses` (`sequence_model_inputs`), scoring its response tokens (the positions from
    `context_length - 1`): without dropout the forward stops before the last token; with dropout it takes the whole
    sequence, with every position's logits (TRL's PPO layout, so that the masks are drawn as in TRL), and drops the
    last position."""
    width = query_responses.size(1) - context_length
    if dropout:
        return TokenWindow(sequence_model_inputs(query_responses, pad_token_id), width, skip_last=True,
                           trim_logits=False)
    return TokenWindow(sequence_model_inputs(query_responses[:, :-1], pad_token_id), width)


@dataclass(frozen=True)
class _ChunkedHead:
    """A model's backbone, its LM head as it runs now (`team.head.bound_head`) and the head's vocabulary size."""

    backbone: nn.Module
    head: Any
    vocab_size: int


def _logits_logprobs(logits: torch.Tensor, labels: torch.Tensor, temperature: float, compute_entropy: bool,
                     entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities (and entropies) of `labels` from the logits that predict them, divided by
    `temperature`, in the logits' dtype (`logits_dtype_autocast`)."""
    with logits_dtype_autocast(logits):
        logits = logits / temperature
        logps = selective_log_softmax(logits, labels)
        entropy = None
        if compute_entropy:  # with gradients only when asked (an entropy bonus): they keep a softmax per chunk
            entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
    return logps, entropy


class LogProbForwards:
    """The log-probability forwards of an `AgentTeam` (`team.logprob_forwards`; the team's methods of the same names
    call it).

    It reads the team's models, adapters, references, settings (`temperature`, `joint_adapter_forward`,
    `logprob_chunk_elements`: `TeamSettings`) and `team.adapter_control`, and holds what only the forwards use:
    `forward_call` (the causal LM call: eager, or a `team.compile.CompiledForward` after `compile_forwards`) and,
    while a joint adapter forward runs, its rows (`_joint_rows`, which the recomputation of checkpointed layers reads).

    Args:
        team: The `AgentTeam` it computes log-probabilities for (a plain reference: it is no submodule of the team).
    """

    def __init__(self, team: Any) -> None:
        self.team = team
        self.forward_call: Any = call_model
        self._joint_rows: tuple[list[str], Any] | None = None  # the rows' adapters and plan while a joint forward runs
        self._sharing_warned: set[str] = set()  # the reasons `share_prompt_forward` was refused, warned once each

    def compile_forwards(self, backend: str | None = None, mode: str | None = None) -> None:
        """Run the log-probability forwards (training, old-policy, reference; not generation) through
        `torch.compile` with dynamic shapes (`team.compile`): the same values, one graph per model architecture,
        adapter and grad mode, compiled on first use. A trainer calls it when `args.torch_compile` is set.

        Example: `team.compile_forwards(backend="inductor")`; `team.forward_call = trl_marl.team.compile.call_model`
        goes back to eager.
        """
        self.forward_call = CompiledForward(backend, mode, num_agents=self.team.num_agents,
                                            on_failure=self._forwards_run_eager)
        control = self.team.adapter_control
        if control.checkpointing_kwargs is not None:  # already on: without the eager recomputation's adapter switch
            control.activation_checkpointing_enable(control.checkpointing_kwargs)

    def _forwards_run_eager(self, reason: str) -> None:
        """A compiled forward failed (`CompiledForward` warned with `reason`): back to eager forwards, and to the
        eager recomputation's adapter switch when activation checkpointing is on."""
        self.forward_call = call_model
        control = self.team.adapter_control
        if control.checkpointing_kwargs is not None:
            control.activation_checkpointing_enable(control.checkpointing_kwargs)

    def _logprob_head(self, model: PreTrainedModel) -> _ChunkedHead | None:
        """The one choice between the LM head in chunks and the full logits, for every log-probability forward
        ([`AgentTeam.token_logps`]): the model's backbone and LM head when the team takes log-probabilities through
        the head a chunk of positions at a time (`logprob_chunk_elements` > 0) and `model` allows it
        (`team.head.head_path_checked`: a probe of its forward, once per model and head adapter state), else None
        (the full logits of the scored positions). Dropout, the compiled forward and the layout do not enter it: the
        layout ([`TokenWindow`]) fixes the inputs and the scored positions, and both paths run the same forward
        through `forward_call`. The head is bound to the adapter state it has now (`team.head.bound_head`): the
        backward recomputes its chunks with the adapter of this forward, whichever agent's forward ran last."""
        if self.team.settings.logprob_chunk_elements <= 0:
            return None
        path = head_path_checked(model)
        if isinstance(path, str):
            return None
        return _ChunkedHead(path.backbone, bound_head(path.head), path.vocab_size)

    def _window_output(self, model: PreTrainedModel, window: TokenWindow, head: _ChunkedHead | None,
                       adapter_rows: tuple[list[str], Any] | None = None) -> torch.Tensor:
        """The one model call of the log-probability forwards (through `forward_call`: eager or compiled): the last
        hidden states (with `head`, from the backbone alone) or the logits at `window`'s scored positions.

        The LM head runs over the scored positions alone (`logits_to_keep`) where the window allows it and the model
        takes it. With `adapter_rows` (from `_joint_adapter_rows`), each row runs through the adapter named for it
        (`team.mixed_adapters.sliced_adapter_rows`), in the forward and in the recomputation of checkpointed layers.
        """
        self._joint_rows = adapter_rows  # for the recomputation of checkpointed layers (`_checkpoint_contexts`)
        try:
            with nullcontext() if adapter_rows is None else sliced_adapter_rows(
                    model, adapter_rows[0], training=model.training, plan=adapter_rows[1]):
                if head is not None:
                    out = self.forward_call(head.backbone, **window.inputs).last_hidden_state
                else:
                    keep = window.width + window.skip_last
                    trim = {"logits_to_keep": keep} if window.trim_logits and keep > 0 and takes_logits_to_keep(
                        model) else {}  # (`logits_to_keep=0` would keep them all)
                    out = self.forward_call(model, **window.inputs, **trim, return_dict=True).logits
        finally:
            self._joint_rows = None
        stop = out.size(1) - window.skip_last
        start = stop - window.width
        return out if start == 0 and stop == out.size(1) else out[:, start:stop]

    def token_logps(
        self, model: PreTrainedModel, window: TokenWindow, labels: Sequence[torch.Tensor],
        temperature: float | None = None, compute_entropy: bool = False, entropy_grad: bool = False,
        adapter_rows: tuple[list[str], Any] | None = None,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """Per-token log-probabilities (and entropies) of `labels` under `model`: the one log-probability primitive
        that every log-probability forward of the team calls (MAGRPO's `forward`, `policy_logps`, `reference_logps`,
        `inference_logps_all`, PPO's `response_logprobs`), whatever the layout.

        It runs one forward over `window.inputs` ([`TokenWindow`]: MAGRPO's [`completion_window`] and
        [`joint_completion_window`], PPO's [`response_window`]) and scores the window's positions: either through
        the LM head a chunk of positions at a time (`core.head_logprobs`, in float32) or from the full logits
        (`selective_log_softmax`, in the logits' dtype), as `_logprob_head` decides for `model`, in this one place.
        The logits are divided by `temperature` (the team's by default) before the softmax.

        Args:
            model: The causal LM to run (a policy, or a reference as `acting` gives it).
            window: The forward's inputs and its scored output positions.
            labels: One `(rows, width)` tensor of token ids per run of consecutive rows of `window.inputs`, in order;
                a run is scored at the first `width` of the window's positions (a joint forward's narrower
                completions end before the window does).
            temperature: Divides the logits; `None` is the team's `temperature`.
            compute_entropy: Also return the entropy of each scored position.
            entropy_grad: Let gradients flow through the entropies (an entropy bonus); otherwise they are detached.
            adapter_rows: The rows' adapters and plan of a joint adapter forward (`_joint_adapter_rows`), or None.

        Returns:
            One `(logps, entropy)` per tensor of `labels`, of its shape (`entropy` None unless asked for).

        Example: `(logps, _), = team.token_logps(model, completion_window(batch, dropout=False),
        [batch.completion_ids])`
        """
        if isinstance(labels, torch.Tensor):
            raise TypeError("`labels` is a sequence of tensors, one per run of rows: pass `[labels]` for one batch.")
        rows = window.inputs["input_ids"].size(0)
        if sum(group.size(0) for group in labels) != rows or any(group.size(1) > window.width for group in labels):
            raise ValueError(
                f"`labels` must split the window's {rows} rows in runs at most {window.width} tokens wide; got shapes "
                f"{[tuple(group.shape) for group in labels]}: pass one tensor of token ids per run of rows."
            )
        head = self._logprob_head(model)
        out = self._window_output(model, window, head, adapter_rows)
        return self._score(out, labels, head, temperature, compute_entropy, entropy_grad)

    def _score(self, out: torch.Tensor, labels: Sequence[torch.Tensor], head: _ChunkedHead | None,
               temperature: float | None, compute_entropy: bool,
               entropy_grad: bool) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """`token_logps`'s scoring of the forward's outputs `out` (hidden states with `head`, else logits)."""
        settings = self.team.settings
        temperature = settings.temperature if temperature is None else temperature
        results: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        start = 0
        for group in labels:
            stop = start + group.size(0)
            scored = out[start:stop, : group.size(1)]
            if head is not None:
                chunk = chunk_positions(head.vocab_size, settings.logprob_chunk_elements)
                results.append(head_logprobs(scored, head.head, group, temperature=temperature, chunk_size=chunk,
                                             compute_entropy=compute_entropy, entropy_grad=entropy_grad))
            else:
                results.append(_logits_logprobs(scored, group, temperature, compute_entropy, entropy_grad))
            start = stop
        return results

    def _logps(
        self, model: PreTrainedModel, batch: AgentBatch, compute_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`token_logps` of `batch`'s completions in MAGRPO's layout (TRL's under dropout: `completion_window`), or,
        with the team's `share_prompt_forward`, each distinct prompt run once (`team.shared_prompt`) where it can."""
        dropout = dropout_active(model)
        if self.team.settings.share_prompt_forward and self._sharing(model, dropout):
            head = self._logprob_head(model)
            out = shared_prompt_output(model, batch, None if head is None else head.backbone,
                                       takes_logits_to_keep(model))
            if out is not None:
                return self._score(out, [batch.completion_ids], head, None, compute_entropy, entropy_grad)[0]
        window = completion_window(batch, dropout)
        return self.token_logps(model, window, [batch.completion_ids], compute_entropy=compute_entropy,
                                entropy_grad=entropy_grad)[0]

    def _sharing(self, model: PreTrainedModel, dropout: bool) -> bool:
        """Whether `model`'s forward can share its prompts now; if not, a warning names why (once per reason)."""
        reason = shared_prompt_unsupported(model, self.forward_call, dropout)
        if reason is not None and reason not in self._sharing_warned:
            self._sharing_warned.add(reason)
            warnings.warn(f"`share_prompt_forward` is on, but {reason}: the log-probability forwards run every "
                          "row's prompt.", stacklevel=3)
        return reason is None

    def forward(
        self, batches: Sequence[AgentBatch | None], compute_entropy: bool = False, entropy_grad: bool = False
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """Per-token log-probabilities (and entropies) of each agent's completions under its current policy.

        One call covers every agent, so that a DistributedDataParallel wrapper sees one forward per backward.
        `batches[a]` is agent `a`'s samples (or `None` when it has none this step). The entropies are computed on
        detached logits (for logging and token selection) unless `entropy_grad` (an entropy bonus in the loss).
        """
        # the shared prompt forward runs agent by agent (the joint adapter forward does not share prompts)
        joint = None if self.team.settings.share_prompt_forward else self._joint_adapter_rows(batches)
        if joint is not None:
            results = self._joint_logps(batches, joint, compute_entropy, entropy_grad)
        else:
            results = []
            for agent_index, batch in enumerate(batches):
                if batch is None or len(batch) == 0:
                    results.append(None)
                    continue
                model = self.team.adapter_control.activate(agent_index)
                results.append(self._logps(model, batch, compute_entropy, entropy_grad))
        # no view among the outputs: under FSDP2 the team is the root module, whose outputs must not be views
        return [None if r is None else (own_storage(r[0]), own_storage(r[1])) for r in results]

    def _joint_adapter_rows(self, batches: Sequence[AgentBatch | None]) -> tuple[list[str], Any] | None:
        """One adapter name per row of the agents' batches in order, and the row slices' plan for them
        (`team.mixed_adapters.sliced_adapter_rows_plan`), when [`AgentTeam.forward`] can run them as one forward
        through the shared base model (see `joint_adapter_forward`), else None."""
        team = self.team
        present = [(a, batch) for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        agents = [a for a, _ in present]
        if not team.settings.joint_adapter_forward or team.mode != "adapters" or len(agents) < 2:
            return None
        if any(team.agent_adapter[a] is None or team.agent_model[a] != team.agent_model[agents[0]] for a in agents):
            return None
        model = team.policy(agents[0])
        if dropout_active(model):  # the per-agent forwards keep TRL's layout and dropout draws
            return None
        names = [team.agent_adapter[a] for a, batch in present for _ in range(len(batch))]
        plan = sliced_adapter_rows_plan(model, names, training=model.training)
        return None if isinstance(plan, str) else (names, plan)

    def _joint_logps(
        self, batches: Sequence[AgentBatch | None], rows: tuple[list[str], Any], compute_entropy: bool,
        entropy_grad: bool,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """[`AgentTeam.forward`] of an `adapters` team as one forward over every agent's rows, each row through its
        agent's adapter (`team.mixed_adapters`), instead of one forward per agent.

        The rows of each agent keep the inputs they have in their own forward: prompts padded further on the left
        keep their position ids (passed explicitly), completions padded further on the right are masked and come
        after every scored position, so each agent's logits are those of its own forward up to floating-point
        reordering; each adapter gets the gradient of its own rows only.
        """
        first = next(a for a, b in enumerate(batches) if b is not None and len(b) > 0)
        model = self.team.adapter_control.activate(first)
        return self._joint_forward(model, batches, rows, compute_entropy, entropy_grad)

    def _joint_forward(
        self, model: PreTrainedModel, batches: Sequence[AgentBatch | None], rows: tuple[list[str], Any] | None,
        compute_entropy: bool, entropy_grad: bool,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """`token_logps` of every non-empty batch in one forward of `model` (`joint_completion_window`), each row
        through the adapter that `rows` (`_joint_adapter_rows`) names for it (row slices), or, with `rows` None,
        every row through the model as it is."""
        present = [(a, batch) for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        agents = [a for a, _ in present]
        window = joint_completion_window([batch for _, batch in present])
        per_agent = self.token_logps(model, window, [batch.completion_ids for _, batch in present],
                                     compute_entropy=compute_entropy, entropy_grad=entropy_grad, adapter_rows=rows)
        results: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * len(batches)
        for a, logps in zip(agents, per_agent, strict=True):
            results[a] = logps
        return results

    @torch.no_grad()
    def reference_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the reference policy (adapter disabled, or the frozen copy)."""
        with self.team.acting(agent_index, reference=True) as model:
            return self._inference_logps(model, batch)

    @torch.no_grad()
    def policy_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the current policy, without gradients."""
        return self._inference_logps(self.team.adapter_control.activate(agent_index), batch)

    @torch.no_grad()
    def inference_logps_all(self, batches: Sequence[AgentBatch | None],
                            reference: bool = False) -> list[torch.Tensor | None]:
        """[`AgentTeam.policy_logps`] (or, with `reference`, [`AgentTeam.reference_logps`]) of every agent that has a
        batch, as one forward over all their rows where the team's training forward takes one (`adapters` mode, see
        [`AgentTeam.forward`]; the reference of adapters is their base model, every row through it): fewer, larger
        forwards, with every agent's logits at once.

        Example: `old_logps = team.inference_logps_all([batch_0, None, batch_2])  # [tensor, None, tensor]`
        """
        rows = self._joint_adapter_rows(batches)
        team = self.team
        if rows is not None and reference and any(team.ref_models[team.agent_model[a]] is not None
                                                  for a, b in enumerate(batches) if b is not None):
            rows = None  # frozen copies: one forward per agent
        if rows is None or any(b is not None and len(b) == 0 for b in batches):
            scored = self.reference_logps if reference else self.policy_logps
            return [None if b is None else scored(a, b) for a, b in enumerate(batches)]
        first = next(a for a, b in enumerate(batches) if b is not None)
        with team.acting(first, reference=reference) as model, no_autograd():
            results = self._joint_forward(model, batches, None if reference else rows, False, False)
        # (clones outside `inference_mode`: normal tensors a loss may use, as `_inference_logps` returns)
        return [None if r is None else (r[0].clone() if r[0].is_inference() else r[0]) for r in results]

    def _inference_logps(self, model: PreTrainedModel, batch: AgentBatch) -> torch.Tensor:
        # `inference_mode` when safe (`no_autograd`); the clone, outside it, is a normal tensor that a loss may use
        # anywhere (inference tensors cannot be saved for a backward or changed in place)
        with no_autograd():
            logps = self._logps(model, batch, compute_entropy=False)[0]
        return logps.clone() if logps.is_inference() else logps

    def sequence_logits(self, agent_index: int, query_responses: torch.Tensor, pad_token_id: int,
                        reference: bool = False) -> torch.Tensor:
        """Logits of member `agent_index`'s policy (or reference) over PPO's layout (`sequence_model_inputs`).

        Returns the logits of every position (not divided by the temperature); gradients flow for the policy.
        """
        window = TokenWindow(sequence_model_inputs(query_responses, pad_token_id), query_responses.size(1),
                             trim_logits=False)
        with self.team.acting(agent_index, reference) as model:
            return self._window_output(model, window, None)

    def response_logits(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                        pad_token_id: int, reference: bool = False) -> torch.Tensor:
        """The logits that score the response tokens of PPO's layout: those of `sequence_logits` at positions
        `context_length - 1` to the second to last (`sequence_logits(...)[:, context_length - 1 : -1]`).

        Only those are computed: the forward stops before the last token and the LM head runs over the response
        window alone (`logits_to_keep`, when the model takes it), unless dropout is active ([`response_window`]).
        """
        with self.team.acting(agent_index, reference) as model:
            return self._window_output(model, response_window(query_responses, context_length, pad_token_id,
                                                              dropout_active(model)), None)

    def response_logprobs(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                          pad_token_id: int, responses: torch.Tensor, temperature: float, reference: bool = False,
                          compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities of PPO's `responses` (and, with `compute_entropy`, the detached entropy of every
        response position) under member `agent_index`'s policy or reference, the logits divided by `temperature`:
        `selective_log_softmax(response_logits(...) / temperature, responses)`, computed by [`AgentTeam.token_logps`]
        over [`response_window`] (without the response logits where the model allows it, as MAGRPO's forwards).
        Gradients flow for the policy.

        Example: `logps, entropy = team.response_logprobs(0, query_responses, context, pad, responses, 0.7 + 1e-7,
        compute_entropy=True)`
        """
        with self.team.acting(agent_index, reference) as model:
            window = response_window(query_responses, context_length, pad_token_id, dropout_active(model))
            return self.token_logps(model, window, [responses], temperature=temperature,
                                    compute_entropy=compute_entropy)[0]
