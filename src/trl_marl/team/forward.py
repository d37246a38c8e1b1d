"""The team's log-probability forwards ([`LogProbMixin`], a part of `AgentTeam`), and what they may leave out.

[`LogProbMixin`] scores each agent's [`AgentBatch`] under its policy or its reference: `AgentTeam.forward` (with
gradients, every agent in one call), the old-policy and reference log-probabilities (`policy_logps`,
`reference_logps`, `inference_logps_all`), PPO's response log-probabilities (`response_logprobs`) and logits
(`sequence_logits`, `response_logits`). In `adapters` mode
the rows of several agents run as one forward, each row through its own adapter (`team.mixed_adapters`).

These forwards skip the one position whose logits are never used. The log-probability of token t of a sequence is
read from the logits at position t - 1, so a forward over a prompt plus its completion scores the completion from the
logits of the last prompt token up to the *second to last* completion token. The logits at the last position
predict a token that is not there; TRL's `GRPOTrainer` computes them and throws them away. On a causal model the
logits at every earlier position do not depend on the last input token, so the forward can stop one token earlier:
the same logits up to floating-point reordering in shape-dependent kernels (bit for bit in most shapes, within 1e-6
otherwise). For G samples of 4 completion tokens after a 6-token prompt that is a tenth of the training tokens.

The one thing the last token does change is the random numbers of dropout: a model that draws dropout masks draws
them over one position fewer, so its masks (and every random draw after them) differ from TRL's layout. Callers
keep the full layout for such a model ([`dropout_active`]), so that training with dropout stays draw for draw what
it was.

Forwards without gradients (generation, old and reference log-probs) run under [`no_autograd`]: inference mode
where it is safe.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from ..core import chunk_positions, entropy_from_logits, head_logprobs, selective_log_softmax
from ..utils.tokens import joint_model_inputs, sequence_model_inputs
from .compile import CompiledForward, call_model
from .head import bound_head, head_path, head_path_checked
from .mixed_adapters import sliced_adapter_rows, sliced_adapter_rows_plan

__all__ = ["AgentBatch", "LogProbMixin", "checkpointing_paused", "dropout_active", "head_path",
           "logits_dtype_autocast", "no_autograd", "own_storage", "response_layout", "takes_logits_to_keep"]


# float attributes through which transformers' modules pass a dropout probability to a kernel or `F.dropout`
_DROPOUT_ATTRIBUTES = ("attention_dropout", "dropout", "activation_dropout", "hidden_dropout")
_DROPOUT_MODULES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)
_CANDIDATES: weakref.WeakKeyDictionary[nn.Module, tuple[nn.Module, ...]] = weakref.WeakKeyDictionary()


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
def _forward_takes_logits_to_keep(model_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(model_class.forward).parameters


def takes_logits_to_keep(model: Any) -> bool:
    """Whether the forward of `model` (of the base model under a PEFT wrapper) takes transformers' `logits_to_keep`
    (compute the LM head over the last k positions only)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_takes_logits_to_keep(type(base))


def response_layout(query_responses: torch.Tensor, context_length: int, pad_token_id: int,
                    dropout: bool) -> tuple[dict[str, torch.Tensor], slice]:
    """PPO's model inputs for `query_responses` and the output positions that score its response tokens: without
    dropout the forward stops before the last token (positions `context_length - 1` onwards); with dropout it takes
    the whole sequence, so that the masks are drawn as in TRL, and drops the last position."""
    if dropout:
        return sequence_model_inputs(query_responses, pad_token_id), slice(context_length - 1, -1)
    return sequence_model_inputs(query_responses[:, :-1], pad_token_id), slice(context_length - 1, None)


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


@contextmanager
def checkpointing_paused(model: nn.Module) -> Iterator[None]:
    """Turn gradient checkpointing off in every layer of `model` for the duration of the context, then restore it.

    transformers' checkpointed layers drop the KV cache (`past_key_values=None`) in *train mode*, whatever the grad
    mode: a model that has to decode in train mode (a 4-bit model on CPU, see `trl_marl.team.sampling`) would then
    feed each new token without the cache of the tokens before it and sample from the wrong distribution. Generation
    computes no gradient, so checkpointing has nothing to save there.

    Example:

    ```python
    model.gradient_checkpointing_enable()
    with checkpointing_paused(model), torch.no_grad():
        out = model.generate(ids, max_new_tokens=8)  # decodes with its KV cache, even in train mode
    ```
    """
    paused = [m for m in model.modules() if getattr(m, "gradient_checkpointing", False) is True]
    for module in paused:
        module.gradient_checkpointing = False
    try:
        yield
    finally:
        for module in paused:
            module.gradient_checkpointing = True


@dataclass
class AgentBatch:
    """Tokenized samples of one agent: left-padded prompts followed by right-padded completions."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        return torch.cat([self.prompt_mask, self.completion_mask], dim=1)

    def to(self, device: torch.device | str) -> AgentBatch:
        return AgentBatch(*(t.to(device) for t in (self.prompt_ids, self.prompt_mask, self.completion_ids,
                                                   self.completion_mask)))

    def __len__(self) -> int:
        return self.prompt_ids.size(0)


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


class LogProbMixin:
    """The log-probability forwards of `AgentTeam` (one of its bases: it reads the team's models, adapters,
    `temperature` and `forward_call`)."""

    def compile_forwards(self, backend: str | None = None, mode: str | None = None) -> None:
        """Run the log-probability forwards (training, old-policy, reference; not generation) through
        `torch.compile` with dynamic shapes (`team.compile`): the same values, one graph per model architecture,
        adapter and grad mode, compiled on first use. A trainer calls it when `args.torch_compile` is set.

        Example: `team.compile_forwards(backend="inductor")`; `team.forward_call = trl_marl.team.compile.call_model`
        goes back to eager.
        """
        self.forward_call = CompiledForward(backend, mode, num_agents=self.num_agents,
                                            on_failure=self._forwards_run_eager)
        if self._checkpointing_kwargs is not None:  # already on: without the eager recomputation's adapter switch
            self.activation_checkpointing_enable(self._checkpointing_kwargs)

    def _forwards_run_eager(self, reason: str) -> None:
        """A compiled forward failed (`CompiledForward` warned with `reason`): back to eager forwards, and to the
        eager recomputation's adapter switch when activation checkpointing is on."""
        self.forward_call = call_model
        if self._checkpointing_kwargs is not None:
            self.activation_checkpointing_enable(self._checkpointing_kwargs)

    def _logps(
        self, model: PreTrainedModel, batch: AgentBatch, compute_entropy: bool, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        width = batch.completion_ids.size(1)
        if dropout_active(model):  # TRL's layout, so that dropout draws the same masks (`team.forward`)
            inputs = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            keep, scored = width + 1, slice(-(width + 1), -1)
        else:  # the last completion token predicts nothing that is scored: the forward stops before it
            inputs = {"input_ids": torch.cat([batch.prompt_ids, batch.completion_ids[:, :-1]], dim=1),
                      "attention_mask": torch.cat([batch.prompt_mask, batch.completion_mask[:, :-1]], dim=1)}
            keep, scored = width, slice(-width, None)
        head = self._chunked_head(model)
        if head is not None:
            hidden = self.forward_call(head[0], **inputs).last_hidden_state[:, scored]
            return self._score_hidden(hidden, head, batch.completion_ids, compute_entropy, entropy_grad)
        logits = self.forward_call(model, **inputs, logits_to_keep=keep).logits[:, scored]
        return self._score(logits, batch, compute_entropy, entropy_grad)

    def _chunked_head(self, model: PreTrainedModel) -> tuple[nn.Module, Any, int] | None:
        """`(backbone, head, vocabulary size)` when the team takes log-probabilities through the LM head in chunks
        (`logprob_chunk_elements` > 0) and `model` allows it (`team.head.head_path_checked`), else None (the full
        logits). The head is bound to the adapter state it has now (`team.head.bound_head`): the backward recomputes
        its chunks with the adapter of this forward, whichever agent's forward ran last."""
        if self.logprob_chunk_elements <= 0:
            return None
        path = head_path_checked(model)
        if isinstance(path, str):
            return None
        return path.backbone, bound_head(path.head), path.vocab_size

    def _score_hidden(
        self, hidden: torch.Tensor, head: tuple[nn.Module, Any, int], labels: torch.Tensor, compute_entropy: bool,
        entropy_grad: bool, temperature: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`_score` from the last hidden states: the LM head (`head`, from `_chunked_head`) a chunk of positions at a
        time (`core.head_logprobs`), in float32, without the full logits (`temperature`: the team's by default)."""
        _, head, vocab_size = head
        chunk = chunk_positions(vocab_size, self.logprob_chunk_elements)
        temperature = self.temperature if temperature is None else temperature
        return head_logprobs(hidden, head, labels, temperature=temperature, chunk_size=chunk,
                             compute_entropy=compute_entropy, entropy_grad=entropy_grad)

    def _score(self, logits: torch.Tensor, batch: AgentBatch, compute_entropy: bool,
               entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per-token log-probabilities (and entropies) of `batch`'s completions from the logits that predict them."""
        with logits_dtype_autocast(logits):
            logits = logits / self.temperature
            logps = selective_log_softmax(logits, batch.completion_ids)
            entropy = None
            if compute_entropy:  # with gradients only when asked (an entropy bonus): they keep a softmax per chunk
                entropy = entropy_from_logits(logits if entropy_grad else logits.detach())
        return logps, entropy

    def forward(
        self, batches: Sequence[AgentBatch | None], compute_entropy: bool = False, entropy_grad: bool = False
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """Per-token log-probabilities (and entropies) of each agent's completions under its current policy.

        One call covers every agent, so that a DistributedDataParallel wrapper sees one forward per backward.
        `batches[a]` is agent `a`'s samples (or `None` when it has none this step). The entropies are computed on
        detached logits (for logging and token selection) unless `entropy_grad` (an entropy bonus in the loss).
        """
        joint = self._joint_adapter_rows(batches)
        if joint is not None:
            results = self._joint_logps(batches, joint, compute_entropy, entropy_grad)
        else:
            results = []
            for agent_index, batch in enumerate(batches):
                if batch is None or len(batch) == 0:
                    results.append(None)
                    continue
                model = self._activate(agent_index)
                results.append(self._logps(model, batch, compute_entropy, entropy_grad))
        # no view among the outputs: under FSDP2 the team is the root module, whose outputs must not be views
        return [None if r is None else (own_storage(r[0]), own_storage(r[1])) for r in results]

    def _joint_adapter_rows(self, batches: Sequence[AgentBatch | None]) -> tuple[list[str], Any] | None:
        """One adapter name per row of the agents' batches in order, and the row slices' plan for them
        (`team.mixed_adapters.sliced_adapter_rows_plan`), when [`AgentTeam.forward`] can run them as one forward
        through the shared base model (see `joint_adapter_forward`), else None."""
        agents = [a for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        if not self.joint_adapter_forward or self.mode != "adapters" or len(agents) < 2:
            return None
        if any(self.agent_adapter[a] is None or self.agent_model[a] != self.agent_model[agents[0]] for a in agents):
            return None
        model = self.policy(agents[0])
        if dropout_active(model):  # the per-agent forwards keep TRL's layout and dropout draws
            return None
        names = [self.agent_adapter[a] for a in agents for _ in range(len(batches[a]))]
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
        model = self._activate(next(a for a, b in enumerate(batches) if b is not None and len(b) > 0))
        return self._joint_forward(model, batches, rows, compute_entropy, entropy_grad)

    def _joint_forward(
        self, model: PreTrainedModel, batches: Sequence[AgentBatch | None], rows: tuple[list[str], Any] | None,
        compute_entropy: bool, entropy_grad: bool,
    ) -> list[tuple[torch.Tensor, torch.Tensor | None] | None]:
        """One forward of `model` over the rows of every non-empty batch, scored per batch; each row through the
        adapter that `rows` (`_joint_adapter_rows`) names for it (row slices), or, with `rows` None, every row through
        the model as it is."""
        agents = [a for a, batch in enumerate(batches) if batch is not None and len(batch) > 0]
        input_ids, attention_mask, position_ids = joint_model_inputs([batches[a] for a in agents])
        widths = [batches[a].completion_ids.size(1) for a in agents]
        self._joint_rows = rows  # for the recomputation of checkpointed layers (`_checkpoint_contexts`)
        head = self._chunked_head(model)
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}
        try:
            with nullcontext() if rows is None else sliced_adapter_rows(model, rows[0], training=model.training,
                                                                        plan=rows[1]):
                if head is not None:
                    out = self.forward_call(head[0], **inputs).last_hidden_state[:, -max(widths):]
                else:
                    out = self.forward_call(model, **inputs, logits_to_keep=max(widths)).logits
        finally:
            self._joint_rows = None
        results: list[tuple[torch.Tensor, torch.Tensor | None] | None] = [None] * len(batches)
        start = 0
        for a, width in zip(agents, widths, strict=True):
            stop = start + len(batches[a])
            if head is not None:
                results[a] = self._score_hidden(out[start:stop, :width], head, batches[a].completion_ids,
                                                compute_entropy, entropy_grad)
            else:
                results[a] = self._score(out[start:stop, :width], batches[a], compute_entropy, entropy_grad)
            start = stop
        return results

    @torch.no_grad()
    def reference_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the reference policy (adapter disabled, or the frozen copy)."""
        with self.acting(agent_index, reference=True) as model:
            return self._inference_logps(model, batch)

    @torch.no_grad()
    def policy_logps(self, agent_index: int, batch: AgentBatch) -> torch.Tensor:
        """Per-token log-probabilities under the current policy, without gradients."""
        return self._inference_logps(self._activate(agent_index), batch)

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
        if rows is not None and reference and any(self.ref_models[self.agent_model[a]] is not None
                                                  for a, b in enumerate(batches) if b is not None):
            rows = None  # frozen copies: one forward per agent
        if rows is None or any(b is not None and len(b) == 0 for b in batches):
            scored = self.reference_logps if reference else self.policy_logps
            return [None if b is None else scored(a, b) for a, b in enumerate(batches)]
        first = next(a for a, b in enumerate(batches) if b is not None)
        with self.acting(first, reference=reference) as model, no_autograd():
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
        inputs = sequence_model_inputs(query_responses, pad_token_id)
        with self.acting(agent_index, reference) as model:
            return self.forward_call(model, **inputs, return_dict=True).logits

    def response_logits(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                        pad_token_id: int, reference: bool = False) -> torch.Tensor:
        """The logits that score the response tokens of PPO's layout: those of `sequence_logits` at positions
        `context_length - 1` to the second to last (`sequence_logits(...)[:, context_length - 1 : -1]`).

        Only those are computed: the forward stops before the last token and the LM head runs over the response
        window alone (`logits_to_keep`, when the model takes it), unless dropout is active (`team.forward`).
        """
        with self.acting(agent_index, reference) as model:
            dropout = dropout_active(model)
            inputs, scored = response_layout(query_responses, context_length, pad_token_id, dropout)
            window = query_responses.size(1) - context_length
            if not dropout and takes_logits_to_keep(model) and window > 0:  # (`logits_to_keep=0` keeps them all)
                return self.forward_call(model, **inputs, logits_to_keep=window, return_dict=True).logits
            return self.forward_call(model, **inputs, return_dict=True).logits[:, scored]

    def response_logprobs(self, agent_index: int, query_responses: torch.Tensor, context_length: int,
                          pad_token_id: int, responses: torch.Tensor, temperature: float, reference: bool = False,
                          compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probabilities of PPO's `responses` (and, with `compute_entropy`, the detached entropy of every
        response position) under member `agent_index`'s policy or reference, the logits divided by `temperature`:
        `selective_log_softmax(response_logits(...) / temperature, responses)`, without the response logits where
        the model allows it (`head_path`: the LM head a chunk of positions at a time, in float32, as MAGRPO's
        forwards). Gradients flow for the policy.

        Example: `logps, entropy = team.response_logprobs(0, query_responses, context, pad, responses, 0.7 + 1e-7,
        compute_entropy=True)`
        """
        with self.acting(agent_index, reference) as model:
            head = self._chunked_head(model)
            if head is not None:  # the layout of `response_logits` (the same dropout draws)
                inputs, scored = response_layout(query_responses, context_length, pad_token_id, dropout_active(model))
                hidden = self.forward_call(head[0], **inputs).last_hidden_state[:, scored]
                return self._score_hidden(hidden, head, responses, compute_entropy, False, temperature)
        logits = self.response_logits(agent_index, query_responses, context_length, pad_token_id, reference)
        with logits_dtype_autocast(logits):
            logits = logits / temperature
            entropy = entropy_from_logits(logits.detach()) if compute_entropy else None
            return selective_log_softmax(logits, responses), entropy
